/*
 * worker: the pool of long-lived compile processes (master side) and the
 * loop each worker runs (worker side). See worker.h for the model.
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
 * Never: run LLVM in the master, block the master on a worker, or trust a
 * byte a worker sends before checking it (a bad reply kills that worker).
 */
#include "daemon/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "daemon/codegen.h"
#include "daemon/cubin.h"
#include "daemon/log.h"
#include "proto/frame.h"
#include "proto/msg.h"

/* A worker's reply holds PTX and a log; no real kernel comes near this. */
#define WORKER_REPLY_MAX (512u << 20)
/* Deaths closer together than this count towards the back-off. */
#define BACKOFF_WINDOW_MS 2000
#define BACKOFF_MAX_MS 5000

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
	int first_round;        /* started by pool_new(), not yet done starting */
	struct event *timer;
	TAILQ_ENTRY(worker) link;
};

TAILQ_HEAD(worker_list, worker);
TAILQ_HEAD(job_queue, pool_job);

struct pool {
	struct event_base *base;
	struct pool_config cfg;
	struct worker_list workers;
	int nworkers;           /* live or starting, not dying */
	struct job_queue queue;
	struct event *sigchld;
	struct event *respawn;  /* back-off timer */
	struct pool_counters counters;
	int64_t last_death_ms;
	int backoff_ms;
	int dispatching, again;  /* dispatch() is not reentrant */
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
static int spawn(struct pool *p, const char *optset);

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

	w->job = NULL;
	if (w->timer)
		evtimer_del(w->timer);
	w->pool->counters.busy--;
	job->w = NULL;
	job->done(job, res);
}

/* Stop talking to w and make sure it dies; the rest happens in reap(). */
static void kill_worker(struct worker *w, const char *why)
{
	if (w->state == W_DYING)
		return;
	if (why)
		log_warn("worker %d: %s; killing it", (int)w->pid, why);
	set_state(w, W_DYING);
	w->pool->nworkers--;
	kill(w->pid, SIGKILL);
}

/* Both the socket has closed and the exit status is in: finish w. */
static void finish(struct worker *w)
{
	struct pool *p = w->pool;

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
	if (w->state != W_DYING)
		p->nworkers--;
	if (w->timer)
		event_free(w->timer);
	TAILQ_REMOVE(&p->workers, w, link);
	free(w->optset);
	free(w);
	dispatch(p);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;

	if (w->state == W_STARTING) {
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
		if (msg_strdup(&m, "error", &e) == 1) {
			/* Bad backend options: every queued job of this set fails. */
			struct pool_job *j, *next;
			struct job_result res = { .status = JOB_INVALID, .log = e,
						  .log_len = strlen(e) };
			for (j = TAILQ_FIRST(&w->pool->queue); j; j = next) {
				next = TAILQ_NEXT(j, q);
				if (strcmp(j->optset, w->optset) == 0) {
					TAILQ_REMOVE(&w->pool->queue, j, q);
					w->pool->counters.queued--;
					j->done(j, &res);
				}
			}
			free(e);
			kill_worker(w, NULL);
		} else {
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
		if (msg_int(&m, "status", &st) != 1 || st < JOB_OK || st > JOB_UNAVAILABLE ||
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
		if (res.status == JOB_FATAL) {
			/* The worker aborts after sending this. */
			w->pool->counters.crashes++;
			set_state(w, W_DYING);
			w->pool->nworkers--;
		} else if (w->pool->cfg.recycle_after &&
			   w->jobs_done >= w->pool->cfg.recycle_after) {
			w->pool->counters.recycled++;
			kill_worker(w, NULL);
		} else {
			set_state(w, W_IDLE);
		}
		complete(w, &res);
		dispatch(w->pool);
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
	if (w->state != W_DYING) {
		set_state(w, W_DYING);
		w->pool->nworkers--;
	}
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
		if (w->job || !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
			int64_t t = now_ms();
			if (t - p->last_death_ms < BACKOFF_WINDOW_MS)
				p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : 50;
			else
				p->backoff_ms = 0;
			if (p->backoff_ms > BACKOFF_MAX_MS)
				p->backoff_ms = BACKOFF_MAX_MS;
			p->last_death_ms = t;
		}
		if (w->eof)
			finish(w);
	}
}

static void on_respawn(evutil_socket_t fd, short what, void *arg)
{
	struct pool *p = arg;

	p->backoff_ms = p->backoff_ms / 2;
	dispatch(p);
}

/* Fork a worker for optset. Returns 0, or -1 if fork or socketpair fail. */
static int spawn(struct pool *p, const char *optset)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		log_err("cannot create worker socket: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		log_err("cannot fork worker: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (pid == 0) {
		/* Keep stdin/stdout/stderr and the worker's end of the socket
		 * (as fd 3); nothing of the master's survives. */
		if (dup2(sv[1], 3) < 0)
			_exit(1);
		close_range(4, ~0U, 0);
		int null = open("/dev/null", O_RDWR);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			close(null);
		}
		worker_main(3, optset, &p->cfg);
	}
	close(sv[1]);
	evutil_make_socket_nonblocking(sv[0]);
	struct worker *w = calloc(1, sizeof *w);
	if (!w || !(w->optset = strdup(optset))) {
		free(w);
		close(sv[0]);
		kill(pid, SIGKILL);
		return -1;
	}
	w->pool = p;
	w->pid = pid;
	w->state = W_STARTING;
	w->bev = bufferevent_socket_new(p->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	w->timer = evtimer_new(p->base, on_timeout, w);
	/* Starting (LLVM set-up and warm-up) gets the same limit as a job. */
	struct timeval tv = { p->cfg.job_timeout_s, 0 };
	evtimer_add(w->timer, &tv);
	bufferevent_setcb(w->bev, on_read, NULL, on_event, w);
	bufferevent_enable(w->bev, EV_READ | EV_WRITE);
	TAILQ_INSERT_TAIL(&p->workers, w, link);
	p->nworkers++;
	p->counters.spawned++;
	log_debug("worker %d started (options '%s')", (int)pid, optset);
	return 0;
}

static void start(struct worker *w, struct pool_job *job)
{
	struct pool *p = w->pool;
	struct timeval tv = { p->cfg.job_timeout_s, 0 };

	TAILQ_REMOVE(&p->queue, job, q);
	p->counters.queued--;
	p->counters.busy++;
	w->job = job;
	job->w = w;
	set_state(w, W_BUSY);
	bufferevent_write(w->bev, job->frame.data, job->frame.len);
	evtimer_add(w->timer, &tv);
}

/* Give queued jobs to idle workers, starting or replacing workers where the
 * job's option set has none. Called after anything that frees a worker or
 * queues a job. */
static void dispatch(struct pool *p)
{
	struct pool_job *job, *next;

	if (p->dispatching) {
		p->again = 1;
		return;
	}
	p->dispatching = 1;
again:
	p->again = 0;
	for (job = TAILQ_FIRST(&p->queue); job; job = next) {
		next = TAILQ_NEXT(job, q);
		struct worker *w, *idle_other = NULL;
		int starting = 0;
		TAILQ_FOREACH(w, &p->workers, link) {
			if (!job->any_worker && strcmp(w->optset, job->optset) != 0) {
				if (w->state == W_IDLE && !idle_other)
					idle_other = w;
				continue;
			}
			if (w->state == W_IDLE)
				break;
			if (w->state == W_STARTING)
				starting = 1;
		}
		if (w) {
			start(w, job);
			continue;
		}
		if (starting)
			continue;
		if (p->backoff_ms > 0) {
			struct timeval tv = { 0, p->backoff_ms * 1000 };
			if (!evtimer_pending(p->respawn, NULL))
				evtimer_add(p->respawn, &tv);
			break;
		}
		if (p->nworkers >= p->cfg.size) {
			if (!idle_other)
				continue;
			kill_worker(idle_other, NULL);
		}
		if (spawn(p, job->optset) < 0) {
			struct job_result res = {
				.status = JOB_UNAVAILABLE,
				.log = "cannot start a compiler worker",
			};
			res.log_len = strlen(res.log);
			TAILQ_REMOVE(&p->queue, job, q);
			p->counters.queued--;
			job->done(job, &res);
		}
	}
	/* Keep the default set at full strength when nothing is queued. */
	while (TAILQ_EMPTY(&p->queue) && p->nworkers < p->cfg.size &&
	       p->backoff_ms == 0)
		if (spawn(p, "") < 0)
			break;
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
	TAILQ_INIT(&p->queue);
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

void pool_submit(struct pool *p, struct pool_job *job)
{
	job->w = NULL;
	TAILQ_INSERT_TAIL(&p->queue, job, q);
	p->counters.queued++;
	dispatch(p);
}

void pool_counters(struct pool *p, struct pool_counters *c)
{
	struct worker *w;

	*c = p->counters;
	c->ready = 0;
	TAILQ_FOREACH(w, &p->workers, link)
		c->ready += w->state == W_IDLE || w->state == W_BUSY;
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
}

void pool_free(struct pool *p)
{
	struct worker *w;
	struct pool_job *j;

	if (!p)
		return;
	while ((j = TAILQ_FIRST(&p->queue))) {
		struct job_result res = { .status = JOB_UNAVAILABLE,
					  .log = "the daemon is shutting down" };
		res.log_len = strlen(res.log);
		TAILQ_REMOVE(&p->queue, j, q);
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
		free(w->optset);
		free(w);
	}
	if (p->sigchld)
		event_free(p->sigchld);
	if (p->respawn)
		event_free(p->respawn);
	if (p->warm_ev)
		event_free(p->warm_ev);
	free(p);
}

/* ---- worker side ---------------------------------------------------- */

static int wfd = -1;            /* the socket to the master */

static int write_full(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

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
	if (msg_end(&mw) < 0 || write_full(wfd, out.data, out.len) < 0)
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

/* LLVM is about to abort: tell the master why, as llc would print it. */
static void on_fatal(const char *printed, size_t printed_len, const char *reason)
{
	struct buf lg = BUF_INIT;

	buf_append(&lg, printed, printed_len);
	buf_printf(&lg, "LLVM ERROR: %s\n", reason);
	send_reply(JOB_FATAL, NULL, &lg, elapsed_us());
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
	if (msg_end(&mw) < 0 || write_full(wfd, out.data, out.len) < 0)
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

void worker_main(int fd, const char *optset, const struct pool_config *cfg)
{
	struct buf err = BUF_INIT, body = BUF_INIT, out = BUF_INIT;
	struct msg_writer mw;
	static const int sigs[] = { SIGCHLD, SIGTERM, SIGHUP, SIGINT, SIGPIPE };

	wfd = fd;
	job_timeout_ms = cfg->job_timeout_s * 1000;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		signal(sigs[i], SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Under AddressSanitizer (make check-asan) no address-space cap: its
	 * shadow memory reserves terabytes of address space up front. */
#ifndef __SANITIZE_ADDRESS__
	if (cfg->mem_limit > 0) {
		struct rlimit rl = { (rlim_t)cfg->mem_limit, (rlim_t)cfg->mem_limit };
		setrlimit(RLIMIT_AS, &rl);
	}
#endif
	/* optset: '\n'-separated backend options. */
	char *opts = strdup(optset), *save = NULL;
	const char *argv[64];
	int argc = 0;
	for (char *t = strtok_r(opts, "\n", &save); t && argc < 64;
	     t = strtok_r(NULL, "\n", &save))
		argv[argc++] = t;
	int ok = codegen_init(argc, argv, on_fatal, &err) == 0;
	if (ok)
		codegen_warm_up(cfg->warm_cpu, cfg->warm_features);
	msg_begin(&mw, &out, FRAME_HELLO | FRAME_REPLY);
	msg_put_int(&mw, "pid", getpid());
	if (!ok)
		msg_put_str(&mw, "error", err.len ? err.data : "cannot initialise LLVM");
	if (msg_end(&mw) < 0 || write_full(wfd, out.data, out.len) < 0 || !ok)
		_exit(0);

	for (;;) {
		unsigned char hdr[FRAME_HDR_LEN];
		struct frame_hdr h;
		if (read_full(wfd, hdr, sizeof hdr) < 0)
			_exit(0); /* the master closed our socket: retire */
		if (frame_parse_hdr(hdr, sizeof hdr, UINT32_MAX, &h, NULL) != 1 ||
		    h.type != FRAME_JOB)
			_exit(1);
		buf_reset(&body);
		if (buf_reserve(&body, h.len) < 0 || read_full(wfd, body.data, h.len) < 0)
			_exit(1);
		body.len = h.len;
		run_job(body.data, body.len);
	}
}
