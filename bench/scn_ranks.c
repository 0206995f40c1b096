/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_ranks: eight processes asking for the same kernels from an empty
 * cache against one (single flight: compiles must equal kernels).
 */
#include "bench/bench.h"

/* Ranks: n processes, each the whole corpus in the same order, on an empty
 * cache, so for n > 1 the ranks ask for the same kernel at nearly the same
 * time, as the ranks of one job do. */
double ranks(int n, long long *compiles)
{
	struct daemon d;
	char name[32];
	long long made;
	size_t len;

	snprintf(name, sizeof name, "ranks%d", n);
	daemon_start(&d, name);
	/* One compile first, so every daemon is measured with a worker up. */
	ptxcache *pc = connect_or_die(d.sock);
	char *ir = with_nonce(smallest(), 0, &len);
	timed_req(ptx_req, pc, ir, len, 0, "warm-up", NULL);
	free(ir);
	ptxcache_close(pc);
	long long before = stat_of(d.sock, "compiles");
	double t = clients(d.sock, n, 0, &made);
	*compiles = stat_of(d.sock, "compiles") - before;
	daemon_stop(&d);
	return t;
}
