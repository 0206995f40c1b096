/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench: ptxcache measured against the real alternatives, in one run.
 *
 * Over the kernels of the project's corpus (build/corpus/triton, unpacked
 * from tests/corpus), with private daemons on empty cache directories in a
 * temp dir, this measures:
 *
 *   cold     one llc process and one ptxas process per kernel (the tools
 *            ptxcache replaces), wall time per process;
 *   miss     one client, one request at a time, through a warm daemon;
 *   hit      the same requests again, from one process through libptxcache,
 *            per request (p50, p99) and per corpus pass;
 *   floor    a bare Unix-socket echo of the same request and reply sizes
 *            that SHA-256es each request: what any socket service must pay.
 *            Floor and hit passes alternate, so both see the same noise;
 *   ranks    eight processes asking for the same kernels from an empty
 *            cache versus one (single flight: compiles must equal kernels);
 *   start    spawn to ready (the daemon answers only once its workers are
 *            warm), and the first request after that versus steady state,
 *            each the median over several fresh daemons;
 *   size     bytes stored versus raw bytes, daemon memory, and hit
 *            throughput with 16 client processes;
 *   artifact a JIT cache artifact's hit (ptxcache_artifact_get) of 4 KiB
 *            and of 4 MiB, against the floor for the same frame sizes;
 *   large    values of 1, 8, 64 and 256 MiB (half text, half random
 *            bytes): a put through libptxcache and through the Python
 *            client against a write+fsync of the same bytes, a warm
 *            get through libptxcache (the value mapped, every page read)
 *            and through the Python client, each against reading the same
 *            bytes from a page-cached file into the process, and the
 *            daemon's peak RSS over its idle RSS for a get inline, by
 *            descriptor, and for the puts, and how long another
 *            client's 1 KiB hits wait while a put runs (--large runs
 *            this section alone). A second
 *            node's get of them through Redis belongs to bench/tier.py.
 *
 * Results go to OUT/results.json (the key names are the contract of
 * `make bench`; null where a figure cannot be measured, with a note) and a
 * table on stdout; bench/plot.py draws the chart from the JSON.
 *
 * --only start,miss,hit runs those sections alone (hit implies the miss
 * pass that fills the cache; no cold runs, so no cubin figures and no PTX
 * comparison), every other figure null: what bench/against.py runs, in
 * turn, with the daemon of an earlier commit and of this tree.
 *
 * Cubin figures (ptxcache_assemble() on the kernel's IR, both stages
 * cached) need a daemon that assembles (probed) and a ptxas; without them
 * they are null, with a note. Benchmarks are
 * not tests: nothing here fails on a slow figure, only on a wrong answer
 * (a hit that is not a hit, a compile that fails).
 *
 * Each client process holds its own handle (handles are not thread-safe);
 * concurrency is fork()ed processes released together through a pipe.
 *
 * The files: this one holds main, the options and the table of the full
 * run's sections (sections[], in order); harness.c what they stand on
 * (daemons, clock, requests, the floor, the corpus); output.c the JSON and
 * the table; each section a file of its own, scn_NAME.c (bench.h).
 */
#include "bench/bench.h"

static void usage(void)
{
	fputs("usage: bench [--quick] [--out DIR] [--corpus DIR] [--daemon PATH]\n"
	      "             [--llc PATH] [--workers N] [--hit-loop[-cubin] SECONDS]\n"
	      "             [--miss-loop SECONDS]\n"
	      "             [--redis-only] [--large] [--only start,miss,hit]\n", stderr);
	exit(2);
}

/* --only: the sections asked for, every other figure null, and a table
 * of what was measured. */
static void only_runs(struct figures *f, double t0)
{
	struct daemon d;
	char path[512];

	unmeasured(f);
	if (g.only & ONLY_START) {
		fprintf(stderr, "bench: fresh daemons: start to ready, first request\n");
		start_runs(f);
	}
	if (g.only & (ONLY_MISS | ONLY_HIT)) {
		fprintf(stderr, "bench: misses through a fresh daemon\n");
		daemon_start(&d, "main");
		miss_runs(f, &d, 0);
		f->ptx_identical = -1;  /* no cold llc run to compare with */
		if (g.only & ONLY_HIT) {
			fprintf(stderr, "bench: hits and the floor\n");
			hit_runs(f, &d, 0);
		}
		daemon_stop(&d);
	}
	snprintf(path, sizeof path, "%s/results.json", g.out);
	write_json(f, path);
	printf("\nptxcache bench --only: %d kernels (%d distinct IR)%s, %d workers\n\n",
	       g.nk, g.distinct, g.quick ? " (QUICK subset)" : "", g.workers);
	row("miss ptx, warm daemon", f->miss_ptx_ms, "ms", NULL, 0);
	row("hit ptx, whole corpus", f->hit_ptx_ms, "ms", NULL, 0);
	row("hit p50 per request", f->hit_p50_us, "us", "/ floor",
	    f->hit_p50_us / f->floor_p50_us);
	row("floor p50 (echo + SHA-256)", f->floor_p50_us, "us", NULL, 0);
	row("start to ready (workers warm)", f->daemon_start_ms, "ms", NULL, 0);
	row("first request after start", f->first_request_ms, "ms", "/ steady",
	    f->first_request_ms / f->steady_request_ms);
	row("steady request (same kernel, miss)", f->steady_request_ms, "ms", NULL, 0);
	row("master cpu per miss (corpus)", f->miss_master_cpu_us, "us", NULL, 0);
	row("workers' cpu per miss (corpus)", f->miss_workers_cpu_us, "us", NULL, 0);
	row("master cpu per steady miss", f->steady_master_cpu_us, "us", NULL, 0);
	row("master cpu per hit", f->hit_master_cpu_us, "us", NULL, 0);
	row("worker's compile, first request", f->first_compile_us, "us", "/ steady's",
	    f->first_compile_us / f->steady_compile_us);
	row("worker's compile, steady request", f->steady_compile_us, "us", NULL, 0);
	printf("\n  %s written in %.0f s\n", path, (bench_now_ms() - t0) / 1e3);
	char *rm[] = { "/bin/rm", "-rf", g.tmp, NULL };
	run_timed(rm);
}

/* --only's list: start, miss, hit, separated by commas. */
static unsigned parse_only(const char *list)
{
	static const struct { const char *name; unsigned bit; } sections[] = {
		{ "start", ONLY_START }, { "miss", ONLY_MISS }, { "hit", ONLY_HIT },
	};
	unsigned mask = 0;

	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ","), i;
		for (i = 0; i < sizeof sections / sizeof sections[0]; i++)
			if (strlen(sections[i].name) == n && !strncmp(p, sections[i].name, n))
				break;
		if (i == sizeof sections / sizeof sections[0]) {
			fprintf(stderr, "bench: --only: unknown section '%.*s' "
				"(start, miss, hit)\n", (int)n, p);
			exit(2);
		}
		mask |= sections[i].bit;
		p += n + (p[n] == ',');
	}
	if (!mask)
		usage();
	return mask;
}

/*
 * The full run: its sections in order, each with its progress line on
 * stderr. miss starts the daemon that hit, artifact, size and fresh use
 * (with the cubin figures where it assembles); fresh stops it.
 */
struct run {
	struct figures f;
	struct daemon d;
	int cubin;
	struct large_fig lf[NLARGE];
};

static void sec_cold(struct run *r)
{
	fprintf(stderr, "bench: %d kernels: cold llc%s processes\n", g.nk,
		g.ptxas ? " and ptxas" : "");
	cold_runs(&r->f);
}

static void sec_start(struct run *r)
{
	fprintf(stderr, "bench: fresh daemons: start to ready, first request\n");
	start_runs(&r->f);
}

static void sec_miss(struct run *r)
{
	fprintf(stderr, "bench: misses through a fresh daemon\n");
	daemon_start(&r->d, "main");
	r->cubin = g.ptxas && probe_cubin(r->d.sock, smallest());
	miss_runs(&r->f, &r->d, r->cubin);
}

static void sec_hit(struct run *r)
{
	fprintf(stderr, "bench: hits and the floor\n");
	hit_runs(&r->f, &r->d, r->cubin);
}

static void sec_artifact(struct run *r)
{
	fprintf(stderr, "bench: artifact hits and the floor\n");
	artifact_runs(&r->f, &r->d);
}

/* Hit throughput with 16 client processes, bytes stored against raw
 * bytes, and the daemon's memory. */
static void sec_size(struct run *r)
{
	struct figures *f = &r->f;
	long long made;
	double t = clients(r->d.sock, 16, g.quick ? 1000 : 3000, &made);

	f->hits_per_s = (double)made / (t / 1e3);
	f->stored_bytes = stat_of(r->d.sock, "bytes");
	f->raw_bytes = 0;
	for (int i = 0; i < g.nk; i++)
		if (!g.k[i].dup)
			f->raw_bytes += (long long)(g.k[i].ptx_len + g.k[i].cubin_len);
	f->daemon_rss_kb = tree_rss_kb(r->d.pid);
}

static void sec_fresh(struct run *r)
{
	r->f.fresh_hit_pct = r->cubin ? fresh_runs(&r->d) : NAN;
	fprintf(stderr, "bench: second fresh run, -lineinfo cubin hits: %.1f%%\n",
		r->f.fresh_hit_pct);
	daemon_stop(&r->d);
}

static void sec_large(struct run *r)
{
	char path[512];

	fprintf(stderr, "bench: large values\n");
	large_runs(r->lf);
	snprintf(path, sizeof path, "%s/large.json", g.out);
	large_json(r->lf, path);
}

static void sec_redis(struct run *r)
{
	fprintf(stderr, "bench: a second node's first pass through Redis\n");
	second_node(&r->f);
}

static void sec_trust(struct run *r)
{
	fprintf(stderr, "bench: the trust boundary: sandbox, exec, confirmation\n");
	trust_runs(&r->f);
}

static void sec_ranks(struct run *r)
{
	fprintf(stderr, "bench: 1 and 8 ranks on empty caches\n");
	r->f.ranks1_wall_ms = ranks(1, &r->f.ranks1_compiles);
	r->f.ranks8_wall_ms = ranks(8, &r->f.ranks8_compiles);
}

static const struct section {
	const char *name;
	void (*run)(struct run *r);
} sections[] = {
	{ "cold", sec_cold },           /* scn_cold.c */
	{ "start", sec_start },         /* scn_start.c */
	{ "miss", sec_miss },           /* scn_miss.c */
	{ "hit", sec_hit },             /* scn_hit.c */
	{ "artifact", sec_artifact },   /* scn_artifact.c */
	{ "size", sec_size },           /* harness.c's clients() */
	{ "fresh", sec_fresh },         /* scn_fresh.c */
	{ "large", sec_large },         /* scn_large.c */
	{ "redis", sec_redis },         /* scn_redis.c */
	{ "trust", sec_trust },         /* scn_trust.c */
	{ "ranks", sec_ranks },         /* scn_ranks.c */
};

int main(int argc, char **argv)
{
	struct run r;
	struct figures *f = &r.f;
	char path[512];
	double loop = 0;
	int loop_cubin = 0, loop_miss = 0, redis_only = 0, large_only = 0;

	memset(&r, 0, sizeof r);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--quick"))
			g.quick = 1;
		else if (!strcmp(a, "--redis-only"))
			redis_only = 1;
		else if (!strcmp(a, "--large"))
			large_only = 1;
		else if (i + 1 >= argc)
			usage();
		else if (!strcmp(a, "--out"))
			g.out = argv[++i];
		else if (!strcmp(a, "--corpus"))
			g.corpus = argv[++i];
		else if (!strcmp(a, "--daemon"))
			g.daemon = argv[++i];
		else if (!strcmp(a, "--llc"))
			g.llc = argv[++i];
		else if (!strcmp(a, "--workers"))
			g.workers = atoi(argv[++i]);
		else if (!strcmp(a, "--hit-loop"))
			loop = atof(argv[++i]);
		else if (!strcmp(a, "--hit-loop-cubin"))
			loop = atof(argv[++i]), loop_cubin = 1;
		else if (!strcmp(a, "--miss-loop"))
			loop = atof(argv[++i]), loop_miss = 1;
		else if (!strcmp(a, "--only"))
			g.only = parse_only(argv[++i]);
		else
			usage();
	}
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	bench_pid = getpid();
	if (!large_only)
		load_corpus();
	if (loop > 0 && loop_miss) {
		miss_loop(loop);
		return 0;
	}
	if (loop > 0) {
		hit_loop(loop, loop_cubin);
		return 0;
	}
	g.ptxas = find_ptxas();
	if (!g.ptxas)
		note("no ptxas ($PTXCACHE_PTXAS, $CUDA_HOME, /usr/local/cuda, PATH): "
		     "cubin figures are null");
	snprintf(g.tmp, sizeof g.tmp, "/tmp/ptxcache-bench-XXXXXX");
	if (!mkdtemp(g.tmp))
		die("cannot create a temp dir: %s", strerror(errno));
	snprintf(path, sizeof path, "%s/cold", g.tmp);
	mkdir(path, 0700);
	mkdir(g.out, 0755);

	double t0 = bench_now_ms();
	if (redis_only) {
		redis_runs(f, t0);
		return 0;
	}
	if (large_only) {
		fprintf(stderr, "bench: large values\n");
		large_runs(r.lf);
		snprintf(path, sizeof path, "%s/large.json", g.out);
		large_json(r.lf, path);
		large_table(r.lf);
		char *rmv[] = { "/bin/rm", "-rf", g.tmp, NULL };
		run_timed(rmv);
		return 0;
	}
	if (g.only) {
		only_runs(f, t0);
		return 0;
	}
	for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
		sections[i].run(&r);

	snprintf(path, sizeof path, "%s/results.json", g.out);
	write_json(f, path);
	print_table(f);
	large_table(r.lf);
	printf("\n  %s written in %.0f s\n", path, (bench_now_ms() - t0) / 1e3);
	char *rm[] = { "/bin/rm", "-rf", g.tmp, NULL };
	run_timed(rm);
	return 0;
}
