/*
 * osync.c - synchronous direct writes to new files, with no fsync after.
 *
 * Usage: osync DIR
 *   Creates three files in DIR and writes them with O_DIRECT, never calling
 *   fsync: the write itself must be durable when it returns.
 *   - DIR/dsync-pwrite: open(O_DIRECT|O_SYNC), pwrite 1 MiB of 0x11;
 *   - DIR/dsync-aio:    open(O_DIRECT|O_DSYNC), io_submit two 256 KiB
 *                       writes of 0x22 (at 0 and 256 KiB) and wait;
 *   - DIR/rwf-dsync:    open(O_DIRECT), io_submit one 512 KiB write of
 *                       0x33 with the per-I/O flag RWF_DSYNC and wait.
 *   AIO goes through the io_submit system call directly (no libaio).
 *   Prints "OK"; "FAIL ..." and exit 1 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KB 1024

static char path[4096];

static int fail(const char *what)
{
	printf("FAIL %s %s: %s\n", what, path, strerror(errno));
	return 1;
}

/* aio writes n buffers of len bytes at len*i with rw_flags, and waits. */
static int aio(int fd, unsigned char *buf, size_t len, int n, int rw_flags)
{
	aio_context_t ctx = 0;
	struct iocb cb[2];
	struct iocb *cbs[2];
	struct io_event ev[2];
	if (n > 2 || syscall(SYS_io_setup, n, &ctx) != 0)
		return fail("io_setup");
	for (int i = 0; i < n; i++) {
		memset(&cb[i], 0, sizeof(cb[i]));
		cb[i].aio_fildes = fd;
		cb[i].aio_lio_opcode = IOCB_CMD_PWRITE;
		cb[i].aio_buf = (uint64_t)(uintptr_t)buf;
		cb[i].aio_nbytes = len;
		cb[i].aio_offset = (int64_t)len * i;
		cb[i].aio_rw_flags = rw_flags;
		cbs[i] = &cb[i];
	}
	if (syscall(SYS_io_submit, ctx, n, cbs) != n)
		return fail("io_submit");
	int got = 0;
	while (got < n) {
		long r = syscall(SYS_io_getevents, ctx, 1, n - got, ev + got, NULL);
		if (r < 0)
			return fail("io_getevents");
		got += r;
	}
	for (int i = 0; i < n; i++) {
		if (ev[i].res != (int64_t)len) {
			errno = ev[i].res < 0 ? -ev[i].res : EIO;
			return fail("AIO write");
		}
	}
	syscall(SYS_io_destroy, ctx);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: osync DIR\n");
		return 2;
	}
	unsigned char *buf;
	if (posix_memalign((void **)&buf, 4096, 1024 * KB) != 0)
		return fail("posix_memalign");

	snprintf(path, sizeof(path), "%s/dsync-pwrite", argv[1]);
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_DIRECT | O_SYNC, 0644);
	if (fd < 0)
		return fail("open");
	memset(buf, 0x11, 1024 * KB);
	if (pwrite(fd, buf, 1024 * KB, 0) != 1024 * KB)
		return fail("pwrite");
	close(fd);

	snprintf(path, sizeof(path), "%s/dsync-aio", argv[1]);
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_DIRECT | O_DSYNC, 0644);
	if (fd < 0)
		return fail("open");
	memset(buf, 0x22, 256 * KB);
	if (aio(fd, buf, 256 * KB, 2, 0))
		return 1;
	close(fd);

	snprintf(path, sizeof(path), "%s/rwf-dsync", argv[1]);
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_DIRECT, 0644);
	if (fd < 0)
		return fail("open");
	memset(buf, 0x33, 512 * KB);
	if (aio(fd, buf, 512 * KB, 1, RWF_DSYNC))
		return 1;
	close(fd);

	printf("OK\n");
	return 0;
}
