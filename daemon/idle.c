/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idle: see idle.h.
 *
 * Idle means no client connection open, none accepted since the last
 * tick (a front's connection lives for milliseconds, between two ticks)
 * and no flight (compile) in progress: a process that keeps a connection
 * (the Python package keeps one per thread) keeps the daemon, so a
 * training job's daemon never stops under it. Background confirmations do not count; the stop cancels them,
 * as SIGTERM does. The exit raises SIGTERM at ourselves rather than
 * leaving the loop here, so that it goes through server.c's one stop path
 * (artifact waiters answered, the store checkpointed, the socket removed)
 * and this file needs nothing of it.
 */
#include "daemon/idle.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/master.h"

struct idle {
	struct server *s;
	struct event *tick;
	double since;           /* monotonic seconds when it last became idle; 0: busy */
	long long accepted;     /* s->n.connections at the last tick */
	int fired;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct idle *id = arg;
	struct server *s = id->s;
	int limit = s->cfg->idle_exit_s;

	long long accepted = (long long)s->n.connections;

	if (s->nconns > 0 || s->nflights > 0 || s->stopping || accepted != id->accepted) {
		id->accepted = accepted;
		id->since = 0;
		return;
	}
	if (id->since == 0) {
		id->since = now_s();
		return;
	}
	if (limit <= 0 || id->fired || now_s() - id->since < limit)
		return;
	id->fired = 1;
	log_info("idle for %d s (idle-exit): stopping", limit);
	raise(SIGTERM);
}

struct idle *idle_start(struct server *s)
{
	struct idle *id = calloc(1, sizeof *id);
	struct timeval second = { 1, 0 };

	if (!id)
		return NULL;
	id->s = s;
	id->tick = event_new(s->base, -1, EV_PERSIST, on_tick, id);
	if (!id->tick) {
		free(id);
		return NULL;
	}
	event_add(id->tick, &second);
	return id;
}

void idle_free(struct idle *id)
{
	if (!id)
		return;
	event_free(id->tick);
	free(id);
}
