/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2: the shared second tier on Redis, its value layer; see l2.h for the
 * contract, l2_conn.c for the connections below it.
 *
 * What: the values of the tier and what is done with them. l2_get() sends
 * GETRANGE prefix+hex 0 1048576 and opens the envelope in the reply;
 * l2_put() seals the value and sends SET in the background; l2_claim_in()
 * takes, renews or drops a fleet lease (a SET beside the key). Nothing
 * else is ever sent from here.
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
 * Layers: this file is the value layer (transfers: l2_get_in(),
 * l2_put_in(), l2_claim_in(), the envelope and the manifest, xfer_step()'s
 * reading of each reply). It hands each command to send_cmd()
 * (l2_conn.c), whose argv[1] is always the key (so a value's chunks spread
 * over a cluster's shards), with its transfer and xfer_ops: the connection
 * layer below (nodes, routing, timers, breakers) knows nothing of values,
 * and reaches this file only through that pointer. l2_int.h holds what the
 * files of the tier share: a generation of the settings (l2_conf.c), a
 * command, a transfer, the tier.
 *
 * Why it is built this way:
 *  - GETRANGE rather than GET: Redis itself then sends at most 1 MiB + 1
 *    bytes for a key (a chunk's own length + 1 for a chunk), so a huge
 *    value planted under our prefix cannot make every node buffer it (a
 *    missing key reads as "", which no envelope is).
 *  - A transfer holds a reference to the settings it began under, and each
 *    command one to its own: a reply is checked with the secret, identity
 *    and size limit of its own request whatever a reload changed meanwhile.
 *  - The envelope is verified before any byte of it is used, and every
 *    length is checked against the bytes that remain before it is read.
 *
 * Never: trust a byte from Redis before its HMAC verifies; log the secret
 * or a value; answer a request from a value that failed any check; call a
 * callback twice.
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
#include "daemon/l2_int.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "daemon/log.h"

#define L2_MAGIC "PXL2"
#define L2_VERSION 1
/* magic, version, kind, status, identity_len, data_len, log_len */
#define L2_FIXED (4 + 1 + 1 + 4 + 2 + 4 + 4)
/* Values: a sealed value of up to L2_INLINE bytes is stored whole under
 * its key; a larger one as chunks of L2_CHUNK bytes, L2_WINDOW of them in
 * flight per transfer, and a manifest under its key. */
#define L2_INLINE (1 << 20)
#define L2_CHUNK (1 << 20)
#define L2_WINDOW 4
#define L2_MANIFEST_MAGIC "PXLM"
/* magic, version, chunk_len u32, total u64, n_chunks u32, id */
#define L2_MANIFEST_BODY (4 + 1 + 4 + 8 + 4 + L2_ID_LEN)
#define L2_MANIFEST_LEN (L2_MANIFEST_BODY + L2_MAC_LEN)
#define L2_CHUNK_MIN (4 << 10)          /* a reader's bounds on a writer's */
#define L2_CHUNK_MAX (64 << 20)

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

/* ---- transfers: a value whole, or its chunks and manifest --------------- */

static void xfer_unref(struct l2_xfer *x)
{
	if (!x || --x->refs > 0)
		return;
	buf_free(&x->data);
	conf_unref(x->conf);
	free(x);
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

static void xfer_step(struct l2_cmd *cmd, enum outcome o, const redisReply *r);

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

static const struct l2_xfer_ops xfer_ops = { xfer_step, xfer_unref };

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
	cmd->ops = &xfer_ops;
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
