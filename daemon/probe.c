/* SPDX-License-Identifier: Apache-2.0 */
/*
 * probe: test-only attacks from inside a worker, to prove the sandbox.
 *
 * Built only into build/ptxcached-probe (make's PTXCACHE_PROBES; release
 * binaries have neither this file nor the hook in worker.c, and a test
 * checks that they compile a probe's input as the plain module it is).
 * A compile job whose input begins with the line
 *
 *     ; ptxcache-probe: NAME [ARG]        (IR, a compile worker)
 *     // ptxcache-probe: NAME [ARG]       (PTX, an assembler worker)
 *
 * runs attack NAME in the worker instead of compiling, as code that took
 * the worker over through a bug in LLVM or ptxas would. The job answers
 * with status 2 and "NAME: ok" (the attack worked) or "NAME: <errno text>"
 * (the kernel refused it); a call the seccomp filter does not allow kills
 * the worker with SIGSYS instead, which the master counts as a violation.
 * "compromise" stands for a worker already taken over: from then on it
 * answers every compile with altered PTX (confirmation must catch it).
 * "fatal-linger MB": the worker answers as after LLVM's fatal error (which
 * promises its exit), then writes MB MiB of junk to the master and sleeps
 * instead of exiting (worker_loop.c does it: probe_linger_mb).
 * "spin MS" is no attack: a compile that takes MS ms of CPU (stopped
 * time does not count), for tests of what waits for what.
 * "slow SECONDS" is no attack: the worker sleeps, then compiles or
 * assembles the input as usual (a compile that really takes that long, for
 * the tests of progress frames and the clients' silence bound).
 */
#include "daemon/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int probe_compromised;
long probe_linger_mb = -1;

static int attack(const char *name, const char *arg)
{
	if (!strcmp(name, "open-cache") || !strcmp(name, "write-file")) {
		int fd = open(arg, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd >= 0 && write(fd, "x", 1) == 1)
			return close(fd);
		return -1;
	}
	if (!strcmp(name, "read-passwd"))
		return open("/etc/passwd", O_RDONLY | O_CLOEXEC) < 0 ? -1 : 0;
	if (!strcmp(name, "inet-socket"))
		return socket(AF_INET, SOCK_STREAM, 0) < 0 ? -1 : 0;
	if (!strcmp(name, "inet-connect")) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(9),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		if (s < 0)
			return -1;
		return connect(s, (struct sockaddr *)&a, sizeof a) < 0 && errno != ECONNREFUSED ? -1 : 0;
	}
	if (!strcmp(name, "connect-daemon")) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		snprintf(a.sun_path, sizeof a.sun_path, "%s", arg);
		return s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0 ? -1 : 0;
	}
	if (!strcmp(name, "exec-shell")) {
		char *argv[] = { (char *)"sh", (char *)"-c", (char *)"exit 0", NULL };
		execve("/bin/sh", argv, NULL);
		return -1;
	}
	if (!strcmp(name, "ptrace-master"))
		return ptrace(PTRACE_ATTACH, getppid(), NULL, NULL) < 0 ? -1 : 0;
	if (!strcmp(name, "kill-master"))
		return kill(getppid(), SIGSTOP);
	if (!strcmp(name, "spin")) {
		struct timespec t;
		double from = -1, used;
		do {
			clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
			used = (double)t.tv_sec + (double)t.tv_nsec / 1e9;
			if (from < 0)
				from = used;
		} while (used - from < atof(arg) / 1e3);
		return 0;
	}
	if (!strcmp(name, "fatal-linger")) {
		probe_linger_mb = atol(arg);
		return 0;
	}
	if (!strcmp(name, "compromise")) {
		probe_compromised = 1;  /* worker.c alters every PTX from now on */
		return 0;
	}
	if (!strcmp(name, "read-master-memory")) {
		char p[64];
		snprintf(p, sizeof p, "/proc/%d/mem", (int)getppid());
		return open(p, O_RDONLY | O_CLOEXEC) < 0 ? -1 : 0;
	}
	errno = EINVAL;
	return -1;
}

int probe_run(const char *input, size_t len, struct buf *log)
{
	static const char *const marks[] = { "; ptxcache-probe: ", "// ptxcache-probe: " };
	char line[512], name[64] = "", arg[400] = "";

	for (size_t i = 0; i < 2; i++) {
		size_t ml = strlen(marks[i]);
		if (len <= ml || memcmp(input, marks[i], ml) != 0)
			continue;
		const char *nl = memchr(input, '\n', len);
		size_t n = (size_t)((nl ? nl : input + len) - input) - ml;
		snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1),
			 input + ml);
		if (sscanf(line, "%63s %399s", name, arg) < 1)
			return 0;
		if (!strcmp(name, "slow")) {
			struct timespec ts = { atoi(arg), 0 };
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
			return 0;
		}
		int r = attack(name, arg);
		buf_printf(log, "%s: %s\n", name, r == 0 ? "ok" : strerror(errno));
		return 1;
	}
	return 0;
}
