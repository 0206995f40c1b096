/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_ev: hiredis on the master's libevent loop, for l2_conn.c: our own
 * adapter (hiredis's libevent.h, plus what a connection's timers need:
 * its progress, its kernel queues) and the guard on the replies hiredis
 * parses. ev_attach() hooks a connection to the loop; progress_of(),
 * outq_of() and inq_of() tell on_cmd_timeout() whether the connection
 * has been silent. A reply larger than any may be ends its connection
 * through the hook l2_conn.c gave ev_attach(), the one way this file
 * reaches the layer above.
 *
 * Never: believe a reply's header (a count, a length) past the bounds
 * below; touch a connection, or its adapter, that hiredis freed in a
 * callback.
 */
#include "daemon/l2_ev.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>

#include <event2/event.h>

#include "daemon/l2_int.h"

/* Our own libevent adapter for hiredis (its libevent.h, plus a progress
 * count): a command's timer bounds its connection's silence, not its size,
 * so each connection counts the read events it gets (bytes or a reply in)
 * and the writes that shrank hiredis's output buffer (bytes out). */
struct l2_ev {
	redisAsyncContext *ac;
	struct event *rev, *wev;
	uint64_t progress;
	int *alive;                     /* cleared when hiredis frees ac */
	long objs;                      /* of the reply being parsed (guarded_*()) */
	size_t bytes;                   /* its strings' */
	void (*too_long)(redisAsyncContext *ac);        /* ev_attach()'s */
};

/*
 * hiredis 0.14 takes a reply's headers on trust: "*N" allocates N
 * pointers at once (13 bytes, "*2000000000", made it allocate 16 GB and
 * then hold the loop 40 s freeing them), "$N" buffers until N bytes came,
 * and an array keeps every string it parsed until its last. Redis is not
 * trusted: a reply of more than L2_REPLY_OBJS objects and element slots
 * (CLUSTER SLOTS of 16,384 ranges with a replica each is a third of it),
 * or whose strings, or bytes not parsed yet, pass L2_REPLY_BYTES (the
 * largest chunk a writer may make, and framing), ends its connection, as
 * one that broke.
 */
#define L2_REPLY_OBJS (1L << 20)
#define L2_REPLY_BYTES ((size_t)L2_CHUNK_MAX + (64 << 10))

static redisReplyObjectFunctions plain_fns, guarded_fns;

/* Count n more objects and len more bytes of t's reply: whether it stays
 * within the bounds, and, at a reply's first object, whether a command
 * waits for it. hiredis 0.14 asserts that a reply no command waits for (a
 * "+OK" after the answer, on an idle connection) is a subscriber's, and
 * aborts the daemon; refused here, it ends the connection instead. */
static int guarded_take(const redisReadTask *t, long n, size_t len)
{
	struct l2_ev *e = t->privdata;

	if (!t->parent) {
		if (!e->ac->replies.head)
			return 0;
		e->objs = 0;
		e->bytes = 0;
	}
	e->objs += n;
	e->bytes += len;
	return e->objs <= L2_REPLY_OBJS && e->bytes <= L2_REPLY_BYTES;
}

static void *guarded_string(const redisReadTask *t, char *s, size_t len)
{
	return guarded_take(t, 1, len) ? plain_fns.createString(t, s, len) : NULL;
}

static void *guarded_array(const redisReadTask *t, int n)
{
	return guarded_take(t, 1 + (long)n, 0) ? plain_fns.createArray(t, n) : NULL;
}

static void *guarded_integer(const redisReadTask *t, long long v)
{
	return guarded_take(t, 1, 0) ? plain_fns.createInteger(t, v) : NULL;
}

static void *guarded_nil(const redisReadTask *t)
{
	return guarded_take(t, 1, 0) ? plain_fns.createNil(t) : NULL;
}

/* ac's reader made to count for e (a NULL object: hiredis's "out of
 * memory", which ends the connection). */
static void reader_guard(redisAsyncContext *ac, struct l2_ev *e)
{
	redisReader *r = ac->c.reader;

	if (!r || !r->fn)
		return;
	if (!guarded_fns.createArray) {
		plain_fns = *r->fn;
		guarded_fns = plain_fns;
		guarded_fns.createString = guarded_string;
		guarded_fns.createArray = guarded_array;
		guarded_fns.createInteger = guarded_integer;
		guarded_fns.createNil = guarded_nil;
	}
	r->fn = &guarded_fns;
	r->privdata = e;
}

/* Whether ac's reader holds more of a reply, not parsed yet, than one may
 * have. */
static int reply_too_long(const redisAsyncContext *ac)
{
	const redisReader *r = ac->c.reader;

	return r && r->buf && sdslen(r->buf) - r->pos > L2_REPLY_BYTES;
}

/* hiredis reads 16 KiB a call: while more has arrived, read on, up to
 * L2_READ_TURN bytes an event, so a large reply takes a few turns of the
 * loop rather than one per 16 KiB (and the other lookups on the loop
 * still get their turn between). */
#define L2_READ_TURN (1 << 20)
#define L2_HIREDIS_READ (16 << 10)

static void ev_read(evutil_socket_t fd, short what, void *arg)
{
	struct l2_ev *e = arg;
	redisAsyncContext *ac = e->ac;
	int alive = 1, avail;

	e->progress++;                  /* before: the read may free e */
	e->alive = &alive;
	for (size_t n = 0; n < L2_READ_TURN; n += L2_HIREDIS_READ) {
		redisAsyncHandleRead(ac);       /* may free ac, and e */
		if (!alive)
			return;
		if (reply_too_long(ac)) {
			e->too_long(ac);        /* frees ac, and e */
			return;
		}
		if ((ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) ||
		    ioctl(fd, FIONREAD, &avail) < 0 || avail <= 0)
			break;
	}
	e->alive = NULL;
}

static void ev_write(evutil_socket_t fd, short what, void *arg)
{
	struct l2_ev *e = arg;
	redisAsyncContext *ac = e->ac;
	size_t before = ac->c.obuf ? sdslen(ac->c.obuf) : 0;
	int alive = 1;

	e->alive = &alive;
	redisAsyncHandleWrite(ac);      /* a failed write frees ac, and e */
	if (!alive)
		return;
	e->alive = NULL;
	if (ac->c.obuf && sdslen(ac->c.obuf) < before)
		e->progress++;
}

static void ev_add_read(void *p)  { event_add(((struct l2_ev *)p)->rev, NULL); }
static void ev_del_read(void *p)  { event_del(((struct l2_ev *)p)->rev); }
static void ev_add_write(void *p) { event_add(((struct l2_ev *)p)->wev, NULL); }
static void ev_del_write(void *p) { event_del(((struct l2_ev *)p)->wev); }

static void ev_cleanup(void *p)
{
	struct l2_ev *e = p;

	if (e->alive)
		*e->alive = 0;
	event_free(e->rev);
	event_free(e->wev);
	free(e);
}

int ev_attach(redisAsyncContext *ac, struct event_base *base,
	      void (*too_long)(redisAsyncContext *ac))
{
	struct l2_ev *e = calloc(1, sizeof *e);

	if (!e || ac->ev.data)
		goto fail;
	e->ac = ac;
	e->too_long = too_long;
	e->rev = event_new(base, ac->c.fd, EV_READ | EV_PERSIST, ev_read, e);
	e->wev = event_new(base, ac->c.fd, EV_WRITE, ev_write, e);
	if (!e->rev || !e->wev)
		goto fail;
	ac->ev.addRead = ev_add_read;
	ac->ev.delRead = ev_del_read;
	ac->ev.addWrite = ev_add_write;
	ac->ev.delWrite = ev_del_write;
	ac->ev.cleanup = ev_cleanup;
	ac->ev.data = e;
	reader_guard(ac, e);
	event_add(e->rev, NULL);
	event_add(e->wev, NULL);
	return 0;
fail:
	if (e && e->rev)
		event_free(e->rev);
	if (e && e->wev)
		event_free(e->wev);
	free(e);
	return -1;
}

uint64_t progress_of(const redisAsyncContext *ac)
{
	const struct l2_ev *e = ac ? ac->ev.data : NULL;

	return e ? e->progress : 0;
}

/* The bytes in ac's kernel send queue not yet taken by the other end
 * (TIOCOUTQ, for TCP and Unix sockets alike), or -1. A large write sits
 * there for a while after hiredis's buffer has shrunk: the queue draining
 * is progress too. */
int outq_of(const redisAsyncContext *ac)
{
	int n = 0;

	return ac && ac->c.fd >= 0 && ioctl(ac->c.fd, TIOCOUTQ, &n) == 0 ? n : -1;
}

/* Bytes that came in on ac and wait to be read (FIONREAD), or 0: the
 * other end spoke, and this loop has not got to them yet. */
int inq_of(const redisAsyncContext *ac)
{
	int n = 0;

	return ac && ac->c.fd >= 0 && ioctl(ac->c.fd, FIONREAD, &n) == 0 ? n : 0;
}
