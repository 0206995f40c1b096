/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store: the SQLite cache of compiled blobs; see store.h for the contract
 * and schema.sql for the table.
 *
 * Design:
 *  - One connection, opened by the master, used from its one thread
 *    (SQLITE_OPEN_NOMUTEX); a second only checkpoints the WAL, on a thread
 *    of its own (store_ckpt.c). Every statement the hit and put paths run is
 *    prepared once at open (SQLITE_PREPARE_PERSISTENT) and reused; the
 *    maintenance queries (show, ls, explain, verify) prepare their own.
 *
 *  - Durability: WAL with synchronous=NORMAL, on purpose. The contract is
 *    that a put acknowledged to a client survives a kill -9 of the daemon.
 *    In WAL mode a commit is complete once its frames are write(2)n to
 *    cache.db-wal; from then on the data is in the kernel's page cache and
 *    outlives the process, however it dies (tests/unit/test_store.c kills a
 *    child with SIGKILL right after a put to check exactly this). What
 *    synchronous=FULL adds is an fsync of the WAL per commit, which guards
 *    against power loss and kernel crashes only, and it would cost a disk
 *    flush (0.1 ms on a good SSD, many ms on network or busy disks) inside
 *    the master's single-threaded event loop on every put, stalling every
 *    concurrent hit behind it. After a power loss WAL+NORMAL still leaves a
 *    consistent database that has lost at most the last few puts, and for a
 *    cache a lost entry is just a recompile. Checkpoints do fsync, off
 *    the loop (store_ckpt.c).
 *
 *  - Integrity: each blob (data and log) is one zstd frame (level 3), and
 *    the checksum column holds XXH64 of the raw data, continued over the raw
 *    log (seeded with the data's hash). A read decompresses into exactly
 *    data_len / log_len bytes (anything else fails) and recomputes the hash
 *    over the raw bytes: an end-to-end 64-bit check that catches damage to
 *    the compressed bytes, the lengths, or the row's pairing, at about 10
 *    GB/s (a few us for 50 KB of PTX, small beside decompression). zstd's
 *    own content checksum would be only 32 bits and is switched off, so the
 *    raw bytes are hashed once. A row that fails is deleted, counted in
 *    corrupt_blobs and reported as a miss; no byte of it is returned.
 *
 *  - Hot entries are not decoded again: the raw bytes of recent hits are
 *    kept in memory (store_hot.c, HOT_BYTES in all) and answer a hit only
 *    while the row still holds the same checksum and lengths, read before
 *    any blob column. A replaced or deleted row thus never answers from
 *    memory, with nothing to invalidate; the bytes kept were checked when
 *    they were decoded. This skips zstd, XXH64 and the blob's pages, the
 *    larger part of a hit's cost in the master (bench/NOTES.md).
 *
 *  - Hits write nothing: a small open-addressing table in memory holds
 *    key -> (hits, last use) until store_flush() writes it in one
 *    transaction. Who saw an entry (store_note_user(), for the queries'
 *    per-identity view) waits beside it, (key, identity) -> time, and
 *    goes into entry_users in the same transaction, for the row it saw
 *    only: a note older than the row's created (a row replaced since) is
 *    dropped. Triggers (schema.sql) delete an entry's users with it, in
 *    every path that deletes or replaces a row. Times are unix microseconds from a per-store clock that
 *    never repeats, so LRU order is exact even within one second.
 *
 *  - Size cap: the total of the rows' size column is kept in memory (one
 *    SUM at open); a put that pushes it over max_bytes evicts in LRU order
 *    down to 90% of the cap, walking the covering (last_used, size) index.
 *    An entry that alone exceeds 90% of the cap is evicted with the rest:
 *    the cap wins (the put still succeeded and the client has its answer).
 *
 *  - A full disk (SQLITE_FULL, in the put or its commit) is not left for
 *    someone to notice: the put is rolled back, the reserve file given
 *    back (<dir>/reserve: 16 MiB, more than the WAL holds between
 *    checkpoints, store_ckpt.c; a quarter of the free space at most when
 *    allocated at open, half when again from the room each such event
 *    makes: without it
 *    a full disk can hold the WAL's committed frames that no checkpoint
 *    can move into the database, which cannot grow, so nothing could be
 *    deleted either), the WAL checkpointed and
 *    truncated, the least recently used entries evicted (at least twice
 *    the new entry and the reserve, and a tenth of the cache), their
 *    pages given back to
 *    the filesystem (PRAGMA incremental_vacuum: caches are created with
 *    auto_vacuum=INCREMENTAL; in WAL mode a freed page still takes its
 *    place in the file, and the retry's WAL frames need the disk) and the
 *    WAL truncated again; then the put is tried once more (full_retries).
 *    Without that, every later put would fail until an admin made room.
 *    A cache created before auto_vacuum keeps its file size: there the
 *    retry has only the WAL's space.
 *
 *  - Large values are files (store_blobs.c): a value of BLOB_MIN bytes and more
 *    is written raw to its own file, durable before the row that names it
 *    (FILE_REF in the data column) is committed; its row's removal is
 *    committed before the file is unlinked (eviction, the share, remove,
 *    a damaged entry, a replaced value), and blobs_sweep() at open takes
 *    what a kill -9 left between the two. The threshold, measured on this
 *    project's machine (page-cached reads; puts with the file's fsync, the
 *    row's commit without one): a hit read from the row costs 0.11 ms at 64
 *    KiB, 2.5 ms at 256 KiB and 12 ms at 1 MiB, from a file 0.04, 0.02 and
 *    0.12 ms; a put in the row 0.6, 7.9 and 23 ms, in a file 9, 11 and 12
 *    ms (the fsync's floor). Hits win from 64 KiB, puts from about 512
 *    KiB; hits are the common case, so 256 KiB. Files are raw: zstd -3
 *    took 296 ms for a 64 MB value half text, half random, twice a
 *    write+fsync of it (156 ms), for a file half as large, and a
 *    compressed file could be neither sent by sendfile() nor handed over.
 *    The full disk's path below covers them: a file that finds no room
 *    makes room (make_room_on_disk()) and is written once more; a value
 *    larger than the free space and the whole cache together is refused
 *    without evicting anything. A value that arrives in pieces (a spool,
 *    store_spool_open(): an artifact put's value taken from the socket)
 *    is written to its temporary file as it comes and hashed on the way;
 *    a full disk makes room once and the write goes on where it stopped;
 *    store_put_spool() then places that file as put_entry() places a
 *    written one. Its bytes are nowhere else, so a retry after SQLITE_FULL
 *    keeps the placed file rather than writing it again: should the
 *    retry's eviction take the row of the same value put before (the same
 *    name), doomed_commit() spares the file (struct store's placed).
 *
 *  - A database that SQLite rejects as not a database or corrupt, or that
 *    fails PRAGMA quick_check, or whose schema version is not ours, is moved
 *    aside (cache.db.corrupt-<time>, with its -wal and -shm) and a fresh one
 *    created. Any other failure (locked, permissions) is an error: a cache
 *    is never thrown away because it could not be opened.
 */
#include "daemon/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>
#include <xxhash.h>
#include <zstd.h>

#include "daemon/store_blobs.h"
#include "daemon/store_flat.h"
#include "daemon/log.h"
#include "daemon/store_ckpt.h"
#include "daemon/store_hot.h"
#include "daemon/syncer.h"
#include "schema.h"

#define STORE_SCHEMA_VERSION "3"
#define ZSTD_LEVEL 3
#define BUSY_TIMEOUT_MS 2000
/* Per-row bytes beyond the blobs and texts: record header, integers, key,
 * and the two index entries; an estimate, used only for the size cap. */
#define ROW_OVERHEAD 128
/* A stored length beyond this is damage, not data (no allocation for it). */
#define MAX_RAW_LEN ((int64_t)1 << 30)
/* Rows read per eviction query; the LIMIT in stmt_sql[ST_LRU]. */
#define EVICT_BATCH 256
/* The data column of a row whose value is in its blob file: these bytes
 * exactly (never a zstd frame, which is at least 9 bytes and starts with
 * its magic number; an empty value is an empty blob). */
#define FILE_REF "PXFILE01"
#define FILE_REF_LEN 8

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

static const char *const stmt_sql[ST_N] = {
	/* length(data) reads no overflow page: a hot hit leaves the blob
	 * alone, and a value in its file is told from one in the row. */
	[ST_GET] = "SELECT kind, status, data_len, log_len, checksum, size, data, log, "
		   "producer, trust, length(data) FROM entries WHERE key = ?1",
	[ST_DEL_KEY] = "DELETE FROM entries WHERE key = ?1",
	[ST_OLD_SIZE] = "SELECT size, checksum, length(data) FROM entries WHERE key = ?1",
	[ST_PUT] = "INSERT INTO entries (key, kind, status, arch, created, last_used, "
		   "hits, compile_us, size, data_len, log_len, checksum, components, "
		   "data, log, producer, trust, scope, ns) VALUES (?1, ?2, ?3, ?4, ?5, ?5, 0, ?6, "
		   "?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) ON CONFLICT (key) DO "
		   "UPDATE SET kind = excluded.kind, producer = excluded.producer, "
		   "trust = excluded.trust, scope = excluded.scope, ns = excluded.ns, "
		   "status = excluded.status, arch = excluded.arch, "
		   "created = excluded.created, last_used = excluded.last_used, "
		   "compile_us = excluded.compile_us, size = excluded.size, "
		   "data_len = excluded.data_len, log_len = excluded.log_len, "
		   "checksum = excluded.checksum, components = excluded.components, "
		   "data = excluded.data, log = excluded.log",
	[ST_HIT] = "UPDATE entries SET hits = hits + ?2, last_used = max(last_used, ?3) "
		   "WHERE key = ?1",
	[ST_TRUST] = "UPDATE entries SET trust = ?2 WHERE key = ?1",
	/* LIMIT is EVICT_BATCH. last_used values are unique (store_clock()).
	 * key and checksum name a row's blob file, removed once the delete
	 * is committed. */
	[ST_LRU] = "SELECT rowid, size, key, checksum, length(data) FROM entries "
		   "ORDER BY last_used LIMIT 256",
	[ST_DEL_ROWID] = "DELETE FROM entries WHERE rowid = ?1",
	/* Both walk the partial index entries_scope; ?2 is the key being
	 * replaced, which counts as gone: the total walks the index alone (it
	 * covers scope and size; a test of key on each row would read the
	 * row), less the one row of key, looked up by its own index. */
	[ST_SCOPE_BYTES] = "SELECT total(size) - coalesce((SELECT size FROM entries WHERE "
			   "key = ?2 AND kind = 3 AND scope = ?1), 0) FROM entries "
			   "WHERE kind = 3 AND scope = ?1",
	[ST_SCOPE_LRU] = "SELECT rowid, size, key, checksum, length(data) FROM entries "
			 "WHERE kind = 3 AND scope = ?1 AND key != ?2 ORDER BY last_used LIMIT 256",
	/* A user's note, for the row it saw: not for a row stored since
	 * (created is from the same clock as the note's time). */
	[ST_NOTE] = "INSERT OR IGNORE INTO entry_users (key, identity) SELECT ?1, ?2 "
		    "FROM entries WHERE key = ?1 AND created <= ?3",
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	/* A put inside a batch (store_batch_begin()). */
	[ST_SAVEPOINT] = "SAVEPOINT put",
	[ST_RELEASE] = "RELEASE put",
	[ST_ROLLBACK_TO] = "ROLLBACK TO put",
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

/* The checksum column: data's hash, continued over the log. */
static int64_t entry_checksum(const void *data, size_t dlen, const void *log,
			      size_t llen)
{
	return (int64_t)XXH64(log ? log : "", llen, XXH64(data ? data : "", dlen, 0));
}

/* ---- small helpers ---- */

static int64_t store_clock(struct store *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	if (now <= s->clock_us)
		now = s->clock_us + 1;
	return s->clock_us = now;
}

static void key_hex(const unsigned char key[32], char out[65])
{
	static const char hexdig[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hexdig[key[i] >> 4];
		out[2 * i + 1] = hexdig[key[i] & 15];
	}
	out[64] = '\0';
}

/* Step a statement that returns no rows and reset it; the step's result. */
static int run_st(struct store *s, int which)
{
	sqlite3_stmt *st = s->st[which];
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc;
}

/* Roll back if a transaction is open (SQLite rolls back by itself after
 * some errors, such as SQLITE_FULL). In a batch, a put's own savepoint
 * only, unless SQLite took the whole batch back already. */
static void rollback(struct store *s)
{
	if (sqlite3_get_autocommit(s->db)) {
		s->batch_lost |= s->batch;
	} else if (s->batch) {
		if (run_st(s, ST_ROLLBACK_TO) != SQLITE_DONE || run_st(s, ST_RELEASE) != SQLITE_DONE)
			s->batch_lost = 1;
	} else {
		run_st(s, ST_ROLLBACK);
	}
}

/* A put's transaction: its own, or a savepoint in a batch's. */
static int tx_begin(struct store *s)
{
	if (s->batch && s->batch_lost)
		return SQLITE_ABORT;    /* to be redone alone anyway */
	return run_st(s, s->batch ? ST_SAVEPOINT : ST_BEGIN);
}

static int tx_commit(struct store *s)
{
	return run_st(s, s->batch ? ST_RELEASE : ST_COMMIT);
}

static int mkdirs(const char *dir)
{
	char *p = strdup(dir);
	struct stat st;

	if (!p)
		return -1;
	for (char *q = p + 1; *q; q++) {
		if (*q != '/')
			continue;
		*q = '\0';
		if (mkdir(p, 0700) < 0 && errno != EEXIST) {
			free(p);
			return -1;
		}
		*q = '/';
	}
	int rc = mkdir(p, 0700);
	free(p);
	if (rc < 0 && errno != EEXIST)
		return -1;
	if (stat(dir, &st) < 0)
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

/* ---- blobs ---- */

/* Compress src into dst (replacing its contents): one zstd frame, or
 * nothing for empty input. */
static int compress_into(struct store *s, struct buf *dst, const void *src,
			 size_t len)
{
	buf_reset(dst);
	if (!len)
		return 0;
	size_t bound = ZSTD_compressBound(len);
	if (buf_reserve(dst, bound) < 0)
		return -1;
	size_t r = ZSTD_compress2(s->cctx, dst->data, bound, src, len);
	if (ZSTD_isError(r)) {
		ZSTD_CCtx_reset(s->cctx, ZSTD_reset_session_only);
		return -1;
	}
	dst->len = r;
	dst->data[r] = '\0';
	return 0;
}

/* Decompress one stored blob into dst (replacing its contents), which must
 * come out at exactly raw_len bytes. Returns 0, 1 if the blob is damaged
 * (*why says how), or -1 if memory runs out. */
static int decode_blob(struct store *s, const void *src, int src_len,
		       int64_t raw_len, struct buf *dst, const char **why)
{
	buf_reset(dst);
	if (raw_len < 0 || raw_len > MAX_RAW_LEN) {
		*why = "impossible length";
		return 1;
	}
	if (raw_len == 0) {
		if (src_len != 0) {
			*why = "blob present for an empty value";
			return 1;
		}
		return 0;
	}
	if (!src || src_len <= 0) {
		*why = "blob missing";
		return 1;
	}
	if (buf_reserve(dst, (size_t)raw_len) < 0)
		return -1;
	size_t r = ZSTD_decompressDCtx(s->dctx, dst->data, (size_t)raw_len, src,
				       (size_t)src_len);
	if (ZSTD_isError(r)) {
		ZSTD_DCtx_reset(s->dctx, ZSTD_reset_session_only);
		*why = "blob does not decompress";
		return 1;
	}
	if (r != (size_t)raw_len) {
		*why = "blob decompresses to the wrong length";
		return 1;
	}
	dst->len = r;
	dst->data[r] = '\0';
	return 0;
}

/* Whether column c of st (the data column) is a blob file's reference. */
static int is_file_ref(sqlite3_stmt *st, int c)
{
	if (sqlite3_column_bytes(st, c) != FILE_REF_LEN)
		return 0;
	const void *p = sqlite3_column_blob(st, c);
	return p && !memcmp(p, FILE_REF, FILE_REF_LEN);
}

/* Decode and check a row's data and log, with columns at the given indexes
 * of st: kind, data_len, log_len, checksum, data, log; a value in its blob
 * file (key's) is read from there. Same returns as decode_blob(). */
static int check_row(struct store *s, sqlite3_stmt *st, const unsigned char *key,
		     int c_kind, int c_dlen, int c_llen, int c_sum, int c_data, int c_log,
		     struct buf *data, struct buf *log, const char **why)
{
	int64_t kind = sqlite3_column_int64(st, c_kind);
	int64_t sum = sqlite3_column_int64(st, c_sum);
	uint64_t seed = 0;
	int file = 0, rc;

	if (kind != STORE_PTX && kind != STORE_CUBIN && kind != STORE_ARTIFACT) {
		*why = "unknown kind";
		return 1;
	}
	if (is_file_ref(st, c_data)) {
		if (!key) {
			*why = "bad key";
			return 1;
		}
		rc = blobs_read(s->blobs, key, sum, sqlite3_column_int64(st, c_dlen), data,
				&seed, why);
		file = 1;
	} else {
		const void *zd = sqlite3_column_blob(st, c_data);
		int zdl = sqlite3_column_bytes(st, c_data);
		rc = decode_blob(s, zd, zdl, sqlite3_column_int64(st, c_dlen), data, why);
	}
	if (rc)
		return rc;
	const void *zl = sqlite3_column_blob(st, c_log);
	int zll = sqlite3_column_bytes(st, c_log);
	rc = decode_blob(s, zl, zll, sqlite3_column_int64(st, c_llen), log, why);
	if (rc)
		return rc;
	if (!file)
		seed = XXH64(data->data ? data->data : "", data->len, 0);
	if ((int64_t)XXH64(log->data ? log->data : "", log->len, seed) != sum) {
		*why = "checksum mismatch";
		return 1;
	}
	return 0;
}

/* ---- blob files whose rows are going ---- */

/* One row of an eviction query (rowid, size, key, checksum, length(data)). */
struct victim {
	int64_t rowid, size;
	struct doomed file;
	int has_file;
};

static void victim_read(sqlite3_stmt *st, struct victim *v)
{
	const void *k = sqlite3_column_blob(st, 2);

	v->rowid = sqlite3_column_int64(st, 0);
	v->size = sqlite3_column_int64(st, 1);
	v->has_file = sqlite3_column_int64(st, 4) == FILE_REF_LEN && k &&
		      sqlite3_column_bytes(st, 2) == 32;
	if (v->has_file) {
		memcpy(v->file.key, k, 32);
		v->file.sum = sqlite3_column_int64(st, 3);
	}
}

/* Note a blob file whose row is deleted in the open transaction, for
 * doomed_commit(). */
static void doomed_add(struct store *s, const struct doomed *d)
{
	if (s->ndoomed == s->doomed_cap) {
		size_t cap = s->doomed_cap ? 2 * s->doomed_cap : 64;
		struct doomed *n = realloc(s->doomed, cap * sizeof *n);
		if (!n)
			return;         /* left for the sweep at the next open */
		s->doomed = n;
		s->doomed_cap = cap;
	}
	s->doomed[s->ndoomed++] = *d;
}

/* The removals are committed: unlink their files. */
/* A removed entry's file, renamed out of its name, for the syncer's
 * thread to unlink. */
struct retired {
	struct blobs *b;
	char name[BLOBS_RETIRED_MAX];
};

static int retired_unlink(void *arg)
{
	struct retired *r = arg;

	blobs_unlink_retired(r->b, r->name);
	return 0;
}

static void retired_free(void *arg, int err)
{
	(void)err;      /* cancelled at a stop: the next open's sweep */
	free(arg);
}

/* Unlink a blob file left under a temporary name (blobs_retire(),
 * blobs_tmp_place()'s replaced): off the loop where a syncer is set. */
static void retired_dispose(struct store *s, const char *name)
{
	struct retired *r = s->sync && !s->unlink_now ? malloc(sizeof *r) : NULL;

	if (r) {
		r->b = s->blobs;
		snprintf(r->name, sizeof r->name, "%s", name);
		if (syncer_sync(s->sync, retired_unlink, retired_free, r) == 0)
			return;
		free(r);
	}
	blobs_unlink_retired(s->blobs, name);
}

/* Unlink key's file for sum: off the loop where a syncer is set. */
static void file_unlink(struct store *s, const unsigned char key[32], int64_t sum)
{
	char name[BLOBS_RETIRED_MAX];

	if (blobs_retire(s->blobs, key, sum, name) == 0)
		retired_dispose(s, name);
}

void store_set_syncer(struct store *s, struct syncer *y)
{
	s->sync = y;
}

void store_set_checkpointer(struct store *s, struct syncer *y)
{
	ckpt_free(s->ckpt);
	s->ckpt = y ? ckpt_new(s->db, s->path, y) : NULL;
}

static void doomed_commit(struct store *s)
{
	for (size_t i = 0; i < s->ndoomed; i++) {
		/* An eviction that made room for a spooled value took the
		 * row of the same value put before, whose file's name the
		 * new one has taken already: that file stays, for its row. */
		if (s->placing && !memcmp(s->doomed[i].key, s->placed.key, 32) &&
		    s->doomed[i].sum == s->placed.sum)
			continue;
		file_unlink(s, s->doomed[i].key, s->doomed[i].sum);
	}
	s->ndoomed = 0;
}

/* They were rolled back: the rows, and so their files, stay. */
static void doomed_forget(struct store *s)
{
	s->ndoomed = 0;
}

/* For blobs_sweep(): whether a row names key's file for sum. */
static int row_names_file(void *arg, const unsigned char key[32], int64_t sum)
{
	struct store *s = arg;
	sqlite3_stmt *st = s->st[ST_OLD_SIZE];
	int named = 1;          /* on a database error, keep the file */

	sqlite3_bind_blob(st, 1, key, 32, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		named = 0;
	else if (rc == SQLITE_ROW)
		named = sqlite3_column_int64(st, 1) == sum &&
			sqlite3_column_int64(st, 2) == FILE_REF_LEN;
	sqlite3_reset(st);
	return named;
}

/* ---- pending hits, and notes of who saw an entry ---- */

static size_t pending_slot(const struct pending *tab, size_t cap, const unsigned char key[32],
			   int64_t user)
{
	uint64_t h;
	memcpy(&h, key, sizeof h); /* a SHA-256: already uniform */
	h ^= (uint64_t)user * 0x9e3779b97f4a7c15ull;
	size_t i = (size_t)h & (cap - 1);
	while (tab[i].used && (tab[i].user != user || memcmp(tab[i].key, key, 32)))
		i = (i + 1) & (cap - 1);
	return i;
}

static int pending_grow(struct pending_tab *t)
{
	size_t cap = t->cap ? t->cap * 2 : 256;
	struct pending *tab = calloc(cap, sizeof *tab);
	if (!tab)
		return -1;
	for (size_t i = 0; i < t->cap; i++)
		if (t->slot[i].used)
			tab[pending_slot(tab, cap, t->slot[i].key, t->slot[i].user)] = t->slot[i];
	free(t->slot);
	t->slot = tab;
	t->cap = cap;
	return 0;
}

/* The slot of (key, user), taken if it was empty; NULL if memory ran out. */
static struct pending *pending_take(struct pending_tab *t, const unsigned char key[32],
				    int64_t user)
{
	if ((t->n + 1) * 2 > t->cap && pending_grow(t) < 0)
		return NULL;
	struct pending *p = &t->slot[pending_slot(t->slot, t->cap, key, user)];
	if (!p->used) {
		memcpy(p->key, key, 32);
		p->user = user;
		p->used = 1;
		p->hits = 0;
		t->n++;
	}
	return p;
}

/* Written: empty again. */
static void pending_clear(struct pending_tab *t)
{
	if (t->n)
		memset(t->slot, 0, t->cap * sizeof *t->slot);
	t->n = 0;
}

static void hit_record(struct store *s, const unsigned char key[32])
{
	int64_t now = store_clock(s);
	/* Out of memory: the hit goes unrecorded, which only ages the entry. */
	struct pending *h = pending_take(&s->hits, key, 0);

	if (!h)
		return;
	h->hits++;
	h->at = now;
}

void store_note_user(struct store *s, const unsigned char key[32], int64_t user)
{
	/* Out of memory: the note is lost, which hides the entry from user
	 * (until it asks again), never shows it to anyone else. */
	struct pending *n = pending_take(&s->notes, key, user);

	if (!n)
		return;
	/* The clock's last value: at or after the row's created, which the
	 * same clock gave, and before any put that replaces it. */
	n->at = s->clock_us;
}

/* ---- open and close ---- */

static int is_corrupt_rc(int rc)
{
	rc &= 0xff;
	return rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT || rc == SQLITE_FORMAT;
}

/* Open path and check it. Returns 0 with s->db set, or -1 with a message in
 * why and *aside set if the file should be moved aside (1: damaged, 2: not
 * our schema version). */
static int db_open(struct store *s, struct buf *why, int *aside)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	char *emsg = NULL;
	int rc;

	*aside = 0;
	rc = sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			     SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	sqlite3_extended_result_codes(db, 1);
	sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);

	/* auto_vacuum takes effect only in a database that has no page yet:
	 * new caches get it, so that a full disk can be given back the pages
	 * of the entries evicted for room (make_room_on_disk()). On any other
	 * file it changes nothing (and fails as the next statement does). */
	sqlite3_exec(db, "PRAGMA auto_vacuum=INCREMENTAL", NULL, NULL, NULL);
	/* The first statement reads the header: a file that is not SQLite
	 * fails here with SQLITE_NOTADB. */
	rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &st, NULL);
	if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *mode = (const char *)sqlite3_column_text(st, 0);
		if (!mode || strcmp(mode, "wal")) {
			buf_printf(why, "cannot switch to WAL mode (journal mode is %s)",
				   mode ? mode : "unknown");
			goto fail_msg;
		}
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (rc != SQLITE_OK)
		goto fail;

	rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const char *r = (const char *)sqlite3_column_text(st, 0);
		if (!r || strcmp(r, "ok")) {
			/* Its report is many lines; the log gets one. */
			buf_printf(why, "quick_check failed: %.200s", r ? r : "out of memory");
			for (char *c = why->data; c && *c; c++)
				if (*c == '\n')
					*c = ' ';
			/* A page the check could not read (out of memory, an I/O
			 * error: "failed to get page", "unable to get the page")
			 * says nothing about the file, whose references were
			 * checked before; nor does a report lost to out of
			 * memory. Those are errors, never a reason to move a
			 * healthy cache aside (tests/unit/test_faults.c). */
			*aside = r && !strstr(r, "failed to get page") &&
				 !strstr(r, "unable to get the page");
			goto fail_msg;
		}
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (rc != SQLITE_OK && rc != SQLITE_DONE)
		goto fail;

	/* secure_delete=FAST: Debian's SQLite zeroes every freed page by
	 * default, so an eviction would write as much as it frees, and on a
	 * full disk could free nothing; FAST zeroes only pages written anyway. */
	rc = sqlite3_exec(db, "PRAGMA synchronous=NORMAL;"
			  "PRAGMA secure_delete=FAST;"
			  "PRAGMA journal_size_limit=67108864;"
			  "PRAGMA cache_size=-16384;"
			  "PRAGMA temp_store=MEMORY;", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	rc = sqlite3_exec(db, schema_sql, NULL, NULL, &emsg);
	if (rc != SQLITE_OK) {
		buf_printf(why, "cannot apply the schema: %s", emsg ? emsg : sqlite3_errstr(rc));
		sqlite3_free(emsg);
		/* SQLITE_ERROR here: tables of another layout (no version). */
		*aside = is_corrupt_rc(rc) ? 1 : (rc & 0xff) == SQLITE_ERROR ? 2 : 0;
		goto fail_msg;
	}

	rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE name = 'schema_version'",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const char *v = (const char *)sqlite3_column_text(st, 0);
		if (!v || strcmp(v, STORE_SCHEMA_VERSION)) {
			buf_printf(why, "schema version %s, this daemon uses %s",
				   v ? v : "?", STORE_SCHEMA_VERSION);
			*aside = 2;
			goto fail_msg;
		}
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (rc != SQLITE_OK)
		goto fail;
	s->db = db;
	return 0;

fail:
	buf_puts(why, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
	if (is_corrupt_rc(rc))
		*aside = 1;
fail_msg:
	sqlite3_finalize(st);
	sqlite3_close(db);
	return -1;
}

/* Rename cache.db (and its -wal and -shm) to <path>.<tag>-<time>[.N]. */
static int move_aside(struct store *s, const char *tag, struct buf *to)
{
	static const char *const sfx[] = { "", "-wal", "-shm" };
	long t = (long)time(NULL);

	for (int n = 0; n < 100; n++) {
		buf_reset(to);
		if (buf_printf(to, "%s.%s-%ld", s->path, tag, t) < 0 ||
		    (n && buf_printf(to, ".%d", n) < 0))
			return -1;
		if (access(to->data, F_OK) < 0 && errno == ENOENT)
			break;
	}
	for (int i = 0; i < 3; i++) {
		char from[4096], dst[4096];
		snprintf(from, sizeof from, "%s%s", s->path, sfx[i]);
		snprintf(dst, sizeof dst, "%s%s", to->data, sfx[i]);
		if (rename(from, dst) < 0 && errno != ENOENT)
			return -1;
	}
	return 0;
}

static int load_totals(struct store *s)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(s->db, "SELECT count(*), total(size), "
				    "(SELECT max(last_used) FROM entries) FROM entries",
				    -1, &st, NULL);
	if (rc != SQLITE_OK)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		s->entries = sqlite3_column_int64(st, 0);
		s->bytes = (int64_t)sqlite3_column_double(st, 1);
		s->clock_us = sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_ROW ? 0 : -1;
}

/* The reserve file's size at most (see the design comment). */
#define RESERVE_BYTES (16 << 20)

/* Allocate <dir>/reserve where it is missing or short (best effort): at
 * most RESERVE_BYTES, and at most share percent of the free space. */
static void reserve_make(struct store *s, int share)
{
	struct statvfs v;
	struct stat st;
	char p[4096];

	snprintf(p, sizeof p, "%s/reserve", s->dir);
	int64_t have = stat(p, &st) == 0 ? (int64_t)st.st_size : 0;
	if (have >= RESERVE_BYTES || statvfs(s->dir, &v) < 0)
		return;
	int64_t want = ((int64_t)v.f_bavail * (int64_t)v.f_frsize + have) / 100 * share;
	if (want > RESERVE_BYTES)
		want = RESERVE_BYTES;
	if (want <= have || want < (256 << 10))
		return;
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (posix_fallocate(fd, 0, (off_t)want) != 0 && ftruncate(fd, (off_t)have) < 0)
		log_debug("cannot size '%s': %s", p, strerror(errno));
	close(fd);
}

static void reserve_release(struct store *s)
{
	char p[4096];

	snprintf(p, sizeof p, "%s/reserve", s->dir);
	unlink(p);
}

struct store *store_open(const char *dir, int64_t max_bytes, struct buf *err)
{
	struct store *s = calloc(1, sizeof *s);
	struct buf why = BUF_INIT, aside_to = BUF_INIT;

	if (!s || !(s->dir = strdup(dir)) ||
	    asprintf(&s->path, "%s/cache.db", dir) < 0) {
		if (s)
			s->path = NULL;
		buf_printf(err, "cannot open cache in '%s': out of memory", dir);
		goto fail;
	}
	s->max_bytes = max_bytes > 0 ? max_bytes : 0;
	if (mkdirs(dir) < 0) {
		buf_printf(err, "cannot create cache directory '%s': %s", dir,
			   strerror(errno));
		goto fail;
	}
	s->cctx = ZSTD_createCCtx();
	s->dctx = ZSTD_createDCtx();
	if (!s->cctx || !s->dctx ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, ZSTD_LEVEL)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_checksumFlag, 0)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_contentSizeFlag, 1))) {
		buf_printf(err, "cannot open cache in '%s': cannot set up zstd", dir);
		goto fail;
	}

	for (int attempt = 0;; attempt++) {
		int aside;
		buf_reset(&why);
		if (db_open(s, &why, &aside) == 0)
			break;
		if (!aside || attempt > 0) {
			buf_printf(err, "cannot open cache database '%s': %s", s->path,
				   why.data ? why.data : "unknown error");
			goto fail;
		}
		if (move_aside(s, aside == 2 ? "old" : "corrupt", &aside_to) < 0) {
			buf_printf(err, "cache database '%s' is unusable (%s) and cannot "
				   "be moved aside: %s", s->path, why.data, strerror(errno));
			goto fail;
		}
		if (aside == 2)
			log_warn("cache database '%s' has another %s; moved it to '%s' "
				 "and starting an empty cache", s->path, why.data,
				 aside_to.data);
		else
			log_err("cache database '%s' is corrupt (%s); moved it to '%s' "
				"and starting an empty cache", s->path, why.data,
				aside_to.data);
	}

	for (int i = 0; i < ST_N; i++) {
		int rc = sqlite3_prepare_v3(s->db, stmt_sql[i], -1,
					    SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL);
		if (rc != SQLITE_OK) {
			buf_printf(err, "cannot open cache database '%s': %s", s->path,
				   sqlite3_errmsg(s->db));
			goto fail;
		}
	}
	if (load_totals(s) < 0) {
		buf_printf(err, "cannot open cache database '%s': %s", s->path,
			   sqlite3_errmsg(s->db));
		goto fail;
	}
	if (!(s->blobs = blobs_open(dir, err)))
		goto fail;
	/* What a kill -9 left between a file and its row's commit, or between
	 * a row's removal and its file's. */
	blobs_sweep(s->blobs, row_names_file, s, NULL);
	reserve_make(s, 25);
	buf_free(&why);
	buf_free(&aside_to);
	return s;

fail:
	buf_free(&why);
	buf_free(&aside_to);
	store_close(s);
	return NULL;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	ckpt_free(s->ckpt);
	if (s->db) {
		if (s->st[ST_N - 1])
			store_flush(s);
		sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE,
					  NULL, NULL);
	}
	for (int i = 0; i < ST_N; i++)
		sqlite3_finalize(s->st[i]);
	sqlite3_close(s->db);
	ZSTD_freeCCtx(s->cctx);
	ZSTD_freeDCtx(s->dctx);
	buf_free(&s->zdata);
	buf_free(&s->zlog);
	free(s->hits.slot);
	free(s->notes.slot);
	hot_free(&s->hot);
	blobs_close(s->blobs);
	free(s->doomed);
	free(s->dir);
	free(s->path);
	free(s);
}

/* ---- the hit and put paths ---- */

/* Delete a row that failed its check; count it and say so. */
static void drop_corrupt(struct store *s, const unsigned char key[32], int64_t size,
			 int64_t sum, int file, const char *why)
{
	char hex[65];

	key_hex(key, hex);
	s->ctr.corrupt_blobs++;
	sqlite3_bind_blob(s->st[ST_DEL_KEY], 1, key, 32, SQLITE_STATIC);
	int rc = run_st(s, ST_DEL_KEY);
	if (rc == SQLITE_DONE && sqlite3_changes(s->db) > 0) {
		s->entries--;
		s->bytes -= size;
		if (file)
			blobs_unlink(s->blobs, key, sum);
		log_warn("cache entry %s is corrupt (%s); deleted it", hex, why);
	} else {
		log_warn("cache entry %s is corrupt (%s) and cannot be deleted: %s",
			 hex, why, sqlite3_errmsg(s->db));
	}
}

void store_warm_up(struct store *s)
{
	static const char line[] = "\tld.global.v4.b32 \t{%r1, %r2, %r3, %r4}, [%rd1];\n"
				   "\t.loc\t1 18 28\n\tadd.rn.f32 \t%r5, %r1, %r2;\n";
	unsigned char zero[32] = { 0 };
	struct buf raw = BUF_INIT, back = BUF_INIT;
	struct store_result r;
	const char *why;

	/* A blob the size of a small kernel's PTX, through zstd both ways. */
	while (raw.len < (32u << 10))
		if (buf_puts(&raw, line) < 0)
			break;
	int packed = compress_into(s, &s->zdata, raw.data, raw.len) == 0;
	if (packed)
		decode_blob(s, s->zdata.data, (int)s->zdata.len, (int64_t)raw.len, &back, &why);
	/* A lookup (a miss: no key is all zeroes), then a put of that blob
	 * in a transaction that is rolled back: the statements, pages and
	 * locks a put goes through, and nothing committed. */
	if (store_get(s, zero, &r) == 1)
		store_result_free(&r);
	if (sqlite3_step(s->st[ST_BEGIN]) == SQLITE_DONE) {
		sqlite3_stmt *put = s->st[ST_PUT];
		sqlite3_reset(s->st[ST_BEGIN]);
		sqlite3_bind_blob(s->st[ST_OLD_SIZE], 1, zero, 32, SQLITE_STATIC);
		sqlite3_step(s->st[ST_OLD_SIZE]);
		sqlite3_reset(s->st[ST_OLD_SIZE]);
		if (packed) {
			sqlite3_bind_blob(put, 1, zero, 32, SQLITE_STATIC);
			sqlite3_bind_int(put, 2, STORE_PTX);
			sqlite3_bind_int(put, 3, 0);
			sqlite3_bind_text(put, 4, "sm_90a", -1, SQLITE_STATIC);
			sqlite3_bind_int64(put, 5, store_clock(s));
			sqlite3_bind_int64(put, 6, 0);
			sqlite3_bind_int64(put, 7, (int64_t)s->zdata.len);
			sqlite3_bind_int64(put, 8, (int64_t)raw.len);
			sqlite3_bind_int64(put, 9, 0);
			sqlite3_bind_int64(put, 10, 0);
			sqlite3_bind_text(put, 11, "{}", -1, SQLITE_STATIC);
			sqlite3_bind_blob(put, 12, s->zdata.data, (int)s->zdata.len, SQLITE_STATIC);
			sqlite3_bind_blob(put, 13, "", 0, SQLITE_STATIC);
			sqlite3_bind_int64(put, 14, -1);
			sqlite3_bind_int(put, 15, 0);
			sqlite3_bind_int64(put, 16, -1);
			sqlite3_bind_text(put, 17, "", 0, SQLITE_STATIC);
			sqlite3_step(put);
			sqlite3_reset(put);
			sqlite3_clear_bindings(put);
		}
		sqlite3_step(s->st[ST_ROLLBACK]);
		sqlite3_reset(s->st[ST_ROLLBACK]);
	} else {
		sqlite3_reset(s->st[ST_BEGIN]);
	}
	buf_reset(&s->zdata);
	buf_free(&raw);
	buf_free(&back);
}

/* A value in its blob file, for store_get_file(): the file opened and
 * checked, the log decoded. 0, 1 if damaged (*why), -1 out of memory. */
static int open_row_file(struct store *s, sqlite3_stmt *st, const unsigned char key[32],
			 struct store_result *out, int *fd, const char **why)
{
	int64_t sum = sqlite3_column_int64(st, 4);
	uint64_t hash;

	if (sqlite3_column_int64(st, 0) != STORE_ARTIFACT && sqlite3_column_int64(st, 0) != STORE_PTX &&
	    sqlite3_column_int64(st, 0) != STORE_CUBIN) {
		*why = "unknown kind";
		return 1;
	}
	int rc = decode_blob(s, sqlite3_column_blob(st, 7), sqlite3_column_bytes(st, 7),
			     sqlite3_column_int64(st, 3), &out->log, why);
	if (rc)
		return rc;
	*fd = blobs_open_file(s->blobs, key, sum, sqlite3_column_int64(st, 2), &hash, why);
	if (*fd < 0) {
		rc = *fd == -2 ? -1 : 1;        /* -2: the file is not at fault */
		*fd = -1;
		return rc;
	}
	if ((int64_t)XXH64(out->log.data ? out->log.data : "", out->log.len, hash) != sum) {
		*why = "checksum mismatch";
		close(*fd);
		*fd = -1;
		return 1;
	}
	return 0;
}

static int lookup(struct store *s, const unsigned char key[32], struct store_result *out,
		  int record, int lend, int *fd)
{
	sqlite3_stmt *st = s->st[ST_GET];
	const char *why = NULL;
	int from_hot = 0, bad;

	memset(out, 0, sizeof *out);
	if (fd)
		*fd = -1;
	sqlite3_bind_blob(st, 1, key, 32, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE) {
		sqlite3_reset(st);
		return 0;
	}
	if (rc != SQLITE_ROW) {
		log_warn("cache lookup failed in '%s': %s", s->path, sqlite3_errmsg(s->db));
		sqlite3_reset(st);
		return -1;
	}
	int64_t sum = sqlite3_column_int64(st, 4), dlen = sqlite3_column_int64(st, 2),
		llen = sqlite3_column_int64(st, 3);
	int file = sqlite3_column_int64(st, 10) == FILE_REF_LEN && is_file_ref(st, 6);
	if (file && fd) {
		/* Sent from the file itself: not from, nor into, memory. */
		bad = open_row_file(s, st, key, out, fd, &why);
	} else {
		/* Lent, or copied: the same slot either way, looked at once. */
		from_hot = lend ? (out->lent = hot_lend(&s->hot, key, sum, dlen, llen, &out->data,
							&out->log)) != NULL :
			   hot_get(&s->hot, key, sum, dlen, llen, &out->data, &out->log);
		bad = from_hot ? (from_hot < 0 ? -1 : 0) :
		      check_row(s, st, key, 0, 2, 3, 4, 6, 7, &out->data, &out->log, &why);
		if (!bad && !from_hot)
			hot_keep(&s->hot, key, sum, &out->data, &out->log);
	}
	out->kind = (enum store_kind)sqlite3_column_int(st, 0);
	out->status = sqlite3_column_int(st, 1);
	out->producer = sqlite3_column_int64(st, 8);
	out->trust = sqlite3_column_int(st, 9);
	out->data_len = (size_t)dlen;
	int64_t size = sqlite3_column_int64(st, 5);
	sqlite3_reset(st);
	if (bad) {
		store_result_free(out);
		memset(out, 0, sizeof *out);
		if (bad < 0) {
			log_warn("cache lookup in '%s': %s", s->path, why ? why : "out of memory");
			return -1;
		}
		drop_corrupt(s, key, size, sum, file, why);
		return 0;
	}
	if (record)
		hit_record(s, key);
	return 1;
}

int store_get(struct store *s, const unsigned char key[32], struct store_result *out)
{
	return lookup(s, key, out, 1, 0, NULL);
}

int store_get_lent(struct store *s, const unsigned char key[32], struct store_result *out)
{
	return lookup(s, key, out, 1, 1, NULL);
}

int store_get_file(struct store *s, const unsigned char key[32], struct store_result *out,
		   int *fd)
{
	return lookup(s, key, out, 1, 0, fd);
}

void store_gets_together(struct store *s, int on)
{
	blobs_together(s->blobs, on);
}

int store_peek(struct store *s, const unsigned char key[32], struct store_result *out)
{
	return lookup(s, key, out, 0, 0, NULL);
}

int store_peek_file(struct store *s, const unsigned char key[32], struct store_result *out,
		    int *fd)
{
	return lookup(s, key, out, 0, 0, fd);
}

int store_set_trust(struct store *s, const unsigned char key[32], int trust)
{
	sqlite3_stmt *st = s->st[ST_TRUST];
	sqlite3_bind_blob(st, 1, key, 32, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, trust);
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	if (rc != SQLITE_DONE) {
		log_warn("cannot mark an entry in '%s': %s", s->path, sqlite3_errmsg(s->db));
		return -1;
	}
	return 0;
}

/*
 * Inside store_put()'s transaction: delete the least recently used
 * artifacts of scope (never key itself, which the put replaces) until
 * size more bytes fit in its share. What was deleted is returned in
 * *removed and *removed_bytes, applied to the totals once committed.
 */
static int make_room_in_scope(struct store *s, const unsigned char key[32], int64_t scope,
			      int64_t size, int64_t *removed, int64_t *removed_bytes)
{
	sqlite3_stmt *st = s->st[ST_SCOPE_BYTES];
	int64_t have = 0;
	int rc;

	/* No scope holds more than the whole cache: nothing to count. */
	if (s->bytes + size <= s->artifact_share)
		return SQLITE_DONE;
	sqlite3_bind_int64(st, 1, scope);
	sqlite3_bind_blob(st, 2, key, 32, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		have = (int64_t)sqlite3_column_double(st, 0);
		rc = SQLITE_DONE;
	}
	sqlite3_reset(st);
	while (rc == SQLITE_DONE && have + size > s->artifact_share) {
		struct victim v[EVICT_BATCH];
		int n = 0;
		st = s->st[ST_SCOPE_LRU];
		sqlite3_bind_int64(st, 1, scope);
		sqlite3_bind_blob(st, 2, key, 32, SQLITE_STATIC);
		while (n < EVICT_BATCH && (rc = sqlite3_step(st)) == SQLITE_ROW)
			victim_read(st, &v[n++]);
		sqlite3_reset(st);
		if (rc != SQLITE_DONE && rc != SQLITE_ROW)
			return rc;
		rc = SQLITE_DONE;
		if (!n)
			break;
		for (int i = 0; i < n && have + size > s->artifact_share; i++) {
			sqlite3_bind_int64(s->st[ST_DEL_ROWID], 1, v[i].rowid);
			if ((rc = run_st(s, ST_DEL_ROWID)) != SQLITE_DONE)
				return rc;
			if (v[i].has_file)
				doomed_add(s, &v[i].file);
			have -= v[i].size;
			*removed += 1;
			*removed_bytes += v[i].size;
		}
	}
	return rc;
}

/*
 * After a put failed with SQLITE_FULL (rolled back): make room on the disk
 * for an entry of size bytes from the cache's own oldest entries (see the
 * design comment). Checkpoint failures are ignored: the retry says whether
 * it was enough.
 */
static void make_room_on_disk(struct store *s, int64_t size)
{
	int64_t want = 2 * size + RESERVE_BYTES + (1 << 20), tenth = s->bytes / 10;

	reserve_release(s);
	ckpt_hold(s->ckpt);     /* the thread's checkpoint first */
	sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	s->unlink_now = 1;      /* the retry needs the room now */
	int n = store_evict_lru(s, s->bytes - (want > tenth ? want : tenth));
	s->unlink_now = 0;
	sqlite3_exec(s->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
	sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	ckpt_release(s->ckpt);
	reserve_make(s, 50);    /* for the next time, from the room just made */
	s->ctr.full_retries++;
	log_warn("disk full under '%s': evicted %d of the oldest entries to store a new one "
		 "(%lld bytes in %lld entries remain)", s->path, n < 0 ? 0 : n,
		 (long long)s->bytes, (long long)s->entries);
}

/* After a put that wrote key's file for sum failed: remove the file
 * unless the row that stays names it (the same value put again). */
static void put_undo_file(struct store *s, const unsigned char key[32], int64_t sum)
{
	if (!row_names_file(s, key, sum))
		blobs_unlink(s->blobs, key, sum);
}

/* A value that arrives in pieces (store.h): its temporary blob file and
 * the hash of what it holds so far. */
struct store_spool {
	struct store *s;
	struct blob_tmp *tmp;   /* NULL once it failed or was placed */
	XXH64_state_t *hash;    /* of the bytes written */
	size_t len, got;
	int retried;            /* the disk was full once: room was made */
};

/* store_put(), for a value in e->data or, with sp, in sp's file. */
static int put_entry(struct store *s, const unsigned char key[32], const struct store_entry *e,
		     struct store_spool *sp, struct buf *err)
{
	int retried = 0, file = 0, wrote = 0;
	size_t doomed_mark = s->ndoomed;
	int64_t sum = 0;
	const char *components = e->components ? e->components : "{}";
	const char *arch = e->arch ? e->arch : "";
	const char *log = e->log ? e->log : "";
	size_t log_len = e->log ? e->log_len : 0;
	struct buf ferr = BUF_INIT;
	char msg[512], replaced[BLOBS_RETIRED_MAX] = "";
	int rc;

	if (e->kind != STORE_PTX && e->kind != STORE_CUBIN && e->kind != STORE_ARTIFACT) {
		snprintf(msg, sizeof msg, "unknown entry kind %d", (int)e->kind);
		goto fail_nodb;
	}
	if ((int64_t)e->data_len > MAX_RAW_LEN || (int64_t)log_len > MAX_RAW_LEN) {
		snprintf(msg, sizeof msg, "entry too large (%zu bytes)", e->data_len);
		goto fail_nodb;
	}
	/* A large value goes to its file raw; the row holds its reference. */
	file = e->data_len >= BLOB_MIN || sp;
	if (file)
		buf_reset(&s->zdata);
	if ((!file && compress_into(s, &s->zdata, e->data, e->data_len) < 0) ||
	    compress_into(s, &s->zlog, log, log_len) < 0) {
		snprintf(msg, sizeof msg, "cannot compress (out of memory)");
		goto fail_nodb;
	}
	/* entry_checksum(), the value's hash taken as it was spooled. */
	sum = sp ? (int64_t)XXH64(log, log_len, XXH64_digest(sp->hash))
		 : entry_checksum(e->data, e->data_len, log, log_len);
	int64_t size = (int64_t)((file ? e->data_len : s->zdata.len) + s->zlog.len +
				 strlen(components) + strlen(arch)) + ROW_OVERHEAD;
	int64_t now = store_clock(s);
	int64_t old_size = 0, old_sum = 0, shared_out = 0, shared_out_bytes = 0;
	int existed = 0, old_file = 0;

	if (e->kind == STORE_ARTIFACT && s->artifact_share && size > s->artifact_share) {
		snprintf(msg, sizeof msg, "a %zu-byte value takes more than a scope's "
			 "share of the cache (artifact-share, %lld bytes)", e->data_len,
			 (long long)s->artifact_share);
		goto fail_nodb;
	}
again:
	old_size = old_sum = shared_out = shared_out_bytes = 0;
	existed = old_file = 0;
	/* The file is durable before the row that names it is committed. */
	if (file && !wrote && sp) {
		/* Its bytes are on disk already, and nowhere else: placed once,
		 * kept through a retry (doomed_commit() spares it). */
		struct blob_tmp *t = sp->tmp;
		sp->tmp = NULL;
		buf_reset(&ferr);
		if (blobs_tmp_place(t, key, sum, replaced, &ferr) < 0) {
			snprintf(msg, sizeof msg, "%s", ferr.data ? ferr.data : "cannot write");
			goto fail_nodb;
		}
		wrote = 1;
		memcpy(s->placed.key, key, 32);
		s->placed.sum = sum;
		s->placing = 1;
	} else if (file && !wrote) {
		buf_reset(&ferr);
		if (blobs_write(s->blobs, key, sum, e->data, e->data_len, replaced, &ferr) < 0) {
			int full = errno == ENOSPC || errno == EDQUOT;
			struct statvfs v;
			snprintf(msg, sizeof msg, "%s", ferr.data ? ferr.data : "cannot write");
			/* A value the whole cache's room could not hold is refused
			 * without emptying the cache for nothing. */
			if (full && statvfs(s->dir, &v) == 0 &&
			    (int64_t)v.f_bavail * (int64_t)v.f_frsize + s->bytes < size)
				full = 0;
			/* In a batch: the whole batch is redone put by put,
			 * with this retry. */
			s->batch_lost |= s->batch && full;
			if (full && !retried && !s->batch) {
				retried = 1;
				make_room_on_disk(s, size);
				goto again;
			}
			goto fail_nodb;
		}
		wrote = 1;
	}
	if (replaced[0]) {      /* the same value's file before this one */
		retired_dispose(s, replaced);
		replaced[0] = '\0';
	}
	doomed_mark = s->ndoomed;
	rc = tx_begin(s);
	if (rc != SQLITE_DONE)
		goto fail;
	if (e->kind == STORE_ARTIFACT && s->artifact_share) {
		rc = make_room_in_scope(s, key, e->scope, size, &shared_out, &shared_out_bytes);
		if (rc != SQLITE_DONE)
			goto fail;
	}

	sqlite3_stmt *st = s->st[ST_OLD_SIZE];
	sqlite3_bind_blob(st, 1, key, 32, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		existed = 1;
		old_size = sqlite3_column_int64(st, 0);
		old_sum = sqlite3_column_int64(st, 1);
		old_file = sqlite3_column_int64(st, 2) == FILE_REF_LEN;
		rc = SQLITE_DONE;
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		goto fail;

	st = s->st[ST_PUT];
	sqlite3_bind_blob(st, 1, key, 32, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, (int)e->kind);
	sqlite3_bind_int(st, 3, e->status);
	sqlite3_bind_text(st, 4, arch, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, now);
	sqlite3_bind_int64(st, 6, e->compile_us);
	sqlite3_bind_int64(st, 7, size);
	sqlite3_bind_int64(st, 8, (int64_t)e->data_len);
	sqlite3_bind_int64(st, 9, (int64_t)log_len);
	sqlite3_bind_int64(st, 10, sum);
	sqlite3_bind_text(st, 11, components, -1, SQLITE_STATIC);
	/* zeroblob(0) rather than NULL for an empty value: the column is NOT NULL. */
	if (file)
		sqlite3_bind_blob(st, 12, FILE_REF, FILE_REF_LEN, SQLITE_STATIC);
	else
		sqlite3_bind_blob(st, 12, s->zdata.len ? s->zdata.data : "", (int)s->zdata.len,
				  SQLITE_STATIC);
	sqlite3_bind_blob(st, 13, s->zlog.len ? s->zlog.data : "", (int)s->zlog.len,
			  SQLITE_STATIC);
	sqlite3_bind_int64(st, 14, e->producer);
	sqlite3_bind_int(st, 15, e->trust);
	sqlite3_bind_int64(st, 16, e->kind == STORE_ARTIFACT ? e->scope : -1);
	sqlite3_bind_text(st, 17, e->ns ? e->ns : "", -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE) {
		snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(s->db));
		sqlite3_reset(st);
		goto fail_msg;
	}
	sqlite3_reset(st);

	rc = tx_commit(s);
	if (rc != SQLITE_DONE)
		goto fail;

	/* Committed: the files of the rows it replaced or pushed out go. */
	if (old_file && (!file || old_sum != sum)) {
		struct doomed d = { .sum = old_sum };
		memcpy(d.key, key, 32);
		doomed_add(s, &d);
	}
	if (!s->batch)          /* else at the batch's commit */
		doomed_commit(s);
	s->placing = 0;
	buf_free(&ferr);
	if (existed) {
		s->bytes += size - old_size;
	} else {
		s->entries++;
		s->bytes += size;
	}
	s->entries -= shared_out;
	s->bytes -= shared_out_bytes;
	s->ctr.share_evictions += shared_out;
	if (s->max_bytes && s->bytes > s->max_bytes && !s->batch)
		store_evict_lru(s, s->max_bytes - s->max_bytes / 10);
	return 0;

fail:
	snprintf(msg, sizeof msg, "%s", sqlite3_errcode(s->db) == rc ?
		 sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
fail_msg:
	rollback(s);
	s->ndoomed = doomed_mark;       /* its removals are undone; a batch's earlier puts' stay */
	/* In a batch: the whole batch is redone put by put, with this retry. */
	s->batch_lost |= s->batch && (rc & 0xff) == SQLITE_FULL;
	if ((rc & 0xff) == SQLITE_FULL && !retried && !s->batch) {
		retried = 1;
		make_room_on_disk(s, size);
		/* The eviction may have taken the key's old row, and with it a
		 * file of the same name (the same value put again): write it
		 * once more (a spooled one was spared). */
		if (wrote && !sp) {
			put_undo_file(s, key, sum);
			wrote = 0;
		}
		goto again;
	}
fail_nodb:
	s->placing = 0;
	if (wrote)
		put_undo_file(s, key, sum);
	buf_free(&ferr);
	s->ctr.write_errors++;
	if (err)
		buf_printf(err, "cannot store entry in '%s': %s", s->path, msg);
	log_warn("cannot store entry in '%s': %s", s->path, msg);
	return -1;
}

int store_put(struct store *s, const unsigned char key[32], const struct store_entry *e,
	      struct buf *err)
{
	return put_entry(s, key, e, NULL, err);
}

/* A spool's failure: counted and logged as a put's, its file removed. */
static void spool_fail(struct store_spool *sp, const char *msg, struct buf *err)
{
	struct store *s = sp->s;

	blobs_tmp_drop(sp->tmp);
	sp->tmp = NULL;
	s->ctr.write_errors++;
	if (err)
		buf_printf(err, "cannot store entry in '%s': %s", s->path, msg);
	log_warn("cannot store entry in '%s': %s", s->path, msg);
}

struct store_spool *store_spool_open(struct store *s, enum store_kind kind, size_t len,
				     struct buf *err)
{
	struct store_spool *sp = calloc(1, sizeof *sp);
	struct buf ferr = BUF_INIT;
	char msg[512];

	if (!sp || !(sp->hash = XXH64_createState())) {
		free(sp);
		buf_printf(err, "cannot store entry in '%s': out of memory", s->path);
		return NULL;
	}
	sp->s = s;
	sp->len = len;
	XXH64_reset(sp->hash, 0);
	/* store_put()'s refusals that need no byte of the value, before any
	 * byte is written. */
	if ((int64_t)len > MAX_RAW_LEN || len < BLOB_MIN) {
		snprintf(msg, sizeof msg, "a spooled value of %zu bytes (not %zu to %lld)", len,
			 BLOB_MIN, (long long)MAX_RAW_LEN);
		goto fail;
	}
	if (kind == STORE_ARTIFACT && s->artifact_share &&
	    (int64_t)len + ROW_OVERHEAD > s->artifact_share) {
		snprintf(msg, sizeof msg, "a %zu-byte value takes more than a scope's "
			 "share of the cache (artifact-share, %lld bytes)", len,
			 (long long)s->artifact_share);
		goto fail;
	}
	if (!(sp->tmp = blobs_tmp_new(s->blobs, "spool", &ferr))) {
		snprintf(msg, sizeof msg, "%s", ferr.data ? ferr.data : "cannot create a file");
		goto fail;
	}
	buf_free(&ferr);
	return sp;
fail:
	spool_fail(sp, msg, err);
	buf_free(&ferr);
	store_spool_abort(sp);
	return NULL;
}

int store_spool_write(struct store_spool *sp, const void *data, size_t n, struct buf *err)
{
	struct store *s = sp->s;
	struct buf ferr = BUF_INIT;
	const char *p = data;
	char msg[512];

	if (!sp->tmp)
		return -1;
	if (n > sp->len - sp->got) {
		snprintf(msg, sizeof msg, "more bytes than the value's %zu", sp->len);
		goto fail;
	}
	XXH64_update(sp->hash, p, n);
	for (;;) {
		size_t done = 0;
		int rc = blobs_tmp_write(sp->tmp, p, n, &done, &ferr);
		sp->got += done;
		/* At its last byte all of it is written, under the same
		 * full-disk rule as the rest. */
		if (rc == 0 && sp->got == sp->len)
			rc = blobs_tmp_flush(sp->tmp, &ferr);
		if (rc == 0)
			break;
		int full = errno == ENOSPC || errno == EDQUOT;
		struct statvfs v;
		p += done;
		n -= done;
		snprintf(msg, sizeof msg, "%s", ferr.data ? ferr.data : "cannot write");
		buf_reset(&ferr);
		/* As store_put(): the oldest entries make room once, unless
		 * the whole cache's room could not hold the value. */
		if (full && statvfs(s->dir, &v) == 0 &&
		    (int64_t)v.f_bavail * (int64_t)v.f_frsize + s->bytes + (int64_t)sp->got <
		    (int64_t)sp->len)
			full = 0;
		if (!full || sp->retried || s->batch)
			goto fail;
		sp->retried = 1;
		make_room_on_disk(s, (int64_t)sp->len + ROW_OVERHEAD);
	}
	buf_free(&ferr);
	return 0;
fail:
	buf_free(&ferr);
	spool_fail(sp, msg, err);
	return -1;
}

int store_spool_sync(struct store_spool *sp)
{
	/* At its last byte store_spool_write() wrote all it had staged. */
	return sp->tmp && sp->got == sp->len ? blobs_tmp_sync(sp->tmp) : EINVAL;
}

int store_put_spool(struct store *s, const unsigned char key[32], const struct store_entry *e,
		    struct store_spool *sp, struct buf *err)
{
	int rc = -1;

	if (!sp->tmp) {
		buf_printf(err, "cannot store entry in '%s': its value could not be written",
			   s->path);
	} else if (sp->got != sp->len || e->data_len != sp->len || (e->log && e->log_len)) {
		spool_fail(sp, "a spooled value that is not whole", err);
	} else {
		rc = put_entry(s, key, e, sp, err);
	}
	store_spool_abort(sp);
	return rc;
}

void store_spool_abort(struct store_spool *sp)
{
	if (!sp)
		return;
	blobs_tmp_drop(sp->tmp);
	XXH64_freeState(sp->hash);
	free(sp);
}

int store_batch_begin(struct store *s)
{
	if (s->batch)
		return -1;
	if (run_st(s, ST_BEGIN) != SQLITE_DONE) {
		rollback(s);
		return -1;
	}
	s->batch = 1;
	s->batch_lost = 0;
	s->batch_entries = s->entries;
	s->batch_bytes = s->bytes;
	s->batch_ctr = s->ctr;
	return 0;
}

int store_batch_commit(struct store *s, struct buf *err)
{
	int rc = SQLITE_DONE;

	if (!s->batch)
		return -1;
	s->batch = 0;
	if (!s->batch_lost && (rc = run_st(s, ST_COMMIT)) == SQLITE_DONE) {
		doomed_commit(s);
		if (s->max_bytes && s->bytes > s->max_bytes)
			store_evict_lru(s, s->max_bytes - s->max_bytes / 10);
		return 0;
	}
	if (err)
		buf_printf(err, "cannot store entries in '%s': %s", s->path,
			   s->batch_lost ? "a put failed the transaction" :
			   sqlite3_errcode(s->db) == rc ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
	rollback(s);
	doomed_forget(s);
	s->batch_lost = 0;
	s->entries = s->batch_entries;
	s->bytes = s->batch_bytes;
	s->ctr = s->batch_ctr;
	return -1;
}

void store_flush(struct store *s)
{
	if (!s || (!s->hits.n && !s->notes.n))
		return;
	sqlite3_stmt *st = s->st[ST_HIT];
	int rc = run_st(s, ST_BEGIN);
	for (size_t i = 0; rc == SQLITE_DONE && i < s->hits.cap; i++) {
		struct pending *h = &s->hits.slot[i];
		if (!h->used)
			continue;
		sqlite3_bind_blob(st, 1, h->key, 32, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, h->hits);
		sqlite3_bind_int64(st, 3, h->at);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
	}
	st = s->st[ST_NOTE];
	for (size_t i = 0; rc == SQLITE_DONE && i < s->notes.cap; i++) {
		struct pending *n = &s->notes.slot[i];
		if (!n->used)
			continue;
		sqlite3_bind_blob(st, 1, n->key, 32, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, n->user);
		sqlite3_bind_int64(st, 3, n->at);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
	}
	if (rc == SQLITE_DONE)
		rc = run_st(s, ST_COMMIT);
	if (rc != SQLITE_DONE) {
		/* Keep the pending hits and notes; the next flush tries again. */
		log_warn("cannot record cache hits in '%s': %s", s->path,
			 sqlite3_errmsg(s->db));
		rollback(s);
		return;
	}
	pending_clear(&s->hits);
	pending_clear(&s->notes);
}

void store_totals(struct store *s, int64_t *entries, int64_t *bytes)
{
	if (entries)
		*entries = s->entries;
	if (bytes)
		*bytes = s->bytes;
}

void store_kind_totals(struct store *s, enum store_kind kind, int64_t *entries,
		       int64_t *bytes)
{
	sqlite3_stmt *st;

	*entries = *bytes = 0;
	if (sqlite3_prepare_v2(s->db, "SELECT count(*), total(size) FROM entries WHERE kind = ?1",
			       -1, &st, NULL) != SQLITE_OK)
		return;
	sqlite3_bind_int(st, 1, (int)kind);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*entries = sqlite3_column_int64(st, 0);
		*bytes = (int64_t)sqlite3_column_double(st, 1);
	}
	sqlite3_finalize(st);
}

void store_set_artifact_share(struct store *s, int64_t bytes)
{
	s->artifact_share = bytes > 0 ? bytes : 0;
}

void store_counters(struct store *s, struct store_counters *c)
{
	struct ckpt_counters k;

	*c = s->ctr;
	ckpt_counters(s->ckpt, &k);
	c->checkpoints = k.runs;
	c->checkpoint_errors = k.errors;
	c->checkpointing = k.running;
}

void store_result_free(struct store_result *r)
{
	if (!r)
		return;
	if (r->lent) {
		hot_return(r->lent);
		r->lent = NULL;
		r->data = r->log = (struct buf)BUF_INIT;
		return;
	}
	buf_free(&r->data);
	buf_free(&r->log);
}

int store_evict_lru(struct store *s, int64_t target_bytes)
{
	struct victim v[EVICT_BATCH];
	int64_t bytes, removed = 0;
	int rc;

	if (target_bytes < 0)
		target_bytes = 0;
	store_flush(s); /* so recent hits count as recent */
	if (s->bytes <= target_bytes)
		return 0;
	bytes = s->bytes;
	rc = run_st(s, ST_BEGIN);
	while (rc == SQLITE_DONE && bytes > target_bytes) {
		sqlite3_stmt *st = s->st[ST_LRU];
		int n = 0;
		while (n < EVICT_BATCH && (rc = sqlite3_step(st)) == SQLITE_ROW)
			victim_read(st, &v[n++]);
		sqlite3_reset(st);
		if (rc != SQLITE_DONE && rc != SQLITE_ROW)
			break;
		rc = SQLITE_DONE;
		if (!n)
			break;
		for (int i = 0; i < n && bytes > target_bytes; i++) {
			sqlite3_bind_int64(s->st[ST_DEL_ROWID], 1, v[i].rowid);
			rc = run_st(s, ST_DEL_ROWID);
			if (rc != SQLITE_DONE)
				break;
			if (v[i].has_file)
				doomed_add(s, &v[i].file);
			bytes -= v[i].size;
			removed++;
		}
	}
	if (rc == SQLITE_DONE)
		rc = run_st(s, ST_COMMIT);
	if (rc != SQLITE_DONE) {
		log_warn("cannot evict from cache '%s': %s", s->path, sqlite3_errmsg(s->db));
		rollback(s);
		doomed_forget(s);
		return -1;
	}
	/* Committed: only now do the files go. */
	doomed_commit(s);
	s->entries -= removed;
	s->bytes = s->entries ? bytes : 0;
	s->ctr.evictions += removed;
	if (removed)
		log_info("evicted %lld cache entries; %lld bytes in %lld entries remain",
			 (long long)removed, (long long)s->bytes, (long long)s->entries);
	return (int)removed;
}

/* ---- maintenance ---- */

static const char *kind_name(int64_t kind)
{
	return kind == STORE_PTX ? "ptx" : kind == STORE_CUBIN ? "cubin" :
	       kind == STORE_ARTIFACT ? "artifact" : "unknown";
}

/* Columns shared by show and list, in this order. */
#define ROW_COLS "key, kind, status, arch, data_len, size, hits, created, " \
		 "last_used, compile_us, components"

/* Append the metadata object of the row st is on (ROW_COLS first), without
 * its closing brace. */
static int row_json(sqlite3_stmt *st, struct buf *j)
{
	char hex[65];
	const void *k = sqlite3_column_blob(st, 0);
	unsigned char key[32] = { 0 };
	struct flat_field f[FLAT_MAX_FIELDS];

	if (k && sqlite3_column_bytes(st, 0) == 32)
		memcpy(key, k, 32);
	key_hex(key, hex);
	const char *arch = (const char *)sqlite3_column_text(st, 3);
	const char *comp = (const char *)sqlite3_column_text(st, 10);
	if (!arch)
		arch = "";
	if (!comp)
		comp = "";
	if (buf_printf(j, "{\"key\":\"%s\",\"kind\":\"%s\",\"status\":%lld,\"arch\":",
		       hex, kind_name(sqlite3_column_int64(st, 1)),
		       (long long)sqlite3_column_int64(st, 2)) < 0 ||
	    buf_json_str(j, arch, strlen(arch)) < 0 ||
	    buf_printf(j, ",\"data_len\":%lld,\"stored_bytes\":%lld,\"hits\":%lld,"
		       "\"created\":%lld,\"last_used\":%lld,\"compile_us\":%lld,"
		       "\"components\":",
		       (long long)sqlite3_column_int64(st, 4),
		       (long long)sqlite3_column_int64(st, 5),
		       (long long)sqlite3_column_int64(st, 6),
		       (long long)(sqlite3_column_int64(st, 7) / 1000000),
		       (long long)(sqlite3_column_int64(st, 8) / 1000000),
		       (long long)sqlite3_column_int64(st, 9)) < 0)
		return -1;
	/* Embed the components as an object when they are ours; anything else
	 * (a damaged row) as a string, so the output is always valid JSON. */
	if (flat_parse(comp, f, FLAT_MAX_FIELDS) >= 0)
		return buf_puts(j, comp);
	return buf_json_str(j, comp, strlen(comp));
}

/* The WHERE clause of a filter, with ?1..?4 and ?6..?8 bound by
 * bind_filter() (?5 and ?9 are left to the query). */
#define FILTER_WHERE " WHERE (?1 = 0 OR kind = ?1) AND (?2 IS NULL OR arch = ?2)" \
		     " AND (?3 = 0 OR last_used < ?3) AND (?4 = 0 OR data_len >= ?4)" \
		     " AND (?6 IS NULL OR (kind = 3 AND ns = ?6))" \
		     " AND (?7 IS NULL OR kind != 3 OR scope = ?7)" \
		     " AND (?8 IS NULL OR EXISTS (SELECT 1 FROM entry_users u" \
		     " WHERE u.key = entries.key AND u.identity = ?8))"

static void bind_filter(struct store *s, sqlite3_stmt *st, const struct store_filter *f)
{
	static const struct store_filter all = { 0 };

	if (!f)
		f = &all;
	sqlite3_bind_int(st, 1, (int)f->kind);
	if (f->arch && *f->arch)
		sqlite3_bind_text(st, 2, f->arch, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 2);
	sqlite3_bind_int64(st, 3, f->older_than_s > 0 ?
			   store_clock(s) - f->older_than_s * 1000000 : 0);
	sqlite3_bind_int64(st, 4, f->min_bytes);
	if (f->ns && *f->ns)
		sqlite3_bind_text(st, 6, f->ns, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 6);
	if (f->scoped)
		sqlite3_bind_int64(st, 7, f->scope);
	else
		sqlite3_bind_null(st, 7);
	if (f->own)
		sqlite3_bind_int64(st, 8, f->user);
	else
		sqlite3_bind_null(st, 8);
}

int store_show(struct store *s, const unsigned char key[32], const struct store_filter *f,
	       struct buf *json)
{
	sqlite3_stmt *st;
	struct buf data = BUF_INIT, log = BUF_INIT;
	const char *why = NULL;
	int ret = -1;

	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT " ROW_COLS ", log_len, checksum, data, log "
			       "FROM entries" FILTER_WHERE " AND key = ?9", -1, &st,
			       NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	sqlite3_bind_blob(st, 9, key, 32, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE) {
		ret = 0;
		goto out;
	}
	if (rc != SQLITE_ROW || row_json(st, json) < 0)
		goto out;
	if (sqlite3_column_int64(st, 2) != 0) {
		int bad = check_row(s, st, key, 1, 4, 11, 12, 13, 14, &data, &log, &why);
		if (bad < 0)
			goto out;
		if (bad) {
			if (buf_puts(json, ",\"log_error\":") < 0 ||
			    buf_json_str(json, why, strlen(why)) < 0)
				goto out;
		} else if (buf_puts(json, ",\"log\":") < 0 ||
			   buf_json_str(json, log.data ? log.data : "", log.len) < 0) {
			goto out;
		}
	}
	if (buf_puts(json, "}") < 0)
		goto out;
	ret = 1;
out:
	sqlite3_finalize(st);
	buf_free(&data);
	buf_free(&log);
	return ret;
}

int store_tenant_id(struct store *s, const char *name, int64_t *id)
{
	sqlite3_stmt *st = NULL;
	int ret = -1;

	/* Once given, a name's number is its own for the cache's life. */
	if (sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO tenants (name) VALUES (?1)", -1,
			       &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE ||
	    sqlite3_prepare_v2(s->db, "SELECT id FROM tenants WHERE name = ?1", -1, &st,
			       NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*id = sqlite3_column_int64(st, 0);
		ret = 0;
	}
	sqlite3_finalize(st);
	return ret;
}

int store_list(struct store *s, const struct store_filter *f, int limit,
	       struct buf *json)
{
	sqlite3_stmt *st;
	int n = 0, rc;

	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT " ROW_COLS " FROM entries" FILTER_WHERE
			       " ORDER BY created DESC, rowid DESC LIMIT ?5",
			       -1, &st, NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	sqlite3_bind_int64(st, 5, limit > 0 ? limit : -1);
	if (buf_puts(json, "[") < 0)
		goto fail;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if ((n && buf_puts(json, ",") < 0) || row_json(st, json) < 0 ||
		    buf_puts(json, "}") < 0)
			goto fail;
		n++;
	}
	if (rc != SQLITE_DONE || buf_puts(json, "]") < 0)
		goto fail;
	sqlite3_finalize(st);
	return n;
fail:
	sqlite3_finalize(st);
	return -1;
}

int store_remove(struct store *s, const struct store_filter *f)
{
	sqlite3_stmt *st;
	int rc;

	store_flush(s);
	/* The files of the rows it takes, unlinked once their delete is
	 * committed (the master is the only writer: nothing comes between). */
	if (sqlite3_prepare_v2(s->db, "SELECT key, checksum FROM entries" FILTER_WHERE
			       " AND length(data) = 8", -1, &st, NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const void *k = sqlite3_column_blob(st, 0);
		struct doomed d = { .sum = sqlite3_column_int64(st, 1) };
		if (!k || sqlite3_column_bytes(st, 0) != 32)
			continue;
		memcpy(d.key, k, 32);
		doomed_add(s, &d);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE ||
	    sqlite3_prepare_v2(s->db, "DELETE FROM entries" FILTER_WHERE, -1, &st,
			       NULL) != SQLITE_OK) {
		doomed_forget(s);
		return -1;
	}
	bind_filter(s, st, f);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		log_warn("cannot remove entries from '%s': %s", s->path, sqlite3_errmsg(s->db));
		doomed_forget(s);
		return -1;
	}
	doomed_commit(s);
	int removed = sqlite3_changes(s->db);
	/* Recount rather than track each row's size. */
	if (sqlite3_prepare_v2(s->db, "SELECT count(*), coalesce(sum(size), 0) FROM entries",
			       -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW) {
			s->entries = sqlite3_column_int64(st, 0);
			s->bytes = sqlite3_column_int64(st, 1);
		}
		sqlite3_finalize(st);
	}
	s->ctr.evictions += removed;
	if (removed)
		log_info("removed %d cache entries; %lld bytes in %lld entries remain",
			 removed, (long long)s->bytes, (long long)s->entries);
	return removed;
}

int store_count(struct store *s, const struct store_filter *f, int64_t *entries,
		int64_t *bytes)
{
	sqlite3_stmt *st;
	int ret = -1;

	*entries = *bytes = 0;
	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT count(*), total(size) FROM entries" FILTER_WHERE,
			       -1, &st, NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*entries = sqlite3_column_int64(st, 0);
		*bytes = (int64_t)sqlite3_column_double(st, 1);
		ret = 0;
	}
	sqlite3_finalize(st);
	return ret;
}

int store_nearest(struct store *s, const char *components_json, const struct store_filter *f,
		  struct buf *json)
{
	struct flat_field want[FLAT_MAX_FIELDS], have[FLAT_MAX_FIELDS];
	struct buf best = BUF_INIT;
	unsigned char best_key[32];
	int64_t best_kind = 0;
	int best_diff = -1, ret = -1, rc;
	sqlite3_stmt *st;

	int nw = flat_parse(components_json ? components_json : "", want, FLAT_MAX_FIELDS);
	if (nw < 0)
		return 0;
	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT key, kind, components FROM entries" FILTER_WHERE
			       " ORDER BY last_used DESC", -1, &st, NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *comp = (const char *)sqlite3_column_text(st, 2);
		const void *k = sqlite3_column_blob(st, 0);
		if (!comp || !k || sqlite3_column_bytes(st, 0) != 32)
			continue;
		int nh = flat_parse(comp, have, FLAT_MAX_FIELDS);
		if (nh < 0)
			continue;
		int d = flat_diff(have, nh, want, nw);
		if (best_diff >= 0 && d >= best_diff)
			continue;
		best_diff = d;
		best_kind = sqlite3_column_int64(st, 1);
		memcpy(best_key, k, 32);
		buf_reset(&best);
		if (buf_puts(&best, comp) < 0)
			goto out;
		if (!d)
			break;
	}
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		goto out;
	if (best_diff < 0) {
		ret = 0;
		goto out;
	}

	char hex[65];
	int nh = flat_parse(best.data, have, FLAT_MAX_FIELDS);
	int first = 1;
	key_hex(best_key, hex);
	if (buf_printf(json, "{\"key\":\"%s\",\"kind\":\"%s\",\"differing\":[", hex,
		       kind_name(best_kind)) < 0)
		goto out;
	/* Requested order first, then the fields only the stored entry has. */
	for (int i = 0; i < nw + nh; i++) {
		const struct flat_field *sf, *rf;
		const struct flat_field *name;
		if (i < nw) {
			name = &want[i];
			rf = name;
			sf = flat_find(have, nh, name);
			if (sf && flat_eq_value(sf, rf))
				continue;
		} else {
			name = &have[i - nw];
			sf = name;
			if (flat_find(want, nw, name))
				continue;
			rf = NULL;
		}
		if ((!first && buf_puts(json, ",") < 0) ||
		    buf_puts(json, "{\"name\":\"") < 0 ||
		    buf_append(json, name->name, name->name_len) < 0 ||
		    buf_puts(json, "\",\"stored\":") < 0 || flat_value_json(json, sf) < 0 ||
		    buf_puts(json, ",\"requested\":") < 0 || flat_value_json(json, rf) < 0 ||
		    buf_puts(json, "}") < 0)
			goto out;
		first = 0;
	}
	if (buf_puts(json, "]}") < 0)
		goto out;
	ret = 1;
out:
	sqlite3_finalize(st);
	buf_free(&best);
	return ret;
}

/* Whether f matches every entry. */
static int filter_is_all(const struct store_filter *f)
{
	return !f->kind && !(f->arch && *f->arch) && f->older_than_s <= 0 && f->min_bytes <= 0 &&
	       !(f->ns && *f->ns) && !f->scoped && !f->own;
}

int store_verify(struct store *s, const struct store_filter *f, struct buf *report)
{
	sqlite3_stmt *st;
	struct buf data = BUF_INIT, log = BUF_INIT;
	int problems = 0, rc;

	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT key, kind, data_len, log_len, checksum, "
			       "data, log FROM entries" FILTER_WHERE, -1, &st, NULL) != SQLITE_OK) {
		buf_printf(report, "cannot read entries: %s\n", sqlite3_errmsg(s->db));
		return -1;
	}
	bind_filter(s, st, f);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *why = NULL;
		char hex[65] = "(bad key)";
		const void *k = sqlite3_column_blob(st, 0);
		int ok_key = k && sqlite3_column_bytes(st, 0) == 32;
		if (ok_key)
			key_hex(k, hex);
		int bad = check_row(s, st, ok_key ? k : NULL, 1, 2, 3, 4, 5, 6, &data, &log, &why);
		if (bad < 0) {
			buf_printf(report, "cannot check entry %s: %s\n", hex,
				   why ? why : "out of memory");
			problems = -1;
			break;
		}
		if (bad) {
			buf_printf(report, "entry %s: %s\n", hex, why);
			problems++;
		}
	}
	if (problems >= 0 && rc != SQLITE_DONE) {
		buf_printf(report, "cannot read entries: %s\n", sqlite3_errmsg(s->db));
		problems = -1;
	}
	sqlite3_finalize(st);
	buf_free(&data);
	buf_free(&log);
	if (problems < 0)
		return -1;
	/* Files no row names: only a failed unlink leaves one while the
	 * daemon runs (a file's row commits in the same call that places it,
	 * and its removal in the same call that unlinks it). Everyone's, so
	 * for the whole cache only. */
	if (!f || filter_is_all(f))
		problems += blobs_sweep(s->blobs, row_names_file, s, report);

	if (sqlite3_prepare_v2(s->db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK) {
		buf_printf(report, "cannot run integrity_check: %s\n", sqlite3_errmsg(s->db));
		return -1;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *r = (const char *)sqlite3_column_text(st, 0);
		if (r && !strcmp(r, "ok"))
			continue;
		if (!r && (sqlite3_errcode(s->db) & 0xff) == SQLITE_NOMEM) {
			rc = SQLITE_NOMEM;
			break;
		}
		buf_printf(report, "integrity_check: %s\n", r ? r : "?");
		problems++;
	}
	/* A check that could not run (out of memory, I/O error) is not a
	 * problem found in the cache: say so and return -1. */
	if (rc != SQLITE_DONE) {
		buf_printf(report, "cannot run integrity_check: %s\n", sqlite3_errmsg(s->db));
		problems = -1;
	}
	sqlite3_finalize(st);
	return problems;
}

void store_set_max_size(struct store *s, int64_t max_bytes)
{
	s->max_bytes = max_bytes > 0 ? max_bytes : 0;
	if (s->max_bytes && s->bytes > s->max_bytes)
		store_evict_lru(s, s->max_bytes - s->max_bytes / 10);
}
