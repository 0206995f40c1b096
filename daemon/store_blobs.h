/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_blobs: the files that hold large values beside the database, private
 * to the store (store_put.c decides which values go here and names each by
 * the row that owns it: the entry's key and its checksum). No SQLite here,
 * and no knowledge of rows: store_put.c commits a row only after its file
 * is durable, and store_files.c unlinks a file only after the row's
 * removal is committed; blobs_sweep() at open reclaims what a kill -9
 * left in between.
 *
 * A file is <dir>/blobs/<kk>/<key hex>-<checksum hex>: the value's raw
 * bytes, mode 0400, never written again once renamed into place, in
 * directories of mode 0700 (only the daemon's user, and root, reach
 * them). See store_blobs.c for the design.
 */
#ifndef PTXCACHE_STORE_BLOBS_H
#define PTXCACHE_STORE_BLOBS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/buf.h"

struct blobs;

/* The files under dir/blobs (made 0700 if missing). NULL with a message in
 * err on failure. */
struct blobs *blobs_open(const char *dir, struct buf *err);
void blobs_close(struct blobs *b);      /* NULL ok */

/* The longest temporary name a blob file is left under (replaced,
 * blobs_retire()), with its '\0'. */
#define BLOBS_RETIRED_MAX 64

/* Make data [0, len) key's file for checksum sum, durable before this
 * returns: a temporary file written and fsync'd, renamed into place, the
 * directory fsync'd. 0, or -1 with errno set (ENOSPC: the disk is full)
 * and a message in err; nothing is left behind on failure. replaced: as
 * blobs_tmp_place()'s. */
int blobs_write(struct blobs *b, const unsigned char key[32], int64_t sum,
		const void *data, size_t len, char *replaced, struct buf *err);

/* A value written in pieces (store_put.c's spools: a put's value as it
 * arrives): a temporary file in blobs/, 0400 from its creation, which
 * blobs_sweep() removes at the next open if a kill leaves it.
 * blobs_tmp_new() names it after tag (at most 16 bytes are used): NULL,
 * with errno and a message in err, if it cannot be created. */
struct blob_tmp;
struct blob_tmp *blobs_tmp_new(struct blobs *b, const char *tag, struct buf *err);

/* Append data [0, len) to t (staged until a whole piece can be written):
 * 0, or -1 with errno set (ENOSPC: the disk is full) and a message in err;
 * *done says how much of it t took (a full disk may take part of it), and
 * t takes the rest, and writes what it kept, on a later call. */
int blobs_tmp_write(struct blob_tmp *t, const void *data, size_t len, size_t *done,
		    struct buf *err);

/* Write what t has staged: 0, or -1 with errno and a message in err (a
 * later call tries again). blobs_tmp_place() does it too. */
int blobs_tmp_flush(struct blob_tmp *t, struct buf *err);

/* Sync what t has written (not what it has staged): 0, or an errno. For
 * a caller that syncs off the loop (syncer.h), on another thread, while
 * nothing else touches t; blobs_tmp_place() then syncs only what was
 * written after it, and fails with the errno where this failed. */
int blobs_tmp_sync(struct blob_tmp *t);

/* Make t key's file for checksum sum, durable before this returns: t
 * fsync'd, renamed into place, the directory fsync'd (as blobs_write()).
 * Frees t: 0, or -1 with errno and a message in err, nothing left behind.
 * Where key's file for sum was there already (the same value put again),
 * t takes its name and the old file is left under a temporary name in
 * replaced (BLOBS_RETIRED_MAX bytes; "" when none), for the caller to
 * remove with blobs_unlink_retired() (off the loop: its blocks are freed
 * then). */
int blobs_tmp_place(struct blob_tmp *t, const unsigned char key[32], int64_t sum,
		    char *replaced, struct buf *err);

/* Remove t's file and free t (NULL ok). */
void blobs_tmp_drop(struct blob_tmp *t);

/* Open key's file for sum read-only, checked to be a regular file of
 * exactly len bytes, and give *hash, XXH64 of its bytes (seed 0): read and
 * hashed unless this very file (device, inode, size, modification and
 * change times) was hashed before, settled (see store_blobs.c). Returns the
 * descriptor (the caller owns it; a new open file description each call,
 * so its offset is its own), or with *why -1 (damage: missing, of another
 * size, unreadable) or -2 (nothing known wrong with the file: it cannot
 * be had now, out of descriptors or memory). The caller compares *hash
 * with the row's checksum. */
int blobs_open_file(struct blobs *b, const unsigned char key[32], int64_t sum,
		    int64_t len, uint64_t *hash, const char **why);

/* on: the next blobs_open_file() calls answer gets of one key given
 * together (a put's waiters), and a hash of a file too fresh to be
 * remembered serves them all; off (0) forgets it. */
void blobs_together(struct blobs *b, int on);

/* Read key's file for sum into dst (replacing its contents; exactly len
 * bytes, one copy) and give *hash of them. 0, 1 if the file is missing or
 * of another size (*why says which), -1 if it cannot be read now (out of
 * memory or descriptors: *why says which). */
int blobs_read(struct blobs *b, const unsigned char key[32], int64_t sum,
	       int64_t len, struct buf *dst, uint64_t *hash, const char **why);

/* Remove key's file for sum, if there is one (after the row that named it
 * is gone: its blocks come back once no client holds it open). */
void blobs_unlink(struct blobs *b, const unsigned char key[32], int64_t sum);

/* blobs_unlink() in two steps, for a caller that unlinks off the loop
 * (a 64 MB file's unlink takes 18-24 ms): blobs_retire() renames key's
 * file for sum to a temporary name of its own, which no put ever takes
 * (so the unlink never meets a new file of the old name), into name
 * (BLOBS_RETIRED_MAX bytes): 0, or -1 if there is no such file.
 * blobs_unlink_retired() then removes it, from any thread; a kill between
 * leaves a temporary for the next open's sweep. */
int blobs_retire(struct blobs *b, const unsigned char key[32], int64_t sum, char *name);
void blobs_unlink_retired(struct blobs *b, const char *name);

/* Remove every file for which named(arg, key, sum) says 0 (no row names
 * it). At open (report NULL) every temporary file too, and a line to the
 * log; while serving (verify: report non-NULL) temporaries are puts in
 * progress and stay, and each file removed gets a line in report.
 * Returns the number of files removed. */
int blobs_sweep(struct blobs *b,
		int (*named)(void *arg, const unsigned char key[32], int64_t sum),
		void *arg, struct buf *report);


#endif
