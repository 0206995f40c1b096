/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker: the pool of long-lived compile processes, the master's side of
 * them (the loop each worker runs is worker_loop.c; the clone and exec
 * that start one, worker_spawn.c). See worker.h for the model.
 *
 * Why processes and not threads: LLVM aborts the whole process on some
 * inputs ("LLVM ERROR: Cannot select ..."), keeps backend options in global
 * state, and may leak; a process per worker turns each of these into the
 * failure of one job. Why long-lived: a job forked from a warm parent pays
 * 13-16 ms of copy-on-write faults, a warm worker 1.4-2.6 ms.
 *
 * A worker's death is a result, not an event that ends the daemon: the job
 * it held is completed once both its socket has closed and its exit status
 * has been reaped, with an error that carries the signal (or LLVM's fatal
 * reason, which the worker sends before it aborts).
 *
 * A worker that cannot start is a result too. What it prints while it
 * starts goes to a memory file the master holds, so that its death before
 * the hello carries a reason. START_ATTEMPTS failures in a row (or one
 * refusal of its options, which is deterministic) block its option set:
 * the set's queued jobs fail with the reason, and so does every new job of
 * that set at once, until a retry time that doubles with each failed
 * retry. Each failure is logged at warning and counted. Nothing respawns in
 * a loop, and no job waits on a worker that will never come.
 *
 * A queued job that no client waits for any more (job->wanted() says so)
 * is dropped before it reaches a worker.
 *
 * Fair queueing. Each owner (user) has its own queue of foreground jobs;
 * its virtual time is the worker time its jobs have had (finished ones,
 * and running ones so far). dispatch() serves owners in rounds, the one
 * with the least virtual time first, each at most one job per round, so
 * idle workers are dealt out in turn. An owner that starts waiting after
 * a pause begins at the least virtual time of those already waiting: no
 * credit saved up while away, no debt. Since a worker serves one tenant
 * (a worker for another user is a fresh exec, tens of ms), an owner takes
 * over an idle worker whose user still has jobs waiting only once that
 * user is QUANTUM_US of worker time ahead of it; so users take turns of
 * about that length rather than one job each, and a new user's first job
 * waits for at most about one quantum of another user's work. An owner
 * may have max_running jobs running at once; past it they wait.
 *
 * Background jobs (confirmations) run in workers of their own, exec'd
 * for them (a fresh tenant each: confirm.h), at SCHED_IDLE, and retired
 * after their one job. Of the cores (size), those that foreground workers
 * are not running or starting on may each hold one background job that
 * runs (or a background worker that starts), and none may while a
 * foreground job waits; the other running ones are stopped with SIGSTOP
 * (their timer held) and continued, oldest first, when a core is free
 * again. So a foreground job never waits for a
 * confirmation, and a confirmation's work is never thrown away for one.
 * Spare background workers are exec'd (at idle priority) while jobs wait
 * for them, so that a job seldom waits for a start. The jobs waiting are
 * bounded in bytes (confirm_queue): past it the oldest are dropped.
 *
 * Never: run LLVM in the master, block the master on a worker, or trust a
 * byte a worker sends before checking it (a bad reply kills that worker).
 */
#include "daemon/worker.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/worker_spawn.h"
#include "proto/frame.h"
#include "proto/msg.h"

/* A worker's reply holds PTX and a log; no real kernel comes near this. */
#define WORKER_REPLY_MAX (512u << 20)
/* Deaths closer together than this count towards the back-off. */
#define BACKOFF_WINDOW_MS 2000
#define BACKOFF_MAX_MS 5000
/* Start failures in a row before an option set is blocked, and the first
 * and longest blocks. */
#define START_ATTEMPTS 3
#define BLOCK_FIRST_MS 10000
#define BLOCK_MAX_MS (10 * 60 * 1000)
/* How far (in worker time) a user must be ahead of another that waits
 * before the other takes over one of its idle workers (fair queueing). */
#define QUANTUM_US (100 * 1000)
/* What a waiting background job holds besides its frame (its flight),
 * counted against confirm_queue. */
#define BG_OVERHEAD 1024
/* Option sets remembered as failing; the oldest is forgotten first. */
#define MAX_FAILING_SETS 64

TAILQ_HEAD(job_queue, pool_job);

enum worker_state {
	W_STARTING,     /* forked, initialising LLVM and warming up */
	W_IDLE,         /* ready for a job */
	W_BUSY,         /* running w->job */
	W_DYING,        /* killed or retired; waiting for EOF and exit status */
};

struct worker {
	struct pool *pool;
	pid_t pid;
	struct bufferevent *bev;
	char *optset;
	enum worker_state state;
	struct pool_job *job;
	int jobs_done;
	int eof, reaped, timed_out, status;
	int start_log;          /* memory file of what it printed while
	                           starting; -1 once it is ready */
	char tmp[256];          /* an assembler worker's private directory
	                           (made and removed by the master), or "" */
	int64_t tenant;         /* whose jobs it has run since its exec;
	                           POOL_ANY_TENANT: nobody's yet */
	int64_t last_used;      /* ms, when it last got a job */
	int first_round;        /* started by pool_new(), not yet done starting */
	int background;         /* a background worker: idle priority, one
	                           background job, never a foreground one */
	int used;               /* it has been given a job */
	int retired;            /* killed by the pool, not dead of its own: no
	                           back-off */
	int paused;             /* background: stopped (SIGSTOP) for the
	                           foreground; its timer is held */
	int64_t deadline_ms;    /* when its timer fires; while paused, the
	                           milliseconds it had left */
	unsigned claim_pass;    /* starting: the dispatch pass that counts it
	                           as coming for a waiting job */
	struct event *timer;
	TAILQ_ENTRY(worker) link;
};

/* A user's foreground queue (fair queueing, above). */
struct owner {
	int64_t id;
	struct job_queue jobs;
	int queued;             /* jobs waiting */
	int queued_default;     /* of them, of the default option set */
	int queued_asm;         /* of them, assembler jobs */
	int running;
	int64_t served_us;      /* worker time of its finished jobs, from the
	                           virtual time it started waiting at */
	int64_t run_start_sum;  /* sum of its running jobs' start times (us) */
	uint64_t turn;          /* when it last got a worker (ties: the one
	                           that waited longest goes first) */
	TAILQ_ENTRY(owner) link;
};

/* An option set whose workers failed to start. */
struct failing_set {
	char *optset;
	int fails;              /* start failures in a row */
	int64_t blocked_until;  /* jobs of the set fail at once until then */
	int block_ms;           /* the next block's length */
	char reason[START_LOG_TAIL + 256];
	TAILQ_ENTRY(failing_set) link;
};

TAILQ_HEAD(worker_list, worker);
TAILQ_HEAD(failing_list, failing_set);
TAILQ_HEAD(owner_list, owner);

struct pool {
	struct event_base *base;
	struct pool_config cfg;
	struct worker_list workers;
	int nworkers;           /* foreground workers live or starting, not
	                           dying */
	int nbg;                /* background workers likewise */
	struct owner_list owners;       /* with jobs waiting or running */
	struct job_queue bg;    /* background jobs waiting, oldest first */
	int64_t bg_bytes;       /* what they hold (confirm_queue) */
	unsigned pass;          /* dispatch() passes */
	int prune;              /* a client has gone: look for unwanted jobs */
	uint64_t turns;
	struct event *sigchld;
	struct event *respawn;  /* back-off timer */
	struct pool_counters counters;
	int64_t last_death_ms;
	int backoff_ms;
	int dispatching, again;  /* dispatch() is not reentrant */
	struct failing_list failing;
	int nfailing;
	char **env;             /* a worker's whole environment */
	char sandbox[2][200];   /* what the last codegen and assembler
	                           worker said of their sandbox */
	/* Warm: every worker pool_new() started is done starting (warmed up,
	 * or failed). pool_when_warm()'s callback runs from warm_ev. */
	int first_starting;     /* first-round workers still starting */
	int warm;
	int64_t started_ms, warm_ms;
	struct event *warm_ev;
	void (*warm_cb)(void *arg);
	void *warm_arg;
};

static void dispatch(struct pool *p);
static struct worker *spawn(struct pool *p, const char *optset, int background);
static void pause_worker(struct worker *w, int pause);

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_ms(void)
{
	return now_us() / 1000;
}

/* The worker's timer fires in ms from now. */
static void arm(struct worker *w, int64_t ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	w->deadline_ms = now_ms() + ms;
	evtimer_add(w->timer, &tv);
}

/* ---- owners: the fair queue ---- */

/* An owner's virtual time: the worker time its jobs have had. */
static int64_t vtime(const struct owner *o, int64_t now)
{
	return o->served_us + o->running * now - o->run_start_sum;
}

static struct owner *owner_find(struct pool *p, int64_t id)
{
	struct owner *o;
	TAILQ_FOREACH(o, &p->owners, link)
		if (o->id == id)
			return o;
	return NULL;
}

/* id's queue, made if it has none: it starts at the least virtual time of
 * those that have jobs (or 0), so that neither a pause nor a first visit
 * puts it ahead of or behind them. NULL if out of memory. */
static struct owner *owner_get(struct pool *p, int64_t id)
{
	struct owner *o = owner_find(p, id), *x;
	int64_t now = now_us(), least = INT64_MAX;

	if (o)
		return o;
	if (!(o = calloc(1, sizeof *o)))
		return NULL;
	TAILQ_FOREACH(x, &p->owners, link)
		if ((x->queued || x->running) && vtime(x, now) < least)
			least = vtime(x, now);
	o->id = id;
	o->served_us = least == INT64_MAX ? 0 : least;
	TAILQ_INIT(&o->jobs);
	TAILQ_INSERT_TAIL(&p->owners, o, link);
	return o;
}

/* Forget owners with nothing waiting or running (only between passes:
 * dispatch() holds pointers to them). */
static void owners_sweep(struct pool *p)
{
	struct owner *o, *next;
	for (o = TAILQ_FIRST(&p->owners); o; o = next) {
		next = TAILQ_NEXT(o, link);
		if (!o->queued && !o->running) {
			TAILQ_REMOVE(&p->owners, o, link);
			free(o);
		}
	}
}

/* Whether o has a job waiting that could run in a worker of optset now. */
static int owner_wants(const struct pool *p, const struct owner *o, const char *optset)
{
	if (!o || !o->queued || (p->cfg.max_running && o->running >= p->cfg.max_running))
		return 0;
	if (!*optset)
		return o->queued_default > 0;
	if (!strcmp(optset, POOL_ASM_SET))
		return o->queued_asm > 0;
	const struct pool_job *j;
	TAILQ_FOREACH(j, &o->jobs, q)
		if (!strcmp(j->optset, optset))
			return 1;
	return 0;
}

/* Take job out of the queue it waits in. */
static void unqueue(struct pool *p, struct pool_job *job)
{
	if (job->background) {
		TAILQ_REMOVE(&p->bg, job, q);
		p->counters.bg_queued--;
		p->bg_bytes -= (int64_t)job->frame.len + BG_OVERHEAD;
		return;
	}
	struct owner *o = job->o;
	TAILQ_REMOVE(&o->jobs, job, q);
	o->queued--;
	o->queued_default -= !*job->optset;
	o->queued_asm -= !strcmp(job->optset, POOL_ASM_SET);
	p->counters.queued--;
}

static void set_state(struct worker *w, enum worker_state s)
{
	static const char *const names[] = { "starting", "idle", "busy", "dying" };
	struct pool *p = w->pool;

	log_debug("worker %d: %s -> %s", (int)w->pid, names[w->state], names[s]);
	if (w->first_round && w->state == W_STARTING && s != W_STARTING) {
		w->first_round = 0;
		if (--p->first_starting == 0 && !p->warm) {
			p->warm = 1;
			p->warm_ms = now_ms() - p->started_ms;
			/* From the loop, never from inside dispatch() or a read. */
			event_active(p->warm_ev, EV_TIMEOUT, 0);
		}
	}
	w->state = s;
}

static void on_warm(evutil_socket_t fd, short what, void *arg)
{
	struct pool *p = arg;

	if (p->warm_cb)
		p->warm_cb(p->warm_arg);
}

static void complete(struct worker *w, const struct job_result *res)
{
	struct pool_job *job = w->job;
	struct pool *p = w->pool;

	w->job = NULL;
	if (w->timer)
		evtimer_del(w->timer);
	if (job->background) {
		if (!w->paused)
			p->counters.bg_running--;
	} else {
		struct owner *o = job->o;
		int64_t now = now_us();
		p->counters.busy--;
		o->running--;
		o->run_start_sum -= job->started_us;
		o->served_us += now - job->started_us;
	}
	job->w = NULL;
	job->done(job, res);
}

/* w is dying (killed, or gone of its own): it no longer counts. */
static void mark_dying(struct worker *w)
{
	if (w->state == W_DYING)
		return;
	/* A stopped process never gets to its exit: let it go on (its timer
	 * again bounds how long that takes). */
	pause_worker(w, 0);
	set_state(w, W_DYING);
	/* Nothing more it sends is read (a worker taken over could send
	 * without end); its reap ends it (on_sigchld()). */
	if (w->bev)
		bufferevent_disable(w->bev, EV_READ);
	if (w->background) {
		w->pool->nbg--;
	} else {
		w->pool->nworkers--;
	}
}

/* Stop talking to w and make sure it dies; the rest happens in reap(). */
static void kill_worker(struct worker *w, const char *why)
{
	if (w->state == W_DYING)
		return;
	if (why)
		log_warn("worker %d: %s; killing it", (int)w->pid, why);
	mark_dying(w);
	kill(w->pid, SIGKILL);
}

/* End a worker the pool has no more use for (its one background job
 * done, recycled, or replaced by a worker of another user or option
 * set): not a death that counts towards the back-off. */
static void retire(struct worker *w)
{
	w->retired = 1;
	kill_worker(w, NULL);
}

static struct failing_set *failing_find(struct pool *p, const char *optset)
{
	struct failing_set *f;
	TAILQ_FOREACH(f, &p->failing, link)
		if (!strcmp(f->optset, optset))
			return f;
	return NULL;
}

static void failing_forget(struct pool *p, struct failing_set *f)
{
	TAILQ_REMOVE(&p->failing, f, link);
	p->nfailing--;
	free(f->optset);
	free(f);
}

static void fail_job(struct pool *p, struct pool_job *job, enum job_status st,
		     const char *why)
{
	struct job_result res = { .status = st, .log = why, .log_len = strlen(why),
				  .not_run = 1 };
	unqueue(p, job);
	job->done(job, &res);
}

/* The job's option set is blocked now: the reason, else NULL. */
static const char *blocked_reason(struct pool *p, const char *optset)
{
	struct failing_set *f = failing_find(p, optset);
	return f && f->blocked_until > now_ms() ? f->reason : NULL;
}

/*
 * A worker of optset could not start, for why (a refusal of its options
 * if deterministic). Remember it; on the START_ATTEMPTS-th failure in a
 * row, or at once if deterministic, block the set and fail its queued jobs.
 */
static void start_failed(struct pool *p, const char *optset, const char *why,
			 int deterministic)
{
	struct failing_set *f = failing_find(p, optset);

	p->counters.start_failures++;
	if (!f) {
		if (p->nfailing >= MAX_FAILING_SETS)
			failing_forget(p, TAILQ_FIRST(&p->failing));
		if (!(f = calloc(1, sizeof *f)) || !(f->optset = strdup(optset))) {
			free(f);
			log_err("out of memory recording a worker start failure");
			return;
		}
		f->block_ms = BLOCK_FIRST_MS;
		TAILQ_INSERT_TAIL(&p->failing, f, link);
		p->nfailing++;
	}
	f->fails = deterministic ? START_ATTEMPTS : f->fails + 1;
	snprintf(f->reason, sizeof f->reason, "%s%s%s",
		 *optset ? "compiler worker for options '" : "compiler worker",
		 *optset ? optset : "", *optset ? "' cannot start: " : " cannot start: ");
	for (char *c = f->reason; *c; c++)      /* the set is '\n'-separated */
		if (*c == '\n' && c[1] != '\0')
			*c = ' ';
	size_t n = strlen(f->reason);
	snprintf(f->reason + n, sizeof f->reason - n, "%s", why);
	if (deterministic)
		log_warn("%s (deterministic: not retried)", f->reason);
	else
		log_warn("%s (attempt %d of %d)", f->reason, f->fails, START_ATTEMPTS);
	if (f->fails < START_ATTEMPTS)
		return;
	f->blocked_until = now_ms() + f->block_ms;
	log_warn("no new worker for %s%s%s for %d s; its jobs fail with this reason until then",
		 *optset ? "options '" : "the default options", optset, *optset ? "'" : "",
		 f->block_ms / 1000);
	f->block_ms = f->block_ms * 2 > BLOCK_MAX_MS ? BLOCK_MAX_MS : f->block_ms * 2;
	/* Failing a job answers its clients, and what they do then may submit
	 * jobs and so reshape the queues (dispatch() forgets idle owners): the
	 * set's jobs are found one at a time, from the start each time. New
	 * jobs of the set, blocked now, fail at once rather than queue, so
	 * this ends. */
	for (;;) {
		struct pool_job *j = NULL;
		struct owner *o;
		TAILQ_FOREACH(o, &p->owners, link) {
			TAILQ_FOREACH(j, &o->jobs, q)
				if (!strcmp(j->optset, optset))
					break;
			if (j)
				break;
		}
		if (!j) {
			TAILQ_FOREACH(j, &p->bg, q)
				if (!strcmp(j->optset, optset))
					break;
			if (!j)
				break;
			p->counters.bg_dropped++;
			fail_job(p, j, JOB_UNAVAILABLE, f->reason);
			continue;
		}
		fail_job(p, j, deterministic ? JOB_INVALID : JOB_UNAVAILABLE, f->reason);
	}
}

/* Both the socket has closed and the exit status is in: finish w. */
static void finish(struct worker *w)
{
	struct pool *p = w->pool;

	if (w->start_log >= 0) {
		/* A background worker retired while starting, or one that ran
		 * out of time at idle priority, says nothing of its options. */
		if (!w->retired && !(w->background && w->timed_out)) {
			struct buf why = BUF_INIT;
			worker_start_reason(&why, w->timed_out, w->status, w->start_log,
					    w->pool->cfg.job_timeout_s);
			start_failed(p, w->optset, why.data ? why.data : "it died", 0);
			buf_free(&why);
		}
		close(w->start_log);
		w->start_log = -1;
	}

	if (w->job) {
		struct job_result res = { 0 };
		char msg[160];
		if (w->timed_out) {
			res.status = JOB_TIMEOUT;
			snprintf(msg, sizeof msg,
				 "compile timed out after %d s; the worker was killed",
				 p->cfg.job_timeout_s);
			p->counters.timeouts++;
		} else if (WIFSIGNALED(w->status)) {
			res.status = JOB_CRASH;
			res.signal = WTERMSIG(w->status);
			if (res.signal == SIGSYS) {
				p->counters.sandbox_violations++;
				log_err("worker %d made a system call its sandbox does not allow "
					"(killed with SIGSYS; a compromised or buggy compiler?)",
					(int)w->pid);
			}
			snprintf(msg, sizeof msg, "compiler worker died of signal %d (%s)",
				 res.signal, strsignal(res.signal));
		} else {
			res.status = JOB_CRASH;
			snprintf(msg, sizeof msg, "compiler worker exited with status %d",
				 WEXITSTATUS(w->status));
		}
		res.log = msg;
		res.log_len = strlen(msg);
		p->counters.crashes++;
		complete(w, &res);
	}
	mark_dying(w);
	if (w->bev)
		bufferevent_free(w->bev);
	if (w->timer)
		event_free(w->timer);
	worker_rm_tmp(w->tmp);
	TAILQ_REMOVE(&p->workers, w, link);
	free(w->optset);
	free(w);
	dispatch(p);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;

	if (w->state == W_STARTING) {
		w->timed_out = 1;
		kill_worker(w, "did not finish starting in time");
		return;
	}
	w->timed_out = 1;
	kill_worker(w, "job timed out");
}

/* A whole frame from the worker: a ready message or a job's reply. */
static void handle_reply(struct worker *w, const struct frame_hdr *h,
			 const void *body)
{
	struct msg m;
	struct buf err = BUF_INIT;

	if (msg_parse(&m, body, h->len, &MSG_LIMITS_DEFAULT, &err) < 0) {
		msg_free(&m);
		kill_worker(w, err.data);
		buf_free(&err);
		return;
	}
	if (h->type == (FRAME_HELLO | FRAME_REPLY) && w->state == W_STARTING) {
		char *e = NULL;
		struct failing_set *f;
		close(w->start_log);
		w->start_log = -1;
		if (msg_strdup(&m, "error", &e) == 1) {
			/* Bad backend options: deterministic, so the set is
			 * blocked at once and its jobs fail with the reason. */
			start_failed(w->pool, w->optset, e, 1);
			free(e);
			kill_worker(w, NULL);
		} else {
			char *sb = NULL;
			int as = !strcmp(w->optset, POOL_ASM_SET);
			if (msg_strdup(&m, "sandbox", &sb) == 1 &&
			    strcmp(sb, w->pool->sandbox[as]) != 0) {
				if (strstr(sb, "without") || !strcmp(sb, "off"))
					log_warn("worker sandbox: %s", sb);
				snprintf(w->pool->sandbox[as], sizeof w->pool->sandbox[as], "%s", sb);
			}
			free(sb);
			if ((f = failing_find(w->pool, w->optset)))
				failing_forget(w->pool, f);
			evtimer_del(w->timer);
			set_state(w, W_IDLE);
			dispatch(w->pool);
		}
	} else if (h->type == (FRAME_JOB | FRAME_REPLY) && w->state == W_BUSY) {
		struct job_result res = { 0 };
		int64_t st = -1;
		const char *out = NULL, *lg = NULL;
		size_t outn = 0, lgn = 0;
		int64_t xc = 0;
		if (msg_int(&m, "status", &st) != 1 || st < JOB_OK || st > JOB_FATAL_EXIT ||
		    msg_bytes(&m, "output", &out, &outn) < 0 ||
		    msg_bytes(&m, "log", &lg, &lgn) < 0 ||
		    msg_int(&m, "compile_us", &res.compile_us) < 0 ||
		    msg_int(&m, "exit_code", &xc) < 0 || xc < 0 || xc > 255) {
			msg_free(&m);
			kill_worker(w, "malformed job reply");
			return;
		}
		res.status = (enum job_status)st;
		res.exit_code = (int)xc;
		res.output = out;
		res.output_len = outn;
		res.log = lg;
		res.log_len = lgn;
		w->jobs_done++;
		if (res.status == JOB_FATAL || res.status == JOB_FATAL_EXIT) {
			/* The worker ends after sending this (LLVM's state is
			 * not to be trusted after a fatal error), as one taken
			 * over might not: ended here, as no death that backs
			 * the pool off. */
			if (res.status == JOB_FATAL && !w->background)
				w->pool->counters.crashes++;   /* a confirmation that
				                                  reproduces a recorded fatal
				                                  error is no new crash */
			retire(w);      /* its exit made sure of */
		} else if (w->background) {
			retire(w);      /* one job each: a fresh tenant per job */
		} else if (w->pool->cfg.recycle_after &&
			   w->jobs_done >= w->pool->cfg.recycle_after) {
			w->pool->counters.recycled++;
			retire(w);
		} else {
			set_state(w, W_IDLE);
		}
		complete(w, &res);
		dispatch(w->pool);
	} else if (h->type == (FRAME_JOB | FRAME_REPLY) && w->state == W_STARTING) {
		/* LLVM's fatal error in a warm-up kernel: these options can
		 * never compile anything (-code-model=tiny, say). */
		const char *lg = NULL;
		size_t lgn = 0;
		int64_t st = -1;
		if (msg_int(&m, "status", &st) == 1 && (st == JOB_FATAL || st == JOB_FATAL_EXIT) &&
		    msg_bytes(&m, "log", &lg, &lgn) == 1) {
			char why[START_LOG_TAIL];
			while (lgn && lg[lgn - 1] == '\n')
				lgn--;
			snprintf(why, sizeof why, "%.*s", (int)lgn, lg);
			start_failed(w->pool, w->optset, why, 1);
			close(w->start_log);
			w->start_log = -1;
		}
		kill_worker(w, NULL);
	} else {
		kill_worker(w, "unexpected message");
	}
	msg_free(&m);
}

static void on_read(struct bufferevent *bev, void *arg)
{
	struct worker *w = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	while (w->state != W_DYING) {
		unsigned char hdr[FRAME_HDR_LEN];
		struct frame_hdr h;
		struct buf err = BUF_INIT;
		ev_ssize_t got = evbuffer_copyout(in, hdr, sizeof hdr);
		int r = frame_parse_hdr(hdr, got < 0 ? 0 : (size_t)got,
					WORKER_REPLY_MAX, &h, &err);
		if (r < 0) {
			kill_worker(w, err.data);
			buf_free(&err);
			return;
		}
		if (r == 0 || evbuffer_get_length(in) < FRAME_HDR_LEN + (size_t)h.len)
			return;
		unsigned char *all = evbuffer_pullup(in, FRAME_HDR_LEN + (ev_ssize_t)h.len);
		if (!all) {
			kill_worker(w, "out of memory reading a reply");
			return;
		}
		handle_reply(w, &h, all + FRAME_HDR_LEN);
		evbuffer_drain(in, FRAME_HDR_LEN + h.len);
	}
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct worker *w = arg;

	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	bufferevent_free(w->bev);
	w->bev = NULL;
	w->eof = 1;
	mark_dying(w);
	if (w->reaped)
		finish(w);
}

static void on_sigchld(evutil_socket_t sig, short what, void *arg)
{
	struct pool *p = arg;
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct worker *w;
		TAILQ_FOREACH(w, &p->workers, link)
			if (w->pid == pid)
				break;
		if (!w)
			continue;
		w->reaped = 1;
		w->status = status;
		/* Deaths back the pool off; retirements do not (they are
		 * SIGKILLed: a worker taken over could ignore a request). */
		if (!w->retired && (w->job || !(WIFEXITED(status) && WEXITSTATUS(status) == 0))) {
			int64_t t = now_ms();
			if (t - p->last_death_ms < BACKOFF_WINDOW_MS)
				p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : 50;
			else
				p->backoff_ms = 0;
			if (p->backoff_ms > BACKOFF_MAX_MS)
				p->backoff_ms = BACKOFF_MAX_MS;
			p->last_death_ms = t;
		}
		/* Its last replies read first (a worker's end of file), unless
		 * it was given up on: then nothing more of it is read. */
		if (w->eof || w->state == W_DYING)
			finish(w);
	}
}

static void on_respawn(evutil_socket_t fd, short what, void *arg)
{
	struct pool *p = arg;

	p->backoff_ms = p->backoff_ms / 2;
	dispatch(p);
}

/* What a new worker needs to know, its first frame: its option set (or
 * "@asm": an assembler worker), limits, warm-up target and sandbox. */
static void send_config(struct pool *p, struct worker *w)
{
	struct buf out = BUF_INIT;
	struct msg_writer mw;
	int asm_worker = !strcmp(w->optset, POOL_ASM_SET);

	msg_begin(&mw, &out, FRAME_HELLO);
	msg_put_str(&mw, "optset", asm_worker ? "" : w->optset);
	msg_put_str(&mw, "profile", asm_worker ? "assembler" : "codegen");
	msg_put_int(&mw, "job_timeout_s", p->cfg.job_timeout_s);
	msg_put_int(&mw, "mem_limit", p->cfg.mem_limit);
	msg_put_str(&mw, "warm_cpu", p->cfg.warm_cpu ? p->cfg.warm_cpu : "");
	msg_put_str(&mw, "warm_features", p->cfg.warm_features ? p->cfg.warm_features : "");
	msg_put_str(&mw, "sandbox", p->cfg.sandbox ? p->cfg.sandbox : "auto");
	msg_put_str(&mw, "read_roots", p->cfg.asm_roots ? p->cfg.asm_roots : "");
	msg_put_str(&mw, "tmp", w->tmp);
	if (msg_end(&mw) == 0)
		bufferevent_write(w->bev, out.data, out.len);
	buf_free(&out);
}

/* Start a worker for optset (background: a background worker, at idle
 * priority). Returns it, or NULL if clone or socketpair fail. */
static struct worker *spawn(struct pool *p, const char *optset, int background)
{
	struct worker_proc proc;

	if (worker_exec(optset, background,
			!strcmp(optset, POOL_ASM_SET) ? p->cfg.tmp_parent : NULL, p->env, &proc) < 0)
		return NULL;
	evutil_make_socket_nonblocking(proc.sock);
	struct worker *w = calloc(1, sizeof *w);
	if (!w || !(w->optset = strdup(optset))) {
		free(w);
		close(proc.sock);
		close(proc.start_log);
		kill(proc.pid, SIGKILL);
		worker_rm_tmp(proc.tmp);
		return NULL;
	}
	w->start_log = proc.start_log;
	memcpy(w->tmp, proc.tmp, sizeof proc.tmp);
	w->tenant = POOL_ANY_TENANT;
	w->pool = p;
	w->pid = proc.pid;
	w->background = background;
	w->state = W_STARTING;
	w->bev = bufferevent_socket_new(p->base, proc.sock, BEV_OPT_CLOSE_ON_FREE);
	w->timer = evtimer_new(p->base, on_timeout, w);
	send_config(p, w);
	/* Starting (LLVM set-up and warm-up) gets the same limit as a job. */
	arm(w, (int64_t)p->cfg.job_timeout_s * 1000);
	bufferevent_setcb(w->bev, on_read, NULL, on_event, w);
	bufferevent_enable(w->bev, EV_READ | EV_WRITE);
	TAILQ_INSERT_TAIL(&p->workers, w, link);
	if (background) {
		p->nbg++;
	} else {
		p->nworkers++;
		p->counters.spawned++;
	}
	log_debug("%s worker %d started (options '%s')", background ? "background" : "a",
		  (int)proc.pid, optset);
	return w;
}

static void start(struct worker *w, struct pool_job *job)
{
	struct pool *p = w->pool;

	unqueue(p, job);
	if (job->background) {
		p->counters.bg_started++;
		p->counters.bg_running++;
	} else {
		struct owner *o = job->o;
		job->started_us = now_us();
		p->counters.busy++;
		o->running++;
		o->run_start_sum += job->started_us;
		o->turn = ++p->turns;
	}
	w->job = job;
	w->used = 1;
	job->w = w;
	if (job->tenant != POOL_ANY_TENANT)
		w->tenant = job->tenant;
	w->last_used = now_ms();
	set_state(w, W_BUSY);
	bufferevent_write(w->bev, job->frame.data, job->frame.len);
	arm(w, (int64_t)p->cfg.job_timeout_s * 1000);
}

/* Stop a background worker (a foreground job wants its core) or let it
 * go on; its timer stops and goes on with it. bg_running counts the
 * background workers with a job and not stopped. */
static void pause_worker(struct worker *w, int pause)
{
	struct pool *p = w->pool;

	if (w->paused == pause)
		return;
	if (pause) {
		int64_t left = w->deadline_ms - now_ms();
		evtimer_del(w->timer);
		kill(w->pid, SIGSTOP);
		w->deadline_ms = left > 0 ? left : 0;
		p->counters.bg_pauses++;
		p->counters.bg_paused++;
		if (w->job)
			p->counters.bg_running--;
	} else {
		kill(w->pid, SIGCONT);
		arm(w, w->deadline_ms);
		p->counters.bg_paused--;
		if (w->job)     /* not one whose job was completed while it was stopped */
			p->counters.bg_running++;
	}
	w->paused = pause;
	log_debug("background worker %d %s", (int)w->pid, pause ? "stopped" : "continued");
}

enum placed { PLACED, COVERED, WAIT, FAILED };

static void drop_unwanted(struct pool *p, struct pool_job *job)
{
	p->counters.dropped++;
	fail_job(p, job, JOB_UNAVAILABLE, "no client waits for this compile any more");
}

/* How much an idle worker w that cannot serve o's job costs its own user
 * to lose, as 0 (nobody's, or its user has nothing it could run there), 1
 * (its user is a quantum ahead of o) or -1 (its user's turn goes on: keep
 * it). */
static int eviction_cost(struct pool *p, struct worker *w, struct owner *o, int64_t now)
{
	if (w->tenant == POOL_ANY_TENANT)
		return 0;
	struct owner *holder = owner_find(p, w->tenant);
	if (holder == o || !owner_wants(p, holder, w->optset))
		return 0;
	return vtime(holder, now) > vtime(o, now) + QUANTUM_US ? 1 : -1;
}

/*
 * Find foreground job (of owner o) a worker: its own tenant's idle worker,
 * else a fresh one; else one starting (that no other job of this pass
 * counts on); else start one, replacing an idle worker if the pool is
 * full: one nobody needs, least recently used first, then one whose user
 * is a quantum ahead of o. PLACED: it runs; COVERED: a worker is on its
 * way; WAIT: nothing for it now; FAILED: it was failed (its set blocked,
 * or no fork).
 */
static enum placed place(struct pool *p, struct pool_job *job, struct owner *o, int64_t now)
{
	struct worker *w, *same = NULL, *fresh = NULL, *starting = NULL, *victim = NULL;
	int victim_cost = 2;
	const char *blocked;

	TAILQ_FOREACH(w, &p->workers, link) {
		if (w->state == W_DYING || w->background)
			continue;
		/* A worker fits a job of its option set whose tenant it has
		 * served or, fresh from exec, nobody's yet. */
		int fits = !strcmp(w->optset, job->optset) &&
			   (job->tenant == POOL_ANY_TENANT || w->tenant == POOL_ANY_TENANT ||
			    w->tenant == job->tenant);
		if (fits) {
			if (w->state == W_IDLE && w->tenant == job->tenant && !same)
				same = w;
			else if (w->state == W_IDLE && !fresh)
				fresh = w;
			else if (w->state == W_STARTING && w->claim_pass != p->pass && !starting)
				starting = w;
			continue;
		}
		if (w->state != W_IDLE)
			continue;
		int cost = eviction_cost(p, w, o, now);
		if (cost >= 0 && (cost < victim_cost ||
				  (cost == victim_cost && w->last_used < victim->last_used))) {
			victim = w;
			victim_cost = cost;
		}
	}
	if ((w = same ? same : fresh)) {
		start(w, job);
		return PLACED;
	}
	if (starting) {
		starting->claim_pass = p->pass;
		job->cover_pass = p->pass;
		return COVERED;
	}
	if ((blocked = blocked_reason(p, job->optset))) {
		fail_job(p, job, JOB_UNAVAILABLE, blocked);
		return FAILED;
	}
	if (p->backoff_ms > 0) {
		struct timeval tv = { p->backoff_ms / 1000, p->backoff_ms % 1000 * 1000 };
		if (!evtimer_pending(p->respawn, NULL))
			evtimer_add(p->respawn, &tv);
		return WAIT;
	}
	if (p->nworkers >= p->cfg.size) {
		if (!victim)
			return WAIT;
		retire(victim);
	}
	if (!(w = spawn(p, job->optset, 0))) {
		fail_job(p, job, JOB_UNAVAILABLE, "cannot start a compiler worker");
		return FAILED;
	}
	w->claim_pass = p->pass;
	job->cover_pass = p->pass;
	return COVERED;
}

/*
 * Foreground jobs, in rounds: owners by virtual time (ties: who waited
 * longest since its last worker), each at most one job per round. Returns
 * how many jobs wait that could run (their owner is under max_running).
 */
static int foreground(struct pool *p)
{
	struct owner *o, *stack[64], **order = stack;
	struct pool_job *job, *next;
	int n, cap = 64, progress;
	int64_t now = now_us();

	/* What nobody waits for any more goes, once a client has gone
	 * (pool_prune()); a job is asked again before it starts. */
	if (p->prune) {
		p->prune = 0;
		TAILQ_FOREACH(o, &p->owners, link)
			for (job = TAILQ_FIRST(&o->jobs); job; job = next) {
				next = TAILQ_NEXT(job, q);
				if (job->wanted && !job->wanted(job))
					drop_unwanted(p, job);
			}
	}
	do {
		progress = 0;
		n = 0;
		TAILQ_FOREACH(o, &p->owners, link) {
			if (!o->queued || (p->cfg.max_running && o->running >= p->cfg.max_running))
				continue;
			if (n == cap) {
				struct owner **more = malloc(sizeof *more * (size_t)cap * 2);
				if (!more)
					break;
				memcpy(more, order, sizeof *more * (size_t)n);
				if (order != stack)
					free(order);
				order = more;
				cap *= 2;
			}
			/* Insertion by (virtual time, turn): few owners wait. */
			int i = n++;
			int64_t vo = vtime(o, now);
			while (i > 0 && (vtime(order[i - 1], now) > vo ||
					 (vtime(order[i - 1], now) == vo && order[i - 1]->turn > o->turn))) {
				order[i] = order[i - 1];
				i--;
			}
			order[i] = o;
		}
		for (int i = 0; i < n; i++) {
			o = order[i];
			const char *waits = NULL;       /* an option set with no worker */
			for (job = TAILQ_FIRST(&o->jobs); job; job = next) {
				next = TAILQ_NEXT(job, q);
				if (p->cfg.max_running && o->running >= p->cfg.max_running)
					break;
				if (job->cover_pass == p->pass || (waits && !strcmp(waits, job->optset)))
					continue;
				if (job->wanted && !job->wanted(job)) {
					drop_unwanted(p, job);
					continue;
				}
				enum placed r = place(p, job, o, now);
				if (r == PLACED || r == COVERED) {
					progress = 1;
					break;
				}
				if (r != WAIT)
					continue;
				/* The rest of a queue of one set would wait as well:
				 * a long queue costs nothing per pass. */
				if ((!*job->optset && o->queued_default == o->queued) ||
				    (!strcmp(job->optset, POOL_ASM_SET) && o->queued_asm == o->queued))
					break;
				waits = job->optset;
			}
		}
	} while (progress);
	if (order != stack)
		free(order);

	int waiting = 0;
	p->counters.owners_waiting = 0;
	TAILQ_FOREACH(o, &p->owners, link) {
		p->counters.owners_waiting += o->queued > 0;
		if (!p->cfg.max_running || o->running < p->cfg.max_running)
			waiting += o->queued;
	}
	return waiting;
}

/* The oldest background job of optset waiting (NULL: none). */
static struct pool_job *bg_first(struct pool *p, const char *optset)
{
	struct pool_job *j;
	TAILQ_FOREACH(j, &p->bg, q)
		if (!strcmp(j->optset, optset))
			return j;
	return NULL;
}

/*
 * Background jobs, on what the foreground leaves: with fg_waiting jobs
 * waiting, none; else one per core no foreground worker runs or starts
 * on. Background workers beyond that are stopped, the newest first; idle
 * ones get the oldest job of their set; spares are started for jobs that
 * have none coming.
 */
static void background(struct pool *p, int fg_waiting)
{
	struct worker *w, *next;
	int fg_cpu = 0, active = 0;
	int limit = p->cfg.confirm_workers < p->cfg.size ? p->cfg.confirm_workers : p->cfg.size;

	TAILQ_FOREACH(w, &p->workers, link)
		fg_cpu += !w->background && (w->state == W_BUSY || w->state == W_STARTING);
	int allowed = fg_waiting ? 0 : p->cfg.size - fg_cpu;
	if (allowed > limit)
		allowed = limit;
	/* Running ones, oldest first: those started first go on, the rest
	 * stop. Never one still starting: before its exec it holds copies of
	 * the master's descriptors (client sockets, the cache's lock), which
	 * a stopped process would keep open; it starts at idle priority. */
	TAILQ_FOREACH(w, &p->workers, link) {
		if (!w->background || w->state != W_BUSY)
			continue;
		if (active < allowed) {
			pause_worker(w, 0);
			active++;
		} else {
			pause_worker(w, 1);
		}
	}
	TAILQ_FOREACH(w, &p->workers, link)
		active += w->background && w->state == W_STARTING;
	/* Idle background workers: the oldest job of their set, if anyone
	 * still needs it; one with no job of its set left is retired when
	 * its place is wanted (below). */
	for (w = TAILQ_FIRST(&p->workers); w; w = next) {
		next = TAILQ_NEXT(w, link);
		if (!w->background || w->state != W_IDLE || w->used)
			continue;
		struct pool_job *job;
		while (active < allowed && (job = bg_first(p, w->optset))) {
			if (!job->wanted || job->wanted(job)) {
				start(w, job);
				active++;
				break;
			}
			p->counters.dropped++;
			fail_job(p, job, JOB_UNAVAILABLE, "confirmed meanwhile");
		}
	}
	/* Spares ahead of need: one per waiting job that has none coming,
	 * while a core is free for it to start on. */
	struct pool_job *job;
	p->pass++;
	TAILQ_FOREACH(job, &p->bg, q) {
		if (active >= allowed || p->backoff_ms > 0)
			break;
		struct worker *spare = NULL;
		TAILQ_FOREACH(w, &p->workers, link)
			if (w->background && !w->used && w->claim_pass != p->pass &&
			    (w->state == W_STARTING || w->state == W_IDLE) &&
			    !strcmp(w->optset, job->optset)) {
				spare = w;
				break;
			}
		if (spare) {
			spare->claim_pass = p->pass;
			continue;
		}
		if (blocked_reason(p, job->optset))
			continue;       /* it waits for the block to end */
		if (p->nbg >= limit) {
			/* Make room: an idle spare of a set nothing waits for. */
			struct worker *idle = NULL;
			TAILQ_FOREACH(w, &p->workers, link)
				if (w->background && w->state == W_IDLE && !w->used &&
				    !bg_first(p, w->optset)) {
					idle = w;
					break;
				}
			if (!idle)
				break;
			retire(idle);
		}
		if (!(spare = spawn(p, job->optset, 1)))
			break;
		spare->claim_pass = p->pass;
		active++;
	}
	/* Spares nobody will need: nothing of their set waits. */
	if (TAILQ_EMPTY(&p->bg))
		TAILQ_FOREACH(w, &p->workers, link)
			if (w->background && w->state == W_IDLE)
				retire(w);
}

/* Give queued jobs to idle workers, starting or replacing workers where the
 * job's option set has none; then background jobs what is left. Called
 * after anything that frees a worker or queues a job. */
static void dispatch(struct pool *p)
{
	if (p->dispatching) {
		p->again = 1;
		return;
	}
	p->dispatching = 1;
again:
	p->again = 0;
	p->pass++;
	int fg_waiting = foreground(p);
	background(p, fg_waiting);
	/* Keep the default set at full strength when nothing is queued (once
	 * its block, if any, is over: the respawn timer comes back then). */
	struct failing_set *def = failing_find(p, "");
	int64_t wait = def ? def->blocked_until - now_ms() : 0;
	int idle = p->counters.queued == 0;
	if (wait > 0 && idle && p->nworkers < p->cfg.size) {
		struct timeval tv = { wait / 1000, (wait % 1000) * 1000 };
		if (!evtimer_pending(p->respawn, NULL))
			evtimer_add(p->respawn, &tv);
	}
	/* Backing off after deaths: come back when the pause is over, also
	 * with nothing queued (no job will call dispatch() to do it). */
	if (wait <= 0 && p->backoff_ms > 0 && (p->nworkers < p->cfg.size || !TAILQ_EMPTY(&p->bg)) &&
	    !evtimer_pending(p->respawn, NULL)) {
		struct timeval tv = { p->backoff_ms / 1000, p->backoff_ms % 1000 * 1000 };
		evtimer_add(p->respawn, &tv);
	}
	while (wait <= 0 && idle && p->nworkers < p->cfg.size && p->backoff_ms == 0)
		if (!spawn(p, "", 0))
			break;
	owners_sweep(p);
	if (p->again)
		goto again;
	p->dispatching = 0;
}

struct pool *pool_new(struct event_base *base, const struct pool_config *cfg,
		      struct buf *err)
{
	struct pool *p = calloc(1, sizeof *p);

	if (!p) {
		buf_puts(err, "out of memory");
		return NULL;
	}
	p->base = base;
	p->cfg = *cfg;
	TAILQ_INIT(&p->workers);
	TAILQ_INIT(&p->owners);
	TAILQ_INIT(&p->bg);
	TAILQ_INIT(&p->failing);
	if (!(p->env = worker_env_new())) {
		buf_puts(err, "out of memory");
		pool_free(p);
		return NULL;
	}
	p->started_ms = now_ms();
	p->sigchld = evsignal_new(base, SIGCHLD, on_sigchld, p);
	p->respawn = evtimer_new(base, on_respawn, p);
	p->warm_ev = event_new(base, -1, 0, on_warm, p);
	if (!p->sigchld || !p->respawn || !p->warm_ev ||
	    evsignal_add(p->sigchld, NULL) < 0) {
		buf_puts(err, "cannot set up worker reaping");
		pool_free(p);
		return NULL;
	}
	dispatch(p);
	if (p->nworkers == 0) {
		buf_puts(err, "cannot start any compiler worker");
		pool_free(p);
		return NULL;
	}
	struct worker *w;
	TAILQ_FOREACH(w, &p->workers, link) {
		w->first_round = 1;
		p->first_starting++;
	}
	return p;
}

/* done() for a job that never reached the queue. */
static void refuse_job(struct pool_job *job, const char *why)
{
	struct job_result res = { .status = JOB_UNAVAILABLE, .log = why,
				  .log_len = strlen(why), .not_run = 1 };
	job->done(job, &res);
}

void pool_submit(struct pool *p, struct pool_job *job)
{
	job->w = NULL;
	job->cover_pass = 0;
	if (job->background) {
		int64_t cost = (int64_t)job->frame.len + BG_OVERHEAD;
		if (p->cfg.confirm_workers <= 0 || cost > p->cfg.confirm_queue) {
			p->counters.bg_dropped++;
			refuse_job(job, "no room for background jobs");
			return;
		}
		/* Bounded: the oldest waiting make room. */
		while (p->bg_bytes + cost > p->cfg.confirm_queue && !TAILQ_EMPTY(&p->bg)) {
			p->counters.bg_dropped++;
			fail_job(p, TAILQ_FIRST(&p->bg), JOB_UNAVAILABLE,
				 "dropped: too many background jobs waiting");
		}
		TAILQ_INSERT_TAIL(&p->bg, job, q);
		p->bg_bytes += cost;
		p->counters.bg_queued++;
		dispatch(p);
		return;
	}
	struct owner *o = owner_get(p, job->owner);
	if (!o) {
		refuse_job(job, "out of memory");
		return;
	}
	job->o = o;
	TAILQ_INSERT_TAIL(&o->jobs, job, q);
	o->queued++;
	o->queued_default += !*job->optset;
	o->queued_asm += !strcmp(job->optset, POOL_ASM_SET);
	p->counters.queued++;
	dispatch(p);
}

/* Drop every background job, waiting or running, for why. */
static void cancel_background(struct pool *p, const char *why)
{
	struct job_result res = { .status = JOB_UNAVAILABLE, .log = why,
				  .log_len = strlen(why), .not_run = 1 };
	struct worker *w, *next;

	while (!TAILQ_EMPTY(&p->bg))
		fail_job(p, TAILQ_FIRST(&p->bg), JOB_UNAVAILABLE, why);
	for (w = TAILQ_FIRST(&p->workers); w; w = next) {
		next = TAILQ_NEXT(w, link);
		if (!w->background || w->state == W_DYING)
			continue;
		if (w->job)
			complete(w, &res);
		retire(w);
	}
}

void pool_cancel_background(struct pool *p)
{
	cancel_background(p, "the daemon is shutting down");
}

void pool_sandbox(struct pool *p, struct buf *out)
{
	buf_printf(out, "codegen workers: %s; assembler workers: %s",
		   p->sandbox[0][0] ? p->sandbox[0] : "no worker yet",
		   p->sandbox[1][0] ? p->sandbox[1] : "no worker yet");
}

void pool_prune(struct pool *p)
{
	p->prune = 1;
	dispatch(p);
}

int pool_job_running(const struct pool_job *job)
{
	return job->w != NULL;
}

void pool_counters(struct pool *p, struct pool_counters *c)
{
	struct worker *w;

	*c = p->counters;
	c->ready = 0;
	TAILQ_FOREACH(w, &p->workers, link)
		c->ready += !w->background && (w->state == W_IDLE || w->state == W_BUSY);
	c->bg_workers = p->nbg;
	c->bg_queued_bytes = p->bg_bytes;
}

void pool_when_warm(struct pool *p, void (*cb)(void *arg), void *arg)
{
	p->warm_cb = cb;
	p->warm_arg = arg;
	if (p->warm)
		event_active(p->warm_ev, EV_TIMEOUT, 0);
}

int64_t pool_warm_ms(const struct pool *p)
{
	return p->warm ? p->warm_ms : -1;
}

void pool_reconfigure(struct pool *p, const struct pool_config *cfg)
{
	p->cfg.job_timeout_s = cfg->job_timeout_s;
	p->cfg.recycle_after = cfg->recycle_after;
	p->cfg.mem_limit = cfg->mem_limit;
	p->cfg.max_running = cfg->max_running;
	p->cfg.confirm_workers = cfg->confirm_workers;
	p->cfg.confirm_queue = cfg->confirm_queue;
	/* No background workers any more, or less room for what waits. */
	if (p->cfg.confirm_workers <= 0) {
		p->counters.bg_dropped += p->counters.bg_queued;
		cancel_background(p, "confirm-workers is 0 now");
	}
	while (p->bg_bytes > p->cfg.confirm_queue && !TAILQ_EMPTY(&p->bg)) {
		p->counters.bg_dropped++;
		fail_job(p, TAILQ_FIRST(&p->bg), JOB_UNAVAILABLE,
			 "dropped: too many background jobs waiting");
	}
	dispatch(p);
}

void pool_free(struct pool *p)
{
	struct worker *w;
	struct pool_job *j;

	if (!p)
		return;
	p->dispatching = 1;     /* what done() sets off must not dispatch now */
	struct owner *o;
	while ((o = TAILQ_FIRST(&p->owners))) {
		while ((j = TAILQ_FIRST(&o->jobs))) {
			struct job_result res = { .status = JOB_UNAVAILABLE,
						  .log = "the daemon is shutting down", .not_run = 1 };
			res.log_len = strlen(res.log);
			TAILQ_REMOVE(&o->jobs, j, q);
			j->done(j, &res);
		}
		TAILQ_REMOVE(&p->owners, o, link);
		free(o);
	}
	while ((j = TAILQ_FIRST(&p->bg))) {
		struct job_result res = { .status = JOB_UNAVAILABLE,
					  .log = "the daemon is shutting down", .not_run = 1 };
		res.log_len = strlen(res.log);
		TAILQ_REMOVE(&p->bg, j, q);
		j->done(j, &res);
	}
	while ((w = TAILQ_FIRST(&p->workers))) {
		TAILQ_REMOVE(&p->workers, w, link);
		kill(w->pid, SIGKILL);
		waitpid(w->pid, NULL, 0);
		if (w->job) {
			struct job_result res = { .status = JOB_UNAVAILABLE,
						  .log = "the daemon is shutting down" };
			res.log_len = strlen(res.log);
			w->job->done(w->job, &res);
		}
		if (w->bev)
			bufferevent_free(w->bev);
		if (w->timer)
			event_free(w->timer);
		if (w->start_log >= 0)
			close(w->start_log);
		worker_rm_tmp(w->tmp);
		free(w->optset);
		free(w);
	}
	while (!TAILQ_EMPTY(&p->failing))
		failing_forget(p, TAILQ_FIRST(&p->failing));
	for (char **e = p->env; e && *e; e++)
		free(*e);
	free(p->env);
	if (p->sigchld)
		event_free(p->sigchld);
	if (p->respawn)
		event_free(p->respawn);
	if (p->warm_ev)
		event_free(p->warm_ev);
	free(p);
}
