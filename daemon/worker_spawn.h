/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_spawn.h: a worker process's start (worker_spawn.c), for the pool
 * (worker.c) alone; child_signals_default() and pool_prepare_tmp() are
 * declared in worker.h, for the files beyond the pool that use them.
 */
#ifndef PTXCACHE_WORKER_SPAWN_H
#define PTXCACHE_WORKER_SPAWN_H

#include <sys/types.h>

#include "daemon/worker.h"
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
 * priority, as ptxcached-confirm), with the environment env, its private
 * directory under tmp_parent if optset is POOL_ASM_SET. 0 with out
 * filled, or -1 (logged) with nothing left behind. */
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

#endif
