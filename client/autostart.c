/* SPDX-License-Identifier: Apache-2.0 */
/*
 * autostart: see autostart.h for what it does and when.
 *
 * Why a lock and not the daemon's own exclusion alone: the daemon refuses
 * a live socket and a cache directory in use (server.c), so two daemons
 * never serve, but eight clients that each started one would pay eight
 * daemon starts and seven failures in the log. The lock makes the others
 * wait for the first one's socket instead, and a waiter that gets the lock
 * checks the socket again before starting anything.
 *
 * The daemon is detached from the client completely: a new session
 * (setsid, so a terminal's signals and the client's process group do not
 * reach it), fds 0-2 on /dev/null and the log file, every other fd closed
 * (a pipe of the client's parent held open by the daemon would make
 * `$(ptxas ...)` or subprocess.run() wait for it), the signal mask
 * cleared, systemd's LISTEN_FDS and NOTIFY_SOCKET removed (they are the
 * client's, not the daemon's). The grandchild reports a failed exec
 * through a close-on-exec pipe, so a missing or broken ptxcached is an
 * error at once, not a timeout.
 */
#include "client/autostart.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The daemon's own default max-size (daemon/config.c). */
#define DEFAULT_MAX_SIZE (10LL << 30)
/* The user's daemon takes at most this share of the free space. */
#define FREE_SHARE_PERCENT 50
#define MIN_MAX_SIZE (64LL << 20)
/* How long a start may take to bind its socket (an ASan build is slow). */
#define START_WAIT_MS 30000

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int enabled(void)
{
	const char *e = getenv("PTXCACHE_AUTOSTART");
	return !e || strcmp(e, "0") != 0;
}

/* The user's own default socket (never the node's); caller frees. */
static char *own_socket(void)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	char *out = NULL;

	if (x && *x ? asprintf(&out, "%s/ptxcache/ptxcached.sock", x) < 0 :
	    asprintf(&out, "/tmp/ptxcache-%u/ptxcached.sock", (unsigned)getuid()) < 0)
		return NULL;
	return out;
}

static const char *node_socket(void)
{
	const char *e = getenv("PTXCACHE_NODE_SOCKET");
	return e && *e ? e : "/run/ptxcache/ptxcached.sock";
}

/* The user's default cache directory, as ptxcached computes it without
 * systemd's CACHE_DIRECTORY; caller frees. */
static char *own_cache_dir(void)
{
	const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
	char *out = NULL;
	int r;

	if (x && *x)
		r = asprintf(&out, "%s/ptxcache", x);
	else if (h && *h)
		r = asprintf(&out, "%s/.cache/ptxcache", h);
	else
		r = asprintf(&out, "/tmp/ptxcache-%u", (unsigned)getuid());
	return r < 0 ? NULL : out;
}

/* mkdir -p, each new directory 0700. */
static int make_dirs(const char *path)
{
	char tmp[PATH_MAX];

	if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
		return -1;
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(tmp, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* 1 if a daemon takes connections on path. */
static int answers(const char *path)
{
	char err[256];
	ptxcache *pc = ptxcache_connect(path, 1000, err, sizeof err);

	ptxcache_close(pc);
	return pc != NULL;
}

/* ptxcached: $PTXCACHE_DAEMON, else beside this very binary (a wheel's or
 * a package's bin/), else on PATH. Caller frees; NULL if none. */
static char *find_daemon(void)
{
	const char *e = getenv("PTXCACHE_DAEMON");
	char self[PATH_MAX], *out = NULL;
	ssize_t n;

	if (e && *e)
		return access(e, X_OK) == 0 ? strdup(e) : NULL;
	if ((n = readlink("/proc/self/exe", self, sizeof self - 1)) > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if (asprintf(&out, "%s/ptxcached", self) >= 0 && access(out, X_OK) == 0)
				return out;
			free(out);
			out = NULL;
		}
	}
	const char *path = getenv("PATH");
	while (path && *path) {
		size_t len = strcspn(path, ":");
		if (len && asprintf(&out, "%.*s/ptxcached", (int)len, path) >= 0) {
			if (access(out, X_OK) == 0)
				return out;
			free(out);
			out = NULL;
		}
		path += len + (path[len] == ':');
	}
	return NULL;
}

/* The cap the user's daemon gets: the daemon's default, or less where the
 * disk has less room (half the free space plus what the cache holds). */
static int64_t size_cap(const char *cache_dir)
{
	struct statvfs vfs;
	struct stat st;
	char p[PATH_MAX];
	int64_t have = 0;
	const char *const files[] = { "cache.db", "cache.db-wal" };

	if (statvfs(cache_dir, &vfs) < 0)
		return DEFAULT_MAX_SIZE;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", cache_dir, files[i]);
		if (stat(p, &st) == 0)
			have += st.st_size;
	}
	int64_t cap = have + (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize / 100 * FREE_SHARE_PERCENT;
	if (cap > DEFAULT_MAX_SIZE)
		cap = DEFAULT_MAX_SIZE;
	return cap < MIN_MAX_SIZE ? MIN_MAX_SIZE : cap;
}

/* The grandchild: becomes the daemon, or reports errno on fd report. */
static void __attribute__((noreturn)) become_daemon(char **argv, const char *log, int report)
{
	sigset_t none;
	int fd;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDNAMES");
	unsetenv("NOTIFY_SOCKET");
	if (chdir("/") < 0)
		_exit(127);
	if ((fd = open("/dev/null", O_RDONLY)) >= 0 && fd != 0) {
		dup2(fd, 0);
		close(fd);
	}
	if ((fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600)) >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	long max = sysconf(_SC_OPEN_MAX);
	for (int i = 3; i < (max > 0 && max < 65536 ? max : 65536); i++)
		if (i != report)
			close(i);
	execv(argv[0], argv);
	int e = errno;
	if (write(report, &e, sizeof e) < 0)
		_exit(127);
	_exit(127);
}

/* Start the daemon detached; its pid in *pid. 0, or -1 with err. */
static int spawn(char **argv, const char *log, pid_t *pid, char *err, size_t errlen)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot start ptxcached: pipe: %s", strerror(errno));
		return -1;
	}
	pid_t child = fork();
	if (child < 0) {
		snprintf(err, errlen, "cannot start ptxcached: fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (child == 0) {
		close(p[0]);
		setsid();
		pid_t d = fork();
		if (d < 0)
			_exit(1);
		if (d == 0)
			become_daemon(argv, log, p[1]);
		/* The daemon's pid first; then the grandchild's errno, if its
		 * exec fails, or end of file when it succeeds. */
		_exit(write(p[1], &d, sizeof d) == sizeof d ? 0 : 1);
	}
	close(p[1]);
	int status = 0, e = 0;
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	pid_t d = 0;
	ssize_t n = read(p[0], &d, sizeof d);
	if (n != sizeof d) {
		close(p[0]);
		snprintf(err, errlen, "cannot start ptxcached: fork failed");
		return -1;
	}
	n = read(p[0], &e, sizeof e);
	close(p[0]);
	if (n == sizeof e) {
		snprintf(err, errlen, "cannot run '%s': %s", argv[0], strerror(e));
		return -1;
	}
	*pid = d;
	return 0;
}

/* 1 while pid runs: gone, or a zombie nobody reaps yet (its parent is
 * whatever adopted it: init, or a subreaper that may be slow to wait). */
static int running(pid_t pid)
{
	char path[64], buf[256];

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 1;
	buf[n] = '\0';
	const char *paren = strrchr(buf, ')');
	return !(paren && paren[1] == ' ' && paren[2] == 'Z');
}

/* The last line of the log, for a daemon that exited at start. */
static void log_tail(const char *log, char *out, size_t n)
{
	char buf[4096];
	int fd = open(log, O_RDONLY | O_CLOEXEC);
	*out = '\0';
	if (fd < 0)
		return;
	off_t end = lseek(fd, 0, SEEK_END);
	off_t from = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
	ssize_t r = pread(fd, buf, sizeof buf - 1, from);
	close(fd);
	if (r <= 0)
		return;
	buf[r] = '\0';
	while (r > 0 && buf[r - 1] == '\n')
		buf[--r] = '\0';
	char *last = strrchr(buf, '\n');
	snprintf(out, n, "%.400s", last ? last + 1 : buf);
}

int autostart_start(const char *socket, char *err, size_t errlen)
{
	char dir[PATH_MAX], lockp[PATH_MAX + 32], log[PATH_MAX + 32];
	char *cache = NULL, *daemon = NULL;
	int lock = -1, rc = -1;

	snprintf(dir, sizeof dir, "%s", socket);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	snprintf(lockp, sizeof lockp, "%s/autostart.lock", dir);
	if (make_dirs(dir) < 0 ||
	    (lock = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
		snprintf(err, errlen, "cannot start ptxcached: cannot open '%s': %s", lockp,
			 strerror(errno));
		return -1;
	}
	for (int64_t until = now_ms() + START_WAIT_MS; flock(lock, LOCK_EX | LOCK_NB) < 0;) {
		if ((errno != EWOULDBLOCK && errno != EINTR) || now_ms() > until) {
			snprintf(err, errlen, "cannot start ptxcached: lock '%s': %s", lockp,
				 errno == EWOULDBLOCK ? "held too long by another client" :
				 strerror(errno));
			close(lock);
			return -1;
		}
		usleep(20000);
	}
	if (answers(socket)) {          /* another client started it meanwhile */
		rc = 0;
		goto out;
	}
	if (!(daemon = find_daemon())) {
		snprintf(err, errlen, "no daemon answers and no ptxcached to start "
			 "($PTXCACHE_DAEMON, beside this program, PATH)");
		goto out;
	}
	if (!(cache = own_cache_dir()) || make_dirs(cache) < 0) {
		snprintf(err, errlen, "cannot start ptxcached: cannot make cache directory '%s': %s",
			 cache ? cache : "", strerror(errno));
		goto out;
	}
	snprintf(log, sizeof log, "%s/ptxcached.log", cache);
	char size[32], idle[32], workers[32];
	char *argv[16];
	int a = 0;
	argv[a++] = daemon;
	argv[a++] = "--socket";
	argv[a++] = (char *)socket;
	argv[a++] = "--cache-dir";
	argv[a++] = cache;
	/* The user's own settings in the environment win (config.c reads
	 * them); the flags only fill in what is not set there, except
	 * idle-exit, always on the command line (with the environment's
	 * value, if any): it marks a daemon a client started (python3 -m
	 * ptxcache status reads it). */
	if (!getenv("PTXCACHE_MAX_SIZE")) {
		snprintf(size, sizeof size, "%lld", (long long)size_cap(cache));
		argv[a++] = "--max-size";
		argv[a++] = size;
	}
	const char *ie = getenv("PTXCACHE_IDLE_EXIT");
	snprintf(idle, sizeof idle, "%.20s", ie && *ie ? ie : "");
	if (!*idle)
		snprintf(idle, sizeof idle, "%d", AUTOSTART_IDLE_EXIT_S);
	argv[a++] = "--idle-exit";
	argv[a++] = idle;
	if (!getenv("PTXCACHE_WORKERS")) {
		/* One user's daemon: a few warm workers, not one per core of a
		 * large node. */
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		snprintf(workers, sizeof workers, "%ld", n < 1 ? 1 : n > 4 ? 4 : n);
		argv[a++] = "--workers";
		argv[a++] = workers;
	}
	argv[a] = NULL;
	pid_t pid;
	if (spawn(argv, log, &pid, err, errlen) < 0)
		goto out;
	for (int64_t until = now_ms() + START_WAIT_MS;;) {
		if (answers(socket)) {
			rc = 0;
			break;
		}
		if (!running(pid)) {
			char last[512];
			log_tail(log, last, sizeof last);
			snprintf(err, errlen, "ptxcached exited at start (log '%s'): %s", log, last);
			break;
		}
		if (now_ms() > until) {
			snprintf(err, errlen, "ptxcached (pid %d) did not open '%s' in %d s (log '%s')",
				 (int)pid, socket, START_WAIT_MS / 1000, log);
			break;
		}
		usleep(10000);
	}
out:
	free(daemon);
	free(cache);
	close(lock);            /* releases the lock */
	return rc;
}

static ptxcache *connected(ptxcache *pc, const char *path, const char *why, char **used,
			   const char **how)
{
	if (pc && used)
		*used = strdup(path);
	if (pc && how)
		*how = why;
	return pc;
}

ptxcache *autostart_connect(const char *socket_path, int timeout_ms, char *err,
			    size_t errlen, char **used, const char **how)
{
	const char *env = getenv("PTXCACHE_SOCKET");
	char first[512], why[512];
	ptxcache *pc;

	if (!(socket_path && *socket_path) && env && *env)
		socket_path = env;
	if (socket_path && *socket_path)
		return connected(ptxcache_connect(socket_path, timeout_ms, err, errlen),
				 socket_path, "given", used, how);
	char *own = own_socket();
	if (!own)
		return ptxcache_connect(NULL, timeout_ms, err, errlen);
	if ((pc = connected(ptxcache_connect(own, timeout_ms, first, sizeof first), own, "own",
			    used, how)) ||
	    (pc = connected(ptxcache_connect(node_socket(), timeout_ms, why, sizeof why),
			    node_socket(), "node", used, how))) {
		free(own);
		return pc;
	}
	if (!enabled()) {
		snprintf(err, errlen, "%s (PTXCACHE_AUTOSTART=0: no daemon started)", first);
		free(own);
		return NULL;
	}
	if (autostart_start(own, why, sizeof why) < 0) {
		snprintf(err, errlen, "%s", why);
		free(own);
		return NULL;
	}
	pc = connected(ptxcache_connect(own, timeout_ms, err, errlen), own, "started", used, how);
	free(own);
	return pc;
}
