/* SPDX-License-Identifier: Apache-2.0 */
/*
 * master: the state the master's files share. Private to the master:
 * server.c (the loop, the listener, start and stop), the request families
 * (compile.c, cubin_req.c, manage.c, artifact.c), flight.c (single
 * flight) and conn.c (connections and frames) include it; nothing else
 * does, and no worker sees it. The floors these files stand on, and which
 * may call which, are in ARCHITECTURE.md ("Floors").
 *
 * Ownership: the server owns every connection, peer (conn.h) and flight
 * (flight.h).
 */
#ifndef PTXCACHE_MASTER_H
#define PTXCACHE_MASTER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "daemon/config.h"
#include "daemon/confirm.h"
#include "daemon/conn.h"
#include "daemon/cubin.h"
#include "proto/buf.h"

struct msg;
struct msg_tail;
struct flight;

/* Single flights are found by the first bytes of their key. */
#define FLIGHT_BUCKETS 1024

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
	struct evconnlistener *listener;       /* the main socket (tenant "-") */
	struct event *accept_resume;    /* after a failed accept (tenant.h) */
	struct tenants *tenants;        /* the tenants' sockets (tenant.h) */
	struct store *store;
	struct syncer *sync;    /* puts' fsyncs off the loop (syncer.h) */
	struct syncer *unlinks; /* removed entries' unlinks, on a thread of
	                           their own: they never hold up a put */
	struct syncer *checkpoints; /* the WAL's checkpoints (store_ckpt.h) */
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
	/* Set by server.c at start, for the floors below it (conn.c,
	 * flight.c), which call up only through them: */
	void (*on_frame)(struct conn *c, uint8_t type, const void *body,
			 uint32_t len);  /* each whole frame read: the request
	                                    table's dispatch */
	int (*on_frame_head)(struct conn *c, uint8_t type, const void *body,
			     const struct msg_tail *t, struct frame_sink **sink);
	                        /* a large frame's head (conn.c, spooling):
	                           1 if a request takes its last field as it
	                           arrives, through *sink (NULL: the request
	                           was answered, the bytes are dropped), 0 to
	                           read the frame whole */
	void (*on_quiet)(struct server *s); /* a flight ended or a reply was
	                                       written: the stop's check */
	struct conn_close_hook close_hooks[CONN_CLOSE_HOOKS]; /* conn_on_close() */
	int nclose_hooks;
};

/*
 * The request table, in parts: each request family (compile.c, manage.c,
 * artifact.c, and server.c's own hello and ping) exports one, and
 * handle_frame() in server.c walks them (conn.c hands it each frame). A
 * handler gets the request's id and its validated body (borrowed, for the
 * call only), and answers on c, at once or later (a flight holds a
 * reference to c meanwhile). Checklist when adding a request: frame.h's
 * enum, frame_type_name(), PROTOCOL.md, the client, and its family's table
 * (or a new family's, listed in server.c).
 */
struct request_kind {
	uint8_t type;           /* FRAME_* */
	void (*handler)(struct conn *c, uint64_t id, const struct msg *m);
	/* Optional, for a request whose last field may be too large to want
	 * whole in memory (an artifact put's value): that field's name, and
	 * head, given the other fields and the field's length once they have
	 * arrived (conn.c's spooling), before any byte of it: 1 with *sink,
	 * where its bytes go as they come (NULL: head answered the request
	 * itself, and they are dropped), or 0 to have the frame read whole
	 * and handed to handler as usual. */
	const char *tail;
	int (*head)(struct conn *c, uint64_t id, const struct msg *m, uint32_t tail_len,
		    struct frame_sink **sink);
};

struct request_table {
	const struct request_kind *kinds;
	size_t n;
};

/* While stopping: leave the loop once nothing is in flight and every
 * reply has been written (server.c's check, through s->on_quiet). Call
 * whenever a flight ends or a connection's output drains. */
static inline void server_maybe_stop(struct server *s)
{
	if (s->on_quiet)
		s->on_quiet(s);
}

#endif
