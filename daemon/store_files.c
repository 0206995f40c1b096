/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_files: the files of the store's rows from the rows' side, over
 * store_int.h: which rows name which files, and the files of rows going.
 * A row's removal (eviction, a scope's share, remove, a replaced value)
 * notes its file (doomed_add()); once the removal is committed the file
 * is renamed out of its name (blobs_retire()) and unlinked on the
 * syncer's thread (store_set_syncer()), or on the loop where there is
 * none or while a full disk waits for the room (unlink_now); a rollback
 * forgets the list and the files stay with their rows. What a kill -9
 * leaves between the two is swept at the next open, by row_names_file().
 * And the reserve file (<dir>/reserve), given back when the disk is full
 * (store_put.c's design comment). The files themselves, with no SQLite
 * and no rows, are store_blobs.c's.
 */
#include "daemon/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/store_blobs.h"
#include "daemon/syncer.h"

/* ---- blob files whose rows are going ---- */

/* Note a blob file whose row is deleted in the open transaction, for
 * doomed_commit(). */
void doomed_add(struct store *s, const struct doomed *d)
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
void retired_dispose(struct store *s, const char *name)
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

/* The removals are committed: unlink their files. */
void doomed_commit(struct store *s)
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
void doomed_forget(struct store *s)
{
	s->ndoomed = 0;
}

/* For blobs_sweep(): whether a row names key's file for sum. */
int row_names_file(void *arg, const unsigned char key[32], int64_t sum)
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

/* After a put that wrote key's file for sum failed: remove the file
 * unless the row that stays names it (the same value put again). */
void put_undo_file(struct store *s, const unsigned char key[32], int64_t sum)
{
	if (!row_names_file(s, key, sum))
		blobs_unlink(s->blobs, key, sum);
}

/* ---- the reserve file ---- */

/* Allocate <dir>/reserve where it is missing or short (best effort): at
 * most RESERVE_BYTES, and at most share percent of the free space. */
void reserve_make(struct store *s, int share)
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

void reserve_release(struct store *s)
{
	char p[4096];

	snprintf(p, sizeof p, "%s/reserve", s->dir);
	unlink(p);
}
