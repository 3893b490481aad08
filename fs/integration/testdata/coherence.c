/*
 * coherence.c - buffered, O_DIRECT and mmap views of one file agree.
 *
 * Usage: coherence DIR
 *   With the FUSE writeback cache, buffered and mmap writes sit dirty in the
 *   page cache while O_DIRECT goes straight to the daemon. Every view must
 *   still see the last write, whichever path made it:
 *   1. buffered pwrite (not synced), then O_DIRECT pread sees it;
 *   2. O_DIRECT pwrite over cached pages, then buffered pread and the
 *      mapping see it;
 *   3. a store through MAP_SHARED (no msync), then O_DIRECT pread sees it;
 *   4. buffered pwrite past EOF grows st_size at once, and an O_DIRECT read
 *      of the whole file sees the tail;
 *   5. after close and a fresh open, every byte is as the last writer left it.
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

#define MB (1024 * 1024)
#define LEN (2 * MB)

static unsigned char *want;
static char path[4096];

static int fail(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	return 1;
}

static int failx(const char *what, const unsigned char *got, size_t off, size_t n)
{
	size_t i;
	for (i = 0; i < n && got[i] == want[off + i]; i++)
		;
	printf("FAIL %s: first difference at byte %zu (got %02x, want %02x)\n", what, off + i,
	       i < n ? got[i] : 0, i < n ? want[off + i] : 0);
	return 1;
}

static void fill(size_t off, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		want[off + i] = (unsigned char)((i * 131 + seed * 7 + (i >> 12)) ^ seed);
}

/* check reads [off, off+n) through fd into an aligned buffer. */
static int check(int fd, size_t off, size_t n, const char *what)
{
	unsigned char *buf;
	if (posix_memalign((void **)&buf, 4096, n) != 0)
		return fail("posix_memalign");
	ssize_t r = pread(fd, buf, n, off);
	if (r != (ssize_t)n) {
		printf("FAIL %s: pread returned %zd of %zu: %s\n", what, r, n, strerror(errno));
		free(buf);
		return 1;
	}
	int rc = memcmp(buf, want + off, n) ? failx(what, buf, off, n) : 0;
	free(buf);
	return rc;
}

int main(int argc, char *argv[])
{
	if (argc != 2) {
		fprintf(stderr, "usage: coherence DIR\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/coherence.%d", argv[1], getpid());
	if (posix_memalign((void **)&want, 4096, LEN + MB) != 0)
		return fail("posix_memalign");
	memset(want, 0, LEN + MB);

	int fb = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fb < 0)
		return fail("open buffered");
	int fd = open(path, O_RDWR | O_DIRECT);
	if (fd < 0)
		return fail("open O_DIRECT");

	/* 1. buffered write, read back with O_DIRECT. */
	fill(0, LEN, 1);
	if (pwrite(fb, want, LEN, 0) != LEN)
		return fail("buffered pwrite");
	if (check(fd, 0, LEN, "O_DIRECT read after buffered write"))
		return 1;
	printf("PASS O_DIRECT read sees unsynced buffered write\n");

	/* 2. O_DIRECT write over cached pages: buffered read and mmap see it. */
	unsigned char *map = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fb, 0);
	if (map == MAP_FAILED)
		return fail("mmap");
	volatile unsigned char touch = map[300 * 1024]; /* fault the page in */
	(void)touch;
	fill(256 * 1024, 256 * 1024, 2);
	if (pwrite(fd, want + 256 * 1024, 256 * 1024, 256 * 1024) != 256 * 1024)
		return fail("O_DIRECT pwrite");
	if (check(fb, 0, LEN, "buffered read after O_DIRECT write"))
		return 1;
	if (memcmp(map, want, LEN))
		return failx("mapping after O_DIRECT write", map, 0, LEN);
	printf("PASS buffered read and mapping see O_DIRECT write\n");

	/* 3. store through the mapping, read with O_DIRECT without msync. */
	fill(600 * 1024, 100 * 1024, 3);
	memcpy(map + 600 * 1024, want + 600 * 1024, 100 * 1024);
	if (check(fd, 0, LEN, "O_DIRECT read after store through mapping"))
		return 1;
	if (check(fb, 0, LEN, "buffered read after store through mapping"))
		return 1;
	printf("PASS O_DIRECT read sees store through mapping\n");

	/* 4. buffered extension: the size is there at once, the tail too. */
	fill(LEN, 12345, 4);
	if (pwrite(fb, want + LEN, 12345, LEN) != 12345)
		return fail("buffered pwrite past EOF");
	struct stat st;
	if (fstat(fd, &st) != 0)
		return fail("fstat");
	if (st.st_size != LEN + 12345) {
		printf("FAIL size after buffered extension: %lld, want %d\n", (long long)st.st_size, LEN + 12345);
		return 1;
	}
	unsigned char *buf;
	if (posix_memalign((void **)&buf, 4096, LEN + MB) != 0)
		return fail("posix_memalign");
	ssize_t r = pread(fd, buf, LEN + MB, 0);
	if (r != LEN + 12345) {
		printf("FAIL O_DIRECT read of the whole file: %zd bytes, want %d\n", r, LEN + 12345);
		return 1;
	}
	if (memcmp(buf, want, LEN + 12345))
		return failx("O_DIRECT read of the extended file", buf, 0, LEN + 12345);
	printf("PASS buffered extension visible to O_DIRECT (size and data)\n");

	/* 5. everything on a fresh descriptor after close. */
	munmap(map, LEN);
	if (close(fb) != 0)
		return fail("close buffered");
	if (close(fd) != 0)
		return fail("close O_DIRECT");
	fb = open(path, O_RDONLY);
	if (fb < 0)
		return fail("reopen");
	if (check(fb, 0, LEN + 12345, "reopened file"))
		return 1;
	close(fb);
	unlink(path);
	printf("PASS reopened file holds the last writes\nOK\n");
	return 0;
}
