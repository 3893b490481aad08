/*
 * rename_exchange.c - renameat2 flags.
 *
 * Usage: rename_exchange DIR
 *   Works in a fresh DIR/rename_exchange.<pid>/ subdirectory: RENAME_EXCHANGE
 *   swaps two files and a file with a directory (names keep their inodes'
 *   content and types), RENAME_NOREPLACE fails with EEXIST onto an existing
 *   name and works onto a free one, RENAME_EXCHANGE onto a missing name fails
 *   with ENOENT. Uses syscall(SYS_renameat2) so older C libraries work.
 *   Prints "PASS ..." lines and "OK"; exit 1 on the first failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static char base[4096];

static void cleanup(void)
{
	const char *names[] = { "a", "b", "d/inner", "a/inner", "d", "a", "c", NULL };
	char p[4200];

	for (int i = 0; names[i]; i++) {
		snprintf(p, sizeof(p), "%s/%s", base, names[i]);
		if (unlink(p) < 0)
			rmdir(p);
	}
	rmdir(base);
}

static void fail(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	cleanup();
	exit(1);
}

static void failx(const char *what)
{
	printf("FAIL %s\n", what);
	cleanup();
	exit(1);
}

static const char *at(const char *name)
{
	static char bufs[4][4200];
	static int next;
	char *p = bufs[next++ % 4];

	snprintf(p, sizeof(bufs[0]), "%s/%s", base, name);
	return p;
}

static long rename2(const char *from, const char *to, unsigned int flags)
{
	return syscall(SYS_renameat2, AT_FDCWD, at(from), AT_FDCWD, at(to), flags);
}

static void put(const char *name, const char *content)
{
	int fd = open(at(name), O_WRONLY | O_CREAT | O_EXCL, 0644);

	if (fd < 0)
		fail(name);
	if (write(fd, content, strlen(content)) != (ssize_t)strlen(content))
		fail("write");
	close(fd);
}

static void expect_content(const char *name, const char *want)
{
	char buf[64];
	ssize_t n;
	int fd = open(at(name), O_RDONLY);

	if (fd < 0)
		fail(name);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		fail("read");
	buf[n] = 0;
	if (strcmp(buf, want) != 0) {
		printf("FAIL %s contains \"%s\", want \"%s\"\n", name, buf, want);
		cleanup();
		exit(1);
	}
}

static struct stat xlstat(const char *name)
{
	struct stat st;

	if (lstat(at(name), &st) < 0)
		fail(name);
	return st;
}

int main(int argc, char *argv[])
{
	struct stat a0, b0, a1, b1, d0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(base, sizeof(base), "%s/rename_exchange.%d", argv[1], (int)getpid());
	if (mkdir(base, 0755) < 0) {
		printf("FAIL mkdir %s: %s\n", base, strerror(errno));
		return 1;
	}

	/* Two files. */
	put("a", "AAAA");
	put("b", "BB");
	a0 = xlstat("a");
	b0 = xlstat("b");
	if (rename2("a", "b", RENAME_EXCHANGE) < 0)
		fail("renameat2(a, b, RENAME_EXCHANGE)");
	expect_content("a", "BB");
	expect_content("b", "AAAA");
	a1 = xlstat("a");
	b1 = xlstat("b");
	if (a1.st_ino != b0.st_ino || b1.st_ino != a0.st_ino)
		failx("RENAME_EXCHANGE did not swap the inodes");
	if (a1.st_size != 2 || b1.st_size != 4)
		failx("sizes not swapped with the names");
	printf("PASS RENAME_EXCHANGE swaps two files\n");

	/* A file and a directory. */
	if (mkdir(at("d"), 0755) < 0)
		fail("mkdir d");
	put("d/inner", "I");
	d0 = xlstat("d");
	a0 = xlstat("a");
	if (rename2("a", "d", RENAME_EXCHANGE) < 0)
		fail("renameat2(a, d, RENAME_EXCHANGE)");
	a1 = xlstat("a");
	b1 = xlstat("d");
	if (!S_ISDIR(a1.st_mode) || !S_ISREG(b1.st_mode))
		failx("RENAME_EXCHANGE file<->dir: types not swapped");
	if (a1.st_ino != d0.st_ino || b1.st_ino != a0.st_ino)
		failx("RENAME_EXCHANGE file<->dir: inodes not swapped");
	expect_content("a/inner", "I");
	expect_content("d", "BB");
	if (access(at("d/inner"), F_OK) == 0 || errno != ENOTDIR)
		failx("old directory path still resolves");
	printf("PASS RENAME_EXCHANGE swaps a file and a directory\n");

	/* Swap back so the directory is "d" again, then NOREPLACE. */
	if (rename2("a", "d", RENAME_EXCHANGE) < 0)
		fail("renameat2(a, d, RENAME_EXCHANGE) back");
	expect_content("d/inner", "I");
	expect_content("a", "BB");

	errno = 0;
	if (rename2("a", "b", RENAME_NOREPLACE) == 0)
		failx("RENAME_NOREPLACE onto an existing file succeeded");
	if (errno != EEXIST)
		fail("RENAME_NOREPLACE onto an existing file: want EEXIST");
	expect_content("a", "BB");
	expect_content("b", "AAAA");
	printf("PASS RENAME_NOREPLACE onto existing file -> EEXIST, both untouched\n");

	errno = 0;
	if (rename2("a", "d", RENAME_NOREPLACE) == 0 || errno != EEXIST)
		fail("RENAME_NOREPLACE onto an existing directory: want EEXIST");
	printf("PASS RENAME_NOREPLACE onto existing directory -> EEXIST\n");

	if (rename2("a", "c", RENAME_NOREPLACE) < 0)
		fail("renameat2(a, c, RENAME_NOREPLACE) onto a free name");
	expect_content("c", "BB");
	if (access(at("a"), F_OK) == 0 || errno != ENOENT)
		failx("source still exists after RENAME_NOREPLACE");
	printf("PASS RENAME_NOREPLACE onto a free name renames\n");

	errno = 0;
	if (rename2("c", "a", RENAME_EXCHANGE) == 0 || errno != ENOENT)
		fail("RENAME_EXCHANGE with a missing target: want ENOENT");
	expect_content("c", "BB");
	printf("PASS RENAME_EXCHANGE with a missing target -> ENOENT\n");

	errno = 0;
	if (rename2("c", "b", RENAME_EXCHANGE | RENAME_NOREPLACE) == 0 || errno != EINVAL)
		fail("RENAME_EXCHANGE|RENAME_NOREPLACE: want EINVAL");
	printf("PASS RENAME_EXCHANGE|RENAME_NOREPLACE -> EINVAL\n");

	cleanup();
	printf("OK\n");
	return 0;
}
