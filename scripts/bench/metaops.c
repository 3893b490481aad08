// metaops: metadata operation loops for scripts/bench/meta.sh.
//
// One process runs a whole loop, so the benchmark measures the filesystem,
// not fork/exec. Every mode prints one line of key=value pairs on stdout;
// errors go to stderr with a non-zero exit.
//
//   metaops create DIR N PREFIX    creat+close DIR/PREFIX<i>, i = 0..N-1
//   metaops stat   DIR N PREFIX    stat each of them
//   metaops readdir DIR            getdents64 over DIR (1 MiB buffer)
//   metaops rename DIR N FROM TO   rename DIR/FROM<i> to DIR/TO<i>
//   metaops unlink DIR N PREFIX    unlink each of them
//   metaops append FILE K SYNC     K appending 4 KiB O_DIRECT pwrites to a new
//                                  FILE, fdatasync after each when SYNC is 1
//   metaops stall FILE STOP MAXMIB 4 KiB O_DIRECT sequential pwrites to FILE
//                                  (wrapping at MAXMIB), each timed, until the
//                                  file STOP exists; prints max and percentiles
//
// Build: gcc -O2 -o metaops metaops.c
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *arg) {
	fprintf(stderr, "metaops: %s %s: %s\n", what, arg, strerror(errno));
	exit(1);
}

static long num(const char *s) {
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < 0) {
		fprintf(stderr, "metaops: bad number %s\n", s);
		exit(2);
	}
	return v;
}

static void enter(const char *dir) {
	if (chdir(dir) != 0)
		die("chdir", dir);
}

// names are PREFIX<i>: short, like a mail spool or an object store's keys
static void name(char *buf, size_t n, const char *prefix, long i) {
	snprintf(buf, n, "%s%ld", prefix, i);
}

static int create(long n, const char *prefix) {
	char p[64];
	double t0 = now();
	for (long i = 0; i < n; i++) {
		name(p, sizeof p, prefix, i);
		int fd = creat(p, 0644);
		if (fd < 0)
			die("creat", p);
		close(fd);
	}
	printf("ops=%ld secs=%.6f\n", n, now() - t0);
	return 0;
}

static int dostat(long n, const char *prefix) {
	char p[64];
	struct stat st;
	double t0 = now();
	for (long i = 0; i < n; i++) {
		name(p, sizeof p, prefix, i);
		if (stat(p, &st) != 0)
			die("stat", p);
	}
	printf("ops=%ld secs=%.6f\n", n, now() - t0);
	return 0;
}

static int readdir_all(const char *dir) {
	static char buf[1 << 20];
	long entries = 0;
	double t0 = now();
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		die("open", dir);
	for (;;) {
		long got = syscall(SYS_getdents64, fd, buf, sizeof buf);
		if (got < 0)
			die("getdents64", dir);
		if (got == 0)
			break;
		for (long off = 0; off < got;) {
			unsigned short reclen;
			// struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, name
			memcpy(&reclen, buf + off + 16, sizeof reclen);
			entries++;
			off += reclen;
		}
	}
	close(fd);
	printf("ops=%ld secs=%.6f\n", entries, now() - t0);
	return 0;
}

static int dorename(long n, const char *from, const char *to) {
	char a[64], b[64];
	double t0 = now();
	for (long i = 0; i < n; i++) {
		name(a, sizeof a, from, i);
		name(b, sizeof b, to, i);
		if (rename(a, b) != 0)
			die("rename", a);
	}
	printf("ops=%ld secs=%.6f\n", n, now() - t0);
	return 0;
}

static int dounlink(long n, const char *prefix) {
	char p[64];
	double t0 = now();
	for (long i = 0; i < n; i++) {
		name(p, sizeof p, prefix, i);
		if (unlink(p) != 0)
			die("unlink", p);
	}
	printf("ops=%ld secs=%.6f\n", n, now() - t0);
	return 0;
}

static void *block4k(void) {
	void *b;
	if (posix_memalign(&b, 4096, 4096) != 0) {
		fprintf(stderr, "metaops: out of memory\n");
		exit(1);
	}
	memset(b, 0xa5, 4096);
	return b;
}

static int append(const char *file, long k, int sync) {
	void *b = block4k();
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0)
		die("open", file);
	double t0 = now();
	for (long i = 0; i < k; i++) {
		if (pwrite(fd, b, 4096, (off_t)i * 4096) != 4096)
			die("pwrite", file);
		if (sync && fdatasync(fd) != 0)
			die("fdatasync", file);
	}
	if (fsync(fd) != 0)
		die("fsync", file);
	close(fd);
	printf("ops=%ld secs=%.6f bytes=%ld\n", k, now() - t0, k * 4096);
	return 0;
}

static int cmp_u32(const void *a, const void *b) {
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static int stall(const char *file, const char *stop, long maxmib) {
	void *b = block4k();
	long wrap = maxmib * 256, cap = 1 << 20, n = 0;
	uint32_t *lat = malloc(cap * sizeof *lat);
	if (lat == NULL || wrap <= 0) {
		fprintf(stderr, "metaops: out of memory or MAXMIB 0\n");
		return 1;
	}
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0)
		die("open", file);
	double start = now();
	for (;;) {
		// polling the stop file every 64 writes costs one tmpfs stat
		if (n % 64 == 0 && access(stop, F_OK) == 0)
			break;
		double t0 = now();
		if (pwrite(fd, b, 4096, (off_t)(n % wrap) * 4096) != 4096)
			die("pwrite", file);
		double us = (now() - t0) * 1e6;
		if (n == cap) {
			cap *= 2;
			lat = realloc(lat, cap * sizeof *lat);
			if (lat == NULL) {
				fprintf(stderr, "metaops: out of memory\n");
				return 1;
			}
		}
		lat[n++] = us > 4e9 ? 4000000000u : (uint32_t)us;
	}
	double secs = now() - start;
	close(fd);
	if (n == 0) {
		printf("ops=0 secs=%.6f max_us=0 p50_us=0 p99_us=0 p999_us=0\n", secs);
		return 0;
	}
	qsort(lat, n, sizeof *lat, cmp_u32);
	printf("ops=%ld secs=%.6f max_us=%u p50_us=%u p99_us=%u p999_us=%u\n", n, secs, lat[n - 1],
	       lat[n / 2], lat[(long)(n * 0.99)], lat[(long)(n * 0.999)]);
	return 0;
}

int main(int argc, char **argv) {
	if (argc >= 5 && strcmp(argv[1], "create") == 0)
		return enter(argv[2]), create(num(argv[3]), argv[4]);
	if (argc >= 5 && strcmp(argv[1], "stat") == 0)
		return enter(argv[2]), dostat(num(argv[3]), argv[4]);
	if (argc >= 3 && strcmp(argv[1], "readdir") == 0)
		return readdir_all(argv[2]);
	if (argc >= 6 && strcmp(argv[1], "rename") == 0)
		return enter(argv[2]), dorename(num(argv[3]), argv[4], argv[5]);
	if (argc >= 5 && strcmp(argv[1], "unlink") == 0)
		return enter(argv[2]), dounlink(num(argv[3]), argv[4]);
	if (argc >= 5 && strcmp(argv[1], "append") == 0)
		return append(argv[2], num(argv[3]), num(argv[4]) != 0);
	if (argc >= 5 && strcmp(argv[1], "stall") == 0)
		return stall(argv[2], argv[3], num(argv[4]));
	fprintf(stderr, "usage: see the comment at the top of metaops.c\n");
	return 2;
}
