/*
 * dio_stale.c - buffered reads never return data older than a completed
 * AIO O_DIRECT write (the scenario of xfstests generic/451).
 *
 * Usage: dio_stale FILE ITERATIONS
 *   One writer rewrites the first LEN bytes of FILE with AIO O_DIRECT
 *   (io_submit, no libaio needed), each time stamping every 4 KiB block
 *   with a new generation number; after each write completes it publishes
 *   the generation and reads the range back buffered, expecting exactly it.
 *   Two reader threads meanwhile open, read (buffered) and close the file
 *   in a loop, filling the page cache while the writes run; a reader that
 *   sees a block older than the generation completed before its read
 *   began has read stale data too.
 *   Prints "OK" after ITERATIONS writes; "FAIL ..." and exit 1 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LEN (640 * 1024)
#define BLK 4096

static const char *path;
static volatile uint64_t completed; /* last generation whose write completed */
static volatile int stop;
static volatile int failed;

static void fill(unsigned char *buf, uint64_t gen)
{
	for (size_t off = 0; off < LEN; off += sizeof(gen))
		memcpy(buf + off, &gen, sizeof(gen));
}

/* check returns the first block whose stamp is below min, or -1. */
static long check(const unsigned char *buf, uint64_t min, uint64_t *got)
{
	for (size_t off = 0; off < LEN; off += BLK) {
		uint64_t g;
		memcpy(&g, buf + off, sizeof(g));
		if (g < min) {
			*got = g;
			return (long)(off / BLK);
		}
	}
	return -1;
}

static int readall(int fd, unsigned char *buf)
{
	size_t done = 0;
	while (done < LEN) {
		ssize_t r = pread(fd, buf + done, LEN - done, done);
		if (r <= 0)
			return -1;
		done += r;
	}
	return 0;
}

static void *reader(void *arg)
{
	unsigned char *buf = malloc(LEN);
	(void)arg;
	if (!buf)
		return NULL;
	while (!stop) {
		uint64_t min = __atomic_load_n(&completed, __ATOMIC_SEQ_CST);
		int fd = open(path, O_RDONLY);
		if (fd < 0 || readall(fd, buf) < 0) {
			printf("FAIL reader: open/read: %s\n", strerror(errno));
			failed = 1;
			stop = 1;
			break;
		}
		close(fd);
		uint64_t got;
		long b = check(buf, min, &got);
		if (b >= 0) {
			printf("FAIL stale data from a buffered read (reader): block %ld has generation %llu, "
			       "generation %llu had completed before the read\n",
			       b, (unsigned long long)got, (unsigned long long)min);
			failed = 1;
			stop = 1;
		}
	}
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: dio_stale FILE ITERATIONS\n");
		return 2;
	}
	path = argv[1];
	long iters = atol(argv[2]);
	unsigned char *wbuf, *rbuf;
	if (posix_memalign((void **)&wbuf, BLK, LEN) || posix_memalign((void **)&rbuf, BLK, LEN)) {
		printf("FAIL posix_memalign\n");
		return 1;
	}
	int fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0644);
	if (fd < 0) {
		printf("FAIL open %s: %s\n", path, strerror(errno));
		return 1;
	}
	fill(wbuf, 0);
	if (pwrite(fd, wbuf, LEN, 0) != LEN || fsync(fd) != 0) {
		printf("FAIL initial write: %s\n", strerror(errno));
		return 1;
	}
	close(fd);

	aio_context_t ctx = 0;
	if (syscall(SYS_io_setup, 1, &ctx) != 0) {
		printf("FAIL io_setup: %s\n", strerror(errno));
		return 1;
	}
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, reader, NULL);

	for (uint64_t gen = 1; gen <= (uint64_t)iters && !stop; gen++) {
		fill(wbuf, gen);
		fd = open(path, O_RDWR | O_DIRECT);
		if (fd < 0) {
			printf("FAIL open O_DIRECT: %s\n", strerror(errno));
			failed = 1;
			break;
		}
		struct iocb cb;
		memset(&cb, 0, sizeof(cb));
		cb.aio_fildes = fd;
		cb.aio_lio_opcode = IOCB_CMD_PWRITE;
		cb.aio_buf = (uint64_t)(uintptr_t)wbuf;
		cb.aio_nbytes = LEN;
		cb.aio_offset = 0;
		struct iocb *cbs[1] = {&cb};
		struct io_event ev;
		if (syscall(SYS_io_submit, ctx, 1, cbs) != 1 ||
		    syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) != 1) {
			printf("FAIL io_submit/io_getevents: %s\n", strerror(errno));
			failed = 1;
			break;
		}
		if (ev.res != LEN) {
			printf("FAIL AIO write returned %lld\n", (long long)ev.res);
			failed = 1;
			break;
		}
		close(fd);
		__atomic_store_n(&completed, gen, __ATOMIC_SEQ_CST);

		fd = open(path, O_RDONLY);
		if (fd < 0 || readall(fd, rbuf) < 0) {
			printf("FAIL buffered read: %s\n", strerror(errno));
			failed = 1;
			break;
		}
		close(fd);
		uint64_t got;
		long b = check(rbuf, gen, &got);
		if (b >= 0) {
			printf("FAIL stale data from a buffered read after write %llu completed: block %ld has "
			       "generation %llu\n",
			       (unsigned long long)gen, b, (unsigned long long)got);
			failed = 1;
			break;
		}
	}
	stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	syscall(SYS_io_destroy, ctx);
	if (failed)
		return 1;
	printf("OK\n");
	return 0;
}
