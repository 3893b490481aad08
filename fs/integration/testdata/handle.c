/* File handles: "handle save PATH HFILE" stores name_to_handle_at(PATH) in
 * HFILE; "handle open MOUNTDIR HFILE" opens it with open_by_handle_at and
 * prints the first line of the file (or lists a directory's entry count),
 * then OK. Exit 1 with the errno text on failure. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int die(const char *what)
{
	printf("%s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: handle save PATH HFILE | handle open MOUNTDIR HFILE\n");
		return 2;
	}
	struct file_handle *fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
	if (!strcmp(argv[1], "save")) {
		int mnt;
		fh->handle_bytes = MAX_HANDLE_SZ;
		if (name_to_handle_at(AT_FDCWD, argv[2], fh, &mnt, 0) < 0)
			return die("name_to_handle_at");
		FILE *f = fopen(argv[3], "w");
		if (!f || fwrite(fh, sizeof(*fh) + fh->handle_bytes, 1, f) != 1 || fclose(f))
			return die("writing handle");
		printf("handle of %u bytes, type %d\nOK\n", fh->handle_bytes, fh->handle_type);
		return 0;
	}
	FILE *f = fopen(argv[3], "r");
	if (!f || fread(fh, sizeof(*fh), 1, f) != 1 || fh->handle_bytes > MAX_HANDLE_SZ ||
	    fread(fh->f_handle, fh->handle_bytes, 1, f) != 1)
		return die("reading handle");
	fclose(f);
	int mfd = open(argv[2], O_RDONLY | O_DIRECTORY);
	if (mfd < 0)
		return die("open mount");
	int fd = open_by_handle_at(mfd, fh, O_RDONLY);
	if (fd < 0)
		return die("open_by_handle_at");
	char buf[256] = {0};
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0 && errno == EISDIR) {
		DIR *d = fdopendir(fd);
		int c = 0;
		while (d && readdir(d))
			c++;
		printf("directory with %d entries\nOK\n", c);
		return 0;
	}
	if (n < 0)
		return die("read");
	printf("%s\nOK\n", strtok(buf, "\n") ? buf : "");
	return 0;
}
