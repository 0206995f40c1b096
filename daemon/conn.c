/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn: the master's client connections and their frames.
 *
 * A connection is a state machine (enum conn_state) on a bufferevent of
 * the server's loop. It reads frames whole, the header checked against
 * the size limits before any allocation, and hands each to the server's
 * frame handler (s->on_frame: the request table, server.c); several
 * requests may be in flight on one connection, and replies carry their
 * request's id. Replies go out at once where the socket takes them
 * (conn_write_now()); a client that lets more than max-output pile up is
 * closed. One timer per connection bounds a frame's arrival and the time
 * it may idle.
 *
 * A connection that closes while requests wait keeps its struct alive
 * until its last waiter is answered (refcount), so no callback ever
 * touches freed memory; whoever keeps state per connection hears of the
 * close through the hooks registered with conn_on_close() (flight.c's
 * queued jobs, artifact.c's leases and waits). This file calls no request
 * family, no flight and no part of the server above it: only the pointers
 * server.c set at start (on_frame, on_quiet, the close hooks).
 */
#include "daemon/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/master.h"
#include "proto/frame.h"
#include "proto/msg.h"

/* ---- state, peers, references --------------------------------------- */

static const char *const state_names[] = { "reading", "closing", "closed" };

static void conn_set_state(struct conn *c, enum conn_state s)
{
	log_debug("conn %llu: %s -> %s", (unsigned long long)c->serial,
		  state_names[c->state], state_names[s]);
	c->state = s;
}

static struct peer *peer_get(struct server *s, int64_t tenant, uid_t uid)
{
	struct peer *p;

	for (p = s->peers; p; p = p->next)
		if (p->uid == uid && p->tenant == tenant)
			return p;
	p = calloc(1, sizeof *p);
	if (p) {
		p->uid = uid;
		p->tenant = tenant;
		p->next = s->peers;
		s->peers = p;
	}
	return p;
}

/* Forget a peer that holds nothing any more. */
void peer_put(struct server *s, struct peer *p)
{
	if (!p || p->conns || p->jobs)
		return;
	struct peer **pp = &s->peers;
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	free(p);
}

void conn_unref(struct conn *c)
{
	if (--c->refs == 0) {
		free(c->groups);
		free(c);
	}
}

void conn_hold(struct conn *c)
{
	c->refs++;
	c->waiting++;
	conn_arm(c);
}

void conn_unhold(struct conn *c)
{
	c->waiting--;
	conn_arm(c);
	conn_unref(c);
}

int conn_on_close(struct server *s, void (*fn)(void *arg, struct conn *c), void *arg)
{
	if (s->nclose_hooks == CONN_CLOSE_HOOKS)
		return -1;
	s->close_hooks[s->nclose_hooks++] = (struct conn_close_hook){ fn, arg };
	return 0;
}

void conn_close(struct conn *c)
{
	if (c->state == CONN_CLOSED)
		return;
	conn_set_state(c, CONN_CLOSED);
	bufferevent_free(c->bev);
	c->bev = NULL;
	if (c->timer)
		event_free(c->timer);
	c->timer = NULL;
	c->srv->nconns--;
	if (c->prev)
		c->prev->next = c->next;
	else
		c->srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->peer) {
		c->peer->conns--;
		peer_put(c->srv, c->peer);
		c->peer = NULL;
	}
	for (int i = 0; i < c->srv->nclose_hooks; i++)
		c->srv->close_hooks[i].fn(c->srv->close_hooks[i].arg, c);
	conn_unref(c);
}

/*
 * One timer per connection: while a frame is partly read, it must arrive
 * whole within header_timeout (slowloris); while nothing is in flight and
 * nothing is partly read, the connection may idle for idle_timeout; while
 * the connection waits on compiles, no timer runs.
 */
void conn_arm(struct conn *c)
{
	struct server_config *cfg = c->srv->cfg;

	if (c->state != CONN_READING || !c->timer)
		return;
	int want = c->partial ? TIMER_HEADER : c->waiting == 0 ? TIMER_IDLE : TIMER_NONE;
	/* A frame's deadline counts from its first byte, not its latest. */
	if (want == TIMER_HEADER && c->timer_mode == TIMER_HEADER)
		return;
	evtimer_del(c->timer);
	c->timer_mode = want;
	if (want != TIMER_NONE) {
		struct timeval tv = { want == TIMER_HEADER ? cfg->header_timeout_s
							   : cfg->idle_timeout_s, 0 };
		evtimer_add(c->timer, &tv);
	}
}

/* ---- writing: replies, errors, progress ----------------------------- */

/* Write p[0..n) to c. With nothing queued before it, now: bufferevent_write()
 * would copy it, turn EPOLLOUT on and send it on the next loop iterations,
 * 16 KB each, then turn EPOLLOUT off again (bench/NOTES.md). Only what the
 * socket does not take is queued; errors are left to the bufferevent, which
 * sees them on its own write. -1 if the rest cannot be queued. */
static int conn_write_now(struct conn *c, const void *p, size_t n)
{
	size_t off = 0;

	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
		ssize_t w = send(bufferevent_getfd(c->bev), p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w > 0)
			off = (size_t)w;
	}
	return off < n ? bufferevent_write(c->bev, (const char *)p + off, n - off) : 0;
}

/* Queue a finished frame from out on c (dropped if c has gone). */
void conn_send(struct conn *c, const struct buf *out)
{
	if (c->state == CONN_CLOSED)
		return;
	struct evbuffer *o = bufferevent_get_output(c->bev);
	if (evbuffer_get_length(o) + out->len > (size_t)c->srv->cfg->max_output) {
		/* A reader this slow would make us hold unbounded memory. */
		c->srv->n.output_overflows++;
		log_warn("conn %llu: client does not read its replies (%zu bytes queued); closing",
			 (unsigned long long)c->serial, evbuffer_get_length(o));
		conn_close(c);
		return;
	}
	if (conn_write_now(c, out->data, out->len) < 0) {
		log_warn("conn %llu: cannot queue reply; closing",
			 (unsigned long long)c->serial);
		conn_close(c);
	}
}

/* A progress frame, only where nothing else is queued (a reply on its way
 * says enough): it never closes the connection, since the request walks
 * that call it must go on. */
void conn_send_progress(struct conn *c, uint64_t id, const char *state)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	if (c->state != CONN_READING ||
	    evbuffer_get_length(bufferevent_get_output(c->bev)) != 0)
		return;
	msg_begin(&w, &b, FRAME_PROGRESS);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_str(&w, "state", state);
	if (msg_end(&w) == 0 && conn_write_now(c, b.data, b.len) < 0)
		shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
	buf_free(&b);
}

/* Answer request id with an error frame. */
void conn_send_error(struct conn *c, uint64_t id, const char *code,
		     const char *message)
{
	struct buf out = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &out, FRAME_ERROR);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_str(&w, "code", code);
	msg_put_str(&w, "message", message);
	if (msg_end(&w) == 0)
		conn_send(c, &out);
	buf_free(&out);
}

/* Send an error frame, then close once it is sent. */
void conn_refuse(struct conn *c, const char *code, const char *message)
{
	conn_send_error(c, 0, code, message);
	if (c->state == CONN_READING) {
		conn_set_state(c, CONN_CLOSING);
		bufferevent_disable(c->bev, EV_READ);
		if (c->timer)
			evtimer_del(c->timer);
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
			conn_close(c);
	}
}

/* A frame that cannot be understood: say why, then close. */
void conn_protocol_error(struct conn *c, const char *message)
{
	c->srv->n.protocol_errors++;
	log_info("conn %llu: %s", (unsigned long long)c->serial, message);
	conn_refuse(c, "protocol", message);
}

/* Bounded text field of a request body: 0 ok, -1 with why set. */
int request_text_field(const struct msg *m, const char *name, size_t max,
		       char **out, const char **why)
{
	int r = msg_strdup(m, name, out);
	if (r < 0 || (*out && strlen(*out) > max) ||
	    (*out && strpbrk(*out, "\n\r"))) {
		*why = name;
		return -1;
	}
	return 0;
}

/* ---- reading, timers ------------------------------------------------ */

/*
 * libevent 2.1 reads a socket 4 KB per loop iteration (EVBUFFER_MAX_READ),
 * each costing epoll_wait, FIONREAD and readv: a 1 MB request took 256
 * iterations (bench/NOTES.md). Once a header has said how long its frame
 * is, read what the socket holds of the rest straight into the input
 * buffer, at most READ_REST_CHUNK at a time and never beyond the frame, so
 * nothing is allocated far ahead of what the client has sent.
 */
#define READ_REST_CHUNK (256 * 1024)
static void read_rest(struct bufferevent *bev, struct evbuffer *in, size_t need)
{
	evutil_socket_t fd = bufferevent_getfd(bev);
	size_t have = evbuffer_get_length(in);

	/* The bufferevent keeps the end of its input frozen outside its own
	 * reads; thaw it as bufferevent_readcb() does around evbuffer_read(). */
	evbuffer_unfreeze(in, 0);
	while (have < need) {
		struct evbuffer_iovec v;
		size_t want = need - have < READ_REST_CHUNK ? need - have : READ_REST_CHUNK;
		if (evbuffer_reserve_space(in, (ev_ssize_t)want, &v, 1) < 1)
			break;
		ssize_t r = recv(fd, v.iov_base, want, MSG_DONTWAIT);
		if (r <= 0)
			break; /* EAGAIN, EOF, errors: the bufferevent sees them */
		v.iov_len = (size_t)r;
		if (evbuffer_commit_space(in, &v, 1) < 0)
			break;
		have += (size_t)r;
	}
	evbuffer_freeze(in, 0);
}

/* The largest frame any request may be: an artifact put may carry a value
 * of artifact-max-value, whatever max-request says. */
static uint32_t max_frame_of(const struct server_config *cfg)
{
	int64_t put = cfg->artifact_max_value + (64 << 10);
	int64_t m = cfg->max_frame > put ? cfg->max_frame : put;
	return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

static void on_conn_read(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	/* Hold a reference: a handler may close the connection. */
	c->refs++;
	while (c->state == CONN_READING) {
		unsigned char hdr[FRAME_HDR_LEN];
		struct frame_hdr h;
		struct buf err = BUF_INIT;
		ev_ssize_t got = evbuffer_copyout(in, hdr, sizeof hdr);
		int r = frame_parse_hdr(hdr, got < 0 ? 0 : (size_t)got,
					max_frame_of(c->srv->cfg), &h, &err);
		if (r > 0 && h.type != FRAME_ARTIFACT_PUT && h.len > c->srv->cfg->max_frame) {
			buf_printf(&err, "frame of %u bytes is over the limit of %lld",
				   (unsigned)h.len, (long long)c->srv->cfg->max_frame);
			r = -1;
		}
		if (r < 0) {
			conn_protocol_error(c, err.data);
			buf_free(&err);
			break;
		}
		if (r == 0)
			break;
		if (evbuffer_get_length(in) < FRAME_HDR_LEN + (size_t)h.len)
			read_rest(bev, in, FRAME_HDR_LEN + (size_t)h.len);
		if (evbuffer_get_length(in) < FRAME_HDR_LEN + (size_t)h.len)
			break;
		unsigned char *all = evbuffer_pullup(in, FRAME_HDR_LEN + (ev_ssize_t)h.len);
		if (!all) {
			conn_protocol_error(c, "out of memory reading the request");
			break;
		}
		/* A whole frame: the next one gets a deadline of its own. */
		c->partial = 0;
		c->timer_mode = TIMER_NONE;
		c->srv->on_frame(c, h.type, all + FRAME_HDR_LEN, h.len);
		if (c->state != CONN_CLOSED)
			evbuffer_drain(in, FRAME_HDR_LEN + h.len);
	}
	if (c->state == CONN_READING) {
		c->partial = evbuffer_get_length(in) > 0;
		conn_arm(c);
	}
	conn_unref(c);
}

static void on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	if (c->partial) {
		c->srv->n.header_timeouts++;
		log_info("conn %llu: request not complete after %d s; closing",
			 (unsigned long long)c->serial, c->srv->cfg->header_timeout_s);
		conn_refuse(c, "timeout", "request did not arrive in time");
	} else {
		c->srv->n.idle_timeouts++;
		log_debug("conn %llu: idle; closing", (unsigned long long)c->serial);
		conn_close(c);
	}
}

static void on_conn_write(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct server *s = c->srv;

	if (c->state == CONN_CLOSING)
		conn_close(c);
	server_maybe_stop(s);
}

static void on_conn_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;

	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_close(c);
}

/* ---- the peer's credentials ----------------------------------------- */

void conn_who(const struct conn *c, char *out, size_t n)
{
	if (c->tenant.id == 0)
		snprintf(out, n, "uid %u", (unsigned)c->uid);
	else
		snprintf(out, n, "uid %u of tenant '%s'", (unsigned)c->uid, c->tenant.name);
}

int conn_groups(struct conn *c)
{
	socklen_t len = 0;
	int fd = c->bev ? bufferevent_getfd(c->bev) : -1;

	if (c->groups_read)
		return c->ngroups;
	c->groups_read = 1;
	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, NULL, &len) == 0 ||
	    errno != ERANGE || !(c->groups = malloc(len)))
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, c->groups, &len) == 0)
		c->ngroups = (int)(len / sizeof *c->groups);
	return c->ngroups;
}

/* ---- a new connection ----------------------------------------------- */

struct conn *conn_new(struct server *s, int fd, const struct tenant *t)
{
	struct conn *c = calloc(1, sizeof *c);
	struct ucred cr = { 0 };
	socklen_t crlen = sizeof cr;

	if (!c) {
		close(fd);
		return NULL;
	}
	c->srv = s;
	c->refs = 1;
	c->tenant = *t;
	c->serial = ++s->next_serial;
	c->state = CONN_READING;
	c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->timer = evtimer_new(s->base, on_conn_timer, c);
	if (!c->bev || !c->timer ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0) {
		if (c->bev)
			bufferevent_free(c->bev);
		else
			close(fd);
		if (c->timer)
			event_free(c->timer);
		free(c);
		return NULL;
	}
	s->n.connections++;
	s->nconns++;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	c->uid = cr.uid;
	c->gid = cr.gid;
	c->pid = cr.pid;
	log_debug("conn %llu: uid %u pid %d tenant '%s'", (unsigned long long)c->serial,
		  (unsigned)cr.uid, (int)cr.pid, c->tenant.name);
	c->peer = peer_get(s, c->tenant.id, cr.uid);
	if (c->peer)
		c->peer->conns++;
	/* What the socket did not take at once goes out as fast as it drains. */
	bufferevent_set_max_single_write(c->bev, 1 << 20);
	bufferevent_setcb(c->bev, on_conn_read, on_conn_write, on_conn_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	return c;
}
