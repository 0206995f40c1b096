/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_cluster: Redis Cluster's routing arithmetic, pure; see l2_cluster.h.
 *
 * What: the key's hash slot (CRC16-XMODEM, polynomial 0x1021, initial 0,
 * mod 16384, with the hash-tag rule of the Redis Cluster specification),
 * the slot map of a CLUSTER SLOTS reply, and MOVED/ASK redirections.
 *
 * Why it is built this way:
 *  - Debian 12 has hiredis 0.14 and no cluster client library, so the
 *    tier (l2_conn.c) routes itself; this is the part of that which can be
 *    tested alone (tests/unit/test_cluster.c: the specification's vectors,
 *    hostile replies), with no socket, no loop and no allocation but the
 *    map's.
 *  - Only numeric addresses come out: l2_conn.c hands them to hiredis,
 *    which would call getaddrinfo(), blocking the loop, on anything else. A
 *    cluster announces IPs unless told to announce host names; a map or a
 *    redirection naming a host is refused, loudly, rather than resolved.
 *  - A map keeps the masters alone: ptxcache reads and writes on masters
 *    (a replica may lag behind a write it was just told about).
 *
 * Never: read a redisReply element without checking its type first; index
 * an array past its element count; trust a slot, a port or a length.
 */
#include "daemon/l2_cluster.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CRC16-XMODEM, a byte at a time: the table Redis's crc16.c has, built
 * here from the polynomial rather than copied. */
static uint16_t crc16(const unsigned char *p, size_t n)
{
	uint16_t crc = 0;

	while (n--) {
		crc ^= (uint16_t)(*p++ << 8);
		for (int i = 0; i < 8; i++)
			crc = crc & 0x8000 ? (uint16_t)(crc << 1 ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

unsigned cluster_slot(const void *key, size_t len)
{
	const unsigned char *k = key;
	const unsigned char *open = memchr(k, '{', len), *close;

	if (open) {
		size_t rest = len - (size_t)(open - k) - 1;
		close = memchr(open + 1, '}', rest);
		if (close && close > open + 1)
			return crc16(open + 1, (size_t)(close - open - 1)) & (CLUSTER_SLOTS - 1);
	}
	return crc16(k, len) & (CLUSTER_SLOTS - 1);
}

int cluster_numeric_host(const char *host)
{
	unsigned char bin[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, bin) == 1 || inet_pton(AF_INET6, host, bin) == 1;
}

/* host[0..n) (empty: conn_host) into a, checked. 0 or -1 with err. */
static int set_host(struct cluster_addr *a, const char *host, size_t n, const char *conn_host,
		    char *err, size_t errlen)
{
	if (n == 0) {
		if (!conn_host || !*conn_host) {
			snprintf(err, errlen, "an empty host, and no connection's host to take");
			return -1;
		}
		host = conn_host;
		n = strlen(conn_host);
	}
	if (n >= sizeof a->host || memchr(host, '\0', n)) {
		snprintf(err, errlen, "a host of %zu bytes", n);
		return -1;
	}
	memcpy(a->host, host, n);
	a->host[n] = '\0';
	if (!cluster_numeric_host(a->host)) {
		snprintf(err, errlen, "host '%s' is not a numeric address", a->host);
		return -1;
	}
	return 0;
}

static int is_int(const redisReply *r, long long lo, long long hi)
{
	return r && r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi;
}

/* One [host, port, id?, ...] of an entry into a. 0 or -1 with err. */
static int parse_node(const redisReply *r, const char *conn_host, struct cluster_addr *a,
		      char *err, size_t errlen)
{
	const redisReply *h, *p;

	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 || !r->element) {
		snprintf(err, errlen, "a node that is not [host, port, ...]");
		return -1;
	}
	h = r->element[0];
	p = r->element[1];
	if (!h || (h->type != REDIS_REPLY_STRING && h->type != REDIS_REPLY_NIL)) {
		snprintf(err, errlen, "a node whose host is not a string");
		return -1;
	}
	if (!is_int(p, 1, 65535)) {
		snprintf(err, errlen, "a node whose port is not in 1..65535");
		return -1;
	}
	if (set_host(a, h->type == REDIS_REPLY_STRING && h->str ? h->str : "",
		     h->type == REDIS_REPLY_STRING && h->str ? h->len : 0, conn_host, err, errlen) < 0)
		return -1;
	a->port = (int)p->integer;
	for (size_t i = 2; i < r->elements; i++)
		if (!r->element[i]) {
			snprintf(err, errlen, "a node with a missing field");
			return -1;
		}
	return 0;
}

void cluster_map_free(struct cluster_map *m)
{
	if (!m)
		return;
	free(m->node);
	free(m);
}

struct cluster_map *cluster_map_parse(const redisReply *r, const char *conn_host,
				      char *err, size_t errlen)
{
	struct cluster_map *m = calloc(1, sizeof *m);
	int cap = 0;

	if (!m) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (int s = 0; s < CLUSTER_SLOTS; s++)
		m->owner[s] = -1;
	if (!r || r->type != REDIS_REPLY_ARRAY || (r->elements && !r->element)) {
		snprintf(err, errlen, "CLUSTER SLOTS did not answer an array");
		goto fail;
	}
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i];
		struct cluster_addr a, spare;
		int idx = -1;

		if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !e->element) {
			snprintf(err, errlen, "entry %zu is not [start, end, master, ...]", i);
			goto fail;
		}
		if (!is_int(e->element[0], 0, CLUSTER_SLOTS - 1) ||
		    !is_int(e->element[1], 0, CLUSTER_SLOTS - 1) ||
		    e->element[0]->integer > e->element[1]->integer) {
			snprintf(err, errlen, "entry %zu has no slot range within 0..16383", i);
			goto fail;
		}
		if (parse_node(e->element[2], conn_host, &a, err, errlen) < 0)
			goto fail;
		/* Replicas: not used, but of the same shape or the reply is
		 * not what we think it is. */
		for (size_t j = 3; j < e->elements; j++)
			if (parse_node(e->element[j], conn_host, &spare, err, errlen) < 0)
				goto fail;
		for (int k = 0; k < m->nnodes && idx < 0; k++)
			if (m->node[k].port == a.port && !strcmp(m->node[k].host, a.host))
				idx = k;
		if (idx < 0) {
			if (m->nnodes >= CLUSTER_NODES_MAX) {
				snprintf(err, errlen, "more than %d masters", CLUSTER_NODES_MAX);
				goto fail;
			}
			if (m->nnodes == cap) {
				int ncap = cap ? cap * 2 : 8;
				struct cluster_addr *n = realloc(m->node, (size_t)ncap * sizeof *n);
				if (!n) {
					snprintf(err, errlen, "out of memory");
					goto fail;
				}
				m->node = n;
				cap = ncap;
			}
			idx = m->nnodes++;
			m->node[idx] = a;
		}
		for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++) {
			if (m->owner[s] >= 0) {
				snprintf(err, errlen, "slot %lld is in two ranges", s);
				goto fail;
			}
			m->owner[s] = (int16_t)idx;
		}
	}
	return m;
fail:
	cluster_map_free(m);
	return NULL;
}

const struct cluster_addr *cluster_map_lookup(const struct cluster_map *m, unsigned slot)
{
	if (!m || slot >= CLUSTER_SLOTS || m->owner[slot] < 0)
		return NULL;
	return &m->node[m->owner[slot]];
}

int cluster_decimal(const char *s, const char *e, long max, long *out)
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

int cluster_redirect_parse(const char *s, size_t len, const char *conn_host,
			   struct cluster_redirect *out)
{
	const char *p, *e = s + len, *sp, *colon = NULL, *h, *he;
	char why[96];
	long slot, port;

	if (!s)
		return -1;
	if (len > 6 && !memcmp(s, "MOVED ", 6)) {
		out->ask = 0;
		p = s + 6;
	} else if (len > 4 && !memcmp(s, "ASK ", 4)) {
		out->ask = 1;
		p = s + 4;
	} else {
		return -1;
	}
	sp = memchr(p, ' ', (size_t)(e - p));
	/* A slot and a port: at most six characters each. */
	if (!sp || sp - p > 6 || cluster_decimal(p, sp, CLUSTER_SLOTS - 1, &slot) < 0)
		return -1;
	h = sp + 1;
	for (const char *q = h; q < e; q++) {
		if (*q == ' ' || *q == '\0' || *q == '\r' || *q == '\n')
			return -1;
		if (*q == ':')
			colon = q;
	}
	if (!colon || e - (colon + 1) > 6 || cluster_decimal(colon + 1, e, 65535, &port) < 0 ||
	    port == 0)
		return -1;
	he = colon;
	if (he > h && *h == '[') {
		if (he[-1] != ']' || he - h <= 2)
			return -1;
		h++;
		he--;
	}
	if (set_host(&out->to, h, (size_t)(he - h), conn_host, why, sizeof why) < 0)
		return -1;
	out->to.port = (int)port;
	out->slot = (unsigned)slot;
	return 0;
}
