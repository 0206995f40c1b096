/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_put: the store's put path, over store_int.h: a value compressed
 * into its row, or written raw to its file (which values become files),
 * or placed from the file it was spooled to; the row inserted or
 * replaced in a transaction of its own or in a savepoint of a batch's
 * (store_batch_begin(), for store_batch.c); a scope's share made room in
 * (artifact-share); and a full disk made room on. The rows it removes
 * and the files it replaces go through store_files.c; the size cap's
 * eviction is store.c's.
 *
 * Design:
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
 *  - Large values are files (store_blobs.c): a value of BLOB_MIN bytes
 *    and more is written raw to its own file, durable before the row
 *    that names it (FILE_REF in the data column) is committed; its row's
 *    removal is committed before the file is unlinked (eviction, the
 *    share, remove, a damaged entry, a replaced value: store_files.c), and
 *    blobs_sweep() at open takes what a kill -9 left between the two. The
 *    threshold, measured on this
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
 */
#include "daemon/store.h"
#include "daemon/store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include <xxhash.h>

#include "daemon/log.h"
#include "daemon/store_blobs.h"
#include "daemon/store_ckpt.h"

/* Per-row bytes beyond the blobs and texts: record header, integers, key,
 * and the two index entries; an estimate, used only for the size cap. */
#define ROW_OVERHEAD 128

/* The checksum column: data's hash, continued over the log. */
static int64_t entry_checksum(const void *data, size_t dlen, const void *log,
			      size_t llen)
{
	return (int64_t)XXH64(log ? log : "", llen, XXH64(data ? data : "", dlen, 0));
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
