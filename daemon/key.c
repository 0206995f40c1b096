/* SPDX-License-Identifier: Apache-2.0 */
/*
 * key: cache keys; see key.h for the encoding, which is the contract (bump
 * KEY_SCHEMA_VERSION when it changes).
 *
 * Design: key_derive() is on the cache-hit path, so it builds the whole
 * length-prefixed encoding in one buffer (on the stack when it fits, which
 * it always does for real keys: the input bytes enter as their hash) and
 * hashes it with one SHA-256 call; no allocation on that path. The
 * components JSON is a flat object whose values are all strings, schema
 * version first ("key_schema":"1"), so store_nearest() can compare stored
 * and requested components with a tiny parser. Values are escaped as JSON
 * requires; bytes that are not valid UTF-8 are written as \u00XX so the text
 * stays valid JSON whatever the caller passed (the key itself is over the
 * raw bytes, so this never merges two keys).
 */
#include "daemon/key.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

static const char hexdig[] = "0123456789abcdef";
static const char key_magic[] = "ptxcache-key"; /* hashed with its NUL */

static void to_hex(const unsigned char *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hexdig[p[i] >> 4];
		out[2 * i + 1] = hexdig[p[i] & 15];
	}
	out[2 * n] = '\0';
}

/* SHA-256 through one context and one fetch of the algorithm, kept for
 * the process's life (each process is one thread): OpenSSL 3's one-shot
 * SHA256() fetches the algorithm and makes and frees a context on every
 * call, which is a fifth of the allocations of a hit (bench/NOTES.md). */
static void sha256(const void *data, size_t len, unsigned char md[32])
{
	static EVP_MD *alg;
	static EVP_MD_CTX *ctx;

	if (!alg)
		alg = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (!ctx)
		ctx = EVP_MD_CTX_new();
	if (!alg || !ctx || EVP_DigestInit_ex(ctx, alg, NULL) != 1 ||
	    EVP_DigestUpdate(ctx, data, len) != 1 || EVP_DigestFinal_ex(ctx, md, NULL) != 1)
		SHA256(data, len, md);  /* out of memory: the one-shot way */
}

void key_sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[32];

	sha256(data, len, md);
	to_hex(md, sizeof md, out);
}

static unsigned char *put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
	return p + 4;
}

static unsigned char *put_field(unsigned char *p, const char *s, size_t n)
{
	p = put_be32(p, (uint32_t)n);
	memcpy(p, s, n);
	return p + n;
}

static int components_json(const struct key_part *parts, size_t n,
			   struct buf *out)
{
	size_t start = out->len;

	if (buf_printf(out, "{\"key_schema\":\"%d\"", KEY_SCHEMA_VERSION) < 0)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		const char *name = parts[i].name ? parts[i].name : "";
		const char *value = parts[i].value ? parts[i].value : "";
		if (buf_append(out, ",", 1) < 0 ||
		    buf_json_str(out, name, strlen(name)) < 0 ||
		    buf_append(out, ":", 1) < 0 ||
		    buf_json_str(out, value, strlen(value)) < 0)
			goto fail;
	}
	if (buf_append(out, "}", 1) < 0)
		goto fail;
	return 0;
fail:
	out->len = start;
	if (out->data)
		out->data[start] = '\0';
	return -1;
}

int key_derive(const struct key_part *parts, size_t n, struct key *out,
	       struct buf *components)
{
	unsigned char stack[2048];
	unsigned char *enc = stack;
	size_t total = sizeof key_magic + 4;

	for (size_t i = 0; i < n; i++) {
		size_t nl = parts[i].name ? strlen(parts[i].name) : 0;
		size_t vl = parts[i].value ? strlen(parts[i].value) : 0;
		if (nl > UINT32_MAX || vl > UINT32_MAX)
			return -1;
		total += 8 + nl + vl;
	}
	if (total > sizeof stack && !(enc = malloc(total)))
		return -1;

	unsigned char *p = enc;
	memcpy(p, key_magic, sizeof key_magic);
	p = put_be32(p + sizeof key_magic, KEY_SCHEMA_VERSION);
	for (size_t i = 0; i < n; i++) {
		const char *name = parts[i].name ? parts[i].name : "";
		const char *value = parts[i].value ? parts[i].value : "";
		p = put_field(p, name, strlen(name));
		p = put_field(p, value, strlen(value));
	}
	sha256(enc, (size_t)(p - enc), out->hash);
	if (enc != stack)
		free(enc);
	to_hex(out->hash, sizeof out->hash, out->hex);

	if (components && components_json(parts, n, components) < 0)
		return -1;
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int key_from_hex(const char *hex, unsigned char hash[32])
{
	unsigned char tmp[32];

	if (!hex)
		return -1;
	for (int i = 0; i < 32; i++) {
		int hi = hexval(hex[2 * i]);
		int lo = hi < 0 ? -1 : hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		tmp[i] = (unsigned char)(hi << 4 | lo);
	}
	if (hex[64] != '\0')
		return -1;
	memcpy(hash, tmp, sizeof tmp);
	return 0;
}
