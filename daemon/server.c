/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server: the master process of ptxcached: its loop and its connections.
 *
 * One libevent loop owns everything: the listening Unix socket, client
 * connections, the SQLite store and the worker pool. This file is the
 * frame around the requests: the listener and its access policy,
 * connections, frames, the request table, signals, start and stop. A
 * request flows:
 *
 *   frame in -> header checked against limits -> body validated (msg.c)
 *   -> request table -> its family: compile.c (the PTX stage), cubin_req.c
 *      (the cubin stage), manage.c (stats and the cache), or hello and
 *      ping here
 *   -> compile: key derived (key.c) -> store hit? reply
 *   -> in-flight flight for the same key? join it (single flight: flight.c)
 *   -> else a new flight, asked of Redis, then queued on the pool
 *   -> worker result -> stored (committed) -> replied to every waiter
 *
 * Connections are state machines (enum conn_state). Several requests may be
 * in flight per connection; replies carry the request's id. A connection
 * that closes while it waits keeps its struct alive until its last waiter
 * is answered (refcount), so no callback ever touches freed memory.
 *
 * The master never runs LLVM code and never waits on a compile.
 */
#include "daemon/server.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "daemon/artifact.h"
#include "daemon/codegen.h"
#include "daemon/compile.h"
#include "daemon/config.h"
#include "daemon/flight.h"
#include "daemon/idle.h"
#include "daemon/cubin.h"
#include "daemon/key.h"
#include "daemon/l2.h"
#include "daemon/confirm.h"
#include "daemon/log.h"
#include "daemon/manage.h"
#include "daemon/master.h"
#include "daemon/sandbox.h"
#include "daemon/store.h"
#include "proto/frame.h"
#include "proto/msg.h"

#define SERVER_NAME "ptxcached " PTXCACHE_VERSION

/* ---- connections: state, peers, replies ----------------------------- */

static const char *const state_names[] = { "reading", "closing", "closed" };

static void conn_set_state(struct conn *c, enum conn_state s)
{
	log_debug("conn %llu: %s -> %s", (unsigned long long)c->serial,
		  state_names[c->state], state_names[s]);
	c->state = s;
}

static struct peer *peer_get(struct server *s, uid_t uid)
{
	struct peer *p;

	for (p = s->peers; p; p = p->next)
		if (p->uid == uid)
			return p;
	p = calloc(1, sizeof *p);
	if (p) {
		p->uid = uid;
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

static void conn_close(struct conn *c)
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
	/* Its queued compiles may now have nobody to answer. */
	if (c->waiting && c->srv->pool)
		pool_prune(c->srv->pool);
	artifacts_conn_closed(c->srv->arts, c);
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

/* Queue a finished frame from out on c (dropped if c has gone). */
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
static void refuse(struct conn *c, const char *code, const char *message)
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
static void protocol_error(struct conn *c, const char *message)
{
	c->srv->n.protocol_errors++;
	log_info("conn %llu: %s", (unsigned long long)c->serial, message);
	refuse(c, "protocol", message);
}

/* Bounded text field: 0 ok, -1 with why set. */
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

/* ---- requests ------------------------------------------------------- */

static void handle_hello(struct conn *c, uint64_t id, const struct msg *m)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, FRAME_HELLO | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_int(&w, "proto", FRAME_VERSION);
	msg_put_str(&w, "server", SERVER_NAME);
	msg_put_str(&w, "version", PTXCACHE_VERSION);
	msg_put_str(&w, "compiler", codegen_identity());
	msg_put_int(&w, "pid", getpid());
	if (c->srv->asm_be[CUBIN_PTXAS].version)
		msg_put_str(&w, "assembler", c->srv->asm_be[CUBIN_PTXAS].version);
	if (c->srv->asm_be[CUBIN_NVJITLINK].version)
		msg_put_str(&w, "nvjitlink", c->srv->asm_be[CUBIN_NVJITLINK].version);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	buf_free(&b);
}

static void handle_ping(struct conn *c, uint64_t id, const struct msg *m)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, FRAME_PING | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	buf_free(&b);
}

static const struct request_kind server_kinds[] = {
	{ .type = FRAME_HELLO, .handler = handle_hello },
	{ .type = FRAME_PING, .handler = handle_ping },
};

static const struct request_table server_requests = {
	.kinds = server_kinds,
	.n = sizeof server_kinds / sizeof server_kinds[0],
};

/* The request table, a part per family (master.h has the checklist for
 * adding a request). */
static const struct request_table *const request_tables[] = {
	&server_requests,
	&compile_requests,
	&manage_requests,
	&artifact_requests,
};

static void handle_frame(struct conn *c, const struct frame_hdr *h,
			 const void *body)
{
	struct msg m;
	struct buf err = BUF_INIT;
	int64_t id = 0;

	c->srv->n.requests++;
	if (msg_parse(&m, body, h->len, &MSG_LIMITS_DEFAULT, &err) < 0) {
		protocol_error(c, err.data ? err.data : "malformed message");
		goto out;
	}
	if (msg_int(&m, "id", &id) < 0 || id < 0) {
		protocol_error(c, "request 'id' must be a non-negative integer");
		goto out;
	}
	for (size_t t = 0; t < sizeof request_tables / sizeof request_tables[0]; t++) {
		const struct request_table *rt = request_tables[t];
		for (size_t i = 0; i < rt->n; i++) {
			if (rt->kinds[i].type == h->type) {
				rt->kinds[i].handler(c, (uint64_t)id, &m);
				goto out;
			}
		}
	}
	buf_printf(&err, "unknown request type %u", h->type);
	conn_send_error(c, (uint64_t)id, "unsupported", err.data);
out:
	msg_free(&m);
	buf_free(&err);
}

/* ---- connections: reading, timers, the listener -------------------- */

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
			protocol_error(c, err.data);
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
			protocol_error(c, "out of memory reading the request");
			break;
		}
		/* A whole frame: the next one gets a deadline of its own. */
		c->partial = 0;
		c->timer_mode = TIMER_NONE;
		handle_frame(c, &h, all + FRAME_HDR_LEN);
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
		refuse(c, "timeout", "request did not arrive in time");
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

/* Is id (a name or a number) in the comma-separated list? */
static int listed(const char *list, unsigned id, int is_group)
{
	char item[256];
	unsigned v;

	for (const char *p = list; config_list_next(&p, item, sizeof item);)
		if (config_list_id(item, is_group, &v) && v == id)
			return 1;
	return 0;
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

/*
 * The access policy: root, the daemon's own user, members of the socket's
 * group, and the configured users and groups. The peer's groups come from
 * conn_groups() (all of them, not only the primary one).
 */
static int allowed(struct server *s, struct conn *c)
{
	if (c->uid == 0 || c->uid == geteuid() || listed(s->cfg->allow_users, c->uid, 0))
		return 1;
	for (int i = -1, n = conn_groups(c); i < n; i++) {
		gid_t g = i < 0 ? c->gid : c->groups[i];
		if ((g == s->socket_gid && s->socket_gid != 0) ||
		    listed(s->cfg->allow_groups, g, 1))
			return 1;
	}
	return 0;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int socklen, void *arg)
{
	struct server *s = arg;
	struct conn *c = calloc(1, sizeof *c);
	struct ucred cr = { 0 };
	socklen_t crlen = sizeof cr;
	char why[160];

	if (!c) {
		close(fd);
		return;
	}
	c->srv = s;
	c->refs = 1;
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
		return;
	}
	s->n.connections++;
	s->nconns++;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	c->uid = cr.uid;
	c->gid = cr.gid;
	log_debug("conn %llu: uid %u pid %d", (unsigned long long)c->serial, (unsigned)cr.uid,
		  (int)cr.pid);
	c->peer = peer_get(s, cr.uid);
	if (c->peer)
		c->peer->conns++;
	/* What the socket did not take at once goes out as fast as it drains. */
	bufferevent_set_max_single_write(c->bev, 1 << 20);
	bufferevent_setcb(c->bev, on_conn_read, on_conn_write, on_conn_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);

	if (!allowed(s, c)) {
		s->n.denied_connections++;
		log_warn("refused connection from uid %u (pid %d): not allowed",
			 (unsigned)cr.uid, (int)cr.pid);
		snprintf(why, sizeof why, "uid %u is not allowed to use this daemon",
			 (unsigned)cr.uid);
		refuse(c, "denied", why);
	} else if (!c->peer) {
		/* No per-user accounting, so no per-user limits: refuse. */
		refuse(c, "internal", "out of memory");
	} else if (s->nconns > s->cfg->max_conns ||
		   (c->peer && c->peer->conns > s->cfg->max_conns_per_uid) ||
		   s->stopping) {
		s->n.refused_connections++;
		snprintf(why, sizeof why, s->stopping ? "the daemon is shutting down" :
			 s->nconns > s->cfg->max_conns ? "too many connections (limit %d)" :
			 "too many connections for this user (limit %d)",
			 s->nconns > s->cfg->max_conns ? s->cfg->max_conns :
			 s->cfg->max_conns_per_uid);
		log_info("refused connection from uid %u: %s", (unsigned)cr.uid, why);
		refuse(c, "limit", why);
	} else {
		conn_arm(c);
	}
}

/* ---- start and stop ------------------------------------------------- */

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
	store_flush(((struct server *)arg)->store);
}

/* Every second: a progress frame to each request waiting on a flight
 * (flight_progress()), so that its client, which gives up on a daemon it
 * does not hear from, keeps waiting. */
static void on_progress(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	flight_progress(s);
	artifacts_progress(s->arts);
}

/* Tell systemd (Type=notify) how we are; nothing without NOTIFY_SOCKET. */
static void notify(const char *msg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!path || !*path || strlen(path) >= sizeof sa.sun_path)
		return;
	strcpy(sa.sun_path, path);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
		log_debug("cannot notify systemd: %s", strerror(errno));
	close(fd);
}

static void on_stop_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	log_warn("%d compiles still running after %d s; stopping anyway",
		 s->nflights, s->cfg->shutdown_timeout_s);
	event_base_loopexit(s->base, NULL);
}

/* While stopping: exit the loop once no compile is in flight and every
 * reply has been written (on_conn_write() asks again as output drains). */
void server_maybe_stop(struct server *s)
{
	if (!s->stopping || s->nflights)
		return;
	for (struct conn *c = s->conns; c; c = c->next)
		if (c->bev && evbuffer_get_length(bufferevent_get_output(c->bev)))
			return;
	event_base_loopexit(s->base, NULL);
}

/* SIGTERM, SIGINT: stop accepting, let in-flight compiles finish (up to
 * shutdown_timeout), then leave the loop; server_run() checkpoints. */
static void on_stop(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;
	struct timeval tv = { s->cfg->shutdown_timeout_s, 0 };

	if (s->stopping) {
		event_base_loopexit(s->base, NULL);
		return;
	}
	notify("STOPPING=1");
	s->stopping = 1;
	/* Nobody waits on an artifact through a stop: each gets its miss now. */
	artifacts_stop(s->arts);
	/* Confirmations are idle-time work: none holds up the stop. */
	pool_cancel_background(s->pool);
	log_info("signal %d: stopping; %d compiles in flight", (int)sig, s->nflights);
	/* A socket of our own: new connections get "shutting down" (in
	 * on_accept()). A socket from systemd stays with systemd: connections
	 * wait there for the next start instead of failing. */
	if (s->socket_from_systemd)
		evconnlistener_disable(s->listener);
	s->stop_timer = evtimer_new(s->base, on_stop_deadline, s);
	if (s->stop_timer)
		evtimer_add(s->stop_timer, &tv);
	server_maybe_stop(s);
}

/* Every worker of the first round is warm (or failed to start): only now
 * is the daemon ready, to systemd and to the clients waiting in the
 * backlog. Answering earlier would hand the first request to a cold
 * worker, or keep it waiting for the warm-up anyway. */
static void on_warm(void *arg)
{
	struct server *s = arg;
	struct pool_counters pc;

	pool_counters(s->pool, &pc);
	log_info("serving: %d of %d workers warm after %lld ms", pc.ready, s->cfg->pool.size,
		 (long long)pool_warm_ms(s->pool));
	if (!s->stopping)
		evconnlistener_enable(s->listener);
	notify("READY=1\nSTATUS=serving");
}

static void artifact_config_of(const struct server *s, struct artifact_config *ac)
{
	const struct server_config *cfg = s->cfg;

	*ac = (struct artifact_config){
		.max_value = cfg->artifact_max_value,
		.lease_timeout_s = cfg->artifact_lease_timeout_s,
		.wait_s = cfg->artifact_wait_s,
		.max_leases = cfg->artifact_max_leases,
		.groups = cfg->artifact_groups,
		.trust = s->sharing == SHARING_TRUST,
	};
	store_set_artifact_share(s->store, cfg->max_size / 100 * cfg->artifact_share);
}

/* The Redis tier's settings, as l2.c takes them. */
static void l2_config_of(const struct server_config *cfg, struct l2_config *lc)
{
	*lc = (struct l2_config){
		.url = cfg->l2_url,
		.secret_file = cfg->l2_secret_file,
		.prefix = cfg->l2_prefix,
		.read_only = cfg->l2_read_only,
		.connect_timeout_ms = cfg->l2_timeout_ms,
		.command_timeout_ms = cfg->l2_timeout_ms,
		.max_value = cfg->l2_max_value,
		.identity = codegen_identity(),
	};
}

/* A reload's Redis tier: started, changed (the secret file is read again
 * each time) or switched off; lookups in flight finish under the settings
 * they began with (l2_reconfigure()). Settings l2.c refuses leave the tier
 * as it was. */
static void reload_l2(struct server *s)
{
	struct l2_config lc;
	struct buf err = BUF_INIT;

	l2_config_of(s->cfg, &lc);
	if (!s->l2) {
		if (lc.url && *lc.url && !(s->l2 = l2_new(s->base, &lc, &err)))
			log_err("reload: the shared tier stays off: %s", err.data);
		else if (s->l2)
			log_info("l2: on");
	} else if (l2_reconfigure(s->l2, &lc, &err) < 0) {
		log_err("reload: the shared tier keeps its settings: %s", err.data);
	}
	buf_free(&err);
}

/* SIGHUP: reload what can change live. */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;
	struct buf err = BUF_INIT;

	if (config_reload(s->cfg, &err) < 0) {
		log_err("reload failed, keeping the old settings: %s", err.data);
	} else {
		store_set_max_size(s->store, s->cfg->max_size);
		pool_reconfigure(s->pool, &s->cfg->pool);
		reload_l2(s);
		struct artifact_config ac;
		artifact_config_of(s, &ac);
		artifacts_configure(s->arts, &ac);
		log_info("configuration reloaded");
	}
	buf_free(&err);
}

/* mkdir -p with the last component 0700. */
static int make_dir(const char *path, struct buf *err)
{
	char tmp[4096];

	if (strlen(path) >= sizeof tmp) {
		buf_printf(err, "path too long: '%s'", path);
		return -1;
	}
	strcpy(tmp, path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST) {
			buf_printf(err, "cannot create '%s': %s", tmp, strerror(errno));
			return -1;
		}
		*p = '/';
	}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create '%s': %s", tmp, strerror(errno));
		return -1;
	}
	return 0;
}

/* A listening socket passed by systemd (socket activation), or -1. */
static int systemd_socket(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");

	if (!pid || !fds || atol(pid) != (long)getpid() || atoi(fds) < 1)
		return -1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	int fd = 3;     /* SD_LISTEN_FDS_START */
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	evutil_make_socket_nonblocking(fd);
	return fd;
}

/* The group of the socket file behind fd, for the access policy. */
static gid_t socket_group(int fd)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof sa;
	struct stat st;

	memset(&sa, 0, sizeof sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || !sa.sun_path[0] ||
	    stat(sa.sun_path, &st) < 0)
		return 0;
	return st.st_gid;
}

/* Bind the Unix socket (0600 in a 0700 directory unless the directory
 * exists already). A live socket of another daemon is never taken over. */
static int listen_socket(const char *path, struct buf *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (strlen(path) >= sizeof sa.sun_path) {
		buf_printf(err, "socket path too long: '%s'", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	char dir[sizeof sa.sun_path];
	strcpy(dir, path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (make_dir(dir, err) < 0)
			return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		buf_printf(err, "cannot create socket: %s", strerror(errno));
		return -1;
	}
	/* A leftover socket file: take it over only if nobody answers. */
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
		close(probe);
		close(fd);
		buf_printf(err, "another daemon is serving '%s'", path);
		return -1;
	}
	if (probe >= 0)
		close(probe);
	unlink(path);
	mode_t old = umask(0177);
	int r = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (r < 0 || listen(fd, 128) < 0) {
		buf_printf(err, "cannot listen on '%s': %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* One daemon per cache directory, through a lock on DIR/lock. */
static int lock_cache(const char *dir, struct buf *err)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/lock", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		buf_printf(err, "cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		buf_printf(err, "cache directory '%s' is in use by another daemon", dir);
		close(fd);
		return -1;
	}
	return fd;
}

int server_run(struct server_config *cfg)
{
	struct server s = { .cfg = cfg, .started = time(NULL),
			    .seen_loose = calloc(SEEN_SLOTS, sizeof(uint64_t)) };
	struct buf err = BUF_INIT;
	struct idle *idle = NULL;
	int lock = -1, lfd = -1, rc = 1;

	signal(SIGPIPE, SIG_IGN);
	/* Past a file-size limit, writes fail with EFBIG (a store error the
	 * client never sees) instead of killing the daemon. */
	signal(SIGXFSZ, SIG_IGN);
	/* A hit moves its blob through buffers of its size (decompression,
	 * reply, socket queue). glibc would hand blocks over 128 KB back to the
	 * kernel on free and fault them in again, page by page, on the next
	 * hit: 80% of the master's time on a 1.3 MB cubin (bench/NOTES.md).
	 * Keep up to 64 MB of freed memory for reuse instead. */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	if (make_dir(cfg->cache_dir, &err) < 0 ||
	    (lock = lock_cache(cfg->cache_dir, &err)) < 0)
		goto out;
	s.store = store_open(cfg->cache_dir, cfg->max_size, &err);
	if (!s.store)
		goto out;
	s.base = event_base_new();
	if (!s.base) {
		buf_puts(&err, "cannot create event loop");
		goto out;
	}
	/* The assemblers: found once, before any worker is forked. */
	cubin_find_ptxas(cfg->ptxas && *cfg->ptxas ? cfg->ptxas : NULL,
			 &s.asm_be[CUBIN_PTXAS]);
	cubin_find_nvjitlink(cfg->nvjitlink && *cfg->nvjitlink ? cfg->nvjitlink : NULL,
			     &s.asm_be[CUBIN_NVJITLINK]);
	const struct cubin_backend *pb = &s.asm_be[CUBIN_PTXAS];
	const char *rel = pb->version ? strstr(pb->version, "release") : NULL;
	if (pb->path)
		log_info("ptxas '%s' (%.*s)", pb->path, rel ? (int)strcspn(rel, "\n") : 0,
			 rel ? rel : "");
	else
		log_warn("%s; cubin requests will be refused", s.asm_be[CUBIN_PTXAS].why);
	if (s.asm_be[CUBIN_NVJITLINK].path)
		log_info("nvJitLink '%s'", s.asm_be[CUBIN_NVJITLINK].path);
	const char *const asm_paths[2] = { s.asm_be[0].path, s.asm_be[1].path };
	if (sandbox_start(&cfg->pool, cfg->cache_dir, asm_paths, &s.asm_roots,
			  &s.worker_tmp, &err) < 0)
		goto out;
	if (sharing_parse(cfg->sharing, &s.sharing) < 0) {
		buf_printf(&err, "sharing must be confirm, trust or separate, not '%s'",
			   cfg->sharing ? cfg->sharing : "");
		goto out;
	}
	if (cfg->namespace_per_uid)
		s.sharing = SHARING_SEPARATE;
	s.pool = pool_new(s.base, &cfg->pool, &err);
	if (!s.pool)
		goto out;
	/* The master's own first-use costs, while the workers warm up. */
	char hex[65];
	key_sha256_hex(SERVER_NAME, sizeof SERVER_NAME, hex);
	store_warm_up(s.store);
	if (cfg->l2_url && *cfg->l2_url) {
		struct l2_config lc;
		l2_config_of(cfg, &lc);
		s.l2 = l2_new(s.base, &lc, &err);
		if (!s.l2)
			goto out;
	}
	struct artifact_config ac;
	artifact_config_of(&s, &ac);
	if (!(s.arts = artifacts_new(s.base, s.store, &s.l2, &ac))) {
		buf_puts(&err, "out of memory");
		goto out;
	}
	if ((lfd = systemd_socket()) >= 0)
		s.socket_from_systemd = 1;
	else if ((lfd = listen_socket(cfg->socket_path, &err)) < 0)
		goto out;
	s.socket_gid = socket_group(lfd);
	/* Disabled until the workers are warm (on_warm()): connections wait
	 * in the socket's backlog meanwhile, under systemd or not. */
	s.listener = evconnlistener_new(s.base, on_accept, &s,
					LEV_OPT_CLOSE_ON_FREE | LEV_OPT_DISABLED, -1, lfd);
	if (!s.listener) {
		buf_puts(&err, "cannot watch the listening socket");
		close(lfd);
		goto out;
	}
	struct timeval second = { 1, 0 };
	s.flush_timer = event_new(s.base, -1, EV_PERSIST, on_flush, &s);
	s.progress_timer = event_new(s.base, -1, EV_PERSIST, on_progress, &s);
	s.sigterm = evsignal_new(s.base, SIGTERM, on_stop, &s);
	s.sigint = evsignal_new(s.base, SIGINT, on_stop, &s);
	s.sighup = evsignal_new(s.base, SIGHUP, on_reload, &s);
	event_add(s.flush_timer, &second);
	if (s.progress_timer)
		event_add(s.progress_timer, &second);
	evsignal_add(s.sigterm, NULL);
	evsignal_add(s.sigint, NULL);
	evsignal_add(s.sighup, NULL);
	log_info("listening on '%s'%s, cache '%s', %d workers, %s", cfg->socket_path,
		 s.socket_from_systemd ? " (from systemd)" : "", cfg->cache_dir,
		 cfg->pool.size, codegen_identity());
	notify("STATUS=warming up the workers");
	pool_when_warm(s.pool, on_warm, &s);
	idle = idle_start(&s);

	event_base_dispatch(s.base);
	rc = 0;
	if (!s.socket_from_systemd)
		unlink(cfg->socket_path);
out:
	if (err.len)
		log_err("%s", err.data);
	idle_free(idle);
	if (s.listener)
		evconnlistener_free(s.listener);
	l2_free(s.l2);
	s.l2 = NULL;
	pool_free(s.pool);      /* ends the flights it held: their waiters told */
	s.pool = NULL;
	/* Connections still open: closed, each freed once no flight holds it;
	 * then the flights left, whose Redis lookup l2_free() cancelled. */
	while (s.conns)
		conn_close(s.conns);
	flight_abandon_all(&s);
	artifacts_free(s.arts);
	if (s.flush_timer)
		event_free(s.flush_timer);
	if (s.progress_timer)
		event_free(s.progress_timer);
	if (s.sigterm)
		event_free(s.sigterm);
	if (s.sigint)
		event_free(s.sigint);
	if (s.sighup)
		event_free(s.sighup);
	if (s.stop_timer)
		event_free(s.stop_timer);
	store_close(s.store);
	free(s.asm_roots);
	free(s.worker_tmp);
	cubin_backend_free(&s.asm_be[CUBIN_PTXAS]);
	cubin_backend_free(&s.asm_be[CUBIN_NVJITLINK]);
	free(s.seen_loose);
	if (s.base)
		event_base_free(s.base);
	if (lock >= 0)
		close(lock);
	buf_free(&err);
	return rc;
}
