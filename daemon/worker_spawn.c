/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_spawn: a worker process's start, below the pool (worker.c). The
 * pool decides when a worker of which option set starts and keeps it;
 * this file makes the process: its start log (a memory file, read back as
 * the reason if it dies before its hello), an assembler worker's private
 * directory, the socketpair, and the clone that execs the daemon's binary
 * in worker mode with an environment of the master's making. It knows
 * nothing of jobs, owners or the event loop.
 *
 * Why clone(CLONE_VM | CLONE_VFORK) and not fork(): the master's page
 * tables are not copied for a child that only execs (bench/NOTES.md); the
 * price is a child that runs on the master's memory until its exec, so it
 * makes system calls alone (spawn_child() below). cubin.c starts ptxas the
 * same way and shares child_signals_default().
 */
#include "daemon/worker_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/log.h"

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* worker_spawn.h */
void worker_rm_tmp(const char *dir)
{
	if (dir[0])
		nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* worker.h */
int pool_prepare_tmp(const char *dir, struct buf *err)
{
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create '%s': %s", dir, strerror(errno));
		return -1;
	}
	/* What workers of a daemon that was killed left behind; the cache
	 * lock says no other daemon uses it. */
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create '%s': %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

/* Every descriptor from lo up closed, in the child of worker_exec(): close_range(2)
 * where the kernel has it (5.9 on; glibc has a wrapper only from 2.34, so
 * the system call itself), else one close() per descriptor the process
 * may hold (kernels before 5.9: RHEL 8's 4.18). System calls alone. */
static void close_from(int lo)
{
	if (syscall(SYS_close_range, (unsigned)lo, ~0U, 0) == 0)
		return;
	struct rlimit rl;
	long hi = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
		? (long)rl.rlim_cur : 65536;
	for (long fd = lo; fd < hi; fd++)
		close((int)fd);
}

/* What the child of worker_exec() needs for its exec. */
struct spawn_child {
	pid_t master;
	int sock, start_log, background;
	char *const *env;
	sigset_t mask;          /* the master's, given back before the exec */
};

/* worker.h */
void child_signals_default(const sigset_t *mask)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0 ||
		    sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = SIG_DFL;
		sigaction(sig, &sa, NULL);
	}
	sigprocmask(SIG_SETMASK, mask, NULL);
}

/*
 * The child of worker_exec(), until its exec: a clean image of the daemon's
 * binary in worker mode, with stdin/stdout on /dev/null, stderr, the
 * socket (fd 3) and the start log (fd 4), and an environment of our
 * making. Nothing of the master's memory or descriptors survives the exec.
 *
 * It runs on a stack of its own in the master's memory (clone() with
 * CLONE_VM | CLONE_VFORK, as posix_spawn() does): the master waits, and
 * copies no page table of its own, until the exec. So it makes system
 * calls alone and writes only to its own stack; it starts with every
 * signal blocked and puts each the master catches back to its default
 * before giving back the master's mask, so that no handler of the master
 * runs here.
 */
static int spawn_child(void *arg)
{
	const struct spawn_child *c = arg;

	child_signals_default(&c->mask);
	if (dup2(c->sock, 3) < 0 || dup2(c->start_log, 4) < 0)
		_exit(1);
	close_from(5);
	int null = open("/dev/null", O_RDWR);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		close(null);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The master died before PDEATHSIG was set: we were handed to init
	 * or a subreaper (the master itself may be pid 1, in a container with
	 * no init). PDEATHSIG holds across the exec. */
	if (getppid() != c->master)
		_exit(1);
	/* A background worker (and the ptxas it runs) gets the CPU
	 * only when nothing else wants it; no way back up (that needs
	 * a privilege), and it never serves a foreground job. */
	if (c->background) {
		struct sched_param sp = { 0 };
		if (sched_setscheduler(0, SCHED_IDLE, &sp) < 0)
			setpriority(PRIO_PROCESS, 0, 19);
	}
	/* Its name in ps tells the two kinds apart. */
	char *argv[] = { (char *)(c->background ? "ptxcached-confirm" : "ptxcached"),
			 (char *)"--worker", NULL };
	execve("/proc/self/exe", argv, c->env);
	/* The daemon never sets a locale: strerror() allocates nothing. */
	const char *why = strerror(errno);
	static const char msg[] = "cannot exec the daemon's binary as a worker: ";
	if (write(4, msg, sizeof msg - 1) < 0 || write(4, why, strlen(why)) < 0 ||
	    write(4, "\n", 1) < 0)
		_exit(127);
	_exit(127);
}

/* worker_spawn.h */
int worker_exec(const char *optset, int background, const char *tmp_parent, char *const *env,
		struct worker_proc *out)
{
	/* The child's stack until its exec; the master waits meanwhile, so
	 * one is enough. */
	static char child_stack[64 << 10] __attribute__((aligned(16)));
	struct spawn_child child;
	sigset_t all;
	int sv[2];
	char tmp[256] = "";
	int start_log = memfd_create("ptxcache-worker-start", MFD_CLOEXEC);

	if (start_log < 0) {
		log_err("cannot create a worker's start log: %s", strerror(errno));
		return -1;
	}
	if (tmp_parent) {
		snprintf(tmp, sizeof tmp, "%s/asm-XXXXXX", tmp_parent);
		if (!mkdtemp(tmp)) {
			log_err("cannot create a worker's directory '%s': %s", tmp, strerror(errno));
			close(start_log);
			return -1;
		}
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		log_err("cannot create worker socket: %s", strerror(errno));
		close(start_log);
		worker_rm_tmp(tmp);
		return -1;
	}
	child.master = getpid();
	child.sock = sv[1];
	child.start_log = start_log;
	child.background = background;
	child.env = env;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &child.mask);
	pid_t pid = clone(spawn_child, child_stack + sizeof child_stack,
			  CLONE_VM | CLONE_VFORK | SIGCHLD, &child);
	int clone_errno = errno;
	sigprocmask(SIG_SETMASK, &child.mask, NULL);
	if (pid < 0) {
		log_err("cannot fork worker: %s", strerror(clone_errno));
		close(sv[0]);
		close(sv[1]);
		close(start_log);
		worker_rm_tmp(tmp);
		return -1;
	}
	close(sv[1]);
	out->pid = pid;
	out->sock = sv[0];
	out->start_log = start_log;
	memcpy(out->tmp, tmp, sizeof tmp);
	return 0;
}

/* worker_spawn.h */
char **worker_env_new(void)
{
	extern char **environ;
	size_t n = 0, i = 0;
	for (char **e = environ; *e; e++)
		n++;
	char **env = calloc(n + 2, sizeof *env);
	if (!env || !(env[i++] = strdup("PATH=/usr/local/bin:/usr/bin:/bin")))
		return env;
	for (char **e = environ; *e; e++)
		if (!strncmp(*e, "ASAN_OPTIONS=", 13) || !strncmp(*e, "LSAN_OPTIONS=", 13) ||
		    !strncmp(*e, "UBSAN_OPTIONS=", 14))
			env[i++] = strdup(*e);
	return env;
}

/* worker_spawn.h */
void worker_start_reason(struct buf *why, int timed_out, int status, int start_log,
			 int timeout_s)
{
	char tail[START_LOG_TAIL + 1];
	struct stat st;
	ssize_t n = 0;

	if (timed_out)
		buf_printf(why, "it did not finish starting within %d s", timeout_s);
	else if (WIFSIGNALED(status))
		buf_printf(why, "it died of signal %d (%s)", WTERMSIG(status),
			   strsignal(WTERMSIG(status)));
	else
		buf_printf(why, "it exited with status %d", WEXITSTATUS(status));
	if (start_log >= 0 && fstat(start_log, &st) == 0 && st.st_size > 0) {
		off_t from = st.st_size > START_LOG_TAIL ? st.st_size - START_LOG_TAIL : 0;
		n = pread(start_log, tail, START_LOG_TAIL, from);
	}
	while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == '\0'))
		n--;
	if (n > 0)
		buf_printf(why, "; it printed: %.*s", (int)n, tail);
}

