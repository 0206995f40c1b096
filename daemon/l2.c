/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2: the shared second tier on Redis; see l2.h for the contract.
 *
 * What: hiredis asynchronous connections on the master's libevent loop:
 * one to a single Redis (redis://, unix:), or one per node of a Redis
 * Cluster (redis-cluster://seeds), each made on demand. l2_get() sends
 * GETRANGE prefix+hex 0 1048576 and opens the envelope in the reply;
 * l2_put() seals the value and sends SET in the background. Nothing else
 * is ever sent but AUTH and SELECT when a connection opens, and to a
 * cluster CLUSTER SLOTS and ASKING (the ACL needs those, and no more).
 *
 * Values of any size (up to l2-max-value, 1 GiB by default): a sealed
 * value of up to 1 MiB (L2_INLINE) is stored whole under its key. A
 * larger one is a transfer (struct l2_xfer): its sealed bytes cut into
 * 1 MiB chunks under "<key's name>:<id>:<i>", written with at most
 * L2_WINDOW (4) chunk commands in flight, and, once every chunk is
 * written, a manifest under the key itself. A reader finds the manifest,
 * checks it, fetches the chunks it names with the same window, and opens
 * the whole as one envelope. So:
 *  - no one command carries more than 1 MiB: none holds Redis, or a
 *    connection other lookups share, for long (bench/tier.py measures the
 *    small lookups of another node while 100 MB crosses);
 *  - the id is the first 16 bytes of the value's own HMAC: another write
 *    of the key (other bytes) names other chunks, so a reader never
 *    assembles one value from the chunks of two writes; a writer that dies
 *    between chunks wrote no manifest, and the key still names the value
 *    before it (or nothing); its chunks are left to Redis's eviction;
 *  - the manifest is sealed like an envelope (HMAC over the key and its
 *    body) and bounded before it is believed: a chunk size in
 *    [4 KiB, 64 MiB], a count that matches the length, a length within
 *    l2-max-value, so no one without the secret makes a reader fetch or
 *    allocate anything;
 *  - a chunk that is gone is a miss, one of the wrong length a reject, and
 *    the assembled bytes pass the envelope's own HMAC or are a reject;
 *  - a transfer, however many commands it takes, is counted once (a hit,
 *    a miss, a write...) and feeds the breaker once.
 *
 *
 * Layers: the value layer (transfers: l2_get_in(), l2_put_in(),
 * l2_claim_in(), the envelope and the manifest, xfer_step()'s reading of
 * each reply) hands each command to send_cmd(), whose argv[1] is always
 * the key (so a value's chunks spread over a cluster's shards); below it
 * the connection layer (nodes, routing, timers, breakers) knows nothing
 * of values.
 *
 * Why it is built this way:
 *  - hiredis 0.14 has no timeouts in its asynchronous API, so every command
 *    and every connect carries a libevent timer of ours. The timer bounds
 *    its connection's silence, not the command's size: when it fires and
 *    the connection has moved bytes since it was armed (read events, writes
 *    that shrank hiredis's output buffer, counted by our own libevent
 *    adapter; or the kernel's send queue, TIOCOUTQ, draining), it is armed
 *    again (but never past L2_CMD_MAX_MS: bytes that trickle without a
 *    pause as long as the period hold nothing for ever). A connection
 *    silent for a whole period is dropped with
 *    redisAsyncFree() (not redisAsyncDisconnect(), which waits politely for
 *    the pending replies of a server that is not answering): the replies
 *    still owed on it can never be matched to newer requests, and each
 *    pending command is completed exactly once, as a timeout. Only that
 *    connection: a cluster's other nodes go on.
 *  - A command is completed (counted, its callback called) exactly once,
 *    by whichever comes first: its reply, its timer, or the end of its
 *    connection; hiredis calls our reply callback exactly once too (with a
 *    NULL reply when the connection goes away), so a command holds two
 *    references, one for each, and is freed when both are gone.
 *  - GETRANGE rather than GET: Redis itself then sends at most 1 MiB + 1
 *    bytes for a key (a chunk's own length + 1 for a chunk), so a huge
 *    value planted under our prefix cannot make every node buffer it (a
 *    missing key reads as "", which no envelope is).
 *  - hiredis 0.14 calls getaddrinfo() on every connect, which would block
 *    the loop: it only ever gets a numeric address. A host name is
 *    resolved (blocking) in l2_new() and on a reload that names a new one;
 *    after that, each new connection looks it up again in the background
 *    (evdns, reading /etc/resolv.conf and /etc/hosts afresh), and once the
 *    name points elsewhere the connection is replaced, so a Redis that
 *    moved is found again without a restart.
 *  - Reloads (l2_reconfigure()) never drop a request in flight: settings
 *    are generations (struct l2_conf) and a command keeps the one it was
 *    sent under; a connection that a new address or new credentials
 *    replace is retired with redisAsyncDisconnect(), which closes it only
 *    once the replies owed on it are in.
 *  - Circuit breakers, one per node (a single Redis is one node): L2_TRIP
 *    consecutive failures open it for a period (1 s, doubling on each
 *    failed probe up to 30 s); while open, gets of that node's keys answer
 *    "not found" at once and puts are dropped; after the period the next
 *    request is a probe (half-open), and only its outcome counts: success
 *    closes the breaker, failure reopens it. Connections are made on
 *    demand, so the breaker is also the reconnect back-off. A failure is a
 *    connection that could not be made or went away, or a silence (above):
 *    an error reply (OOM, NOAUTH, CLUSTERDOWN) is Redis answering, counted
 *    as an error but no failure; replies that do not verify are Redis
 *    working as asked (someone else's data is wrong): rejects. One dead
 *    shard turns its own keys off, not the others'.
 *  - A cluster (cluster.c does the arithmetic): the slot map is read with
 *    CLUSTER SLOTS from a seed at start, and again, in the background, at
 *    most every L2_REFRESH_MS (doubling while reads fail, up to 5 s),
 *    after a MOVED, a failed or silent node, a CLUSTERDOWN or a command
 *    skipped by an open breaker (its slot may have moved to a live node),
 *    and every L2_DOWN_REFRESH_MS while the map names a node that is down
 *    (its replica is being promoted). Each command goes to its slot's
 *    master (argv[1]'s slot); a slot with no
 *    known owner goes to any node, which redirects it. MOVED updates that
 *    slot's owner and resends there; ASK sends ASKING and the command to
 *    that node, once; at most L2_REDIRECTS_MAX redirections, then an error.
 *    A command whose connection failed (a master killed) waits for the
 *    next map, its timer running, and goes where it says (GETRANGE and SET
 *    may be sent twice). A cluster command keeps its formatted bytes until
 *    it completes, to be sent again. Only numeric addresses reach hiredis
 *    (seeds resolved when the URL is parsed; the cluster reports IPs, and
 *    cluster.c refuses a map or a redirection that names a host).
 *  - The envelope is verified before any byte of it is used, and every
 *    length is checked against the bytes that remain before it is read.
 *
 * Never: block the loop; trust a byte from Redis before its HMAC verifies;
 * log the secret, a password, or a value; answer a request from a value
 * that failed any check; call a callback twice.
 *
 * Envelope (all integers big-endian):
 *   "PXL2" | version u8 (1) | kind u8 | status i32 | identity_len u16 |
 *   identity | data_len u32 | data | log_len u32 | log |
 *   HMAC-SHA-256(secret, key[32] || every byte above)
 * Manifest of a chunked envelope (69 bytes):
 *   "PXLM" | version u8 (1) | chunk_len u32 | total u64 | n_chunks u32 |
 *   id[16] (the envelope's HMAC's first 16 bytes) |
 *   HMAC-SHA-256(secret, key[32] || every byte above)
 * Chunk i (0-based) of it: bytes [i * chunk_len, (i + 1) * chunk_len) of
 * the envelope, under the key's name + ":" + hex(id) + ":" + decimal i.
 */
#include "daemon/l2.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "daemon/cluster.h"
#include "daemon/log.h"

#define L2_MAGIC "PXL2"
#define L2_VERSION 1
#define L2_MAC_LEN 32
/* magic, version, kind, status, identity_len, data_len, log_len */
#define L2_FIXED (4 + 1 + 1 + 4 + 2 + 4 + 4)
#define L2_SECRET_MAX 4096
#define L2_PREFIX_MAX 256
#define L2_TRIP 5                       /* consecutive failures to open */
#define L2_OPEN_MS 1000                 /* first open period */
#define L2_OPEN_MAX_MS 30000            /* cap of the doubling */
#define L2_DEFAULT_TIMEOUT_MS 50
/* No command outlives this (or twice its silence bound, if longer), bytes
 * moving or not: one carries at most a chunk each way, so a command still
 * going after 10 s crosses under about 400 KiB/s with its window's others,
 * a server trickling bytes to hold this node rather than a tier. */
#define L2_CMD_MAX_MS 10000
#define L2_DEFAULT_MAX_VALUE (1LL << 30)
/* Values: a sealed value of up to L2_INLINE bytes is stored whole under
 * its key; a larger one as chunks of L2_CHUNK bytes, L2_WINDOW of them in
 * flight per transfer, and a manifest under its key. */
#define L2_INLINE (1 << 20)
#define L2_CHUNK (1 << 20)
#define L2_WINDOW 4
#define L2_ID_LEN 16                    /* of the value's HMAC: its chunks' id */
#define L2_MANIFEST_MAGIC "PXLM"
/* magic, version, chunk_len u32, total u64, n_chunks u32, id */
#define L2_MANIFEST_BODY (4 + 1 + 4 + 8 + 4 + L2_ID_LEN)
#define L2_MANIFEST_LEN (L2_MANIFEST_BODY + L2_MAC_LEN)
#define L2_CHUNK_MIN (4 << 10)          /* a reader's bounds on a writer's */
#define L2_CHUNK_MAX (64 << 20)

/* How a transfer ends; OUT_REPLY: a command's reply, for its transfer to read. */

/* How a command ended. Only a connection that failed (OUT_ERROR: no
 * connection, or it went away under the command) or was silent for a whole
 * period (OUT_TIMEOUT) counts toward its node's breaker: an error reply
 * (OUT_REFUSED: OOM, NOAUTH, CLUSTERDOWN) is Redis answering, counted as an
 * error all the same. OUT_SKIPPED: not sent, its node's breaker is open
 * (not counted). OUT_MAP: a slot map read and installed. OUT_REPLY: a
 * command's reply, for its transfer to read (xfer_step()). */
enum outcome { OUT_HIT, OUT_MISS, OUT_REJECT, OUT_WRITTEN, OUT_ERROR, OUT_TIMEOUT,
	       OUT_REFUSED, OUT_SKIPPED, OUT_MAP, OUT_REPLY };
enum breaker { BR_CLOSED, BR_OPEN, BR_HALF_OPEN };

#define L2_SEEDS_MAX 64                 /* seeds in one redis-cluster:// URL */
#define L2_NODES_MAX 1024               /* nodes ever known: beyond, a hostile map */
#define L2_REDIRECTS_MAX 5              /* MOVED/ASK followed per command */
#define L2_REFRESH_MS 100               /* at most ten slot-map reads a second, */
#define L2_REFRESH_MAX_MS 5000          /* doubling while they fail, up to this */
#define L2_DOWN_REFRESH_MS 500          /* while the map names a node that is down:
                                           until its replica takes over */

/* One generation of the tier's settings: l2_new() makes the first, each
 * l2_reconfigure() (SIGHUP) the next. A command holds a reference to the
 * generation it was sent under, so its reply is checked with the secret,
 * identity and size limit of its own request whatever a reload changed
 * meanwhile; the connection is replaced only if the address or the
 * credentials changed. */
struct l2_conf {
	int refs;
	/* Where Redis is; where is for log lines (never credentials). */
	char *path;                     /* Unix socket, or NULL for TCP */
	char *name;                     /* the URL's host name, resolved again on
	                                   each reconnect; NULL for a numeric
	                                   address or a Unix socket */
	char host[NI_MAXHOST];          /* numeric: the latest resolution */
	int port;
	int db;
	char *user, *password;          /* AUTH, when the URL has them */
	char *where;
	/* redis-cluster://: the seeds, numeric (names resolved when parsed). */
	int cluster;
	int nseeds;
	struct cluster_addr seeds[L2_SEEDS_MAX];

	unsigned char secret[L2_SECRET_MAX];
	size_t secret_len;
	char *prefix;
	char *identity;
	int read_only;
	int connect_timeout_ms, command_timeout_ms;
	int64_t max_value;
};

struct l2_node;

/* What one command is: the lookup or write of a key, or of a chunk; a
 * fleet lease's SET. */
enum op { OP_GET, OP_SET, OP_GET_CHUNK, OP_SET_CHUNK, OP_CLAIM };

/* Room for prefix, space, 64 hex digits, and a chunk's ":id:index". */
#define NAME_MAX_LEN (L2_PREFIX_MAX + L2_SPACE_MAX + 64 + 2 * L2_ID_LEN + 16)

struct l2_cmd {
	struct l2 *l2;
	struct l2_conf *conf;           /* the settings it was sent under (a ref) */
	struct l2_node *node;           /* where it went (its breaker) */
	redisAsyncContext *ac;          /* the connection it went out on */
	struct l2_cmd *prev, *next;     /* l2->pending, until completed */
	struct event *timer;
	struct l2_xfer *xfer;           /* the transfer it is a step of (a ref);
	                                   NULL: CLUSTER SLOTS */
	enum op op;
	uint32_t chunk;                 /* OP_*_CHUNK: which one */
	int refs;                       /* completion + hiredis's callback */
	int completed;
	int probe;                      /* the half-open breaker's probe */
	int fail;                       /* how a NULL reply counts */
	int internal;                   /* CLUSTER SLOTS: not counted */
	int64_t timeout_ms;             /* of silence on its connection */
	uint64_t seen;                  /* the connection's progress when armed */
	int64_t armed_us;               /* when its timer was armed */
	int64_t sent_us;                /* when it was sent (L2_CMD_MAX_MS) */
	int outq;                       /* and its kernel send queue's bytes */
	sds wire;                       /* a cluster's: the command, to resend */
	unsigned slot;                  /* a cluster's: argv[1]'s */
	int redirects;                  /* and retries after a failed connection */
	int parked;                     /* waits for the next slot map (park()) */
	int waited;                     /* once, for a node whose breaker is open */
};

/* One l2_get_in() or l2_put_in(): the commands it takes, the bytes it
 * moves, and its one outcome. A value of up to L2_INLINE bytes sealed is
 * one command; a larger one is chunks and a manifest (see the top). */
struct l2_xfer {
	struct l2 *l2;
	struct l2_conf *conf;           /* the settings it began under (a ref) */
	l2_get_cb cb;                   /* NULL: a put or a claim */
	l2_claim_cb claim_cb;           /* a claim's, if it wants the answer */
	int claim;                      /* a fleet lease's SET, not a value's */
	void *arg;
	unsigned char key[32];
	char name[NAME_MAX_LEN];        /* the key's name in Redis */
	size_t name_len;
	char space[L2_SPACE_MAX + 1];
	int probe;                      /* its first command: the breaker's probe */
	int refs;                       /* 1 until finished, + 1 a command */
	int finished;
	struct buf data;                /* put: the sealed value; get: assembly */
	unsigned char id[L2_ID_LEN];    /* names this write's chunks */
	size_t chunk_len;
	uint32_t n_chunks, sent, done;  /* chunks in all, sent, answered */
};

#define L2_RETIRED_MAX 8

/* One server: the Redis of a redis:// or unix: URL (single), or a node of
 * a cluster. Its connection, made on demand, and its own breaker: one dead
 * shard turns itself off, not the others. Nodes are freed by l2_free()
 * alone, so commands, timers and connections may point to them. */
struct l2_node {
	struct l2 *l2;
	struct l2_node *next;           /* l2->nodes */
	int single;                     /* its address is l2->conf's */
	int seed, in_map;               /* a cluster's: asked for the slot map */
	int down;                       /* failed since it last connected */
	struct cluster_addr addr;       /* a cluster's node: numeric */
	char where[CLUSTER_HOST_MAX + 16];

	redisAsyncContext *ac;          /* NULL: not connected */
	char ac_host[NI_MAXHOST];       /* the address ac went to */
	int connected;
	struct event *connect_timer;
	/* Connections replaced by a reload or a new address: they close once
	 * the replies still owed on them are in (redisAsyncDisconnect()). */
	redisAsyncContext *retired[L2_RETIRED_MAX];

	enum breaker state;
	int failures;                   /* consecutive, while closed */
	int probing;                    /* a probe is out */
	int64_t open_until_us;
	int64_t period_ms;
};

struct l2 {
	struct event_base *base;
	struct l2_conf *conf;           /* the current settings */
	int off;                        /* switched off by a reload */

	struct l2_node *nodes;          /* every node known */
	int nnodes;
	struct l2_node *single;         /* a redis:// or unix: URL's; NULL: a cluster */
	struct l2_cmd *pending;

	/* A cluster: who serves each slot (NULL: not known; a command goes
	 * to any node then, which redirects it), and the map's refresh. */
	struct l2_node *owner[CLUSTER_SLOTS];
	struct l2_node *rr;             /* the node asked last */
	int refreshing;                 /* a CLUSTER SLOTS is out */
	int refresh_fails;              /* in a row: the limit doubles */
	int64_t refresh_after_us;       /* the rate limit */
	struct event *refresh_timer;

	/* Resolving conf->name again, in the background (evdns). */
	struct evdns_base *dns;         /* the lookup's base, freed at the next */
	struct l2_conf *dns_conf;       /* whose name is looked up (a ref) */
	int resolving;

	char last_error[160];

	char node[96];                  /* this daemon, as its fleet leases name it */
	int64_t reject_log_us;          /* rate limit of reject log lines */
	int64_t rejects_unlogged;
	int freeing;

	struct l2_counters n;
};

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void ms_to_tv(int64_t ms, struct timeval *tv)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)(ms % 1000 * 1000);
}

static void note_error(struct l2 *l2, const char *what)
{
	snprintf(l2->last_error, sizeof l2->last_error, "%s",
		 what && *what ? what : "unknown error");
}

/* ---- the envelope ------------------------------------------------------ */

static void put_be(unsigned char *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

static uint64_t get_be(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* HMAC-SHA-256(secret, key || body) into out. 0, or -1 if OpenSSL fails. */
static int mac(const void *secret, size_t secret_len, const unsigned char key[32],
	       const void *body, size_t body_len, unsigned char out[L2_MAC_LEN])
{
	EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *c = m ? EVP_MAC_CTX_new(m) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	size_t n = 0;
	int ok = c && secret_len > 0 &&
		 EVP_MAC_init(c, secret, secret_len, params) == 1 &&
		 EVP_MAC_update(c, key, 32) == 1 &&
		 EVP_MAC_update(c, body, body_len) == 1 &&
		 EVP_MAC_final(c, out, &n, L2_MAC_LEN) == 1 && n == L2_MAC_LEN;

	EVP_MAC_CTX_free(c);
	EVP_MAC_free(m);
	return ok ? 0 : -1;
}

/* The sealed size of v, or 0 if a field is too long for the envelope. */
static size_t sealed_len(const struct l2_value *v, size_t id_len)
{
	if (id_len > UINT16_MAX || v->data_len > UINT32_MAX || v->log_len > UINT32_MAX)
		return 0;
	return L2_FIXED + id_len + v->data_len + v->log_len + L2_MAC_LEN;
}

int l2_seal(const unsigned char key[32], const struct l2_value *v,
	    const char *identity, const void *secret, size_t secret_len,
	    struct buf *out)
{
	size_t id_len = identity ? strlen(identity) : 0;
	size_t total = sealed_len(v, id_len);
	unsigned char *p;

	buf_reset(out);
	if (!total || v->kind < 0 || v->kind > 255 || !secret_len ||
	    buf_reserve(out, total) < 0)
		return -1;
	p = (unsigned char *)out->data;
	memcpy(p, L2_MAGIC, 4);
	p[4] = L2_VERSION;
	p[5] = (unsigned char)v->kind;
	put_be(p + 6, (uint32_t)v->status, 4);
	put_be(p + 10, id_len, 2);
	p += 12;
	if (id_len)
		memcpy(p, identity, id_len);
	p += id_len;
	put_be(p, v->data_len, 4);
	p += 4;
	if (v->data_len)
		memcpy(p, v->data, v->data_len);
	p += v->data_len;
	put_be(p, v->log_len, 4);
	p += 4;
	if (v->log_len)
		memcpy(p, v->log, v->log_len);
	p += v->log_len;
	if (mac(secret, secret_len, key, out->data, total - L2_MAC_LEN, p) < 0)
		return -1;
	out->len = total;
	out->data[total] = '\0';
	return 0;
}

int l2_open(const unsigned char key[32], const void *bytes, size_t len,
	    const char *identity, const void *secret, size_t secret_len,
	    struct l2_value *v, const char **why)
{
	const unsigned char *p = bytes;
	size_t id_len, data_len, log_len, off;
	size_t want_id_len = identity ? strlen(identity) : 0;
	unsigned char want[L2_MAC_LEN];

	memset(v, 0, sizeof *v);
	/* The framing first: magic and version say how to read the rest. */
	if (!p || len < 4) {
		*why = "bad length";
		return -1;
	}
	if (memcmp(p, L2_MAGIC, 4)) {
		*why = "bad magic";
		return -1;
	}
	if (len < 5) {
		*why = "bad length";
		return -1;
	}
	if (p[4] != L2_VERSION) {
		*why = "wrong version";
		return -1;
	}
	/* Every length against what remains, before it is used. */
	*why = "bad length";
	if (len < L2_FIXED + L2_MAC_LEN)
		return -1;
	len -= L2_MAC_LEN;              /* the body; the mac follows it */
	id_len = (size_t)get_be(p + 10, 2);
	off = 12;
	if (id_len > len - off)
		return -1;
	off += id_len;
	if (4 > len - off)
		return -1;
	data_len = (size_t)get_be(p + off, 4);
	off += 4;
	if (data_len > len - off)
		return -1;
	off += data_len;
	if (4 > len - off)
		return -1;
	log_len = (size_t)get_be(p + off, 4);
	off += 4;
	if (log_len != len - off)
		return -1;

	/* Then the mac, over the key and the whole body, in constant time. */
	*why = "bad hmac";
	if (mac(secret, secret_len, key, p, len, want) < 0 ||
	    CRYPTO_memcmp(want, p + len, L2_MAC_LEN))
		return -1;

	/* Authentic from here on; still ours? */
	if (id_len != want_id_len || (id_len && memcmp(p + 12, identity, id_len))) {
		*why = "wrong identity";
		return -1;
	}
	if (p[5] < 1 || p[5] > 3) {     /* STORE_PTX, STORE_CUBIN, STORE_ARTIFACT */
		*why = "bad kind";
		return -1;
	}
	v->kind = p[5];
	v->status = (int)(int32_t)(uint32_t)get_be(p + 6, 4);
	off = 12 + id_len + 4;
	v->data = p + off;
	v->data_len = data_len;
	off += data_len + 4;
	v->log = (const char *)p + off;
	v->log_len = log_len;
	*why = NULL;
	return 0;
}

/* The manifest of a chunked value, sealed like an envelope: the chunk
 * size, the sealed value's length, the number of chunks and the id that
 * names them (the first L2_ID_LEN bytes of the value's own HMAC, so
 * another write of the key, or of another key, names other chunks). */
static int manifest_seal(const unsigned char key[32], uint32_t chunk_len, uint64_t total,
			 uint32_t n_chunks, const unsigned char id[L2_ID_LEN],
			 const void *secret, size_t secret_len, unsigned char out[L2_MANIFEST_LEN])
{
	memcpy(out, L2_MANIFEST_MAGIC, 4);
	out[4] = L2_VERSION;
	put_be(out + 5, chunk_len, 4);
	put_be(out + 9, total, 8);
	put_be(out + 17, n_chunks, 4);
	memcpy(out + 21, id, L2_ID_LEN);
	return mac(secret, secret_len, key, out, L2_MANIFEST_BODY, out + L2_MANIFEST_BODY);
}

/* Open a manifest read under key: 0 with its fields, or -1 and why. The
 * HMAC first, then every field against the bounds a reader keeps: a
 * manifest cannot make a reader fetch more than max_value bytes, or
 * chunks of a size outside [L2_CHUNK_MIN, L2_CHUNK_MAX]. */
static int manifest_open(const unsigned char key[32], const void *bytes, size_t len,
			 const void *secret, size_t secret_len, int64_t max_value,
			 size_t *chunk_len, uint64_t *total, uint32_t *n_chunks,
			 unsigned char id[L2_ID_LEN], const char **why)
{
	const unsigned char *p = bytes;
	unsigned char want[L2_MAC_LEN];

	*why = "bad length";
	if (len != L2_MANIFEST_LEN)
		return -1;
	*why = "wrong version";
	if (p[4] != L2_VERSION)
		return -1;
	*why = "bad hmac";
	if (mac(secret, secret_len, key, p, L2_MANIFEST_BODY, want) < 0 ||
	    CRYPTO_memcmp(want, p + L2_MANIFEST_BODY, L2_MAC_LEN))
		return -1;
	*chunk_len = (size_t)get_be(p + 5, 4);
	*total = get_be(p + 9, 8);
	*n_chunks = (uint32_t)get_be(p + 17, 4);
	memcpy(id, p + 21, L2_ID_LEN);
	*why = "bad manifest";
	if (*chunk_len < L2_CHUNK_MIN || *chunk_len > L2_CHUNK_MAX || *total == 0 ||
	    *n_chunks != (*total + *chunk_len - 1) / *chunk_len)
		return -1;
	*why = "larger than l2-max-value";
	if (*total > (uint64_t)max_value)
		return -1;
	*why = NULL;
	return 0;
}

/* ---- configuration ----------------------------------------------------- */

static int read_secret(struct l2_conf *l2, const char *path, struct buf *err)
{
	unsigned char tmp[L2_SECRET_MAX + 2];
	size_t n = 0;
	int fd;

	if (!path || !*path) {
		buf_printf(err, "l2 needs a secret file (l2-secret-file)");
		return -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		buf_printf(err, "cannot read l2 secret '%s': %s", path, strerror(errno));
		return -1;
	}
	while (n < sizeof tmp) {
		ssize_t r = read(fd, tmp + n, sizeof tmp - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			buf_printf(err, "cannot read l2 secret '%s': %s", path, strerror(errno));
			close(fd);
			OPENSSL_cleanse(tmp, sizeof tmp);
			return -1;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (n && tmp[n - 1] == '\n')
		n--;
	if (n && tmp[n - 1] == '\r')
		n--;
	if (n > L2_SECRET_MAX)
		buf_printf(err, "l2 secret '%s' is longer than %d bytes", path, L2_SECRET_MAX);
	else if (n == 0)
		buf_printf(err, "l2 secret '%s' is empty", path);
	else
		memcpy(l2->secret, tmp, n);
	OPENSSL_cleanse(tmp, sizeof tmp);
	if (n == 0 || n > L2_SECRET_MAX)
		return -1;
	l2->secret_len = n;
	return 0;
}

/* The URL as it may be shown: credentials replaced by "***". */
static void redacted(const char *url, struct buf *out)
{
	int cluster = !strncmp(url, "redis-cluster://", 16);
	const char *auth = cluster ? url + 16 : strncmp(url, "redis://", 8) ? NULL : url + 8;
	const char *end = auth ? auth + strcspn(auth, "/") : NULL;
	const char *at = NULL;

	for (const char *q = auth; q && q < end; q++)
		if (*q == '@')
			at = q;
	if (at)
		buf_printf(out, "%s://***%s", cluster ? "redis-cluster" : "redis", at);
	else
		buf_puts(out, url);
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decode [s, e) into a new string; NULL if malformed or no memory. */
static char *pct_decode(const char *s, const char *e)
{
	char *out = malloc((size_t)(e - s) + 1), *o = out;

	if (!out)
		return NULL;
	while (s < e) {
		if (*s == '%') {
			int h, l;
			if (e - s < 3 || (h = hexval(s[1])) < 0 || (l = hexval(s[2])) < 0) {
				free(out);
				return NULL;
			}
			*o++ = (char)(h << 4 | l);
			s += 3;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
	return out;
}

/* host[:port] or [v6]:port in [*host, end): *host, *hend the host alone
 * (brackets off), *colon the ':' before a port or NULL. 0, or -1. */
static int split_host(const char **host, const char *end, const char **hend,
		      const char **colon)
{
	const char *h = *host;

	if (*h == '[') {
		*hend = memchr(h, ']', (size_t)(end - h));
		if (!*hend)
			return -1;
		*colon = *hend + 1 < end && (*hend)[1] == ':' ? *hend + 1 : NULL;
		if (*hend + 1 < end && !*colon)
			return -1;
		*host = h + 1;
	} else {
		*colon = memchr(h, ':', (size_t)(end - h));
		*hend = *colon ? *colon : end;
	}
	return 0;
}

static int parse_num(const char *s, const char *e, long max, long *out)
{
	long v = 0;

	if (s == e)
		return -1;
	for (; s < e; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
		if (v > max)
			return -1;
	}
	*out = v;
	return 0;
}

/* name (a host name or a numeric address) as a numeric address into out
 * (outlen bytes), IPv4 first as hiredis would: blocking, for start-up and
 * reloads alone. 0, or -1 with a message in err. */
static int resolve_numeric(const char *name, char *out, size_t outlen, struct buf *err)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	int e;

	hints.ai_family = AF_INET;
	e = getaddrinfo(name, NULL, &hints, &res);
	if (e) {
		hints.ai_family = AF_INET6;
		e = getaddrinfo(name, NULL, &hints, &res);
	}
	if (!e) {
		e = getnameinfo(res->ai_addr, res->ai_addrlen, out, (socklen_t)outlen, NULL, 0,
				NI_NUMERICHOST);
		freeaddrinfo(res);
	}
	if (e) {
		buf_printf(err, "cannot resolve l2 host '%s': %s", name, gai_strerror(e));
		return -1;
	}
	return 0;
}

/* redis-cluster://[user:password@]host[:port][,host[:port]...][/]: the
 * seeds into l2 (numeric; names resolved here, blocking). auth: after the
 * scheme; shown: the URL as it may be logged. */
static int parse_cluster_url(struct l2_conf *l2, const char *auth, struct buf *shown,
			     struct buf *err)
{
	const char *end = auth + strcspn(auth, "/"), *at = NULL, *h;
	struct buf disp = BUF_INIT;     /* shown, once parsed */

	if (*end == '/' && end[1] && strcmp(end + 1, "0")) {
		buf_printf(err, "bad l2 URL '%s': a cluster has database 0 alone", shown->data);
		return -1;
	}
	for (const char *q = auth; q < end; q++)
		if (*q == '@')
			at = q;
	if (at) {
		const char *c = memchr(auth, ':', (size_t)(at - auth));
		if (!c) {
			buf_printf(err, "bad l2 URL '%s': credentials are user:password or :password",
				   shown->data);
			return -1;
		}
		if ((c > auth && !(l2->user = pct_decode(auth, c))) ||
		    !(l2->password = pct_decode(c + 1, at)))
			goto bad;
	}
	l2->cluster = 1;
	h = at ? at + 1 : auth;
	if (h == end || end[-1] == ',')
		goto bad;
	buf_puts(&disp, "redis-cluster://");
	while (h < end) {
		const char *he = h + strcspn(h, ","), *colon, *hend, *host = h;
		struct cluster_addr *a;
		char name[NI_MAXHOST];
		long port = 6379;

		if (he > end)
			he = end;
		if (l2->nseeds == L2_SEEDS_MAX) {
			buf_printf(err, "bad l2 URL '%s': more than %d seeds", shown->data, L2_SEEDS_MAX);
			goto fail;
		}
		if (split_host(&host, he, &hend, &colon) < 0)
			goto bad;
		if (hend == host || (size_t)(hend - host) >= sizeof name ||
		    (colon && parse_num(colon + 1, he, 65535, &port) < 0) || port == 0)
			goto bad;
		memcpy(name, host, (size_t)(hend - host));
		name[hend - host] = '\0';
		a = &l2->seeds[l2->nseeds++];
		if (cluster_numeric_host(name)) {
			if (strlen(name) >= sizeof a->host)
				goto bad;
			snprintf(a->host, sizeof a->host, "%s", name);
		} else {
			char num[NI_MAXHOST];
			if (resolve_numeric(name, num, sizeof num, err) < 0)
				goto fail;
			if (strlen(num) >= sizeof a->host)
				goto bad;
			snprintf(a->host, sizeof a->host, "%s", num);
		}
		a->port = (int)port;
		buf_printf(&disp, "%s%s:%d", l2->nseeds > 1 ? "," : "", name, a->port);
		h = he < end ? he + 1 : he;
	}
	if (!disp.data) {
		buf_printf(err, "out of memory");
		goto fail;
	}
	buf_reset(shown);
	buf_puts(shown, disp.data);
	buf_free(&disp);
	return 0;
bad:
	buf_printf(err, "bad l2 URL '%s': expected "
		   "redis-cluster://[user:password@]host[:port][,host[:port]...]", shown->data);
fail:
	buf_free(&disp);
	return -1;
}

/* Fill where to connect from url. A host name is resolved here, blocking
 * (at start, and on a reload that names a new one), unless known holds the
 * same name already resolved: then its address is taken, and the name is
 * resolved again in the background at the next connect. */
static int parse_url(struct l2_conf *l2, const char *url, const struct l2_conf *known,
		     struct buf *err)
{
	struct buf shown = BUF_INIT;
	const char *auth, *end, *at = NULL, *host, *hend, *colon;
	long port = 6379, db = 0;
	struct sockaddr_un sa;
	int rc = -1;

	if (!url || !*url) {
		buf_printf(err, "l2 needs a URL: redis://host:port/db or a Unix socket path");
		return -1;
	}
	redacted(url, &shown);
	if (url[0] == '/' || !strncmp(url, "unix:", 5)) {
		const char *path = url[0] == '/' ? url : !strncmp(url, "unix://", 7) ? url + 7 : url + 5;
		if (!*path || strlen(path) >= sizeof sa.sun_path) {
			buf_printf(err, "bad l2 socket path '%s'", path);
			goto out;
		}
		if (!(l2->path = strdup(path)))
			goto oom;
		buf_reset(&shown);
		buf_printf(&shown, "unix:%s", path);
		rc = 0;
		goto out;
	}
	if (!strncmp(url, "redis-cluster://", 16)) {
		rc = parse_cluster_url(l2, url + 16, &shown, err);
		goto out;
	}
	if (strncmp(url, "redis://", 8)) {
		buf_printf(err, "bad l2 URL '%s': expected redis://host:port/db, "
			   "redis-cluster://host:port,host:port... or a Unix socket path",
			   shown.data);
		goto out;
	}
	auth = url + 8;
	end = auth + strcspn(auth, "/");
	for (const char *q = auth; q < end; q++)
		if (*q == '@')
			at = q;
	if (at) {
		const char *c = memchr(auth, ':', (size_t)(at - auth));
		if (!c) {
			buf_printf(err, "bad l2 URL '%s': credentials are user:password or :password",
				   shown.data);
			goto out;
		}
		if (c > auth && !(l2->user = pct_decode(auth, c)))
			goto badurl;
		if (!(l2->password = pct_decode(c + 1, at)))
			goto badurl;
		host = at + 1;
	} else {
		host = auth;
	}
	if (split_host(&host, end, &hend, &colon) < 0)
		goto badurl;
	if (hend == host || (size_t)(hend - host) >= sizeof l2->host)
		goto badurl;
	if (colon && parse_num(colon + 1, end, 65535, &port) < 0)
		goto badurl;
	if (port == 0)
		goto badurl;
	if (*end == '/' && end[1] && parse_num(end + 1, end + strlen(end), 1L << 30, &db) < 0)
		goto badurl;
	l2->port = (int)port;
	l2->db = (int)db;

	/* hiredis 0.14 resolves on every connect, blocking: resolve here and
	 * hand it the numeric address. IPv4 first, as hiredis would. */
	{
		char name[NI_MAXHOST];
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
		unsigned char bin[sizeof(struct in6_addr)];
		int e;

		memcpy(name, host, (size_t)(hend - host));
		name[hend - host] = '\0';
		if (inet_pton(AF_INET, name, bin) != 1 && inet_pton(AF_INET6, name, bin) != 1 &&
		    !(l2->name = strdup(name)))
			goto oom;
		if (l2->name && known && known->name && !strcmp(known->name, name)) {
			snprintf(l2->host, sizeof l2->host, "%s", known->host);
			buf_reset(&shown);
			buf_printf(&shown, "redis://%s:%d/%d", name, l2->port, l2->db);
			rc = 0;
			goto out;
		}
		hints.ai_family = AF_INET;
		e = getaddrinfo(name, NULL, &hints, &res);
		if (e) {
			hints.ai_family = AF_INET6;
			e = getaddrinfo(name, NULL, &hints, &res);
		}
		if (e) {
			buf_printf(err, "cannot resolve l2 host '%s': %s", name, gai_strerror(e));
			goto out;
		}
		e = getnameinfo(res->ai_addr, res->ai_addrlen, l2->host, sizeof l2->host,
				NULL, 0, NI_NUMERICHOST);
		freeaddrinfo(res);
		if (e) {
			buf_printf(err, "cannot resolve l2 host '%s': %s", name, gai_strerror(e));
			goto out;
		}
		buf_reset(&shown);
		buf_printf(&shown, "redis://%s:%d/%d", name, l2->port, l2->db);
	}
	rc = 0;
	goto out;
badurl:
	buf_printf(err, "bad l2 URL '%s': expected redis://[user:password@]host[:port][/db]",
		   shown.data);
	goto out;
oom:
	buf_printf(err, "out of memory");
out:
	if (rc == 0 && !(l2->where = buf_detach(&shown, NULL))) {
		buf_printf(err, "out of memory");
		rc = -1;
	}
	buf_free(&shown);
	return rc;
}

/* ---- the breakers ------------------------------------------------------ */

static const char *node_where(const struct l2_node *nd)
{
	return nd->single ? nd->l2->conf->where : nd->where;
}

/* May a request go to nd now? Sets *probe for the half-open probe. */
static int node_admit(struct l2_node *nd, int *probe)
{
	*probe = 0;
	switch (nd->state) {
	case BR_CLOSED:
		return 1;
	case BR_OPEN:
		if (now_us() < nd->open_until_us)
			return 0;
		nd->state = BR_HALF_OPEN;
		nd->probing = 0;
		/* fall through */
	case BR_HALF_OPEN:
		if (nd->probing)
			return 0;
		nd->probing = 1;
		*probe = 1;
		return 1;
	}
	return 0;
}

/* May a request go to Redis now? A single Redis: its breaker. A cluster:
 * yes; each command asks its node's breaker once routed (send_cmd()). */
static int admit(struct l2 *l2, int *probe)
{
	*probe = 0;
	return l2->single ? node_admit(l2->single, probe) : 1;
}

static void breaker_open(struct l2_node *nd)
{
	struct l2 *l2 = nd->l2;

	nd->state = BR_OPEN;
	nd->probing = 0;
	nd->failures = 0;
	nd->open_until_us = now_us() + nd->period_ms * 1000;
	l2->n.breaker_opens++;
	log_warn("l2: %s: %s; going on without it for %.1f s", node_where(nd),
		 l2->last_error, nd->period_ms / 1000.0);
	nd->period_ms = nd->period_ms * 2 > L2_OPEN_MAX_MS ? L2_OPEN_MAX_MS : nd->period_ms * 2;
}

static void breaker_note(struct l2_node *nd, int probe, int ok)
{
	if (probe) {
		if (ok) {
			nd->state = BR_CLOSED;
			nd->probing = 0;
			nd->failures = 0;
			nd->period_ms = L2_OPEN_MS;
			log_info("l2: %s answers again", node_where(nd));
		} else {
			breaker_open(nd);
		}
		return;
	}
	if (nd->state != BR_CLOSED)
		return;                 /* sent before it opened: moot now */
	if (ok)
		nd->failures = 0;
	else if (++nd->failures >= L2_TRIP)
		breaker_open(nd);
}

static void breaker_reset(struct l2_node *nd)
{
	nd->state = BR_CLOSED;
	nd->failures = 0;
	nd->probing = 0;
	nd->period_ms = L2_OPEN_MS;
}

/* ---- commands ---------------------------------------------------------- */

static void conf_unref(struct l2_conf *c)
{
	if (!c || --c->refs > 0)
		return;
	OPENSSL_cleanse(c->secret, sizeof c->secret);
	if (c->password)
		OPENSSL_cleanse(c->password, strlen(c->password));
	free(c->password);
	free(c->user);
	free(c->path);
	free(c->name);
	free(c->where);
	free(c->prefix);
	free(c->identity);
	free(c);
}

static void xfer_unref(struct l2_xfer *x)
{
	if (!x || --x->refs > 0)
		return;
	buf_free(&x->data);
	conf_unref(x->conf);
	free(x);
}

static void cmd_unref(struct l2_cmd *cmd)
{
	if (--cmd->refs > 0)
		return;
	if (cmd->timer)
		event_free(cmd->timer);
	if (cmd->wire)
		redisFreeSdsCommand(cmd->wire);
	conf_unref(cmd->conf);
	xfer_unref(cmd->xfer);
	free(cmd);
}

static void log_reject(struct l2 *l2, const struct l2_conf *conf,
		       const unsigned char key[32], const char *why)
{
	int64_t now = now_us();
	char hex[65];

	if (now < l2->reject_log_us) {
		l2->rejects_unlogged++;
		return;
	}
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", key[i]);
	if (l2->rejects_unlogged)
		log_warn("l2: rejected the value of %s from %s: %s (and %lld more since the "
			 "last report)", hex, conf->where, why, (long long)l2->rejects_unlogged);
	else
		log_warn("l2: rejected the value of %s from %s: %s", hex, conf->where, why);
	l2->rejects_unlogged = 0;
	l2->reject_log_us = now + 1000000;
}

static void map_refresh(struct l2 *l2);
static void unpark_all(struct l2 *l2);

static void xfer_step(struct l2_cmd *cmd, enum outcome o, const redisReply *r);

/* Finish cmd once, by whichever comes first (its reply, its timer, the end
 * of its connection): feed its node's breaker, and hand the outcome to its
 * transfer, which counts it (once a transfer) and calls back. */
static void complete(struct l2_cmd *cmd, enum outcome o, const redisReply *reply)
{
	struct l2 *l2 = cmd->l2;

	if (cmd->completed)
		return;
	cmd->completed = 1;
	cmd->parked = 0;
	if (cmd->timer)
		evtimer_del(cmd->timer);
	if (cmd->prev)
		cmd->prev->next = cmd->next;
	else
		l2->pending = cmd->next;
	if (cmd->next)
		cmd->next->prev = cmd->prev;
	cmd->prev = cmd->next = NULL;

	if (!l2->freeing) {
		if ((o == OUT_ERROR || o == OUT_TIMEOUT || o == OUT_REFUSED) && cmd->node)
			log_debug("l2: %s: %s", node_where(cmd->node), l2->last_error);
		if (cmd->node && o != OUT_SKIPPED)
			breaker_note(cmd->node, cmd->probe, o != OUT_ERROR && o != OUT_TIMEOUT);
		if (cmd->internal) {
			l2->refreshing = 0;
			if (o != OUT_MAP) {
				if (l2->refresh_fails < 16)
					l2->refresh_fails++;
				map_refresh(l2);        /* another node, after the limit */
			} else {
				l2->refresh_fails = 0;
				unpark_all(l2);
			}
		}
	}
	if (cmd->xfer)
		xfer_step(cmd, o, reply);
	cmd_unref(cmd);
}

/* Close ac, one of nd's connections, now. Its pending commands complete
 * as how (their NULL replies, run by redisAsyncFree(), now or when hiredis
 * returns from the callback it is in). */
static void drop_ac(struct l2_node *nd, redisAsyncContext *ac, enum outcome how)
{
	struct l2 *l2 = nd->l2;

	if (!ac)
		return;
	if (nd->ac == ac) {
		nd->ac = NULL;
		nd->connected = 0;
		evtimer_del(nd->connect_timer);
	}
	for (int i = 0; i < L2_RETIRED_MAX; i++)
		if (nd->retired[i] == ac)
			nd->retired[i] = NULL;
	for (struct l2_cmd *c = l2->pending; c; c = c->next)
		if (c->ac == ac)
			c->fail = how;
	redisAsyncFree(ac);
}

static void drop_connection(struct l2_node *nd, enum outcome how)
{
	drop_ac(nd, nd->ac, how);
}

/* nd failed (a connect, a connection, a silence): a cluster's map may be
 * out of date (a failover); read it again, in the background. */
static void node_failed(struct l2_node *nd)
{
	nd->down = 1;
	if (!nd->single)
		map_refresh(nd->l2);
}

/* ac went away by itself (hiredis frees it): forget it. */
static void node_lost(struct l2_node *nd, redisAsyncContext *ac)
{
	if (nd->ac != ac)
		return;
	nd->ac = NULL;
	nd->connected = 0;
	evtimer_del(nd->connect_timer);
	node_failed(nd);
}

static int follow_redirect(struct l2_cmd *cmd, const redisReply *reply);
static int park(struct l2_cmd *cmd);

static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct l2_cmd *cmd = privdata;
	struct l2 *l2 = cmd->l2;
	redisReply *reply = r;

	if (cmd->completed) {
		/* Timed out or dropped already: a stale reply, ignored. */
	} else if (!reply) {
		/* The connection went away under it. */
		node_lost(ac->data, ac);
		if (ac->err)
			note_error(l2, ac->errstr);
		if (cmd->fail != OUT_ERROR || !park(cmd))
			complete(cmd, cmd->fail, NULL);
	} else if (reply->type == REDIS_REPLY_ERROR && follow_redirect(cmd, reply)) {
		/* MOVED or ASK: sent again there (or completed, if it cannot be). */
	} else if (reply->type == REDIS_REPLY_ERROR) {
		note_error(l2, reply->str);
		if (!l2->single && reply->str && !strncmp(reply->str, "CLUSTERDOWN", 11))
			map_refresh(l2);
		complete(cmd, OUT_REFUSED, NULL);
	} else {
		complete(cmd, OUT_REPLY, reply);
	}
	cmd_unref(cmd);
}

/* AUTH and SELECT: a failure drops the connection (and with it the
 * commands queued behind them). */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct l2_node *nd = privdata;
	redisReply *reply = r;

	if (reply && reply->type == REDIS_REPLY_ERROR && nd->ac == ac) {
		note_error(nd->l2, reply->str);
		drop_connection(nd, OUT_ERROR);
	}
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct l2_node *nd = ac->data;

	if (nd->ac != ac)
		return;
	evtimer_del(nd->connect_timer);
	if (status == REDIS_OK) {
		nd->connected = 1;
		nd->down = 0;
		return;
	}
	/* hiredis frees it after this returns; its commands fail then. */
	note_error(nd->l2, ac->errstr);
	nd->ac = NULL;
	node_failed(nd);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct l2_node *nd = ac->data;

	for (int i = 0; i < L2_RETIRED_MAX; i++)
		if (nd->retired[i] == ac)
			nd->retired[i] = NULL;
	if (nd->ac != ac)
		return;
	nd->ac = NULL;
	nd->connected = 0;
	evtimer_del(nd->connect_timer);
	if (status != REDIS_OK) {
		note_error(nd->l2, ac->errstr);
		node_failed(nd);
	}
}

static void on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct l2_node *nd = arg;

	if (nd->ac && !nd->connected) {
		snprintf(nd->l2->last_error, sizeof nd->l2->last_error,
			 "no connection within %d ms", nd->l2->conf->connect_timeout_ms);
		drop_connection(nd, OUT_TIMEOUT);
		node_failed(nd);
	}
}

/* Our own libevent adapter for hiredis (its libevent.h, plus a progress
 * count): a command's timer bounds its connection's silence, not its size,
 * so each connection counts the read events it gets (bytes or a reply in)
 * and the writes that shrank hiredis's output buffer (bytes out). */
struct l2_ev {
	redisAsyncContext *ac;
	struct event *rev, *wev;
	uint64_t progress;
	int *alive;                     /* cleared when hiredis frees ac */
};

static void ev_read(evutil_socket_t fd, short what, void *arg)
{
	struct l2_ev *e = arg;

	e->progress++;                  /* before: the read may free e */
	redisAsyncHandleRead(e->ac);
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

static int ev_attach(redisAsyncContext *ac, struct event_base *base)
{
	struct l2_ev *e = calloc(1, sizeof *e);

	if (!e || ac->ev.data)
		goto fail;
	e->ac = ac;
	e->rev = event_new(base, ac->c.fd, EV_READ, ev_read, e);
	e->wev = event_new(base, ac->c.fd, EV_WRITE, ev_write, e);
	if (!e->rev || !e->wev)
		goto fail;
	ac->ev.addRead = ev_add_read;
	ac->ev.delRead = ev_del_read;
	ac->ev.addWrite = ev_add_write;
	ac->ev.delWrite = ev_del_write;
	ac->ev.cleanup = ev_cleanup;
	ac->ev.data = e;
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

static uint64_t progress_of(const redisAsyncContext *ac)
{
	const struct l2_ev *e = ac ? ac->ev.data : NULL;

	return e ? e->progress : 0;
}

/* The bytes in ac's kernel send queue not yet taken by the other end
 * (TIOCOUTQ, for TCP and Unix sockets alike), or -1. A large write sits
 * there for a while after hiredis's buffer has shrunk: the queue draining
 * is progress too. */
static int outq_of(const redisAsyncContext *ac)
{
	int n = 0;

	return ac && ac->c.fd >= 0 && ioctl(ac->c.fd, TIOCOUTQ, &n) == 0 ? n : -1;
}

/* Bytes that came in on ac and wait to be read (FIONREAD), or 0: the
 * other end spoke, and this loop has not got to them yet. */
static int inq_of(const redisAsyncContext *ac)
{
	int n = 0;

	return ac && ac->c.fd >= 0 && ioctl(ac->c.fd, FIONREAD, &n) == 0 ? n : 0;
}

/* A command's timer: if its connection moved bytes since it was armed,
 * it is armed again; only a connection silent for the whole period times
 * out, and then that connection alone is dropped (completing every
 * command on it). Silent means the other end's: bytes waiting to be read,
 * or a timer that fires late (this process was not run: a loaded machine,
 * a long callback), are this side's delay, and the timer is armed again.
 * A command past L2_CMD_MAX_MS times out however its bytes move. */
static void on_cmd_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct l2_cmd *cmd = arg;
	struct l2 *l2 = cmd->l2;
	struct timeval tv;

	int q = outq_of(cmd->ac);
	int64_t now = now_us(), late_us = now - cmd->armed_us - cmd->timeout_ms * 1000;
	int64_t max_ms = cmd->timeout_ms * 2 > L2_CMD_MAX_MS ? cmd->timeout_ms * 2 : L2_CMD_MAX_MS;
	int too_long = now - cmd->sent_us > max_ms * 1000;

	if (cmd->ac && !too_long &&
	    (progress_of(cmd->ac) != cmd->seen || (q >= 0 && q < cmd->outq) ||
	     inq_of(cmd->ac) > 0 || late_us > cmd->timeout_ms * 1000 / 2)) {
		cmd->seen = progress_of(cmd->ac);
		cmd->outq = q;
		cmd->armed_us = now;
		ms_to_tv(cmd->timeout_ms, &tv);
		evtimer_add(cmd->timer, &tv);
		return;
	}
	if (too_long) {
		l2->n.overruns++;
		snprintf(l2->last_error, sizeof l2->last_error,
			 "no whole answer within %lld ms (bytes trickling)", (long long)max_ms);
	} else {
		snprintf(l2->last_error, sizeof l2->last_error, "no answer within %lld ms",
			 (long long)cmd->timeout_ms);
	}
	if (cmd->ac && cmd->node) {
		struct l2_node *nd = cmd->node;
		drop_ac(nd, cmd->ac, OUT_TIMEOUT);      /* completes cmd too */
		node_failed(nd);
	} else {
		complete(cmd, OUT_TIMEOUT, NULL);
	}
}

static void resolve_again(struct l2 *l2);

/* Open nd's connection (it completes in the background). 0 or -1. A
 * single Redis's host name is looked up again meanwhile (resolve_again()):
 * this connection goes to the latest address known, the next to what the
 * name says now. A cluster's nodes are numeric addresses. */
static int node_connect(struct l2_node *nd)
{
	struct l2 *l2 = nd->l2;
	struct l2_conf *c = l2->conf;
	const char *host = nd->single ? c->host : nd->addr.host;
	redisAsyncContext *ac;
	struct timeval tv;

	if (nd->single) {
		resolve_again(l2);
		ac = c->path ? redisAsyncConnectUnix(c->path) : redisAsyncConnect(c->host, c->port);
	} else {
		ac = redisAsyncConnect(nd->addr.host, nd->addr.port);
	}
	if (!ac) {
		note_error(l2, "out of memory");
		return -1;
	}
	if (ac->err) {
		note_error(l2, ac->errstr);
		redisAsyncFree(ac);
		return -1;
	}
	ac->data = nd;
	if (ev_attach(ac, l2->base) < 0) {
		note_error(l2, "cannot attach to the event loop");
		redisAsyncFree(ac);
		return -1;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	nd->ac = ac;
	snprintf(nd->ac_host, sizeof nd->ac_host, "%s", host);
	nd->connected = 0;
	/* Queued now, sent first: pipelined ahead of every command. */
	if (c->password) {
		const char *argv[3] = { "AUTH", c->user ? c->user : c->password, c->password };
		redisAsyncCommandArgv(ac, on_setup_reply, nd, c->user ? 3 : 2, argv, NULL);
	}
	if (c->db && nd->single) {
		char db[16];
		const char *argv[2] = { "SELECT", db };
		snprintf(db, sizeof db, "%d", c->db);
		redisAsyncCommandArgv(ac, on_setup_reply, nd, 2, argv, NULL);
	}
	ms_to_tv(c->connect_timeout_ms, &tv);
	evtimer_add(nd->connect_timer, &tv);
	return 0;
}

/* Send cmd->wire to nd (after ASKING if asking), its reply to fn; on any
 * failure to send, cmd completes as an error at once. */
static void node_send(struct l2_node *nd, struct l2_cmd *cmd, int asking,
		      redisCallbackFn *fn)
{
	struct l2 *l2 = nd->l2;
	struct timeval tv;

	cmd->node = nd;
	/* A connection hiredis is tearing down takes no commands. */
	if (nd->ac && (nd->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING))) {
		nd->ac = NULL;
		nd->connected = 0;
	}
	if (!nd->ac && node_connect(nd) < 0) {
		node_failed(nd);
		if (!park(cmd))
			complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if (!cmd->timer && !(cmd->timer = evtimer_new(l2->base, on_cmd_timeout, cmd))) {
		note_error(l2, "out of memory");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if ((asking && redisAsyncCommand(nd->ac, NULL, NULL, "ASKING") != REDIS_OK) ||
	    redisAsyncFormattedCommand(nd->ac, fn, cmd, cmd->wire, sdslen(cmd->wire)) != REDIS_OK) {
		note_error(l2, "cannot queue a command");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	cmd->ac = nd->ac;
	cmd->refs++;                    /* hiredis's callback */
	cmd->seen = progress_of(cmd->ac);
	cmd->outq = outq_of(cmd->ac);
	cmd->armed_us = cmd->sent_us = now_us();
	if (nd->single) {               /* never sent again: no redirects */
		redisFreeSdsCommand(cmd->wire);
		cmd->wire = NULL;
	}
	ms_to_tv(cmd->timeout_ms, &tv);
	evtimer_add(cmd->timer, &tv);
}

static void pending_add(struct l2 *l2, struct l2_cmd *cmd)
{
	cmd->next = l2->pending;
	if (l2->pending)
		l2->pending->prev = cmd;
	l2->pending = cmd;
}

static struct l2_node *route(struct l2 *l2, unsigned slot);

/* cmd to nd, if nd's breaker lets it (else it is skipped: a miss, and
 * the map read again, in case the slot has moved on to a live node). */
static void route_send(struct l2 *l2, struct l2_cmd *cmd, struct l2_node *nd, int asking)
{
	if (!nd) {
		note_error(l2, "no cluster node known");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if (!node_admit(nd, &cmd->probe)) {
		/* The map may not know yet that the slot has moved on (a
		 * failover): wait for the next one, once, then skip. */
		cmd->node = NULL;
		if (cmd->waited) {
			complete(cmd, OUT_SKIPPED, NULL);
		} else {
			cmd->waited = 1;
			if (!park(cmd))
				complete(cmd, OUT_SKIPPED, NULL);
		}
		map_refresh(l2);
		return;
	}
	node_send(nd, cmd, asking, on_reply);
}

/* Send one command for cmd (which the caller has set up); argv[1] is the
 * key, which picks a cluster's node. On any failure to send, cmd
 * completes as an error at once; timeout_ms bounds its connection's
 * silence (on_cmd_timeout()). */
static void send_cmd(struct l2 *l2, struct l2_cmd *cmd, int argc, const char **argv,
		     const size_t *argvlen, int64_t timeout_ms)
{
	pending_add(l2, cmd);
	cmd->timeout_ms = timeout_ms;
	if (l2->single)
		cmd->node = l2->single;
	if (redisFormatSdsCommandArgv(&cmd->wire, argc, argv, argvlen) < 0) {
		cmd->wire = NULL;
		note_error(l2, "out of memory");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if (l2->single) {
		node_send(l2->single, cmd, 0, on_reply);
	} else {
		cmd->slot = cluster_slot(argv[1], argvlen[1]);
		route_send(l2, cmd, route(l2, cmd->slot), 0);
	}
}

/* ---- the cluster: nodes, routing, redirects, the slot map -------------- */

static struct l2_node *node_new(struct l2 *l2, const struct cluster_addr *a)
{
	struct l2_node *nd;

	if (l2->nnodes >= L2_NODES_MAX || !(nd = calloc(1, sizeof *nd)))
		return NULL;
	nd->l2 = l2;
	nd->single = a == NULL;
	nd->state = BR_CLOSED;
	nd->period_ms = L2_OPEN_MS;
	if (!(nd->connect_timer = evtimer_new(l2->base, on_connect_timeout, nd))) {
		free(nd);
		return NULL;
	}
	if (a) {
		nd->addr = *a;
		snprintf(nd->where, sizeof nd->where, strchr(a->host, ':') ? "[%s]:%d" : "%s:%d",
			 a->host, a->port);
	}
	nd->next = l2->nodes;
	l2->nodes = nd;
	l2->nnodes++;
	return nd;
}

/* The node at a, made if new; NULL: no memory, or too many nodes. */
static struct l2_node *node_get(struct l2 *l2, const struct cluster_addr *a)
{
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		if (!nd->single && nd->addr.port == a->port && !strcmp(nd->addr.host, a->host))
			return nd;
	return node_new(l2, a);
}

/* The next node to ask for the map (or to take a command whose slot has
 * no known owner): the seeds and the map's masters in turn, those whose
 * breaker is closed first. */
static struct l2_node *next_node(struct l2 *l2)
{
	if (!l2->nodes)
		return NULL;
	for (int pass = 0; pass < 2; pass++) {
		struct l2_node *start = l2->rr && l2->rr->next ? l2->rr->next : l2->nodes;
		struct l2_node *nd = start;
		do {
			if (!nd->single && (nd->seed || nd->in_map) &&
			    (pass || nd->state == BR_CLOSED)) {
				l2->rr = nd;
				return nd;
			}
			nd = nd->next ? nd->next : l2->nodes;
		} while (nd != start);
	}
	return NULL;
}

static struct l2_node *route(struct l2 *l2, unsigned slot)
{
	struct l2_node *nd = l2->owner[slot];

	return nd ? nd : next_node(l2);
}

/* A MOVED or an ASK in reply to cmd: follow it (MOVED also teaches the
 * map that slot's owner and has the map read again). 1 if it was one
 * (cmd is then sent again or completed), 0 if reply is another error. */
static int follow_redirect(struct l2_cmd *cmd, const redisReply *reply)
{
	struct l2 *l2 = cmd->l2;
	struct l2_node *from = cmd->node, *to;
	struct cluster_redirect rd;

	if (l2->single || !from || !cmd->wire || !reply->str ||
	    cluster_redirect_parse(reply->str, reply->len, from->addr.host, &rd) < 0)
		return 0;
	l2->n.redirects++;
	breaker_note(from, cmd->probe, 1);      /* it answered */
	cmd->probe = 0;
	cmd->node = NULL;
	if (++cmd->redirects > L2_REDIRECTS_MAX) {
		snprintf(l2->last_error, sizeof l2->last_error,
			 "more than %d redirections for slot %u", L2_REDIRECTS_MAX, rd.slot);
		complete(cmd, OUT_REFUSED, NULL);
		map_refresh(l2);
		return 1;
	}
	if (!(to = node_get(l2, &rd.to))) {
		note_error(l2, "too many cluster nodes");
		complete(cmd, OUT_ERROR, NULL);
		return 1;
	}
	if (!rd.ask) {
		l2->owner[rd.slot] = to;
		map_refresh(l2);
	}
	route_send(l2, cmd, to, rd.ask);
	return 1;
}

/* A cluster's command whose connection failed (could not be made, or went
 * away before the reply: GETRANGE and SET may be sent twice): its node may
 * be gone, in a failover the map does not show yet. It is counted against
 * that node's breaker and waits for the map to be read again, its timer
 * running, then goes where the new map says; at most L2_REDIRECTS_MAX
 * times. 1 if parked, 0 if cmd is to complete now. */
static int park(struct l2_cmd *cmd)
{
	struct l2 *l2 = cmd->l2;

	if (l2->single || l2->freeing || cmd->internal || !cmd->wire ||
	    cmd->redirects >= L2_REDIRECTS_MAX)
		return 0;
	cmd->redirects++;
	if (cmd->node)
		breaker_note(cmd->node, cmd->probe, 0);
	cmd->probe = 0;
	cmd->node = NULL;
	cmd->ac = NULL;
	if (!cmd->timer && !(cmd->timer = evtimer_new(l2->base, on_cmd_timeout, cmd)))
		return 0;
	cmd->parked = 1;
	if (!evtimer_pending(cmd->timer, NULL)) {
		struct timeval tv;
		ms_to_tv(cmd->timeout_ms, &tv);
		evtimer_add(cmd->timer, &tv);
	}
	map_refresh(l2);
	return 1;
}

/* A new map is in: the parked commands go where it says. */
static void unpark_all(struct l2 *l2)
{
	struct l2_cmd **list;
	size_t n = 0, i = 0;

	for (struct l2_cmd *c = l2->pending; c; c = c->next)
		n += c->parked;
	if (!n)
		return;
	if (!(list = calloc(n, sizeof *list))) {
		return;                 /* their timers end them */
	}
	for (struct l2_cmd *c = l2->pending; c && i < n; c = c->next)
		if (c->parked) {
			c->parked = 0;
			c->refs++;      /* held across the sends below */
			list[i++] = c;
		}
	for (size_t j = 0; j < i; j++) {
		if (!list[j]->completed)
			route_send(l2, list[j], route(l2, list[j]->slot), 0);
		cmd_unref(list[j]);
	}
	free(list);
}

/* Install m: each slot's owner a node of ours. 0, or -1 (no memory, too
 * many nodes: the old map stays). */
static int map_install(struct l2 *l2, const struct cluster_map *m)
{
	struct l2_node **by = calloc((size_t)m->nnodes + 1, sizeof *by);

	if (!by)
		return -1;
	for (int i = 0; i < m->nnodes; i++)
		if (!(by[i] = node_get(l2, &m->node[i]))) {
			free(by);
			return -1;
		}
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		nd->in_map = 0;
	for (int i = 0; i < m->nnodes; i++)
		by[i]->in_map = 1;
	for (int s = 0; s < CLUSTER_SLOTS; s++)
		l2->owner[s] = m->owner[s] >= 0 ? by[m->owner[s]] : NULL;
	free(by);
	l2->n.map_refreshes++;
	/* A master that is down is being failed over, perhaps: read the map
	 * again soon, even if nothing asks for its slots meanwhile. */
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		if (nd->in_map && nd->down && !evtimer_pending(l2->refresh_timer, NULL)) {
			struct timeval tv;
			ms_to_tv(L2_DOWN_REFRESH_MS, &tv);
			evtimer_add(l2->refresh_timer, &tv);
		}
	return 0;
}

static void on_slots_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct l2_cmd *cmd = privdata;
	struct l2 *l2 = cmd->l2;
	struct l2_node *nd = ac->data;
	redisReply *reply = r;

	if (cmd->completed) {
		/* timed out or dropped already */
	} else if (!reply) {
		node_lost(nd, ac);
		if (ac->err)
			note_error(l2, ac->errstr);
		complete(cmd, cmd->fail, NULL);
	} else if (reply->type == REDIS_REPLY_ERROR) {
		note_error(l2, reply->str);
		log_warn("l2: %s does not give its slot map: %s", nd->where, reply->str);
		complete(cmd, OUT_REFUSED, NULL);
	} else if (cmd->conf != l2->conf || (!nd->seed && !nd->in_map)) {
		/* Asked before a reload: perhaps of another cluster. Again. */
		complete(cmd, OUT_REFUSED, NULL);
	} else {
		char why[128];
		struct cluster_map *m = cluster_map_parse(reply, nd->addr.host, why, sizeof why);
		if (!m || map_install(l2, m) < 0) {
			snprintf(l2->last_error, sizeof l2->last_error, "unusable slot map: %s",
				 m ? "out of memory" : why);
			log_warn("l2: %s: %s", nd->where, l2->last_error);
			complete(cmd, OUT_REFUSED, NULL);
		} else {
			log_debug("l2: slot map from %s: %d masters", nd->where, m->nnodes);
			complete(cmd, OUT_MAP, NULL);
		}
		cluster_map_free(m);
	}
	cmd_unref(cmd);
}

/* Read the slot map again (CLUSTER SLOTS to the next node), in the
 * background, at most once per L2_REFRESH_MS: later, from a timer, if the
 * last one was too recent; not at all if one is out. */
static void map_refresh(struct l2 *l2)
{
	static const char *argv[2] = { "CLUSTER", "SLOTS" };
	struct l2_node *nd;
	struct l2_cmd *cmd;
	int64_t now;

	if (l2->single || l2->off || l2->freeing || l2->refreshing)
		return;
	now = now_us();
	if (now < l2->refresh_after_us) {
		if (!evtimer_pending(l2->refresh_timer, NULL)) {
			struct timeval tv;
			ms_to_tv((l2->refresh_after_us - now) / 1000 + 1, &tv);
			evtimer_add(l2->refresh_timer, &tv);
		}
		return;
	}
	{
		int64_t ms = (int64_t)L2_REFRESH_MS << l2->refresh_fails;
		l2->refresh_after_us = now + (ms > L2_REFRESH_MAX_MS ? L2_REFRESH_MAX_MS : ms) * 1000;
	}
	if (!(nd = next_node(l2)) || !(cmd = calloc(1, sizeof *cmd)))
		return;
	cmd->l2 = l2;
	cmd->conf = l2->conf;
	l2->conf->refs++;
	cmd->refs = 1;
	cmd->fail = OUT_ERROR;
	cmd->internal = 1;
	cmd->timeout_ms = l2->conf->command_timeout_ms;
	pending_add(l2, cmd);
	l2->refreshing = 1;
	if (redisFormatSdsCommandArgv(&cmd->wire, 2, argv, NULL) < 0) {
		cmd->wire = NULL;
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	node_send(nd, cmd, 0, on_slots_reply);
}

static void on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
	map_refresh(arg);
}

/* A request that could not even be set up (no memory): an error. */
static void fail_unsent(struct l2 *l2, int probe)
{
	note_error(l2, "out of memory");
	l2->n.errors++;
	if (l2->single)
		breaker_note(l2->single, probe, 0);
}

/* ---- transfers: a value whole, or its chunks and manifest --------------- */

/* prefix + space + 64 hex digits into name (NAME_MAX_LEN bytes). */
static size_t redis_key(const struct l2 *l2, const char *space, const unsigned char key[32],
			char *name)
{
	size_t n = strlen(l2->conf->prefix), sn = space ? strnlen(space, L2_SPACE_MAX) : 0;

	memcpy(name, l2->conf->prefix, n);
	if (sn)
		memcpy(name + n, space, sn);
	n += sn;
	for (int i = 0; i < 32; i++)
		snprintf(name + n + 2 * i, 3, "%02x", key[i]);
	return n + 64;
}

/* Chunk i of x: its key's name + ":" + hex id + ":" + i, so that the
 * chunks of a value sit beside its key (a purge of a space takes them
 * too) and two writes of one key never share a chunk. */
static size_t chunk_name(const struct l2_xfer *x, uint32_t i, char *name)
{
	size_t n = x->name_len;

	memcpy(name, x->name, n);
	name[n++] = ':';
	for (int k = 0; k < L2_ID_LEN; k++, n += 2)
		snprintf(name + n, 3, "%02x", x->id[k]);
	return n + (size_t)snprintf(name + n, NAME_MAX_LEN - n, ":%u", i);
}

static struct l2_xfer *xfer_new(struct l2 *l2, const char *space, const unsigned char key[32],
				int probe, l2_get_cb cb, void *arg)
{
	struct l2_xfer *x = calloc(1, sizeof *x);

	if (!x)
		return NULL;
	x->l2 = l2;
	x->conf = l2->conf;
	l2->conf->refs++;
	x->cb = cb;
	x->arg = arg;
	x->probe = probe;
	x->refs = 1;                    /* until finished */
	memcpy(x->key, key, 32);
	x->name_len = redis_key(l2, space, key, x->name);
	snprintf(x->space, sizeof x->space, "%s", space ? space : "");
	return x;
}

/* End x once: count it and call back (v: a hit's value): once per
 * transfer, however many commands it took. (Each command feeds its own
 * node's breaker: complete().) */
static void xfer_finish(struct l2_xfer *x, enum outcome o, const struct l2_value *v)
{
	struct l2 *l2 = x->l2;

	if (x->finished)
		return;
	x->finished = 1;
	if (!l2->freeing && x->claim) {
		if (x->claim_cb)
			x->claim_cb(x->arg, o == OUT_WRITTEN ? L2_CLAIM_WON :
				    o == OUT_MISS ? L2_CLAIM_HELD : L2_CLAIM_FAILED);
	} else if (!l2->freeing) {
		switch (o) {
		case OUT_HIT:     l2->n.hits++; break;
		case OUT_MISS:    l2->n.misses++; break;
		case OUT_REJECT:  l2->n.rejects++; break;
		case OUT_WRITTEN: l2->n.writes++; break;
		case OUT_ERROR:   l2->n.errors++; break;
		case OUT_TIMEOUT: l2->n.timeouts++; break;
		case OUT_REFUSED: l2->n.errors++; break;
		case OUT_SKIPPED: case OUT_MAP: case OUT_REPLY: break;
		}
		/* No callbacks once l2_free() began: the caller is going away. */
		if (x->cb)
			x->cb(x->arg, o == OUT_HIT, o == OUT_HIT ? v : NULL);
	}
	xfer_unref(x);
}

static void reject(struct l2_xfer *x, const char *why)
{
	log_reject(x->l2, x->conf, x->key, why);
	xfer_finish(x, OUT_REJECT, NULL);
}

static void fail(struct l2_xfer *x, const char *why)
{
	note_error(x->l2, why);
	xfer_finish(x, OUT_ERROR, NULL);
}

/* Send one command of x; a failure to send ends x. */
static void send_op(struct l2_xfer *x, enum op op, uint32_t chunk, int argc,
		    const char **argv, const size_t *argvlen)
{
	struct l2_cmd *cmd = calloc(1, sizeof *cmd);

	if (!cmd) {
		fail(x, "out of memory");
		return;
	}
	cmd->l2 = x->l2;
	cmd->conf = x->conf;
	x->conf->refs++;
	cmd->xfer = x;
	x->refs++;
	cmd->op = op;
	cmd->chunk = chunk;
	cmd->refs = 1;                  /* until completed */
	cmd->fail = OUT_ERROR;
	cmd->probe = x->probe;          /* the first command is the probe */
	x->probe = 0;
	send_cmd(x->l2, cmd, argc, argv, argvlen, x->conf->command_timeout_ms);
}

/* The bytes of chunk i: its offset and length in the sealed value. */
static size_t chunk_span(const struct l2_xfer *x, uint32_t i, size_t *off)
{
	*off = (size_t)i * x->chunk_len;
	return x->data.len - *off < x->chunk_len ? x->data.len - *off : x->chunk_len;
}

static void send_chunk(struct l2_xfer *x, uint32_t i)
{
	char name[NAME_MAX_LEN], end[24];
	size_t off, len = chunk_span(x, i, &off), name_len = chunk_name(x, i, name);

	if (x->cb) {
		/* At most len + 1 bytes: a longer chunk is seen, never read whole. */
		const char *argv[4] = { "GETRANGE", name, "0", end };
		size_t argvlen[4] = { 8, name_len, 1, (size_t)snprintf(end, sizeof end, "%zu", len) };
		send_op(x, OP_GET_CHUNK, i, 4, argv, argvlen);
	} else {
		const char *argv[3] = { "SET", name, x->data.data + off };
		size_t argvlen[3] = { 3, name_len, len };
		send_op(x, OP_SET_CHUNK, i, 3, argv, argvlen);
	}
}

/* Every chunk of a get is in: the value is the whole sealed envelope. */
static void assembled(struct l2_xfer *x)
{
	struct l2_value v;
	const char *why;

	if (l2_open(x->key, x->data.data, x->data.len, x->conf->identity, x->conf->secret,
		    x->conf->secret_len, &v, &why) < 0)
		reject(x, why);
	else
		xfer_finish(x, OUT_HIT, &v);
}

/* Every chunk of a put is written: now the manifest makes them a value. */
static void send_manifest(struct l2_xfer *x)
{
	unsigned char m[L2_MANIFEST_LEN];
	const char *argv[3] = { "SET", x->name, (const char *)m };
	size_t argvlen[3] = { 3, x->name_len, sizeof m };

	if (manifest_seal(x->key, (uint32_t)x->chunk_len, x->data.len, x->n_chunks, x->id,
			  x->conf->secret, x->conf->secret_len, m) < 0) {
		fail(x, "cannot seal a manifest");
		return;
	}
	send_op(x, OP_SET, 0, 3, argv, argvlen);
}

/* Keep up to L2_WINDOW chunk commands of x in flight, so no one command
 * holds a connection (or Redis) for long and others interleave; once every
 * chunk is answered, open the value (a get) or write the manifest (a put). */
static void pump(struct l2_xfer *x)
{
	x->refs++;                      /* a failed send may finish x */
	while (!x->finished && x->sent < x->n_chunks && x->sent - x->done < L2_WINDOW)
		send_chunk(x, x->sent++);
	if (!x->finished && x->done == x->n_chunks)
		x->cb ? assembled(x) : send_manifest(x);
	xfer_unref(x);
}

/* The reply under the key itself: nothing, a value stored whole, or the
 * manifest of a chunked one. */
static void got_key(struct l2_xfer *x, const redisReply *r)
{
	const char *why;
	struct l2_value v;
	uint64_t total;

	if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && r->len == 0)) {
		xfer_finish(x, OUT_MISS, NULL);
		return;
	}
	if (r->type != REDIS_REPLY_STRING) {
		fail(x, "unexpected reply to GETRANGE");
		return;
	}
	x->l2->n.bytes_read += (int64_t)r->len;
	if (r->len >= 4 && !memcmp(r->str, L2_MANIFEST_MAGIC, 4)) {
		if (manifest_open(x->key, r->str, r->len, x->conf->secret, x->conf->secret_len,
				  x->conf->max_value, &x->chunk_len, &total, &x->n_chunks, x->id,
				  &why) < 0)
			reject(x, why);
		else if (buf_reserve(&x->data, (size_t)total) < 0)
			fail(x, "out of memory");
		else {
			x->data.len = (size_t)total;
			pump(x);
		}
	} else if (r->len > L2_INLINE || (int64_t)r->len > x->conf->max_value) {
		reject(x, "larger than l2-max-value");
	} else if (l2_open(x->key, r->str, r->len, x->conf->identity, x->conf->secret,
			   x->conf->secret_len, &v, &why) < 0) {
		reject(x, why);
	} else {
		xfer_finish(x, OUT_HIT, &v);
	}
}

/* Chunk i of a get. One that is gone (evicted, or its writer died before
 * the manifest it belongs to was replaced) makes the value a miss; one of
 * the wrong length was tampered with. Its bytes are checked with the rest,
 * by the value's HMAC, once all are in. */
static void got_chunk(struct l2_xfer *x, uint32_t i, const redisReply *r)
{
	size_t off, len = chunk_span(x, i, &off);

	if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && r->len == 0))
		xfer_finish(x, OUT_MISS, NULL);
	else if (r->type != REDIS_REPLY_STRING)
		fail(x, "unexpected reply to GETRANGE");
	else if (r->len != len)
		reject(x, "a chunk of the wrong length");
	else {
		memcpy(x->data.data + off, r->str, len);
		x->l2->n.bytes_read += (int64_t)len;
		x->done++;
		pump(x);
	}
}

static void claim(struct l2 *l2, const char *space, const unsigned char key[32],
		  enum l2_claim_op op, int64_t ttl_ms, l2_claim_cb cb, void *arg);

static void xfer_step(struct l2_cmd *cmd, enum outcome o, const redisReply *r)
{
	struct l2_xfer *x = cmd->xfer;

	if (x->finished)
		return;                 /* another of its commands ended it */
	if (o != OUT_REPLY) {
		xfer_finish(x, o, NULL);
		return;
	}
	switch (cmd->op) {
	case OP_GET:
		got_key(x, r);
		break;
	case OP_CLAIM:
		/* SET ... NX or XX: OK if it was set, nil if not. */
		if (r->type == REDIS_REPLY_STATUS)
			xfer_finish(x, OUT_WRITTEN, NULL);
		else if (r->type == REDIS_REPLY_NIL)
			xfer_finish(x, OUT_MISS, NULL);
		else
			fail(x, "unexpected reply to SET");
		break;
	case OP_GET_CHUNK:
		got_chunk(x, cmd->chunk, r);
		break;
	case OP_SET:
	case OP_SET_CHUNK:
		if (r->type != REDIS_REPLY_STATUS) {
			fail(x, "unexpected reply to SET");
			break;
		}
		if (cmd->op == OP_SET) {
			x->l2->n.bytes_written += (int64_t)(x->n_chunks ? L2_MANIFEST_LEN : x->data.len);
			/* The value is there: whoever holds its fleet lease (or
			 * held it and lapsed) has nothing left to do. */
			claim(x->l2, x->space, x->key, L2_CLAIM_DROP, 0, NULL, NULL);
			xfer_finish(x, OUT_WRITTEN, NULL);
		} else {
			size_t off;
			x->l2->n.bytes_written += (int64_t)chunk_span(x, cmd->chunk, &off);
			x->done++;
			pump(x);
		}
		break;
	}
}

void l2_get(struct l2 *l2, const unsigned char key[32], l2_get_cb cb, void *arg)
{
	l2_get_in(l2, NULL, key, cb, arg);
}

void l2_put(struct l2 *l2, const unsigned char key[32], const struct l2_value *v)
{
	l2_put_in(l2, NULL, key, v);
}

void l2_get_in(struct l2 *l2, const char *space, const unsigned char key[32], l2_get_cb cb,
	       void *arg)
{
	static const char inline_end[] = "1048576";     /* L2_INLINE */
	const char *argv[4];
	size_t argvlen[4];
	struct l2_xfer *x;
	int probe;

	_Static_assert(L2_INLINE == 1048576, "inline_end is L2_INLINE");
	if (l2->off || !admit(l2, &probe)) {
		cb(arg, 0, NULL);
		return;
	}
	if (!(x = xfer_new(l2, space, key, probe, cb, arg))) {
		fail_unsent(l2, probe);
		cb(arg, 0, NULL);
		return;
	}
	/* GETRANGE rather than GET: at most L2_INLINE + 1 bytes come back, so
	 * a huge value planted under our name is never buffered whole. */
	argv[0] = "GETRANGE";
	argvlen[0] = 8;
	argv[1] = x->name;
	argvlen[1] = x->name_len;
	argv[2] = "0";
	argvlen[2] = 1;
	argv[3] = inline_end;
	argvlen[3] = sizeof inline_end - 1;
	send_op(x, OP_GET, 0, 4, argv, argvlen);
}

void l2_put_in(struct l2 *l2, const char *space, const unsigned char key[32],
	       const struct l2_value *v)
{
	struct l2_xfer *x;
	size_t total;
	int probe;

	if (l2->off || l2->conf->read_only)
		return;
	total = sealed_len(v, strlen(l2->conf->identity));
	if (!total || (int64_t)total > l2->conf->max_value) {
		log_info("l2: not publishing a %zu-byte value: larger than l2-max-value (%lld)",
			 v->data_len + v->log_len, (long long)l2->conf->max_value);
		return;
	}
	if (!admit(l2, &probe))
		return;
	if (!(x = xfer_new(l2, space, key, probe, NULL, NULL))) {
		fail_unsent(l2, probe);
		return;
	}
	if (l2_seal(key, v, l2->conf->identity, l2->conf->secret, l2->conf->secret_len,
		    &x->data) < 0) {
		fail(x, "cannot seal a value");
		return;
	}
	if (x->data.len <= L2_INLINE) {
		const char *argv[3] = { "SET", x->name, x->data.data };
		size_t argvlen[3] = { 3, x->name_len, x->data.len };
		send_op(x, OP_SET, 0, 3, argv, argvlen);
		return;
	}
	/* The chunks first, the manifest last: a reader finds a manifest only
	 * once every chunk it names was written. */
	memcpy(x->id, x->data.data + x->data.len - L2_MAC_LEN, L2_ID_LEN);
	x->chunk_len = L2_CHUNK;
	x->n_chunks = (uint32_t)((x->data.len + L2_CHUNK - 1) / L2_CHUNK);
	pump(x);
}

/* ---- fleet leases --------------------------------------------------- */

void l2_claim_in(struct l2 *l2, const char *space, const unsigned char key[32],
		 enum l2_claim_op op, int64_t ttl_ms, l2_claim_cb cb, void *arg)
{
	if (l2->off || l2->conf->read_only) {
		if (cb)
			cb(arg, L2_CLAIM_FAILED);
		return;
	}
	claim(l2, space, key, op, ttl_ms, cb, arg);
}

static void claim(struct l2 *l2, const char *space, const unsigned char key[32],
		  enum l2_claim_op op, int64_t ttl_ms, l2_claim_cb cb, void *arg)
{
	char name[NAME_MAX_LEN], ttl[24];
	struct l2_xfer *x;
	int probe;

	if (!admit(l2, &probe)) {
		if (cb)
			cb(arg, L2_CLAIM_FAILED);
		return;
	}
	if (!(x = xfer_new(l2, space, key, probe, NULL, arg))) {
		fail_unsent(l2, probe);
		if (cb)
			cb(arg, L2_CLAIM_FAILED);
		return;
	}
	x->claim = 1;
	x->claim_cb = cb;
	/* The lease sits beside the key's value: "<name>:lease". Dropping it
	 * is a SET with an expiry of 1 ms, so the ACL needs no DEL. */
	memcpy(name, x->name, x->name_len);
	memcpy(name + x->name_len, ":lease", 7);
	const char *argv[6] = {
		"SET", name, l2->node, "PX", ttl,
		op == L2_CLAIM_TAKE ? "NX" : "XX",
	};
	size_t argvlen[6] = {
		3, x->name_len + 6, strlen(l2->node), 2,
		(size_t)snprintf(ttl, sizeof ttl, "%lld",
				 (long long)(op == L2_CLAIM_DROP ? 1 : ttl_ms)), 2,
	};
	send_op(x, OP_CLAIM, 0, 6, argv, argvlen);
}

void l2_counters(struct l2 *l2, struct l2_counters *c)
{
	int mapped = 0;

	*c = l2->n;
	c->breaker_open = 0;
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		mapped |= nd->in_map;
	/* A cluster's: the masters that serve slots (the seeds, until a map
	 * is in); a seed that is down and serves none skips no request. */
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		if ((nd == l2->single || (!l2->single && (mapped ? nd->in_map : nd->seed))) &&
		    nd->state != BR_CLOSED)
			c->breaker_open = 1;
}

/* ---- settings, reloads and addresses ----------------------------------- */

/* A new generation of settings from cfg (one reference), or NULL with a
 * message in err. known: the current generation, whose resolved address
 * is reused if the host name is the same. */
static struct l2_conf *conf_new(const struct l2_config *cfg, const struct l2_conf *known,
				struct buf *err)
{
	struct l2_conf *c = calloc(1, sizeof *c);
	const char *prefix = cfg->prefix ? cfg->prefix : "ptxcache:";
	const char *identity = cfg->identity ? cfg->identity : "";

	if (!c) {
		buf_printf(err, "out of memory");
		return NULL;
	}
	c->refs = 1;
	c->read_only = cfg->read_only;
	c->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms :
				L2_DEFAULT_TIMEOUT_MS;
	c->command_timeout_ms = cfg->command_timeout_ms > 0 ? cfg->command_timeout_ms :
				L2_DEFAULT_TIMEOUT_MS;
	c->max_value = cfg->max_value > 0 ? cfg->max_value : L2_DEFAULT_MAX_VALUE;
	if (strlen(prefix) > L2_PREFIX_MAX) {
		buf_printf(err, "l2 prefix is longer than %d bytes", L2_PREFIX_MAX);
		goto fail;
	}
	if (strlen(identity) > UINT16_MAX) {
		buf_printf(err, "l2: compiler identity is longer than %d bytes", UINT16_MAX);
		goto fail;
	}
	if (parse_url(c, cfg->url, known, err) < 0 || read_secret(c, cfg->secret_file, err) < 0)
		goto fail;
	if (!(c->prefix = strdup(prefix)) || !(c->identity = strdup(identity))) {
		buf_printf(err, "out of memory");
		goto fail;
	}
	return c;
fail:
	conf_unref(c);
	return NULL;
}

static int same_str(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* Does b need other connections than a? */
static int conf_moved(const struct l2_conf *a, const struct l2_conf *b)
{
	if (a->cluster != b->cluster || a->nseeds != b->nseeds)
		return 1;
	for (int i = 0; i < a->nseeds; i++)
		if (a->seeds[i].port != b->seeds[i].port || strcmp(a->seeds[i].host, b->seeds[i].host))
			return 1;
	return !same_str(a->path, b->path) || !same_str(a->name, b->name) ||
	       strcmp(a->host, b->host) || a->port != b->port || a->db != b->db ||
	       !same_str(a->user, b->user) || !same_str(a->password, b->password);
}

/* Take no more commands on nd's connection. What is in flight on it still
 * gets its reply (redisAsyncDisconnect() waits for them), checked under
 * the settings it was sent with; then it closes. One that has not
 * connected yet has sent nothing: it is dropped, its commands fail (and
 * their requests compile). */
static void retire_connection(struct l2_node *nd)
{
	redisAsyncContext *ac = nd->ac;
	int slot = -1;

	if (!ac)
		return;
	for (int i = 0; i < L2_RETIRED_MAX && slot < 0; i++)
		if (!nd->retired[i])
			slot = i;
	if (!nd->connected || slot < 0) {
		drop_connection(nd, OUT_ERROR);
		return;
	}
	nd->ac = NULL;
	nd->connected = 0;
	evtimer_del(nd->connect_timer);
	nd->retired[slot] = ac;
	redisAsyncDisconnect(ac);
}

static void on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
	struct l2 *l2 = arg;
	struct l2_conf *c = l2->dns_conf;
	struct evutil_addrinfo *ai, *pick = NULL;
	char host[NI_MAXHOST];

	l2->resolving = 0;
	l2->dns_conf = NULL;
	if (result == EVUTIL_EAI_CANCEL) {
		conf_unref(c);
		return;
	}
	if (result) {
		log_warn("l2: cannot resolve '%s' again: %s; still using %s", c->name,
			 evutil_gai_strerror(result), c->host);
	} else {
		for (ai = res; ai && !pick; ai = ai->ai_next)   /* IPv4 first */
			if (ai->ai_family == AF_INET)
				pick = ai;
		if (!pick)
			pick = res;
		if (pick && getnameinfo(pick->ai_addr, (socklen_t)pick->ai_addrlen, host,
					sizeof host, NULL, 0, NI_NUMERICHOST) == 0 &&
		    strcmp(host, c->host)) {
			log_info("l2: '%s' now resolves to %s (was %s)", c->name, host, c->host);
			snprintf(c->host, sizeof c->host, "%s", host);
			/* The next command connects to the new address. */
			if (c == l2->conf && l2->single && l2->single->ac &&
			    strcmp(l2->single->ac_host, host))
				retire_connection(l2->single);
		}
	}
	if (res)
		evutil_freeaddrinfo(res);
	conf_unref(c);
}

/* Look the host name up again, in the background: hiredis would block the
 * loop on getaddrinfo(). A fresh evdns base each time reads
 * /etc/resolv.conf and /etc/hosts as they are now. */
static void resolve_again(struct l2 *l2)
{
	struct evutil_addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };

	if (!l2->conf->name || l2->resolving || l2->freeing)
		return;
	if (l2->dns)
		evdns_base_free(l2->dns, 0);
	l2->dns = evdns_base_new(l2->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
	if (!l2->dns) {
		log_warn("l2: cannot resolve '%s' again: no resolver", l2->conf->name);
		return;
	}
	l2->resolving = 1;
	l2->dns_conf = l2->conf;
	l2->conf->refs++;
	/* May call on_resolved() before it returns (/etc/hosts, a cache). */
	evdns_getaddrinfo(l2->dns, l2->conf->name, NULL, &hints, on_resolved, l2);
}

/* The node a single Redis's commands go to (made once, kept across
 * reloads), or NULL: no memory. */
static struct l2_node *single_node(struct l2 *l2)
{
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		if (nd->single)
			return nd;
	return node_new(l2, NULL);
}

/* Point the tier at c's servers: a single Redis's node, or a cluster's
 * seeds with an empty map (read at once, in the background). Every
 * connection open is retired and every breaker closed. 0, or -1 (no
 * memory; nothing changed). */
static int use_servers(struct l2 *l2, const struct l2_conf *c)
{
	struct l2_node *single = NULL;

	if (!c->cluster && !(single = single_node(l2)))
		return -1;
	for (int i = 0; i < c->nseeds; i++)
		if (!node_get(l2, &c->seeds[i]))
			return -1;
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next) {
		retire_connection(nd);
		breaker_reset(nd);
		nd->seed = nd->in_map = 0;
	}
	for (int i = 0; i < c->nseeds; i++)
		node_get(l2, &c->seeds[i])->seed = 1;
	memset(l2->owner, 0, sizeof l2->owner);
	l2->single = single;
	l2->rr = NULL;
	l2->refresh_after_us = 0;
	l2->refresh_fails = 0;
	return 0;
}

struct l2 *l2_new(struct event_base *base, const struct l2_config *cfg, struct buf *err)
{
	struct l2 *l2 = calloc(1, sizeof *l2);

	if (!l2) {
		buf_printf(err, "out of memory");
		return NULL;
	}
	l2->base = base;
	{
		char host[64] = "";
		gethostname(host, sizeof host - 1);
		snprintf(l2->node, sizeof l2->node, "%s:%ld", host, (long)getpid());
	}
	if (!(l2->conf = conf_new(cfg, NULL, err)))
		goto fail;
	if (!(l2->refresh_timer = evtimer_new(base, on_refresh_timer, l2)) ||
	    use_servers(l2, l2->conf) < 0) {
		buf_printf(err, "out of memory");
		goto fail;
	}
	map_refresh(l2);                /* a cluster: its map, in the background */
	return l2;
fail:
	l2_free(l2);
	return NULL;
}

int l2_reconfigure(struct l2 *l2, const struct l2_config *cfg, struct buf *err)
{
	struct l2_conf *next = NULL, *cur = l2->conf;

	if (!cfg->url || !*cfg->url) {
		if (!l2->off)
			log_info("l2: off");
		l2->off = 1;
		for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
			retire_connection(nd);
		return 0;
	}
	if (!(next = conf_new(cfg, cur, err)))
		return -1;
	int moved = conf_moved(cur, next);
	/* Another server: its own chance, with the breaker closed. */
	if (moved && use_servers(l2, next) < 0) {
		buf_printf(err, "out of memory");
		conf_unref(next);
		return -1;
	}
	if (l2->off || moved || strcmp(cur->prefix, next->prefix) ||
	    cur->read_only != next->read_only || cur->secret_len != next->secret_len ||
	    CRYPTO_memcmp(cur->secret, next->secret, next->secret_len) ||
	    cur->connect_timeout_ms != next->connect_timeout_ms ||
	    cur->command_timeout_ms != next->command_timeout_ms ||
	    cur->max_value != next->max_value)
		log_info("l2: %s, prefix '%s'%s, timeout %d ms, values up to %lld bytes%s",
			 next->where, next->prefix, next->read_only ? ", read-only" : "",
			 next->command_timeout_ms, (long long)next->max_value,
			 moved ? "; reconnecting" : "");
	l2->conf = next;
	l2->off = 0;
	conf_unref(cur);
	if (moved)
		map_refresh(l2);
	return 0;
}

void l2_free(struct l2 *l2)
{
	if (!l2)
		return;
	/* No callbacks from here on: the caller is going away. */
	l2->freeing = 1;
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next) {
		drop_connection(nd, OUT_ERROR);
		for (int i = 0; i < L2_RETIRED_MAX; i++) {
			redisAsyncContext *ac = nd->retired[i];
			nd->retired[i] = NULL;
			if (ac)
				redisAsyncFree(ac);
		}
	}
	while (l2->pending)             /* none: each was on a connection */
		complete(l2->pending, OUT_ERROR, NULL);
	if (l2->dns)
		evdns_base_free(l2->dns, 1);    /* cancels a lookup: on_resolved() */
	while (l2->nodes) {
		struct l2_node *nd = l2->nodes;
		l2->nodes = nd->next;
		event_free(nd->connect_timer);
		free(nd);
	}
	if (l2->refresh_timer)
		event_free(l2->refresh_timer);
	conf_unref(l2->conf);
	free(l2);
}
