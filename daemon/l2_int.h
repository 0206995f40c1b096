/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_int: what the tier's files share, and nothing else includes.
 * l2.c (values: envelopes, manifests, transfers, claims) stands on
 * l2_conn.c (nodes, routing, timers, breakers) through send_cmd(),
 * admit(), probe_unsent() and fail_unsent(); l2_conn.c answers a command through the
 * struct l2_xfer_ops its transfer gave it, never by name. Both hold
 * generations of the settings that l2_conf.c makes (conf_new(),
 * conf_unref(), conf_moved()). The structures here are a generation of
 * the settings, a command, a transfer and the tier itself; a node
 * (struct l2_node) is the connection layer's alone. The seal (l2_seal.c)
 * and hiredis's adapter to the loop (l2_ev.c) have headers of their own.
 */
#ifndef PTXCACHE_L2_INT_H
#define PTXCACHE_L2_INT_H

#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "daemon/l2_cluster.h"
#include "daemon/l2.h"
#include "proto/buf.h"

#define L2_SECRET_MAX 4096
#define L2_PREFIX_MAX 256
#define L2_ID_LEN 16                    /* a value's random id: its key, its chunks' names */
#define L2_SEEDS_MAX 64                 /* seeds in one redis-cluster:// URL */
#define L2_CHUNK_MIN (4 << 10)          /* a reader's bounds on a writer's chunks */
#define L2_CHUNK_MAX (64 << 20)

/* How a command ended. Only a connection that failed (OUT_ERROR: no
 * connection, or it went away under the command) or was silent for a whole
 * period (OUT_TIMEOUT) counts toward its node's breaker: an error reply
 * (OUT_REFUSED: OOM, NOAUTH, CLUSTERDOWN) is Redis answering, counted as an
 * error all the same. OUT_SKIPPED: not sent, its node's breaker is open
 * (not counted). OUT_MAP: a slot map read and installed. OUT_REPLY: a
 * command's reply, for its transfer to read (xfer_step()). */
enum outcome { OUT_HIT, OUT_MISS, OUT_REJECT, OUT_WRITTEN, OUT_ERROR, OUT_TIMEOUT,
	       OUT_REFUSED, OUT_SKIPPED, OUT_MAP, OUT_REPLY };

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
	const struct l2_xfer_ops *ops;  /* with xfer: what its end does to it */
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
	int64_t sent_us;                /* when it was first sent (L2_CMD_MAX_MS) */
	int outq;                       /* and its kernel send queue's bytes */
	sds wire;                       /* a cluster's: the command, to resend */
	unsigned slot;                  /* a cluster's: argv[1]'s */
	int redirects;                  /* and retries after a failed connection */
	int parked;                     /* waits for the next slot map (park()) */
	int waited;                     /* once, for a node whose breaker is open */
};

/* One l2_get_in() or l2_put_in(): the commands it takes, the bytes it
 * moves, and its one outcome. A value of up to L2_INLINE bytes sealed is
 * one command; a larger one is chunks and a manifest (l2.c's top). */
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
	size_t scope_len;               /* its prefix + space: the seal's scope */
	char space[L2_SPACE_MAX + 1];
	int probe;                      /* its first command: the breaker's probe */
	int refs;                       /* 1 until finished, + 1 a command */
	int finished;
	int abandoned;                  /* a get no longer wanted: l2_get_abandon() */
	struct buf data;                /* put: the sealed value whole, or the
	                                   record of a chunked one; get: the
	                                   record, opened chunk by chunk */
	struct buf scratch;             /* put: the chunk being sealed */
	unsigned char id[L2_ID_LEN];    /* names this write's chunks */
	unsigned char vkey[32];         /* chunked: the value's AEAD key */
	size_t chunk_len;               /* of the record, in each chunk */
	uint32_t n_chunks, sent, done;  /* chunks in all, sent, answered */
};

/* What a command's end does to its transfer: the value layer's
 * xfer_step() and xfer_unref(), which its send_op() hands down with each
 * command. The connection layer reaches the layer above only through
 * this pointer, never by name (tests/test_layers.py). */
struct l2_xfer_ops {
	void (*step)(struct l2_cmd *cmd, enum outcome o, const redisReply *r);
	void (*unref)(struct l2_xfer *x);
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

static inline int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline void note_error(struct l2 *l2, const char *what)
{
	snprintf(l2->last_error, sizeof l2->last_error, "%s",
		 what && *what ? what : "unknown error");
}

/* The connection layer's side of the seam (l2_conn.c), for the value
 * layer (l2.c) above it. */
int admit(struct l2 *l2, int *probe);
void send_cmd(struct l2 *l2, struct l2_cmd *cmd, int argc, const char **argv,
	      const size_t *argvlen, int64_t timeout_ms);
void fail_unsent(struct l2 *l2, int probe);
/* A half-open breaker's probe that admit() gave but no command carried
 * (the transfer failed here first): Redis said nothing, so the next
 * request probes. */
void probe_unsent(struct l2 *l2);

/* The settings (l2_conf.c), for both: a new generation from cfg (one
 * reference; known: the current one, whose resolved address is reused),
 * its release, and whether b needs other connections than a. */
struct l2_conf *conf_new(const struct l2_config *cfg, const struct l2_conf *known,
			 struct buf *err);
void conf_unref(struct l2_conf *c);
int conf_moved(const struct l2_conf *a, const struct l2_conf *b);

#endif
