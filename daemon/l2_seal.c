/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_seal: the tier's seal, no I/O and no state: a value's key, the AEAD,
 * the record a value is laid out as, a whole value's framing and
 * opening, a chunk's associated data and the manifest of a chunked value.
 * l2.c seals and opens with it what it sends and reads; l2_seal() and
 * l2_open() (l2.h) are a whole value's round trip, which
 * tests/unit/test_l2.c checks against the layouts below.
 *
 * The seal (format version 2):
 *  - keys: each value has its own AES-256 key, HKDF-SHA-256 (EVP_KDF) of
 *    the fleet secret with the salt "ptxcache-l2 v2" and the info
 *    "value" | u16 scope_len | scope | id, where the scope is the key's
 *    name without its 64 hex digits (prefix + space: "ptxcache:",
 *    "ptxcache:artifact:u1000:", "ptxcache:own:-/u1000:"): a key per scope,
 *    and under it one per value;
 *  - nonces: 96 bits, a domain byte (0 a chunk, 1 a whole record, 2 a
 *    manifest), zeros, and the chunk's index (u32). Each value key seals
 *    one record or one manifest and each chunk index once, so a (key,
 *    nonce) pair is never used twice; two writes (on any node, before or
 *    after any restart) share a key only if they draw the same 128-bit id
 *    from the OS's random source (RAND_bytes), about 2^-64 after 2^32
 *    writes;
 *  - associated data: the header stored before the ciphertext and the
 *    key's whole name (prefix, space, hex key), and for a chunk its index
 *    and the chunk count: a value moved to another key or another scope's
 *    key, a chunk moved to another position, another value or another
 *    key, does not open. The scope is in the key and the name in the
 *    associated data; the id names the chunks and picks the key.
 * A value of version 1 (HMAC-sealed, readable: before this format) is a
 * miss, not a reject: it was honest, it is merely old; the key is
 * written again by whoever compiles it.
 *
 * Layouts (all integers big-endian; tag: GCM's 16 bytes):
 * Record (the plaintext):
 *   kind u8 | status i32 | identity_len u16 | identity | data_len u32 |
 *   data | log_len u32 | log
 * A value stored whole (its record sealed into at most 1 MiB):
 *   "PXL2" | version u8 (2) | id[16] | AES-256-GCM(record) | tag
 *   nonce 01 00..00, AD = "PXL2" | 2 | id | name
 * A chunked value's manifest (53 bytes), under the key:
 *   "PXLM" | version u8 (2) | id[16] | chunk_len u32 | total u64 |
 *   n_chunks u32 | tag
 *   nonce 02 00..00, AD = every byte before the tag | name, nothing
 *   encrypted (it says sizes only)
 * Chunk i (0-based) of it: bytes [i * chunk_len, (i + 1) * chunk_len) of
 * the record (total bytes), under the key's name + ":" + hex(id) + ":" +
 * decimal i, stored as AES-256-GCM(those bytes) | tag
 *   nonce 00 00..00 | u32 i, AD = "PXLC" | 2 | id | u32 i | u32 n_chunks |
 *   name
 */
#include "daemon/l2_seal.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#define L2_MAGIC "PXL2"
#define L2_CHUNK_MAGIC "PXLC"           /* in a chunk's associated data */
#define L2_VERSION 2
#define L2_OLD_VERSION 1                /* HMAC-sealed: a miss */
/* kind, status, identity_len, data_len, log_len */
#define L2_RECORD_FIXED (1 + 4 + 2 + 4 + 4)

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

/* A value's key: HKDF-SHA-256(secret; salt "ptxcache-l2 v2"; info "value"
 * | u16 scope_len | scope | id). 0, or -1 if OpenSSL fails. */
int value_key(const void *secret, size_t secret_len, const char *scope,
	      size_t scope_len, const unsigned char id[L2_ID_LEN], unsigned char out[32])
{
	static const char salt[] = "ptxcache-l2 v2";
	unsigned char info[5 + 2 + L2_PREFIX_MAX + L2_SPACE_MAX + L2_ID_LEN];
	EVP_KDF *kdf;
	EVP_KDF_CTX *c;
	size_t n = 0;
	int ok;

	if (!secret_len || scope_len > L2_PREFIX_MAX + L2_SPACE_MAX)
		return -1;
	memcpy(info, "value", 5);
	n = 5;
	put_be(info + n, scope_len, 2);
	n += 2;
	memcpy(info + n, scope, scope_len);
	n += scope_len;
	memcpy(info + n, id, L2_ID_LEN);
	n += L2_ID_LEN;
	kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	c = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, secret_len),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt,
						  sizeof salt - 1),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n),
		OSSL_PARAM_construct_end(),
	};
	ok = c && EVP_KDF_derive(c, out, 32, params) == 1;
	EVP_KDF_CTX_free(c);
	EVP_KDF_free(kdf);
	OPENSSL_cleanse(info, sizeof info);
	return ok ? 0 : -1;
}

/* AES-256-GCM under key, nonce (domain, index), associated data ad | name:
 * seal len bytes of in into out and tag, or open them (the tag checked;
 * out holds nothing usable on failure). in and out may be the same. 0,
 * or -1: OpenSSL failed, or (open) the bytes are not authentic. */
int aead(int seal, const unsigned char key[32], int domain, uint32_t index,
	 const unsigned char *ad, size_t ad_len, const char *name, size_t name_len,
	 const unsigned char *in, size_t len, unsigned char *out,
	 unsigned char tag[L2_TAG_LEN])
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	unsigned char nonce[12] = { (unsigned char)domain }, end[16];
	int n, ok;

	put_be(nonce + 8, index, 4);
	ok = c && EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, key, nonce, seal) == 1 &&
	     EVP_CipherUpdate(c, NULL, &n, ad, (int)ad_len) == 1 &&
	     EVP_CipherUpdate(c, NULL, &n, (const unsigned char *)name, (int)name_len) == 1;
	/* In pieces under INT_MAX: a record may be larger than an int. */
	for (size_t off = 0; ok && off < len;) {
		size_t k = len - off < (1u << 30) ? len - off : (1u << 30);
		ok = EVP_CipherUpdate(c, out + off, &n, in + off, (int)k) == 1 && (size_t)n == k;
		off += k;
	}
	if (ok && !seal)
		ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, L2_TAG_LEN, tag) == 1;
	ok = ok && EVP_CipherFinal_ex(c, out ? out + len : end, &n) == 1;
	if (ok && seal)
		ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, L2_TAG_LEN, tag) == 1;
	EVP_CIPHER_CTX_free(c);
	return ok ? 0 : -1;
}

/* The record's size for v, or 0 if a field is too long for it. */
size_t record_len(const struct l2_value *v, size_t id_len)
{
	if (id_len > UINT16_MAX || v->data_len > UINT32_MAX || v->log_len > UINT32_MAX)
		return 0;
	return L2_RECORD_FIXED + id_len + v->data_len + v->log_len;
}

/* v's record at p (record_len() bytes). */
void record_write(unsigned char *p, const struct l2_value *v, const char *identity,
		  size_t id_len)
{
	p[0] = (unsigned char)v->kind;
	put_be(p + 1, (uint32_t)v->status, 4);
	put_be(p + 5, id_len, 2);
	p += 7;
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
}

/* Read an authentic record: every length against what remains, then the
 * identity and the kind. 0 and v pointing into p, or -1 and why. */
int record_read(const unsigned char *p, size_t len, const char *identity,
		struct l2_value *v, const char **why)
{
	size_t id_len, data_len, log_len, off, want_id_len = identity ? strlen(identity) : 0;

	memset(v, 0, sizeof *v);
	*why = "bad length";
	if (len < L2_RECORD_FIXED)
		return -1;
	id_len = (size_t)get_be(p + 5, 2);
	off = 7;
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
	if (id_len != want_id_len || (id_len && memcmp(p + 7, identity, id_len))) {
		*why = "wrong identity";
		return -1;
	}
	if (p[0] < 1 || p[0] > 3) {     /* STORE_PTX, STORE_CUBIN, STORE_ARTIFACT */
		*why = "bad kind";
		return -1;
	}
	v->kind = p[0];
	v->status = (int)(int32_t)(uint32_t)get_be(p + 1, 4);
	off = 7 + id_len + 4;
	v->data = p + off;
	v->data_len = data_len;
	off += data_len + 4;
	v->log = (const char *)p + off;
	v->log_len = log_len;
	*why = NULL;
	return 0;
}

/* A key's name in Redis: scope (prefix + space) + 64 hex digits. */
size_t name_of(const char *scope, const unsigned char key[32], char *name)
{
	size_t n = strlen(scope);

	memcpy(name, scope, n);
	for (int i = 0; i < 32; i++)
		snprintf(name + n + 2 * i, 3, "%02x", key[i]);
	return n + 64;
}

/* Seal a whole record in place under name (scope_len bytes of scope
 * first): p holds room for the head, the record's rec_len bytes at
 * p + L2_HEAD, then room for the tag. */
int seal_record(const char *name, size_t name_len, size_t scope_len, unsigned char *p,
		size_t rec_len, const void *secret, size_t secret_len)
{
	unsigned char key[32];
	int rc;

	memcpy(p, L2_MAGIC, 4);
	p[4] = L2_VERSION;
	if (RAND_bytes(p + 5, L2_ID_LEN) != 1 ||
	    value_key(secret, secret_len, name, scope_len, p + 5, key) < 0)
		return -1;
	rc = aead(1, key, N_RECORD, 0, p, L2_HEAD, name, name_len, p + L2_HEAD, rec_len,
		  p + L2_HEAD, p + L2_HEAD + rec_len);
	OPENSSL_cleanse(key, sizeof key);
	return rc;
}

/* The framing of a value read under a key: 1 if it is of version 1 (a
 * miss), 0 if it is of this one, -1 and why if neither. */
static int framing(const unsigned char *p, size_t len, const char *magic, const char **why)
{
	if (!p || len < 5) {
		*why = "bad length";
		return -1;
	}
	if (memcmp(p, magic, 4)) {
		*why = "bad magic";
		return -1;
	}
	if (p[4] == L2_OLD_VERSION)
		return 1;
	if (p[4] != L2_VERSION) {
		*why = "wrong version";
		return -1;
	}
	return 0;
}

/* Open a whole value read under name: its record into plain. 1: of
 * version 1 (a miss); 0: plain holds the authentic record; -1 and why. */
int open_record(const char *name, size_t name_len, size_t scope_len, const void *bytes,
		size_t len, const void *secret, size_t secret_len, struct buf *plain,
		const char **why)
{
	const unsigned char *p = bytes;
	unsigned char key[32];
	size_t rec_len;
	int rc = framing(p, len, L2_MAGIC, why);

	if (rc)
		return rc;
	*why = "bad length";
	if (len < L2_HEAD + L2_TAG_LEN)
		return -1;
	rec_len = len - L2_HEAD - L2_TAG_LEN;
	buf_reset(plain);
	*why = "out of memory";
	if (buf_reserve(plain, rec_len) < 0)
		return -1;
	*why = "does not open";
	if (value_key(secret, secret_len, name, scope_len, p + 5, key) < 0)
		return -1;
	rc = aead(0, key, N_RECORD, 0, p, L2_HEAD, name, name_len, p + L2_HEAD, rec_len,
		  (unsigned char *)plain->data, (unsigned char *)p + L2_HEAD + rec_len);
	OPENSSL_cleanse(key, sizeof key);
	if (rc < 0)
		return -1;
	plain->len = rec_len;
	*why = NULL;
	return 0;
}

int l2_seal(const char *scope, const unsigned char key[32], const struct l2_value *v,
	    const char *identity, const void *secret, size_t secret_len, struct buf *out)
{
	size_t id_len = identity ? strlen(identity) : 0, rec_len = record_len(v, id_len);
	size_t scope_len = strlen(scope);
	char name[NAME_MAX_LEN];

	buf_reset(out);
	if (!rec_len || v->kind < 0 || v->kind > 255 || !secret_len ||
	    scope_len > L2_PREFIX_MAX + L2_SPACE_MAX ||
	    buf_reserve(out, L2_HEAD + rec_len + L2_TAG_LEN) < 0)
		return -1;
	record_write((unsigned char *)out->data + L2_HEAD, v, identity, id_len);
	if (seal_record(name, name_of(scope, key, name), scope_len, (unsigned char *)out->data,
			rec_len, secret, secret_len) < 0)
		return -1;
	out->len = L2_HEAD + rec_len + L2_TAG_LEN;
	out->data[out->len] = '\0';
	return 0;
}

int l2_open(const char *scope, const unsigned char key[32], const void *bytes, size_t len,
	    const char *identity, const void *secret, size_t secret_len, struct buf *plain,
	    struct l2_value *v, const char **why)
{
	size_t scope_len = strlen(scope);
	char name[NAME_MAX_LEN];
	int rc;

	memset(v, 0, sizeof *v);
	if (scope_len > L2_PREFIX_MAX + L2_SPACE_MAX) {
		*why = "bad length";
		return -1;
	}
	rc = open_record(name, name_of(scope, key, name), scope_len, bytes, len, secret,
			 secret_len, plain, why);
	if (rc > 0)
		*why = "old version";
	if (rc)
		return -1;
	return record_read((const unsigned char *)plain->data, plain->len, identity, v, why);
}

/* A chunk's associated data: "PXLC" | version | id | u32 i | u32 n. */
void chunk_ad(const unsigned char id[L2_ID_LEN], uint32_t i, uint32_t n,
	      unsigned char ad[L2_CHUNK_AD])
{
	memcpy(ad, L2_CHUNK_MAGIC, 4);
	ad[4] = L2_VERSION;
	memcpy(ad + 5, id, L2_ID_LEN);
	put_be(ad + L2_HEAD, i, 4);
	put_be(ad + L2_HEAD + 4, n, 4);
}

/* The manifest of a chunked value: the chunk size, the record's length,
 * the number of chunks and the id (which names them and picks the key),
 * sealed under the value's key and the key's name. */
int manifest_seal(const char *name, size_t name_len, const unsigned char vkey[32],
		  uint32_t chunk_len, uint64_t total, uint32_t n_chunks,
		  const unsigned char id[L2_ID_LEN], unsigned char out[L2_MANIFEST_LEN])
{
	memcpy(out, L2_MANIFEST_MAGIC, 4);
	out[4] = L2_VERSION;
	memcpy(out + 5, id, L2_ID_LEN);
	put_be(out + L2_HEAD, chunk_len, 4);
	put_be(out + L2_HEAD + 4, total, 8);
	put_be(out + L2_HEAD + 12, n_chunks, 4);
	return aead(1, vkey, N_MANIFEST, 0, out, L2_MANIFEST_BODY, name, name_len, NULL, 0, NULL,
		    out + L2_MANIFEST_BODY);
}

/* Open a manifest read under name: 0 with its fields and the value's key,
 * 1 if it is of version 1 (a miss), or -1 and why. The seal first, then
 * every field against the bounds a reader keeps: a manifest cannot make a
 * reader fetch more than max_value bytes, or chunks of a size outside
 * [L2_CHUNK_MIN, L2_CHUNK_MAX]. */
int manifest_open(const char *name, size_t name_len, size_t scope_len,
		  const void *bytes, size_t len, const void *secret, size_t secret_len,
		  int64_t max_value, size_t *chunk_len, uint64_t *total,
		  uint32_t *n_chunks, unsigned char id[L2_ID_LEN],
		  unsigned char vkey[32], const char **why)
{
	const unsigned char *p = bytes;
	int rc = framing(p, len, L2_MANIFEST_MAGIC, why);

	if (rc)
		return rc;
	*why = "bad length";
	if (len != L2_MANIFEST_LEN)
		return -1;
	*why = "does not open";
	if (value_key(secret, secret_len, name, scope_len, p + 5, vkey) < 0 ||
	    aead(0, vkey, N_MANIFEST, 0, p, L2_MANIFEST_BODY, name, name_len, NULL, 0, NULL,
		 (unsigned char *)p + L2_MANIFEST_BODY) < 0)
		return -1;
	memcpy(id, p + 5, L2_ID_LEN);
	*chunk_len = (size_t)get_be(p + L2_HEAD, 4);
	*total = get_be(p + L2_HEAD + 4, 8);
	*n_chunks = (uint32_t)get_be(p + L2_HEAD + 12, 4);
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

/* libcrypto's one-time setup (its configuration file, the default
 * provider that the seal fetches HKDF and AES-GCM from) at start, rather
 * than in the first lookup's turn of the loop. AES-256-GCM's first use in
 * a process costs milliseconds too (the provider builds its table of
 * ciphers; the first key schedule): one seal of a block here, so a fresh
 * node's first value does not pay it. */
void seal_warm_up(void)
{
	static const unsigned char key[32], nonce[12];
	unsigned char in[16] = { 0 }, out[16], tag[16];
	EVP_CIPHER *gcm;
	EVP_CIPHER_CTX *c;
	int n;

	EVP_KDF_free(EVP_KDF_fetch(NULL, "HKDF", NULL));
	gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
	c = EVP_CIPHER_CTX_new();
	if (gcm && c && EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, nonce) == 1 &&
	    EVP_EncryptUpdate(c, out, &n, in, sizeof in) == 1 &&
	    EVP_EncryptFinal_ex(c, out, &n) == 1)
		EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, sizeof tag, tag);
	EVP_CIPHER_CTX_free(c);
	EVP_CIPHER_free(gcm);
}
