/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_cluster: what a Redis Cluster client must compute, with no I/O: the hash
 * slot of a key, the slot map a CLUSTER SLOTS reply describes, and the
 * MOVED and ASK redirections a node answers with. l2_conn.c routes over it.
 *
 * Everything here reads bytes that came from the network: a reply of the
 * wrong shape, a slot or a port out of range, a host that is not a numeric
 * address is an error with a message, never a crash or a partial result.
 */
#ifndef PTXCACHE_L2_CLUSTER_H
#define PTXCACHE_L2_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define CLUSTER_SLOTS 16384
#define CLUSTER_HOST_MAX 64             /* a numeric IPv6 address fits */
#define CLUSTER_NODES_MAX 1024          /* masters in one map: more is hostile */

/* Where a node listens: a numeric IPv4 or IPv6 address (never a name:
 * hiredis would resolve it, blocking) and a port in 1..65535. */
struct cluster_addr {
	char host[CLUSTER_HOST_MAX];
	int port;
};

/* Who serves each slot: owner[slot] indexes node[], or -1 where no node
 * serves it (a cluster partly down, or a map read mid-reshard). */
struct cluster_map {
	int nnodes;
	struct cluster_addr *node;      /* the masters, each once */
	int16_t owner[CLUSTER_SLOTS];
};

/* The hash slot of key[0..len): CRC16-XMODEM mod 16384 of the key, or of
 * what lies between its first '{' and the first '}' after it when that is
 * not empty (the hash tag: "{user1000}.a" and "{user1000}.b" share a slot). */
unsigned cluster_slot(const void *key, size_t len);

/* The map a CLUSTER SLOTS reply describes: an array of
 * [start, end, [host, port, id?, ...] (the master), replicas...]. An empty
 * or NULL host means conn_host (the node that answered; NULL: an error).
 * Returns a new map (free it with cluster_map_free()), or NULL with the
 * reason in err (errlen bytes) for a reply of any other shape, a slot out
 * of 0..16383 or a range that overlaps another, a port out of 1..65535, a
 * host that is not a numeric address, more than CLUSTER_NODES_MAX masters,
 * or no memory. The reply is only read. */
struct cluster_map *cluster_map_parse(const redisReply *r, const char *conn_host,
				      char *err, size_t errlen);
void cluster_map_free(struct cluster_map *m);      /* NULL ok */

/* Who serves slot (a pointer into m), or NULL: none, or slot out of range. */
const struct cluster_addr *cluster_map_lookup(const struct cluster_map *m, unsigned slot);

/* A redirection: "MOVED <slot> <host>:<port>" (the slot lives there now)
 * or "ASK <slot> <host>:<port>" (this once, ask there after ASKING). The
 * host may be IPv6 (the port follows the last ':'; brackets are taken
 * too); an empty host means conn_host. */
struct cluster_redirect {
	int ask;                        /* 1: ASK, 0: MOVED */
	unsigned slot;
	struct cluster_addr to;
};

/* Parse the error reply s[0..len) (without the leading '-'). 0 and *out,
 * or -1 if it is no redirection or a malformed one (a slot, port or host
 * out of range, a host that is not numeric, trailing bytes). */
int cluster_redirect_parse(const char *s, size_t len, const char *conn_host,
			   struct cluster_redirect *out);

/* Is host a numeric IPv4 or IPv6 address? */
int cluster_numeric_host(const char *host);

/* The decimal digits [s, e) (at least one, nothing else) as a number no
 * larger than max: 0 and *out, or -1. A redirection's slot and port, and
 * l2_conf.c's URL's port and database. */
int cluster_decimal(const char *s, const char *e, long max, long *out);

#endif
