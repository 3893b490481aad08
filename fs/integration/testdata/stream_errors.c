/*
 * stream_errors.c - every error case and success path of FS_IOC_WRITE_STREAM.
 *
 * Usage: stream_errors DIR
 *   DIR is a directory on the filesystem under test. The program creates
 *   (and removes) its own files there, and sets/clears a stream on DIR itself.
 *
 * Prints one "PASS ..." line per check and "OK" at the end, exit 0. Any
 * failed check prints "FAIL ..." and the program exits 1 after the rest of
 * the checks ran. A filesystem without write streams fails the first check
 * (GET_MAX) with ENOTTY and the program stops there.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* The UAPI, duplicated as in the series' example program. */
struct fs_write_stream {
	uint32_t op_flags;
	union {
		uint32_t stream_id;
		uint32_t max_streams;
	};
	uint64_t rsvd;
};

#define FS_WRITE_STREAM_OP_GET_MAX (1 << 0)
#define FS_WRITE_STREAM_OP_GET (1 << 1)
#define FS_WRITE_STREAM_OP_SET (1 << 2)

#define FS_IOC_WRITE_STREAM _IOWR('f', 135, struct fs_write_stream)

/* Same type and number, other size or direction: must not be taken for it. */
struct fsverity_read_metadata_arg {
	uint64_t metadata_type;
	uint64_t offset;
	uint64_t length;
	uint64_t buf_ptr;
	uint64_t reserved;
};
#define FS_IOC_READ_VERITY_METADATA _IOWR('f', 135, struct fsverity_read_metadata_arg)
#define UNKNOWN_IOC_NEXT _IOWR('f', 136, struct fs_write_stream)
#define UNKNOWN_IOC_READ_ONLY _IOR('f', 135, struct fs_write_stream)
#define UNKNOWN_IOC_WRITE_ONLY _IOW('f', 135, struct fs_write_stream)

static int failures;
static char file_path[4096];

#define PASS(...) do { printf("PASS "); printf(__VA_ARGS__); printf("\n"); } while (0)
#define FAIL(...) do { printf("FAIL "); printf(__VA_ARGS__); printf("\n"); failures++; } while (0)
#define INFO(...) do { printf("INFO "); printf(__VA_ARGS__); printf("\n"); } while (0)

static void cleanup(void)
{
	if (file_path[0])
		unlink(file_path);
}

static void die(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	fflush(stdout);
	cleanup();
	exit(1);
}

/* Issues the ioctl; returns 0 or the errno. */
static int ws_call(int fd, struct fs_write_stream *req)
{
	return ioctl(fd, FS_IOC_WRITE_STREAM, req) < 0 ? errno : 0;
}

static int ws_set(int fd, uint32_t id)
{
	struct fs_write_stream req = { .op_flags = FS_WRITE_STREAM_OP_SET, .stream_id = id };

	return ws_call(fd, &req);
}

/*
 * GET with the whole struct pre-filled with 0xAA (rsvd cleared, as it must
 * be): the reply must overwrite all of stream_id, echo op_flags and leave
 * rsvd 0, proving the filesystem returns the full 16 bytes.
 */
static int ws_get(int fd, const char *what, uint32_t *id)
{
	struct fs_write_stream req;
	int err;

	memset(&req, 0xAA, sizeof(req));
	req.op_flags = FS_WRITE_STREAM_OP_GET;
	req.rsvd = 0;
	err = ws_call(fd, &req);
	if (err) {
		FAIL("%s: GET: %s", what, strerror(err));
		return -1;
	}
	if (req.op_flags != FS_WRITE_STREAM_OP_GET || req.rsvd != 0) {
		FAIL("%s: GET reply op_flags=%#x rsvd=%#" PRIx64 ", want %#x and 0",
		     what, req.op_flags, req.rsvd, FS_WRITE_STREAM_OP_GET);
		return -1;
	}
	*id = req.stream_id;
	return 0;
}

/* Expects the raw request to fail with want_errno. */
static void expect_errno(int fd, const char *what, uint32_t op, uint32_t id,
			 uint64_t rsvd, int want_errno)
{
	struct fs_write_stream req = { .op_flags = op, .stream_id = id, .rsvd = rsvd };
	int err = ws_call(fd, &req);

	if (err == want_errno)
		PASS("%s -> %s", what, strerror(err));
	else if (err == 0)
		FAIL("%s succeeded, want %s", what, strerror(want_errno));
	else
		FAIL("%s -> %s, want %s", what, strerror(err), strerror(want_errno));
}

static void expect_get(int fd, const char *what, uint32_t want)
{
	uint32_t id;

	if (ws_get(fd, what, &id) < 0)
		return;
	if (id == want)
		PASS("%s: GET -> %u", what, id);
	else
		FAIL("%s: GET -> %u (%#x), want %u", what, id, id, want);
}

/* SET id must fail with EINVAL and leave the current id (cur) alone. */
static void expect_set_rejected(int fd, const char *what, uint32_t id, uint32_t cur)
{
	char buf[128];

	snprintf(buf, sizeof(buf), "%s: SET %u", what, id);
	expect_errno(fd, buf, FS_WRITE_STREAM_OP_SET, id, 0, EINVAL);
	snprintf(buf, sizeof(buf), "%s: after rejected SET %u", what, id);
	expect_get(fd, buf, cur);
}

static void expect_other_cmd_enotty(int fd, const char *what, unsigned long cmd, size_t size)
{
	unsigned char buf[64];

	memset(buf, 0, sizeof(buf));
	if (size > sizeof(buf))
		size = sizeof(buf);
	/* A plausible request in case the handler misreads it as ours. */
	buf[0] = FS_WRITE_STREAM_OP_GET_MAX;
	if (ioctl(fd, cmd, buf) == 0)
		FAIL("%s (cmd %#lx) succeeded, want ENOTTY", what, cmd);
	else if (errno != ENOTTY)
		FAIL("%s (cmd %#lx) -> %s, want ENOTTY", what, cmd, strerror(errno));
	else
		PASS("%s (cmd %#lx) -> ENOTTY", what, cmd);
}

static void reopen_checks(uint32_t max)
{
	int fd;
	uint32_t id;
	int err;

	/* O_RDONLY: reading is allowed, SET is EBADF (no write access). */
	fd = open(file_path, O_RDONLY);
	if (fd < 0)
		die("open O_RDONLY");
	{
		struct fs_write_stream req = { .op_flags = FS_WRITE_STREAM_OP_GET_MAX };
		int err = ws_call(fd, &req);

		if (err)
			FAIL("GET_MAX on O_RDONLY fd: %s", strerror(err));
		else if (req.max_streams != max)
			FAIL("GET_MAX on O_RDONLY fd -> %u, want %u", req.max_streams, max);
		else
			PASS("GET_MAX on O_RDONLY fd -> %u", max);
	}
	if (ws_get(fd, "O_RDONLY fd", &id) == 0)
		PASS("GET on O_RDONLY fd -> %u", id);
	expect_errno(fd, "SET 1 on O_RDONLY fd", FS_WRITE_STREAM_OP_SET, 1, 0, EBADF);
	expect_errno(fd, "SET 0 on O_RDONLY fd", FS_WRITE_STREAM_OP_SET, 0, 0, EBADF);
	close(fd);

	/* O_WRONLY: SET allowed, GET allowed too. */
	fd = open(file_path, O_WRONLY);
	if (fd < 0)
		die("open O_WRONLY");
	if ((err = ws_set(fd, 1)) == 0)
		PASS("SET 1 on O_WRONLY fd");
	else
		FAIL("SET 1 on O_WRONLY fd: %s", strerror(err));
	expect_get(fd, "O_WRONLY fd after SET 1", 1);
	if ((err = ws_set(fd, 0)) != 0)
		FAIL("SET 0 on O_WRONLY fd: %s", strerror(err));
	close(fd);
}

static void dir_checks(const char *dir, uint32_t max)
{
	struct stat st;
	uint32_t before;
	int fd, err;

	fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		die("open directory O_RDONLY|O_DIRECTORY");
	if (fstat(fd, &st) < 0)
		die("fstat directory");
	if (ws_get(fd, "directory", &before) < 0) {
		close(fd);
		return;
	}
	PASS("directory: GET -> %u", before);
	if (geteuid() != 0 && geteuid() != st.st_uid) {
		INFO("directory SET skipped: not root and not the owner");
		close(fd);
		return;
	}
	if ((err = ws_set(fd, 1)) != 0) {
		FAIL("directory (O_RDONLY|O_DIRECTORY): SET 1: %s", strerror(err));
		close(fd);
		return;
	}
	PASS("directory (O_RDONLY|O_DIRECTORY): SET 1");
	expect_get(fd, "directory after SET 1", 1);
	expect_set_rejected(fd, "directory", max + 1, 1);
	expect_errno(fd, "directory: SET with rsvd=1", FS_WRITE_STREAM_OP_SET, 1, 1, EINVAL);
	if ((err = ws_set(fd, before)) != 0)
		FAIL("directory: restoring stream %u: %s", before, strerror(err));
	else
		expect_get(fd, "directory after restore", before);
	close(fd);
}

int main(int argc, char *argv[])
{
	struct fs_write_stream req;
	uint32_t max, k, id;
	int fd, err;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(file_path, sizeof(file_path), "%s/stream_errors.%d", argv[1], (int)getpid());
	fd = open(file_path, O_RDWR | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		die("create test file");

	/* GET_MAX, with stream_id pre-filled so a partial reply shows. */
	memset(&req, 0xAA, sizeof(req));
	req.op_flags = FS_WRITE_STREAM_OP_GET_MAX;
	req.rsvd = 0;
	err = ws_call(fd, &req);
	if (err) {
		printf("FAIL GET_MAX: ioctl(FS_IOC_WRITE_STREAM=%#lx) failed: %s%s\n",
		       (unsigned long)FS_IOC_WRITE_STREAM, strerror(err),
		       err == ENOTTY ? " (this filesystem does not support write streams)" : "");
		close(fd);
		cleanup();
		return 1;
	}
	max = req.max_streams;
	if (req.op_flags != FS_WRITE_STREAM_OP_GET_MAX || req.rsvd != 0)
		FAIL("GET_MAX reply op_flags=%#x rsvd=%#" PRIx64 ", want %#x and 0",
		     req.op_flags, req.rsvd, FS_WRITE_STREAM_OP_GET_MAX);
	if (max == 0 || max == 0xAAAAAAAAu) {
		printf("FAIL GET_MAX -> %u (%#x), want a stream count > 0\n", max, max);
		close(fd);
		cleanup();
		return 1;
	}
	PASS("GET_MAX -> %u", max);

	if (ws_get(fd, "new file", &id) == 0) {
		if (id <= max)
			PASS("new file: GET -> %u (<= max)", id);
		else
			FAIL("new file: GET -> %u, above max %u", id, max);
	}

	/* SET k, GET k; the SET reply must not corrupt the caller's struct. */
	k = max >= 2 ? 2 : 1;
	memset(&req, 0, sizeof(req));
	req.op_flags = FS_WRITE_STREAM_OP_SET;
	req.stream_id = k;
	err = ws_call(fd, &req);
	if (err)
		FAIL("SET %u: %s", k, strerror(err));
	else if (req.op_flags != FS_WRITE_STREAM_OP_SET || req.stream_id != k || req.rsvd != 0)
		FAIL("SET %u reply op_flags=%#x stream_id=%u rsvd=%#" PRIx64,
		     k, req.op_flags, req.stream_id, req.rsvd);
	else
		PASS("SET %u", k);
	expect_get(fd, "after SET k", k);

	/* 0 clears. */
	if ((err = ws_set(fd, 0)) != 0)
		FAIL("SET 0: %s", strerror(err));
	else
		PASS("SET 0");
	expect_get(fd, "after SET 0", 0);

	/* The upper bound is inclusive: ids are 0..max. */
	if ((err = ws_set(fd, max)) != 0)
		FAIL("SET max (%u): %s", max, strerror(err));
	else
		PASS("SET max (%u)", max);
	expect_get(fd, "after SET max", max);
	expect_set_rejected(fd, "file", max + 1, max);
	/* Ids that alias small ones when truncated to 8 or 16 bits. */
	if (max < 257)
		expect_set_rejected(fd, "file (u8 alias of 1)", 257, max);
	if (max < 65537)
		expect_set_rejected(fd, "file (u16 alias of 1)", 65537, max);
	if (max < 65536)
		expect_set_rejected(fd, "file (u16 alias of 0)", 65536, max);
	expect_set_rejected(fd, "file", 0xFFFFFFFFu, max);

	/* rsvd must be zero for every operation, including its high half. */
	expect_errno(fd, "GET_MAX with rsvd=1", FS_WRITE_STREAM_OP_GET_MAX, 0, 1, EINVAL);
	expect_errno(fd, "GET with rsvd=1", FS_WRITE_STREAM_OP_GET, 0, 1, EINVAL);
	expect_errno(fd, "SET 1 with rsvd=1", FS_WRITE_STREAM_OP_SET, 1, 1, EINVAL);
	expect_errno(fd, "GET with rsvd=1<<63", FS_WRITE_STREAM_OP_GET, 0, 1ULL << 63, EINVAL);
	expect_errno(fd, "SET 1 with rsvd=1<<32", FS_WRITE_STREAM_OP_SET, 1, 1ULL << 32, EINVAL);
	expect_get(fd, "after rejected rsvd SET", max);

	/* op_flags must be exactly one operation. */
	expect_errno(fd, "op_flags=0", 0, 0, 0, EINVAL);
	expect_errno(fd, "op_flags=GET|SET", FS_WRITE_STREAM_OP_GET | FS_WRITE_STREAM_OP_SET, 1, 0, EINVAL);
	expect_errno(fd, "op_flags=GET_MAX|GET", FS_WRITE_STREAM_OP_GET_MAX | FS_WRITE_STREAM_OP_GET, 0, 0, EINVAL);
	expect_errno(fd, "op_flags=GET_MAX|SET", FS_WRITE_STREAM_OP_GET_MAX | FS_WRITE_STREAM_OP_SET, 1, 0, EINVAL);
	expect_errno(fd, "op_flags=7", 7, 1, 0, EINVAL);
	expect_errno(fd, "op_flags=8", 8, 0, 0, EINVAL);
	expect_errno(fd, "op_flags=0x80000000", 0x80000000u, 0, 0, EINVAL);
	expect_get(fd, "after rejected op_flags", max);

	/* Other commands sharing the 'f' space are not ours. */
	expect_other_cmd_enotty(fd, "_IOWR('f', 136, 16)", UNKNOWN_IOC_NEXT, 16);
	expect_other_cmd_enotty(fd, "FS_IOC_READ_VERITY_METADATA", FS_IOC_READ_VERITY_METADATA,
				sizeof(struct fsverity_read_metadata_arg));
	expect_other_cmd_enotty(fd, "_IOR('f', 135, 16)", UNKNOWN_IOC_READ_ONLY, 16);
	expect_other_cmd_enotty(fd, "_IOW('f', 135, 16)", UNKNOWN_IOC_WRITE_ONLY, 16);

	if ((err = ws_set(fd, 0)) != 0)
		FAIL("SET 0 (reset): %s", strerror(err));
	close(fd);

	reopen_checks(max);
	dir_checks(argv[1], max);

	cleanup();
	if (failures) {
		printf("FAILED: %d check(s)\n", failures);
		return 1;
	}
	printf("OK\n");
	return 0;
}
