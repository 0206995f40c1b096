/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slowsync: a slow disk for tests, which no test machine has for real. An
 * LD_PRELOAD library: fsync() of a file whose path holds $SLOWSYNC_MATCH
 * sleeps $SLOWSYNC_MS milliseconds first, fdatasync() (SQLite's) of one
 * that holds $SLOWDATASYNC_MATCH sleeps $SLOWSYNC_MS, and unlinkat() of a
 * path that holds $SLOWUNLINK_MATCH sleeps $SLOWUNLINK_MS; each appends a
 * line ("fsync PATH", "fdatasync PATH", "unlink PATH") to $SLOWSYNC_LOG
 * after its sleep, so a test knows the fault was there and when it ended.
 * And a failing disk: the first fsync() of a path that holds
 * $FAILSYNC_MATCH fails with EIO ("fsync-failed PATH" logged) and every
 * later one succeeds, that file's too, as Linux reports a write-back
 * error to one fsync() only.
 * Every other call goes straight to libc's. tests/test_large.py gives the
 * daemon slow and failing fsyncs and slow unlinks this way,
 * tests/test_checkpoint.py slow checkpoints.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Append "op path" to $SLOWSYNC_LOG. */
static void note(const char *op, const char *path)
{
	const char *log = getenv("SLOWSYNC_LOG");
	char line[4200];
	int fd = log ? open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
	if (fd >= 0) {
		int n = snprintf(line, sizeof line, "%s %s\n", op, path);
		ssize_t w = write(fd, line, n < (int)sizeof line ? (size_t)n : sizeof line - 1);
		(void)w;
		close(fd);
	}
}

/* If path holds $match, sleep $ms and log "op path". */
static void slow(const char *op, const char *path, const char *match, const char *ms)
{
	if (!match || !ms || !strstr(path, match))
		return;
	long t = atol(ms);
	struct timespec ts = { t / 1000, (t % 1000) * 1000000L };
	nanosleep(&ts, NULL);
	note(op, path);
}

/* The path of fd (dirfd AT_FDCWD: the working directory), then /name. */
static void path_of(int fd, const char *name, char *out, size_t size)
{
	char link[64];
	ssize_t n = 0;

	if (name && name[0] == '/') {
		snprintf(out, size, "%s", name);
		return;
	}
	if (fd == AT_FDCWD)
		snprintf(link, sizeof link, "/proc/self/cwd");
	else
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, out, size - 1);
	out[n > 0 ? n : 0] = '\0';
	if (name)
		snprintf(out + strlen(out), size - strlen(out), "/%s", name);
}

/* Sleep first if fd's path holds $match (a sync's slowness). */
static void slow_fd(const char *op, int fd, const char *match)
{
	char path[4096];

	path_of(fd, NULL, path, sizeof path);
	slow(op, path, getenv(match), getenv("SLOWSYNC_MS"));
}

int fsync(int fd)
{
	static int (*real)(int);
	static int failed;              /* the one failure is done */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	const char *fail = getenv("FAILSYNC_MATCH");
	char path[4096];
	int first = 0;

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	slow_fd("fsync", fd, "SLOWSYNC_MATCH");
	path_of(fd, NULL, path, sizeof path);
	if (fail && strstr(path, fail)) {
		pthread_mutex_lock(&lock);
		first = !failed;
		failed = 1;
		pthread_mutex_unlock(&lock);
	}
	if (first) {
		note("fsync-failed", path);
		errno = EIO;
		return -1;
	}
	return real(fd);
}

int fdatasync(int fd)
{
	static int (*real)(int);

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	slow_fd("fdatasync", fd, "SLOWDATASYNC_MATCH");
	return real(fd);
}

int unlinkat(int dirfd, const char *name, int flags)
{
	static int (*real)(int, const char *, int);
	char path[4096];

	if (!real)
		real = (int (*)(int, const char *, int))dlsym(RTLD_NEXT, "unlinkat");
	path_of(dirfd, name, path, sizeof path);
	slow("unlink", path, getenv("SLOWUNLINK_MATCH"), getenv("SLOWUNLINK_MS"));
	return real(dirfd, name, flags);
}
