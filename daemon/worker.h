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
 * The pool runs in the master's event loop. Jobs wait in one FIFO queue; a
 * job goes to an idle worker of its option set, or an idle worker of another
 * set is replaced by one of the job's set. A worker that dies, exceeds the
 * per-job timeout or sends a malformed reply fails only its job, and is
 * replaced; a worker is also retired after recycle_after jobs, to bound
 * leaks. A worker serves one tenant (user) from its exec to its end: a job
 * of another tenant gets a fresh worker, replacing an idle one if the pool
 * is full, so that no user's job runs in a worker another user's input may
 * have taken over. A worker that cannot start fails its set's jobs with the reason
 * after a few attempts, and the set is blocked for a while (worker.c).
 */
#ifndef PTXCACHE_WORKER_H
#define PTXCACHE_WORKER_H

#include <stdint.h>
#include <sys/queue.h>

#include "proto/buf.h"

struct event_base;
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
	int64_t tenant;         /* who the job is for (a uid, or another
	                           number the submitter makes up): a worker
	                           runs jobs of one tenant only, from its exec
	                           to its end. POOL_ANY_TENANT: any worker */
	int oneshot;            /* 1: the worker is retired after this job */
	int (*wanted)(struct pool_job *job); /* NULL, or 0 once nobody waits
	                           for the result: the job is then dropped
	                           (done() with JOB_UNAVAILABLE) before it
	                           reaches a worker */
	/* Pool-private. */
	TAILQ_ENTRY(pool_job) q;
	struct worker *w;
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
};

struct pool_counters {
	int64_t spawned;
	int64_t crashes;        /* deaths by signal or timeouts during a job */
	int64_t timeouts;
	int64_t recycled;
	int64_t start_failures; /* workers that died or were refused before
	                           they were ready */
	int64_t dropped;        /* queued jobs dropped: nobody waited */
	int64_t sandbox_violations; /* workers killed by their seccomp filter */
	int busy;
	int queued;
	int ready;              /* workers started and warmed up */
};

/* Create the pool and start its default workers. Returns NULL with a
 * message in err. */
struct pool *pool_new(struct event_base *base, const struct pool_config *cfg,
		      struct buf *err);

/* Queue a job; done() is called exactly once, from the event loop, unless
 * the job is cancelled first. The pool does not own the job. */
void pool_submit(struct pool *p, struct pool_job *job);

void pool_counters(struct pool *p, struct pool_counters *c);

/* Create (or empty) dir, the parent of assembler workers' directories.
 * Call at start, holding the cache's lock. 0, or -1 with err. */
int pool_prepare_tmp(const char *dir, struct buf *err);

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

/* Take the new timeout, recycling and memory settings of cfg (SIGHUP);
 * the pool's size stays. Workers started from now on use them. */
void pool_reconfigure(struct pool *p, const struct pool_config *cfg);

/* Kill all workers (waiting for none) and fail queued jobs as unavailable. */
void pool_free(struct pool *p);

/* The entry point of `ptxcached --worker`, the image a worker is exec'd
 * as: its socket is fd 3, its start log fd 4; it reads its settings from
 * the socket. Returns only an exit status for a misuse by hand. */
int worker_run(void);

#endif
