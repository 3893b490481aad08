/*
 * fallocate.c - fallocate modes.
 *
 * Usage: fallocate DIR
 *   Creates DIR/fallocate.<pid> and checks: mode 0 extends the size and
 *   allocates; KEEP_SIZE allocates past EOF without changing the size;
 *   PUNCH_HOLE|KEEP_SIZE zeroes a range and frees its blocks; ZERO_RANGE
 *   zeroes a range and keeps data around it; blocks preallocated past EOF
 *   are freed by a truncate to the same size and by PUNCH_HOLE past EOF.
 *   Prints "PASS ..." lines and "OK"; exit 1 on the first failure.
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
#define KiB 1024

static char path[4096];
static int fd;

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

static struct stat xstat(void)
{
	struct stat st;

	if (fsync(fd) < 0)
		fail("fsync");
	if (fstat(fd, &st) < 0)
		fail("fstat");
	return st;
}

/* Checks that [off, off+len) reads as byte c. */
static void expect_bytes(off_t off, size_t len, unsigned char c, const char *what)
{
	static unsigned char buf[MiB];
	ssize_t n;

	while (len > 0) {
		size_t chunk = len < sizeof(buf) ? len : sizeof(buf);

		n = pread(fd, buf, chunk, off);
		if (n < 0)
			fail(what);
		if ((size_t)n != chunk) {
			printf("FAIL %s: short read at %lld\n", what, (long long)off);
			unlink(path);
			exit(1);
		}
		for (size_t i = 0; i < chunk; i++)
			if (buf[i] != c) {
				printf("FAIL %s: byte at %lld is %#x, want %#x\n",
				       what, (long long)off + (long long)i, buf[i], c);
				unlink(path);
				exit(1);
			}
		off += chunk;
		len -= chunk;
	}
}

static void write_bytes(off_t off, size_t len, unsigned char c)
{
	static unsigned char buf[MiB];

	memset(buf, c, sizeof(buf));
	while (len > 0) {
		size_t chunk = len < sizeof(buf) ? len : sizeof(buf);

		if (pwrite(fd, buf, chunk, off) != (ssize_t)chunk)
			fail("pwrite");
		off += chunk;
		len -= chunk;
	}
}

int main(int argc, char *argv[])
{
	struct stat st, st2;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/fallocate.%d", argv[1], (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		fail("create");

	/* Default mode: size grows, blocks are allocated, content is zero. */
	if (fallocate(fd, 0, 0, MiB) < 0)
		fail("fallocate(0, 0, 1M)");
	st = xstat();
	if (st.st_size != MiB)
		failx("fallocate mode 0 did not extend the size to 1 MiB");
	if (st.st_blocks < MiB / 512)
		failx("fallocate mode 0 did not allocate 1 MiB (st_blocks too small)");
	expect_bytes(0, MiB, 0, "preallocated range reads zero");
	printf("PASS mode 0: size %lld, st_blocks %lld, reads zero\n",
	       (long long)st.st_size, (long long)st.st_blocks);

	/* KEEP_SIZE past EOF: size unchanged, blocks grow. */
	if (fallocate(fd, FALLOC_FL_KEEP_SIZE, MiB, MiB) < 0)
		fail("fallocate(KEEP_SIZE, 1M, 1M)");
	st2 = xstat();
	if (st2.st_size != MiB)
		failx("KEEP_SIZE changed the size");
	if (st2.st_blocks < st.st_blocks + MiB / 512)
		failx("KEEP_SIZE did not allocate (st_blocks did not grow by 1 MiB)");
	printf("PASS KEEP_SIZE: size %lld, st_blocks %lld -> %lld\n", (long long)st2.st_size,
	       (long long)st.st_blocks, (long long)st2.st_blocks);
	/* Extending over the preallocated tail must read zeros, not old data. */
	if (ftruncate(fd, 2 * MiB) < 0)
		fail("ftruncate 2M");
	expect_bytes(MiB, MiB, 0, "KEEP_SIZE range after extending");
	printf("PASS KEEP_SIZE range reads zero after extending the size\n");

	/* PUNCH_HOLE|KEEP_SIZE on written data. */
	write_bytes(0, 2 * MiB, 0xab);
	st = xstat();
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 256 * KiB, 256 * KiB) < 0)
		fail("fallocate(PUNCH_HOLE|KEEP_SIZE, 256K, 256K)");
	st2 = xstat();
	if (st2.st_size != 2 * MiB)
		failx("PUNCH_HOLE changed the size");
	expect_bytes(0, 256 * KiB, 0xab, "data before the hole");
	expect_bytes(256 * KiB, 256 * KiB, 0, "punched range reads zero");
	expect_bytes(512 * KiB, 2 * MiB - 512 * KiB, 0xab, "data after the hole");
	if (st2.st_blocks >= st.st_blocks)
		failx("PUNCH_HOLE did not free blocks (st_blocks did not shrink)");
	printf("PASS PUNCH_HOLE|KEEP_SIZE: zeroed, st_blocks %lld -> %lld\n",
	       (long long)st.st_blocks, (long long)st2.st_blocks);

	/* Punching an unaligned range zeroes exactly those bytes. */
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 3000) < 0)
		fail("fallocate(PUNCH_HOLE|KEEP_SIZE, 1000, 3000)");
	expect_bytes(0, 1000, 0xab, "data before unaligned hole");
	expect_bytes(1000, 3000, 0, "unaligned punched range");
	expect_bytes(4000, 256 * KiB - 4000, 0xab, "data after unaligned hole");
	printf("PASS unaligned PUNCH_HOLE zeroes exactly its bytes\n");

	/* ZERO_RANGE. */
	write_bytes(0, 2 * MiB, 0xcd);
	if (fallocate(fd, FALLOC_FL_ZERO_RANGE, 128 * KiB, 64 * KiB + 100) < 0)
		fail("fallocate(ZERO_RANGE, 128K, 64K+100)");
	st2 = xstat();
	if (st2.st_size != 2 * MiB)
		failx("ZERO_RANGE inside the file changed the size");
	expect_bytes(0, 128 * KiB, 0xcd, "data before zeroed range");
	expect_bytes(128 * KiB, 64 * KiB + 100, 0, "zeroed range");
	expect_bytes(192 * KiB + 100, 2 * MiB - 192 * KiB - 100, 0xcd, "data after zeroed range");
	printf("PASS ZERO_RANGE zeroes the range, keeps the rest\n");

	/* ZERO_RANGE past EOF without KEEP_SIZE extends the file. */
	if (fallocate(fd, FALLOC_FL_ZERO_RANGE, 2 * MiB, MiB) < 0)
		fail("fallocate(ZERO_RANGE, 2M, 1M)");
	st2 = xstat();
	if (st2.st_size != 3 * MiB)
		failx("ZERO_RANGE past EOF did not extend the size to 3 MiB");
	expect_bytes(2 * MiB, MiB, 0, "ZERO_RANGE past EOF");
	printf("PASS ZERO_RANGE past EOF extends to %lld\n", (long long)st2.st_size);

	/*
	 * Blocks preallocated past EOF go with a truncate to the same size (as
	 * on ext4 and XFS) and with a hole punched past EOF (as on XFS).
	 * RocksDB preallocates each table 10% beyond its target size with
	 * KEEP_SIZE and gives the tail back so when it closes the file; kept,
	 * the tails fill a drive with space no file can use.
	 */
	if (ftruncate(fd, 0) < 0)
		fail("ftruncate 0");
	if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 576 * KiB) < 0)
		fail("fallocate(KEEP_SIZE, 0, 576K)");
	write_bytes(0, 520 * KiB + 100, 0x5a);
	/* Synced first, as RocksDB does: with the kernel's writeback cache an
	 * unsynced file's size has not reached the filesystem yet, and the
	 * truncate would extend it there. */
	xstat();
	if (ftruncate(fd, 520 * KiB + 100) < 0)
		fail("ftruncate to the same size");
	st = xstat();
	if (st.st_size != 520 * KiB + 100)
		failx("ftruncate to the same size changed the size");
	if (st.st_blocks > 524 * KiB / 512) {
		printf("FAIL ftruncate to the same size kept the blocks preallocated past EOF: st_blocks %lld, want <= %d\n",
		       (long long)st.st_blocks, 524 * KiB / 512);
		unlink(path);
		exit(1);
	}
	expect_bytes(0, 520 * KiB + 100, 0x5a, "data after a truncate to the same size");
	printf("PASS ftruncate to the same size frees preallocation past EOF: st_blocks %lld\n",
	       (long long)st.st_blocks);
	if (fallocate(fd, FALLOC_FL_KEEP_SIZE, MiB, 256 * KiB) < 0)
		fail("fallocate(KEEP_SIZE, 1M, 256K)");
	st = xstat();
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 520 * KiB + 100,
		      MiB + 256 * KiB - (520 * KiB + 100)) < 0)
		fail("fallocate(PUNCH_HOLE|KEEP_SIZE) past EOF");
	st2 = xstat();
	if (st2.st_size != st.st_size)
		failx("PUNCH_HOLE past EOF changed the size");
	if (st2.st_blocks > st.st_blocks - 256 * KiB / 512) {
		printf("FAIL PUNCH_HOLE past EOF kept its blocks: st_blocks %lld -> %lld\n",
		       (long long)st.st_blocks, (long long)st2.st_blocks);
		unlink(path);
		exit(1);
	}
	expect_bytes(0, 520 * KiB + 100, 0x5a, "data after a hole punched past EOF");
	printf("PASS PUNCH_HOLE past EOF frees its blocks: st_blocks %lld -> %lld\n",
	       (long long)st.st_blocks, (long long)st2.st_blocks);

	close(fd);
	unlink(path);
	printf("OK\n");
	return 0;
}
