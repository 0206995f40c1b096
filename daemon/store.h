/*
 * store: the SQLite cache of compiled blobs; the only file that speaks
 * SQLite. One database (cache.db) in the cache directory, WAL mode, one
 * writer: the master process. Workers and clients never open it.
 *
 * Blobs (PTX, cubin, and the log text beside them) are stored
 * zstd-compressed with a checksum that is verified on every read: a blob
 * that fails it is deleted and reported as a miss, never returned. A put is
 * committed (durable in the WAL) before store_put() returns, so a result
 * acknowledged to a client survives a kill -9 of the daemon.
 *
 * Hits do not write synchronously: hit counts and last-use times are kept in
 * memory and written in one transaction by store_flush() (called from a
 * timer and at shutdown). Eviction is LRU by last use, down to the size cap.
 */
#ifndef PTXCACHE_STORE_H
#define PTXCACHE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/buf.h"

struct store;

enum store_kind { STORE_PTX = 1, STORE_CUBIN = 2 };

/* An entry to store. status 0 is a compiled result; any other value is a
 * negative entry (a deterministic compile error, code chosen by the caller),
 * whose log holds the error text and whose data is usually empty. */
struct store_entry {
	enum store_kind kind;
	int status;
	const void *data;
	size_t data_len;
	const char *log;
	size_t log_len;
	const char *components; /* JSON text of the key components */
	const char *arch;       /* "sm_90a", for listing and eviction filters */
	int64_t compile_us;     /* how long the compile took */
};

/* A looked-up entry; the caller owns the bufs and frees them with
 * store_result_free(). */
struct store_result {
	enum store_kind kind;
	int status;
	struct buf data;
	struct buf log;
};

/* Open or create the cache in dir (created 0700 if missing), applying
 * schema.sql. max_bytes is the size cap (0: none). A database that fails to
 * open or fails its quick check is moved aside to cache.db.corrupt-<time>
 * and a fresh one created, with a loud log line. Returns NULL with a message
 * in err on failure. */
struct store *store_open(const char *dir, int64_t max_bytes, struct buf *err);

/* Flush pending hit bookkeeping, checkpoint the WAL and close. NULL ok. */
void store_close(struct store *s);

/* Look up key. Returns 1 and fills out on a hit, 0 on a miss (including a
 * blob whose checksum or decompression fails: it is deleted and counted),
 * -1 on a database error (treat as a miss). Records the hit in memory. */
int store_get(struct store *s, const unsigned char key[32],
	      struct store_result *out);

/* Insert or replace key's entry and commit before returning. Returns 0, or
 * -1 on failure (disk full, I/O error) with a message in err; the caller
 * still answers its client. May evict LRU entries to stay under the cap. */
int store_put(struct store *s, const unsigned char key[32],
	      const struct store_entry *e, struct buf *err);

/* Write pending hit counts and last-use times in one transaction. */
void store_flush(struct store *s);

/* Entries and the bytes they take (compressed blobs plus row overhead). */
void store_totals(struct store *s, int64_t *entries, int64_t *bytes);

/* Counters since open. */
struct store_counters {
	int64_t corrupt_blobs;  /* blobs that failed their checksum */
	int64_t write_errors;   /* puts that failed */
	int64_t evictions;      /* entries removed by the size cap */
};
void store_counters(struct store *s, struct store_counters *c);

/* Check every entry (decompress and verify checksum) and run
 * PRAGMA integrity_check. Returns the number of problems found, writing one
 * line per problem to report; -1 if the check could not run. */
int store_verify(struct store *s, struct buf *report);

void store_result_free(struct store_result *r);

#endif
