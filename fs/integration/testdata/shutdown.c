/* FS_IOC_SHUTDOWN: "shutdown DIR FLAGS" calls the ioctl on DIR with FLAGS
 * (0 default, 1 logflush, 2 nologflush), checks the flags variable came
 * back unchanged, then checks that creating DIR/after-shutdown fails with
 * EROFS or EIO. Prints OK. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/types.h>
#include <unistd.h>

#define FS_IOC_SHUTDOWN _IOR('X', 125, __u32)

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: shutdown DIR FLAGS\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		perror("open");
		return 1;
	}
	__u32 flags = strtoul(argv[2], NULL, 0);
	__u32 want = flags;
	if (ioctl(fd, FS_IOC_SHUTDOWN, &flags) < 0) {
		printf("ioctl(FS_IOC_SHUTDOWN, %u): %s\n", want, strerror(errno));
		return 1;
	}
	if (flags != want) {
		printf("flags changed by the ioctl: %u, want %u\n", flags, want);
		return 1;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/after-shutdown", argv[1]);
	int c = open(path, O_CREAT | O_WRONLY, 0644);
	if (c >= 0) {
		printf("create after shutdown succeeded\n");
		return 1;
	}
	if (errno != EROFS && errno != EIO) {
		printf("create after shutdown: %s, want EROFS or EIO\n", strerror(errno));
		return 1;
	}
	printf("OK\n");
	return 0;
}
