/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_hot: the hot entries of the store, private to store.c: the raw
 * bytes of recent hits, kept decoded in memory (HOT_BYTES in all, direct-
 * mapped by key) so that a hit on them skips zstd, XXH64 and the blob's
 * pages. An entry answers only for a row whose checksum and lengths are
 * those it was kept with (store.c reads them before any blob column), so
 * a replaced or deleted row never answers from memory and nothing needs
 * invalidating. No SQLite here: store.c passes the row's columns in.
 */
#ifndef PTXCACHE_STORE_HOT_H
#define PTXCACHE_STORE_HOT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/buf.h"

struct hot;

/* Empty when zeroed; its slots are made on first use. */
struct hot_cache {
	struct hot *slot;       /* HOT_SLOTS decoded entries, by key; lazily */
	size_t bytes;           /* their raw bytes, at most HOT_BYTES */
	size_t hand;            /* next slot to empty when over HOT_BYTES */
};

/* The entry kept for key if it is the row's (checksum sum, data and log
 * lengths): its bytes appended to data and log. 1 if so, 0 if none is
 * kept for that row, -1 if memory ran out. */
int hot_get(struct hot_cache *h, const unsigned char key[32], int64_t sum,
	    int64_t data_len, int64_t log_len, struct buf *data, struct buf *log);

/* hot_get() without the copy: *data and *log are the kept entry's own
 * bytes (read-only; not to be freed), and the entry stays as it is, neither
 * replaced nor emptied, until hot_return() of what this returns. NULL if
 * none is kept for that row. */
struct hot *hot_lend(struct hot_cache *h, const unsigned char key[32], int64_t sum,
		     int64_t data_len, int64_t log_len, struct buf *data, struct buf *log);
void hot_return(struct hot *lent);

/* Keep a copy of a decoded entry under key, for a row of checksum sum
 * (as much as memory allows; best effort: nothing if it is empty or
 * larger than HOT_MAX_ENTRY, or where key's slot is lent). */
void hot_keep(struct hot_cache *h, const unsigned char key[32], int64_t sum,
	      const struct buf *data, const struct buf *log);

/* Free every entry kept (none may be lent). */
void hot_free(struct hot_cache *h);

#endif
