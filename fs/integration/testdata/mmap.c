/*
 * mmap.c - shared writable mappings.
 *
 * Usage: mmap DIR
 *   Creates DIR/mmap.<pid> of 256 KiB, writes through a MAP_SHARED mapping,
 *   msync(MS_SYNC)s, and checks the bytes with pread on the same and on a
 *   fresh descriptor; then pwrites and checks the mapping sees the change.
 *   Prints "PASS ..." lines and "OK"; exit 1 on the first failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LEN (256 * 1024)

static unsigned char want[LEN], got[LEN];
static char path[4096];

static int fail(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	unlink(path);
	return 1;
}

static int failx(const char *what)
{
	printf("FAIL %s\n", what);
	unlink(path);
	return 1;
}

int main(int argc, char *argv[])
{
	unsigned char *m;
	struct stat st;
	int fd, fd2;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/mmap.%d", argv[1], (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		return fail("create");
	if (ftruncate(fd, LEN) < 0)
		return fail("ftruncate");
	m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return fail("mmap MAP_SHARED");
	for (int i = 0; i < LEN; i++)
		want[i] = (unsigned char)(i * 13 + i / 4096 + 3);
	/* Write every page, but out of order, through the mapping. */
	for (int p = LEN / 4096 - 1; p >= 0; p--)
		memcpy(m + p * 4096, want + p * 4096, 4096);
	if (msync(m, LEN, MS_SYNC) < 0)
		return fail("msync");
	printf("PASS wrote %d bytes through MAP_SHARED, msync\n", LEN);

	if (pread(fd, got, LEN, 0) != LEN)
		return fail("pread");
	if (memcmp(want, got, LEN) != 0)
		return failx("pread after msync differs from what was written through the mapping");
	fd2 = open(path, O_RDONLY);
	if (fd2 < 0)
		return fail("reopen");
	memset(got, 0, LEN);
	if (pread(fd2, got, LEN, 0) != LEN)
		return fail("pread on fresh descriptor");
	if (memcmp(want, got, LEN) != 0)
		return failx("fresh descriptor reads different data");
	close(fd2);
	printf("PASS pread sees mapped writes\n");

	if (fstat(fd, &st) < 0)
		return fail("fstat");
	if (st.st_size != LEN)
		return failx("size changed by mapped writes");

	/* The other direction: write(2) shows up in the mapping. */
	memset(want + 8192, 0x77, 100);
	if (pwrite(fd, want + 8192, 100, 8192) != 100)
		return fail("pwrite");
	if (memcmp(m + 8192, want + 8192, 100) != 0)
		return failx("mapping does not see pwrite");
	printf("PASS mapping sees pwrite\n");

	if (munmap(m, LEN) < 0)
		return fail("munmap");
	if (fsync(fd) < 0)
		return fail("fsync");
	if (pread(fd, got, LEN, 0) != LEN || memcmp(want, got, LEN) != 0)
		return failx("data differs after munmap");
	printf("PASS data intact after munmap\n");

	close(fd);
	unlink(path);
	printf("OK\n");
	return 0;
}
