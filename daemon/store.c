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
 *    maintenance queries (show, ls, explain, verify: store_admin.c)
 *    prepare their own.
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
 *  - Puts (store_put.c: which values become files, a full disk, the
 *    spool), the files of rows going (store_files.c) and the admin queries
 *    (store_admin.c) are rooms of their own, over store_int.h.
 *
 *
 *  - A database that SQLite rejects as not a database or corrupt, or that
 *    fails PRAGMA quick_check, or whose schema version is not ours, is moved
 *    aside (cache.db.corrupt-<time>, with its -wal and -shm) and a fresh one
 *    created. Any other failure (locked, permissions) is an error: a cache
 *    is never thrown away because it could not be opened.
 */

#include "daemon/store.h"
#include "daemon/store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "daemon/log.h"
#include "daemon/store_blobs.h"
#include "daemon/store_ckpt.h"
#include "schema.h"

#define STORE_SCHEMA_VERSION "3"
#define ZSTD_LEVEL 3
#define BUSY_TIMEOUT_MS 2000

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

/* ---- small helpers ---- */

int64_t store_clock(struct store *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	if (now <= s->clock_us)
		now = s->clock_us + 1;
	return s->clock_us = now;
}

void key_hex(const unsigned char key[32], char out[65])
{
	static const char hexdig[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hexdig[key[i] >> 4];
		out[2 * i + 1] = hexdig[key[i] & 15];
	}
	out[64] = '\0';
}

/* Step a statement that returns no rows and reset it; the step's result. */
int run_st(struct store *s, int which)
{
	sqlite3_stmt *st = s->st[which];
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc;
}

/* Roll back if a transaction is open (SQLite rolls back by itself after
 * some errors, such as SQLITE_FULL). In a batch, a put's own savepoint
 * only, unless SQLite took the whole batch back already. */
void rollback(struct store *s)
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
int compress_into(struct store *s, struct buf *dst, const void *src,
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
int check_row(struct store *s, sqlite3_stmt *st, const unsigned char *key,
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

void store_set_checkpointer(struct store *s, struct syncer *y)
{
	ckpt_free(s->ckpt);
	s->ckpt = y ? ckpt_new(s->db, s->path, y) : NULL;
}

/* ---- the hit path ---- */

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

void store_set_artifact_share(struct store *s, int64_t bytes)
{
	s->artifact_share = bytes > 0 ? bytes : 0;
}

void store_set_syncer(struct store *s, struct syncer *y)
{
	s->sync = y;
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

/* ---- eviction ---- */

/* One row of an eviction query (rowid, size, key, checksum, length(data)). */
void victim_read(sqlite3_stmt *st, struct victim *v)
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

void store_set_max_size(struct store *s, int64_t max_bytes)
{
	s->max_bytes = max_bytes > 0 ? max_bytes : 0;
	if (s->max_bytes && s->bytes > s->max_bytes)
		store_evict_lru(s, s->max_bytes - s->max_bytes / 10);
}
