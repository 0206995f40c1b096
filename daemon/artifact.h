/* SPDX-License-Identifier: Apache-2.0 */
/*
 * artifact: the JIT's own cache entries (Triton's kernels, Inductor's
 * graphs): bytes a client produced itself, kept per scope, with a lease so
 * that one process on the node produces a missing entry while the others
 * wait for it. The requests artifact_get, artifact_put and
 * artifact_release (proto/PROTOCOL.md, "Artifacts").
 *
 * The master calls artifacts_new() at start, artifacts_progress() each
 * second, artifacts_conn_closed() when a connection goes, artifacts_stop()
 * at SIGTERM and artifacts_free() once its loop has stopped; the requests come through artifact_requests, this
 * family's part of the request table (master.h).
 */
#ifndef PTXCACHE_ARTIFACT_H
#define PTXCACHE_ARTIFACT_H

#include <stdint.h>
#include <sys/types.h>

#include "proto/buf.h"

struct conn;
struct event_base;
struct request_table;
struct fleet;
struct l2;
struct msg;
struct store;
struct syncer;

/* Settings (server_config's artifact_* fields; all live). */
struct artifact_config {
	int64_t max_value;      /* largest value a put may carry */
	int lease_timeout_s;    /* a lease not filled in this ends */
	int wait_s;             /* the longest a get waits for a producer */
	int max_leases;         /* leases one scope may hold at once */
	const char *groups;     /* groups whose members share one scope */
	int trust;              /* sharing = trust: one scope for everyone */
};

/* A scope within a tenant: a uid (>= 0), a group (ARTIFACT_SCOPE_GROUP(gid))
 * or everyone (under sharing = trust: everyone of that tenant). */
#define ARTIFACT_SCOPE_ALL (-1)
#define ARTIFACT_SCOPE_GROUP(gid) (-2 - (int64_t)(gid))

struct artifact_counters {
	int64_t hits, misses, puts, put_bytes, leases, waits, wait_hits,
		wait_timeouts, lease_expiries, lease_releases, lease_closes,
		lease_handoffs, conflicts, l2_hits;
	int64_t fd_hits;        /* hits answered with the value's descriptor */
	int64_t file_hits;      /* hits sent inline from the value's file */
	int64_t fd_fallbacks;   /* of those, asked for a descriptor but sent
	                           inline (conn_send_fd(): output queued, the
	                           socket full, CONN_MAX_FDS) */
	int64_t put_commits;            /* commits of puts (store_batch.h): fewer
	                                   than puts where they shared one */
	int64_t spooled_puts;           /* puts whose value went from the
	                                   socket to its file as it arrived */
	int64_t leases_held, waiting;   /* now */
	int64_t syncing;                /* now: spooled puts whose files are
	                                   being synced (syncer.h) */
};

struct artifacts;

/* NULL when memory runs out. l2 may be NULL (no shared tier); it is read
 * through *l2 at each use, so a reload that replaces it is seen. sync
 * (the server's, freed after artifacts_stop()) syncs spooled puts' files. */
struct artifacts *artifacts_new(struct event_base *base, struct store *store,
				struct l2 **l2, struct fleet *fleet, struct syncer *sync,
				const struct artifact_config *cfg);

/* New settings (SIGHUP). Group names are resolved here, not per request.
 * A bound that shrinks applies to leases and waits taken from now on. */
void artifacts_configure(struct artifacts *a, const struct artifact_config *cfg);

/* Answer every waiter with a miss and end every lease (SIGTERM). */
void artifacts_stop(struct artifacts *a);

/* Free it all, once the loop has stopped. NULL ok. */
void artifacts_free(struct artifacts *a);

/* artifact_get, artifact_put and artifact_release (master.h). */
extern const struct request_table artifact_requests;

/* A progress frame to every waiting get (the server's timer, each second). */
void artifacts_progress(struct artifacts *a);

/* c is closing: the leases it holds pass on, its waits end. */
void artifacts_conn_closed(struct artifacts *a, struct conn *c);

/* The scope c's artifacts live in (for ls, evict and the tests' views):
 * the number the store keeps, of c's tenant (tenant_number()). In keys,
 * Redis and logs a scope is "u1000", "g2000" or "all", with "NAME/" in
 * front on tenant NAME's socket. */
int64_t artifact_scope(struct artifacts *a, struct conn *c);

/* Whether ns is a valid namespace (1 to 32 of [a-z0-9._-], starting with a
 * letter or digit). */
int artifact_ns_valid(const char *ns, size_t n);

void artifacts_counters(struct artifacts *a, struct artifact_counters *out);

#endif
