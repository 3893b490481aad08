/*
 * seek.c - SEEK_DATA / SEEK_HOLE on a sparse file.
 *
 * Usage: seek DIR
 *   Creates DIR/seek.<pid> with 4 KiB of data at 0 and at 1 MiB (size
 *   1 MiB + 4 KiB) and checks where SEEK_DATA and SEEK_HOLE land: the hole
 *   after the first block must start at 4096 .. 1 MiB (allocation granularity
 *   may round it up), the next data at 1 MiB at the latest, the implicit hole
 *   at EOF, and ENXIO at or past EOF. Prints "PASS ..." lines and "OK".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLK 4096
#define MiB (1 << 20)

static char path[4096];

static void failx(const char *fmt, long long a, long long b)
{
	printf("FAIL ");
	printf(fmt, a, b);
	printf("\n");
	unlink(path);
	exit(1);
}

static off_t xseek(int fd, off_t off, int whence, const char *name)
{
	off_t r = lseek(fd, off, whence);

	if (r < 0) {
		printf("FAIL lseek(%lld, %s): %s\n", (long long)off, name, strerror(errno));
		unlink(path);
		exit(1);
	}
	return r;
}

static void expect_enxio(int fd, off_t off, int whence, const char *name)
{
	off_t r = lseek(fd, off, whence);

	if (r >= 0 || errno != ENXIO) {
		printf("FAIL lseek(%lld, %s) = %lld (%s), want ENXIO\n", (long long)off, name,
		       (long long)r, r < 0 ? strerror(errno) : "success");
		unlink(path);
		exit(1);
	}
	printf("PASS lseek(%lld, %s) -> ENXIO\n", (long long)off, name);
}

int main(int argc, char *argv[])
{
	char buf[BLK];
	off_t size = MiB + BLK, r, hole;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/seek.%d", argv[1], (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
	if (fd < 0) {
		printf("FAIL create: %s\n", strerror(errno));
		return 1;
	}
	memset(buf, 'x', sizeof(buf));
	if (pwrite(fd, buf, BLK, 0) != BLK || pwrite(fd, buf, BLK, MiB) != BLK) {
		printf("FAIL pwrite: %s\n", strerror(errno));
		unlink(path);
		return 1;
	}
	if (fsync(fd) < 0) {
		printf("FAIL fsync: %s\n", strerror(errno));
		unlink(path);
		return 1;
	}

	if ((r = xseek(fd, 0, SEEK_DATA, "SEEK_DATA")) != 0)
		failx("SEEK_DATA(0) = %lld, want %lld", r, 0);
	printf("PASS SEEK_DATA(0) = 0\n");

	hole = xseek(fd, 0, SEEK_HOLE, "SEEK_HOLE");
	if (hole < BLK || hole > MiB)
		failx("SEEK_HOLE(0) = %lld, want 4096..1048576 (a hole after the first block)",
		      hole, 0);
	printf("PASS SEEK_HOLE(0) = %lld%s\n", (long long)hole, hole == BLK ? " (exact)" : "");

	r = xseek(fd, BLK, SEEK_DATA, "SEEK_DATA");
	if (r < hole || r > MiB)
		failx("SEEK_DATA(4096) = %lld, want %lld..1048576", r, hole);
	printf("PASS SEEK_DATA(4096) = %lld%s\n", (long long)r, r == MiB ? " (exact)" : "");

	if ((r = xseek(fd, MiB + 100, SEEK_DATA, "SEEK_DATA")) != MiB + 100)
		failx("SEEK_DATA(1M+100) = %lld, want %lld", r, MiB + 100);
	printf("PASS SEEK_DATA inside data returns the offset itself\n");

	if ((r = xseek(fd, MiB, SEEK_HOLE, "SEEK_HOLE")) != size)
		failx("SEEK_HOLE(1M) = %lld, want EOF %lld", r, size);
	printf("PASS SEEK_HOLE(1M) = EOF (%lld)\n", (long long)size);

	if ((r = xseek(fd, size - 1, SEEK_HOLE, "SEEK_HOLE")) != size)
		failx("SEEK_HOLE(EOF-1) = %lld, want EOF %lld", r, size);
	printf("PASS SEEK_HOLE(EOF-1) = EOF\n");

	expect_enxio(fd, size, SEEK_DATA, "SEEK_DATA");
	expect_enxio(fd, size, SEEK_HOLE, "SEEK_HOLE");
	expect_enxio(fd, size + MiB, SEEK_DATA, "SEEK_DATA");
	expect_enxio(fd, size + MiB, SEEK_HOLE, "SEEK_HOLE");

	/* A file that ends in a hole: the last data is followed by EOF hole. */
	if (ftruncate(fd, 4 * MiB) < 0) {
		printf("FAIL ftruncate: %s\n", strerror(errno));
		unlink(path);
		return 1;
	}
	if ((r = xseek(fd, MiB, SEEK_HOLE, "SEEK_HOLE")) < MiB + BLK || r > 4 * MiB)
		failx("SEEK_HOLE(1M) after extending = %lld, want %lld..4M", r, MiB + BLK);
	expect_enxio(fd, 2 * MiB, SEEK_DATA, "SEEK_DATA (trailing hole)");
	printf("PASS trailing hole after ftruncate\n");

	close(fd);
	unlink(path);
	printf("OK\n");
	return 0;
}
