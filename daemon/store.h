/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store: the SQLite cache of compiled blobs; the only files that speak
 * SQLite (store.c, with store_put.c, store_files.c and store_admin.c over
 * store_int.h). One database (cache.db) in the cache directory, WAL mode, one
 * writer: the master process. Workers and clients never open it.
 *
 * Blobs (PTX, cubin, and the log text beside them) are stored
 * zstd-compressed with a checksum that is verified on every read: a blob
 * that fails it is deleted and reported as a miss, never returned. A value
 * of BLOB_MIN bytes and more (256 KiB) is a file of its own beside the
 * database instead (store_blobs.h: raw bytes, read-only, durable before the row
 * that names it is committed, unlinked after the row's removal is), under
 * the same checksum, counted in the size cap and evicted with its row;
 * store_get_file() hands out a descriptor of it rather than its bytes. A put is
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

#include "daemon/store_counters.h"
#include "proto/buf.h"

/* Values of at least this many bytes live in blob files (store_blobs.h), not in
 * rows: store_put.c's design comment has the measurement. */
#define BLOB_MIN ((size_t)256 << 10)

struct store;
struct hot;             /* store_hot.h: a lent hot entry */
struct store_filter;    /* below */

/* STORE_ARTIFACT: bytes a client produced itself (artifact.c), readable
 * only within the scope that stored them. */
enum store_kind { STORE_PTX = 1, STORE_CUBIN = 2, STORE_ARTIFACT = 3 };

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
	int64_t producer;       /* the tenant whose worker computed it, under
	                           every sharing policy; -1: none in particular
	                           (a confirmed value from the Redis tier, or
	                           an entry an older daemon stored under
	                           trust) */
	int trust;              /* enum store_trust */
	int64_t scope;          /* artifacts: the scope that may read it */
	const char *ns;         /* artifacts: the client's namespace */
};

/* Whether an entry may be served to users other than its producer
 * (sharing = confirm, see confirm.h). */
enum store_trust {
	STORE_UNCONFIRMED = 0,  /* only its producer's worker computed it */
	STORE_CONFIRMED = 1,    /* a worker of another tenant computed the
	                           same bytes */
	STORE_QUARANTINED = 2,  /* another tenant's worker computed other
	                           bytes: served to its producer alone */
};

/* A looked-up entry; the caller owns the bufs and frees them with
 * store_result_free(). From store_get_lent(), the bufs may instead be the
 * hot cache's own (lent set): read-only, kept as they are until then. */
struct store_result {
	enum store_kind kind;
	int status;
	int64_t producer;
	int trust;
	struct buf data;
	struct buf log;
	size_t data_len;        /* the value's length: data.len, or that of
	                           the file store_get_file() gave */
	struct hot *lent;
};

/* Open or create the cache in dir (created 0700 if missing), applying
 * schema.sql. max_bytes is the size cap (0: none). A database that fails to
 * open or fails its quick check is moved aside to cache.db.corrupt-<time>
 * and a fresh one created, with a loud log line. Returns NULL with a message
 * in err on failure. */
struct store *store_open(const char *dir, int64_t max_bytes, struct buf *err);

/* Flush pending hit bookkeeping, checkpoint the WAL and close. NULL ok. */
void store_close(struct store *s);

/* Unlink the files of removed entries (evicted, replaced, purged) on y's
 * thread (syncer.h) rather than the caller's: a 64 MB file's unlink takes
 * 18-24 ms. Not while making room on a full disk, whose retry needs the
 * room at once. NULL (the default): on the caller's. y must outlive its
 * use here: set NULL before freeing it. */
struct syncer;
void store_set_syncer(struct store *s, struct syncer *y);

/* Checkpoint the WAL on y's thread (store_ckpt.h) rather than in the
 * commit that fills it, on the caller's: the checkpoint's fsyncs take
 * milliseconds to tens of them. NULL (the default): SQLite's own, in the
 * commit. Free y first, then set NULL (or close the store). */
void store_set_checkpointer(struct store *s, struct syncer *y);

/* Look up key. Returns 1 and fills out on a hit, 0 on a miss (including a
 * blob whose checksum or decompression fails: it is deleted and counted),
 * -1 on a database error (treat as a miss). Records the hit in memory. */
int store_get(struct store *s, const unsigned char key[32],
	      struct store_result *out);

/* store_get() for a hit answered at once: a hot entry's bytes are lent,
 * not copied (store_result above). */
int store_get_lent(struct store *s, const unsigned char key[32],
		   struct store_result *out);

/* store_get() for an answer that may be sent from the value's own file:
 * where key's value lives in a blob file (values of BLOB_MIN bytes and
 * more, store.c), *fd is a new read-only descriptor of that file, checked
 * against the row's checksum before this returns (a damaged file is a
 * miss, counted and dropped, as a damaged row is), out->data is empty and
 * out->data_len is the file's length; the caller owns *fd. Otherwise *fd
 * is -1 and out is what store_get() gives. */
int store_get_file(struct store *s, const unsigned char key[32],
		   struct store_result *out, int *fd);

/* on: the store_get_file() calls until off (0) answer gets of one key
 * given together, a put's waiters; one hash of its fresh file serves them
 * all (blobs_together()). */
void store_gets_together(struct store *s, int on);

/* store_get() without counting a hit (a comparison, not an answer). */
int store_peek(struct store *s, const unsigned char key[32],
	       struct store_result *out);
/* store_get_file() without counting a hit (a value passed on, not an
 * answer). */
int store_peek_file(struct store *s, const unsigned char key[32],
		    struct store_result *out, int *fd);

/* Insert or replace key's entry and commit before returning (in a batch,
 * store_batch_begin(): staged, committed by store_batch_commit()). Returns 0, or
 * -1 on failure (disk full, I/O error) with a message in err; the caller
 * still answers its client. May evict LRU entries to stay under the cap. */
/* Mark key's entry (enum store_trust). 0, or -1 on a database error. */
int store_set_trust(struct store *s, const unsigned char key[32], int trust);

int store_put(struct store *s, const unsigned char key[32],
	      const struct store_entry *e, struct buf *err);

/*
 * A large value that arrives in pieces (an artifact put's value, taken
 * from the socket as it comes: conn.c, artifact.c), never whole in memory:
 * written to a temporary blob file (store_blobs.h; swept at the next open if a
 * kill leaves it) and hashed on the way, then stored by store_put_spool().
 *
 * store_spool_open(): a spool for a value of len bytes (BLOB_MIN and
 * more) of kind, refused before any byte is written where store_put()
 * would refuse it for its size (a scope's share): NULL with a message in
 * err. store_spool_write(): the next n bytes; 0, or -1 with a message in
 * err when they cannot be written (the disk full once more after the
 * oldest entries made room, as store_put() does, or an I/O error): the
 * file is then removed and the spool is good for nothing but
 * store_put_spool() (which fails) or store_spool_abort().
 * store_spool_sync(): once all len bytes are written, sync the file: for
 * a caller that does it off the loop first (syncer.h), on another thread
 * while nothing else touches sp; store_put_spool() then does not sync it
 * again. 0, or an errno (EINVAL: the spool failed or is not whole).
 * store_put_spool(): store_put() of e with the spool's bytes as its value
 * (e->data unused, e->data_len the spool's whole length, no log): the file
 * fsync'd and renamed into place as key's, the row committed. Takes sp.
 * store_spool_abort(): drop it and its file (NULL ok).
 */
struct store_spool;
struct store_spool *store_spool_open(struct store *s, enum store_kind kind, size_t len,
				     struct buf *err);
int store_spool_write(struct store_spool *sp, const void *p, size_t n, struct buf *err);
int store_spool_sync(struct store_spool *sp);
int store_put_spool(struct store *s, const unsigned char key[32], const struct store_entry *e,
		    struct store_spool *sp, struct buf *err);
void store_spool_abort(struct store_spool *sp);

/* Group commit: the puts between these two share one transaction (each
 * in a savepoint of its own, so a put that fails leaves the others), and
 * are durable once store_batch_commit() returns 0, not before: a put's 0
 * in between means staged. store_batch_commit() -1 (the commit failed,
 * or a put's failure, such as a full disk, took the transaction with it)
 * means none of them is stored: redo each with store_put() alone, which
 * has the full disk's retry. Nothing but store_put() may be called in
 * between. store_batch_begin(): 0, or -1 (no batch; put one by one). */
int store_batch_begin(struct store *s);
int store_batch_commit(struct store *s, struct buf *err);

/* Write pending hit counts, last-use times and notes in one transaction. */
void store_flush(struct store *s);

/* Note that user (an identity, conn_tenant()) stored key's entry or was
 * answered with it, for the queries' per-identity view (store_filter's
 * own). In memory, as hits are, until store_flush(); it applies to the
 * row key has now, and is dropped if that row is replaced or deleted
 * before the flush. Call it right after the store_put() or the lookup
 * that answered user. */
void store_note_user(struct store *s, const unsigned char key[32], int64_t user);

/* Entries and the bytes they take (compressed blobs plus row overhead). */
void store_totals(struct store *s, int64_t *entries, int64_t *bytes);

/* The same for one kind of entry (a query: not for the hit path). */
void store_kind_totals(struct store *s, enum store_kind kind, int64_t *entries,
		       int64_t *bytes);

/* The most bytes the artifacts of one scope may take (0: no share but the
 * cap). A put over it evicts that scope's own least recently used
 * artifacts first, so one user's artifacts never push out another's; a
 * value larger than the share alone is refused. */
void store_set_artifact_share(struct store *s, int64_t bytes);

/* Counters since open. */
void store_counters(struct store *s, struct store_counters *c);

/* Check every entry that f matches (NULL: all; decompress and verify
 * checksum), for the whole cache remove blob files no entry names, and
 * run PRAGMA integrity_check. Returns the number of problems found,
 * writing one line per problem to report; -1 if the check could not run. */
int store_verify(struct store *s, const struct store_filter *f, struct buf *report);

void store_result_free(struct store_result *r);

/* Take the first-use costs of the hit and put paths (zstd's tables, the
 * statements' first steps, the pages and locks they touch) now, while the
 * workers warm up, rather than in the first request. Writes nothing and
 * changes no counter. */
void store_warm_up(struct store *s);

/*
 * Queries and maintenance, for ptxcache show / ls / explain / evict and the
 * daemon's --verify mode. None of these is on the hit path; each flushes the
 * pending hit bookkeeping first, so the counts and times they show are
 * current. Notes that apply to the functions above as well:
 *  - store_get() initialises *out itself (its old contents are not read, so
 *    free a result before reusing it); after a miss or an error *out is
 *    empty, and store_result_free() on it is harmless.
 *  - Times ("created", "last_used") are unix seconds in the JSON below.
 */

/* Append key's metadata to json as one object, if f (NULL: any) matches
 * it: "key" (hex), "kind" ("ptx",
 * "cubin" or "artifact"; an artifact adds "scope" and "namespace"), "status", "arch", "data_len" (raw bytes), "stored_bytes",
 * "hits", "created", "last_used", "compile_us", "components" (the key's
 * components, as an embedded object), and for a negative entry "log" (its
 * error text, only if its checksum verifies). Returns 1 if found, 0 if not,
 * -1 on a database error or when memory runs out. */
int store_show(struct store *s, const unsigned char key[32], const struct store_filter *f,
	       struct buf *json);

/* The number of tenant name (tenant.h): given the first time a name is
 * asked for, from 1 up, and never to another name while the cache lasts.
 * 0 with *id set, or -1 on a database error. */
int store_tenant_id(struct store *s, const char *name, int64_t *id);

/* Which entries the queries (show, list, count, nearest, verify) and
 * store_remove() take; zero fields match everything, a NULL filter
 * matches every entry. */
struct store_filter {
	enum store_kind kind;   /* 0: any */
	const char *arch;       /* NULL or "": any */
	int64_t older_than_s;   /* > 0: last used longer ago than this */
	int64_t min_bytes;      /* > 0: raw size at least this */
	const char *ns;         /* NULL or "": any; else artifacts of it */
	int scoped;             /* 1: of the artifacts, only scope's */
	int64_t scope;
	int own;                /* 1: only entries noted for user */
	int64_t user;           /* (store_note_user()) */
};

/* Append a JSON array of up to limit matching entries (limit <= 0: all),
 * newest first, each the object store_show() gives, without "log". Returns
 * the number of entries listed, or -1 on failure. */
int store_list(struct store *s, const struct store_filter *f, int limit,
	       struct buf *json);

/* The number of matching entries and the bytes they take. 0, or -1 on a
 * database error (both 0 then). */
int store_count(struct store *s, const struct store_filter *f, int64_t *entries,
		int64_t *bytes);

/* Remove every matching entry (counted in evictions). Returns the number
 * removed, or -1 on a database error. */
int store_remove(struct store *s, const struct store_filter *f);

/* Find the stored entry that f matches (NULL: any) whose components (as key_derive() writes them)
 * differ from components_json in the fewest fields, and append
 * {"key": hex, "kind": "ptx"|"cubin", "differing": [{"name", "stored",
 * "requested"}...]} to json (a field present on one side only shows null on
 * the other). The stage (PTX or cubin) is part of the components, so the
 * nearest entry is naturally one of the same kind; ties go to the most
 * recently used. Returns 1 if an entry was found, 0 if the cache is empty or
 * components_json is not a flat JSON object, -1 on a database error. */
int store_nearest(struct store *s, const char *components_json, const struct store_filter *f,
		  struct buf *json);

/* Remove least recently used entries until the stored bytes are at most
 * target_bytes (0: remove everything), in one transaction. Returns the
 * number of entries removed (counted in evictions), or -1 on a database
 * error, in which case nothing is removed. */
int store_evict_lru(struct store *s, int64_t target_bytes);

/* Change the size cap (0: none), evicting at once if the cache is over
 * the new cap. */
void store_set_max_size(struct store *s, int64_t max_bytes);

#endif
