/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_large: values of 1, 8, 64 and 256 MiB (half text, half random
 * bytes): puts through libptxcache and through the Python client against
 * a write+fsync of the same bytes, warm gets against reads of a
 * page-cached file, the daemon's peak RSS over its idle RSS, and another
 * client's 1 KiB hits while a put runs. Written to large.json and a table
 * of their own (--large runs this section alone).
 */
#include "bench/bench.h"

/* ---- large values ---------------------------------------------------- */

static const size_t large_mb[NLARGE] = { 1, 8, 64, 256 };
/* Warm gets (and their reads) of values up to 8 MiB, each well under a
 * few ms: a median of so many, since one of 3 or 5 moved by 30% from run
 * to run on one host (a wake-up more or less). */
#define SMALL_GET_REPS 51

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
			double t0 = bench_now_ms();
			if (ptxcache_artifact_get(c, "large", "small", 0, 0, &a) < 0 || !a.found)
				_exit(1);
			t[k++] = bench_now_ms() - t0;
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

void large_runs(struct large_fig *lf)
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
			double t0 = bench_now_ms();
			if (ptxcache_artifact_put(pc, "large", key, v, n, 0) < 0)
				die("large put: %s", ptxcache_errmsg(pc));
			put[r] = bench_now_ms() - t0;
			blobs_settle(&d);
			t0 = bench_now_ms();
			int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
			if (fd < 0 || write_full(fd, v, n) < 0 || fsync(fd) < 0)
				die("cannot write '%s': %s", path, strerror(errno));
			close(fd);
			fs[r] = bench_now_ms() - t0;
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
			double t0 = bench_now_ms();
			if (ptxcache_artifact_get(pc, "large", key, 0, 0, &a) < 0 || !a.found ||
			    a.len != n)
				die("large get: %s", ptxcache_errmsg(pc));
			for (size_t i = 0; i < n; i += 4096)
				sum ^= ((unsigned char *)a.value)[i];
			if (r >= 0)
				cg[r] = bench_now_ms() - t0;
			if (memcmp(a.value, v, n))
				die("large get: not the value put");
			ptxcache_artifact_free(&a);
			t0 = bench_now_ms();
			char *m = malloc(n);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			if (!m || fd < 0 || read_full(fd, m, n) < 0)
				die("cannot read '%s'", path);
			close(fd);
			if (r >= 0)
				cr[r] = bench_now_ms() - t0;
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

void large_table(const struct large_fig *lf)
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

void large_json(const struct large_fig *lf, const char *path)
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
