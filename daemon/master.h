/* SPDX-License-Identifier: Apache-2.0 */
/*
 * master: the state the master's files share, and the connection calls
 * they make. Private to the master: server.c (the loop and connections),
 * compile.c, cubin_req.c, manage.c (the request families) and flight.c
 * (single flight) include it; nothing else does, and no worker sees it.
 *
 * Ownership: the server owns every connection, peer and flight. A
 * connection is freed when its last reference goes (conn_unref()): the
 * socket holds one until conn_close(), and each request waiting in a
 * flight holds one, so a reply to a client that has gone is dropped, never
 * written to freed memory. A peer lives while it has connections or
 * flights (peer_put()).
 */
#ifndef PTXCACHE_MASTER_H
#define PTXCACHE_MASTER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "daemon/confirm.h"
#include "daemon/cubin.h"
#include "daemon/server.h"
#include "proto/buf.h"

struct msg;
struct flight;

/* Single flights are found by the first bytes of their key. */
#define FLIGHT_BUCKETS 1024

enum conn_state {
	CONN_READING,   /* reading frames; requests may be in flight */
	CONN_CLOSING,   /* an error frame is queued; close once it is sent */
	CONN_CLOSED,    /* socket gone; struct lives while waiters hold it */
};

/* Per peer uid: what its connections hold, for the per-user caps. */
struct peer {
	uid_t uid;
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
	gid_t gid;              /* its primary group */
	gid_t *groups;          /* and its others: conn_groups() */
	int ngroups, groups_read;
	struct event *timer;    /* header or idle timeout, see conn_arm() */
	enum { TIMER_NONE, TIMER_HEADER, TIMER_IDLE } timer_mode;
	int partial;            /* a frame has started but not arrived whole */
	struct conn *prev, *next;       /* the server's open connections */
};

struct counters {
	int64_t requests, hits, misses, compiles, compile_errors, dedup_joins,
		store_errors, protocol_errors, connections, refused_connections,
		denied_connections, header_timeouts, idle_timeouts, output_overflows,
		refused_jobs, confirmations, confirm_mismatches,
		confirm_compiles,       /* background confirmations that ran */
		lineinfo_hits,          /* portable cubins served by rewriting */
		lineinfo_layout_misses, /* misses whose shape was compiled before,
		                           for paths or stamps the cached cubin
		                           could not be laid out for */
		lineinfo_loose_hits,    /* lineinfo-loose: answers naming other paths */
		lineinfo_unportable,    /* compiles whose line table was not as
		                           cubin_debug.c predicts: not stored */
		lineinfo_rewrite_errors;/* stored portable cubins that failed their
		                           check on a hit (compiled again) */
};

/* Loose keys compiled since start (the first 8 bytes, direct-mapped), to
 * tell a miss caused by path or stamp lengths from a new kernel. */
#define SEEN_SLOTS 65536

struct server {
	struct server_config *cfg;
	struct event_base *base;
	struct l2 *l2;          /* the Redis tier, or NULL */
	struct fleet *fleet;    /* fleet leases, through l2 */
	struct artifacts *arts; /* the JIT's own entries (artifact.c) */
	struct evconnlistener *listener;
	struct store *store;
	struct pool *pool;
	struct flight *flights[FLIGHT_BUCKETS];
	int nflights;
	int64_t held;           /* bytes of the flights' requests (max-queued-bytes) */
	struct peer *peers;
	struct conn *conns;     /* open connections (for a stop that drains) */
	int nconns;
	gid_t socket_gid;
	int stopping;           /* SIGTERM: finishing in-flight compiles */
	int socket_from_systemd;
	struct counters n;
	enum sharing sharing;   /* confirm.h */
	struct event *flush_timer, *progress_timer, *sigterm, *sigint, *sighup, *stop_timer;
	struct cubin_backend asm_be[2]; /* by enum cubin_backend_kind, found
	                                   at start */
	char *asm_roots;        /* their directories, for the assembler
	                           workers' sandbox */
	char *worker_tmp;       /* <cache>/workers: assembler workers' dirs */
	uint64_t next_serial;
	time_t started;
	uint64_t *seen_loose;   /* SEEN_SLOTS entries, or NULL */
};

/*
 * The request table, in parts: each request family (compile.c, manage.c,
 * and server.c's own hello and ping) exports one, and handle_frame() in
 * server.c walks them. A handler gets the request's id and its validated
 * body (borrowed, for the call only), and answers on c, at once or later
 * (a flight holds a reference to c meanwhile). Checklist when adding a
 * request: frame.h's enum, frame_type_name(), PROTOCOL.md, the client, and
 * its family's table (or a new family's, listed in server.c).
 */
struct request_kind {
	uint8_t type;           /* FRAME_* */
	void (*handler)(struct conn *c, uint64_t id, const struct msg *m);
};

struct request_table {
	const struct request_kind *kinds;
	size_t n;
};

/* ---- connections (server.c) ----------------------------------------- */

/* Queue a finished frame from out (borrowed) on c; dropped if c has
 * gone. A client that lets more than max_output pile up is closed. */
void conn_send(struct conn *c, const struct buf *out);

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

/* Arm c's one timer for what it is doing now (header, idle or none):
 * call after its count of waiting requests changes. */
void conn_arm(struct conn *c);

/* Drop a reference to c; the last one frees it. */
void conn_unref(struct conn *c);

/* A request of c's now waits (a flight, an artifact's producer): it holds
 * a reference, and c does not idle out meanwhile. conn_unhold() when it is
 * answered or dropped. */
/* The peer's supplementary groups (SO_PEERGROUPS, however many), read the
 * first time the access policy or an artifact scope asks, then kept:
 * c->groups[0..n). None if memory is short. */
int conn_groups(struct conn *c);
void conn_hold(struct conn *c);
void conn_unhold(struct conn *c);

/* Forget a peer that holds nothing any more (NULL: nothing). */
void peer_put(struct server *s, struct peer *p);

/* The tenant c's compiles run for: its uid. */
static inline int64_t conn_tenant(const struct conn *c)
{
	return (int64_t)c->uid;
}

/* While stopping: leave the loop once nothing is in flight and every
 * reply has been written. Call whenever a flight ends. */
void server_maybe_stop(struct server *s);

/* Bounded text field of a request, copied into *out (owned by the caller;
 * NULL if absent): 0, or -1 with why set to the field's name when it is
 * not a string, is longer than max or holds a line break. */
int request_text_field(const struct msg *m, const char *name, size_t max,
		       char **out, const char **why);

#endif
