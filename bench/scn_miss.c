/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_miss: misses through a warm daemon, one client, one request at a
 * time: the corpus (PTX, then cubin where the daemon assembles), the CPU
 * time of the master and of its workers, and steady misses of the smallest
 * kernel; and --miss-loop, the same misses for a profiler.
 */
#include "bench/bench.h"

void miss_runs(struct figures *f, const struct daemon *d, int cubin)
{
	ptxcache *pc = connect_or_die(d->sock);
	struct kernel *sm = smallest();
	double st[5];
	size_t n;
	char *ir;

	f->miss_ptx_ms = 0;
	f->ptx_identical = 0;
	double mcpu = cpu_ns(d->pid), wcpu = children_cpu_ns(d->pid);
	for (int i = 0; i < g.nk; i++) {
		struct kernel *k = &g.k[i];
		struct ptxcache_compile_req r;
		struct ptxcache_result res;
		char path[400];
		size_t cn = 0;

		kernel_req(&r, k->ir, k->ir_len);
		double t0 = bench_now_ms();
		if (ptxcache_compile(pc, &r, &res) < 0)
			die("miss %s: %s", k->name, ptxcache_errmsg(pc));
		k->miss_ptx_ms = bench_now_ms() - t0;
		if (res.status != PTXCACHE_OK || res.cached != k->dup)
			die("miss %s: status %d, cached %d", k->name, res.status, res.cached);
		f->miss_ptx_ms += k->miss_ptx_ms;
		k->ptx_len = res.output_len;
		snprintf(path, sizeof path, "%s/cold/%s.ptx", g.tmp, k->name);
		char *cold = read_file(path, &cn);
		f->ptx_identical += cold && cn == res.output_len &&
				    !memcmp(cold, res.output, cn);
		free(cold);
		ptxcache_result_free(&res);
	}
	f->miss_master_cpu_us = (cpu_ns(d->pid) - mcpu) / 1e3 / g.nk;
	f->miss_workers_cpu_us = (children_cpu_ns(d->pid) - wcpu) / 1e3 / g.nk;
	double scpu = 0, sc[5];
	/* The corpus's confirmations done, then misses one after the other,
	 * as a warm daemon sees them: each one's confirmation starts after
	 * its reply, and waits (stopped) while the next compiles. */
	settle(d->sock);
	for (int i = 0; i < 5; i++) {
		ir = with_nonce(sm, i + 1, &n);
		mcpu = cpu_ns(d->pid);
		st[i] = timed_req(ptx_req, pc, ir, n, 0, "steady request", NULL);
		scpu += cpu_ns(d->pid) - mcpu;
		sc[i] = (double)last_compile_us;
		free(ir);
	}
	f->steady_compile_us = quantile(sc, 5, 0.5);
	f->steady_request_ms = quantile(st, 5, 0.5);
	f->steady_master_cpu_us = scpu / 1e3 / 5;
	ptxcache_close(pc);

	f->miss_cubin_ms = NAN;
	if (!cubin)
		return;
	pc = connect_or_die(d->sock);
	f->miss_cubin_ms = 0;
	for (int i = 0; i < g.nk; i++) {
		struct kernel *k = &g.k[i];
		/* -1: kernels of different IR may share their PTX, and the cubin
		 * stage is keyed on the PTX. */
		k->miss_cubin_ms = timed_req(cubin_req, pc, k->ir, k->ir_len, k->dup ? 1 : -1,
					     k->name, &k->cubin_len);
		f->miss_cubin_ms += k->miss_cubin_ms;
	}
	ptxcache_close(pc);
}

/* For profiling the miss path (bench/NOTES.md): a fresh daemon, its pid on
 * stdout, a second to attach a profiler, then misses of the smallest
 * kernel (a new nonce each: the same compile, a new key) from one client
 * for a while ("end" on stdout, and a second before the daemon stops).
 * Prints the p50 of their wall time and the CPU time per miss of the
 * master, of its workers and of the client (measured before that second). */
void miss_loop(double seconds)
{
	struct kernel *sm = smallest();
	struct daemon d;
	size_t len;
	char *ir;

	snprintf(g.tmp, sizeof g.tmp, "/tmp/ptxcache-bench-XXXXXX");
	if (!mkdtemp(g.tmp))
		die("cannot create a temp dir: %s", strerror(errno));
	daemon_start(&d, "loop");
	ptxcache *pc = connect_or_die(d.sock);
	ir = with_nonce(sm, 0, &len);   /* every worker past its first compile */
	for (int i = 0; i < 2 * g.workers; i++) {
		free(ir);
		ir = with_nonce(sm, -1 - i, &len);
		timed_req(ptx_req, pc, ir, len, 0, "warm-up", NULL);
	}
	free(ir);
	printf("%d\n", (int)d.pid);
	fflush(stdout);
	sleep(1);
	size_t cap = 1 << 16, n = 0;
	double *t = malloc(cap * sizeof *t), *cu = malloc(cap * sizeof *cu);
	if (!t || !cu)
		die("out of memory");
	double end = bench_now_ms() + seconds * 1e3;
	double dcpu = cpu_ns(d.pid), wcpu = children_cpu_ns(d.pid), ccpu = cpu_ns(getpid());
	while (bench_now_ms() < end && n < cap) {
		struct ptxcache_result res;
		ir = with_nonce(sm, (int)n + 1, &len);
		double t0 = bench_now_ms();
		if (ptx_req(pc, ir, len, &res) < 0)
			die("miss: %s", ptxcache_errmsg(pc));
		t[n] = bench_now_ms() - t0;
		if (res.status != PTXCACHE_OK || res.cached)
			die("miss: status %d, cached %d", res.status, res.cached);
		cu[n++] = (double)res.compile_us / 1e3;
		ptxcache_result_free(&res);
		free(ir);
	}
	double dn = (double)n;
	dcpu = cpu_ns(d.pid) - dcpu;
	wcpu = children_cpu_ns(d.pid) - wcpu;
	ccpu = cpu_ns(getpid()) - ccpu;
	/* A second more before the stop, to dump a profiler's counters. */
	printf("end\n");
	fflush(stdout);
	sleep(1);
	double p50 = quantile(t, n, 0.5), cu50;
	for (size_t i = 0; i < n; i++)
		t[i] = (t[i] - cu[i]) * 1e3;    /* around the worker's compile, us */
	cu50 = quantile(cu, n, 0.5);
	fprintf(stderr, "bench: %zu misses of %s, p50 %.3f ms, the worker's compile_us p50 "
		"%.3f ms, the rest p50 %.0f us; cpu per miss: master %.1f us, workers %.1f us, "
		"client %.1f us\n", n, sm->name, p50, cu50, quantile(t, n, 0.5),
		dcpu / 1e3 / dn, wcpu / 1e3 / dn, ccpu / 1e3 / dn);
	free(t);
	free(cu);
	ptxcache_close(pc);
	daemon_stop(&d);
	char *rm[] = { "/bin/rm", "-rf", g.tmp, NULL };
	run_timed(rm);
}
