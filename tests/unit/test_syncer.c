/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon/syncer.c with the process out of descriptors, for real
 * (RLIMIT_NOFILE lowered to the descriptors already open): every request
 * is refused (the caller syncs on the loop), the warning is said once for
 * the run of failures, and once descriptors come back the next request
 * starts the thread and is synced and answered.
 */
#include "tests/unit/unit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/syncer.h"

static int synced, answered, answer_err = -1;

static int count_sync(void *arg)
{
	(void)arg;
	synced++;
	return 0;
}

static void count_done(void *arg, int err)
{
	(void)arg;
	answered++;
	answer_err = err;
}

/* How many times needle is in what was logged to fd. */
static int times_in(int fd, const char *needle)
{
	char buf[4096];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	int count = 0;

	if (n < 0)
		return -1;
	buf[n] = 0;
	for (char *p = buf; (p = strstr(p, needle)); p += strlen(needle))
		count++;
	return count;
}

TEST(syncer_out_of_descriptors_warns_once_and_recovers)
{
	char path[512];
	struct rlimit old, none;
	int saved_log = log_fd, logged, lowest;

	snprintf(path, sizeof path, "%s/log", unit_tmpdir());
	logged = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	REQUIRE(logged >= 0);
	struct event_base *base = event_base_new();
	struct syncer *s = syncer_new(base);
	REQUIRE(base && s);

	/* The lowest free descriptor: none at or above it may be made. */
	lowest = open("/dev/null", O_RDONLY | O_CLOEXEC);
	REQUIRE(lowest >= 0);
	close(lowest);
	REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
	none = old;
	none.rlim_cur = (rlim_t)lowest;
	REQUIRE(setrlimit(RLIMIT_NOFILE, &none) == 0);
	log_fd = logged;
	int refused = 0;
	for (int i = 0; i < 3; i++)
		refused += syncer_sync(s, count_sync, count_done, NULL) < 0;
	setrlimit(RLIMIT_NOFILE, &old);

	CHECK(refused == 3);
	CHECK(times_in(logged, "syncer: pipe") == 1);
	CHECK(times_in(logged, strerror(EMFILE)) == 1);

	/* Descriptors again: the thread starts and the request is answered. */
	CHECK(syncer_sync(s, count_sync, count_done, NULL) == 0);
	for (int i = 0; i < 500 && !answered; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		usleep(10000);
	}
	CHECK(synced == 1);
	CHECK(answered == 1);
	CHECK(answer_err == 0);
	CHECK(times_in(logged, "syncer:") == 1);     /* and nothing more said */

	log_fd = saved_log;
	syncer_free(s);
	event_base_free(base);
	close(logged);
}
