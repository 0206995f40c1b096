/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_int: what the store's files share, and nothing else includes.
 * store.c (open and recovery, the prepared statements, the hit path, the
 * pending hits and notes, eviction) stands on store_files.c (the files of
 * rows going, unlinked once their removal is committed, off the loop;
 * whether a row names a file; the reserve file). store_put.c (the put
 * path: which values become files, the spool, a scope's share, a full
 * disk, the batch's transaction) and store_admin.c (the admin queries:
 * show, ls, explain, remove, count, verify) stand on both, and nothing
 * in the store calls them. The structures here are the store itself, a
 * file whose row is going and a row an eviction reads; the store's
 * public contract is store.h, which this header stands below (each file
 * of the store includes both).
 */
#ifndef PTXCACHE_STORE_INT_H
#define PTXCACHE_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>
#include <zstd.h>

#include "daemon/store_counters.h"
#include "daemon/store_hot.h"
#include "proto/buf.h"

/* A stored length beyond this is damage, not data (no allocation for it). */
#define MAX_RAW_LEN ((int64_t)1 << 30)
/* Rows read per eviction query; the LIMIT in stmt_sql[ST_LRU]. */
#define EVICT_BATCH 256
/* The data column of a row whose value is in its blob file: these bytes
 * exactly (never a zstd frame, which is at least 9 bytes and starts with
 * its magic number; an empty value is an empty blob). */
#define FILE_REF "PXFILE01"
#define FILE_REF_LEN 8
/* The reserve file's size at most (store_put.c's design comment). */
#define RESERVE_BYTES (16 << 20)

/* The statements prepared once at open (store.c's stmt_sql[]). */
enum {
	ST_GET,
	ST_DEL_KEY,
	ST_OLD_SIZE,
	ST_PUT,
	ST_HIT,
	ST_TRUST,
	ST_LRU,
	ST_DEL_ROWID,
	ST_SCOPE_BYTES,
	ST_SCOPE_LRU,
	ST_NOTE,
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST_SAVEPOINT,
	ST_RELEASE,
	ST_ROLLBACK_TO,
	ST_N
};

/* A pending hit or note, keyed by (key, user); used is 0 for an empty
 * slot. A hit's user is 0: at is its last use and hits its count. A note
 * says that user stored or was answered with key's row as it was at time
 * at (store_note_user()). */
struct pending {
	unsigned char key[32];
	int64_t user;
	int64_t at;
	uint32_t hits;
	uint32_t used;
};

/* The pending hits, or notes: open addressing, cap a power of 2. */
struct pending_tab {
	struct pending *slot;
	size_t cap;
	size_t n;
};

/* A blob file whose row's removal is not committed yet (struct store's
 * doomed): unlinked after the commit, forgotten on a rollback. */
struct doomed {
	unsigned char key[32];
	int64_t sum;
};

/* One row of an eviction query (rowid, size, key, checksum, length(data)). */
struct victim {
	int64_t rowid, size;
	struct doomed file;
	int has_file;
};

struct store {
	sqlite3 *db;
	struct blobs *blobs;    /* the files of large values (store_blobs.h) */
	struct doomed *doomed;  /* files to unlink at the next commit */
	size_t ndoomed, doomed_cap;
	struct doomed placed;   /* a spooled value's file, in place before
	                           its row's commit (store_put_spool()) */
	int placing;            /* ... while that is so: never unlinked */
	struct syncer *sync;    /* unlinks off the loop (store_set_syncer()) */
	int unlink_now;         /* ... but not while the disk is full */
	struct ckpt *ckpt;      /* checkpoints off the loop (store_ckpt.h) */
	sqlite3_stmt *st[ST_N];
	char *dir;
	char *path;             /* <dir>/cache.db */
	int64_t max_bytes;
	int64_t artifact_share; /* bytes per artifact scope; 0: none */
	int64_t entries;
	int64_t bytes;
	int64_t clock_us;       /* last time handed out; strictly increasing */
	struct store_counters ctr;
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	struct buf zdata;       /* compression scratch for puts */
	struct buf zlog;
	struct pending_tab hits;        /* pending hits */
	struct pending_tab notes;       /* pending notes, the same way */
	struct hot_cache hot;   /* decoded entries of recent hits (store_hot.h) */
	int batch;              /* in store_batch_begin()'s transaction */
	int batch_lost;         /* ... which SQLite rolled back by itself */
	int64_t batch_entries;  /* the totals and counters before it */
	int64_t batch_bytes;
	struct store_counters batch_ctr;
};

/* store.c */

/* A time for a row or a hit: unix microseconds, never the same twice. */
int64_t store_clock(struct store *s);
void key_hex(const unsigned char key[32], char out[65]);
/* Step a statement that returns no rows and reset it; the step's result. */
int run_st(struct store *s, int which);
/* Roll back if a transaction is open; in a batch, the put's savepoint. */
void rollback(struct store *s);
/* Compress src into dst (replacing its contents): one zstd frame, or
 * nothing for empty input. */
int compress_into(struct store *s, struct buf *dst, const void *src, size_t len);
/* Decode and check a row's data and log, with columns at the given indexes
 * of st: kind, data_len, log_len, checksum, data, log; a value in its blob
 * file (key's) is read from there. 0, 1 if the row is damaged (*why says
 * how), or -1 if memory runs out. */
int check_row(struct store *s, sqlite3_stmt *st, const unsigned char *key,
	      int c_kind, int c_dlen, int c_llen, int c_sum, int c_data, int c_log,
	      struct buf *data, struct buf *log, const char **why);
void victim_read(sqlite3_stmt *st, struct victim *v);

/* store_files.c */

/* Note a blob file whose row is deleted in the open transaction. */
void doomed_add(struct store *s, const struct doomed *d);
/* The removals are committed: unlink their files. */
void doomed_commit(struct store *s);
/* They were rolled back: the rows, and so their files, stay. */
void doomed_forget(struct store *s);
/* Unlink a blob file left under a temporary name: off the loop where a
 * syncer is set. */
void retired_dispose(struct store *s, const char *name);
/* For blobs_sweep(): whether a row names key's file for sum. */
int row_names_file(void *arg, const unsigned char key[32], int64_t sum);
/* After a put that wrote key's file for sum failed: remove the file
 * unless the row that stays names it. */
void put_undo_file(struct store *s, const unsigned char key[32], int64_t sum);
/* <dir>/reserve made where missing or short, at most share percent of the
 * free space; and given back. */
void reserve_make(struct store *s, int share);
void reserve_release(struct store *s);

#endif
