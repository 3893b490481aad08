/*
 * odirect.c - O_DIRECT aligned writes and reads.
 *
 * Usage: odirect DIR
 *   Creates DIR/odirect.<pid>, writes 4 KiB blocks and a 1 MiB run with
 *   O_DIRECT from posix_memalign'd buffers, reads them back with O_DIRECT
 *   and through a buffered descriptor, and verifies every byte. An unaligned
 *   O_DIRECT write may fail with EINVAL or succeed; the outcome is only
 *   reported. Prints "PASS ..." lines and "OK"; exit 1 on any failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLK 4096
#define NBLK 16
#define BIG (1 << 20)

static char path[4096];

static void fail(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	unlink(path);
	exit(1);
}

static void failx(const char *msg)
{
	printf("FAIL %s\n", msg);
	unlink(path);
	exit(1);
}

/* Distinct, position-dependent content so misplaced blocks are caught. */
static unsigned char pattern(long long off)
{
	return (unsigned char)((off * 7 + off / BLK * 13) & 0xff);
}

static void fill(unsigned char *b, long long off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pattern(off + (long long)i);
}

static int check(const unsigned char *b, long long off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != pattern(off + (long long)i)) {
			printf("FAIL mismatch at offset %lld: got %#x want %#x\n",
			       off + (long long)i, b[i], pattern(off + (long long)i));
			return -1;
		}
	return 0;
}

int main(int argc, char *argv[])
{
	unsigned char *buf;
	struct stat st;
	ssize_t n;
	int fd, bfd;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/odirect.%d", argv[1], (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0644);
	if (fd < 0)
		fail("open O_DIRECT");
	if ((errno = posix_memalign((void **)&buf, BLK, BIG)) != 0)
		fail("posix_memalign");

	/* Blocks written out of order, so each lands in a hole. */
	for (int i = NBLK - 1; i >= 0; i -= 2) {
		fill(buf, (long long)i * BLK, BLK);
		if ((n = pwrite(fd, buf, BLK, (off_t)i * BLK)) != BLK)
			n < 0 ? fail("O_DIRECT pwrite 4k") : failx("O_DIRECT pwrite 4k: short write");
	}
	for (int i = 0; i < NBLK; i += 2) {
		fill(buf, (long long)i * BLK, BLK);
		if ((n = pwrite(fd, buf, BLK, (off_t)i * BLK)) != BLK)
			n < 0 ? fail("O_DIRECT pwrite 4k") : failx("O_DIRECT pwrite 4k: short write");
	}
	printf("PASS %d aligned 4k O_DIRECT writes\n", NBLK);

	fill(buf, NBLK * BLK, BIG);
	if ((n = pwrite(fd, buf, BIG, NBLK * BLK)) != BIG)
		n < 0 ? fail("O_DIRECT pwrite 1M") : failx("O_DIRECT pwrite 1M: short write");
	printf("PASS aligned 1 MiB O_DIRECT write\n");
	if (fsync(fd) < 0)
		fail("fsync");

	for (int i = 0; i < NBLK; i++) {
		memset(buf, 0, BLK);
		if ((n = pread(fd, buf, BLK, (off_t)i * BLK)) != BLK)
			n < 0 ? fail("O_DIRECT pread 4k") : failx("O_DIRECT pread 4k: short read");
		if (check(buf, (long long)i * BLK, BLK) < 0)
			failx("O_DIRECT 4k read back");
	}
	printf("PASS aligned 4k O_DIRECT reads verified\n");
	memset(buf, 0, BIG);
	if ((n = pread(fd, buf, BIG, NBLK * BLK)) != BIG)
		n < 0 ? fail("O_DIRECT pread 1M") : failx("O_DIRECT pread 1M: short read");
	if (check(buf, NBLK * BLK, BIG) < 0)
		failx("O_DIRECT 1M read back");
	printf("PASS aligned 1 MiB O_DIRECT read verified\n");

	/* A direct read at EOF returns 0, past the last block a short count. */
	if ((n = pread(fd, buf, BLK, NBLK * BLK + BIG)) != 0)
		n < 0 ? fail("O_DIRECT pread at EOF") : failx("O_DIRECT pread at EOF returned data");
	printf("PASS O_DIRECT read at EOF returns 0\n");

	/* Buffered view must agree with what went through O_DIRECT. */
	bfd = open(path, O_RDONLY);
	if (bfd < 0)
		fail("open buffered");
	memset(buf, 0, BIG);
	if ((n = pread(bfd, buf, BIG, 0)) != BIG)
		n < 0 ? fail("buffered pread") : failx("buffered pread: short read");
	if (check(buf, 0, BIG) < 0)
		failx("buffered read of O_DIRECT data");
	printf("PASS buffered read sees O_DIRECT data\n");
	if (fstat(fd, &st) < 0)
		fail("fstat");
	if (st.st_size != NBLK * BLK + BIG) {
		printf("FAIL size %lld, want %d\n", (long long)st.st_size, NBLK * BLK + BIG);
		unlink(path);
		return 1;
	}
	printf("PASS size %lld\n", (long long)st.st_size);

	/* Unaligned buffer and offset: either answer is legal, report it. */
	memset(buf, 0x5a, BLK + 1);
	n = pwrite(fd, buf + 1, 100, 1);
	if (n < 0 && errno == EINVAL)
		printf("PASS unaligned O_DIRECT write -> EINVAL (alignment enforced)\n");
	else if (n < 0)
		fail("unaligned O_DIRECT write (unexpected error)");
	else {
		unsigned char c[101];

		if (pread(bfd, c, sizeof(c), 0) != (ssize_t)sizeof(c))
			fail("pread after unaligned write");
		if (c[0] != pattern(0) || memchr(c + 1, 0x5a, 100) != c + 1 || c[100] != 0x5a)
			failx("unaligned O_DIRECT write accepted but content wrong");
		printf("PASS unaligned O_DIRECT write accepted (%zd bytes), content verified\n", n);
	}

	close(bfd);
	close(fd);
	free(buf);
	unlink(path);
	printf("OK\n");
	return 0;
}
