/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2: the shared second tier on Redis; see l2.h for the contract.
 *
 * What: one hiredis asynchronous connection per daemon, on the master's
 * libevent loop. l2_get() sends GETRANGE prefix+hex 0 1048576 and opens
 * the envelope in the reply; l2_put() seals the value and sends SET in the
 * background. Nothing else is ever sent but AUTH and SELECT when the
 * connection opens (and nothing but those four commands needs the ACL).
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
 * Why it is built this way:
 *  - hiredis 0.14 has no timeouts in its asynchronous API, so every command
 *    and every connect carries a libevent timer of ours. A timeout bounds
 *    silence, not size: the connection's libevent adapter is ours
 *    (attach()), counting its reads and writes, and a command's timer that
 *    finds the count moved since it was armed is armed again; only a
 *    connection that moved no byte for l2-timeout-ms times out. A command
 *    that times out drops the whole connection with redisAsyncFree() (not
 *    redisAsyncDisconnect(), which waits politely for the pending replies
 *    of a server that is not answering): the replies still owed on it can
 *    never be matched to newer requests, and each pending command is
 *    completed exactly once, as a timeout.
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
 *  - Circuit breaker: L2_TRIP consecutive failures (errors or timeouts)
 *    open it for a period (1 s, doubling on each failed probe up to 30 s);
 *    while open, gets answer "not found" at once and puts are dropped;
 *    after the period the next request is a probe (half-open), and only
 *    its outcome counts: success closes the breaker, failure reopens it.
 *    Connections are made on demand, so the breaker is also the reconnect
 *    back-off. Replies that arrive but do not verify are Redis working as
 *    asked (someone else's data is wrong): counted as rejects, not failures.
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
enum outcome { OUT_HIT, OUT_MISS, OUT_REJECT, OUT_WRITTEN, OUT_ERROR, OUT_TIMEOUT, OUT_REPLY };
enum breaker { BR_CLOSED, BR_OPEN, BR_HALF_OPEN };

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

	unsigned char secret[L2_SECRET_MAX];
	size_t secret_len;
	char *prefix;
	char *identity;
	int read_only;
	int connect_timeout_ms, command_timeout_ms;
	int64_t max_value;
};

/* What one command is: the lookup or write of a key, or of a chunk. */
enum op { OP_GET, OP_SET, OP_GET_CHUNK, OP_SET_CHUNK, OP_CLAIM };

/* Room for prefix, space, 64 hex digits, and a chunk's ":id:index". */
#define NAME_MAX_LEN (L2_PREFIX_MAX + L2_SPACE_MAX + 64 + 2 * L2_ID_LEN + 16)

struct l2_cmd {
	struct l2 *l2;
	struct l2_conf *conf;           /* the settings it was sent under (a ref) */
	redisAsyncContext *ac;          /* the connection it went out on */
	struct l2_cmd *prev, *next;     /* l2->pending, until completed */
	struct event *timer;
	struct l2_xfer *xfer;           /* the transfer it is a step of (a ref) */
	enum op op;
	uint32_t chunk;                 /* OP_*_CHUNK: which one */
	int refs;                       /* completion + hiredis's callback */
	int completed;
	int fail;                       /* how a NULL reply counts */
	uint64_t io_mark;               /* its connection's I/O when armed */
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
	int probe;                      /* the half-open breaker's probe */
	int refs;                       /* 1 until finished, + 1 a command */
	int finished;
	struct buf data;                /* put: the sealed value; get: assembly */
	unsigned char id[L2_ID_LEN];    /* names this write's chunks */
	size_t chunk_len;
	uint32_t n_chunks, sent, done;  /* chunks in all, sent, answered */
};

#define L2_RETIRED_MAX 8

struct l2 {
	struct event_base *base;
	struct l2_conf *conf;           /* the current settings */
	int off;                        /* switched off by a reload */

	redisAsyncContext *ac;          /* NULL: not connected */
	char ac_host[NI_MAXHOST];       /* the address ac went to */
	int connected;
	struct event *connect_timer;
	struct l2_cmd *pending;
	/* Connections replaced by a reload or a new address: they close once
	 * the replies still owed on them are in (redisAsyncDisconnect()). */
	redisAsyncContext *retired[L2_RETIRED_MAX];

	/* Resolving conf->name again, in the background (evdns). */
	struct evdns_base *dns;         /* the lookup's base, freed at the next */
	struct l2_conf *dns_conf;       /* whose name is looked up (a ref) */
	int resolving;

	enum breaker state;
	int failures;                   /* consecutive, while closed */
	int probing;                    /* a probe is out */
	int64_t open_until_us;
	int64_t period_ms;
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
	const char *auth = strncmp(url, "redis://", 8) ? NULL : url + 8;
	const char *end = auth ? auth + strcspn(auth, "/") : NULL;
	const char *at = NULL;

	for (const char *q = auth; q && q < end; q++)
		if (*q == '@')
			at = q;
	if (at)
		buf_printf(out, "redis://***%s", at);
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
	if (strncmp(url, "redis://", 8)) {
		buf_printf(err, "bad l2 URL '%s': expected redis://host:port/db or a Unix socket path",
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
	if (*host == '[') {
		hend = memchr(host, ']', (size_t)(end - host));
		if (!hend)
			goto badurl;
		colon = hend + 1 < end && hend[1] == ':' ? hend + 1 : NULL;
		if (hend + 1 < end && !colon)
			goto badurl;
		host++;
	} else {
		colon = memchr(host, ':', (size_t)(end - host));
		hend = colon ? colon : end;
	}
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

/* ---- the breaker ------------------------------------------------------- */

/* May a request go to Redis now? Sets *probe for the half-open probe. */
static int admit(struct l2 *l2, int *probe)
{
	*probe = 0;
	switch (l2->state) {
	case BR_CLOSED:
		return 1;
	case BR_OPEN:
		if (now_us() < l2->open_until_us)
			return 0;
		l2->state = BR_HALF_OPEN;
		l2->probing = 0;
		/* fall through */
	case BR_HALF_OPEN:
		if (l2->probing)
			return 0;
		l2->probing = 1;
		*probe = 1;
		return 1;
	}
	return 0;
}

static void breaker_open(struct l2 *l2)
{
	l2->state = BR_OPEN;
	l2->probing = 0;
	l2->failures = 0;
	l2->open_until_us = now_us() + l2->period_ms * 1000;
	l2->n.breaker_opens++;
	log_warn("l2: %s: %s; going on without it for %.1f s", l2->conf->where,
		 l2->last_error, l2->period_ms / 1000.0);
	l2->period_ms = l2->period_ms * 2 > L2_OPEN_MAX_MS ? L2_OPEN_MAX_MS : l2->period_ms * 2;
}

static void breaker_note(struct l2 *l2, int probe, int ok)
{
	if (probe) {
		if (ok) {
			l2->state = BR_CLOSED;
			l2->probing = 0;
			l2->failures = 0;
			l2->period_ms = L2_OPEN_MS;
			log_info("l2: %s answers again", l2->conf->where);
		} else {
			breaker_open(l2);
		}
		return;
	}
	if (l2->state != BR_CLOSED)
		return;                 /* sent before it opened: moot now */
	if (ok)
		l2->failures = 0;
	else if (++l2->failures >= L2_TRIP)
		breaker_open(l2);
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

static void xfer_step(struct l2_cmd *cmd, enum outcome o, const redisReply *r);

/* Finish cmd once, by whichever comes first (its reply, its timer, the end
 * of its connection), and hand the outcome to its transfer. */
static void complete(struct l2_cmd *cmd, enum outcome o, const redisReply *reply)
{
	struct l2 *l2 = cmd->l2;

	if (cmd->completed)
		return;
	cmd->completed = 1;
	if (cmd->timer)
		evtimer_del(cmd->timer);
	if (cmd->prev)
		cmd->prev->next = cmd->next;
	else
		l2->pending = cmd->next;
	if (cmd->next)
		cmd->next->prev = cmd->prev;
	cmd->prev = cmd->next = NULL;
	xfer_step(cmd, o, reply);
	cmd_unref(cmd);
}

/* Close the connection now. Its pending commands complete as how (their
 * NULL replies, run by redisAsyncFree(), now or when hiredis returns from
 * the callback it is in). */
static void drop_connection(struct l2 *l2, enum outcome how)
{
	redisAsyncContext *ac = l2->ac;

	if (!ac)
		return;
	l2->ac = NULL;
	l2->connected = 0;
	evtimer_del(l2->connect_timer);
	for (struct l2_cmd *c = l2->pending; c; c = c->next)
		if (c->ac == ac)
			c->fail = how;
	redisAsyncFree(ac);
}

static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct l2_cmd *cmd = privdata;
	struct l2 *l2 = cmd->l2;
	redisReply *reply = r;

	if (cmd->completed) {
		/* Timed out or dropped already: a stale reply, ignored. */
	} else if (!reply) {
		/* The connection went away under it. */
		if (l2->ac == ac) {
			l2->ac = NULL;
			l2->connected = 0;
			evtimer_del(l2->connect_timer);
		}
		if (ac->err)
			note_error(l2, ac->errstr);
		complete(cmd, cmd->fail, NULL);
	} else if (reply->type == REDIS_REPLY_ERROR) {
		note_error(l2, reply->str);
		complete(cmd, OUT_ERROR, NULL);
	} else {
		complete(cmd, OUT_REPLY, reply);
	}
	cmd_unref(cmd);
}

/* AUTH and SELECT: a failure drops the connection (and with it the
 * commands queued behind them). */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct l2 *l2 = privdata;
	redisReply *reply = r;

	if (reply && reply->type == REDIS_REPLY_ERROR && l2->ac == ac) {
		note_error(l2, reply->str);
		drop_connection(l2, OUT_ERROR);
	}
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct l2 *l2 = ac->data;

	if (l2->ac != ac)
		return;
	evtimer_del(l2->connect_timer);
	if (status == REDIS_OK) {
		l2->connected = 1;
		return;
	}
	/* hiredis frees it after this returns; its commands fail then. */
	note_error(l2, ac->errstr);
	l2->ac = NULL;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct l2 *l2 = ac->data;

	for (int i = 0; i < L2_RETIRED_MAX; i++)
		if (l2->retired[i] == ac)
			l2->retired[i] = NULL;
	if (l2->ac != ac)
		return;
	if (status != REDIS_OK)
		note_error(l2, ac->errstr);
	l2->ac = NULL;
	l2->connected = 0;
	evtimer_del(l2->connect_timer);
}

static void on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct l2 *l2 = arg;

	if (l2->ac && !l2->connected) {
		snprintf(l2->last_error, sizeof l2->last_error,
			 "no connection within %d ms", l2->conf->connect_timeout_ms);
		drop_connection(l2, OUT_TIMEOUT);
	}
}

/* ---- the loop's side of a connection ------------------------------------
 *
 * hiredis's own libevent adapter, but counting each time the connection
 * reads or writes: a command's timer that finds the count moved re-arms
 * rather than fail, so a timeout bounds silence, never size. A connection
 * whose peer stopped reading soon stops being writable, and counts no more. */
struct l2_events {
	redisAsyncContext *ac;
	struct event *rev, *wev;
	uint64_t io;                    /* read and write events handled */
};

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct l2_events *e = arg;

	e->io++;
	redisAsyncHandleRead(e->ac);
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
	struct l2_events *e = arg;

	e->io++;
	redisAsyncHandleWrite(e->ac);
}

static void ev_add_read(void *p) { event_add(((struct l2_events *)p)->rev, NULL); }
static void ev_del_read(void *p) { event_del(((struct l2_events *)p)->rev); }
static void ev_add_write(void *p) { event_add(((struct l2_events *)p)->wev, NULL); }
static void ev_del_write(void *p) { event_del(((struct l2_events *)p)->wev); }

static void ev_cleanup(void *p)
{
	struct l2_events *e = p;

	event_free(e->rev);
	event_free(e->wev);
	free(e);
}

static int attach(redisAsyncContext *ac, struct event_base *base)
{
	struct l2_events *e = calloc(1, sizeof *e);

	if (!e || ac->ev.data)
		goto fail;
	e->ac = ac;
	e->rev = event_new(base, ac->c.fd, EV_READ, on_readable, e);
	e->wev = event_new(base, ac->c.fd, EV_WRITE, on_writable, e);
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

static uint64_t io_of(const redisAsyncContext *ac)
{
	return ((const struct l2_events *)ac->ev.data)->io;
}

static void on_cmd_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct l2_cmd *cmd = arg;
	struct l2 *l2 = cmd->l2;

	/* Its connection moved bytes meanwhile: busy, not silent. */
	if (cmd->ac && io_of(cmd->ac) != cmd->io_mark) {
		struct timeval tv;
		cmd->io_mark = io_of(cmd->ac);
		ms_to_tv(cmd->conf->command_timeout_ms, &tv);
		evtimer_add(cmd->timer, &tv);
		return;
	}
	snprintf(l2->last_error, sizeof l2->last_error, "no answer and no bytes moved in %d ms",
		 cmd->conf->command_timeout_ms);
	if (cmd->ac && cmd->ac == l2->ac) {
		drop_connection(l2, OUT_TIMEOUT);   /* completes cmd too */
	} else {
		/* Its connection is already going; hiredis still owes it its
		 * NULL reply, which will find it completed. */
		complete(cmd, OUT_TIMEOUT, NULL);
	}
}

static void resolve_again(struct l2 *l2);

/* Open the connection (it completes in the background). 0 or -1. A host
 * name is looked up again meanwhile (resolve_again()): this connection
 * goes to the latest address known, the next to what the name says now. */
static int l2_connect(struct l2 *l2)
{
	redisAsyncContext *ac;
	struct timeval tv;

	resolve_again(l2);
	ac = l2->conf->path ? redisAsyncConnectUnix(l2->conf->path) : redisAsyncConnect(l2->conf->host, l2->conf->port);
	if (!ac) {
		note_error(l2, "out of memory");
		return -1;
	}
	if (ac->err) {
		note_error(l2, ac->errstr);
		redisAsyncFree(ac);
		return -1;
	}
	ac->data = l2;
	if (attach(ac, l2->base) < 0) {
		note_error(l2, "cannot attach to the event loop");
		redisAsyncFree(ac);
		return -1;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	l2->ac = ac;
	snprintf(l2->ac_host, sizeof l2->ac_host, "%s", l2->conf->host);
	l2->connected = 0;
	/* Queued now, sent first: pipelined ahead of every command. */
	if (l2->conf->password) {
		const char *argv[3] = { "AUTH", l2->conf->user ? l2->conf->user : l2->conf->password, l2->conf->password };
		redisAsyncCommandArgv(ac, on_setup_reply, l2, l2->conf->user ? 3 : 2, argv, NULL);
	}
	if (l2->conf->db) {
		char db[16];
		const char *argv[2] = { "SELECT", db };
		snprintf(db, sizeof db, "%d", l2->conf->db);
		redisAsyncCommandArgv(ac, on_setup_reply, l2, 2, argv, NULL);
	}
	ms_to_tv(l2->conf->connect_timeout_ms, &tv);
	evtimer_add(l2->connect_timer, &tv);
	return 0;
}

/* Send one command for cmd (which the caller has set up); on any failure
 * to send, cmd completes as an error at once. */
static void send_cmd(struct l2 *l2, struct l2_cmd *cmd, int argc, const char **argv,
		     const size_t *argvlen)
{
	struct timeval tv;

	cmd->next = l2->pending;
	if (l2->pending)
		l2->pending->prev = cmd;
	l2->pending = cmd;
	/* A connection hiredis is tearing down takes no commands. */
	if (l2->ac && (l2->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)))
		l2->ac = NULL;
	if (!l2->ac && l2_connect(l2) < 0) {
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if (!(cmd->timer = evtimer_new(l2->base, on_cmd_timeout, cmd))) {
		note_error(l2, "out of memory");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if (redisAsyncCommandArgv(l2->ac, on_reply, cmd, argc, argv, argvlen) != REDIS_OK) {
		note_error(l2, "cannot queue a command");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	cmd->ac = l2->ac;
	cmd->io_mark = io_of(cmd->ac);
	cmd->refs++;                    /* hiredis's callback */
	ms_to_tv(cmd->conf->command_timeout_ms, &tv);
	evtimer_add(cmd->timer, &tv);
}

/* A request that could not even be set up (no memory): an error. */
static void fail_unsent(struct l2 *l2, int probe)
{
	note_error(l2, "out of memory");
	l2->n.errors++;
	breaker_note(l2, probe, 0);
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

/* End x once: count it, feed the breaker, call back (v: a hit's value).
 * The breaker hears once per transfer, however many commands it took. */
static void xfer_finish(struct l2_xfer *x, enum outcome o, const struct l2_value *v)
{
	struct l2 *l2 = x->l2;

	if (x->finished)
		return;
	x->finished = 1;
	if (!l2->freeing && x->claim) {
		breaker_note(l2, x->probe, o != OUT_ERROR && o != OUT_TIMEOUT);
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
		case OUT_REPLY:   break;
		}
		breaker_note(l2, x->probe, o != OUT_ERROR && o != OUT_TIMEOUT);
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
	send_cmd(x->l2, cmd, argc, argv, argvlen);
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
	*c = l2->n;
	c->breaker_open = l2->state != BR_CLOSED;
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

/* Does b need another connection than a? */
static int conf_moved(const struct l2_conf *a, const struct l2_conf *b)
{
	return !same_str(a->path, b->path) || !same_str(a->name, b->name) ||
	       strcmp(a->host, b->host) || a->port != b->port || a->db != b->db ||
	       !same_str(a->user, b->user) || !same_str(a->password, b->password);
}

/* Take no more commands on the connection. What is in flight on it still
 * gets its reply (redisAsyncDisconnect() waits for them), checked under
 * the settings it was sent with; then it closes. One that has not
 * connected yet has sent nothing: it is dropped, its commands fail (and
 * their requests compile). */
static void retire_connection(struct l2 *l2)
{
	redisAsyncContext *ac = l2->ac;
	int slot = -1;

	if (!ac)
		return;
	for (int i = 0; i < L2_RETIRED_MAX && slot < 0; i++)
		if (!l2->retired[i])
			slot = i;
	if (!l2->connected || slot < 0) {
		drop_connection(l2, OUT_ERROR);
		return;
	}
	l2->ac = NULL;
	l2->connected = 0;
	evtimer_del(l2->connect_timer);
	l2->retired[slot] = ac;
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
			if (c == l2->conf && l2->ac && strcmp(l2->ac_host, host))
				retire_connection(l2);
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
	l2->period_ms = L2_OPEN_MS;
	l2->state = BR_CLOSED;
	if (!(l2->conf = conf_new(cfg, NULL, err)))
		goto fail;
	if (!(l2->connect_timer = evtimer_new(base, on_connect_timeout, l2))) {
		buf_printf(err, "out of memory");
		goto fail;
	}
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
		retire_connection(l2);
		return 0;
	}
	if (!(next = conf_new(cfg, cur, err)))
		return -1;
	int moved = conf_moved(cur, next);
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
	if (moved) {
		retire_connection(l2);
		/* Another server: its own chance, with the breaker closed. */
		l2->state = BR_CLOSED;
		l2->failures = 0;
		l2->probing = 0;
		l2->period_ms = L2_OPEN_MS;
	}
	conf_unref(cur);
	return 0;
}

void l2_free(struct l2 *l2)
{
	if (!l2)
		return;
	/* No callbacks from here on: the caller is going away. */
	l2->freeing = 1;
	drop_connection(l2, OUT_ERROR);
	for (int i = 0; i < L2_RETIRED_MAX; i++) {
		redisAsyncContext *ac = l2->retired[i];
		l2->retired[i] = NULL;
		if (ac)
			redisAsyncFree(ac);
	}
	while (l2->pending)             /* none: each was on a connection */
		complete(l2->pending, OUT_ERROR, NULL);
	if (l2->dns)
		evdns_base_free(l2->dns, 1);    /* cancels a lookup: on_resolved() */
	if (l2->connect_timer)
		event_free(l2->connect_timer);
	conf_unref(l2->conf);
	free(l2);
}
