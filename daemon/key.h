/* SPDX-License-Identifier: Apache-2.0 */
/*
 * key: cache keys. A key is SHA-256 over a canonical, length-prefixed
 * encoding of every input that can change a compile's output. Components are
 * given as (name, value) text pairs in a fixed order chosen by the caller;
 * the input bytes themselves enter as their SHA-256 (key_sha256_hex), so the
 * stored components stay small and a miss can be explained by comparing them.
 */
#ifndef PTXCACHE_KEY_H
#define PTXCACHE_KEY_H

#include <stddef.h>

#include "proto/buf.h"

/* Bump whenever the encoding or the set of components changes. */
#define KEY_SCHEMA_VERSION 1

struct key_part {
	const char *name;
	const char *value;      /* NUL-terminated text; NULL is taken as "" */
};

struct key {
	unsigned char hash[32];
	char hex[65];
};

/* Hex SHA-256 of data into out (65 bytes, NUL-terminated). */
void key_sha256_hex(const void *data, size_t len, char out[65]);

/* Derive the key for parts[0..n). The encoding is: "ptxcache-key\0", the
 * schema version as 4 big-endian bytes, then per part: name length (4 bytes
 * BE), name, value length (4 bytes BE), value. If components is not NULL, it
 * receives the parts as one JSON object (schema version first) for storing
 * beside the entry. Returns 0, or -1 if memory runs out. */
int key_derive(const struct key_part *parts, size_t n, struct key *out,
	       struct buf *components);

/* Parse 64 hex digits into hash; 0 on success, -1 if malformed. */
int key_from_hex(const char *hex, unsigned char hash[32]);

#endif
