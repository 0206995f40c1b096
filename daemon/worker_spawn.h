/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_spawn.h: a worker process's start (worker_spawn.c), for the pool
 * (worker.c); and for the files beyond the pool that start a process or
 * a worker's directory of their own, child_signals_default() (cubin.c)
 * and pool_prepare_tmp() (sandbox.c).
 */
#ifndef PTXCACHE_WORKER_SPAWN_H
#define PTXCACHE_WORKER_SPAWN_H

#include <signal.h>
#include <sys/types.h>

#include "proto/buf.h"

/* How much of what a failed worker printed goes into the reason. */
#define START_LOG_TAIL 1024

/* A worker process just started, not yet told its settings. */
struct worker_proc {
	pid_t pid;
	int sock;               /* the master's end of its socketpair */
	int start_log;          /* memory file of what it prints while
	                           starting (its fd 4) */
	char tmp[256];          /* an assembler worker's private directory
	                           (under tmp_parent), or "" */
};

/* Start the daemon's binary as a worker of optset (background: at idle
 * priority, as ptxcached-confirm), with the environment env, and a
 * private directory under tmp_parent unless it is NULL (an assembler
 * worker's). 0 with out filled, or -1 (logged) with nothing left behind. */
int worker_exec(const char *optset, int background, const char *tmp_parent, char *const *env,
		struct worker_proc *out);

/* What a worker that died while starting printed (the tail of its start
 * log, when start_log >= 0), and how it died (timed_out after timeout_s,
 * else its wait status), appended to why. */
void worker_start_reason(struct buf *why, int timed_out, int status, int start_log,
			 int timeout_s);

/* A worker's environment: a plain PATH, and the sanitizers' settings in a
 * sanitizer build; nothing else of the master's (it may hold secrets).
 * NULL if it cannot be allocated. */
char **worker_env_new(void);

/* Remove an assembler worker's directory, which the master made ("":
 * none). Never follows a link the worker may have left in it. */
void worker_rm_tmp(const char *dir);

/* Create (or empty) dir, the parent of assembler workers' directories.
 * Call at start, holding the cache's lock. 0, or -1 with err. */
int pool_prepare_tmp(const char *dir, struct buf *err);

/*
 * In a child made by clone(CLONE_VM | CLONE_VFORK) with every signal
 * blocked, before its exec: each signal the parent catches put back to
 * its default, so that no handler of the parent's runs on the child's
 * stack, then mask (the parent's own) given back.
 */
void child_signals_default(const sigset_t *mask);

#endif
