/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the tier (daemon/l2*.c) without a Redis: a value stored
 * whole (its documented layout, nothing of it readable, a round trip,
 * every kind of tampering, another key's or scope's name, rejected with
 * its reason), l2_new()'s checks of the URL and the secret, the write-side
 * size bound, and the circuit breaker against a socket that is not there. The same
 * module against a live redis-server: tests/test_l2_live.py. */
#include "tests/unit/unit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "daemon/l2.h"
#include "daemon/log.h"

static const char secret[] = "cluster secret";
static const char ident[] = "LLVM 22.1.0 test";

static void fill_key(unsigned char key[32], unsigned char seed)
{
	for (int i = 0; i < 32; i++)
		key[i] = (unsigned char)(seed + i * 7);
}

static const char scope[] = "ptxcache:";

/* A sealed sample: kind PTX, status 0, 40 bytes of data, a 5-byte log. */
static void sample(const char *sc, const unsigned char key[32], struct buf *out)
{
	static const char data[] = "// PTX of a kernel, forty bytes long!!\n";
	struct l2_value v = { 1, 0, data, 40, "warn!", 5 };

	if (l2_seal(sc, key, &v, ident, secret, strlen(secret), out) < 0)
		out->len = 0;
}

static const char *open_why(const char *sc, const unsigned char key[32], const void *p,
			    size_t n)
{
	struct buf plain = BUF_INIT;
	struct l2_value v;
	const char *why = "not set";
	int rc = l2_open(sc, key, p, n, ident, secret, strlen(secret), &plain, &v, &why);

	buf_free(&plain);
	return rc == 0 ? NULL : why;
}

static int is(const char *got, const char *want)
{
	if (got && !strcmp(got, want))
		return 1;
	fprintf(stderr, "  reason: got %s, want %s\n", got ? got : "(accepted)", want);
	return 0;
}

static int contains(const struct buf *b, const char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0; i + n <= b->len; i++)
		if (!memcmp(b->data + i, s, n))
			return 1;
	return 0;
}

TEST(l2_envelope_round_trip)
{
	unsigned char key[32];
	struct buf b = BUF_INIT, again = BUF_INIT, plain = BUF_INIT;
	struct l2_value v;
	const char *why = NULL;

	fill_key(key, 1);
	sample(scope, key, &b);
	/* The documented layout: magic, version, a 16-byte id, the record
	 * (kind, status, identity, data, log, each length-prefixed) under
	 * AES-256-GCM, then its 16-byte tag. Nothing of it readable. */
	REQUIRE(b.len == 4 + 1 + 16 + (1 + 4 + 2 + strlen(ident) + 4 + 40 + 4 + 5) + 16);
	CHECK(!memcmp(b.data, "PXL2\x02", 5));
	CHECK(!contains(&b, "PTX of a kernel") && !contains(&b, "warn!") && !contains(&b, ident));
	/* Each seal draws its own id (and so its own key): the same value
	 * twice is two unrelated ciphertexts. */
	sample(scope, key, &again);
	REQUIRE(again.len == b.len);
	CHECK(memcmp(again.data + 5, b.data + 5, 16) != 0);
	CHECK(memcmp(again.data + 21, b.data + 21, b.len - 21) != 0);

	REQUIRE(l2_open(scope, key, b.data, b.len, ident, secret, strlen(secret), &plain, &v,
			&why) == 0);
	CHECK(why == NULL);
	CHECK(v.kind == 1 && v.status == 0);
	CHECK(v.data_len == 40 && !memcmp(v.data, "// PTX of a kernel", 18));
	CHECK(v.log_len == 5 && !memcmp(v.log, "warn!", 5));

	/* A negative entry: a signed status, no data, a cubin kind. */
	struct l2_value neg = { 2, -7, NULL, 0, "error: cannot select", 20 };
	REQUIRE(l2_seal(scope, key, &neg, ident, secret, strlen(secret), &b) == 0);
	REQUIRE(l2_open(scope, key, b.data, b.len, ident, secret, strlen(secret), &plain, &v,
			&why) == 0);
	CHECK(v.kind == 2 && v.status == -7 && v.data_len == 0);
	CHECK(v.log_len == 20 && !memcmp(v.log, "error: cannot select", 20));
	buf_free(&b);
	buf_free(&again);
	buf_free(&plain);
}

TEST(l2_envelope_tampering)
{
	unsigned char key[32], other[32];
	struct buf b = BUF_INIT, o = BUF_INIT, plain = BUF_INIT;
	char *t;

	fill_key(key, 1);
	fill_key(other, 2);
	sample(scope, key, &b);
	REQUIRE(b.len > 0);
	t = malloc(b.len);
	REQUIRE(t);

#define TAMPERED(edit, want) do {                                   \
		memcpy(t, b.data, b.len);                           \
		edit;                                               \
		CHECK(is(open_why(scope, key, t, b.len), want));    \
	} while (0)
	TAMPERED(t[30] ^= 1, "does not open");                    /* the record */
	TAMPERED(t[b.len - 20] ^= 0x40, "does not open");
	TAMPERED(t[b.len - 1] ^= 0x80, "does not open");          /* the tag */
	TAMPERED(t[5] ^= 1, "does not open");                     /* the id */
	TAMPERED(t[4] = 3, "wrong version");
	TAMPERED(t[4] = 0, "wrong version");
	TAMPERED(t[4] = 1, "old version");
	TAMPERED(t[0] = 'X', "bad magic");
#undef TAMPERED

	/* Truncated anywhere, or longer by a byte: never accepted. */
	for (size_t n = 0; n < b.len; n++)
		CHECK(open_why(scope, key, b.data, n) != NULL);
	CHECK(is(open_why(scope, key, b.data, b.len - 1), "does not open"));
	CHECK(is(open_why(scope, key, b.data, 0), "bad length"));
	CHECK(is(open_why(scope, key, NULL, 0), "bad length"));
	CHECK(is(open_why(scope, key, "PXL2\x02", 5), "bad length"));
	REQUIRE(buf_append(&b, "x", 1) == 0);
	CHECK(is(open_why(scope, key, b.data, b.len), "does not open"));
	b.len--;

	/* Every single bit flipped, anywhere: rejected. */
	for (size_t i = 0; i < b.len; i++)
		for (int bit = 0; bit < 8; bit++) {
			memcpy(t, b.data, b.len);
			t[i] ^= (char)(1 << bit);
			if (open_why(scope, key, t, b.len) == NULL) {
				fprintf(stderr, "  accepted with byte %zu bit %d flipped\n", i, bit);
				CHECK(0);
			}
		}

	/* Another key's perfectly valid value, under this key; this key's
	 * value under another scope's name (another prefix or space). */
	sample(scope, other, &o);
	REQUIRE(o.len == b.len);
	CHECK(open_why(scope, other, o.data, o.len) == NULL);
	CHECK(is(open_why(scope, key, o.data, o.len), "does not open"));
	CHECK(is(open_why("ptxcache:artifact:u1000:", key, b.data, b.len), "does not open"));
	CHECK(is(open_why("other:", key, b.data, b.len), "does not open"));
	sample("ptxcache:own:-/u1000:", key, &o);
	CHECK(open_why("ptxcache:own:-/u1000:", key, o.data, o.len) == NULL);
	CHECK(is(open_why("ptxcache:own:-/u1001:", key, o.data, o.len), "does not open"));

	/* Sealed under another secret, or for another compiler. */
	struct l2_value v = { 1, 0, "x", 1, "", 0 }, got;
	const char *why;
	REQUIRE(l2_seal(scope, key, &v, ident, "another secret", 14, &o) == 0);
	CHECK(is(open_why(scope, key, o.data, o.len), "does not open"));
	REQUIRE(l2_seal(scope, key, &v, "LLVM 21.1.0 test", secret, strlen(secret), &o) == 0);
	CHECK(is(open_why(scope, key, o.data, o.len), "wrong identity"));
	REQUIRE(l2_seal(scope, key, &v, ident, secret, strlen(secret), &o) == 0);
	CHECK(l2_open(scope, key, o.data, o.len, "", secret, strlen(secret), &plain, &got,
		      &why) < 0);
	CHECK(is(why, "wrong identity"));
	/* An empty secret seals nothing. */
	CHECK(l2_seal(scope, key, &v, ident, "", 0, &o) < 0);

	free(t);
	buf_free(&b);
	buf_free(&o);
	buf_free(&plain);
}

/* HKDF-SHA-256 as l2.c's design comment documents it, written here from
 * that text: salt "ptxcache-l2 v2", info "value" | u16 scope_len | scope |
 * id. */
static int documented_key(const char *sc, const unsigned char *id, unsigned char out[32])
{
	unsigned char info[5 + 2 + 128 + 16];
	size_t n = strlen(sc);
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	EVP_KDF_CTX *c = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	int ok;

	if (n > 128)
		return -1;
	memcpy(info, "value", 5);
	info[5] = (unsigned char)(n >> 8);
	info[6] = (unsigned char)n;
	memcpy(info + 7, sc, n);
	memcpy(info + 7 + n, id, 16);
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret,
						  strlen(secret)),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)"ptxcache-l2 v2", 14),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, 7 + n + 16),
		OSSL_PARAM_construct_end(),
	};
	ok = c && EVP_KDF_derive(c, out, 32, params) == 1;
	EVP_KDF_CTX_free(c);
	EVP_KDF_free(kdf);
	return ok ? 0 : -1;
}

/* Open a whole value sealed under sc + hex(key) with vkey, as documented:
 * AES-256-GCM, nonce 01 00..00, AD = its 21-byte head | the key's name.
 * 1 if it opens and its record starts with kind 1. */
static int opens_with(const char *sc, const unsigned char key[32], const struct buf *b,
		      const unsigned char vkey[32])
{
	unsigned char nonce[12] = { 1 }, *out = malloc(b->len);
	char name[256];
	size_t rec = b->len - 21 - 16, n = (size_t)snprintf(name, 128, "%s", sc);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int len, ok;

	for (int i = 0; i < 32; i++, n += 2)
		snprintf(name + n, 3, "%02x", key[i]);
	ok = out && c && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, vkey, nonce) == 1 &&
	     EVP_DecryptUpdate(c, NULL, &len, (const unsigned char *)b->data, 21) == 1 &&
	     EVP_DecryptUpdate(c, NULL, &len, (const unsigned char *)name, (int)n) == 1 &&
	     EVP_DecryptUpdate(c, out, &len, (const unsigned char *)b->data + 21, (int)rec) == 1 &&
	     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, b->data + 21 + rec) == 1 &&
	     EVP_DecryptFinal_ex(c, out + len, &len) == 1 && out[0] == 1;
	EVP_CIPHER_CTX_free(c);
	free(out);
	return ok;
}

/* Each value's key is HKDF of the fleet secret over its scope and its id:
 * a value sealed for each of three scopes opens with the key derived, as
 * documented, from that scope and the id in its head, and with no key
 * derived from another scope or another id (so a key that left out the
 * scope, or the id, would be one key for them all, and not this one). */
TEST(l2_value_key_is_hkdf_of_scope_and_id)
{
	static const char *const scopes[] = {
		"ptxcache:", "ptxcache:artifact:u1000:", "ptxcache:own:-/u1000:",
	};
	unsigned char key[32], vkey[32], id[16];
	struct buf b = BUF_INIT;

	fill_key(key, 5);
	for (size_t i = 0; i < sizeof scopes / sizeof *scopes; i++) {
		sample(scopes[i], key, &b);
		REQUIRE(b.len > 21 + 16);
		memcpy(id, b.data + 5, 16);
		REQUIRE(documented_key(scopes[i], id, vkey) == 0);
		CHECK(opens_with(scopes[i], key, &b, vkey));
		for (size_t j = 0; j < sizeof scopes / sizeof *scopes; j++) {
			if (j == i)
				continue;
			REQUIRE(documented_key(scopes[j], id, vkey) == 0);
			CHECK(!opens_with(scopes[i], key, &b, vkey));
		}
		id[15] ^= 1;
		REQUIRE(documented_key(scopes[i], id, vkey) == 0);
		CHECK(!opens_with(scopes[i], key, &b, vkey));
	}
	buf_free(&b);
}

static char *write_file(const char *name, const void *p, size_t n)
{
	static char path[4][512];
	static int next;
	char *out = path[next++ % 4];
	FILE *f;

	snprintf(out, sizeof path[0], "%s/%s", unit_tmpdir(), name);
	f = fopen(out, "wb");
	if (f) {
		fwrite(p, 1, n, f);
		fclose(f);
	}
	return out;
}

/* l2_new(url, secret file): NULL with err's text, or ok. */
static struct l2 *make(struct event_base *base, const char *url, const char *secret_file,
		       int64_t max_value, struct buf *err)
{
	struct l2_config cfg = {
		.url = url, .secret_file = secret_file, .prefix = "ptxcache:",
		.connect_timeout_ms = 50, .command_timeout_ms = 50,
		.max_value = max_value, .identity = ident,
	};

	buf_reset(err);
	return l2_new(base, &cfg, err);
}

TEST(l2_new_checks_url_and_secret)
{
	struct event_base *base = event_base_new();
	struct buf err = BUF_INIT;
	char *ok = write_file("secret", "s3cret\n", 7);
	char *empty = write_file("empty", "\n", 1);
	char big[4098];
	struct l2 *l2;

	REQUIRE(base);
	static const char *good[] = {
		"redis://127.0.0.1:6379/2", "redis://127.0.0.1", "redis://localhost:7000",
		"redis://:pw@127.0.0.1:1/0", "redis://user:p%40ss@[::1]:6380/3",
		"redis://127.0.0.1/", "unix:/run/redis/redis.sock", "unix:///run/redis.sock",
		"/run/redis.sock",
	};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
		l2 = make(base, good[i], ok, 0, &err);
		if (!l2)
			fprintf(stderr, "  %s: %s\n", good[i], err.data);
		CHECK(l2 != NULL);
		l2_free(l2);
	}
	static const char *bad[] = {
		"", "http://127.0.0.1", "redis://", "redis://127.0.0.1:0", "redis://127.0.0.1:65536",
		"redis://127.0.0.1:12x", "redis://127.0.0.1/abc", "redis://u@127.0.0.1",
		"redis://[::1", "unix:", "redis://127.0.0.1:6379/0?x=1",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		CHECK(make(base, bad[i], ok, 0, &err) == NULL);
		CHECK(err.len > 0);
	}
	/* Credentials never show in a message. */
	CHECK(make(base, "redis://me:hunter2@127.0.0.1:x", ok, 0, &err) == NULL);
	CHECK(!strstr(err.data, "hunter2") && strstr(err.data, "***"));

	CHECK(make(base, "/run/redis.sock", "/nonexistent/secret", 0, &err) == NULL);
	CHECK(!strcmp(err.data, "cannot read l2 secret '/nonexistent/secret': "
		      "No such file or directory"));
	CHECK(make(base, "/run/redis.sock", empty, 0, &err) == NULL);
	CHECK(strstr(err.data, "is empty") != NULL);
	CHECK(make(base, "/run/redis.sock", NULL, 0, &err) == NULL);
	CHECK(make(base, "/run/redis.sock", unit_tmpdir(), 0, &err) == NULL);
	CHECK(strstr(err.data, "Is a directory") != NULL);
	memset(big, 'k', sizeof big);
	CHECK(make(base, "/run/redis.sock", write_file("big", big, 4097), 0, &err) == NULL);
	CHECK(strstr(err.data, "longer than 4096") != NULL);
	l2 = make(base, "/run/redis.sock", write_file("max", big, 4096), 0, &err);
	CHECK(l2 != NULL);
	l2_free(l2);
	buf_free(&err);
	event_base_free(base);
}

struct answers {
	int calls, found, sync;
	int in_get;
};

static void got(void *arg, int found, const struct l2_value *v)
{
	struct answers *a = arg;

	a->calls++;
	a->found += found;
	a->sync += a->in_get;
}

static void get(struct l2 *l2, struct answers *a)
{
	unsigned char key[32];

	fill_key(key, 9);
	a->in_get = 1;
	l2_get(l2, key, got, a);
	a->in_get = 0;
}

/* Redis not there: every get answered, at once, as not found; errors
 * counted; after five, the breaker opens and nothing is tried or counted
 * (puts included) until its period is over. */
/* What l2_url_redacted() shows of each form of URL: the user name kept,
 * the password "***", whatever the password holds. */
TEST(l2_url_redacted_vectors)
{
	static const char *const v[][2] = {
		{ "redis://user:PW1@127.0.0.1:6379/0", "redis://user:***@127.0.0.1:6379/0" },
		{ "redis://:PW1@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0" },
		{ "redis://PW1@host", "redis://***@host" },
		{ "rediss://user:PW1@host:6380", "rediss://user:***@host:6380" },
		{ "rediss://:PW1@host", "rediss://:***@host" },
		{ "redis-cluster://user:PW1@a:1,b:2", "redis-cluster://user:***@a:1,b:2" },
		{ "redis-cluster://:PW1@a:1,b:2", "redis-cluster://:***@a:1,b:2" },
		/* A raw '/', '@' or ':' inside the password. */
		{ "redis://user:P/W@1:x@host/0", "redis://user:***@host/0" },
		{ "http://u:PW1@h", "http://u:***@h" },
		{ "u:PW1@h:1", "u:***@h:1" },
		/* Nothing to hide. */
		{ "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0" },
		{ "redis-cluster://a:1,b:2", "redis-cluster://a:1,b:2" },
		{ "unix:/run/a@b.sock", "unix:/run/a@b.sock" },
		{ "/run/a@b.sock", "/run/a@b.sock" },
		{ "", "" },
	};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
		struct buf b = BUF_INIT;
		l2_url_redacted(v[i][0], &b);
		if (!b.data || strcmp(b.data, v[i][1]))
			fprintf(stderr, "  %s: got '%s', want '%s'\n", v[i][0],
				b.data ? b.data : "(null)", v[i][1]);
		CHECK(b.data && !strcmp(b.data, v[i][1]));
		CHECK(!b.data || !strstr(b.data, "PW1"));
		buf_free(&b);
	}
}

TEST(l2_breaker_without_redis)
{
	struct event_base *base = event_base_new();
	struct buf err = BUF_INIT;
	char sock[600];
	struct answers a = { 0 };
	struct l2_counters c;
	struct l2 *l2;
	unsigned char key[32];
	struct l2_value v = { 1, 0, "ptx", 3, "", 0 };
	enum log_level saved = log_threshold;

	REQUIRE(base);
	snprintf(sock, sizeof sock, "%s/no-redis.sock", unit_tmpdir());
	l2 = make(base, sock, write_file("secret", "s", 1), 0, &err);
	REQUIRE(l2);
	log_threshold = LOG_ERR;        /* the breaker's warning is expected */
	for (int i = 0; i < 5; i++)
		get(l2, &a);
	l2_counters(l2, &c);
	CHECK(a.calls == 5 && a.found == 0 && a.sync == 5);
	CHECK(c.errors == 5 && c.breaker_opens == 1 && c.breaker_open == 1);
	CHECK(c.hits == 0 && c.misses == 0 && c.timeouts == 0);

	for (int i = 0; i < 100; i++)
		get(l2, &a);
	fill_key(key, 3);
	l2_put(l2, key, &v);
	l2_counters(l2, &c);
	CHECK(a.calls == 105 && a.found == 0 && a.sync == 105);
	CHECK(c.errors == 5 && c.breaker_opens == 1 && c.writes == 0);
	log_threshold = saved;
	l2_free(l2);
	buf_free(&err);
	event_base_free(base);
}

/* Values whose envelope is larger than max_value are never sent: a put
 * exactly at the bound is tried (and fails here: no Redis), one byte more
 * is not. */
TEST(l2_put_size_bound)
{
	struct event_base *base = event_base_new();
	struct buf err = BUF_INIT, sealed = BUF_INIT;
	char sock[600];
	unsigned char key[32];
	struct l2_counters c;
	static char data[1000];
	struct l2_value v = { 1, 0, data, 0, "", 0 };
	struct l2 *l2;
	int64_t bound = 600;
	size_t overhead;

	REQUIRE(base);
	fill_key(key, 4);
	REQUIRE(l2_seal("ptxcache:", key, &v, ident, secret, strlen(secret), &sealed) == 0);
	overhead = sealed.len;          /* the envelope of an empty value */
	snprintf(sock, sizeof sock, "%s/no-redis.sock", unit_tmpdir());
	l2 = make(base, sock, write_file("secret", "s", 1), bound, &err);
	REQUIRE(l2);

	v.data_len = (size_t)bound - overhead + 1;      /* one byte over */
	l2_put(l2, key, &v);
	l2_counters(l2, &c);
	CHECK(c.errors == 0);
	v.data_len = (size_t)bound - overhead;          /* exactly at it */
	l2_put(l2, key, &v);
	l2_counters(l2, &c);
	CHECK(c.errors == 1);
	l2_free(l2);
	buf_free(&err);
	buf_free(&sealed);
	event_base_free(base);
}
