/*
 * rwhint.so: turn write-lifetime hints into write streams, for programs
 * that cannot be changed.
 *
 * RocksDB tells the filesystem how long each file will live with
 * fcntl(fd, F_SET_RW_HINT, &hint): its WAL is RWH_WRITE_LIFE_SHORT, a table
 * of level L (L >= 1, base level 1) is MEDIUM + L - 1, L0 MEDIUM. The kernel
 * keeps the hint for the block layer; a FUSE daemon never sees it. Loaded
 * with LD_PRELOAD, this library answers that fcntl by setting the file's
 * write stream (FS_IOC_WRITE_STREAM, SET) instead, so each lifetime class
 * lands in its own reclaim unit handle.
 *
 * RWHINT_MAP="2:1,3:2,4:3,5:4" maps hint values to stream ids (default:
 * hint h -> stream h - 1, SHORT (2) -> 1 ... EXTREME (5) -> 4; a hint above
 * EXTREME is clamped to it). RWHINT_LOG=1 prints each mapping on stderr.
 *
 * Build: cc -O2 -shared -fPIC -o rwhint.so rwhint.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#ifndef F_SET_RW_HINT
#define F_SET_RW_HINT 1036
#endif

struct fs_write_stream {
	uint32_t op_flags;
	uint32_t stream_id;
	uint64_t rsvd;
};
#define FS_WRITE_STREAM_SET 4
#define FS_IOC_WRITE_STREAM _IOWR('f', 135, struct fs_write_stream)

static int stream_for(uint64_t hint)
{
	const char *m = getenv("RWHINT_MAP");
	if (m) {
		/* "h:s,h:s,..." — the first entry for hint wins. */
		while (*m) {
			char *end;
			unsigned long h = strtoul(m, &end, 10);
			if (*end != ':')
				break;
			unsigned long s = strtoul(end + 1, &end, 10);
			if (h == hint)
				return (int)s;
			if (*end != ',')
				break;
			m = end + 1;
		}
		return -1;
	}
	if (hint < 2)
		return -1; /* NOT_SET, NONE: leave the file's stream alone */
	if (hint > 5)
		hint = 5;
	return (int)hint - 1;
}

static int set_hint(int fd, const void *hintp)
{
	/* The kernel reads a u64, but RocksDB passes a pointer to its 4-byte
	 * enum, so the upper half is whatever follows it on the stack (the
	 * kernel then refuses the hint with EINVAL). Hints are small: the low
	 * 32 bits, which come first on little-endian machines, are the value
	 * in both cases. */
	uint32_t hint;
	memcpy(&hint, hintp, sizeof hint);
	int s = stream_for(hint);
	if (s < 0)
		return 0;
	struct fs_write_stream ws = { .op_flags = FS_WRITE_STREAM_SET, .stream_id = (uint32_t)s };
	int rc = ioctl(fd, FS_IOC_WRITE_STREAM, &ws);
	if (getenv("RWHINT_LOG"))
		fprintf(stderr, "rwhint: fd %d hint %llu -> stream %d: %s\n", fd,
			(unsigned long long)hint, s, rc == 0 ? "ok" : strerror(errno));
	/* Not a streamfs file (or no such stream): the hint stays a hint. */
	return 0;
}

typedef int (*fcntl_fn)(int, int, ...);

/* handle serves fcntl and fcntl64: a lifetime hint becomes a stream, the
 * rest goes to the C library's function of that name. */
static int handle(const char *name, int fd, int cmd, void *arg)
{
	if (cmd == F_SET_RW_HINT && arg)
		return set_hint(fd, arg);
	fcntl_fn real = (fcntl_fn)dlsym(RTLD_NEXT, name);
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(fd, cmd, arg);
}

/* Every fcntl argument is an int or a pointer, both passed in one
 * register on the ABIs this runs on, so forwarding it as a pointer is
 * exact. */
int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return handle("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return handle("fcntl64", fd, cmd, arg);
}
