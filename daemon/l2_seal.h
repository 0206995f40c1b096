/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_seal: the tier's seal (l2_seal.c, whose top has the format), for the
 * value layer l2.c: bytes in, bytes out, no I/O. A whole value is its
 * record (record_len(), record_write(), record_read()) sealed in place
 * under its key's name (seal_record(), open_record()); a chunked one is
 * chunks sealed with aead() under the value's key (value_key()) and a
 * chunk's associated data (chunk_ad()), and a manifest (manifest_seal(),
 * manifest_open()). Each function's comment is at its definition.
 */
#ifndef PTXCACHE_L2_SEAL_H
#define PTXCACHE_L2_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/l2_int.h"
#include "proto/buf.h"

#define L2_MANIFEST_MAGIC "PXLM"
#define L2_TAG_LEN 16
/* magic, version, id: before a whole value's ciphertext, and a manifest */
#define L2_HEAD (4 + 1 + L2_ID_LEN)
/* head, chunk_len u32, total u64, n_chunks u32 */
#define L2_MANIFEST_BODY (L2_HEAD + 4 + 8 + 4)
#define L2_MANIFEST_LEN (L2_MANIFEST_BODY + L2_TAG_LEN)
/* A chunk's associated data: "PXLC" | version | id | u32 i | u32 n. */
#define L2_CHUNK_AD (L2_HEAD + 4 + 4)
/* The nonce's first byte: what a value key seals under it. */
enum { N_CHUNK = 0, N_RECORD = 1, N_MANIFEST = 2 };

int value_key(const void *secret, size_t secret_len, const char *scope,
	      size_t scope_len, const unsigned char id[L2_ID_LEN], unsigned char out[32]);
int aead(int seal, const unsigned char key[32], int domain, uint32_t index,
	 const unsigned char *ad, size_t ad_len, const char *name, size_t name_len,
	 const unsigned char *in, size_t len, unsigned char *out,
	 unsigned char tag[L2_TAG_LEN]);

size_t record_len(const struct l2_value *v, size_t id_len);
void record_write(unsigned char *p, const struct l2_value *v, const char *identity,
		  size_t id_len);
int record_read(const unsigned char *p, size_t len, const char *identity,
		struct l2_value *v, const char **why);

size_t name_of(const char *scope, const unsigned char key[32], char *name);
int seal_record(const char *name, size_t name_len, size_t scope_len, unsigned char *p,
		size_t rec_len, const void *secret, size_t secret_len);
int open_record(const char *name, size_t name_len, size_t scope_len, const void *bytes,
		size_t len, const void *secret, size_t secret_len, struct buf *plain,
		const char **why);

void chunk_ad(const unsigned char id[L2_ID_LEN], uint32_t i, uint32_t n,
	      unsigned char ad[L2_CHUNK_AD]);
int manifest_seal(const char *name, size_t name_len, const unsigned char vkey[32],
		  uint32_t chunk_len, uint64_t total, uint32_t n_chunks,
		  const unsigned char id[L2_ID_LEN], unsigned char out[L2_MANIFEST_LEN]);
int manifest_open(const char *name, size_t name_len, size_t scope_len,
		  const void *bytes, size_t len, const void *secret, size_t secret_len,
		  int64_t max_value, size_t *chunk_len, uint64_t *total,
		  uint32_t *n_chunks, unsigned char id[L2_ID_LEN],
		  unsigned char vkey[32], const char **why);

/* libcrypto's setup and AES-GCM's first use, at start (l2_new()). */
void seal_warm_up(void);

#endif
