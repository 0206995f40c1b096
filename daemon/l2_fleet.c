/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_fleet: a key produced once in the fleet; see l2_fleet.h for the contract.
 *
 * One struct fleet_wait per key a family asks for, stepping through:
 *
 *   ASK     l2_get_in(): the value answers; a miss goes on to CLAIM (or
 *           answers FLEET_MISS if the caller would not produce);
 *   CLAIM   l2_claim_in(TAKE): won, it asks once more (a value written
 *           between its lookup and its claim answers, and the lease goes),
 *           then answers FLEET_PRODUCE and renews the lease every third of
 *           its lifetime until fleet_end();
 *           failed (the tier unreachable), FLEET_PRODUCE on its own; held,
 *   WAIT    a timer (100 ms, doubling up to 1 s, never past the wait's
 *           bound), then ASK again. A lease that lapsed is taken over by
 *           the next CLAIM; at the bound, FLEET_PRODUCE on its own.
 *
 * Why so:
 *  - Waiting asks the value first, then the lease: a producer that
 *    published leaves its lease to lapse (fleet_end(w, 1)), so a waiter
 *    that finds no lease but no value either is one whose producer gave
 *    up, and takes over at once.
 *  - The callback never runs inside fleet_get(): a caller stores the
 *    handle first. A wait holds a reference for its caller (dropped by
 *    fleet_end()), one for the l2 call it has out, and one while it calls
 *    back, so the caller may end it from inside its callback.
 *  - l2_free() calls nothing back: fleet_free() frees what is left.
 */
#include "daemon/l2_fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "daemon/l2.h"

#define POLL_FIRST_MS 100
#define POLL_MAX_MS 1000

struct fleet {
	struct event_base *base;
	struct l2 **l2;
	int64_t lease_ms;
	struct fleet_wait *all;
	struct fleet_counters n;
};

struct fleet_wait {
	struct fleet *f;
	struct fleet_wait *prev, *next;
	char space[L2_SPACE_MAX + 1];
	unsigned char key[32];
	int produce;
	int64_t deadline_us;
	int64_t poll_ms;
	fleet_cb cb;
	void *arg;
	struct event *timer;            /* the start, a poll, or a renewal */
	int refs;
	int ended;                      /* fleet_end() was called */
	int holding;                    /* this node holds the key's lease */
	int waited;                     /* found another node's lease */
	struct l2 *l2;                  /* the tier its lease is in */
	struct l2 *asked;               /* the tier a lookup of it is out in */
};

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void arm(struct fleet_wait *w, int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000 * 1000) };

	evtimer_add(w->timer, &tv);
}

static void wait_free(struct fleet_wait *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		w->f->all = w->next;
	if (w->next)
		w->next->prev = w->prev;
	event_free(w->timer);
	free(w);
}

static void unref(struct fleet_wait *w)
{
	if (--w->refs == 0)
		wait_free(w);
}

static void answer(struct fleet_wait *w, enum fleet_answer a, const struct l2_value *v)
{
	w->refs++;
	w->cb(w->arg, a, v);
	unref(w);
}

static void on_claimed(void *arg, enum l2_claim result);
static void on_checked(void *arg, int found, const struct l2_value *v);

static void on_got(void *arg, int found, const struct l2_value *v)
{
	struct fleet_wait *w = arg;
	struct l2 *l2 = *w->f->l2;

	w->asked = NULL;
	if (w->ended) {
		unref(w);
		return;
	}
	if (found) {
		if (w->waited)
			w->f->n.wait_hits++;
		answer(w, FLEET_VALUE, v);
	} else if (!w->produce) {
		answer(w, FLEET_MISS, NULL);
	} else if (!l2 || w->f->lease_ms <= 0) {
		answer(w, FLEET_PRODUCE, NULL);
	} else {
		w->refs++;              /* the claim's */
		w->l2 = l2;
		l2_claim_in(l2, w->space, w->key, L2_CLAIM_TAKE, w->f->lease_ms, on_claimed, w);
	}
	unref(w);
}

static void ask(struct fleet_wait *w)
{
	struct l2 *l2 = *w->f->l2;

	if (!l2) {
		answer(w, w->produce ? FLEET_PRODUCE : FLEET_MISS, NULL);
		return;
	}
	w->refs++;                      /* the lookup's */
	w->asked = l2;
	l2_get_in(l2, w->space, w->key, on_got, w);
}

static void on_claimed(void *arg, enum l2_claim result)
{
	struct fleet_wait *w = arg;
	int64_t left_ms = (w->deadline_us - now_us()) / 1000;

	if (w->ended) {
		if (result == L2_CLAIM_WON && *w->f->l2 == w->l2)
			l2_claim_in(w->l2, w->space, w->key, L2_CLAIM_DROP, 0, NULL, NULL);
		unref(w);
		return;
	}
	switch (result) {
	case L2_CLAIM_WON:
		/* A value written between our lookup and our claim (its writer
		 * dropped the lease it held once the value was in): ask again
		 * before producing it a second time. */
		w->holding = 1;
		w->refs++;
		w->asked = w->l2;
		l2_get_in(w->l2, w->space, w->key, on_checked, w);
		break;
	case L2_CLAIM_FAILED:
		w->f->n.alone++;
		answer(w, FLEET_PRODUCE, NULL);
		break;
	case L2_CLAIM_HELD:
		if (!w->waited)
			w->f->n.waits++;
		w->waited = 1;
		if (left_ms <= 0) {
			w->f->n.wait_timeouts++;
			answer(w, FLEET_PRODUCE, NULL);
			break;
		}
		arm(w, w->poll_ms < left_ms ? w->poll_ms : left_ms);
		w->poll_ms = w->poll_ms * 2 > POLL_MAX_MS ? POLL_MAX_MS : w->poll_ms * 2;
		break;
	}
	unref(w);
}

/* The lookup again, once the lease is ours: the value after all (then
 * the lease goes at once), or this node's turn to produce. */
static void on_checked(void *arg, int found, const struct l2_value *v)
{
	struct fleet_wait *w = arg;

	w->asked = NULL;
	if (w->ended) {
		unref(w);
		return;
	}
	if (found) {
		w->holding = 0;
		if (*w->f->l2 == w->l2)
			l2_claim_in(w->l2, w->space, w->key, L2_CLAIM_DROP, 0, NULL, NULL);
		if (w->waited)
			w->f->n.wait_hits++;
		answer(w, FLEET_VALUE, v);
	} else {
		if (w->waited)
			w->f->n.takeovers++;
		else
			w->f->n.leases++;
		arm(w, w->f->lease_ms / 3);
		answer(w, FLEET_PRODUCE, NULL);
	}
	unref(w);
}

/* The timer: the first lookup, a poll, or (holding) a renewal. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct fleet_wait *w = arg;

	if (!w->holding) {
		ask(w);
		return;
	}
	if (*w->f->l2 == w->l2)
		l2_claim_in(w->l2, w->space, w->key, L2_CLAIM_RENEW, w->f->lease_ms, NULL, NULL);
	arm(w, w->f->lease_ms / 3);
}

struct fleet_wait *fleet_get(struct fleet *f, const char *space, const unsigned char key[32],
			     int produce, int64_t wait_ms, fleet_cb cb, void *arg)
{
	struct fleet_wait *w = calloc(1, sizeof *w);

	if (!w || !(w->timer = evtimer_new(f->base, on_timer, w))) {
		free(w);
		return NULL;
	}
	w->f = f;
	snprintf(w->space, sizeof w->space, "%s", space ? space : "");
	memcpy(w->key, key, 32);
	w->produce = produce;
	w->deadline_us = now_us() + wait_ms * 1000;
	w->poll_ms = POLL_FIRST_MS;
	w->cb = cb;
	w->arg = arg;
	w->refs = 1;                    /* the caller's, until fleet_end() */
	w->next = f->all;
	if (f->all)
		f->all->prev = w;
	f->all = w;
	arm(w, 0);                      /* from the loop, never from here */
	return w;
}

void fleet_end(struct fleet_wait *w, int published)
{
	if (!w)
		return;
	w->ended = 1;
	evtimer_del(w->timer);
	/* A lookup still out fetches a value nobody waits for: stop it (a
	 * tier replaced by a reload since is not this one's). */
	if (w->asked && *w->f->l2 == w->asked)
		l2_get_abandon(w->asked, w);
	if (w->holding && !published && *w->f->l2 == w->l2)
		l2_claim_in(w->l2, w->space, w->key, L2_CLAIM_DROP, 0, NULL, NULL);
	w->holding = 0;
	unref(w);
}

struct fleet *fleet_new(struct event_base *base, struct l2 **l2, int64_t lease_ms)
{
	struct fleet *f = calloc(1, sizeof *f);

	if (!f)
		return NULL;
	f->base = base;
	f->l2 = l2;
	f->lease_ms = lease_ms;
	return f;
}

void fleet_set_lease_ms(struct fleet *f, int64_t lease_ms)
{
	f->lease_ms = lease_ms;
}

void fleet_free(struct fleet *f)
{
	if (!f)
		return;
	while (f->all)
		wait_free(f->all);
	free(f);
}

void fleet_counters(const struct fleet *f, struct fleet_counters *c)
{
	*c = f->n;
}
