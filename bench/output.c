/* SPDX-License-Identifier: Apache-2.0 */
/*
 * output: the figures written out. results.json (its key names are the
 * contract of `make bench`; null where a figure was not measured), its
 * numbers written from one table of keys and values in the order of the
 * contract, then the context beyond it; and the table on stdout, a row a
 * figure with its ratio to what it replaces.
 */
#include "bench/bench.h"

/* ---- output ---- */

/* The corpus asked for again, for what a build wants in the end: cubin
 * where the daemon assembles, else PTX. */
static double repeat_ms(const struct figures *x)
{
	return isnan(x->hit_cubin_ms) ? x->hit_ptx_ms : x->hit_cubin_ms;
}

static void jnum(FILE *f, const char *key, double v, int last)
{
	if (isnan(v))
		fprintf(f, "  \"%s\": null%s\n", key, last ? "" : ",");
	else if (v == floor(v) && fabs(v) < 1e15)
		fprintf(f, "  \"%s\": %.0f%s\n", key, v, last ? "" : ",");
	else
		fprintf(f, "  \"%s\": %.3f%s\n", key, v, last ? "" : ",");
}

/* A count: null when it was not measured (negative). */
static double count(long long v)
{
	return v < 0 ? NAN : (double)v;
}

static void jval(FILE *f, double v)
{
	if (isnan(v))
		fputs("null", f);
	else
		fprintf(f, "%.3f", v);
}

void write_json(const struct figures *x, const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		die("cannot write '%s': %s", path, strerror(errno));
	/* The numbers, in the contract's order: null where not measured. */
	const struct {
		const char *key;
		double v;
	} num[] = {
		{ "corpus_kernels", g.nk },
		{ "cold_llc_ms", x->cold_llc_ms },
		{ "cold_ptxas_ms", x->cold_ptxas_ms },
		{ "miss_ptx_ms", x->miss_ptx_ms },
		{ "miss_sandbox_ms", x->miss_sandbox_ms },
		{ "miss_nosandbox_ms", x->miss_nosandbox_ms },
		{ "worker_start_ms", x->worker_start_ms },
		{ "exec_worker_ms", x->exec_worker_ms },
		{ "fork_exit_ms", x->fork_exit_ms },
		{ "user1_compiles", count(x->user1_compiles) },
		{ "user2_compiles", count(x->user2_compiles) },
		{ "user2_confirmations", count(x->user2_confirmations) },
		{ "user2_mismatches", count(x->user2_mismatches) },
		{ "miss_cubin_ms", x->miss_cubin_ms },
		{ "hit_ptx_ms", x->hit_ptx_ms },
		{ "hit_cubin_ms", x->hit_cubin_ms },
		{ "hit_p50_us", x->hit_p50_us },
		{ "hit_p99_us", x->hit_p99_us },
		{ "floor_p50_us", x->floor_p50_us },
		{ "ranks8_wall_ms", x->ranks8_wall_ms },
		{ "ranks1_wall_ms", x->ranks1_wall_ms },
		{ "ranks8_compiles", count(x->ranks8_compiles) },
		{ "first_request_ms", x->first_request_ms },
		{ "steady_request_ms", x->steady_request_ms },
		{ "stored_bytes", count(x->stored_bytes) },
		{ "raw_bytes", count(x->raw_bytes) },
		{ "daemon_rss_kb", count(x->daemon_rss_kb) },
		{ "hits_per_s", x->hits_per_s },
		{ "fresh_run_lineinfo_hit_pct", x->fresh_hit_pct },
		/* Beyond the contract: context for the figures above. */
		{ "floor_p99_us", x->floor_p99_us },
		{ "hit_cubin_p50_us", x->hit_cubin_p50_us },
		{ "ranks1_compiles", count(x->ranks1_compiles) },
		{ "daemon_start_ms", x->daemon_start_ms },
		{ "warm_up_ms", x->warm_up_ms },
		{ "ptx_identical_to_llc", count(x->ptx_identical) },
		{ "distinct_kernels", g.distinct },
		{ "repeat_speedup_vs_cold", (x->cold_llc_ms + (isnan(x->cold_ptxas_ms) ? 0 :
					      x->cold_ptxas_ms)) / repeat_ms(x) },
		{ "hit_p50_over_floor", x->hit_p50_us / x->floor_p50_us },
		{ "first_over_steady", x->first_request_ms / x->steady_request_ms },
		{ "miss_master_cpu_us", x->miss_master_cpu_us },
		{ "miss_workers_cpu_us", x->miss_workers_cpu_us },
		{ "steady_master_cpu_us", x->steady_master_cpu_us },
		{ "hit_master_cpu_us", x->hit_master_cpu_us },
		{ "first_compile_us", x->first_compile_us },
		{ "steady_compile_us", x->steady_compile_us },
		{ "artifact_hit_4k_p50_us", x->art_hit_us[0] },
		{ "artifact_floor_4k_p50_us", x->art_floor_us[0] },
		{ "artifact_hit_4m_p50_us", x->art_hit_us[1] },
		{ "artifact_floor_4m_p50_us", x->art_floor_us[1] },
		{ "l2_node1_first_pass_ms", x->l2_node1_pass_ms },
		{ "l2_node2_first_pass_ms", x->l2_node2_pass_ms },
		{ "l2_node2_compiles", count(x->l2_node2_compiles) },
		{ "l2_node2_hits", count(x->l2_node2_hits) },
	};

	fputs("{\n", f);
	for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
		jnum(f, num[i].key, num[i].v, 0);
	fprintf(f, "  \"quick\": %s,\n  \"workers\": %d,\n", g.quick ? "true" : "false",
		g.workers);
	fputs("  \"notes\": [", f);
	for (int i = 0; i < g.nnotes; i++) {
		fputs(i ? ", \"" : "\"", f);
		for (const char *p = g.notes[i]; *p; p++) {
			if (*p == '"' || *p == '\\')
				fputc('\\', f);
			fputc((unsigned char)*p < 0x20 ? ' ' : *p, f);
		}
		fputc('"', f);
	}
	fputs("],\n  \"per_kernel\": [\n", f);
	for (int i = 0; i < g.nk; i++) {
		const struct kernel *k = &g.k[i];
		const struct {
			const char *key;
			double v;
		} per[] = {
			{ "cold_llc_ms", k->cold_llc_ms },
			{ "cold_ptxas_ms", k->cold_ptxas_ms },
			{ "miss_ptx_ms", k->miss_ptx_ms },
			{ "miss_cubin_ms", g.k[i].cubin_len ? k->miss_cubin_ms : NAN },
			{ "hit_ptx_us", k->hit_ptx_us },
			{ "hit_cubin_us", k->hit_cubin_us },
			{ "floor_us", k->floor_us },
		};
		fprintf(f, "    {\"name\": \"%s\", \"ir_bytes\": %zu, \"ptx_bytes\": %zu, "
			"\"cubin_bytes\": %zu", k->name, k->ir_len, k->ptx_len, k->cubin_len);
		for (size_t j = 0; j < sizeof per / sizeof per[0]; j++) {
			fprintf(f, ", \"%s\": ", per[j].key);
			jval(f, per[j].v);
		}
		fprintf(f, "}%s\n", i + 1 < g.nk ? "," : "");
	}
	fputs("  ]\n}\n", f);
	if (fclose(f) != 0)
		die("cannot write '%s'", path);
}

void row(const char *what, double v, const char *unit, const char *ratio_what,
	 double ratio)
{
	char val[32], rat[64] = "";

	if (isnan(v))
		snprintf(val, sizeof val, "null");
	else
		snprintf(val, sizeof val, v >= 100 ? "%.0f %s" : "%.3g %s", v, unit);
	if (ratio_what && !isnan(ratio))
		snprintf(rat, sizeof rat, "%s %.3gx", ratio_what, ratio);
	else if (ratio_what)
		snprintf(rat, sizeof rat, "%s null", ratio_what);
	printf("  %-34s %14s   %s\n", what, val, rat);
}

void print_table(const struct figures *x)
{
	double cold = x->cold_llc_ms + (isnan(x->cold_ptxas_ms) ? 0 : x->cold_ptxas_ms);
	double miss = x->miss_ptx_ms + (isnan(x->miss_cubin_ms) ? 0 : x->miss_cubin_ms);

	printf("\nptxcache bench: %d kernels (%d distinct IR)%s, %d workers\n\n", g.nk,
	       g.distinct, g.quick ? " (QUICK subset)" : "", g.workers);
	row("cold llc, a process per kernel", x->cold_llc_ms, "ms", NULL, 0);
	row("cold ptxas, a process per kernel", x->cold_ptxas_ms, "ms", NULL, 0);
	row("miss ptx, warm daemon", x->miss_ptx_ms, "ms", "cold llc /",
	    x->cold_llc_ms / x->miss_ptx_ms);
	row("miss cubin, warm daemon", x->miss_cubin_ms, "ms", "cold ptxas /",
	    x->cold_ptxas_ms / x->miss_cubin_ms);
	row("hit ptx, whole corpus", x->hit_ptx_ms, "ms", "cold llc /",
	    x->cold_llc_ms / x->hit_ptx_ms);
	row("hit cubin, whole corpus", x->hit_cubin_ms, "ms", "cold ptxas /",
	    x->cold_ptxas_ms / x->hit_cubin_ms);
	row("corpus repeat (final artifact hits)", repeat_ms(x), "ms", "cold llc+ptxas /",
	    cold / repeat_ms(x));
	row("miss ptx then cubin, warm daemon", miss, "ms", "cold llc+ptxas /", cold / miss);
	row("hit p50 per request", x->hit_p50_us, "us", "/ floor", x->hit_p50_us / x->floor_p50_us);
	row("hit p99 per request", x->hit_p99_us, "us", "/ floor p99",
	    x->hit_p99_us / x->floor_p99_us);
	row("floor p50 (echo + SHA-256)", x->floor_p50_us, "us", NULL, 0);
	row("artifact hit p50, 4 KiB", x->art_hit_us[0], "us", "/ floor", x->art_hit_us[0] /
	    x->art_floor_us[0]);
	row("artifact hit p50, 4 MiB", x->art_hit_us[1], "us", "/ floor", x->art_hit_us[1] /
	    x->art_floor_us[1]);
	row("8 ranks, empty cache, wall", x->ranks8_wall_ms, "ms", "/ 1 rank",
	    x->ranks8_wall_ms / x->ranks1_wall_ms);
	row("1 rank, empty cache, wall", x->ranks1_wall_ms, "ms", NULL, 0);
	row("compiles for 8 ranks", (double)x->ranks8_compiles, "", "per distinct kernel",
	    (double)x->ranks8_compiles / g.distinct);
	row("start to ready (workers warm)", x->daemon_start_ms, "ms", NULL, 0);
	row("first request after start", x->first_request_ms, "ms", "/ steady",
	    x->first_request_ms / x->steady_request_ms);
	row("steady request (same kernel, miss)", x->steady_request_ms, "ms", NULL, 0);
	row("stored bytes", (double)x->stored_bytes, "B", "raw /",
	    (double)x->raw_bytes / (double)x->stored_bytes);
	row("raw ptx+cubin bytes", (double)x->raw_bytes, "B", NULL, 0);
	row("daemon rss (master + workers)", (double)x->daemon_rss_kb, "kB", NULL, 0);
	row("hits/s, 16 clients", x->hits_per_s, "/s", NULL, 0);
	row("2nd fresh run, -lineinfo cubin hits", x->fresh_hit_pct, "%", NULL, 0);
	row("miss ptx, sandbox on", x->miss_sandbox_ms, "ms", "/ off",
	    x->miss_sandbox_ms / x->miss_nosandbox_ms);
	row("miss ptx, sandbox off", x->miss_nosandbox_ms, "ms", NULL, 0);
	row("worker start (exec, LLVM, warm-up)", x->worker_start_ms, "ms", NULL, 0);
	row("exec of the worker image", x->exec_worker_ms, "ms", "/ bare fork",
	    x->exec_worker_ms / x->fork_exit_ms);
	row("compiles, 1st user, corpus", (double)x->user1_compiles, "", NULL, 0);
	row("compiles, 2nd user, same corpus", (double)x->user2_compiles, "", NULL, 0);
	row("confirmations, 2nd user", (double)x->user2_confirmations, "", NULL, 0);
	row("confirmation mismatches", (double)x->user2_mismatches, "", NULL, 0);
	row("node 1 first pass (compiles, Redis)", x->l2_node1_pass_ms, "ms", "/ misses",
	    x->l2_node1_pass_ms / x->miss_ptx_ms);
	row("node 2 first pass (from Redis)", x->l2_node2_pass_ms, "ms", "node 1 /",
	    x->l2_node1_pass_ms / x->l2_node2_pass_ms);
	row("node 2 compiles", x->l2_node2_compiles < 0 ? NAN : (double)x->l2_node2_compiles,
	    "", NULL, 0);
	printf("\n  daemon PTX identical to llc's for %d of %d kernels\n",
	       x->ptx_identical, g.nk);
	for (int i = 0; i < g.nnotes; i++)
		printf("  note: %s\n", g.notes[i]);
}
