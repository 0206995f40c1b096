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
 * Values of any size (up to l2-max-value, 1 GiB by default). A value is
 * first laid out as its record (kind, status, identity, data, log); the
 * record is then sealed with AES-256-GCM, so Redis holds ciphertext and
 * learns sizes alone. A record that seals into at most 1 MiB (L2_INLINE)
 * is stored whole under its key. A larger one is a transfer (struct
 * l2_xfer): its record cut into chunks of 1 MiB - 16 bytes, each sealed
 * on its own (1 MiB stored) under "<key's name>:<id>:<i>", written with
 * at most L2_WINDOW_BYTES (4 MiB) of chunks in flight, and, once every
 * chunk is written, a sealed manifest under the key itself. A reader
 * finds the manifest, checks it, fetches the chunks it names with the same
 * window, opens each as it arrives straight into the record, and reads
 * the record once all are in. So:
 *  - no one command carries more than 1 MiB: none holds Redis, or a
 *    connection other lookups share, for long (bench/tier.py measures the
 *    small lookups of another node while 100 MB crosses);
 *  - the id is 16 random bytes drawn for each write: another write of the
 *    key names other chunks, so a reader never assembles one value from
 *    the chunks of two writes; a writer that dies between chunks wrote no
 *    manifest, and the key still names the value before it (or nothing);
 *    its chunks are left to Redis's eviction;
 *  - the manifest is sealed too, and bounded before it is believed: a
 *    chunk size in [4 KiB, 64 MiB], a count that matches the length, a
 *    length within l2-max-value, so no one without the secret makes a
 *    reader fetch or allocate anything;
 *  - a chunk that is gone is a miss; one of the wrong length, or that does
 *    not open under its own position, a reject (the transfer ends at the
 *    first);
 *  - a transfer, however many commands it takes, is counted once (a hit,
 *    a miss, a write...) and feeds the breaker once.
 *
 * Layers: this file is the value layer (transfers: l2_get_in(),
 * l2_put_in(), l2_claim_in(), xfer_step()'s reading of each reply), on
 * the seal (l2_seal.c: the record, the AEAD, the manifest). It hands each command to
 * send_cmd() (l2_conn.c), whose argv[1] is always the key (so a value's
 * chunks spread over a cluster's shards), with its transfer and xfer_ops:
 * the connection layer below (nodes, routing, timers, breakers) knows
 * nothing of values, and reaches this file only through that pointer.
 * l2_int.h holds what the files of the tier share: a generation of the
 * settings (l2_conf.c), a command, a transfer, the tier.
 *
 * The seal (l2_seal.c): each value under a key of its own, derived from
 * the fleet secret for its scope and a random id, and bound to its key's
 * name and, for a chunk, to its position; the layouts are there too.
 *
 * Why it is built this way:
 *  - GETRANGE rather than GET: Redis itself then sends at most 1 MiB + 1
 *    bytes for a key (a chunk's own length + 1 for a chunk), so a huge
 *    value planted under our prefix cannot make every node buffer it (a
 *    missing key reads as "", which no value is).
 *  - A transfer holds a reference to the settings it began under, and each
 *    command one to its own: a reply is checked with the secret, identity
 *    and size limit of its own request whatever a reload changed meanwhile.
 *  - Chunks are pipelined by bytes, not by count (a window of 4 MiB), and
 *    each is opened into its place in the record as it arrives: the
 *    transfer moves at the speed of the connection (bench/large.py), a
 *    reader never buffers a chunk longer than its reply, and a put's
 *    chunks are sealed one by one as the window lets them go, in the
 *    loop's later turns, never before the caller's own reply.
 *  - The window opens L2_RAMP chunks at a time (each reply sends at most
 *    two more): Redis executes the commands it reads in one go before it
 *    writes any reply, so a burst of a whole window would leave the
 *    connection silent while Redis copies the whole window (on a slow
 *    host, longer than the 50 ms silence bound); growing by a chunk per
 *    reply keeps what Redis takes in at once to two chunks while the
 *    window fills. The window itself is 4 MiB, not more: Redis holds a
 *    reply for each chunk in flight, and with 8 MiB of them a loaded host
 *    left 256 MB transfers silent past the bound (bench/large.py).
 *  - A reader's record is faulted in at once (prefault()) before its
 *    chunks are opened into it, AES-GCM is warmed at start (l2_new()), and
 *    the connection layer reads up to 1 MiB an event and keeps hiredis's
 *    buffer between replies: on a virtualised host a page fault costs
 *    about 10 us (2.5 ms a MiB), more than opening the MiB, and a fresh
 *    node's first get paid each of these (bench/large.py: 8 MB 54 -> 34
 *    ms, 64 MB 346 -> 187 ms on a single Redis). The buffers a transfer
 *    takes from the heap are faulted in at start too (l2_new(): 1 MiB
 *    first get 11 -> 2 ms). A 1 MiB value still pays a manifest's round
 *    trip; a larger inline threshold or a chunk named before its
 *    manifest was not tried.
 *  - Every length is checked against the bytes that remain before it is
 *    read, and no byte of a record is used before every chunk of it has
 *    opened.
 *
 * Never: trust a byte from Redis before it opens under its own key, name
 * and position; log the secret or a value; answer a request from a value
 * that failed any check; call a callback twice; seal two things under one
 * key and nonce.
 */
#include "daemon/l2_seal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "daemon/log.h"

/* Values: one that seals into at most L2_INLINE bytes is stored whole
 * under its key; a larger one as chunks of L2_CHUNK bytes stored (a
 * record's L2_CHUNK - L2_TAG_LEN, and a tag), up to L2_WINDOW_BYTES of
 * them in flight per transfer, and a manifest under its key. */
#define L2_INLINE (1 << 20)
#define L2_CHUNK (1 << 20)
#define L2_WINDOW_BYTES (4 << 20)
#define L2_RAMP 2                       /* chunks sent per reply, at most */
/* A put's commands may find their connection silent this long (or
 * l2-timeout-ms, if longer): no request waits on a put, and a Redis that
 * stops for a moment while it stores a chunk (a loaded node's scheduler,
 * its own fork for a save) would otherwise cost the fleet the value. A
 * get's and a claim's bound stays l2-timeout-ms: a compile waits on them. */
#define L2_PUT_SILENCE_MS 1000

/* ---- transfers: a value whole, or its chunks and manifest --------------- */

static void xfer_unref(struct l2_xfer *x)
{
	if (!x || --x->refs > 0)
		return;
	OPENSSL_cleanse(x->vkey, sizeof x->vkey);
	buf_free(&x->data);
	buf_free(&x->scratch);
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
	char scope[L2_PREFIX_MAX + L2_SPACE_MAX + 1];

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
	/* The name: prefix + space (the scope) + 64 hex digits. */
	snprintf(scope, sizeof scope, "%.*s%.*s", L2_PREFIX_MAX, l2->conf->prefix,
		 L2_SPACE_MAX, space ? space : "");
	x->scope_len = strlen(scope);
	x->name_len = name_of(scope, key, x->name);
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
	if (x->probe) {
		/* Ended before its first command (no memory, a seal that
		 * failed): the probe it was admitted as went nowhere. */
		probe_unsent(x->l2);
		x->probe = 0;
	}
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

/* How long op's connection may be silent (L2_PUT_SILENCE_MS). */
static int64_t silence_ms(const struct l2_conf *conf, enum op op)
{
	int64_t ms = conf->command_timeout_ms;

	if ((op == OP_SET || op == OP_SET_CHUNK) && ms < L2_PUT_SILENCE_MS)
		ms = L2_PUT_SILENCE_MS;
	return ms;
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
	cmd->ops = &xfer_ops;
	x->refs++;
	cmd->op = op;
	cmd->chunk = chunk;
	cmd->refs = 1;                  /* until completed */
	cmd->fail = OUT_ERROR;
	cmd->probe = x->probe;          /* the first command is the probe */
	x->probe = 0;
	send_cmd(x->l2, cmd, argc, argv, argvlen, silence_ms(x->conf, op));
}

/* The record's bytes in chunk i: their offset and length. */
static size_t chunk_span(const struct l2_xfer *x, uint32_t i, size_t *off)
{
	*off = (size_t)i * x->chunk_len;
	return x->data.len - *off < x->chunk_len ? x->data.len - *off : x->chunk_len;
}

static void send_chunk(struct l2_xfer *x, uint32_t i)
{
	char name[NAME_MAX_LEN], end[24];
	size_t off, len = chunk_span(x, i, &off), name_len = chunk_name(x, i, name);
	unsigned char ad[L2_CHUNK_AD];

	if (x->cb) {
		/* At most its length + 1 bytes: a longer chunk is seen, never
		 * read whole. */
		const char *argv[4] = { "GETRANGE", name, "0", end };
		size_t argvlen[4] = { 8, name_len, 1,
				      (size_t)snprintf(end, sizeof end, "%zu", len + L2_TAG_LEN) };
		send_op(x, OP_GET_CHUNK, i, 4, argv, argvlen);
		return;
	}
	/* A put seals each chunk as the window lets it go; send_cmd() has
	 * copied it out of scratch when it returns. */
	chunk_ad(x->id, i, x->n_chunks, ad);
	if (aead(1, x->vkey, N_CHUNK, i, ad, sizeof ad, x->name, x->name_len,
		 (const unsigned char *)x->data.data + off, len, (unsigned char *)x->scratch.data,
		 (unsigned char *)x->scratch.data + len) < 0) {
		fail(x, "cannot seal a chunk");
		return;
	}
	const char *argv[3] = { "SET", name, x->scratch.data };
	size_t argvlen[3] = { 3, name_len, len + L2_TAG_LEN };
	send_op(x, OP_SET_CHUNK, i, 3, argv, argvlen);
}

/* Every chunk of a get is in and opened: read the record. */
static void assembled(struct l2_xfer *x)
{
	struct l2_value v;
	const char *why;

	if (record_read((const unsigned char *)x->data.data, x->data.len, x->conf->identity, &v,
			&why) < 0)
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

	if (manifest_seal(x->name, x->name_len, x->vkey, (uint32_t)x->chunk_len, x->data.len,
			  x->n_chunks, x->id, m) < 0) {
		fail(x, "cannot seal a manifest");
		return;
	}
	send_op(x, OP_SET, 0, 3, argv, argvlen);
}

/* Keep up to L2_WINDOW_BYTES of x's chunks in flight (at most max of them
 * sent now: L2_RAMP per reply), so a transfer streams at the connection's
 * speed while no one command holds a connection (or Redis) for long and
 * others interleave;
 * once every chunk is answered, read the record (a get) or write the
 * manifest (a put). */
static void pump(struct l2_xfer *x, uint32_t max)
{
	uint32_t window = (uint32_t)(L2_WINDOW_BYTES / (x->chunk_len + L2_TAG_LEN));

	if (window < 1)
		window = 1;
	x->refs++;                      /* a failed send may finish x */
	while (!x->finished && max-- > 0 && x->sent < x->n_chunks && x->sent - x->done < window)
		send_chunk(x, x->sent++);
	if (!x->finished && x->done == x->n_chunks)
		x->cb ? assembled(x) : send_manifest(x);
	xfer_unref(x);
}

/* Fault a large buffer's pages in with one call where the kernel can
 * (Linux 5.14: MADV_POPULATE_WRITE) rather than one fault per page as
 * the chunks are opened into it: a fault costs about 10 us on a
 * virtualised host, 2.5 ms a MiB, more than opening the MiB. Only a
 * hint: where it fails, the pages fault in as they are written. */
static void prefault(void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t from = ((uintptr_t)p + page - 1) & ~(page - 1);
	uintptr_t to = ((uintptr_t)p + len) & ~(page - 1);

	if (to > from)
		madvise((void *)from, to - from, MADV_POPULATE_WRITE);
#else
	(void)p;
	(void)len;
#endif
}

/* The reply under the key itself: nothing, a value stored whole, or the
 * manifest of a chunked one. A value or manifest of version 1 is a miss. */
static void got_key(struct l2_xfer *x, const redisReply *r)
{
	const unsigned char *p = (const unsigned char *)r->str;
	const char *why;
	struct l2_value v;
	uint64_t total;
	int rc;

	if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && r->len == 0)) {
		xfer_finish(x, OUT_MISS, NULL);
		return;
	}
	if (r->type != REDIS_REPLY_STRING) {
		fail(x, "unexpected reply to GETRANGE");
		return;
	}
	x->l2->n.bytes_read += (int64_t)r->len;
	if (r->len >= 4 && !memcmp(p, L2_MANIFEST_MAGIC, 4)) {
		rc = manifest_open(x->name, x->name_len, x->scope_len, p, r->len, x->conf->secret,
				   x->conf->secret_len, x->conf->max_value, &x->chunk_len, &total,
				   &x->n_chunks, x->id, x->vkey, &why);
		if (rc > 0)
			xfer_finish(x, OUT_MISS, NULL);
		else if (rc < 0)
			reject(x, why);
		else if (buf_reserve(&x->data, (size_t)total) < 0)
			fail(x, "out of memory");
		else {
			x->data.len = (size_t)total;
			prefault(x->data.data, x->data.len);
			pump(x, L2_RAMP);
		}
		return;
	}
	if (r->len > L2_INLINE || (int64_t)r->len > x->conf->max_value) {
		reject(x, "larger than l2-max-value");
		return;
	}
	rc = open_record(x->name, x->name_len, x->scope_len, p, r->len, x->conf->secret,
			 x->conf->secret_len, &x->data, &why);
	if (rc > 0)
		xfer_finish(x, OUT_MISS, NULL);
	else if (rc < 0 || record_read((const unsigned char *)x->data.data, x->data.len,
				       x->conf->identity, &v, &why) < 0)
		reject(x, why);
	else
		xfer_finish(x, OUT_HIT, &v);
}

/* Chunk i of a get, opened into its place in the record as it arrives.
 * One that is gone (evicted, or its writer died before the manifest it
 * belongs to was replaced) makes the value a miss; one of the wrong
 * length, or that does not open as chunk i of this value under this key,
 * was tampered with. */
static void got_chunk(struct l2_xfer *x, uint32_t i, const redisReply *r)
{
	size_t off, len = chunk_span(x, i, &off);
	unsigned char ad[L2_CHUNK_AD];

	if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && r->len == 0)) {
		xfer_finish(x, OUT_MISS, NULL);
		return;
	}
	if (r->type != REDIS_REPLY_STRING) {
		fail(x, "unexpected reply to GETRANGE");
		return;
	}
	if (r->len != len + L2_TAG_LEN) {
		reject(x, "a chunk of the wrong length");
		return;
	}
	chunk_ad(x->id, i, x->n_chunks, ad);
	if (aead(0, x->vkey, N_CHUNK, i, ad, sizeof ad, x->name, x->name_len,
		 (const unsigned char *)r->str, len, (unsigned char *)x->data.data + off,
		 (unsigned char *)r->str + len) < 0) {
		reject(x, "a chunk does not open");
		return;
	}
	x->l2->n.bytes_read += (int64_t)r->len;
	x->done++;
	pump(x, L2_RAMP);
}

static void claim(struct l2 *l2, const char *space, const unsigned char key[32],
		  enum l2_claim_op op, int64_t ttl_ms, l2_claim_cb cb, void *arg);

static void xfer_step(struct l2_cmd *cmd, enum outcome o, const redisReply *r)
{
	struct l2_xfer *x = cmd->xfer;

	if (x->finished)
		return;                 /* another of its commands ended it */
	if (x->abandoned) {
		/* Nobody waits for it any more: nothing else is sent. */
		x->l2->n.abandoned++;
		xfer_finish(x, OUT_SKIPPED, NULL);
		return;
	}
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
			x->l2->n.bytes_written += (int64_t)(chunk_span(x, cmd->chunk, &off) +
							    L2_TAG_LEN);
			x->done++;
			pump(x, L2_RAMP);
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

void l2_get_abandon(struct l2 *l2, void *arg)
{
	/* A get always has a command out until it ends: its transfers are
	 * those of the commands pending. */
	for (struct l2_cmd *cmd = l2 ? l2->pending : NULL; cmd; cmd = cmd->next)
		if (cmd->xfer && cmd->xfer->cb && cmd->xfer->arg == arg)
			cmd->xfer->abandoned = 1;
}

void l2_put_in(struct l2 *l2, const char *space, const unsigned char key[32],
	       const struct l2_value *v)
{
	size_t id_len = strlen(l2->conf->identity), rec_len;
	struct l2_xfer *x;
	int probe;

	if (l2->off || l2->conf->read_only)
		return;
	rec_len = record_len(v, id_len);
	if (!rec_len || v->kind < 0 || v->kind > 255 ||
	    (int64_t)(rec_len + L2_HEAD + L2_TAG_LEN) > l2->conf->max_value) {
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
	if (L2_HEAD + rec_len + L2_TAG_LEN <= L2_INLINE) {
		/* Whole: the record sealed in place, one SET. */
		if (buf_reserve(&x->data, L2_HEAD + rec_len + L2_TAG_LEN) < 0) {
			fail(x, "out of memory");
			return;
		}
		record_write((unsigned char *)x->data.data + L2_HEAD, v, l2->conf->identity, id_len);
		if (seal_record(x->name, x->name_len, x->scope_len, (unsigned char *)x->data.data,
				rec_len, x->conf->secret, x->conf->secret_len) < 0) {
			fail(x, "cannot seal a value");
			return;
		}
		x->data.len = L2_HEAD + rec_len + L2_TAG_LEN;
		const char *argv[3] = { "SET", x->name, x->data.data };
		size_t argvlen[3] = { 3, x->name_len, x->data.len };
		send_op(x, OP_SET, 0, 3, argv, argvlen);
		return;
	}
	/* Chunked: the record (v is the caller's), a fresh id and the value's
	 * key; each chunk is sealed when it goes. The chunks first, the
	 * manifest last: a reader finds a manifest only once every chunk it
	 * names was written. */
	x->chunk_len = L2_CHUNK - L2_TAG_LEN;
	if (buf_reserve(&x->data, rec_len) < 0 || buf_reserve(&x->scratch, L2_CHUNK) < 0) {
		fail(x, "out of memory");
		return;
	}
	record_write((unsigned char *)x->data.data, v, l2->conf->identity, id_len);
	x->data.len = rec_len;
	x->n_chunks = (uint32_t)((rec_len + x->chunk_len - 1) / x->chunk_len);
	if (RAND_bytes(x->id, sizeof x->id) != 1 ||
	    value_key(x->conf->secret, x->conf->secret_len, x->name, x->scope_len, x->id,
		      x->vkey) < 0) {
		fail(x, "cannot seal a value");
		return;
	}
	/* One chunk now, the rest of the window as the loop turns (each
	 * reply pumps): the caller's reply waits for one chunk's seal at most. */
	pump(x, 1);
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
