/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slowsync: a slow disk for tests, which no test machine has for real. An
 * LD_PRELOAD library: fsync() of a file whose path holds $SLOWSYNC_MATCH
 * sleeps $SLOWSYNC_MS milliseconds first, and appends that path to
 * $SLOWSYNC_LOG (so a test knows the fault was there). Every other call
 * goes straight to libc's. tests/test_large.py gives the daemon a slow
 * fsync of a put's file this way.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int fsync(int fd)
{
	static int (*real)(int);
	const char *match = getenv("SLOWSYNC_MATCH"), *ms = getenv("SLOWSYNC_MS");
	const char *log = getenv("SLOWSYNC_LOG");
	char link[64], path[4096];
	ssize_t n;

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	if (match && ms && (n = readlink(link, path, sizeof path - 1)) > 0) {
		path[n] = '\0';
		if (strstr(path, match)) {
			long t = atol(ms);
			struct timespec ts = { t / 1000, (t % 1000) * 1000000L };
			nanosleep(&ts, NULL);
			int lfd = log ? open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
			if (lfd >= 0) {
				path[n] = '\n';
				ssize_t w = write(lfd, path, (size_t)n + 1);
				(void)w;
				close(lfd);
			}
		}
	}
	return real(fd);
}
