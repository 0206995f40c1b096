/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_trust: the trust boundary. Misses with the workers' sandbox on and
 * off, the exec of a worker against a bare fork, and, as root, one user's
 * corpus and a second user's: one confirmation per kernel, no mismatch.
 */
#include "bench/bench.h"

/* ---- the trust boundary ---- */

/* The median time, in ms, of n forks whose child runs argv (NULL: exits
 * at once), to the parent's wait, whatever the child's exit status. */
static double median_spawn(char *const argv[], int n)
{
	double v[32];
	n = n < 32 ? n : 32;
	for (int i = 0; i < n; i++) {
		double t0 = bench_now_ms();
		pid_t p = fork();
		if (p == 0) {
			if (argv) {
				int fd = open("/dev/null", O_WRONLY);
				dup2(fd, 2);
				/* no socket on fd 3 (the syscall: glibc 2.31 has no wrapper) */
				syscall(SYS_close_range, 3, ~0U, 0);
				execv(argv[0], argv);
			}
			_exit(0);
		}
		waitpid(p, NULL, 0);
		v[i] = bench_now_ms() - t0;
	}
	return quantile(v, (size_t)n, 0.5);
}

/*
 * Workers are exec'd and sandboxed, and each serves one user (the trust
 * boundary): misses over the corpus with the sandbox on and off, in turn;
 * the exec of the daemon's image in worker mode (to its first check and
 * exit) beside a bare fork, and a worker's whole start (warm_up_ms); then,
 * as root, the corpus for one user and again for a second (nobody): one
 * confirmation per kernel, no mismatch.
 */
void trust_runs(struct figures *f)
{
	struct daemon on, off;
	const char *const no_sandbox[] = { "--sandbox", "off", NULL };
	const char *const two_users[] = { "--allow-users", "65534", NULL };

	/* Twice each, alternating, on fresh caches; the better of each. */
	f->miss_sandbox_ms = f->miss_nosandbox_ms = INFINITY;
	for (int round = 0; round < 2; round++) {
		char name[32];
		snprintf(name, sizeof name, "sandbox-on-%d", round);
		daemon_start(&on, name);
		f->worker_start_ms = (double)stat_of(on.sock, "warm_up_ms");
		f->miss_sandbox_ms = fmin(f->miss_sandbox_ms, corpus_pass(on.sock));
		daemon_stop(&on);
		snprintf(name, sizeof name, "sandbox-off-%d", round);
		daemon_start_with(&off, name, no_sandbox);
		f->miss_nosandbox_ms = fmin(f->miss_nosandbox_ms, corpus_pass(off.sock));
		daemon_stop(&off);
	}
	/* The daemon's image in worker mode, to its first check (no socket
	 * on fd 3: it exits), against a bare fork. */
	char *worker[] = { (char *)g.daemon, (char *)"--worker", NULL };
	f->exec_worker_ms = median_spawn(worker, 20);
	f->fork_exit_ms = median_spawn(NULL, 20);

	f->user1_compiles = f->user2_compiles = -1;
	f->user2_confirmations = f->user2_mismatches = -1;
	if (geteuid() != 0) {
		note("not root: no second user for the confirmation figures");
		return;
	}
	struct daemon d;
	daemon_start_with(&d, "two-users", two_users);
	chmod(g.tmp, 0755);
	chmod(d.dir, 0755);
	chmod(d.sock, 0666);
	corpus_pass(d.sock);
	f->user1_compiles = stat_of(d.sock, "compiles");
	pid_t p = fork();
	if (p == 0) {
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(1);
		corpus_pass(d.sock);
		_exit(0);
	}
	int st;
	waitpid(p, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		note("the second user's pass failed (status %d)", st);
	f->user2_compiles = stat_of(d.sock, "compiles") - f->user1_compiles;
	f->user2_confirmations = stat_of(d.sock, "confirmations");
	f->user2_mismatches = stat_of(d.sock, "confirm_mismatches");
	daemon_stop(&d);
}
