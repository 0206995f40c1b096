/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_hit: hits from one process through libptxcache, per request (p50,
 * p99) and per corpus pass, against the floor (harness.c's echo server,
 * the same request and reply sizes), each echo beside the hit of the same
 * kernel; and --hit-loop, hits for a profiler.
 */
#include "bench/bench.h"

/* Frame sizes of a hit's request and reply, as libptxcache and the daemon
 * build them, so the floor moves the same bytes. */
static void frame_sizes(struct kernel *k)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	char key[65];

	memset(key, 'a', 64);
	key[64] = '\0';
	msg_begin(&w, &b, FRAME_COMPILE);
	msg_put_int(&w, "id", 1000);
	msg_put_bin(&w, "input", k->ir, k->ir_len);
	msg_put_str(&w, "triple", "nvptx64-nvidia-cuda");
	msg_put_str(&w, "cpu", "sm_90a");
	msg_put_str(&w, "features", "+ptx90");
	msg_put_int(&w, "opt", 3);
	msg_put_bool(&w, "emit", 1);
	msg_put_bool(&w, "strict", 1);
	msg_end(&w);
	k->req_frame = b.len;
	buf_reset(&b);
	msg_begin(&w, &b, FRAME_COMPILE | FRAME_REPLY);
	msg_put_int(&w, "id", 1000);
	msg_put_int(&w, "status", 0);
	msg_put_bool(&w, "cached", 1);
	msg_put_str(&w, "key", key);
	msg_put_bin(&w, "output", "", 0);
	msg_end(&w);
	k->rep_frame = b.len + k->ptx_len;
	buf_free(&b);
}

void hit_runs(struct figures *f, const struct daemon *d, int cubin)
{
	/* 15 passes for QUICK's 10 kernels too: with 5, the p50 of 50 hits
	 * fell on one or another of the four kernels at the middle of the
	 * sizes, and hit p50 / floor moved from 1.13x to 1.46x between runs of
	 * one build (bench/NOTES.md). A pass of 10 hits takes about 4 ms. */
	int passes = 15;
	size_t n = (size_t)passes * (size_t)g.nk, maxlen = 0;
	double *hit = calloc(n, sizeof *hit), *flo = calloc(n, sizeof *flo);
	double *pass = calloc((size_t)passes, sizeof *pass);
	double *per = calloc((size_t)passes, sizeof *per);
	char path[400];

	if (!hit || !flo || !pass || !per)
		die("out of memory");
	for (int i = 0; i < g.nk; i++) {
		frame_sizes(&g.k[i]);
		if (g.k[i].req_frame > maxlen)
			maxlen = g.k[i].req_frame;
		if (g.k[i].rep_frame > maxlen)
			maxlen = g.k[i].rep_frame;
	}
	snprintf(path, sizeof path, "%s/floor.sock", g.tmp);
	pid_t fpid = floor_start(path, maxlen);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	set_path(&sa, path);
	int ffd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ffd < 0 || connect(ffd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("cannot connect to the floor server: %s", strerror(errno));
	char *req = calloc(1, maxlen + 8), *rep = malloc(maxlen);
	if (!req || !rep)
		die("out of memory");

	settle(d->sock);                /* the misses' confirmations */
	ptxcache *pc = connect_or_die(d->sock);
	double hcpu = 0;
	for (int p = 0; p < passes; p++) {
		/* Request by request, the echo then the hit of the same kernel,
		 * as artifact_runs() does: both see the machine as it is at
		 * that moment, and the same kernel's bytes just touched (the
		 * echo's copy into its frame, a JIT's IR it has just written).
		 * Passes of all echoes, then all hits, put each figure in a
		 * different few milliseconds of a shared machine: the floor's
		 * p50 alone moved by 40% from pass to pass (bench/NOTES.md). */
		double c0 = cpu_ns(d->pid);
		pass[p] = 0;
		for (int i = 0; i < g.nk; i++) {
			struct kernel *k = &g.k[i];
			uint32_t hdr[2] = { (uint32_t)k->req_frame, (uint32_t)k->rep_frame };
			memcpy(req, hdr, sizeof hdr);
			memcpy(req + 8, k->ir, k->ir_len < k->req_frame ? k->ir_len : k->req_frame);
			double t0 = bench_now_ms();
			if (write_full(ffd, req, 8 + k->req_frame) < 0 ||
			    read_full(ffd, rep, k->rep_frame) < 0)
				die("floor server failed");
			flo[(size_t)p * g.nk + i] = (bench_now_ms() - t0) * 1e3;
			double t = timed_req(ptx_req, pc, k->ir, k->ir_len, 1, k->name, NULL);
			hit[(size_t)p * g.nk + i] = t * 1e3;
			pass[p] += t;
		}
		hcpu += cpu_ns(d->pid) - c0;
	}
	f->hit_master_cpu_us = hcpu / 1e3 / (double)n;
	ptxcache_close(pc);
	close(ffd);
	waitpid(fpid, NULL, 0);

	/* Per-kernel medians for the chart, before the sorts below. */
	for (int i = 0; i < g.nk; i++) {
		for (int p = 0; p < passes; p++)
			per[p] = hit[(size_t)p * g.nk + i];
		g.k[i].hit_ptx_us = quantile(per, (size_t)passes, 0.5);
		for (int p = 0; p < passes; p++)
			per[p] = flo[(size_t)p * g.nk + i];
		g.k[i].floor_us = quantile(per, (size_t)passes, 0.5);
	}
	f->hit_ptx_ms = quantile(pass, (size_t)passes, 0.5);
	f->hit_p50_us = quantile(hit, n, 0.5);
	f->hit_p99_us = quantile(hit, n, 0.99);
	f->floor_p50_us = quantile(flo, n, 0.5);
	f->floor_p99_us = quantile(flo, n, 0.99);

	f->hit_cubin_ms = f->hit_cubin_p50_us = NAN;
	if (cubin) {
		pc = connect_or_die(d->sock);
		for (int p = 0; p < passes; p++) {
			double t0 = bench_now_ms();
			for (int i = 0; i < g.nk; i++) {
				struct kernel *k = &g.k[i];
				hit[(size_t)p * g.nk + i] = timed_req(cubin_req, pc, k->ir, k->ir_len, 1,
								      k->name, NULL) * 1e3;
			}
			pass[p] = bench_now_ms() - t0;
		}
		ptxcache_close(pc);
		for (int i = 0; i < g.nk; i++) {
			for (int p = 0; p < passes; p++)
				per[p] = hit[(size_t)p * g.nk + i];
			g.k[i].hit_cubin_us = quantile(per, (size_t)passes, 0.5);
		}
		f->hit_cubin_ms = quantile(pass, (size_t)passes, 0.5);
		f->hit_cubin_p50_us = quantile(hit, n, 0.5);
	} else {
		for (int i = 0; i < g.nk; i++)
			g.k[i].hit_cubin_us = NAN;
	}
	free(hit);
	free(flo);
	free(pass);
	free(per);
	free(req);
	free(rep);
}

/* For profiling the hit path (bench/NOTES.md): a daemon primed with the
 * corpus, its pid on stdout, a second to attach a profiler, then hits from
 * one client for a while (cubin: IR-to-cubin requests), then the hit and
 * floor passes of a full run. */
void hit_loop(double seconds, int cubin)
{
	struct daemon d;
	struct figures f;

	snprintf(g.tmp, sizeof g.tmp, "/tmp/ptxcache-bench-XXXXXX");
	if (!mkdtemp(g.tmp))
		die("cannot create a temp dir: %s", strerror(errno));
	daemon_start(&d, "loop");
	ptxcache *pc = connect_or_die(d.sock);
	for (int i = 0; i < g.nk; i++) {
		timed_req(ptx_req, pc, g.k[i].ir, g.k[i].ir_len, -1, g.k[i].name, &g.k[i].ptx_len);
		if (cubin)
			timed_req(cubin_req, pc, g.k[i].ir, g.k[i].ir_len, -1, g.k[i].name, NULL);
	}
	printf("%d\n", (int)d.pid);
	fflush(stdout);
	sleep(1);
	double end = bench_now_ms() + seconds * 1e3, t0 = bench_now_ms();
	double dcpu = cpu_ns(d.pid), ccpu = cpu_ns(getpid());
	long long n = 0;
	while (bench_now_ms() < end)
		for (int i = 0; i < g.nk; i++, n++)
			if (cubin)
				timed_req(cubin_req, pc, g.k[i].ir, g.k[i].ir_len, 1, g.k[i].name, NULL);
			else
				timed_req(ptx_req, pc, g.k[i].ir, g.k[i].ir_len, 1, g.k[i].name, NULL);
	ptxcache_close(pc);
	/* CPU time per hit holds up on a busy machine better than wall time. */
	fprintf(stderr, "bench: %lld hits, mean %.1f us; cpu per hit: daemon %.1f us, "
		"client %.1f us\n", n, (bench_now_ms() - t0) * 1e3 / (double)n,
		(cpu_ns(d.pid) - dcpu) / 1e3 / (double)n,
		(cpu_ns(getpid()) - ccpu) / 1e3 / (double)n);
	hit_runs(&f, &d, cubin);
	fprintf(stderr, "bench: hit cubin corpus pass %.1f ms, p50 %.1f us\n", f.hit_cubin_ms,
		f.hit_cubin_p50_us);
	fprintf(stderr, "bench: hit p50 %.1f us, p99 %.1f us; floor p50 %.1f us, p99 %.1f us; "
		"p50 ratio %.2f; corpus pass %.1f ms\n", f.hit_p50_us, f.hit_p99_us,
		f.floor_p50_us, f.floor_p99_us, f.hit_p50_us / f.floor_p50_us, f.hit_ptx_ms);
	daemon_stop(&d);
	char *rm[] = { "/bin/rm", "-rf", g.tmp, NULL };
	run_timed(rm);
}
