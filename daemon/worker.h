/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker: the pool of long-lived compile processes.
 *
 * Each worker is the daemon's binary exec'd afresh (`ptxcached --worker`:
 * no copy of the master's memory, its own address-space layout); it reads
 * its settings from its socketpair, initialises LLVM with the backend
 * options of its option set, compiles the built-in warm-up kernels,
 * sandboxes itself (sandbox.h), tells the master it is ready, and then
 * serves one job at a time. Assembler jobs have workers of their own
 * (POOL_ASM_SET: no LLVM, another sandbox profile, a private temporary
 * directory). A worker holds no database handle and no client socket.
 *
 * The pool runs in the master's event loop. Foreground jobs (someone waits
 * for them) wait in one queue per owner (the user they count against),
 * and owners are served in turn: the one that has had the least worker
 * time goes first (fair queueing; worker.c), so one user's flood never
 * starves another's single request, and no job is ever refused here. A
 * job goes to an idle worker of its option set, or an idle worker of
 * another set is replaced by one of the job's set. A worker that dies,
 * exceeds the per-job timeout or sends a malformed reply fails only its
 * job, and is replaced; a worker is also retired after recycle_after jobs,
 * to bound leaks. A worker serves one tenant (user) from its exec to its
 * end: a job of another tenant gets a fresh worker, replacing an idle one
 * if the pool is full, so that no user's job runs in a worker another
 * user's input may have taken over. A worker that cannot start fails its
 * set's jobs with the reason after a few attempts, and the set is blocked
 * for a while (worker.c).
 *
 * Background jobs (confirmations, confirm.h) never delay a foreground one:
 * each runs in a worker of its own, exec'd for it at idle CPU priority
 * (SCHED_IDLE) ahead of need and retired after it, beside the pool's
 * `size` workers; one runs only on a core no foreground worker is using
 * while no foreground job waits, and is stopped (SIGSTOP, its timer too)
 * as soon as a foreground job wants that core. What waits is bounded in
 * bytes: past the bound the oldest is dropped (counted).
 */
#ifndef PTXCACHE_WORKER_H
#define PTXCACHE_WORKER_H

#include <signal.h>
#include <stdint.h>
#include <sys/queue.h>

#include "proto/buf.h"

struct event_base;
struct owner;
struct pool;

/* The result of a job, as seen by the master. Status values: */
enum job_status {
	JOB_OK = 0,
	JOB_PARSE_ERROR = 1,    /* = CG_PARSE_ERROR */
	JOB_ERROR = 2,          /* = CG_ERROR */
	JOB_INVALID = 3,        /* = CG_INVALID, also bad backend options */
	JOB_FATAL = 4,          /* LLVM fatal error: log holds its reason;
	                           llc would die of SIGABRT */
	JOB_CRASH = 5,          /* worker killed by a signal, no reason */
	JOB_TIMEOUT = 6,        /* killed after the per-job timeout */
	JOB_UNAVAILABLE = 7,    /* the daemon cannot run this job at all */
	JOB_FATAL_EXIT = 8,     /* LLVM fatal error without crash diagnostics
	                           (log: "LLVM ERROR: <reason>"): llc would
	                           exit with status 1 */
};

/* Deterministic outcomes may be cached (as negative entries if failed). */
#define JOB_CACHEABLE(s) ((s) <= JOB_FATAL || (s) == JOB_FATAL_EXIT)

struct job_result {
	enum job_status status;
	const char *output;     /* PTX (valid during the callback only) */
	size_t output_len;
	const char *log;        /* diagnostics (valid during the callback) */
	size_t log_len;
	int signal;             /* the signal the worker died of, if any */
	int64_t compile_us;     /* time spent in the worker */
	int exit_code;          /* cubin jobs: the assembler's exit status */
	int not_run;            /* 1: failed before reaching a worker */
};

struct pool_job {
	/* Filled in by the submitter. */
	struct buf frame;       /* the whole FRAME_JOB frame to send; see
	                           PROTOCOL.md */
	char *optset;           /* backend options, '\n'-separated; "" = none;
	                           POOL_ASM_SET: an assembler job */
	void (*done)(struct pool_job *job, const struct job_result *res);
	int64_t tenant;         /* who the job is for (an identity's number,
	                           conn_tenant(), or another number the
	                           submitter makes up): a worker
	                           runs jobs of one tenant only, from its exec
	                           to its end. POOL_ANY_TENANT: any worker */
	int64_t owner;          /* whose turn it waits for (the identity it
	                           counts against for fair sharing and
	                           max-jobs-per-uid); foreground only */
	int background;         /* 1: a confirmation: runs only on a core no
	                           foreground job wants, in a fresh worker of
	                           its own that is retired after it */
	int (*wanted)(struct pool_job *job); /* NULL, or 0 once nobody waits
	                           for the result: the job is then dropped
	                           (done() with JOB_UNAVAILABLE) before it
	                           reaches a worker. Asked of a background job
	                           only when a worker is ready for it */
	/* Pool-private. */
	TAILQ_ENTRY(pool_job) q;
	struct worker *w;
	struct owner *o;        /* its owner's queue (foreground) */
	int64_t started_us;     /* when a worker got it */
	unsigned cover_pass;    /* dispatch pass that found it a worker to come */
};

/* The option set of assembler jobs and workers: no LLVM, the assembler
 * sandbox profile. No client's backend option can spell it. */
#define POOL_ASM_SET "@asm"
#define POOL_ANY_TENANT (-1)

struct pool_config {
	int size;               /* number of workers */
	int job_timeout_s;      /* per-job wall-clock limit */
	int recycle_after;      /* jobs before a worker is replaced; 0 = never */
	int64_t mem_limit;      /* RLIMIT_AS per worker in bytes; 0 = none */
	const char *warm_cpu;   /* CPU for the warm-up kernels ("sm_90a") */
	const char *warm_features;
	const char *sandbox;    /* "auto", "require" or "off" (sandbox.h) */
	const char *tmp_parent; /* where assembler workers' private directories
	                           are made (the master empties it at start) */
	const char *asm_roots;  /* '\n'-separated trees an assembler worker
	                           may read and execute from besides the
	                           system's (the assembler's own) */
	int max_running;        /* foreground jobs of one owner running at
	                           once; more wait their turn (0 = no cap) */
	int confirm_workers;    /* background workers at most (idle priority,
	                           beside size; at most size are used); 0:
	                           background jobs are dropped at once */
	int64_t confirm_queue;  /* bytes of background jobs waiting; past it
	                           the oldest are dropped */
};

struct pool_counters {
	int64_t spawned;        /* foreground workers started */
	int64_t crashes;        /* deaths by signal or timeouts during a job */
	int64_t timeouts;
	int64_t recycled;
	int64_t start_failures; /* workers that died or were refused before
	                           they were ready */
	int64_t dropped;        /* queued jobs dropped: nobody waited */
	int64_t sandbox_violations; /* workers killed by their seccomp filter */
	int64_t bg_started;     /* background jobs given a worker */
	int64_t bg_dropped;     /* background jobs dropped past confirm_queue
	                           (or with confirm_workers 0) */
	int64_t bg_pauses;      /* background workers stopped for a foreground job */
	int busy;               /* foreground jobs running */
	int queued;             /* foreground jobs waiting */
	int owners_waiting;     /* owners with foreground jobs waiting */
	int ready;              /* foreground workers started and warmed up */
	int bg_queued;          /* background jobs waiting */
	int64_t bg_queued_bytes;
	int bg_running;         /* background jobs running (not stopped) */
	int bg_paused;          /* background workers stopped (SIGSTOP) */
	int bg_workers;         /* background worker processes */
};

/* Create the pool and start its default workers. Returns NULL with a
 * message in err. */
struct pool *pool_new(struct event_base *base, const struct pool_config *cfg,
		      struct buf *err);

/* Queue a job; done() is called exactly once, from the event loop, unless
 * the job is cancelled first. The pool does not own the job. A background
 * job may be dropped (done() with JOB_UNAVAILABLE and not_run) at once or
 * later, to keep what waits within confirm_queue. */
void pool_submit(struct pool *p, struct pool_job *job);

/* Drop every background job, waiting or running (done() with
 * JOB_UNAVAILABLE and not_run): the daemon is stopping. */
void pool_cancel_background(struct pool *p);

void pool_counters(struct pool *p, struct pool_counters *c);

/* What the workers said of their sandbox, for stats. */
void pool_sandbox(struct pool *p, struct buf *out);

/* Drop queued jobs that nobody waits for any more (see pool_job.wanted). */
void pool_prune(struct pool *p);

/* 1 while a worker runs job, 0 while it waits (queued, or not submitted). */
int pool_job_running(const struct pool_job *job);

/* Call cb(arg) once, from the event loop, when every worker pool_new()
 * started is done starting: initialised and warmed up, or failed (a pool
 * whose workers cannot start must not keep the daemon from serving what
 * needs no worker; a start is bounded by the job timeout). At once (from
 * the loop) if that has happened already. The master holds readiness and
 * its listening socket until then, so that no request meets a cold
 * worker. */
void pool_when_warm(struct pool *p, void (*cb)(void *arg), void *arg);

/* Milliseconds from pool_new() until warm, or -1 while not warm yet. */
int64_t pool_warm_ms(const struct pool *p);

/* Take the new timeout, recycling, memory, per-owner and background
 * settings of cfg (SIGHUP); the pool's size stays. Workers started from
 * now on use them. */
void pool_reconfigure(struct pool *p, const struct pool_config *cfg);

/* Kill all workers (waiting for none) and fail queued jobs as unavailable. */
void pool_free(struct pool *p);

/* The entry point of `ptxcached --worker`, the image a worker is exec'd
 * as: its socket is fd 3, its start log fd 4; it reads its settings from
 * the socket. Returns only an exit status for a misuse by hand. */
int worker_run(void);

#endif
