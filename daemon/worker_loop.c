/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_loop: what a worker process runs (ptxcached --worker, exec'd by
 * the pool in worker.c). See worker.h for the model.
 *
 * Its life: read the hello (option set, profile, limits, sandbox mode),
 * initialise LLVM and warm it up (a compile worker) or set its private
 * TMPDIR (an assembler worker), enter the sandbox, answer the hello with
 * its pid and the sandbox it is in (or why it could not start), then run
 * one job per frame until the master closes the socket. While it starts,
 * stderr is a memory file the master reads if it dies before the hello;
 * an LLVM fatal error is sent as the job's reason before the abort.
 *
 * It trusts the master (its parent, the only peer of fd 3) but not the
 * input it compiles: LLVM or ptxas taken over by an input is what the
 * sandbox confines.
 */
#include "daemon/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/codegen.h"
#include "daemon/cubin.h"
#include "daemon/sandbox.h"
#ifdef PTXCACHE_PROBES
#include "daemon/probe.h"
#endif
#include "proto/frame.h"
#include "proto/msg.h"

static int wfd = -1;            /* the socket to the master */
static int started;             /* warmed up; stderr is the daemon's again */

static int read_full(int fd, void *p, size_t n)
{
	char *c = p;
	while (n > 0) {
		ssize_t r = read(fd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

static void send_reply(int status, const struct buf *ptx, const struct buf *lg,
		       int64_t us)
{
	struct buf out = BUF_INIT;
	struct msg_writer mw;

	msg_begin(&mw, &out, FRAME_JOB | FRAME_REPLY);
	msg_put_int(&mw, "status", status);
	if (ptx && ptx->len)
		msg_put_bin(&mw, "output", ptx->data, ptx->len);
	msg_put_strn(&mw, "log", lg->data ? lg->data : "", lg->len);
	msg_put_int(&mw, "compile_us", us);
	if (msg_end(&mw) < 0 || buf_write_fd(wfd, out.data, out.len) < 0)
		_exit(1);
	buf_free(&out);
}

static struct timespec job_start;

static int64_t elapsed_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)(t.tv_sec - job_start.tv_sec) * 1000000 +
	       (t.tv_nsec - job_start.tv_nsec) / 1000;
}

/* LLVM is about to end the process: tell the master why, as llc would
 * print it, and whether llc would abort (crash) or exit with status 1. */
static void on_fatal(const char *printed, size_t printed_len, const char *reason,
		     int crash)
{
	struct buf lg = BUF_INIT;

	buf_append(&lg, printed, printed_len);
	buf_printf(&lg, "LLVM ERROR: %s\n", reason);
	if (!started)   /* a warm-up kernel: into the master's start log */
		fwrite(lg.data, 1, lg.len, stderr);
	send_reply(crash ? JOB_FATAL : JOB_FATAL_EXIT, NULL, &lg, elapsed_us());
	if (!crash)
		_exit(0);       /* an orderly end: the master expects it */
	/* No core dump for an expected abort. */
	struct rlimit no = { 0, 0 };
	setrlimit(RLIMIT_CORE, &no);
}

static int job_timeout_ms;      /* the pool's limit, for an assembler */

/* An assembler job (kind "cubin"): no LLVM; see cubin.h. */
static void run_cubin_job(const struct msg *m)
{
	struct cubin_job job = { 0 };
	struct cubin_result res = { 0 };
	struct buf out = BUF_INIT;
	struct msg_writer mw;
	char *path = NULL, *args = NULL, *sources = NULL;
	int64_t backend = 0;

	if (msg_bytes(m, "input", (const char **)&job.ptx, &job.ptx_len) != 1 ||
	    msg_strdup(m, "asm_path", &path) != 1 ||
	    msg_strdup(m, "args", &args) < 0 ||
	    msg_strdup(m, "sources", &sources) < 0 ||
	    msg_int(m, "backend", &backend) < 0)
		_exit(1);
	job.backend = backend == CUBIN_NVJITLINK ? CUBIN_NVJITLINK : CUBIN_PTXAS;
	job.path = path;
	job.args = args;
	job.sources = sources;
	/* Kill the assembler a little before the master kills us. */
	job.timeout_ms = job_timeout_ms > 1000 ? job_timeout_ms - 500 : job_timeout_ms;
	cubin_run(&job, &res);
	msg_begin(&mw, &out, FRAME_JOB | FRAME_REPLY);
	msg_put_int(&mw, "status", res.status);
	if (res.cubin.len)
		msg_put_bin(&mw, "output", res.cubin.data, res.cubin.len);
	msg_put_strn(&mw, "log", res.log.data ? res.log.data : "", res.log.len);
	msg_put_int(&mw, "compile_us", elapsed_us());
	msg_put_int(&mw, "exit_code", res.exit_code);
	if (msg_end(&mw) < 0 || buf_write_fd(wfd, out.data, out.len) < 0)
		_exit(1);
	buf_free(&out);
	buf_free(&res.cubin);
	buf_free(&res.log);
	free(path);
	free(args);
	free(sources);
}

static void run_job(const void *body, size_t len)
{
	struct msg m;
	struct codegen_job job = { 0 };
	struct codegen_result res = { 0 };
	char *name = NULL, *triple = NULL, *march = NULL, *cpu = NULL,
	     *features = NULL, *pipeline = NULL;
	int64_t opt = 2;
	int emit = 1, strict = 0;

	clock_gettime(CLOCK_MONOTONIC, &job_start);
	if (msg_parse(&m, body, len, &MSG_LIMITS_DEFAULT, NULL) < 0)
		_exit(1);
#ifdef PTXCACHE_PROBES
	const char *pin;
	size_t pinn;
	struct buf plog = BUF_INIT;
	if (msg_bytes(&m, "input", &pin, &pinn) == 1 && probe_run(pin, pinn, &plog)) {
		if (probe_linger_mb >= 0) {
			static char junk[1 << 20];
			send_reply(JOB_FATAL_EXIT, NULL, &plog, elapsed_us());
			for (long i = 0; i < probe_linger_mb; i++)
				if (buf_write_fd(wfd, junk, sizeof junk) < 0)
					break;
			for (;;) {      /* the sandbox allows sleeping */
				struct timespec ts = { 1000, 0 };
				clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
			}
		}
		send_reply(JOB_ERROR, NULL, &plog, elapsed_us());
		buf_free(&plog);
		msg_free(&m);
		return;
	}
#endif
	const char *kind;
	size_t kindn;
	if (msg_bytes(&m, "kind", &kind, &kindn) == 1 && kindn == 5 &&
	    !memcmp(kind, "cubin", 5)) {
		run_cubin_job(&m);
		msg_free(&m);
		return;
	}
	if (msg_bytes(&m, "input", (const char **)&job.input, &job.input_len) != 1 ||
	    msg_strdup(&m, "name", &name) < 0 ||
	    msg_strdup(&m, "triple", &triple) < 0 ||
	    msg_strdup(&m, "march", &march) < 0 ||
	    msg_strdup(&m, "cpu", &cpu) < 0 ||
	    msg_strdup(&m, "features", &features) < 0 ||
	    msg_strdup(&m, "pipeline", &pipeline) < 0 ||
	    msg_int(&m, "opt", &opt) < 0 || msg_bool(&m, "emit", &emit) < 0 ||
	    msg_bool(&m, "strict", &strict) < 0)
		_exit(1); /* the master sent garbage: let it see us die */
	job.name = name ? name : "<stdin>";
	job.triple = triple;
	job.march = march;
	job.cpu = cpu;
	job.features = features;
	job.opt_level = (int)opt;
	job.pipeline = pipeline;
	job.emit = emit;
	job.strict = strict;
	codegen_run(&job, &res);
#ifdef PTXCACHE_PROBES
	if (probe_compromised && res.status == CG_OK) {
		struct buf alt = BUF_INIT;
		buf_puts(&alt, PROBE_ALTERED);
		buf_append(&alt, res.ptx.data, res.ptx.len);
		buf_free(&res.ptx);
		res.ptx = alt;
	}
#endif
	send_reply(res.status, &res.ptx, &res.log, elapsed_us());
	buf_free(&res.ptx);
	buf_free(&res.log);
	msg_free(&m);
	free(name);
	free(triple);
	free(march);
	free(cpu);
	free(features);
	free(pipeline);
}

/* Read one whole frame of type want from the master; its body in body. */
static int read_frame(int fd, int want, uint32_t max, struct buf *body)
{
	unsigned char hdr[FRAME_HDR_LEN];
	struct frame_hdr h;

	if (read_full(fd, hdr, sizeof hdr) < 0)
		return -1;
	if (frame_parse_hdr(hdr, sizeof hdr, max, &h, NULL) != 1 || h.type != want)
		_exit(1);       /* the master sent garbage: let it see us die */
	buf_reset(body);
	if (buf_reserve(body, h.len) < 0 || read_full(fd, body->data, h.len) < 0)
		_exit(1);
	body->len = h.len;
	return 0;
}

/* The system's read-only trees an assembler worker may read and execute
 * from, besides those the master names (the assembler's own). Not /etc
 * (secrets live there), not /home, /var, /tmp or /run. */
static const char *const system_roots[] = {
	"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache",
	"/proc", "/sys/devices/system/cpu", "/dev/null", "/dev/zero", "/dev/urandom",
};

/* Sandbox this worker (see sandbox.h); mode "off", "auto" or "require".
 * On success the hello carries what was applied; NULL means go on. */
static const char *enter_sandbox(const char *mode, int assembler, char *roots,
				 const char *tmp, struct buf *said)
{
	const char *paths[sizeof system_roots / sizeof *system_roots + 8];
	size_t n = 0;
	struct buf missing = BUF_INIT;

	if (!strcmp(mode, "off")) {
		buf_puts(said, "off");
		return NULL;
	}
	for (size_t i = 0; i < sizeof system_roots / sizeof *system_roots; i++)
		paths[n++] = system_roots[i];
	char *save = NULL;
	for (char *t = strtok_r(roots, "\n", &save); t && n < sizeof paths / sizeof *paths - 1;
	     t = strtok_r(NULL, "\n", &save))
		paths[n++] = t;
	paths[n] = NULL;
	struct sandbox_paths sp = { .read_roots = paths, .write_root = tmp };
	int r = sandbox_apply(assembler ? SANDBOX_ASSEMBLER : SANDBOX_CODEGEN, &sp, &missing);
	if (r < 0 || (r > 0 && !strcmp(mode, "require"))) {
		buf_printf(said, "sandbox %s: %s", r < 0 ? "failed" : "incomplete",
			   missing.data ? missing.data : "?");
		buf_free(&missing);
		return said->data;
	}
	buf_printf(said, "%s%s", r ? "applied without " : "all applied", r ? missing.data : "");
	buf_free(&missing);
	return NULL;
}

int worker_run(void)
{
	struct buf err = BUF_INIT, body = BUF_INIT, out = BUF_INIT, said = BUF_INIT;
	struct msg_writer mw;
	struct msg m;
	struct stat st;
	static const int sigs[] = { SIGCHLD, SIGTERM, SIGHUP, SIGINT, SIGPIPE };
	char *optset = NULL, *profile = NULL, *warm_cpu = NULL, *warm_features = NULL,
	     *mode = NULL, *roots = NULL, *tmp = NULL;
	int64_t timeout_s = 0, mem_limit = 0;
	const int start_log = 4;

	if (fstat(3, &st) < 0 || !S_ISSOCK(st.st_mode) || fstat(start_log, &st) < 0) {
		fprintf(stderr, "ptxcached: --worker is the daemon's own mode for its workers\n");
		return 2;
	}
	wfd = 3;
	/* Not ptxas's to inherit (cubin.c spawns it): a child still holding
	 * the master's socket would keep its end of file, and so the job's
	 * end, from the master after this worker is gone. */
	fcntl(wfd, F_SETFD, FD_CLOEXEC);
	/* While starting, stderr is the master's memory file: if we die
	 * before the hello, what we printed is the reason. */
	int stderr_fd = dup(STDERR_FILENO);
	dup2(start_log, STDERR_FILENO);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		signal(sigs[i], SIG_DFL);
	if (read_frame(wfd, FRAME_HELLO, 1 << 20, &body) < 0)
		_exit(0);
	if (msg_parse(&m, body.data, body.len, &MSG_LIMITS_DEFAULT, NULL) < 0 ||
	    msg_strdup(&m, "optset", &optset) != 1 || msg_strdup(&m, "profile", &profile) != 1 ||
	    msg_int(&m, "job_timeout_s", &timeout_s) != 1 ||
	    msg_int(&m, "mem_limit", &mem_limit) != 1 ||
	    msg_strdup(&m, "warm_cpu", &warm_cpu) != 1 ||
	    msg_strdup(&m, "warm_features", &warm_features) != 1 ||
	    msg_strdup(&m, "sandbox", &mode) != 1 || msg_strdup(&m, "read_roots", &roots) != 1 ||
	    msg_strdup(&m, "tmp", &tmp) != 1)
		_exit(1);
	msg_free(&m);
	job_timeout_ms = (int)timeout_s * 1000;
	/* Under AddressSanitizer (make check-asan) no address-space cap: its
	 * shadow memory reserves terabytes of address space up front. */
#ifndef __SANITIZE_ADDRESS__
	if (mem_limit > 0) {
		struct rlimit rl = { (rlim_t)mem_limit, (rlim_t)mem_limit };
		setrlimit(RLIMIT_AS, &rl);
	}
#endif
	int assembler = !strcmp(profile, "assembler"), ok = 1;
	if (assembler) {
		/* ptxas and make_tmp() work in the private directory. */
		setenv("TMPDIR", tmp, 1);
	} else {
		/* optset: '\n'-separated backend options. */
		char *save = NULL;
		const char *argv[64];
		int argc = 0;
		for (char *t = strtok_r(optset, "\n", &save); t && argc < 64;
		     t = strtok_r(NULL, "\n", &save))
			argv[argc++] = t;
		ok = codegen_init(argc, argv, on_fatal, &err) == 0;
		if (ok)
			codegen_warm_up(warm_cpu, *warm_features ? warm_features : NULL);
	}
	const char *refused = ok ? enter_sandbox(mode, assembler, roots, tmp, &said) : NULL;
	if (stderr_fd >= 0) {
		dup2(stderr_fd, STDERR_FILENO);
		close(stderr_fd);
	}
	close(start_log);
	started = 1;
	msg_begin(&mw, &out, FRAME_HELLO | FRAME_REPLY);
	msg_put_int(&mw, "pid", getpid());
	if (!ok)
		msg_put_str(&mw, "error", err.len ? err.data : "cannot initialise LLVM");
	else if (refused)
		msg_put_str(&mw, "error", refused);
	else
		msg_put_str(&mw, "sandbox", said.data ? said.data : "");
	if (msg_end(&mw) < 0 || buf_write_fd(wfd, out.data, out.len) < 0 || !ok || refused)
		_exit(0);

	for (;;) {
		if (read_frame(wfd, FRAME_JOB, UINT32_MAX, &body) < 0)
			_exit(0); /* the master closed our socket: retire */
		run_job(body.data, body.len);
	}
}
