/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn: the master's client connections and their frames, below every
 * request family. A connection reads frames whole (the header checked
 * against the size limits first) and hands each to the server's frame
 * handler (struct server's on_frame, set by server.c at start); the
 * families answer on it with replies, error and progress frames; a
 * request that waits holds it (conn_hold()); its close is told to the
 * hooks registered for it (conn_on_close()). See conn.c.
 *
 * Ownership: the server owns every connection and peer. A connection is
 * freed when its last reference goes (conn_unref()): the socket holds one
 * until conn_close(), and each request waiting on it holds one (a flight's
 * waiter, an artifact's), so a reply to a client that has gone is
 * dropped, never written to freed memory. A peer lives while it has
 * connections or flights (peer_put()).
 */
#ifndef PTXCACHE_CONN_H
#define PTXCACHE_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/tenant.h"
#include "proto/buf.h"

struct msg;
struct server;
struct frame_sink;

enum conn_state {
	CONN_READING,   /* reading frames; requests may be in flight */
	CONN_CLOSING,   /* an error frame is queued; close once it is sent */
	CONN_CLOSED,    /* socket gone; struct lives while waiters hold it */
};

/* Per identity (tenant, uid): what its connections hold, for the
 * per-user caps. */
struct peer {
	uid_t uid;
	int64_t tenant;         /* its tenant's number (tenant.h) */
	int conns;
	int jobs;               /* flights it started that are not done */
	int64_t held;           /* their requests' bytes (max-queued-bytes-per-uid) */
	struct peer *next;
};

struct conn {
	struct server *srv;
	struct bufferevent *bev;
	enum conn_state state;
	int refs;               /* 1 for the socket + 1 per waiting request */
	int waiting;            /* requests waiting on a compile */
	uint64_t serial;
	struct peer *peer;      /* NULL if it could not be allocated */
	uid_t uid;              /* SO_PEERCRED: who it is, always set */
	struct tenant tenant;   /* the socket it came in on (tenant.h): fixed
	                           at accept, never from a request */
	gid_t gid;              /* its primary group */
	pid_t pid;
	gid_t *groups;          /* and its others: conn_groups() */
	int ngroups, groups_read;
	struct event *rev;      /* the socket readable: frames (conn.c) */
	struct buf in;          /* what has arrived: whole frames from in_off */
	size_t in_off;
	struct event *timer;    /* header or idle timeout, see conn_arm() */
	enum { TIMER_NONE, TIMER_HEADER, TIMER_IDLE } timer_mode;
	size_t idle_out;        /* reply bytes not yet taken when the idle
	                           timer was armed (on_conn_timer()) */
	int partial;            /* a frame has started but not arrived whole */
	int whole;              /* ... and is read whole, not spooled */
	struct frame_sink *sink;        /* where the last field of the frame
	                                   being spooled goes (NULL: dropped) */
	uint64_t tail_left;     /* its bytes still to come; 0: not spooling */
	int paused;             /* no frame read or handed on: conn_pause() */
	int fds_unread;         /* descriptors sent since the client last
	                           had read all it was sent */
	int file_fd;            /* a value being sent from its file, or -1 */
	off_t file_off, file_end;       /* what of it is sent, its length */
	struct buf after;       /* frames queued behind that file */
	struct conn *prev, *next;       /* the server's open connections */
};

/*
 * Where a large frame's last field goes as it arrives (conn.c's
 * spooling), given by its request (struct request_kind's head, master.h):
 * write() is fed its bytes in order, in pieces, never more than the
 * field's length, and remembers a failure of its own; then end() once,
 * with arrived 1 when the last byte came (the sink answers the request,
 * its failure or its outcome, on c) or 0 when the frame will never be
 * whole (c is closing or timed out: nothing to answer), and frees it.
 */
struct frame_sink {
	void (*write)(struct frame_sink *k, const void *p, size_t n);
	void (*end)(struct frame_sink *k, struct conn *c, int arrived);
};

/* A frame at least this long whose last field is a bin32 (proto/msg.h,
 * msg_tail_find()) is offered to its request's head handler before its
 * field's bytes are read. */
#define CONN_SPOOL_MIN ((uint32_t)256 << 10)

/* The most descriptors one connection may have in flight: sent with
 * replies its client has not read yet (conn_send_fd()). The kernel charges
 * a descriptor in flight to the daemon's user (up to its RLIMIT_NOFILE, for
 * all connections together), so a client that asks and does not read must
 * not spend that for the others; once it has read all it was sent (the
 * socket's SIOCOUTQ is 0), its count starts again. What a client keeps
 * after it reads is its own: its RLIMIT_NOFILE bounds its descriptors, and
 * a file it keeps open after the cache let it go (an eviction, a purge)
 * holds no more disk than the copy of the value it could have written. Past
 * the bound, values go inline (from their files, conn_send_file()). */
#define CONN_MAX_FDS 64

/* What may listen for a connection's close (conn_on_close()). */
#define CONN_CLOSE_HOOKS 4

struct conn_close_hook {
	void (*fn)(void *arg, struct conn *c);
	void *arg;
};

/* A new connection on accepted socket fd, of tenant t (copied: the
 * socket it was accepted on), reading and counted in s (its peer, one per
 * tenant and uid, found or made: c->peer NULL if memory is short), its
 * credentials read (SO_PEERCRED). NULL, with fd closed, if it cannot be
 * set up. The caller then decides: conn_arm() to serve it, or
 * conn_refuse(). */
struct conn *conn_new(struct server *s, int fd, const struct tenant *t);

/* fn(arg, c) as each connection closes (its socket gone, its struct
 * still held by whatever waits on it), in the order registered: for a
 * family that keeps state per connection. 0, or -1 if the hooks are full
 * (CONN_CLOSE_HOOKS). */
int conn_on_close(struct server *s, void (*fn)(void *arg, struct conn *c), void *arg);

/* Close c's socket (once; a no-op if closed): its peer and the server's
 * counts forget it, the close hooks run, and the socket's reference goes. */
void conn_close(struct conn *c);

/* Queue a finished frame from out (borrowed) on c; dropped if c has
 * gone. A client that lets more than max_output pile up is closed. */
void conn_send(struct conn *c, const struct buf *out);
/* conn_send() of a frame whose last tail_len bytes (msg_put_bin_tail())
 * are sent from tail, which need live only until the call returns. */
void conn_sendv(struct conn *c, const struct buf *out, const void *tail, size_t tail_len);

/* conn_send() of a frame whose last len bytes are fd's [0, len), sent by
 * the kernel from the file (sendfile()), never read into memory here, and
 * not counted against max_output. Takes fd (closed once sent, or if c has
 * gone). */
void conn_send_file(struct conn *c, const struct buf *out, int fd, size_t len);

/* Send the frame out with descriptor fd attached to its first byte
 * (SCM_RIGHTS), now: 0 if the frame went (its rest, if the socket took
 * only part, queued), -1 if nothing was sent (output is queued ahead of
 * it, the socket is full, c has CONN_MAX_FDS in flight, or the kernel
 * refused it): the caller answers otherwise. fd stays the caller's to
 * close either way (the client's copy is its own). */
int conn_send_fd(struct conn *c, const struct buf *out, int fd);

/* Tell c's client that request id still waits (state: "queued",
 * "running"; PROTOCOL.md, progress). Sent only where nothing else is
 * queued for the client (one that reads hears that output; one that does
 * not would only grow the queue), so it never counts against max_output.
 * Safe anywhere: it changes no connection state and closes nothing (a
 * write that cannot be queued shuts the socket down, which the loop then
 * sees as an error). */
void conn_send_progress(struct conn *c, uint64_t id, const char *state);

/* Answer request id on c with an error frame (code, message: borrowed). */
void conn_send_error(struct conn *c, uint64_t id, const char *code,
		     const char *message);

/* Send an error frame for request 0 (code, message), then close once it
 * is sent: a connection refused, or one whose client broke the protocol. */
void conn_refuse(struct conn *c, const char *code, const char *message);

/* A frame that cannot be understood: counted, logged, refused. */
void conn_protocol_error(struct conn *c, const char *message);

/* Arm c's one timer for what it is doing now (header, idle or none):
 * call after its count of waiting requests changes. */
void conn_arm(struct conn *c);

/* Drop a reference to c; the last one frees it. */
void conn_unref(struct conn *c);

/* A request of c's now waits (a flight, an artifact's producer): it holds
 * a reference, and c does not idle out meanwhile. conn_unhold() when it is
 * answered or dropped. */
void conn_hold(struct conn *c);
void conn_unhold(struct conn *c);

/* Read nothing more of c, and hand on no frame already read, until
 * conn_resume(): for a request that must be answered before the next of
 * its connection is taken (a spooled put whose file is being synced: a
 * connection's puts land in the order it sent them). */
void conn_pause(struct conn *c);
void conn_resume(struct conn *c);

/* The peer's supplementary groups (SO_PEERGROUPS, however many), read the
 * first time the access policy or an artifact scope asks, then kept:
 * c->groups[0..n). None if memory is short. */
int conn_groups(struct conn *c);

/* Forget a peer that holds nothing any more (NULL: nothing). */
void peer_put(struct server *s, struct peer *p);

/* Whom c's requests are for, as one number: its identity (tenant, uid),
 * packed by tenant_number() (the uid itself on the main socket). The
 * tenant of its compiles (confirm.h), the owner of its jobs, the producer
 * of what it stores. */
static inline int64_t conn_tenant(const struct conn *c)
{
	return tenant_number(&c->tenant, (int64_t)c->uid);
}

/* Who c is in log lines and messages: "uid 1000", or "uid 1000 of tenant
 * 'a'" off the main socket. out holds at least 64 bytes. */
void conn_who(const struct conn *c, char *out, size_t n);

/* Bounded text field of a request, copied into *out (owned by the caller;
 * NULL if absent): 0, or -1 with why set to the field's name when it is
 * not a string, is longer than max or holds a line break. */
int request_text_field(const struct msg *m, const char *name, size_t max,
		       char **out, const char **why);

#endif
