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
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "client/ptxcache.h"
#include "proto/frame.h"
#include "proto/msg.h"

#define CALL_TIMEOUT_MS 600000
#define NONCE_FMT "\n; ptxcache-bench nonce %d\n"

struct kernel {
	char *name;             /* file name without .ll */
	char *ir;
	size_t ir_len;
	int dup;                /* same IR as an earlier kernel: a hit, not a miss */
	size_t ptx_len, cubin_len;
	size_t req_frame, rep_frame;    /* hit request and reply frame sizes */
	double cold_llc_ms, cold_ptxas_ms;
	double miss_ptx_ms, miss_cubin_ms;
	double hit_ptx_us, hit_cubin_us, floor_us; /* medians */
};

static struct {
	const char *daemon, *corpus, *out, *llc, *ptxas;
	int quick, workers;
	unsigned only;          /* --only: ONLY_* sections; 0: all of them */
	char tmp[256];
	struct kernel *k;
	int nk, distinct;       /* kernels, and kernels with distinct IR */
	char notes[16][256];
	int nnotes;
} g = {
	.daemon = "build/ptxcached",
	.corpus = "build/corpus/triton",
	.out = "build/bench",
	.llc = "/usr/lib/llvm-22/bin/llc",
	.workers = 2,
};

enum { ONLY_START = 1, ONLY_MISS = 2, ONLY_HIT = 4 };

struct daemon {
	pid_t pid;
	char dir[300], sock[340], cache[340];
	double start_ms;        /* spawn until it answers a ping: ready, workers warm */
};

/* The daemon running now, stopped by die() in the bench process itself. */
static pid_t live_daemon, bench_pid;

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (live_daemon > 0 && getpid() == bench_pid) {
		kill(live_daemon, SIGTERM);
		waitpid(live_daemon, NULL, 0);
	}
	exit(1);
}

static void note(const char *fmt, ...)
{
	va_list ap;

	if (g.nnotes == 16)
		return;
	va_start(ap, fmt);
	vsnprintf(g.notes[g.nnotes++], sizeof g.notes[0], fmt, ap);
	va_end(ap);
	fprintf(stderr, "bench: note: %s\n", g.notes[g.nnotes - 1]);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The q-quantile of v[0..n) (sorts v). */
static double quantile(double *v, size_t n, double q)
{
	if (!n)
		return NAN;
	qsort(v, n, sizeof *v, cmp_double);
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *p = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)n + 1)) &&
	    fread(p, 1, (size_t)n, f) == (size_t)n) {
		p[n] = '\0';
		*len = (size_t)n;
	} else {
		free(p);
		p = NULL;
	}
	fclose(f);
	return p;
}

/* Fill a Unix socket address with path (which must fit). */
static void set_path(struct sockaddr_un *sa, const char *path)
{
	size_t n = strlen(path);

	if (n >= sizeof sa->sun_path)
		die("socket path too long: '%s'", path);
	memcpy(sa->sun_path, path, n + 1);
}

/* ---- child processes ---- */

/* Run argv with stdout and stderr to /dev/null; its wall time in ms, or a
 * negative number if it did not exit 0 (the wait status in last_status). */
static int last_status;
static double run_timed(char *const argv[])
{
	double t0 = now_ms();
	pid_t pid = fork();
	int st;

	if (pid < 0)
		die("cannot fork: %s", strerror(errno));
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	double t = now_ms() - t0;
	last_status = st;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t : -1;
}

/* A cold tool run, once more if it fails (a busy machine has killed one
 * here); its wall time in ms. */
static double run_cold(char *const argv[], const char *what)
{
	for (int i = 0; i < 2; i++) {
		double t = run_timed(argv);
		if (t >= 0)
			return t;
		fprintf(stderr, "bench: %s on %s: %s %d%s\n", argv[0], what,
			WIFSIGNALED(last_status) ? "signal" : "exit status",
			WIFSIGNALED(last_status) ? WTERMSIG(last_status) :
			WEXITSTATUS(last_status), i ? "" : "; once more");
	}
	die("%s failed on %s twice", argv[0], what);
	return -1;
}

static ptxcache *connect_or_die(const char *sock)
{
	char err[512];
	ptxcache *pc = ptxcache_connect(sock, CALL_TIMEOUT_MS, err, sizeof err);
	if (!pc)
		die("%s", err);
	return pc;
}

static void daemon_start_with(struct daemon *d, const char *name,
			      const char *const *extra);

static void daemon_start(struct daemon *d, const char *name)
{
	daemon_start_with(d, name, NULL);
}

/* Start a private daemon; extra: more flags, NULL-terminated, or NULL. */
static void daemon_start_with(struct daemon *d, const char *name,
			      const char *const *extra)
{
	char log[400];

	snprintf(d->dir, sizeof d->dir, "%s/%s", g.tmp, name);
	snprintf(d->sock, sizeof d->sock, "%s/sock", d->dir);
	snprintf(d->cache, sizeof d->cache, "%s/cache", d->dir);
	snprintf(log, sizeof log, "%s/daemon.log", d->dir);
	if (mkdir(d->dir, 0700) < 0)
		die("cannot create '%s': %s", d->dir, strerror(errno));
	char workers[16];
	snprintf(workers, sizeof workers, "%d", g.workers);
	double t0 = now_ms();
	d->pid = fork();
	if (d->pid < 0)
		die("cannot fork: %s", strerror(errno));
	if (d->pid > 0)
		live_daemon = d->pid;
	if (d->pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		const char *argv[32] = { g.daemon, "--socket", d->sock, "--cache-dir",
					 d->cache, "--workers", workers, "--log-level",
					 "warning" };
		for (int i = 0; extra && extra[i] && i < 20; i++)
			argv[9 + i] = extra[i];
		execv(g.daemon, (char *const *)argv);
		_exit(127);
	}
	for (;;) {
		char err[512];
		/* Connected, the ping waits in the backlog for the warm-up. */
		ptxcache *pc = ptxcache_connect(d->sock, 60000, err, sizeof err);
		if (pc && ptxcache_ping(pc) == 0) {
			ptxcache_close(pc);
			break;
		}
		ptxcache_close(pc);
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid)
			die("'%s' exited at start; see %s", g.daemon, log);
		if (now_ms() - t0 > 60000)
			die("'%s' did not answer within 60 s", g.daemon);
		usleep(2000);
	}
	d->start_ms = now_ms() - t0;
}

static void daemon_stop(struct daemon *d)
{
	int st;

	live_daemon = 0;
	kill(d->pid, SIGTERM);
	for (int i = 0; i < 500; i++) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid)
			return;
		usleep(10000);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
}

/* An integer field of the daemon's stats JSON, or -1. */
static long long stat_of(const char *sock, const char *name)
{
	ptxcache *pc = connect_or_die(sock);
	char *json = NULL, pat[64];
	long long v = -1;

	snprintf(pat, sizeof pat, "\"%s\":", name);
	if (ptxcache_stats_json(pc, &json) == 0) {
		const char *p = strstr(json, pat);
		if (p)
			v = strtoll(p + strlen(pat), NULL, 10);
	}
	free(json);
	ptxcache_close(pc);
	return v;
}

/* Resident memory of pid and of its children (the workers), in kB. */
static long long tree_rss_kb(pid_t pid)
{
	long long total = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char path[300], line[256];
		pid_t p = (pid_t)atoi(e->d_name), ppid = 0;
		long long rss = 0;
		if (p <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%d/status", (int)p);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f)) {
			sscanf(line, "PPid: %d", &ppid);
			sscanf(line, "VmRSS: %lld", &rss);
		}
		fclose(f);
		if (p == pid || ppid == pid)
			total += rss;
	}
	closedir(d);
	return total;
}

/* Time pid has spent on a CPU, in ns (/proc/PID/schedstat), or 0. */
static double cpu_ns(pid_t pid)
{
	char path[64];
	double ns = 0;

	snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%lf", &ns) != 1)
			ns = 0;
		fclose(f);
	}
	return ns;
}

/* CPU time of pid's children (a daemon's foreground workers: not those
 * that confirm entries in idle time, ptxcached-confirm), in ns. */
static double children_cpu_ns(pid_t pid)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	double ns = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[300], line[256];
		pid_t p = (pid_t)atoi(e->d_name), ppid = 0;
		if (p <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%d/status", (int)p);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f) && !ppid)
			sscanf(line, "PPid: %d", &ppid);
		fclose(f);
		if (ppid != pid)
			continue;
		snprintf(path, sizeof path, "/proc/%d/comm", (int)p);
		if ((f = fopen(path, "r"))) {
			int confirm = fgets(line, sizeof line, f) && !strncmp(line, "ptxcached-conf", 14);
			fclose(f);
			if (!confirm)
				ns += cpu_ns(p);
		}
	}
	closedir(d);
	return ns;
}

/* ---- requests ---- */

/* The request every figure uses: Triton's own llc flags. */
static void kernel_req(struct ptxcache_compile_req *r, const char *ir, size_t n)
{
	ptxcache_compile_req_init(r);
	r->input = ir;
	r->input_len = n;
	r->triple = "nvptx64-nvidia-cuda";
	r->cpu = "sm_90a";
	r->features = "+ptx90";
	r->opt_level = 3;
}

/* The kernel's IR with a comment appended: the same compile, a new key. */
static char *with_nonce(const struct kernel *k, int nonce, size_t *n)
{
	char *p = malloc(k->ir_len + 64);

	if (!p)
		die("out of memory");
	memcpy(p, k->ir, k->ir_len);
	*n = k->ir_len + (size_t)sprintf(p + k->ir_len, NONCE_FMT, nonce);
	return p;
}

static int ptx_req(ptxcache *pc, const char *ir, size_t n, struct ptxcache_result *res)
{
	struct ptxcache_compile_req r;

	kernel_req(&r, ir, n);
	return ptxcache_compile(pc, &r, res);
}

/* The worker's own compile time of the last timed_req() (0 on a hit). */
static int64_t last_compile_us;

/* One request through call (ptx_req or cubin_req); its wall time in ms.
 * Dies unless it succeeds; want_cached: 0 or 1 must match, -1 either. */
static double timed_req(int (*call)(ptxcache *, const char *, size_t,
				    struct ptxcache_result *),
			ptxcache *pc, const char *ir, size_t n, int want_cached,
			const char *what, size_t *out_len)
{
	struct ptxcache_result res;

	double t0 = now_ms();
	if (call(pc, ir, n, &res) < 0)
		die("%s: %s", what, ptxcache_errmsg(pc));
	double t = now_ms() - t0;
	if (res.status != PTXCACHE_OK)
		die("%s: status %d: %s", what, res.status, res.log ? res.log : "");
	if (want_cached >= 0 && res.cached != want_cached)
		die("%s: expected a %s", what, want_cached ? "hit" : "miss");
	if (out_len)
		*out_len = res.output_len;
	last_compile_us = res.compile_us;
	ptxcache_result_free(&res);
	return t;
}

/* Cubin requests: the kernel's IR through both cached stages, assembled
 * for the same GPU as the cold ptxas runs (-arch=sm_90a). */
static const char *const asm_args[] = { "--gpu-name=sm_90a" };

static int cubin_req(ptxcache *pc, const char *ir, size_t n,
		     struct ptxcache_result *res)
{
	struct ptxcache_compile_req r;
	struct ptxcache_assemble_req a;

	kernel_req(&r, ir, n);
	ptxcache_assemble_req_init(&a);
	a.input = ir;
	a.input_len = n;
	a.ir = &r;
	a.args = asm_args;
	a.nargs = sizeof asm_args / sizeof asm_args[0];
	return ptxcache_assemble(pc, &a, res);
}

/* Does the daemon assemble cubin? 1 yes, 0 no (with a note). The probe
 * assembles llc's PTX of k with a comment added: a PTX of its own, since
 * the cubin stage is keyed on the PTX and the IR of k must still miss. */
static int probe_cubin(const char *sock, const struct kernel *k)
{
	struct ptxcache_assemble_req a;
	struct ptxcache_result res;
	ptxcache *pc = connect_or_die(sock);
	char path[400], *ptx;
	size_t n;
	int ok = 0;

	snprintf(path, sizeof path, "%s/cold/%s.ptx", g.tmp, k->name);
	if (!(ptx = read_file(path, &n)) || !(ptx = realloc(ptx, n + 64)))
		die("cannot read '%s'", path);
	n += (size_t)sprintf(ptx + n, "\n// ptxcache-bench probe\n");
	ptxcache_assemble_req_init(&a);
	a.input = ptx;
	a.input_len = n;
	a.args = asm_args;
	a.nargs = sizeof asm_args / sizeof asm_args[0];
	if (ptxcache_assemble(pc, &a, &res) < 0) {
		note("cubin figures are null: the daemon refuses cubin requests (%s)",
		     ptxcache_errmsg(pc));
	} else if (res.status != PTXCACHE_OK) {
		note("cubin figures are null: a cubin request returned status %d (%.160s)",
		     res.status, res.log ? res.log : "");
		ptxcache_result_free(&res);
	} else {
		ok = 1;
		ptxcache_result_free(&res);
	}
	free(ptx);
	ptxcache_close(pc);
	return ok;
}

/* ---- the floor: a bare echo server ---- */

/* Requests are [u32 request length][u32 reply length][body]; the server
 * hashes the body with SHA-256 and answers reply-length bytes. */
static int read_full(int fd, void *p, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t k = read(fd, (char *)p + off, n - off);
		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			return -1;
		}
		off += (size_t)k;
	}
	return 0;
}

static int write_full(int fd, const void *p, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t k = write(fd, (const char *)p + off, n - off);
		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			return -1;
		}
		off += (size_t)k;
	}
	return 0;
}

static pid_t floor_start(const char *path, size_t maxlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	set_path(&sa, path);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    listen(lfd, 4) < 0)
		die("cannot listen on '%s': %s", path, strerror(errno));
	pid_t pid = fork();
	if (pid != 0) {
		close(lfd);
		return pid;
	}
	char *body = malloc(maxlen), *reply = calloc(1, maxlen);
	int fd = accept(lfd, NULL, NULL);
	uint32_t hdr[2];
	unsigned char md[32];
	while (body && reply && fd >= 0 && read_full(fd, hdr, sizeof hdr) == 0 &&
	       hdr[0] <= maxlen && hdr[1] <= maxlen &&
	       read_full(fd, body, hdr[0]) == 0) {
		SHA256((unsigned char *)body, hdr[0], md);
		memcpy(reply, md, hdr[1] < 32 ? hdr[1] : 32);
		if (write_full(fd, reply, hdr[1]) < 0)
			break;
	}
	_exit(0);
}

/* ---- the measurements ---- */

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct kernel *)a)->name, ((const struct kernel *)b)->name);
}

static void load_corpus(void)
{
	DIR *d = opendir(g.corpus);
	struct dirent *e;
	int cap = 0;

	if (!d)
		die("cannot open corpus '%s': %s", g.corpus, strerror(errno));
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 4 || strcmp(e->d_name + l - 3, ".ll"))
			continue;
		if (g.nk == cap) {
			cap = cap ? cap * 2 : 64;
			g.k = realloc(g.k, (size_t)cap * sizeof *g.k);
			if (!g.k)
				die("out of memory");
		}
		struct kernel *k = &g.k[g.nk++];
		char path[1024];
		memset(k, 0, sizeof *k);
		k->name = strndup(e->d_name, l - 3);
		snprintf(path, sizeof path, "%s/%s", g.corpus, e->d_name);
		if (!(k->ir = read_file(path, &k->ir_len)))
			die("cannot read '%s'", path);
	}
	closedir(d);
	if (!g.nk)
		die("no .ll files in '%s'", g.corpus);
	qsort(g.k, (size_t)g.nk, sizeof *g.k, by_name);
	if (g.quick) {
		/* Every 12th kernel: ten of the 118, spread over the kinds. */
		int n = 0;
		for (int i = 0; i < g.nk; i += 12)
			g.k[n++] = g.k[i];
		g.nk = n;
	}
	/* The corpus holds a few kernels twice under two names: the second is
	 * a hit even on an empty cache. */
	unsigned char (*md)[32] = calloc((size_t)g.nk, 32);
	if (!md)
		die("out of memory");
	for (int i = 0; i < g.nk; i++) {
		SHA256((const unsigned char *)g.k[i].ir, g.k[i].ir_len, md[i]);
		for (int j = 0; j < i && !g.k[i].dup; j++)
			g.k[i].dup = !memcmp(md[i], md[j], 32);
		g.distinct += !g.k[i].dup;
	}
	free(md);
}

static const char *find_ptxas(void)
{
	static char path[1024];
	const char *e = getenv("PTXCACHE_PTXAS");

	if (e && *e)
		return access(e, X_OK) == 0 ? e : NULL;
	if ((e = getenv("CUDA_HOME")) && *e) {
		snprintf(path, sizeof path, "%s/bin/ptxas", e);
		if (access(path, X_OK) == 0)
			return path;
	}
	if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0)
		return "/usr/local/cuda/bin/ptxas";
	const char *p = getenv("PATH");
	while (p && *p) {
		size_t n = strcspn(p, ":");
		snprintf(path, sizeof path, "%.*s/ptxas", (int)n, p);
		if (n && access(path, X_OK) == 0)
			return path;
		p += n + (p[n] == ':');
	}
	return NULL;
}

struct figures {
	double cold_llc_ms, cold_ptxas_ms, miss_ptx_ms, miss_cubin_ms;
	double hit_ptx_ms, hit_cubin_ms, hit_p50_us, hit_p99_us;
	double floor_p50_us, floor_p99_us, hit_cubin_p50_us;
	double ranks8_wall_ms, ranks1_wall_ms;
	long long ranks8_compiles, ranks1_compiles;
	double first_request_ms, steady_request_ms, daemon_start_ms, warm_up_ms;
	/* CPU time per request, which a busy machine moves far less than
	 * wall time: the master's and its workers' over the corpus's misses,
	 * the master's over the steady misses and over the hits. */
	double miss_master_cpu_us, miss_workers_cpu_us, steady_master_cpu_us;
	double hit_master_cpu_us;
	/* The worker's own compile time (compile_us) of the first and the
	 * steady requests: what of first / steady is the worker's. */
	double first_compile_us, steady_compile_us;
	long long stored_bytes, raw_bytes, daemon_rss_kb;
	double hits_per_s;
	double fresh_hit_pct;   /* -lineinfo cubins of a second fresh run */
	int ptx_identical;      /* kernels whose daemon PTX matches llc's */
	/* The Redis tier: two nodes' first passes over the corpus. */
	double l2_node1_pass_ms, l2_node2_pass_ms;
	long long l2_node2_compiles, l2_node2_hits;
	/* The trust boundary: misses with the sandbox on and off, what exec
	 * adds to a worker's start, compiles for one user and for two. */
	double miss_sandbox_ms, miss_nosandbox_ms, exec_worker_ms, fork_exit_ms;
	double worker_start_ms;
	long long user1_compiles, user2_compiles, user2_confirmations, user2_mismatches;
	/* Artifact hits of 4 KiB and 4 MiB, and the floor of their sizes. */
	double art_hit_us[2], art_floor_us[2];
};

/* Every figure null (NAN, or -1 for counts): what --only leaves of the
 * sections it does not run. */
static void unmeasured(struct figures *f)
{
	f->cold_llc_ms = f->cold_ptxas_ms = f->miss_ptx_ms = f->miss_cubin_ms = NAN;
	f->hit_ptx_ms = f->hit_cubin_ms = f->hit_p50_us = f->hit_p99_us = NAN;
	f->floor_p50_us = f->floor_p99_us = f->hit_cubin_p50_us = NAN;
	f->ranks8_wall_ms = f->ranks1_wall_ms = NAN;
	f->ranks8_compiles = f->ranks1_compiles = -1;
	f->first_request_ms = f->steady_request_ms = f->daemon_start_ms = f->warm_up_ms = NAN;
	f->miss_master_cpu_us = f->miss_workers_cpu_us = f->steady_master_cpu_us = NAN;
	f->hit_master_cpu_us = f->first_compile_us = f->steady_compile_us = NAN;
	f->stored_bytes = f->raw_bytes = f->daemon_rss_kb = -1;
	f->hits_per_s = f->fresh_hit_pct = NAN;
	f->ptx_identical = -1;
	f->l2_node1_pass_ms = f->l2_node2_pass_ms = NAN;
	f->l2_node2_compiles = f->l2_node2_hits = -1;
	f->miss_sandbox_ms = f->miss_nosandbox_ms = f->exec_worker_ms = f->fork_exit_ms = NAN;
	f->worker_start_ms = NAN;
	f->user1_compiles = f->user2_compiles = -1;
	f->user2_confirmations = f->user2_mismatches = -1;
	for (int i = 0; i < 2; i++)
		f->art_hit_us[i] = f->art_floor_us[i] = NAN;
}

static void cold_runs(struct figures *f)
{
	char out[400], in[1024], cub[400];
	int ok_ptxas = !!g.ptxas;

	f->cold_llc_ms = 0;
	f->cold_ptxas_ms = ok_ptxas ? 0 : NAN;
	for (int i = 0; i < g.nk; i++) {
		struct kernel *k = &g.k[i];
		snprintf(in, sizeof in, "%s/%s.ll", g.corpus, k->name);
		snprintf(out, sizeof out, "%s/cold/%s.ptx", g.tmp, k->name);
		char *llc[] = { (char *)g.llc, "-O3", "-mtriple=nvptx64-nvidia-cuda",
				"-mcpu=sm_90a", "-mattr=+ptx90", in, "-o", out, NULL };
		k->cold_llc_ms = run_cold(llc, in);
		f->cold_llc_ms += k->cold_llc_ms;
		k->cold_ptxas_ms = NAN;
		if (!ok_ptxas)
			continue;
		snprintf(cub, sizeof cub, "%s/cold/%s.cubin", g.tmp, k->name);
		char *ptxas[] = { (char *)g.ptxas, "-arch=sm_90a", out, "-o", cub, NULL };
		k->cold_ptxas_ms = run_cold(ptxas, out);
		f->cold_ptxas_ms += k->cold_ptxas_ms;
	}
}

/* The smallest kernel: the subject of the first-versus-steady figures. */
static struct kernel *smallest(void)
{
	struct kernel *s = &g.k[0];
	for (int i = 1; i < g.nk; i++)
		if (g.k[i].ir_len < s->ir_len)
			s = &g.k[i];
	return s;
}

/* Fresh daemons on empty caches, one after the other: the time from spawn
 * to ready (the first answer, which waits for the workers' warm-up), the
 * daemon's own warm-up figure, and the first request after that: a miss on
 * the smallest kernel. Medians over the starts: one start alone is at the
 * mercy of the machine's noise. */
static void start_runs(struct figures *f)
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

/*
 * Wait (up to 60 s) until the daemon has no confirmation queued, running
 * or in a live worker: under sharing = confirm every new entry is
 * compiled once more in idle time, by a worker exec'd for it, and the
 * steady and hit figures are not of the corpus's confirmations (the first
 * request's daemon has none either). Returns the ms waited.
 */
static double settle(const char *sock)
{
	double t0 = now_ms();

	for (;;) {
		long long pending = stat_of(sock, "confirms_pending");
		long long running = stat_of(sock, "confirms_running");
		long long live = stat_of(sock, "confirm_workers_live");
		if (pending <= 0 && running <= 0 && live <= 0)
			return now_ms() - t0;
		if (now_ms() - t0 > 60000) {
			note("confirmations still in the background after 60 s: the steady "
			     "and hit figures are not of a quiet daemon");
			return now_ms() - t0;
		}
		usleep(5000);
	}
}

static void miss_runs(struct figures *f, const struct daemon *d, int cubin)
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
		double t0 = now_ms();
		if (ptxcache_compile(pc, &r, &res) < 0)
			die("miss %s: %s", k->name, ptxcache_errmsg(pc));
		k->miss_ptx_ms = now_ms() - t0;
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

/*
 * An artifact hit's round trip against the floor, for a small value (an
 * Inductor graph's entry) and a large one (a bundle of kernels): the get
 * and the echo alternate, with the frame sizes the get moves.
 */
static void artifact_runs(struct figures *f, const struct daemon *d)
{
	static const size_t sizes[2] = { 4 << 10, 4 << 20 };
	int n = g.quick ? 50 : 200;
	double *hit = calloc((size_t)n, sizeof *hit), *flo = calloc((size_t)n, sizeof *flo);
	char path[400];

	snprintf(path, sizeof path, "%s/floor-artifact.sock", g.tmp);
	pid_t fpid = floor_start(path, sizes[1] + 4096);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	set_path(&sa, path);
	int ffd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char *req = calloc(1, sizes[1] + 4096 + 8), *rep = malloc(sizes[1] + 4096);
	if (!hit || !flo || !req || !rep)
		die("out of memory");
	if (ffd < 0 || connect(ffd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("cannot connect to the floor server: %s", strerror(errno));
	ptxcache *pc = connect_or_die(d->sock);
	for (int z = 0; z < 2; z++) {
		char key[64];
		char *value = malloc(sizes[z]);
		if (!value)
			die("out of memory");
		for (size_t i = 0; i < sizes[z]; i++)
			value[i] = (char)(i * 2654435761u >> 13);
		snprintf(key, sizeof key, "bench-%zu", sizes[z]);
		if (ptxcache_artifact_put(pc, "bench", key, value, sizes[z], 0) < 0)
			die("artifact put: %s", ptxcache_errmsg(pc));
		/* The frames a get moves: the request, and the reply with the value. */
		struct buf b = BUF_INIT;
		struct msg_writer w;
		msg_begin(&w, &b, FRAME_ARTIFACT_GET);
		msg_put_int(&w, "id", 1000);
		msg_put_str(&w, "ns", "bench");
		msg_put_str(&w, "key", key);
		msg_end(&w);
		uint32_t hdr[2] = { (uint32_t)b.len, 0 };
		buf_reset(&b);
		msg_begin(&w, &b, FRAME_ARTIFACT_GET | FRAME_REPLY);
		msg_put_int(&w, "id", 1000);
		msg_put_bool(&w, "found", 1);
		msg_put_bin(&w, "value", value, sizes[z]);
		msg_end(&w);
		hdr[1] = (uint32_t)b.len;
		buf_free(&b);
		memcpy(req, hdr, sizeof hdr);
		for (int i = 0; i < n; i++) {
			double t0 = now_ms();
			if (write_full(ffd, req, 8 + hdr[0]) < 0 || read_full(ffd, rep, hdr[1]) < 0)
				die("floor server failed");
			flo[i] = (now_ms() - t0) * 1e3;
			struct ptxcache_artifact a;
			t0 = now_ms();
			if (ptxcache_artifact_get(pc, "bench", key, 0, 0, &a) < 0 || !a.found ||
			    a.len != sizes[z] || memcmp(a.value, value, sizes[z]))
				die("artifact get: not the value put (%s)", ptxcache_errmsg(pc));
			hit[i] = (now_ms() - t0) * 1e3;
			ptxcache_artifact_free(&a);
		}
		f->art_hit_us[z] = quantile(hit, (size_t)n, 0.5);
		f->art_floor_us[z] = quantile(flo, (size_t)n, 0.5);
		free(value);
	}
	ptxcache_close(pc);
	close(ffd);
	waitpid(fpid, NULL, 0);
	free(hit);
	free(flo);
	free(req);
	free(rep);
}

/* ---- large values ---------------------------------------------------- */

#define NLARGE 4
static const size_t large_mb[NLARGE] = { 1, 8, 64, 256 };
/* Warm gets (and their reads) of values up to 8 MiB, each well under a
 * few ms: a median of so many, since one of 3 or 5 moved by 30% from run
 * to run on one host (a wake-up more or less). */
#define SMALL_GET_REPS 51

struct large_fig {
	double put_ms, fsync_ms, cget_ms, cread_ms, pyget_ms, pyread_ms, pyput_ms;
	long long idle_kb, peak_inline_kb, peak_fd_kb, peak_put_kb;
	double hit_ms, hit_max_ms;      /* another client's small hits during a put */
	double hit_replace_ms, hit_replace_max_ms;      /* ... of a value under its key */
};

static long long proc_kb(pid_t pid, const char *field)
{
	char p[64], line[256];
	long long v = -1;

	snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, field, strlen(field)))
			v = atoll(line + strlen(field) + 1);
	fclose(f);
	return v;
}

/* VmHWM starts again from VmRSS (Linux 4.0). */
static void reset_peak(pid_t pid)
{
	char p[64];

	snprintf(p, sizeof p, "/proc/%d/clear_refs", (int)pid);
	FILE *f = fopen(p, "w");
	if (f) {
		fputs("5", f);
		fclose(f);
	}
}

/* An inline get (no "fd": the value in the reply), read whole and dropped,
 * on a socket of its own: what an old client costs the daemon. */
static void inline_get(const char *sock, const char *key, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct buf b = BUF_INIT;
	struct msg_writer w;
	char hdr[8];
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	set_path(&sa, sock);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("cannot connect to '%s': %s", sock, strerror(errno));
	msg_begin(&w, &b, FRAME_ARTIFACT_GET);
	msg_put_int(&w, "id", 1);
	msg_put_str(&w, "ns", "large");
	msg_put_str(&w, "key", key);
	msg_end(&w);
	char *rep = malloc(len + 4096);
	if (!rep || write_full(fd, b.data, b.len) < 0 || read_full(fd, hdr, 8) < 0)
		die("inline get failed");
	uint32_t n = (uint32_t)(unsigned char)hdr[4] << 24 | (uint32_t)(unsigned char)hdr[5] << 16 |
		     (uint32_t)(unsigned char)hdr[6] << 8 | (unsigned char)hdr[7];
	if (n < len || n > len + 4096 || read_full(fd, rep, n) < 0)
		die("inline get: a reply of %u bytes for a value of %zu", n, len);
	free(rep);
	buf_free(&b);
	close(fd);
}

/* What a large put costs the daemon's other clients: a child on a
 * connection of its own asks for a small value over and over while the
 * parent puts v once; its median and longest wait in ms. The put's last
 * steps (the blob file's fsync, its rename, the commit) run on the loop
 * that answers everyone. */
static void hits_during_put(ptxcache *pc, const char *sock, const char *key, const char *v,
			    size_t n, double *median, double *longest)
{
	int stop[2], res[2];
	double got[2] = { NAN, NAN };

	if (ptxcache_artifact_put(pc, "large", "small", v, 1024, 0) < 0)
		die("small put: %s", ptxcache_errmsg(pc));
	if (pipe(stop) < 0 || pipe(res) < 0)
		die("pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		static double t[1 << 16];
		size_t k = 0;
		ptxcache *c = connect_or_die(sock);
		close(stop[1]);
		fcntl(stop[0], F_SETFL, O_NONBLOCK);
		if (write(res[1], "", 1) != 1)  /* connected: the put may start */
			_exit(1);
		char x;
		while (k < sizeof t / sizeof t[0] && read(stop[0], &x, 1) < 0 && errno == EAGAIN) {
			struct ptxcache_artifact a;
			double t0 = now_ms();
			if (ptxcache_artifact_get(c, "large", "small", 0, 0, &a) < 0 || !a.found)
				_exit(1);
			t[k++] = now_ms() - t0;
			ptxcache_artifact_free(&a);
		}
		double out[2] = { quantile(t, k, 0.5), quantile(t, k, 1.0) };
		_exit(write(res[1], out, sizeof out) == sizeof out ? 0 : 1);
	}
	close(stop[0]);
	close(res[1]);
	char ready;
	if (pid < 0 || read(res[0], &ready, 1) != 1)
		die("the hitting child did not start");
	usleep(20000);
	if (ptxcache_artifact_put(pc, "large", key, v, n, 0) < 0)
		die("large put: %s", ptxcache_errmsg(pc));
	usleep(20000);
	close(stop[1]);
	if (read(res[0], got, sizeof got) != sizeof got)
		die("the hitting child failed");
	close(res[0]);
	waitpid(pid, NULL, 0);
	*median = got[0];
	*longest = got[1];
}

/* The Python client's warm gets, a Python read of the same file, and the
 * Python client's puts (of another key): one line "MB get_ms read_ms
 * put_ms" per size (medians). */
static void python_runs(const char *sock, const char *dir, struct large_fig *lf)
{
	char script[2048], out[512];
	snprintf(script, sizeof script,
		 "import os, sys, time\n"
		 "sys.path.insert(0, 'python')\n"
		 "from ptxcache import Client\n"
		 "c = Client(%s%s%s)\n"
		 "for mb in (1, 8, 64, 256):\n"
		 "    n = mb << 20\n"
		 "    g, r = [], []\n"
		 "    for i in range(-1, %d if mb > 8 else %d):  # the first untimed, as in large_runs()\n"
		 "        t = time.perf_counter(); v = c.artifact_get('large', 'v%%d' %% mb).value\n"
		 "        g.append(time.perf_counter() - t); assert len(v) == n; del v\n"
		 "        t = time.perf_counter(); fd = os.open('%s/file-%%d' %% mb, os.O_RDONLY)\n"
		 "        v = os.pread(fd, n, 0); os.close(fd)\n"
		 "        r.append(time.perf_counter() - t); assert len(v) == n; del v\n"
		 "    del g[0], r[0]\n"
		 "    v = (b'def forward(self, x):\\n' * (n // 44 + 1))[:n // 2] + os.urandom(n - n // 2)\n"
		 "    p = []\n"
		 "    for i in range(%d):\n"
		 "        t = time.perf_counter(); c.artifact_put('large', 'p%%d' %% mb, v)\n"
		 "        p.append(time.perf_counter() - t)\n"
		 "    del v\n"
		 "    g.sort(); r.sort(); p.sort()\n"
		 "    print(mb, g[len(g) // 2] * 1e3, r[len(r) // 2] * 1e3, p[len(p) // 2] * 1e3,\n"
		 "          flush=True)\n",
		 "'", sock, "'", g.quick ? 5 : 9, SMALL_GET_REPS, dir, g.quick ? 3 : 5);
	char *argv[] = { "python3", "-c", script, NULL };
	int pfd[2];
	if (pipe(pfd) < 0)
		die("pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		execvp("python3", argv);
		_exit(127);
	}
	close(pfd[1]);
	FILE *f = fdopen(pfd[0], "r");
	while (f && fgets(out, sizeof out, f)) {
		int mb;
		double gm, rm, pm;
		if (sscanf(out, "%d %lf %lf %lf", &mb, &gm, &rm, &pm) != 4)
			continue;
		for (int z = 0; z < NLARGE; z++)
			if ((size_t)mb == large_mb[z]) {
				lf[z].pyget_ms = gm;
				lf[z].pyread_ms = rm;
				lf[z].pyput_ms = pm;
			}
	}
	if (f)
		fclose(f);
	waitpid(pid, NULL, 0);
}

/* Wait (at most 5 s) until the daemon has no temporary file in its blob
 * directory: a replaced value's old file is unlinked on the daemon's
 * thread after the put's answer, and its blocks freed then would be
 * counted in whatever is timed next (the floor's write+fsync). */
static void blobs_settle(const struct daemon *d)
{
	char dir[400];

	snprintf(dir, sizeof dir, "%s/blobs", d->cache);
	for (int i = 0; i < 5000; i++) {
		DIR *dp = opendir(dir);
		struct dirent *e;
		int busy = 0;
		while (dp && (e = readdir(dp)))
			busy |= !strncmp(e->d_name, ".tmp-", 5);
		if (dp)
			closedir(dp);
		if (!busy)
			return;
		usleep(1000);
	}
}

static void large_runs(struct large_fig *lf)
{
	struct daemon d;
	char dir[400], path[480];
	int reps = g.quick ? 3 : 5;

	for (int z = 0; z < NLARGE; z++)
		lf[z] = (struct large_fig){ NAN, NAN, NAN, NAN, NAN, NAN, NAN, -1, -1, -1, -1,
					    NAN, NAN, NAN, NAN };
	daemon_start(&d, "large");
	/* The baseline's files on the cache's own filesystem. */
	snprintf(dir, sizeof dir, "%s/large-files", g.tmp);
	mkdir(dir, 0700);
	ptxcache *pc = connect_or_die(d.sock);
	for (int z = 0; z < NLARGE; z++) {
		size_t n = large_mb[z] << 20;
		char key[32], *v = malloc(n), *back = malloc(n);
		double put[5], fs[5], cg[SMALL_GET_REPS], cr[SMALL_GET_REPS];
		int greps = large_mb[z] > 8 ? reps : SMALL_GET_REPS;
		if (!v || !back)
			die("out of memory");
		/* Half text, half bytes zstd cannot shrink. */
		static const char text[] = "def forward(self, x):\n    return aten.mm(x, self.w)\n";
		for (size_t i = 0; i < n / 2; i++)
			v[i] = text[i % (sizeof text - 1)];
		uint64_t x = 0x9e3779b97f4a7c15ull + n;
		for (size_t i = n / 2; i < n; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			v[i] = (char)x;
		}
		snprintf(key, sizeof key, "v%zu", large_mb[z]);
		snprintf(path, sizeof path, "%s/file-%zu", dir, large_mb[z]);
		/* The daemon's peak over its RSS before the puts: what holding
		 * the value costs it while it arrives. */
		long long put_idle_kb = proc_kb(d.pid, "VmRSS");
		reset_peak(d.pid);
		for (int r = 0; r < reps; r++) {
			/* A put (durable here when it returns), then write+fsync of
			 * the same bytes, alternating. */
			double t0 = now_ms();
			if (ptxcache_artifact_put(pc, "large", key, v, n, 0) < 0)
				die("large put: %s", ptxcache_errmsg(pc));
			put[r] = now_ms() - t0;
			blobs_settle(&d);
			t0 = now_ms();
			int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
			if (fd < 0 || write_full(fd, v, n) < 0 || fsync(fd) < 0)
				die("cannot write '%s': %s", path, strerror(errno));
			close(fd);
			fs[r] = now_ms() - t0;
		}
		lf[z].peak_put_kb = proc_kb(d.pid, "VmHWM") - put_idle_kb;
		/* A new key's put (a compile's), then another value's put
		 * under key, which replaces its file (the old one unlinked). */
		char fresh[32];
		snprintf(fresh, sizeof fresh, "n%zu", large_mb[z]);
		hits_during_put(pc, d.sock, fresh, v, n, &lf[z].hit_ms, &lf[z].hit_max_ms);
		v[0] ^= 1;
		hits_during_put(pc, d.sock, key, v, n, &lf[z].hit_replace_ms,
				&lf[z].hit_replace_max_ms);
		v[0] ^= 1;
		if (ptxcache_artifact_put(pc, "large", key, v, n, 0) < 0)   /* back, for the gets */
			die("large put: %s", ptxcache_errmsg(pc));
		/* Warm gets (the value mapped, every page read), and reads of
		 * the page-cached file into the process's memory. */
		sleep(2);       /* the blob file's hash is remembered once settled */
		/* One of each untimed first: both then find this process's
		 * malloc past its first fresh pages of this size (glibc raises
		 * its mmap threshold at the first free of a block this large),
		 * whichever runs first in a round. */
		for (int r = -1; r < greps; r++) {
			struct ptxcache_artifact a;
			volatile unsigned char sum = 0;
			double t0 = now_ms();
			if (ptxcache_artifact_get(pc, "large", key, 0, 0, &a) < 0 || !a.found ||
			    a.len != n)
				die("large get: %s", ptxcache_errmsg(pc));
			for (size_t i = 0; i < n; i += 4096)
				sum ^= ((unsigned char *)a.value)[i];
			if (r >= 0)
				cg[r] = now_ms() - t0;
			if (memcmp(a.value, v, n))
				die("large get: not the value put");
			ptxcache_artifact_free(&a);
			t0 = now_ms();
			char *m = malloc(n);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			if (!m || fd < 0 || read_full(fd, m, n) < 0)
				die("cannot read '%s'", path);
			close(fd);
			if (r >= 0)
				cr[r] = now_ms() - t0;
			free(m);
		}
		lf[z].put_ms = quantile(put, (size_t)reps, 0.5);
		lf[z].fsync_ms = quantile(fs, (size_t)reps, 0.5);
		lf[z].cget_ms = quantile(cg, (size_t)greps, 0.5);
		lf[z].cread_ms = quantile(cr, (size_t)greps, 0.5);
		/* The daemon's peak over its idle RSS: a get inline, one by
		 * descriptor. */
		lf[z].idle_kb = proc_kb(d.pid, "VmRSS");
		reset_peak(d.pid);
		inline_get(d.sock, key, n);
		lf[z].peak_inline_kb = proc_kb(d.pid, "VmHWM") - lf[z].idle_kb;
		reset_peak(d.pid);
		struct ptxcache_artifact a;
		if (ptxcache_artifact_get(pc, "large", key, 0, 0, &a) < 0 || !a.found)
			die("large get: %s", ptxcache_errmsg(pc));
		ptxcache_artifact_free(&a);
		lf[z].peak_fd_kb = proc_kb(d.pid, "VmHWM") - lf[z].idle_kb;
		free(v);
		free(back);
	}
	ptxcache_close(pc);
	python_runs(d.sock, dir, lf);
	daemon_stop(&d);
}

static void large_table(const struct large_fig *lf)
{
	printf("\nlarge values (put: durable on this node; get: warm, the bytes in the process)\n");
	printf("  %6s %9s %9s %6s %9s %6s | %9s %9s %6s %7s | %9s %9s %6s | %10s %10s %10s"
	       " %10s\n",
	       "MiB", "put ms", "w+fsync", "ratio", "py put ms", "ratio", "C get ms", "read ms",
	       "ratio", "MB/s", "py get ms", "py read", "ratio", "idle KiB", "+inline", "+fd",
	       "+put");
	for (int z = 0; z < NLARGE; z++) {
		const struct large_fig *l = &lf[z];
		printf("  %6zu %9.1f %9.1f %6.2f %9.1f %6.2f | %9.2f %9.2f %6.2f %7.0f | %9.2f %9.2f"
		       " %6.2f | %10lld %10lld %10lld %10lld\n",
		       large_mb[z], l->put_ms, l->fsync_ms, l->put_ms / l->fsync_ms, l->pyput_ms,
		       l->pyput_ms / l->fsync_ms, l->cget_ms,
		       l->cread_ms, l->cget_ms / l->cread_ms,
		       (double)large_mb[z] * 1.048576 / (l->cget_ms / 1e3),
		       l->pyget_ms, l->pyread_ms, l->pyget_ms / l->pyread_ms, l->idle_kb,
		       l->peak_inline_kb, l->peak_fd_kb, l->peak_put_kb);
	}
	printf("  another client's 1 KiB hits while a put runs (its file synced and a replaced"
	       " one unlinked off the loop; its rename and commit on it):\n");
	for (int z = 0; z < NLARGE; z++)
		printf("  %6zu MiB put of a new key: hit median %.2f ms, longest %.1f ms;"
		       " replacing another value: %.2f ms, %.1f ms\n", large_mb[z], lf[z].hit_ms,
		       lf[z].hit_max_ms, lf[z].hit_replace_ms, lf[z].hit_replace_max_ms);
	printf("  (a second node's get through Redis: bench/tier.py)\n");
}

static void large_json(const struct large_fig *lf, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		die("cannot write '%s': %s", path, strerror(errno));
	fprintf(f, "[\n");
	for (int z = 0; z < NLARGE; z++) {
		const struct large_fig *l = &lf[z];
		fprintf(f, "  {\"mib\": %zu, \"put_ms\": %.3f, \"write_fsync_ms\": %.3f, "
			"\"c_get_ms\": %.3f, \"c_read_ms\": %.3f, \"py_get_ms\": %.3f, "
			"\"py_read_ms\": %.3f, \"py_put_ms\": %.3f, \"daemon_idle_kb\": %lld, "
			"\"daemon_peak_inline_kb\": %lld, \"daemon_peak_fd_kb\": %lld, "
			"\"daemon_peak_put_kb\": %lld, \"hit_during_put_ms\": %.3f, "
			"\"hit_during_put_max_ms\": %.3f, \"hit_during_replace_ms\": %.3f, "
			"\"hit_during_replace_max_ms\": %.3f}%s\n",
			large_mb[z], l->put_ms, l->fsync_ms, l->cget_ms, l->cread_ms, l->pyget_ms,
			l->pyread_ms, l->pyput_ms, l->idle_kb, l->peak_inline_kb, l->peak_fd_kb,
			l->peak_put_kb, l->hit_ms, l->hit_max_ms, l->hit_replace_ms,
			l->hit_replace_max_ms, z + 1 < NLARGE ? "," : "");
	}
	fprintf(f, "]\n");
	fclose(f);
}

static void hit_runs(struct figures *f, const struct daemon *d, int cubin)
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
			double t0 = now_ms();
			if (write_full(ffd, req, 8 + k->req_frame) < 0 ||
			    read_full(ffd, rep, k->rep_frame) < 0)
				die("floor server failed");
			flo[(size_t)p * g.nk + i] = (now_ms() - t0) * 1e3;
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
			double t0 = now_ms();
			for (int i = 0; i < g.nk; i++) {
				struct kernel *k = &g.k[i];
				hit[(size_t)p * g.nk + i] = timed_req(cubin_req, pc, k->ir, k->ir_len, 1,
								      k->name, NULL) * 1e3;
			}
			pass[p] = now_ms() - t0;
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

/*
 * nproc client processes, released together: each sends every kernel (in
 * corpus order) until the corpus is done (duration_ms 0: all start at the
 * first kernel) or the time is up (each starts at its own kernel, all
 * hits), and reports how many requests it made. Returns the wall time in ms from
 * release to the last exit; *total gets the requests made.
 */
static double clients(const char *sock, int nproc, double duration_ms,
		      long long *total)
{
	int go[2], res[2];
	pid_t pids[64];

	if (pipe(go) < 0 || pipe(res) < 0)
		die("cannot create pipes");
	for (int c = 0; c < nproc; c++) {
		if ((pids[c] = fork()) < 0)
			die("cannot fork");
		if (pids[c])
			continue;
		close(go[1]);
		close(res[0]);
		ptxcache *pc = connect_or_die(sock);
		char x;
		long long made = 0;
		if (read(go[0], &x, 1) < 0)
			_exit(1);
		double end = now_ms() + duration_ms;
		for (int i = duration_ms ? c % g.nk : 0;; i = (i + 1) % g.nk) {
			if (duration_ms ? now_ms() >= end : made == g.nk)
				break;
			timed_req(ptx_req, pc, g.k[i].ir, g.k[i].ir_len, duration_ms ? 1 : -1,
				    g.k[i].name, NULL);
			made++;
		}
		ptxcache_close(pc);
		if (write(res[1], &made, sizeof made) != sizeof made)
			_exit(1);
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	usleep(200000); /* let every client connect */
	double t0 = now_ms();
	close(go[1]);
	*total = 0;
	for (int c = 0; c < nproc; c++) {
		int st;
		waitpid(pids[c], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			die("client %d failed", c);
	}
	double t = now_ms() - t0;
	long long made;
	while (read(res[0], &made, sizeof made) == sizeof made)
		*total += made;
	close(res[0]);
	return t;
}

/* Ranks: n processes, each the whole corpus in the same order, on an empty
 * cache, so for n > 1 the ranks ask for the same kernel at nearly the same
 * time, as the ranks of one job do. */
static double ranks(int n, long long *compiles)
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

/* ---- the trust boundary ---- */

/* The median time, in ms, of n forks whose child runs argv (NULL: exits
 * at once), to the parent's wait, whatever the child's exit status. */
static double median_spawn(char *const argv[], int n)
{
	double v[32];
	n = n < 32 ? n : 32;
	for (int i = 0; i < n; i++) {
		double t0 = now_ms();
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
		v[i] = now_ms() - t0;
	}
	return quantile(v, (size_t)n, 0.5);
}

static double corpus_pass(const char *sock);

/*
 * Workers are exec'd and sandboxed, and each serves one user (the trust
 * boundary): misses over the corpus with the sandbox on and off, in turn;
 * the exec of the daemon's image in worker mode (to its first check and
 * exit) beside a bare fork, and a worker's whole start (warm_up_ms); then,
 * as root, the corpus for one user and again for a second (nobody): one
 * confirmation per kernel, no mismatch.
 */
static void trust_runs(struct figures *f)
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

/* ---- two nodes sharing Redis ---- */

/* One pass over the corpus (PTX); its wall time in ms. */
static double corpus_pass(const char *sock)
{
	ptxcache *pc = connect_or_die(sock);
	double t = 0;

	for (int i = 0; i < g.nk; i++)
		t += timed_req(ptx_req, pc, g.k[i].ir, g.k[i].ir_len, -1, g.k[i].name, NULL);
	ptxcache_close(pc);
	return t;
}

/*
 * A second node's first pass over the corpus, after a first node compiled
 * it, both with empty local caches and one real redis-server between them:
 * the tier's promise is that the second pass costs what hits cost, not what
 * compiles cost. NAN (with a note) without redis-server.
 */
static void second_node(struct figures *f)
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
static void jcount(FILE *f, const char *key, long long v)
{
	jnum(f, key, v < 0 ? NAN : (double)v, 0);
}

static void jval(FILE *f, double v)
{
	if (isnan(v))
		fputs("null", f);
	else
		fprintf(f, "%.3f", v);
}

static void write_json(const struct figures *x, const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		die("cannot write '%s': %s", path, strerror(errno));
	fputs("{\n", f);
	jnum(f, "corpus_kernels", g.nk, 0);
	jnum(f, "cold_llc_ms", x->cold_llc_ms, 0);
	jnum(f, "cold_ptxas_ms", x->cold_ptxas_ms, 0);
	jnum(f, "miss_ptx_ms", x->miss_ptx_ms, 0);
	jnum(f, "miss_sandbox_ms", x->miss_sandbox_ms, 0);
	jnum(f, "miss_nosandbox_ms", x->miss_nosandbox_ms, 0);
	jnum(f, "worker_start_ms", x->worker_start_ms, 0);
	jnum(f, "exec_worker_ms", x->exec_worker_ms, 0);
	jnum(f, "fork_exit_ms", x->fork_exit_ms, 0);
	jcount(f, "user1_compiles", x->user1_compiles);
	jcount(f, "user2_compiles", x->user2_compiles);
	jcount(f, "user2_confirmations", x->user2_confirmations);
	jcount(f, "user2_mismatches", x->user2_mismatches);
	jnum(f, "miss_cubin_ms", x->miss_cubin_ms, 0);
	jnum(f, "hit_ptx_ms", x->hit_ptx_ms, 0);
	jnum(f, "hit_cubin_ms", x->hit_cubin_ms, 0);
	jnum(f, "hit_p50_us", x->hit_p50_us, 0);
	jnum(f, "hit_p99_us", x->hit_p99_us, 0);
	jnum(f, "floor_p50_us", x->floor_p50_us, 0);
	jnum(f, "ranks8_wall_ms", x->ranks8_wall_ms, 0);
	jnum(f, "ranks1_wall_ms", x->ranks1_wall_ms, 0);
	jcount(f, "ranks8_compiles", x->ranks8_compiles);
	jnum(f, "first_request_ms", x->first_request_ms, 0);
	jnum(f, "steady_request_ms", x->steady_request_ms, 0);
	jcount(f, "stored_bytes", x->stored_bytes);
	jcount(f, "raw_bytes", x->raw_bytes);
	jcount(f, "daemon_rss_kb", x->daemon_rss_kb);
	jnum(f, "hits_per_s", x->hits_per_s, 0);
	jnum(f, "fresh_run_lineinfo_hit_pct", x->fresh_hit_pct, 0);
	/* Beyond the contract: context for the figures above. */
	jnum(f, "floor_p99_us", x->floor_p99_us, 0);
	jnum(f, "hit_cubin_p50_us", x->hit_cubin_p50_us, 0);
	jcount(f, "ranks1_compiles", x->ranks1_compiles);
	jnum(f, "daemon_start_ms", x->daemon_start_ms, 0);
	jnum(f, "warm_up_ms", x->warm_up_ms, 0);
	jcount(f, "ptx_identical_to_llc", x->ptx_identical);
	jnum(f, "distinct_kernels", g.distinct, 0);
	jnum(f, "repeat_speedup_vs_cold", (x->cold_llc_ms + (isnan(x->cold_ptxas_ms) ? 0 :
		x->cold_ptxas_ms)) / repeat_ms(x), 0);
	jnum(f, "hit_p50_over_floor", x->hit_p50_us / x->floor_p50_us, 0);
	jnum(f, "first_over_steady", x->first_request_ms / x->steady_request_ms, 0);
	jnum(f, "miss_master_cpu_us", x->miss_master_cpu_us, 0);
	jnum(f, "miss_workers_cpu_us", x->miss_workers_cpu_us, 0);
	jnum(f, "steady_master_cpu_us", x->steady_master_cpu_us, 0);
	jnum(f, "hit_master_cpu_us", x->hit_master_cpu_us, 0);
	jnum(f, "first_compile_us", x->first_compile_us, 0);
	jnum(f, "steady_compile_us", x->steady_compile_us, 0);
	jnum(f, "artifact_hit_4k_p50_us", x->art_hit_us[0], 0);
	jnum(f, "artifact_floor_4k_p50_us", x->art_floor_us[0], 0);
	jnum(f, "artifact_hit_4m_p50_us", x->art_hit_us[1], 0);
	jnum(f, "artifact_floor_4m_p50_us", x->art_floor_us[1], 0);
	jnum(f, "l2_node1_first_pass_ms", x->l2_node1_pass_ms, 0);
	jnum(f, "l2_node2_first_pass_ms", x->l2_node2_pass_ms, 0);
	jnum(f, "l2_node2_compiles", x->l2_node2_compiles < 0 ? NAN : (double)x->l2_node2_compiles, 0);
	jnum(f, "l2_node2_hits", x->l2_node2_hits < 0 ? NAN : (double)x->l2_node2_hits, 0);
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
		fprintf(f, "    {\"name\": \"%s\", \"ir_bytes\": %zu, \"ptx_bytes\": %zu, "
			"\"cubin_bytes\": %zu, \"cold_llc_ms\": ", k->name, k->ir_len,
			k->ptx_len, k->cubin_len);
		jval(f, k->cold_llc_ms);
		fputs(", \"cold_ptxas_ms\": ", f);
		jval(f, k->cold_ptxas_ms);
		fputs(", \"miss_ptx_ms\": ", f);
		jval(f, k->miss_ptx_ms);
		fputs(", \"miss_cubin_ms\": ", f);
		jval(f, g.k[i].cubin_len ? k->miss_cubin_ms : NAN);
		fputs(", \"hit_ptx_us\": ", f);
		jval(f, k->hit_ptx_us);
		fputs(", \"hit_cubin_us\": ", f);
		jval(f, k->hit_cubin_us);
		fputs(", \"floor_us\": ", f);
		jval(f, k->floor_us);
		fprintf(f, "}%s\n", i + 1 < g.nk ? "," : "");
	}
	fputs("  ]\n}\n", f);
	if (fclose(f) != 0)
		die("cannot write '%s'", path);
}

static void row(const char *what, double v, const char *unit, const char *ratio_what,
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

static void print_table(const struct figures *x)
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

/*
 * Inductor's case: every Triton PTX of the corpus assembled with -lineinfo
 * as a first run sends it (its .file naming a fresh cache directory, the
 * source file written just now), then as a second fresh run (another
 * directory of the same length, the file written again). The figure is the
 * share of the second run's requests that hit (goal: 100%).
 */
static double fresh_runs(const struct daemon *d)
{
	static const char *const args[] = { "--generate-line-info", "--gpu-name=sm_90a" };
	DIR *dir = opendir(g.corpus);
	struct dirent *e;
	int n = 0, hits = 0;

	if (!dir)
		return NAN;
	ptxcache *pc = connect_or_die(d->sock);
	while ((e = readdir(dir))) {
		size_t l = strlen(e->d_name), len;
		char path[600], src[700], *ptx, *q, *b;
		if (l < 11 || strcmp(e->d_name + l - 11, ".triton.ptx"))
			continue;
		snprintf(path, sizeof path, "%s/%s", g.corpus, e->d_name);
		if (!(ptx = read_file(path, &len)))
			continue;
		if (!(q = strstr(ptx, ".file\t1 \"")) || !(b = strchr(q + 9, '"'))) {
			free(ptx);
			continue;
		}
		const char *name = q + 9;
		const char *slash = memrchr(name, '/', (size_t)(b - name));
		if (!slash) {
			free(ptx);
			continue;
		}
		for (int run = 0; run < 2; run++) {
			char d2[400];
			struct stat st;
			snprintf(d2, sizeof d2, "%s/fresh%d", g.tmp, run);
			mkdir(d2, 0700);
			snprintf(src, sizeof src, "%s/%.*s", d2, (int)(b - slash - 1), slash + 1);
			FILE *f = fopen(src, "w");
			if (!f || fprintf(f, "# kernel %s\n", e->d_name) < 0 || fclose(f) != 0 ||
			    stat(src, &st) < 0)
				die("cannot write '%s'", src);
			size_t pre = (size_t)(name - ptx), post = len - (size_t)(b - ptx);
			char *p2 = malloc(pre + strlen(src) + post + 1);
			if (!p2)
				die("out of memory");
			memcpy(p2, ptx, pre);
			memcpy(p2 + pre, src, strlen(src));
			memcpy(p2 + pre + strlen(src), b, post);
			p2[pre + strlen(src) + post] = '\0';
			/* Every .file's stamps, as the front sends them. */
			char sources[8192];
			size_t sl = 0;
			for (const char *f1 = p2; (f1 = strstr(f1, "\t.file\t")); f1++) {
				const char *o = strchr(f1, '"'), *c = o ? strchr(o + 1, '"') : NULL;
				char fp[600];
				if (!c || (size_t)(c - o) >= sizeof fp || sl + 700 > sizeof sources)
					break;
				snprintf(fp, sizeof fp, "%.*s", (int)(c - o - 1), o + 1);
				if (stat(fp, &st) == 0)
					sl += (size_t)snprintf(sources + sl, sizeof sources - sl,
							       "%s\t%lld:%lld\n", fp,
							       (long long)st.st_mtime,
							       (long long)st.st_size);
				else
					sl += (size_t)snprintf(sources + sl, sizeof sources - sl,
							       "%s\t-\n", fp);
			}
			struct ptxcache_assemble_req a;
			struct ptxcache_result res;
			ptxcache_assemble_req_init(&a);
			a.input = p2;
			a.input_len = pre + strlen(src) + post;
			a.args = args;
			a.nargs = 2;
			a.sources = sources;
			if (ptxcache_assemble(pc, &a, &res) < 0)
				die("%s: %s", e->d_name, ptxcache_errmsg(pc));
			if (run == 1) {
				n++;
				hits += res.status == PTXCACHE_OK && res.cached;
			}
			ptxcache_result_free(&res);
			free(p2);
			unlink(src);
		}
		free(ptx);
	}
	closedir(dir);
	ptxcache_close(pc);
	return n ? 100.0 * hits / n : NAN;
}

static void usage(void)
{
	fputs("usage: bench [--quick] [--out DIR] [--corpus DIR] [--daemon PATH]\n"
	      "             [--llc PATH] [--workers N] [--hit-loop[-cubin] SECONDS]\n"
	      "             [--miss-loop SECONDS]\n"
	      "             [--redis-only] [--large] [--only start,miss,hit]\n", stderr);
	exit(2);
}

/* For profiling the hit path (bench/NOTES.md): a daemon primed with the
 * corpus, its pid on stdout, a second to attach a profiler, then hits from
 * one client for a while (cubin: IR-to-cubin requests), then the hit and
 * floor passes of a full run. */
static void hit_loop(double seconds, int cubin)
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
	double end = now_ms() + seconds * 1e3, t0 = now_ms();
	double dcpu = cpu_ns(d.pid), ccpu = cpu_ns(getpid());
	long long n = 0;
	while (now_ms() < end)
		for (int i = 0; i < g.nk; i++, n++)
			if (cubin)
				timed_req(cubin_req, pc, g.k[i].ir, g.k[i].ir_len, 1, g.k[i].name, NULL);
			else
				timed_req(ptx_req, pc, g.k[i].ir, g.k[i].ir_len, 1, g.k[i].name, NULL);
	ptxcache_close(pc);
	/* CPU time per hit holds up on a busy machine better than wall time. */
	fprintf(stderr, "bench: %lld hits, mean %.1f us; cpu per hit: daemon %.1f us, "
		"client %.1f us\n", n, (now_ms() - t0) * 1e3 / (double)n,
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

/* For profiling the miss path (bench/NOTES.md): a fresh daemon, its pid on
 * stdout, a second to attach a profiler, then misses of the smallest
 * kernel (a new nonce each: the same compile, a new key) from one client
 * for a while ("end" on stdout, and a second before the daemon stops).
 * Prints the p50 of their wall time and the CPU time per miss of the
 * master, of its workers and of the client (measured before that second). */
static void miss_loop(double seconds)
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
	double end = now_ms() + seconds * 1e3;
	double dcpu = cpu_ns(d.pid), wcpu = children_cpu_ns(d.pid), ccpu = cpu_ns(getpid());
	while (now_ms() < end && n < cap) {
		struct ptxcache_result res;
		ir = with_nonce(sm, (int)n + 1, &len);
		double t0 = now_ms();
		if (ptx_req(pc, ir, len, &res) < 0)
			die("miss: %s", ptxcache_errmsg(pc));
		t[n] = now_ms() - t0;
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

/* --redis-only: the two-node section alone, against plain misses (a
 * pass of misses through a fresh daemon without the tier, and one that
 * confirms nothing in the background either), the better of two each,
 * alternating; for work on the first pass with the tier on. */
static void redis_runs(struct figures *f, double t0)
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
	printf("\n  %.0f s\n", (now_ms() - t0) / 1e3);
	char *rm[] = { "/bin/rm", "-rf", g.tmp, NULL };
	run_timed(rm);
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
	printf("\n  %s written in %.0f s\n", path, (now_ms() - t0) / 1e3);
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

int main(int argc, char **argv)
{
	struct figures f;
	struct daemon d;
	char path[512];
	double loop = 0;
	int loop_cubin = 0, loop_miss = 0, redis_only = 0, large_only = 0;
	struct large_fig lf[NLARGE];

	memset(&f, 0, sizeof f);
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

	double t0 = now_ms();
	if (redis_only) {
		redis_runs(&f, t0);
		return 0;
	}
	if (large_only) {
		fprintf(stderr, "bench: large values\n");
		large_runs(lf);
		snprintf(path, sizeof path, "%s/large.json", g.out);
		large_json(lf, path);
		large_table(lf);
		char *rmv[] = { "/bin/rm", "-rf", g.tmp, NULL };
		run_timed(rmv);
		return 0;
	}
	if (g.only) {
		only_runs(&f, t0);
		return 0;
	}
	fprintf(stderr, "bench: %d kernels: cold llc%s processes\n", g.nk,
		g.ptxas ? " and ptxas" : "");
	cold_runs(&f);

	fprintf(stderr, "bench: fresh daemons: start to ready, first request\n");
	start_runs(&f);

	fprintf(stderr, "bench: misses through a fresh daemon\n");
	daemon_start(&d, "main");
	int cubin = g.ptxas && probe_cubin(d.sock, smallest());
	miss_runs(&f, &d, cubin);

	fprintf(stderr, "bench: hits and the floor\n");
	hit_runs(&f, &d, cubin);
	fprintf(stderr, "bench: artifact hits and the floor\n");
	artifact_runs(&f, &d);
	long long made;
	double t = clients(d.sock, 16, g.quick ? 1000 : 3000, &made);
	f.hits_per_s = (double)made / (t / 1e3);
	f.stored_bytes = stat_of(d.sock, "bytes");
	f.raw_bytes = 0;
	for (int i = 0; i < g.nk; i++)
		if (!g.k[i].dup)
			f.raw_bytes += (long long)(g.k[i].ptx_len + g.k[i].cubin_len);
	f.daemon_rss_kb = tree_rss_kb(d.pid);
	f.fresh_hit_pct = cubin ? fresh_runs(&d) : NAN;
	fprintf(stderr, "bench: second fresh run, -lineinfo cubin hits: %.1f%%\n",
		f.fresh_hit_pct);
	daemon_stop(&d);

	fprintf(stderr, "bench: large values\n");
	large_runs(lf);
	snprintf(path, sizeof path, "%s/large.json", g.out);
	large_json(lf, path);

	fprintf(stderr, "bench: a second node's first pass through Redis\n");
	second_node(&f);

	fprintf(stderr, "bench: the trust boundary: sandbox, exec, confirmation\n");
	trust_runs(&f);

	fprintf(stderr, "bench: 1 and 8 ranks on empty caches\n");
	f.ranks1_wall_ms = ranks(1, &f.ranks1_compiles);
	f.ranks8_wall_ms = ranks(8, &f.ranks8_compiles);

	snprintf(path, sizeof path, "%s/results.json", g.out);
	write_json(&f, path);
	print_table(&f);
	large_table(lf);
	printf("\n  %s written in %.0f s\n", path, (now_ms() - t0) / 1e3);
	char *rm[] = { "/bin/rm", "-rf", g.tmp, NULL };
	run_timed(rm);
	return 0;
}
