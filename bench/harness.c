/* SPDX-License-Identifier: Apache-2.0 */
/*
 * harness: what every section of the bench stands on. The run's settings
 * (g) and its notes; die(), which stops the daemon running now; the clock
 * and medians; private daemons on cache directories of their own in the
 * run's temp dir, started and stopped, and their stats, memory and CPU
 * time read from /proc; the requests every figure uses (Triton's own llc
 * flags, and the cubin stage on top) and one timed request; the floor, a
 * bare Unix-socket echo server that SHA-256es each request; the corpus
 * loaded, ptxas found, and client processes released together. Nothing
 * here measures a figure of its own: the scn_*.c files do.
 */
#include "bench/bench.h"

struct bench g = {
	.daemon = "build/ptxcached",
	.corpus = "build/corpus/triton",
	.out = "build/bench",
	.llc = "/usr/lib/llvm-22/bin/llc",
	.workers = 2,
};

/* The daemon running now, stopped by die() in the bench process itself. */
pid_t live_daemon, bench_pid;

void die(const char *fmt, ...)
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

void note(const char *fmt, ...)
{
	va_list ap;

	if (g.nnotes == 16)
		return;
	va_start(ap, fmt);
	vsnprintf(g.notes[g.nnotes++], sizeof g.notes[0], fmt, ap);
	va_end(ap);
	fprintf(stderr, "bench: note: %s\n", g.notes[g.nnotes - 1]);
}

double bench_now_ms(void)
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
double quantile(double *v, size_t n, double q)
{
	if (!n)
		return NAN;
	qsort(v, n, sizeof *v, cmp_double);
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

char *read_file(const char *path, size_t *len)
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
void set_path(struct sockaddr_un *sa, const char *path)
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
double run_timed(char *const argv[])
{
	double t0 = bench_now_ms();
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
	double t = bench_now_ms() - t0;
	last_status = st;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t : -1;
}

/* A cold tool run, once more if it fails (a busy machine has killed one
 * here); its wall time in ms. */
double run_cold(char *const argv[], const char *what)
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

ptxcache *connect_or_die(const char *sock)
{
	char err[512];
	ptxcache *pc = ptxcache_connect(sock, CALL_TIMEOUT_MS, err, sizeof err);
	if (!pc)
		die("%s", err);
	return pc;
}

void daemon_start(struct daemon *d, const char *name)
{
	daemon_start_with(d, name, NULL);
}

/* Start a private daemon; extra: more flags, NULL-terminated, or NULL. */
void daemon_start_with(struct daemon *d, const char *name,
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
	double t0 = bench_now_ms();
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
		if (bench_now_ms() - t0 > 60000)
			die("'%s' did not answer within 60 s", g.daemon);
		usleep(2000);
	}
	d->start_ms = bench_now_ms() - t0;
}

void daemon_stop(struct daemon *d)
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
long long stat_of(const char *sock, const char *name)
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
long long tree_rss_kb(pid_t pid)
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
double cpu_ns(pid_t pid)
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
double children_cpu_ns(pid_t pid)
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
void kernel_req(struct ptxcache_compile_req *r, const char *ir, size_t n)
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
char *with_nonce(const struct kernel *k, int nonce, size_t *n)
{
	char *p = malloc(k->ir_len + 64);

	if (!p)
		die("out of memory");
	memcpy(p, k->ir, k->ir_len);
	*n = k->ir_len + (size_t)sprintf(p + k->ir_len, NONCE_FMT, nonce);
	return p;
}

int ptx_req(ptxcache *pc, const char *ir, size_t n, struct ptxcache_result *res)
{
	struct ptxcache_compile_req r;

	kernel_req(&r, ir, n);
	return ptxcache_compile(pc, &r, res);
}

/* The worker's own compile time of the last timed_req() (0 on a hit). */
int64_t last_compile_us;

/* One request through call (ptx_req or cubin_req); its wall time in ms.
 * Dies unless it succeeds; want_cached: 0 or 1 must match, -1 either. */
double timed_req(int (*call)(ptxcache *, const char *, size_t,
			     struct ptxcache_result *),
		 ptxcache *pc, const char *ir, size_t n, int want_cached,
		 const char *what, size_t *out_len)
{
	struct ptxcache_result res;

	double t0 = bench_now_ms();
	if (call(pc, ir, n, &res) < 0)
		die("%s: %s", what, ptxcache_errmsg(pc));
	double t = bench_now_ms() - t0;
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

int cubin_req(ptxcache *pc, const char *ir, size_t n,
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
int probe_cubin(const char *sock, const struct kernel *k)
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
int read_full(int fd, void *p, size_t n)
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

int write_full(int fd, const void *p, size_t n)
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

pid_t floor_start(const char *path, size_t maxlen)
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

void load_corpus(void)
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

const char *find_ptxas(void)
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

/* Every figure null (NAN, or -1 for counts): what --only leaves of the
 * sections it does not run. */
void unmeasured(struct figures *f)
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

/* The smallest kernel: the subject of the first-versus-steady figures. */
struct kernel *smallest(void)
{
	struct kernel *s = &g.k[0];
	for (int i = 1; i < g.nk; i++)
		if (g.k[i].ir_len < s->ir_len)
			s = &g.k[i];
	return s;
}

/*
 * Wait (up to 60 s) until the daemon has no confirmation queued, running
 * or in a live worker: under sharing = confirm every new entry is
 * compiled once more in idle time, by a worker exec'd for it, and the
 * steady and hit figures are not of the corpus's confirmations (the first
 * request's daemon has none either). Returns the ms waited.
 */
double settle(const char *sock)
{
	double t0 = bench_now_ms();

	for (;;) {
		long long pending = stat_of(sock, "confirms_pending");
		long long running = stat_of(sock, "confirms_running");
		long long live = stat_of(sock, "confirm_workers_live");
		if (pending <= 0 && running <= 0 && live <= 0)
			return bench_now_ms() - t0;
		if (bench_now_ms() - t0 > 60000) {
			note("confirmations still in the background after 60 s: the steady "
			     "and hit figures are not of a quiet daemon");
			return bench_now_ms() - t0;
		}
		usleep(5000);
	}
}

/*
 * nproc client processes, released together: each sends every kernel (in
 * corpus order) until the corpus is done (duration_ms 0: all start at the
 * first kernel) or the time is up (each starts at its own kernel, all
 * hits), and reports how many requests it made. Returns the wall time in ms from
 * release to the last exit; *total gets the requests made.
 */
double clients(const char *sock, int nproc, double duration_ms,
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
		double end = bench_now_ms() + duration_ms;
		for (int i = duration_ms ? c % g.nk : 0;; i = (i + 1) % g.nk) {
			if (duration_ms ? bench_now_ms() >= end : made == g.nk)
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
	double t0 = bench_now_ms();
	close(go[1]);
	*total = 0;
	for (int c = 0; c < nproc; c++) {
		int st;
		waitpid(pids[c], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			die("client %d failed", c);
	}
	double t = bench_now_ms() - t0;
	long long made;
	while (read(res[0], &made, sizeof made) == sizeof made)
		*total += made;
	close(res[0]);
	return t;
}

/* One pass over the corpus (PTX); its wall time in ms. */
double corpus_pass(const char *sock)
{
	ptxcache *pc = connect_or_die(sock);
	double t = 0;

	for (int i = 0; i < g.nk; i++)
		t += timed_req(ptx_req, pc, g.k[i].ir, g.k[i].ir_len, -1, g.k[i].name, NULL);
	ptxcache_close(pc);
	return t;
}
