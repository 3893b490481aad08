/*
 * unlinked.c - an open file survives unlink.
 *
 * Usage: unlinked DIR
 *   Creates DIR/unlinked.<pid>, writes 1 MiB, unlinks it, then checks the
 *   name is gone, fstat reports nlink 0 and the full size, the data reads
 *   back through the descriptor, and writing/extending still works before
 *   close. Prints "PASS ..." lines and "OK"; exit 1 on the first failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (1 << 20)

static unsigned char buf[MiB], got[MiB];

static int fail(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char *argv[])
{
	char path[4096];
	struct stat st;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/unlinked.%d", argv[1], (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		return fail("create");
	for (int i = 0; i < MiB; i++)
		buf[i] = (unsigned char)(i * 31 + i / 4096);
	if (pwrite(fd, buf, MiB, 0) != MiB) {
		unlink(path);
		return fail("pwrite 1 MiB");
	}
	if (unlink(path) < 0)
		return fail("unlink");
	if (access(path, F_OK) == 0 || errno != ENOENT)
		return fail("name still visible after unlink");
	printf("PASS unlinked, name gone\n");

	if (fstat(fd, &st) < 0)
		return fail("fstat");
	if (st.st_nlink != 0) {
		printf("FAIL fstat nlink = %lu, want 0\n", (unsigned long)st.st_nlink);
		return 1;
	}
	if (st.st_size != MiB) {
		printf("FAIL fstat size = %lld, want %d\n", (long long)st.st_size, MiB);
		return 1;
	}
	printf("PASS fstat: nlink 0, size %lld\n", (long long)st.st_size);

	if (pread(fd, got, MiB, 0) != MiB)
		return fail("pread after unlink");
	if (memcmp(buf, got, MiB) != 0) {
		printf("FAIL data read after unlink differs\n");
		return 1;
	}
	printf("PASS 1 MiB reads back after unlink\n");

	/* The orphan is still a full file: it can grow and be read. */
	if (pwrite(fd, buf, 4096, MiB) != 4096)
		return fail("pwrite after unlink");
	if (fsync(fd) < 0)
		return fail("fsync after unlink");
	if (pread(fd, got, 4096, MiB) != 4096 || memcmp(buf, got, 4096) != 0) {
		printf("FAIL data written after unlink does not read back\n");
		return 1;
	}
	if (fstat(fd, &st) < 0 || st.st_size != MiB + 4096) {
		printf("FAIL size after write to unlinked file = %lld\n", (long long)st.st_size);
		return 1;
	}
	printf("PASS write, fsync and read after unlink\n");

	if (close(fd) < 0)
		return fail("close");
	printf("PASS close\n");
	printf("OK\n");
	return 0;
}
