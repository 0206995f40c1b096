/* SPDX-License-Identifier: Apache-2.0 */
/*
 * front: see front.h.
 */
#include "client/front.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int front_usable(const char *path)
{
	struct stat st, self;

	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || access(path, X_OK) < 0)
		return 0;
	return stat("/proc/self/exe", &self) < 0 ||
	       st.st_dev != self.st_dev || st.st_ino != self.st_ino;
}

void front_exec(const char *path, char **argv, const char *guard)
{
	setenv(guard, "1", 1);
	argv[0] = (char *)path;
	execv(path, argv);
	fprintf(stderr, "ptxcache: cannot run '%s': %s\n", path, strerror(errno));
}

int front_read_file(const char *path, struct buf *out)
{
	int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;

	if (fd < 0)
		return -1;
	int r = buf_read_fd(out, fd, 0), e = errno;
	if (fd != STDIN_FILENO)
		close(fd);
	errno = e;
	return r;
}

int front_write_file(const char *path, const void *p, size_t n)
{
	struct buf tmp = BUF_INIT;
	struct stat st;
	int fd;

	if (!strcmp(path, "-"))
		return (n && fwrite(p, 1, n, stdout) != n) || fflush(stdout) ? -1 : 0;
	/* Only a regular file is replaced whole: a device (/dev/null), a
	 * FIFO or a symbolic link is written through, as the tool would. */
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
		if (fd < 0)
			return -1;
		int bad = buf_write_fd(fd, p, n) < 0;
		return close(fd) < 0 || bad ? -1 : 0;
	}
	if (buf_printf(&tmp, "%s.ptxcache-%d", path, (int)getpid()) < 0)
		return -1;
	fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		buf_free(&tmp);
		return -1;
	}
	int bad = buf_write_fd(fd, p, n) < 0;
	if (close(fd) < 0 || bad || rename(tmp.data, path) < 0) {
		unlink(tmp.data);
		buf_free(&tmp);
		return -1;
	}
	buf_free(&tmp);
	return 0;
}

void front_print_log(const char *log, size_t len, const char *name)
{
	/* A diagnostic's location, and llc's "error: '<stdin>': ..." */
	static const char tag[] = "<stdin>:", quoted[] = "error: '<stdin>':";
	size_t tl = sizeof tag - 1, ql = sizeof quoted - 1;
	const char *p = log, *end = log + len, *q;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t line = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		if (name && line >= tl && memcmp(p, tag, tl) == 0) {
			fprintf(stderr, "%s:", name);
			fwrite(p + tl, 1, line - tl, stderr);
		} else if (name && (q = memmem(p, line, quoted, ql))) {
			fwrite(p, 1, (size_t)(q - p), stderr);
			fprintf(stderr, "error: '%s':", name);
			fwrite(q + ql, 1, line - (size_t)(q - p) - ql, stderr);
		} else {
			fwrite(p, 1, line, stderr);
		}
		p += line;
	}
}
