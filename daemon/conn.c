/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn: the master's client connections and their frames.
 *
 * A connection is a state machine (enum conn_state) on the server's
 * loop: a read event of its own and a bufferevent for its output. It
 * reads frames whole into its own buffer (on_conn_readable()), the header
 * checked against the size limits before any allocation, and hands each,
 * where it lies, to the server's frame handler (s->on_frame: the request
 * table, server.c); several requests may be in flight on one connection,
 * and replies carry their request's id. A large frame whose last field is
 * a large bin (an artifact put's value) is spooled instead: its head
 * handed up first (s->on_frame_head), its field's bytes then fed, a piece
 * at a time, to the sink its request gave (struct frame_sink: a blob
 * file), never whole in memory ("reading" below). Replies go out at once
 * where the socket takes them, a blob from where it lies
 * (conn_write_now()); a client that lets more than max-output pile up is
 * closed. One timer per connection bounds a frame's arrival (spooled or
 * not), the time it may idle, and a refused one's reading of its error.
 *
 * A connection that closes while requests wait keeps its struct alive
 * until its last waiter is answered (refcount), so no callback ever
 * touches freed memory; whoever keeps state per connection hears of the
 * close through the hooks registered with conn_on_close() (flight.c's
 * queued jobs, artifact.c's leases and waits). This file calls no request
 * family, no flight and no part of the server above it: only the pointers
 * server.c set at start (on_frame, on_frame_head, on_quiet, the close
 * hooks), and the sinks a request handed it.
 */
#include "daemon/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/master.h"
#include "proto/frame.h"
#include "proto/msg.h"

/* ---- state, peers, references --------------------------------------- */

static void tail_drop(struct conn *c);

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
		buf_free(&c->after);
		buf_free(&c->in);
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

void conn_pause(struct conn *c)
{
	if (c->state == CONN_READING && !c->paused)
		event_del(c->rev);
	c->paused = 1;
}

void conn_resume(struct conn *c)
{
	if (!c->paused)
		return;
	c->paused = 0;
	if (c->state != CONN_READING)
		return;
	event_add(c->rev, NULL);
	/* Whole frames read before the pause are handed on now, whether or
	 * not more arrives. */
	if (c->in.len > c->in_off)
		event_active(c->rev, EV_READ, 0);
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
	tail_drop(c);
	event_free(c->rev);     /* before the socket it watches closes */
	c->rev = NULL;
	bufferevent_free(c->bev);
	c->bev = NULL;
	if (c->file_fd >= 0)
		close(c->file_fd);
	c->file_fd = -1;
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

/* Reply bytes the client has not taken yet: queued, or still in the file
 * they are sent from and the frames queued behind it. */
static size_t out_pending(const struct conn *c)
{
	size_t n = c->bev ? evbuffer_get_length(bufferevent_get_output(c->bev)) : 0;

	if (c->file_fd >= 0)
		n += (size_t)(c->file_end - c->file_off) + c->after.len;
	return n;
}

/*
 * One timer per connection: while a frame is partly read, it must arrive
 * whole within header_timeout (slowloris); while nothing is in flight and
 * nothing is partly read, the connection may idle for idle_timeout (a
 * reply the client is still taking, some more of it each period, is not
 * idle: on_conn_timer()); while the connection waits on compiles, no
 * timer runs. A refused connection (conn_refuse()) has header_timeout to
 * read what it was sent.
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
	c->idle_out = out_pending(c);
	if (want != TIMER_NONE) {
		struct timeval tv = { want == TIMER_HEADER ? cfg->header_timeout_s
							   : cfg->idle_timeout_s, 0 };
		evtimer_add(c->timer, &tv);
	}
}

/* ---- writing: replies, errors, progress ----------------------------- */

/* Write p[0..n), then t[0..tn), to c. With nothing queued before them,
 * now, in one sendmsg(): bufferevent_write() would copy them, turn EPOLLOUT
 * on and send them on the next loop iterations, 16 KB each, then turn
 * EPOLLOUT off again (bench/NOTES.md). Only what the socket does not take
 * is queued (copied); errors are left to the bufferevent, which sees them
 * on its own write. -1 if the rest cannot be queued. */
static int conn_write_now(struct conn *c, const void *p, size_t n, const void *t, size_t tn)
{
	size_t off = 0;

	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
		struct iovec v[2] = { { (void *)p, n }, { (void *)t, tn } };
		struct msghdr mh = { .msg_iov = v, .msg_iovlen = tn ? 2 : 1 };
		ssize_t w = sendmsg(bufferevent_getfd(c->bev), &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w > 0)
			off = (size_t)w;
	}
	if (off < n && bufferevent_write(c->bev, (const char *)p + off, n - off) < 0)
		return -1;
	off = off > n ? off - n : 0;
	return off < tn ? bufferevent_write(c->bev, (const char *)t + off, tn - off) : 0;
}

/*
 * Output from files (conn_send_file()): a value's bytes go from the page
 * cache to the socket by sendfile(), never through the daemon's memory,
 * as long as the socket takes them; once it is full, the rest goes in
 * pieces of FILE_PIECE, read into the output one at a time as the last
 * drains (on_conn_write()). (libevent's own file segments would do this,
 * but 2.1 reads sendfile()'s EAGAIN as the end of the connection.) While
 * a file is being sent, later frames wait in c->after, in order, and
 * count against max-output; the file's bytes do not.
 */
#define FILE_PIECE ((size_t)1 << 20)

static size_t conn_mem_queued(struct conn *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev)) + c->after.len;
}

/* Send what the socket takes of c's file, then a piece of it into the
 * output where the socket is full; the frames that waited behind it once
 * it is all gone. -1 if the output cannot be queued or the file read. */
static int conn_pump_file(struct conn *c)
{
	struct evbuffer *o = bufferevent_get_output(c->bev);

	while (c->file_fd >= 0 && evbuffer_get_length(o) == 0) {
		if (c->file_off < c->file_end) {
			ssize_t n = sendfile(bufferevent_getfd(c->bev), c->file_fd, &c->file_off,
					     (size_t)(c->file_end - c->file_off));
			if (n < 0 && errno == EINTR)
				continue;
			if (n > 0)
				continue;
			/* Full (or failing: the bufferevent sees that on its own
			 * write): a piece into the output, sent as it drains. */
			struct evbuffer_iovec v;
			size_t want = (size_t)(c->file_end - c->file_off);
			if (want > FILE_PIECE)
				want = FILE_PIECE;
			if (evbuffer_reserve_space(o, (ev_ssize_t)want, &v, 1) < 1)
				return -1;
			ssize_t r = pread(c->file_fd, v.iov_base, want, c->file_off);
			if (r <= 0)
				return -1;
			v.iov_len = (size_t)r;
			if (evbuffer_commit_space(o, &v, 1) < 0)
				return -1;
			c->file_off += r;
			return 0;
		}
		close(c->file_fd);
		c->file_fd = -1;
		if (c->after.len) {
			int rc = conn_write_now(c, c->after.data, c->after.len, NULL, 0);
			buf_free(&c->after);
			if (rc < 0)
				return -1;
		}
	}
	return 0;
}

/* Whether more bytes in memory would take c past max-output: then it is
 * closed (a reader this slow would make us hold unbounded memory). */
static int overflows(struct conn *c, size_t more)
{
	size_t queued = conn_mem_queued(c);

	if (queued + more <= (size_t)c->srv->cfg->max_output)
		return 0;
	c->srv->n.output_overflows++;
	log_warn("conn %llu: client does not read its replies (%zu bytes queued); closing",
		 (unsigned long long)c->serial, queued);
	conn_close(c);
	return 1;
}

/* Queue a finished frame from out, and tail bytes after it, on c (dropped
 * if c has gone). */
void conn_sendv(struct conn *c, const struct buf *out, const void *tail, size_t tail_len)
{
	if (c->state == CONN_CLOSED || overflows(c, out->len + tail_len))
		return;
	if (c->file_fd >= 0) {
		/* Behind the file being sent. */
		if (buf_append(&c->after, out->data, out->len) < 0 ||
		    buf_append(&c->after, tail ? tail : "", tail_len) < 0) {
			conn_close(c);
		}
		return;
	}
	if (conn_write_now(c, out->data, out->len, tail, tail_len) < 0) {
		log_warn("conn %llu: cannot queue reply; closing",
			 (unsigned long long)c->serial);
		conn_close(c);
	}
}

/* A file's frame (out) and its len bytes behind the file on its way, in
 * c->after: read from fd once, into their place, and counted against
 * max-output before any byte is read. */
static void send_behind(struct conn *c, const struct buf *out, int fd, size_t len)
{
	size_t got = 0;

	if (overflows(c, out->len + len))
		return;
	if (buf_append(&c->after, out->data, out->len) < 0 || buf_reserve(&c->after, len) < 0) {
		conn_close(c);
		return;
	}
	while (got < len) {
		ssize_t r = pread(fd, c->after.data + c->after.len + got, len - got, (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			log_warn("conn %llu: cannot read a value's file: %s; closing",
				 (unsigned long long)c->serial, r < 0 ? strerror(errno) : "it is short");
			conn_close(c);
			return;
		}
		got += (size_t)r;
	}
	c->after.len += len;
}

void conn_send_file(struct conn *c, const struct buf *out, int fd, size_t len)
{
	if (c->state == CONN_CLOSED || c->file_fd >= 0) {
		/* Closed, or a file already on its way: that one's frame says
		 * so before this one could, so this one goes from memory. */
		if (c->state != CONN_CLOSED)
			send_behind(c, out, fd, len);
		close(fd);
		return;
	}
	if (overflows(c, out->len)) {
		close(fd);
		return;
	}
	if (conn_write_now(c, out->data, out->len, NULL, 0) < 0) {
		close(fd);
		log_warn("conn %llu: cannot queue reply; closing", (unsigned long long)c->serial);
		conn_close(c);
		return;
	}
	c->file_fd = fd;
	c->file_off = 0;
	c->file_end = (off_t)len;
	if (conn_pump_file(c) < 0) {
		log_warn("conn %llu: cannot send a value from its file; closing",
			 (unsigned long long)c->serial);
		conn_close(c);
	}
}

/* Whether c has CONN_MAX_FDS descriptors in flight; its count starts
 * again once its client has read everything it was sent. */
static int fds_at_bound(struct conn *c)
{
	int queued;

	if (c->fds_unread < CONN_MAX_FDS)
		return 0;
	if (ioctl(bufferevent_getfd(c->bev), SIOCOUTQ, &queued) < 0 || queued > 0)
		return 1;
	c->fds_unread = 0;
	return 0;
}

int conn_send_fd(struct conn *c, const struct buf *out, int fd)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec v = { out->data, out->len };
	struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof u.b };

	/* Only where nothing is queued: the descriptor rides on the frame's
	 * first bytes, which must be the next the client reads. */
	if (c->state != CONN_READING || c->file_fd >= 0 ||
	    evbuffer_get_length(bufferevent_get_output(c->bev)) != 0 || fds_at_bound(c))
		return -1;
	memset(&u, 0, sizeof u);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	ssize_t w;
	do
		w = sendmsg(bufferevent_getfd(c->bev), &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w <= 0)
		return -1;      /* full, or ETOOMANYREFS: nothing was sent */
	c->fds_unread++;
	if ((size_t)w < out->len &&
	    bufferevent_write(c->bev, out->data + w, out->len - (size_t)w) < 0) {
		log_warn("conn %llu: cannot queue reply; closing", (unsigned long long)c->serial);
		conn_close(c);
	}
	return 0;
}

void conn_send(struct conn *c, const struct buf *out)
{
	conn_sendv(c, out, NULL, 0);
}

/* A progress frame, only where nothing else is queued (a reply on its way
 * says enough): it never closes the connection, since the request walks
 * that call it must go on. */
void conn_send_progress(struct conn *c, uint64_t id, const char *state)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	if (c->state != CONN_READING || c->file_fd >= 0 ||
	    evbuffer_get_length(bufferevent_get_output(c->bev)) != 0)
		return;
	msg_begin(&w, &b, FRAME_PROGRESS);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_str(&w, "state", state);
	if (msg_end(&w) == 0 && conn_write_now(c, b.data, b.len, NULL, 0) < 0)
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
	c->refs++;      /* the send closes c if it passes max-output */
	conn_send_error(c, 0, code, message);
	if (c->state == CONN_READING) {
		conn_set_state(c, CONN_CLOSING);
		tail_drop(c);   /* its file goes now, not once the error is sent */
		event_del(c->rev);
		if (c->timer) {
			/* What is queued, the error last, has header-timeout to
			 * be read; then the connection goes all the same. */
			struct timeval tv = { c->srv->cfg->header_timeout_s, 0 };
			evtimer_del(c->timer);
			evtimer_add(c->timer, &tv);
		}
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 && c->file_fd < 0)
			conn_close(c);
	}
	conn_unref(c);
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
 * Frames are read with recv() straight into the connection's own buffer,
 * c->in; the bufferevent is for the replies alone. libevent 2.1 would read
 * 4 KB per loop iteration, each after an ioctl(FIONREAD), and a frame
 * spread over its chains would be copied once more to be whole
 * (bench/NOTES.md): here a hit's request is one recv(), and its body is
 * handed to the server where it lies.
 *
 * Room for a frame is made once its header has said how long it is, but
 * never more than READ_AHEAD beyond what the client has sent, so a header
 * alone does not make the daemon allocate the length it claims. A buffer
 * of up to IN_KEEP stays for the connection's next frame; a larger one
 * goes once its frames are handled (compact_in()).
 *
 * Spooling: a frame of CONN_SPOOL_MIN bytes and more whose last field is a
 * bin32 running to its end (msg_tail_find(): an artifact put's value, which
 * both clients send last) is not read whole. Once its head (the fields
 * before that one, within the body's first SPOOL_HEAD_MAX bytes) has
 * arrived, the server hands it to its request (on_frame_head, a
 * request_kind's head), which checks it and gives a sink for the field's
 * bytes (conn.h's struct frame_sink: an artifact put's temporary blob
 * file), or answers at once and has them dropped. The connection then
 * reads exactly the field's length, TAIL_PIECE at a time through c->in,
 * and feeds each piece to the sink; the frame's one deadline
 * (header-timeout) still runs. A connection that closes or times out
 * meanwhile ends the sink unfinished (its file removed). A frame of
 * another shape, or whose request takes no head, is read whole as before:
 * old clients are served the old way.
 *
 * Turns: one readable event reads at most READ_TURN bytes, then the loop
 * goes round (the event, level-triggered, comes back while more waits):
 * a client sending 64 MB as fast as the socket goes would otherwise hold
 * the loop for the whole of it (24 ms here; every other client's hit
 * waited that long).
 */
#define READ_TURN (1024 * 1024)
#define FIRST_READ (64 * 1024)
#define READ_AHEAD (256 * 1024)
#define IN_KEEP (256 * 1024)
#define SPOOL_HEAD_MAX (64 * 1024)
#define TAIL_PIECE (IN_KEEP - 1)        /* c->in's room: IN_KEEP with its NUL */

/* The largest frame any request may be: an artifact put may carry a value
 * of artifact-max-value, whatever max-request says. */
static uint32_t max_frame_of(const struct server_config *cfg)
{
	int64_t put = cfg->artifact_max_value + (64 << 10);
	int64_t m = cfg->max_frame > put ? cfg->max_frame : put;
	return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

/* The spooled frame will not complete: its sink ends unfinished. */
static void tail_drop(struct conn *c)
{
	struct frame_sink *k = c->sink;

	c->sink = NULL;
	c->tail_left = 0;
	if (k)
		k->end(k, c, 0);
}

/* n more bytes of the spooled field, at p, to its sink; at its last, the
 * sink answers the request, and the next frame has a deadline of its own. */
static void tail_feed(struct conn *c, const void *p, size_t n)
{
	if (n && c->sink)
		c->sink->write(c->sink, p, n);
	c->tail_left -= n;
	if (c->tail_left)
		return;
	struct frame_sink *k = c->sink;
	c->sink = NULL;
	c->partial = 0;
	c->whole = 0;
	c->timer_mode = TIMER_NONE;
	if (k)
		k->end(k, c, 1);
}

/* A large frame of which have bytes (header included) lie at p: whether
 * it is spooled. 1 if it is (what of its field has arrived fed to the
 * sink), 0 if more of its head must come or it is read whole (c->whole),
 * -1 if c stopped reading (the head was malformed). */
static int tail_begin(struct conn *c, const struct frame_hdr *h, const unsigned char *p,
		      size_t have)
{
	const unsigned char *body = p + FRAME_HDR_LEN;
	size_t got = have - FRAME_HDR_LEN;
	struct frame_sink *k = NULL;
	struct msg_tail t;
	int r = msg_tail_find(body, got, h->len, &MSG_LIMITS_DEFAULT, &t);

	if (r == 0 && got < SPOOL_HEAD_MAX)
		return 0;
	if (r <= 0 || !c->srv->on_frame_head(c, h->type, body, &t, &k)) {
		c->whole = 1;
		return 0;
	}
	if (c->state != CONN_READING) {
		if (k)
			k->end(k, c, 0);
		return -1;
	}
	c->sink = k;
	c->tail_left = t.len;
	c->in_off += have;
	tail_feed(c, body + t.head_len, got - t.head_len);
	return 1;
}

/* Hand each whole frame in c->in to the server. The length of the frame
 * still partly there, or 0 if not even its header is (or the rest of a
 * frame is being spooled); -1 once c has stopped reading (a handler
 * closed it, or the client broke the protocol). */
static int64_t take_frames(struct conn *c)
{
	while (c->state == CONN_READING && !c->paused) {
		const unsigned char *p = (const unsigned char *)c->in.data + c->in_off;
		size_t have = c->in.len - c->in_off;
		struct frame_hdr h;
		struct buf err = BUF_INIT;
		int r = frame_parse_hdr(p, have, max_frame_of(c->srv->cfg), &h, &err);
		if (r > 0 && h.type != FRAME_ARTIFACT_PUT && h.len > c->srv->cfg->max_frame) {
			buf_printf(&err, "frame of %u bytes is over the limit of %lld",
				   (unsigned)h.len, (long long)c->srv->cfg->max_frame);
			r = -1;
		}
		if (r < 0) {
			conn_protocol_error(c, err.data);
			buf_free(&err);
			return -1;
		}
		if (r == 0)
			return 0;
		if (have < FRAME_HDR_LEN + (size_t)h.len) {
			if (h.len >= CONN_SPOOL_MIN && !c->whole && c->srv->on_frame_head) {
				int t = tail_begin(c, &h, p, have);
				if (t < 0)
					return -1;
				if (t > 0 && c->tail_left)
					return 0;
				if (t > 0)
					continue;
			}
			return FRAME_HDR_LEN + (int64_t)h.len;
		}
		/* A whole frame: the next one gets a deadline of its own. */
		c->partial = 0;
		c->whole = 0;
		c->timer_mode = TIMER_NONE;
		c->in_off += FRAME_HDR_LEN + (size_t)h.len;
		c->srv->on_frame(c, h.type, p + FRAME_HDR_LEN, h.len);
	}
	return -1;
}

/* What is left of a partly read frame to the front of c->in. A buffer
 * larger than IN_KEEP goes once its frames are handled: with nothing
 * left, or into a small one with what came of the next frame (a client
 * that sent a large frame and the first bytes of another would otherwise
 * keep the large one for as long as it waits to send the rest). */
static void compact_in(struct conn *c)
{
	size_t left = c->in.len - c->in_off;
	struct buf small = BUF_INIT;

	if (c->in.cap > IN_KEEP && (left == 0 || (c->in_off && left < IN_KEEP &&
	    buf_append(&small, c->in.data + c->in_off, left) == 0))) {
		buf_free(&c->in);
		c->in = small;
		c->in_off = 0;
		return;
	}
	if (c->in_off)
		memmove(c->in.data, c->in.data + c->in_off, left);
	if (c->in.data) {
		c->in.len = left;
		c->in.data[left] = '\0';       /* buf.h's invariant */
	}
	c->in_off = 0;
}

static void on_conn_readable(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	int64_t frame = 0;      /* the length of the frame being read, once known */
	size_t turn = 0;        /* bytes read in this turn of the loop */

	/* Hold a reference: a handler may close the connection. */
	c->refs++;
	/* What arrived before a pause (conn_resume()) goes first. */
	if (c->state == CONN_READING && !c->paused && !c->tail_left && c->in.len > c->in_off)
		frame = take_frames(c);
	while (c->state == CONN_READING && !c->paused && frame >= 0 && turn < READ_TURN) {
		size_t room;
		ssize_t r;
		compact_in(c);
		if (c->tail_left) {
			/* Spooling: c->in holds nothing; its room takes a piece
			 * of the field, never past the frame's end. */
			room = c->tail_left < TAIL_PIECE ? (size_t)c->tail_left : TAIL_PIECE;
			if (buf_reserve(&c->in, room) < 0) {
				conn_protocol_error(c, "out of memory reading the request");
				break;
			}
			r = recv(fd, c->in.data, room, MSG_DONTWAIT);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				break;
			if (r <= 0) {
				conn_close(c);
				break;
			}
			turn += (size_t)r;
			tail_feed(c, c->in.data, (size_t)r);
			if ((size_t)r < room)
				break;
			continue;
		}
		size_t have = c->in.len;
		room = frame == 0 ? FIRST_READ :
		       (size_t)frame - have < READ_AHEAD ? (size_t)frame - have : READ_AHEAD;
		if (buf_reserve(&c->in, room) < 0) {
			conn_protocol_error(c, "out of memory reading the request");
			break;
		}
		room = c->in.cap - have - 1;
		r = recv(fd, c->in.data + have, room, MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (r <= 0) {   /* the client has gone, or its socket failed */
			conn_close(c);
			break;
		}
		turn += (size_t)r;
		c->in.len += (size_t)r;
		c->in.data[c->in.len] = '\0';
		if ((frame = take_frames(c)) < 0)
			break;
		/* Less than there was room for: the socket has nothing more. */
		if ((size_t)r < room)
			break;
	}
	if (c->state == CONN_READING) {
		compact_in(c);
		c->partial = c->in.len > 0 || c->tail_left > 0;
		conn_arm(c);
	}
	conn_unref(c);
}

static void on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	size_t out = out_pending(c);

	if (c->state == CONN_CLOSING) {
		log_info("conn %llu: refused, and its error not read within %d s; closing",
			 (unsigned long long)c->serial, c->srv->cfg->header_timeout_s);
		conn_close(c);
	} else if (c->partial) {
		c->srv->n.header_timeouts++;
		log_info("conn %llu: request not complete after %d s; closing",
			 (unsigned long long)c->serial, c->srv->cfg->header_timeout_s);
		conn_refuse(c, "timeout", "request did not arrive in time");
	} else if (out < c->idle_out) {
		/* A reply going out to a slow reader took some of the period,
		 * or all of it and ended in it: the idle period starts again
		 * (a reader that took nothing for the whole period is idle). */
		struct timeval tv = { c->srv->cfg->idle_timeout_s, 0 };
		c->idle_out = out;
		evtimer_add(c->timer, &tv);
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

	if (c->file_fd >= 0 && c->state != CONN_CLOSED && conn_pump_file(c) < 0) {
		log_warn("conn %llu: cannot send a value from its file; closing",
			 (unsigned long long)c->serial);
		conn_close(c);          /* c may be gone now */
	} else if (c->state == CONN_CLOSING && c->file_fd < 0 &&
		   evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
		/* All sent, the error frame queued behind a file too (its
		 * last bytes may have gone into the output just now). */
		conn_close(c);
	}
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
	c->file_fd = -1;
	c->tenant = *t;
	c->serial = ++s->next_serial;
	c->state = CONN_READING;
	c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->rev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_conn_readable, c);
	c->timer = evtimer_new(s->base, on_conn_timer, c);
	if (!c->bev || !c->rev || !c->timer ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0) {
		if (c->rev)
			event_free(c->rev);
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
	bufferevent_setcb(c->bev, NULL, on_conn_write, on_conn_event, c);
	bufferevent_enable(c->bev, EV_WRITE);
	event_add(c->rev, NULL);
	return c;
}
