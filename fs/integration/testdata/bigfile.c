/*
 * bigfile.c - offsets beyond 4 GiB.
 *
 * Usage: bigfile DIR
 *   Creates DIR/bigfile.<pid>, writes 1 MiB at 5 GiB and 8 KiB straddling
 *   the 4 GiB boundary, reads both back, checks the size (> 4 GiB) and that
 *   the untouched range in between reads as zeros (a sparse hole, so little
 *   space is used). Catches 32-bit offset truncation anywhere in the path.
 *   Prints "PASS ..." lines and "OK"; exit 1 on the first failure.
 */
#define _GNU_SOURCE
#define _FILE_OFFSET_BITS 64
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (1LL << 20)
#define GiB (1LL << 30)

static unsigned char buf[MiB], got[MiB];
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
	const off_t off5 = 5 * GiB, off4 = 4 * GiB - 4096;
	struct stat st;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/bigfile.%d", argv[1], (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		return fail("create");
	for (long long i = 0; i < MiB; i++)
		buf[i] = (unsigned char)(i * 17 + i / 4096 + 1);

	if (pwrite(fd, buf, MiB, off5) != MiB)
		return fail("pwrite 1 MiB at 5 GiB");
	if (pwrite(fd, buf + 12345, 8192, off4) != 8192)
		return fail("pwrite 8 KiB across 4 GiB");
	if (fsync(fd) < 0)
		return fail("fsync");
	printf("PASS wrote at 5 GiB and across 4 GiB\n");

	if (fstat(fd, &st) < 0)
		return fail("fstat");
	if (st.st_size != off5 + MiB)
		return failx("size is not 5 GiB + 1 MiB");
	printf("PASS size %lld (> 4 GiB)\n", (long long)st.st_size);

	if (pread(fd, got, MiB, off5) != MiB)
		return fail("pread at 5 GiB");
	if (memcmp(buf, got, MiB) != 0)
		return failx("data at 5 GiB differs");
	if (pread(fd, got, 8192, off4) != 8192)
		return fail("pread across 4 GiB");
	if (memcmp(buf + 12345, got, 8192) != 0)
		return failx("data across 4 GiB differs");
	printf("PASS data at 5 GiB and across 4 GiB reads back\n");

	/* Offset 5 GiB truncated to 32 bits is 1 GiB: it must still be a hole. */
	if (pread(fd, got, MiB, 1 * GiB) != MiB)
		return fail("pread at 1 GiB");
	for (long long i = 0; i < MiB; i++)
		if (got[i] != 0)
			return failx("data appeared at 1 GiB (offset truncated to 32 bits?)");
	if (pread(fd, got, 4096, 0) != 4096)
		return fail("pread at 0");
	for (int i = 0; i < 4096; i++)
		if (got[i] != 0)
			return failx("data appeared at offset 0 (offset truncated?)");
	printf("PASS holes below 4 GiB read as zeros\n");

	if (pread(fd, got, MiB, off5 + MiB) != 0)
		return failx("read at EOF returned data");
	printf("PASS read at EOF returns 0\n");

	if (st.st_blocks * 512LL > 64 * MiB)
		printf("INFO st_blocks %lld: file is not sparse\n", (long long)st.st_blocks);

	close(fd);
	unlink(path);
	printf("OK\n");
	return 0;
}
