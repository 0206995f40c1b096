/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_ckpt: see store_ckpt.h.
 *
 * Design: sqlite3_wal_hook() on the loop's connection takes the place of
 * SQLite's automatic checkpoint (the two are one slot). After each commit
 * it is told the WAL's size in pages; from CKPT_PAGES on, and while no
 * checkpoint is queued or running, it hands one to the syncer. The thread
 * runs sqlite3_wal_checkpoint_v2(PASSIVE) on a connection of its own,
 * opened at ckpt_new() and used on that thread alone: it copies what the
 * WAL holds into the database and syncs both, never waits for a lock and
 * never blocks a reader or a writer.
 *
 * The WAL starts again from its beginning only at a commit that finds
 * every frame of it checkpointed, and while puts keep coming, each
 * checkpoint of the thread's leaves behind those committed while it ran:
 * the WAL would grow for as long as they come. So from CKPT_LOOP_PAGES
 * the commit waits for the thread's checkpoint in progress, if any, and
 * checkpoints the rest itself, as SQLite would: only the frames since the
 * thread's last checkpoint, whose syncs have little left to write, and
 * once per 8 MiB of WAL rather than all of them at every 4 MiB
 * (bench/NOTES.md has the figures). The WAL thus stays within
 * CKPT_LOOP_PAGES and one commit, inside the full disk's reserve
 * (store_int.h: 16 MiB), however slow the thread. That wait, and a full
 * disk's own TRUNCATE checkpoints on the loop, are ckpt_hold(): the mutex
 * the thread holds around its checkpoint, without which they would find
 * the checkpoint lock taken and do nothing.
 *
 * The thread touches the second connection, the mutex and rc; done()
 * reads rc on the loop after the syncer's own mutex has ordered it. The
 * rest is the loop's (held too: ckpt_hold() is the loop's alone).
 */
#include "daemon/store_ckpt.h"

#include <pthread.h>
#include <stdlib.h>

#include <sqlite3.h>

#include "daemon/log.h"
#include "daemon/syncer.h"

/* The WAL's size, in pages (4 KiB), from which a commit asks the thread
 * for a checkpoint, and from which it checkpoints on the loop (8 MiB). */
#define CKPT_PAGES 500
#define CKPT_LOOP_PAGES 2000

struct ckpt {
	sqlite3 *db;            /* the loop's connection */
	sqlite3 *own;           /* the thread's */
	struct syncer *sync;
	pthread_mutex_t mu;     /* held by a checkpoint, either side's */
	int queued;             /* handed to the syncer, done() not yet run */
	int held;               /* the loop holds mu (ckpt_hold()) */
	int rc;                 /* the thread's last result */
	int failing;            /* the last one failed: said once */
	int64_t runs, errors;   /* for ckpt_counters() */
};

/* On the syncer's thread. */
static int run(void *arg)
{
	struct ckpt *c = arg;

	pthread_mutex_lock(&c->mu);
	c->rc = sqlite3_wal_checkpoint_v2(c->own, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* On the loop, after run() (or instead of it at a stop: ECANCELED). */
static void done(void *arg, int err)
{
	struct ckpt *c = arg;

	c->queued = 0;
	/* Busy: it found the WAL's header changing under a commit of the
	 * loop's (nothing copied): the next commit asks again. */
	if (err || (c->rc & 0xff) == SQLITE_BUSY)
		return;
	c->runs++;
	if (c->rc == SQLITE_OK) {
		if (c->failing)
			log_info("checkpoint of the cache's WAL succeeded again");
		c->failing = 0;
		return;
	}
	c->errors++;
	if (!c->failing)
		log_warn("checkpoint of the cache's WAL failed: %s (retried after the next commit)",
			 sqlite3_errstr(c->rc));
	c->failing = 1;
}

/* After each commit on the loop's connection. */
static int on_commit(void *arg, sqlite3 *db, const char *name, int pages)
{
	struct ckpt *c = arg;

	if (pages < CKPT_PAGES)
		return SQLITE_OK;
	if (pages < CKPT_LOOP_PAGES) {
		if (!c->queued && syncer_sync(c->sync, run, done, c) == 0)
			c->queued = 1;
		return SQLITE_OK;
	}
	/* At the bound: the thread's checkpoint in progress ends first, then
	 * the frames since it here, and the WAL starts again. A commit made
	 * while the loop holds the mutex already (a full disk's evictions,
	 * store.c's make_room_on_disk(), whose checkpoint could not empty the
	 * WAL) checkpoints without taking it again: the mutex is not
	 * recursive, and the loop would wait on itself for ever. */
	int mine = !c->held;
	if (mine)
		ckpt_hold(c);
	sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
	if (mine)
		ckpt_release(c);
	return SQLITE_OK;
}

struct ckpt *ckpt_new(sqlite3 *db, const char *path, struct syncer *y)
{
	struct ckpt *c = calloc(1, sizeof *c);
	int rc = SQLITE_NOMEM;

	if (!c || (rc = sqlite3_open_v2(path, &c->own, SQLITE_OPEN_READWRITE |
					SQLITE_OPEN_NOMUTEX, NULL)) != SQLITE_OK ||
	    (rc = sqlite3_exec(c->own, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL)) !=
	    SQLITE_OK) {
		log_warn("cannot open a second connection to '%s' for its checkpoints: %s; "
			 "they stay on the loop", path,
			 c && c->own ? sqlite3_errmsg(c->own) : sqlite3_errstr(rc));
		if (c)
			sqlite3_close(c->own);
		free(c);
		return NULL;
	}
	c->db = db;
	c->sync = y;
	pthread_mutex_init(&c->mu, NULL);
	sqlite3_wal_hook(db, on_commit, c);
	return c;
}

void ckpt_free(struct ckpt *c)
{
	if (!c)
		return;
	sqlite3_wal_autocheckpoint(c->db, 1000);        /* SQLite's default */
	sqlite3_close(c->own);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void ckpt_hold(struct ckpt *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->held = 1;
}

void ckpt_release(struct ckpt *c)
{
	if (!c)
		return;
	c->held = 0;
	pthread_mutex_unlock(&c->mu);
}

void ckpt_counters(const struct ckpt *c, struct ckpt_counters *out)
{
	*out = c ? (struct ckpt_counters){ c->runs, c->errors, c->queued } :
		   (struct ckpt_counters){ 0 };
}
