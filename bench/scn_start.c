/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_start: start-up. Fresh daemons on empty caches, one after the
 * other: spawn to ready (the first answer waits for the workers' warm-up),
 * the daemon's own warm-up figure, and the first request after that.
 */
#include "bench/bench.h"

/* Fresh daemons on empty caches, one after the other: the time from spawn
 * to ready (the first answer, which waits for the workers' warm-up), the
 * daemon's own warm-up figure, and the first request after that: a miss on
 * the smallest kernel. Medians over the starts: one start alone is at the
 * mercy of the machine's noise. */
void start_runs(struct figures *f)
{
	enum { STARTS = 5 };
	double first[STARTS], ready[STARTS], warm[STARTS], compile[STARTS];
	int n = STARTS;
	struct kernel *sm = smallest();

	for (int i = 0; i < n; i++) {
		struct daemon d;
		char name[32];
		size_t len;

		snprintf(name, sizeof name, "start%d", i);
		daemon_start(&d, name);
		ready[i] = d.start_ms;
		ptxcache *pc = connect_or_die(d.sock);
		char *ir = with_nonce(sm, 1000 + i, &len);
		first[i] = timed_req(ptx_req, pc, ir, len, 0, "first request", NULL);
		compile[i] = (double)last_compile_us;
		free(ir);
		ptxcache_close(pc);
		warm[i] = (double)stat_of(d.sock, "warm_up_ms");
		daemon_stop(&d);
	}
	f->first_request_ms = quantile(first, (size_t)n, 0.5);
	f->first_compile_us = quantile(compile, (size_t)n, 0.5);
	f->daemon_start_ms = quantile(ready, (size_t)n, 0.5);
	f->warm_up_ms = quantile(warm, (size_t)n, 0.5);
}
