/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flight: single flight, in the master. A miss becomes a flight: one key
 * being computed (asked of the Redis tier, then of the pool), and every
 * request waiting for it. See flight.c for what happens to its result.
 *
 * Ownership: a flight is built by its request family (compile.c,
 * cubin_req.c: key, components, job frame, first waiter) and owned by the
 * server's table from flight_launch() until it is finished, which frees
 * it. Each waiter holds a reference to its connection, and carries how it
 * is to be answered (struct waiter_ops, with its argument), as the family
 * that added it said: flight.c knows no request family.
 */
#ifndef PTXCACHE_FLIGHT_H
#define PTXCACHE_FLIGHT_H

#include <stdint.h>

#include "daemon/cubin_debug.h"
#include "daemon/key.h"
#include "daemon/master.h"
#include "daemon/store.h"
#include "daemon/worker.h"

struct fleet_wait;
struct flight;
struct waiter;

/* A flight's outcome, as its waiters are told it. */
struct flight_result {
	const struct job_result *res;   /* as the pool or Redis gave it */
	int status;             /* the entry's status: a cubin's is the
	                           assembler's exit status (255 if none) */
	const char *data;       /* the output as stored: a portable cubin's */
	size_t data_len;        /* canonical layout (f->dbg), else res's */
	int unportable;         /* a portable cubin whose line table was not as
	                           predicted: not stored, data is res's */
};

/* How a waiter is answered, given by the family that added it. */
struct waiter_ops {
	/* Answer wt (on wt->conn, which may have closed: a reply is then
	 * dropped) with f's outcome r. Called once, as f finishes. */
	void (*answer)(const struct flight *f, struct waiter *wt,
		       const struct flight_result *r);
	/* Free wt->arg (NULL: nothing to free). */
	void (*drop)(void *arg);
};

struct waiter {
	struct conn *conn;
	uint64_t id;
	const struct waiter_ops *ops;
	void *arg;              /* ops's own (owned by the waiter) */
	struct waiter *next;
};

/* One key being compiled, and everyone waiting for it. */
struct flight {
	struct key key;
	char *components;       /* JSON, stored beside the entry */
	char *arch;
	struct waiter *waiters;
	struct pool_job job;
	struct flight *next;    /* bucket chain */
	enum store_kind kind;   /* the stage: STORE_PTX or STORE_CUBIN */
	struct server *srv;
	struct peer *peer;      /* who started it (per-uid bounds) */
	int64_t held;           /* what it holds against them: its job frame */
	int64_t tenant;         /* whose compile it is (confirm.h): its
	                           identity's number (conn_tenant()) */
	char own_name[TENANT_NAME_MAX + 24]; /* and its identity as Redis names it:
	                           "u1000", "NAME/u1000" (own_key()) */
	int background;         /* a confirmation nobody waits for */
	struct flight_dbg *dbg; /* a portable -lineinfo cubin, or NULL */
	struct fleet_wait *fw;  /* its lookup in the tier, and the fleet's lease */
	int own;                /* fw is for its tenant's own value (flight.c) */
};

/* A portable cubin flight: whose paths the assembler ran with, the
 * canonical view that is stored, and the key that accepts other paths. */
struct flight_dbg {
	struct dbg_view view, canon;
	struct key loose;
	char *loose_components;
};

/* The stored entry for k, if it may answer c (confirm.h): 1 with hit
 * filled (the caller frees it with store_result_free(); its bytes may be
 * lent by the store's hot cache: read-only), else 0. */
int flight_lookup(struct conn *c, const struct key *k, struct store_result *hit);

/* The flight computing k that c may join: one for c's own tenant (a
 * result another tenant's worker computes is no answer for c yet), or
 * NULL. */
struct flight *flight_find(struct server *s, const struct key *k, const struct conn *c);

/* Add request id on c to f's waiters, to be answered through ops with
 * arg (which the waiter then owns; on failure it stays the caller's); c
 * gains a reference, and its client a progress frame at once (the request
 * is acknowledged). 0, or -1 if out of memory. */
int flight_add_waiter(struct flight *f, struct conn *c, uint64_t id,
		      const struct waiter_ops *ops, void *arg);

/* Whether a miss whose request holds about need bytes may start a new
 * flight: not while the daemon stops, and not past the memory bounds on
 * what the requests of compiles not done hold (max-queued-bytes-per-uid,
 * max-queued-bytes). If not, c is told why and 1 returned. */
int flight_refuse_new(struct server *s, struct conn *c, uint64_t id, int64_t need);

/* Start f, which has its key, job and first waiter, for c's user: the
 * server's table owns it from here. */
void flight_launch(struct server *s, struct flight *f, struct conn *c);

/* A progress frame to every request waiting on a flight: "queued" while
 * its job waits for a worker (or the flight asks Redis), "running" once a
 * worker has it. One walk of the table; nothing when no flight is in the
 * air. Called by the server's timer, about once a second. */
void flight_progress(struct server *s);

/* A close hook (conn_on_close()): c's queued jobs may now have nobody
 * to answer, and are dropped before a worker gets them. arg: the server. */
void flight_conn_closed(void *arg, struct conn *c);

/* Whether a portable cubin was compiled under loose key k since start
 * (the flight that compiled it marked it): a miss under it is a layout
 * miss (lineinfo_layout_misses), not a new kernel. */
int flight_loose_seen(const struct server *s, const struct key *k);

/* At the end of server_run(), once the pool and the Redis tier are freed
 * and every connection closed: end the flights still in s's table (those
 * whose Redis lookup was cancelled) as unavailable, so that they, their
 * waiters and the connections these hold are freed. */
void flight_abandon_all(struct server *s);

/* Free d and what it owns (NULL: nothing). */
void flight_dbg_free(struct flight_dbg *d);

#endif
