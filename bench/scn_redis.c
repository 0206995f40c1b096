/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_redis: two nodes sharing one real redis-server: a second node's
 * first pass over the corpus after a first node compiled it; and
 * --redis-only, that section alone against plain misses.
 */
#include "bench/bench.h"

/* ---- two nodes sharing Redis ---- */

/*
 * A second node's first pass over the corpus, after a first node compiled
 * it, both with empty local caches and one real redis-server between them:
 * the tier's promise is that the second pass costs what hits cost, not what
 * compiles cost. NAN (with a note) without redis-server.
 */
void second_node(struct figures *f)
{
	char dir[300], rsock[340], url[360], secret[340];
	struct daemon a, b;

	static int runs;        /* --redis-only runs this more than once */
	char n1[32], n2[32];

	f->l2_node1_pass_ms = f->l2_node2_pass_ms = NAN;
	f->l2_node2_compiles = f->l2_node2_hits = -1;
	snprintf(dir, sizeof dir, "%s/redis-%d", g.tmp, runs);
	snprintf(n1, sizeof n1, "node1-%d", runs);
	snprintf(n2, sizeof n2, "node2-%d", runs++);
	snprintf(rsock, sizeof rsock, "%s/redis.sock", dir);
	snprintf(url, sizeof url, "unix:%s", rsock);
	snprintf(secret, sizeof secret, "%s/secret", dir);
	mkdir(dir, 0700);
	int fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, "bench secret\n", 13) != 13)
		die("cannot write '%s'", secret);
	close(fd);
	pid_t redis = fork();
	if (redis == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", rsock,
		       "--save", "", "--appendonly", "no", "--dir", dir, (char *)NULL);
		_exit(127);
	}
	struct stat st;
	for (int i = 0; i < 500 && stat(rsock, &st) < 0; i++) {
		if (waitpid(redis, NULL, WNOHANG) == redis) {
			note("no redis-server: the second-node figures are null");
			return;
		}
		usleep(10000);
	}
	const char *const extra[] = { "--l2", url, "--l2-secret-file", secret, NULL };
	daemon_start_with(&a, n1, extra);
	f->l2_node1_pass_ms = corpus_pass(a.sock);
	/* Publishing is in the background: wait for every write, two a kernel
	 * under sharing = confirm (its user's own at once, everyone's once
	 * confirmed in idle time). */
	for (int i = 0; i < 3000 && stat_of(a.sock, "l2_writes") < 2 * g.distinct; i++)
		usleep(10000);
	daemon_stop(&a);
	daemon_start_with(&b, n2, extra);
	f->l2_node2_pass_ms = corpus_pass(b.sock);
	f->l2_node2_compiles = stat_of(b.sock, "compiles");
	f->l2_node2_hits = stat_of(b.sock, "l2_hits");
	daemon_stop(&b);
	kill(redis, SIGTERM);
	waitpid(redis, NULL, 0);
}

/* --redis-only: the two-node section alone, against plain misses (a
 * pass of misses through a fresh daemon without the tier, and one that
 * confirms nothing in the background either), the better of two each,
 * alternating; for work on the first pass with the tier on. */
void redis_runs(struct figures *f, double t0)
{
	double plain = INFINITY, bare = INFINITY, node1 = INFINITY;
	const char *const no_confirm[] = { "--confirm-workers", "0", NULL };

	for (int round = 0; round < 2; round++) {
		struct daemon d;
		char name[32];
		double t;
		snprintf(name, sizeof name, "plain-%d", round);
		daemon_start(&d, name);
		plain = fmin(plain, t = corpus_pass(d.sock));
		daemon_stop(&d);
		fprintf(stderr, "bench: round %d: plain misses %.0f ms\n", round, t);
		snprintf(name, sizeof name, "bare-%d", round);
		daemon_start_with(&d, name, no_confirm);
		bare = fmin(bare, t = corpus_pass(d.sock));
		daemon_stop(&d);
		fprintf(stderr, "bench: round %d: misses, no confirmation %.0f ms\n", round, t);
		second_node(f);
		node1 = fmin(node1, f->l2_node1_pass_ms);
		fprintf(stderr, "bench: round %d: node 1 %.0f ms, node 2 %.0f ms\n",
			round, f->l2_node1_pass_ms, f->l2_node2_pass_ms);
	}
	printf("\nptxcache bench --redis-only: %d kernels (%d distinct IR)%s, %d workers\n\n",
	       g.nk, g.distinct, g.quick ? " (QUICK subset)" : "", g.workers);
	row("plain misses (no tier)", plain, "ms", NULL, 0);
	row("misses, no confirmation at all", bare, "ms", NULL, 0);
	row("node 1 first pass (compiles, Redis)", node1, "ms", "/ plain", node1 / plain);
	row("node 1 first pass, again", node1, "ms", "/ no confirmation", node1 / bare);
	row("node 2 first pass (from Redis)", f->l2_node2_pass_ms, "ms", "node 1 /",
	    f->l2_node1_pass_ms / f->l2_node2_pass_ms);
	row("node 2 compiles", f->l2_node2_compiles < 0 ? NAN : (double)f->l2_node2_compiles,
	    "", NULL, 0);
	for (int i = 0; i < g.nnotes; i++)
		printf("  note: %s\n", g.notes[i]);
	printf("\n  %.0f s\n", (bench_now_ms() - t0) / 1e3);
	char *rm[] = { "/bin/rm", "-rf", g.tmp, NULL };
	run_timed(rm);
}
