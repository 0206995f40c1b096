/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin: the assembler back ends (see cubin.h).
 *
 * ptxas runs as a subprocess, started as posix_spawn does (no fork of a
 * large worker) but killed with its worker (PR_SET_PDEATHSIG): the PTX
 * written to a private temporary directory, stdout and stderr sent to
 * files there, the wait bounded by a deadline (pidfd + poll) after which the
 * assembler is killed; RLIMIT_CPU on the child bounds it even if its worker
 * is killed first, and RLIMIT_FSIZE bounds each file it writes to what we
 * read back (CUBIN_MAX). The temporary path appears in ptxas's messages, so
 * it is replaced by CUBIN_INPUT_NAME before the log leaves the worker: the
 * cached log must not depend on where one compile happened to run.
 *
 * nvJitLink is loaded with dlopen() in the worker on its first nvJitLink
 * job and kept; it links one PTX input to a cubin in process. Its options
 * are "-arch=" plus every ptxas option as "-Xptxas=OPT".
 *
 * Never: run in the master except cubin_find_*() at start, pass a client's
 * bytes to a shell, or let an option name a file (ptxas_args_check()
 * guarantees the options; the input and output paths are ours).
 */
#include "daemon/cubin.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "daemon/log.h"
#include "daemon/worker_spawn.h"

extern char **environ;

/* The last-resort toolkit, unless $PTXCACHE_DEFAULT_CUDA says otherwise. */
#define DEFAULT_CUDA "/usr/local/cuda"
#define NVJITLINK_SONAME "libnvJitLink.so.13"
/* Largest cubin or log we read back: far above any real kernel's. */
#define CUBIN_MAX (256u << 20)

/* ---- files and processes -------------------------------------------- */

static int read_file(const char *path, struct buf *out, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int r = buf_read_fd(out, fd, max), e = errno;
	close(fd);
	errno = e;
	return r;
}

static int write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd < 0)
		return -1;
	if (buf_write_fd(fd, p, n) < 0) {
		close(fd);
		return -1;
	}
	return close(fd);
}

/* A private directory for one run; the caller removes it with rm_tmp(). */
static int make_tmp(char *dir, size_t len)
{
	const char *t = getenv("TMPDIR");

	snprintf(dir, len, "%s/ptxcache-asm-XXXXXX", t && *t ? t : "/tmp");
	return mkdtemp(dir) ? 0 : -1;
}

static void rm_tmp(const char *dir)
{
	static const char *const names[] = { "input.ptx", "out.cubin", "stdout", "stderr" };
	char p[4200];

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The assembler's child until its exec (see spawn_wait()). */
struct asm_child {
	char *const *argv;
	const char *out, *err;
	sigset_t mask;
	pid_t parent;
	int exec_errno;         /* written by the child: its exec failed */
};

/*
 * The child runs on a stack of its own in our memory (clone() with
 * CLONE_VM | CLONE_VFORK, as posix_spawn() does; we wait until its exec),
 * so it makes system calls alone and writes only to its stack and
 * exec_errno. Unlike posix_spawn(), it asks for SIGKILL when its parent
 * dies: a ptxas whose worker was killed (a job's deadline, a crash, a
 * stop) goes with it, however it spends its time.
 */
static int asm_child(void *arg)
{
	struct asm_child *c = arg;
	/* Close-on-exec: only their copies as 0, 1 and 2 go on. */
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int out = open(c->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int err = open(c->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	child_signals_default(&c->mask);
	if (null < 0 || out < 0 || err < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 ||
	    dup2(err, 2) < 0) {
		c->exec_errno = errno;
		_exit(127);
	}
	/* No file it writes (its cubin, its log) larger than we read back, and
	 * no core file: the disk under the workers' directory is the cache's.
	 * A write past the bound fails with EFBIG (SIGXFSZ is ignored by the
	 * master, so by this child too). */
	struct rlimit fsize = { CUBIN_MAX, CUBIN_MAX }, core = { 0, 0 };
	if (setrlimit(RLIMIT_FSIZE, &fsize) < 0 || setrlimit(RLIMIT_CORE, &core) < 0) {
		c->exec_errno = errno;
		_exit(127);
	}
	/* Killed with its parent; and no run at all if the parent died first
	 * (nobody waits for it). */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != c->parent) {
		c->exec_errno = ESRCH;
		_exit(127);
	}
	execve(c->argv[0], c->argv, environ);
	c->exec_errno = errno;
	_exit(127);
}

/*
 * Run argv with stdin from /dev/null and stdout, stderr into dir/stdout,
 * dir/stderr; wait at most timeout_ms (0: forever), then kill it. Returns 0
 * with *wstatus set (*timed_out 1 if it was killed for time), or -1 with
 * errno set if it could not be started.
 */
static int spawn_wait(char *const argv[], const char *dir, int timeout_ms,
		      int *wstatus, int *timed_out)
{
	/* One run at a time in a process; we wait until its exec. */
	static char stack[64 << 10] __attribute__((aligned(16)));
	char out[4200], err[4200];
	struct asm_child c = { .argv = argv, .out = out, .err = err, .parent = getpid() };
	sigset_t all;
	pid_t pid;

	*timed_out = 0;
	snprintf(out, sizeof out, "%s/stdout", dir);
	snprintf(err, sizeof err, "%s/stderr", dir);
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &c.mask);
	pid = clone(asm_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
	int clone_errno = errno;
	sigprocmask(SIG_SETMASK, &c.mask, NULL);
	if (pid < 0) {
		errno = clone_errno;
		return -1;
	}
	if (c.exec_errno) {
		while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR)
			;
		errno = c.exec_errno;
		return -1;
	}
	if (timeout_ms > 0) {
		/* Even if our worker is killed first, the child stops. */
		rlim_t cpu = (rlim_t)timeout_ms / 1000 + 2;
		struct rlimit rl = { cpu, cpu + 1 };
		prlimit(pid, RLIMIT_CPU, &rl, NULL);
		int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (pfd >= 0) {
			int64_t deadline = now_ms() + timeout_ms;
			for (;;) {
				int64_t left = deadline - now_ms();
				struct pollfd p = { .fd = pfd, .events = POLLIN };
				if (left <= 0) {
					kill(pid, SIGKILL);
					*timed_out = 1;
					break;
				}
				int n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
				if (n > 0)
					break;
				if (n < 0 && errno != EINTR)
					break;
			}
			close(pfd);
		}
	}
	while (waitpid(pid, wstatus, 0) < 0) {
		if (errno != EINTR) {
			*wstatus = 0;
			break;
		}
	}
	return 0;
}

/* Replace every occurrence of from in b by to. */
static void replace_all(struct buf *b, const char *from, const char *to)
{
	struct buf o = BUF_INIT;
	size_t fl = strlen(from);
	const char *p = b->data, *end, *hit;

	if (!b->len || !fl || !memmem(b->data, b->len, from, fl))
		return;
	end = b->data + b->len;
	while ((hit = memmem(p, (size_t)(end - p), from, fl))) {
		buf_append(&o, p, (size_t)(hit - p));
		buf_puts(&o, to);
		p = hit + fl;
	}
	buf_append(&o, p, (size_t)(end - p));
	buf_free(b);
	*b = o;
}

static int sha256_file(const char *path, char hex[65])
{
	static const char dig[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE], chunk[1 << 16];
	unsigned int mdlen = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -1;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	if (fd < 0 || !ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		goto out;
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto out;
		if (n == 0)
			break;
		if (EVP_DigestUpdate(ctx, chunk, (size_t)n) != 1)
			goto out;
	}
	if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32)
		goto out;
	for (unsigned i = 0; i < 32; i++) {
		hex[2 * i] = dig[md[i] >> 4];
		hex[2 * i + 1] = dig[md[i] & 15];
	}
	hex[64] = '\0';
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	EVP_MD_CTX_free(ctx);
	return rc;
}

/* ---- discovery (master, at start) ----------------------------------- */

static int usable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int readable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, R_OK) == 0;
}

static const char *default_cuda(void)
{
	const char *d = getenv("PTXCACHE_DEFAULT_CUDA");
	return d ? d : DEFAULT_CUDA;
}

/* The first candidate that passes ok(), with where it came from. An
 * explicit choice (--flag or the env variable) ends the search either way;
 * then *explicit_from names it. */
static char *search(const char *configured, const char *flag, const char *env,
		    const char *sub, const char *leaf, int use_path,
		    int (*ok)(const char *), const char **explicit_from)
{
	const char *e;
	char *p = NULL;

	*explicit_from = NULL;
	if (configured) {
		*explicit_from = flag;   /* a flag, the file or the environment */
		return strdup(configured);
	}
	if ((e = getenv(env)) && *e) {
		*explicit_from = env;
		return strdup(e);
	}
	const char *roots[] = { getenv("CUDA_HOME"), default_cuda() };
	for (size_t i = 0; i < 2; i++) {
		if (!roots[i] || !*roots[i])
			continue;
		if (asprintf(&p, "%s/%s/%s", roots[i], sub, leaf) < 0)
			return NULL;
		if (ok(p))
			return p;
		free(p);
		p = NULL;
	}
	if (!use_path || !(e = getenv("PATH")))
		return NULL;
	for (const char *d = e; *d;) {
		size_t n = strcspn(d, ":");
		if (n && asprintf(&p, "%.*s/%s", (int)n, d, leaf) >= 0) {
			if (ok(p))
				return p;
			free(p);
			p = NULL;
		}
		d += n + (d[n] == ':');
	}
	return NULL;
}

static void set_why(struct cubin_backend *b, const char *fmt, const char *a,
		    const char *c)
{
	if (asprintf(&b->why, fmt, a, c) < 0)
		b->why = NULL;
	free(b->path);
	b->path = NULL;
}

void cubin_find_ptxas(const char *configured, struct cubin_backend *b)
{
	const char *from;
	char dir[4096], hex[65];
	struct buf out = BUF_INIT;
	int ws = 0, to = 0;

	memset(b, 0, sizeof *b);
	b->kind = CUBIN_PTXAS;
	if (configured && !strcmp(configured, "none")) {
		set_why(b, "cubin output is disabled (ptxcached --ptxas none)%s%s", "", "");
		return;
	}
	b->path = search(configured, "the 'ptxas' setting", "PTXCACHE_PTXAS", "bin", "ptxas", 1,
			 usable, &from);
	if (!b->path) {
		set_why(b, "no ptxas found (set $PTXCACHE_PTXAS or CUDA_HOME, or start "
			"ptxcached with --ptxas PATH)%s%s", "", "");
		return;
	}
	if (!usable(b->path)) {
		set_why(b, "cannot use ptxas '%s' (from %s): not an executable file",
			b->path, from);
		return;
	}
	char *argv[] = { b->path, "--version", NULL };
	if (make_tmp(dir, sizeof dir) < 0 ||
	    spawn_wait(argv, dir, 30000, &ws, &to) < 0) {
		set_why(b, "cannot run '%s': %s", b->path, strerror(errno));
		return;
	}
	char so[4200];
	snprintf(so, sizeof so, "%s/stdout", dir);
	read_file(so, &out, 1 << 16);
	rm_tmp(dir);
	if (to || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || !out.len ||
	    !strstr(out.data, "ptxas")) {
		buf_free(&out);
		set_why(b, "'%s --version' failed; is it %s?", b->path, "ptxas");
		return;
	}
	if (sha256_file(b->path, hex) < 0) {
		buf_free(&out);
		set_why(b, "cannot read '%s': %s", b->path, strerror(errno));
		return;
	}
	b->version = buf_detach(&out, NULL);
	if (asprintf(&b->identity, "%ssha256:%s", b->version, hex) < 0)
		b->identity = NULL;
}

void cubin_find_nvjitlink(const char *configured, struct cubin_backend *b)
{
	const char *from;
	char hex[65];

	memset(b, 0, sizeof *b);
	b->kind = CUBIN_NVJITLINK;
	if (configured && !strcmp(configured, "none")) {
		set_why(b, "nvJitLink is disabled (ptxcached --nvjitlink none)%s%s", "", "");
		return;
	}
	b->path = search(configured, "the 'nvjitlink' setting", "PTXCACHE_NVJITLINK", "lib64",
			 NVJITLINK_SONAME, 0, readable, &from);
	if (!b->path) {
		set_why(b, "no " NVJITLINK_SONAME " found (set $PTXCACHE_NVJITLINK or "
			"CUDA_HOME, or start ptxcached with --nvjitlink PATH)%s%s", "", "");
		return;
	}
	if (!readable(b->path) || sha256_file(b->path, hex) < 0) {
		set_why(b, "cannot use nvJitLink '%s' (from %s)", b->path,
			from ? from : "the toolkit");
		return;
	}
	const char *base = strrchr(b->path, '/');
	if (asprintf(&b->version, "nvJitLink (%s)\n", base ? base + 1 : b->path) < 0 ||
	    asprintf(&b->identity, "%ssha256:%s", b->version, hex) < 0)
		b->identity = NULL;
}

void cubin_backend_free(struct cubin_backend *b)
{
	if (!b)
		return;
	free(b->path);
	free(b->version);
	free(b->identity);
	free(b->why);
	memset(b, 0, sizeof *b);
}

/* ---- running (worker) ----------------------------------------------- */

static void fail(struct cubin_result *res, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail(struct cubin_result *res, int status, const char *fmt, ...)
{
	va_list ap;
	char msg[512];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	res->status = status;
	buf_puts(&res->log, msg);
}

/* Split the '\n'-separated options into argv slots from argv[at]. */
static int split_args(const char *args, char *copy, char **argv, int at, int max)
{
	if (!args || !*args)
		return at;
	strcpy(copy, args);
	for (char *save = NULL, *t = strtok_r(copy, "\n", &save); t;
	     t = strtok_r(NULL, "\n", &save)) {
		if (at >= max)
			return -1;
		argv[at++] = t;
	}
	return at;
}

void cubin_stamp(const char *path, char *out, size_t len)
{
	struct stat st;

	if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
		snprintf(out, len, "%lld:%lld", (long long)st.st_mtime, (long long)st.st_size);
	else
		snprintf(out, len, "-");
}

/* 0 if we see every source file as the client saw it; else -1 with the
 * first difference in res (the assembler would write other bytes). */
static int check_sources(const char *sources, struct cubin_result *res)
{
	const char *p = sources;

	while (p && *p) {
		const char *nl = strchr(p, '\n'), *tab = strchr(p, '\t');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		char path[4096], want[64], got[64];
		if (!tab || tab > p + n || (size_t)(tab - p) >= sizeof path ||
		    (size_t)(p + n - tab - 1) >= sizeof want)
			break;
		memcpy(path, p, (size_t)(tab - p));
		path[tab - p] = '\0';
		memcpy(want, tab + 1, (size_t)(p + n - tab - 1));
		want[p + n - tab - 1] = '\0';
		cubin_stamp(path, got, sizeof got);
		if (strcmp(got, want) != 0) {
			fail(res, 7, "the daemon sees source file '%s' as %s, the client as %s; "
			     "its line info would differ", path, got, want);
			return -1;
		}
		p += n + (nl != NULL);
	}
	return 0;
}

static void run_ptxas(const struct cubin_job *job, struct cubin_result *res)
{
	char dir[4096], in[4200], out[4200], p[4200];
	char *argv[80];
	char *copy = malloc(job->args ? strlen(job->args) + 1 : 1);
	int ws = 0, to = 0, n;

	if (!copy || make_tmp(dir, sizeof dir) < 0) {
		fail(res, 7, "cannot create a temporary directory: %s", strerror(errno));
		free(copy);
		return;
	}
	snprintf(in, sizeof in, "%s/input.ptx", dir);
	snprintf(out, sizeof out, "%s/out.cubin", dir);
	argv[0] = (char *)job->path;
	n = split_args(job->args, copy, argv, 1, 74);
	if (n < 0) {
		fail(res, 3, "too many assembler options");
		goto out;
	}
	argv[n++] = in;
	argv[n++] = "-o";
	argv[n++] = out;
	argv[n] = NULL;
	if (write_file(in, job->ptx, job->ptx_len) < 0) {
		fail(res, 7, "cannot write '%s': %s", in, strerror(errno));
		goto out;
	}
	if (spawn_wait(argv, dir, job->timeout_ms, &ws, &to) < 0) {
		fail(res, 7, "cannot run '%s': %s", job->path, strerror(errno));
		goto out;
	}
	snprintf(p, sizeof p, "%s/stdout", dir);
	read_file(p, &res->log, CUBIN_MAX);
	snprintf(p, sizeof p, "%s/stderr", dir);
	read_file(p, &res->log, CUBIN_MAX);
	replace_all(&res->log, in, CUBIN_INPUT_NAME);
	if (to) {
		fail(res, 6, "ptxas ran past %d ms and was killed", job->timeout_ms);
	} else if (WIFSIGNALED(ws)) {
		fail(res, 5, "ptxas died of signal %d (%s)", WTERMSIG(ws),
		     strsignal(WTERMSIG(ws)));
	} else if (WEXITSTATUS(ws) != 0) {
		res->status = 2;
		res->exit_code = WEXITSTATUS(ws);
	} else if (read_file(out, &res->cubin, CUBIN_MAX) < 0 || !res->cubin.len) {
		fail(res, 7, "ptxas wrote no cubin");
	} else {
		res->status = 0;
	}
out:
	rm_tmp(dir);
	free(copy);
}

/* nvJitLink's entry points, by their unversioned names. */
struct nvjl {
	void *lib;
	int (*create)(void **h, uint32_t n, const char **opts);
	int (*destroy)(void **h);
	int (*add_data)(void *h, int type, const void *data, size_t size, const char *name);
	int (*complete)(void *h);
	int (*cubin_size)(void *h, size_t *n);
	int (*cubin)(void *h, void *out);
	int (*err_size)(void *h, size_t *n);
	int (*err)(void *h, char *out);
	int (*info_size)(void *h, size_t *n);
	int (*info)(void *h, char *out);
};

#define NVJITLINK_INPUT_PTX 2

static int load_nvjitlink(const char *path, struct nvjl *j, struct buf *err)
{
	static const char *const names[] = {
		"nvJitLinkCreate", "nvJitLinkDestroy", "nvJitLinkAddData",
		"nvJitLinkComplete", "nvJitLinkGetLinkedCubinSize",
		"nvJitLinkGetLinkedCubin", "nvJitLinkGetErrorLogSize",
		"nvJitLinkGetErrorLog", "nvJitLinkGetInfoLogSize",
		"nvJitLinkGetInfoLog",
	};
	void **slots[] = {
		(void **)&j->create, (void **)&j->destroy, (void **)&j->add_data,
		(void **)&j->complete, (void **)&j->cubin_size, (void **)&j->cubin,
		(void **)&j->err_size, (void **)&j->err, (void **)&j->info_size,
		(void **)&j->info,
	};

	if (j->lib)
		return 0;
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		buf_printf(err, "cannot load '%s': %s", path, e ? e : "unknown error");
		return -1;
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (!(*slots[i] = dlsym(lib, names[i]))) {
			buf_printf(err, "'%s' lacks %s", path, names[i]);
			dlclose(lib);
			return -1;
		}
	}
	j->lib = lib;
	return 0;
}

static void append_log(struct nvjl *j, void *h, int error_log, struct buf *log)
{
	size_t n = 0;

	if ((error_log ? j->err_size(h, &n) : j->info_size(h, &n)) != 0 || n <= 1 ||
	    buf_reserve(log, n) < 0)
		return;
	if ((error_log ? j->err(h, log->data + log->len) : j->info(h, log->data + log->len)) == 0) {
		log->len += strnlen(log->data + log->len, n);
		log->data[log->len] = '\0';
	}
}

static void run_nvjitlink(const struct cubin_job *job, struct cubin_result *res)
{
	static struct nvjl j;
	struct buf err = BUF_INIT, ptx = BUF_INIT;
	const char *opts[80];
	char *owned[80];
	char *copy = malloc(job->args ? strlen(job->args) + 1 : 1);
	char *split[80];
	int n = 0, m, r;
	void *h = NULL;

	if (!copy || load_nvjitlink(job->path, &j, &err) < 0) {
		fail(res, 7, "%s", err.len ? err.data : "out of memory");
		buf_free(&err);
		free(copy);
		return;
	}
	m = split_args(job->args, copy, split, 0, 78);
	if (m < 0) {
		fail(res, 3, "too many assembler options");
		free(copy);
		return;
	}
	for (int i = 0; i < m; i++) {
		const char *a = split[i];
		if (!strncmp(a, "--gpu-name=", 11)) {
			if (asprintf(&owned[n], "-arch=%s", a + 11) < 0)
				owned[n] = NULL;
		} else if (asprintf(&owned[n], "-Xptxas=%s", a) < 0) {
			owned[n] = NULL;
		}
		if (!owned[n]) {
			fail(res, 7, "out of memory");
			goto out;
		}
		opts[n] = owned[n];
		n++;
	}
	/* nvJitLink reads PTX as a C string: hand it one, NUL included. */
	if (buf_append(&ptx, job->ptx, job->ptx_len) < 0) {
		fail(res, 7, "out of memory");
		goto out;
	}
	r = j.create(&h, (uint32_t)n, opts);
	if (r == 0)
		r = j.add_data(h, NVJITLINK_INPUT_PTX, ptx.data, ptx.len + 1,
			       CUBIN_INPUT_NAME);
	if (r == 0)
		r = j.complete(h);
	if (h) {
		append_log(&j, h, 0, &res->log);
		append_log(&j, h, 1, &res->log);
	}
	if (r != 0) {
		if (!res->log.len)
			buf_printf(&res->log, "nvJitLink failed with error %d\n", r);
		res->status = 2;
		res->exit_code = 255;
		goto out;
	}
	size_t sz = 0;
	if (j.cubin_size(h, &sz) != 0 || !sz || sz > CUBIN_MAX ||
	    buf_reserve(&res->cubin, sz) < 0 || j.cubin(h, res->cubin.data) != 0) {
		fail(res, 7, "nvJitLink produced no cubin");
		goto out;
	}
	res->cubin.len = sz;
	res->cubin.data[sz] = '\0';
	res->status = 0;
out:
	if (h)
		j.destroy(&h);
	for (int i = 0; i < n; i++)
		free(owned[i]);
	free(copy);
	buf_free(&ptx);
}

void cubin_run(const struct cubin_job *job, struct cubin_result *res)
{
	if (job->sources && check_sources(job->sources, res) < 0)
		return;
	if (!job->path)
		fail(res, 7, "no assembler");
	else if (job->backend == CUBIN_NVJITLINK)
		run_nvjitlink(job, res);
	else
		run_ptxas(job, res);
}
