/*
 * append.c - O_APPEND from two descriptors.
 *
 * Usage: append DIR
 *   Creates DIR/append.<pid>, opens it twice with O_WRONLY|O_APPEND and
 *   alternates writes of different sizes between the two (also after seeking
 *   one to 0, which O_APPEND must ignore). Every write must land at the
 *   current end: the final size is the sum of all writes and the content is
 *   the exact interleaving. Prints "PASS ..." lines and "OK"; exit 1 on
 *   the first failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROUNDS 64
#define LEN_A 100
#define LEN_B 4133

static char path[4096];
static unsigned char expect[ROUNDS * (LEN_A + LEN_B)], got[ROUNDS * (LEN_A + LEN_B) + 1];

static int fail(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	unlink(path);
	return 1;
}

int main(int argc, char *argv[])
{
	unsigned char a[LEN_A], b[LEN_B];
	size_t total = 0;
	struct stat st;
	ssize_t n;
	int fa, fb, fr;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/append.%d", argv[1], (int)getpid());
	fa = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND, 0644);
	if (fa < 0)
		return fail("create");
	fb = open(path, O_WRONLY | O_APPEND);
	if (fb < 0)
		return fail("second open");

	for (int r = 0; r < ROUNDS; r++) {
		memset(a, 'a' + r % 26, sizeof(a));
		memset(b, 'A' + r % 26, sizeof(b));
		if (r == ROUNDS / 2 && lseek(fa, 0, SEEK_SET) < 0)
			return fail("lseek");
		if (write(fa, a, sizeof(a)) != (ssize_t)sizeof(a))
			return fail("write fd A");
		memcpy(expect + total, a, sizeof(a));
		total += sizeof(a);
		if (write(fb, b, sizeof(b)) != (ssize_t)sizeof(b))
			return fail("write fd B");
		memcpy(expect + total, b, sizeof(b));
		total += sizeof(b);
		/* The descriptor's position follows the end after each append. */
		if (lseek(fb, 0, SEEK_CUR) != (off_t)total) {
			printf("FAIL fd B position %lld after append, want %zu\n",
			       (long long)lseek(fb, 0, SEEK_CUR), total);
			unlink(path);
			return 1;
		}
	}
	printf("PASS %d interleaved appends from two descriptors\n", 2 * ROUNDS);

	if (fstat(fa, &st) < 0)
		return fail("fstat");
	if ((size_t)st.st_size != total) {
		printf("FAIL size %lld, want %zu (sum of all writes)\n", (long long)st.st_size, total);
		unlink(path);
		return 1;
	}
	printf("PASS size %lld = sum of writes\n", (long long)st.st_size);

	fr = open(path, O_RDONLY);
	if (fr < 0)
		return fail("open for reading");
	n = pread(fr, got, sizeof(got), 0);
	if (n < 0)
		return fail("pread");
	if ((size_t)n != total || memcmp(expect, got, total) != 0) {
		size_t i = 0;

		while (i < total && i < (size_t)n && expect[i] == got[i])
			i++;
		printf("FAIL content differs from the interleaving at byte %zu (read %zd of %zu)\n",
		       i, n, total);
		unlink(path);
		return 1;
	}
	printf("PASS content is the exact interleaving\n");

	close(fr);
	close(fa);
	close(fb);
	unlink(path);
	printf("OK\n");
	return 0;
}
