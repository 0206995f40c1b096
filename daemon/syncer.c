/* SPDX-License-Identifier: Apache-2.0 */
/*
 * syncer: see syncer.h.
 *
 * Design: one thread, started by the first request, takes the requests in
 * order from a list under a mutex and runs each one's sync(); each done
 * request moves to a second list, and a byte written to a pipe wakes the
 * loop, which empties that list and calls each done() on its own thread,
 * in order. The mutex orders what sync() wrote before what done() reads.
 * The thread itself touches nothing but the two lists and the pipe: no
 * allocation, no log; every signal is blocked in it, so they all reach
 * the loop's thread as before. A worker forked while it runs gets no copy
 * of it and never uses its lists.
 */
#include "daemon/syncer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/log.h"

struct sync_req {
	int err;
	sync_fn sync;
	sync_done_fn done;
	void *arg;
	struct sync_req *next;
};

struct syncer {
	struct event_base *base;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct sync_req *todo, **todo_end;      /* the thread's, in order */
	struct sync_req *done, **done_end;      /* synced, for the loop */
	int started, failed, stop;
	int pipe_failed;        /* pipe2() failures in a row */
	pthread_t thread;
	int wake[2];            /* the thread writes a byte, the loop reads */
	struct event *ev;
};

static void *run(void *arg)
{
	struct syncer *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->todo && !s->stop)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!s->todo)
			break;
		struct sync_req *r = s->todo;
		pthread_mutex_unlock(&s->mu);
		r->err = r->sync(r->arg);
		pthread_mutex_lock(&s->mu);
		if (!(s->todo = r->next))
			s->todo_end = &s->todo;
		r->next = NULL;
		*s->done_end = r;
		s->done_end = &r->next;
		/* A full pipe already holds a wake-up the loop has not read. */
		ssize_t w = write(s->wake[1], "", 1);
		(void)w;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Take the done list and call each done() in order. */
static void deliver(struct syncer *s)
{
	pthread_mutex_lock(&s->mu);
	struct sync_req *r = s->done;
	s->done = NULL;
	s->done_end = &s->done;
	pthread_mutex_unlock(&s->mu);
	while (r) {
		struct sync_req *next = r->next;
		r->done(r->arg, r->err);
		free(r);
		r = next;
	}
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
	char b[64];

	(void)what;
	while (read(fd, b, sizeof b) > 0)
		;
	deliver(arg);
}

struct syncer *syncer_new(struct event_base *base)
{
	struct syncer *s = calloc(1, sizeof *s);

	if (!s)
		return NULL;
	s->base = base;
	s->todo_end = &s->todo;
	s->done_end = &s->done;
	s->wake[0] = s->wake[1] = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	return s;
}

/* The pipe, its event and the thread, at the first request. */
static int start(struct syncer *s)
{
	sigset_t all, old;
	int rc;

	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		/* Out of descriptors passes: the next request tries again, and
		 * only the first failure of a run of them is said. */
		if (!s->pipe_failed++)
			log_warn("syncer: pipe: %s; files are synced and unlinked on the loop "
				 "until one can be made", strerror(errno));
		s->wake[0] = s->wake[1] = -1;
		return -1;
	}
	s->pipe_failed = 0;
	s->ev = event_new(s->base, s->wake[0], EV_READ | EV_PERSIST, on_wake, s);
	if (!s->ev || event_add(s->ev, NULL) < 0)
		goto fail;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->thread, NULL, run, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		log_warn("syncer: cannot start a thread: %s; its files are synced and unlinked "
			 "on the loop", strerror(rc));
		goto fail;
	}
	s->started = 1;
	return 0;
fail:
	s->failed = 1;          /* said once: the loop does the work from now on */
	if (s->ev)
		event_free(s->ev);
	s->ev = NULL;
	close(s->wake[0]);
	close(s->wake[1]);
	s->wake[0] = s->wake[1] = -1;
	return -1;
}

int syncer_sync(struct syncer *s, sync_fn sync, sync_done_fn done, void *arg)
{
	struct sync_req *r;

	if (!s->started && (s->failed || start(s) < 0))
		return -1;
	if (!(r = malloc(sizeof *r)))
		return -1;
	*r = (struct sync_req){ .sync = sync, .done = done, .arg = arg };
	pthread_mutex_lock(&s->mu);
	*s->todo_end = r;
	s->todo_end = &r->next;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void syncer_free(struct syncer *s)
{
	if (!s)
		return;
	if (s->started) {
		pthread_mutex_lock(&s->mu);
		s->stop = 1;
		/* What the thread has not begun is not synced: cancelled. */
		struct sync_req *left = s->todo ? s->todo->next : NULL;
		if (s->todo) {
			s->todo->next = NULL;
			s->todo_end = &s->todo->next;
		}
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->thread, NULL);
		deliver(s);
		while (left) {
			struct sync_req *next = left->next;
			left->done(left->arg, ECANCELED);
			free(left);
			left = next;
		}
		event_free(s->ev);
		close(s->wake[0]);
		close(s->wake[1]);
	}
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
