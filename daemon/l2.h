/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2: the shared second tier of the cache, on Redis, for a whole cluster.
 *
 * Each daemon keeps its SQLite cache as the first tier; results also go to
 * Redis, so a kernel compiled on one node is a hit on every other. The
 * master talks to Redis with hiredis's asynchronous API on its own libevent
 * loop: nothing here ever blocks. Redis is slow or gone? Timeouts on
 * silence, a circuit breaker with periodic probes, and the daemon serves as
 * if alone. The tier is one Redis or a Redis Cluster (keys spread over its
 * masters by hash slot, MOVED and ASK followed, the slot map read again
 * after a failover or a reshard; one breaker per node, so a dead shard
 * turns off its own keys alone).
 *
 * Nothing that comes back from Redis is trusted, and nothing it holds is
 * readable: a value (compiler identity, kind, status, payload, log) is
 * sealed with AES-256-GCM under a key derived from the cluster secret for
 * its scope and for itself, bound to its key's name (and a chunk to its
 * place in its value), so Redis learns sizes alone. A value that does not
 * open, or has the wrong identity or length, is rejected and counted, and
 * the caller compiles instead; one of the earlier, HMAC-sealed format is
 * a miss.
 */
#ifndef PTXCACHE_L2_H
#define PTXCACHE_L2_H

#include <stddef.h>
#include <stdint.h>

#include "proto/buf.h"

struct event_base;
struct l2;

struct l2_config {
	const char *url;        /* "redis://[user:password@]host:port/db", a
	                           Unix socket path ("unix:/run/redis.sock" or
	                           "/path"), or a cluster's seeds:
	                           "redis-cluster://[user:password@]host:port,
	                           host:port..." (database 0 alone) */
	const char *secret_file;/* the cluster secret (systemd LoadCredential=) */
	const char *prefix;     /* key namespace in Redis, e.g. "ptxcache:" */
	int read_only;          /* consume, never publish */
	int connect_timeout_ms; /* e.g. 50 */
	int command_timeout_ms; /* e.g. 50: of silence on the connection (a
	                           command that moves bytes goes on) */
	int64_t max_value;      /* larger values are neither written nor read */
	const char *identity;   /* compiler identity; must match on read */
};

/* A value as the cache holds it (the store's fields). */
struct l2_value {
	int kind;               /* STORE_PTX, STORE_CUBIN or STORE_ARTIFACT */
	int status;
	const void *data;
	size_t data_len;
	const char *log;
	size_t log_len;
};

struct l2_counters {
	int64_t hits, misses, errors, timeouts, rejects, writes, breaker_opens;
	int64_t bytes_read, bytes_written;      /* sealed values, chunks, manifests */
	int64_t redirects;      /* a cluster's MOVED and ASK followed */
	int64_t map_refreshes;  /* a cluster's slot map read and installed */
	int64_t overruns;       /* of timeouts: commands past L2_CMD_MAX_MS, bytes
	                           still moving (the rest: silences, connects) */
	int64_t abandoned;      /* gets ended early: l2_get_abandon() */
	int breaker_open;       /* 1 while requests skip Redis (a cluster: skip
	                           one of the masters of its slot map at least) */
};

/* Called once per l2_get(): found 1 with v (valid during the call only),
 * or found 0 (miss, error, timeout, reject, breaker open). */
typedef void (*l2_get_cb)(void *arg, int found, const struct l2_value *v);

/* Create the tier (it connects lazily and reconnects by itself; a cluster's
 * slot map is asked for at once, in the background). NULL with a message
 * in err for a bad URL, a host name that does not resolve (it is resolved
 * here, blocking, and, for a single Redis, again in the background before
 * each reconnect: hiredis would block the loop on every connect; a
 * cluster's seeds are resolved here and on each reload alone), or an
 * unreadable, empty or over-4-KiB secret. Zero timeouts and max_value
 * take the defaults (50 ms of silence, 1 GiB); NULL prefix: "ptxcache:". */
struct l2 *l2_new(struct event_base *base, const struct l2_config *cfg,
		  struct buf *err);
/* Apply new settings (SIGHUP): address, credentials, secret file (read
 * again even if its path is the same), prefix, read-only, timeouts and
 * size limit; cfg->url NULL or "" switches the tier off (gets miss at once,
 * puts are dropped) until a later call switches it on again. Commands in
 * flight are never dropped: each completes under the settings it was sent
 * with, on its own connection, which closes once they are done. A new
 * address, new seeds or new credentials mean new connections, closed
 * breakers and, for a cluster, an empty slot map read again.
 * Returns 0, or -1 with a message in err and the old settings kept. A
 * host name that changed is resolved here (blocking, as in l2_new()). */
int l2_reconfigure(struct l2 *l2, const struct l2_config *cfg, struct buf *err);

/* url as it may be shown anywhere (--print-config, stats, the log, an
 * error): its password replaced by "***", its user name kept
 * (redis://user:***@host:6379/0, rediss://:***@host, and the same for
 * redis-cluster: URLs); a URL without credentials unchanged.
 * Appended to out. */
void l2_url_redacted(const char *url, struct buf *out);

/* Close the connection and free everything. Callbacks of gets still in
 * flight are NOT called. Never call it from inside an l2 callback. NULL ok. */
void l2_free(struct l2 *l2);

/* Look key up; cb is called exactly once, possibly before l2_get()
 * returns (breaker open, not connected, a Unix socket that is not there),
 * otherwise from the loop (inside hiredis: cb may call l2_get() and
 * l2_put() again). */
void l2_get(struct l2 *l2, const unsigned char key[32], l2_get_cb cb, void *arg);

/* Publish key's value in the background (nothing if read-only, too large,
 * or the breaker is open). v is copied. */
void l2_put(struct l2 *l2, const unsigned char key[32], const struct l2_value *v);

/* The same under prefix + space + hex key: a space (at most
 * L2_SPACE_MAX bytes, e.g. "artifact:u1000:") keeps a kind of entry, or one
 * scope's entries, apart in Redis where an admin can see and purge them.
 * The seal covers the whole name (prefix, space, key), and its key is
 * derived for the scope (prefix + space): a value never opens under
 * another space's name. */
#define L2_SPACE_MAX 64
void l2_get_in(struct l2 *l2, const char *space, const unsigned char key[32], l2_get_cb cb,
	       void *arg);
/* The gets begun with arg whose value is no longer wanted (whoever waited
 * for it has gone): each sends no further command and ends, its cb
 * called with found 0, when the next of its commands out comes back. A
 * large value's chunks are then no longer fetched, nor its record kept. */
void l2_get_abandon(struct l2 *l2, void *arg);
void l2_put_in(struct l2 *l2, const char *space, const unsigned char key[32],
	       const struct l2_value *v);

/* Fleet leases (l2_fleet.c): at most one node of the fleet produces a key
 * at a time. TAKE sets "<key's name>:lease" to this node's name (host:pid)
 * with an expiry of ttl_ms if no node holds it; RENEW sets the expiry
 * again if a node (this one, unless it let it lapse) holds it; DROP lets
 * it lapse now. cb (NULL: nobody asks) is called once: WON (taken or
 * renewed), HELD (another node holds it; for RENEW: nobody does), or
 * FAILED (the tier is off, read-only, unreachable or its breaker open: do
 * without a lease). A lease is an economy, never a proof: a value is
 * still only believed if its seal verifies. */
enum l2_claim_op { L2_CLAIM_TAKE, L2_CLAIM_RENEW, L2_CLAIM_DROP };
enum l2_claim { L2_CLAIM_WON, L2_CLAIM_HELD, L2_CLAIM_FAILED };
typedef void (*l2_claim_cb)(void *arg, enum l2_claim result);
void l2_claim_in(struct l2 *l2, const char *space, const unsigned char key[32],
		 enum l2_claim_op op, int64_t ttl_ms, l2_claim_cb cb, void *arg);

void l2_counters(struct l2 *l2, struct l2_counters *c);

/* A value stored whole, exposed for tests: seal v under secret for the
 * name scope + hex(key) (scope: prefix + space, e.g. "ptxcache:") into
 * out, and open such a value (0: its record into plain, *v pointing into
 * plain; or -1 with the reason in why: "bad magic", "wrong version", "old
 * version", "bad length", "does not open", "wrong identity", "bad kind").
 * v->log is not NUL-terminated. Checks run in that order: magic and
 * version, the seal (GCM's tag, under the name), then every length of the
 * record against the bytes left, identity and kind. l2_seal() replaces
 * out's contents; -1 for an empty secret, an identity over 65535 bytes, a
 * field over 4 GiB or no memory. */
int l2_seal(const char *scope, const unsigned char key[32], const struct l2_value *v,
	    const char *identity, const void *secret, size_t secret_len, struct buf *out);
int l2_open(const char *scope, const unsigned char key[32], const void *bytes, size_t len,
	    const char *identity, const void *secret, size_t secret_len, struct buf *plain,
	    struct l2_value *v, const char **why);

#endif
