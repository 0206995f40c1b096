/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_batch: see store_batch.h.
 *
 * Design: the staged puts are an array; the first one staged activates
 * the batch's event, which libevent runs after the events already active
 * in this turn of the loop (every connection found readable with it), so
 * the puts of all the clients that were ready share the commit. The
 * event's run takes the array (puts staged by the answers start the next
 * batch), writes them between store_batch_begin() and
 * store_batch_commit(), and answers each. One put alone is a plain
 * store_put(): no savepoint for nothing. The batch is as large as what
 * one turn of the loop read, which the connections' own read bounds
 * bound.
 */
#include "daemon/store_batch.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/log.h"

struct staged {
	unsigned char key[32];
	struct store_entry e;
	put_done_fn done;
	void *arg;
	int rc;
	struct buf err;
};

struct put_batch {
	struct store *store;
	struct event *ev;
	struct staged *v;
	size_t n, cap;
	int64_t commits;
};

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	put_batch_flush(arg);
}

struct put_batch *put_batch_new(struct event_base *base, struct store *store)
{
	struct put_batch *b = calloc(1, sizeof *b);

	if (!b)
		return NULL;
	b->store = store;
	b->ev = event_new(base, -1, 0, on_ready, b);
	if (!b->ev) {
		free(b);
		return NULL;
	}
	return b;
}

int put_batch_add(struct put_batch *b, const unsigned char key[32],
		  const struct store_entry *e, put_done_fn done, void *arg)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		struct staged *v = realloc(b->v, cap * sizeof *v);
		if (!v)
			return -1;
		b->v = v;
		b->cap = cap;
	}
	struct staged *p = &b->v[b->n++];
	memcpy(p->key, key, 32);
	p->e = *e;
	p->done = done;
	p->arg = arg;
	p->rc = -1;
	p->err = (struct buf)BUF_INIT;
	if (b->n == 1)
		event_active(b->ev, EV_TIMEOUT, 0);
	return 0;
}

void put_batch_flush(struct put_batch *b)
{
	if (!b || !b->n)
		return;
	struct staged *v = b->v;
	size_t n = b->n;
	b->v = NULL;
	b->n = b->cap = 0;
	event_del(b->ev);       /* flushed now: no run left for these */

	int together = n > 1 && store_batch_begin(b->store) == 0;
	if (together) {
		struct buf err = BUF_INIT;
		for (size_t i = 0; i < n; i++)
			v[i].rc = store_put(b->store, v[i].key, &v[i].e, &v[i].err);
		if (store_batch_commit(b->store, &err) < 0) {
			/* None of them is stored: each alone, as if no batch. */
			log_warn("%s; storing %zu entries one by one", err.data ? err.data :
				 "cannot commit a batch of puts", n);
			together = 0;
		} else {
			b->commits++;
		}
		buf_free(&err);
	}
	for (size_t i = 0; !together && i < n; i++) {
		buf_reset(&v[i].err);
		v[i].rc = store_put(b->store, v[i].key, &v[i].e, &v[i].err);
		b->commits += v[i].rc == 0;
	}
	for (size_t i = 0; i < n; i++) {
		v[i].done(v[i].arg, v[i].rc == 0, v[i].err.data ? v[i].err.data :
			  "cannot store the value");
		buf_free(&v[i].err);
	}
	free(v);
}

int64_t put_batch_commits(const struct put_batch *b)
{
	return b->commits;
}

void put_batch_free(struct put_batch *b)
{
	if (!b)
		return;
	put_batch_flush(b);
	event_free(b->ev);
	free(b->v);
	free(b);
}
