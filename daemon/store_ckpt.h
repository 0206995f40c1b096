/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_ckpt: the WAL's checkpoints off the loop, private to store.c.
 *
 * Without it SQLite checkpoints in the commit that takes the WAL past its
 * mark (1,000 pages), on the loop: the WAL's and the database's fsyncs,
 * 2.6-26 ms each under a run of small puts (bench/NOTES.md), and every
 * client of the daemon waits meanwhile. With it a commit that finds the
 * WAL at 2 MiB has a PASSIVE checkpoint run on a syncer's thread
 * (syncer.h) from a connection of its own, with writers and readers going
 * on beside it as SQLite's WAL allows; only at 8 MiB, under a stream of
 * puts, does a commit checkpoint on the loop what the thread left.
 */
#ifndef PTXCACHE_STORE_CKPT_H
#define PTXCACHE_STORE_CKPT_H

#include <stdint.h>

struct ckpt;
struct syncer;
typedef struct sqlite3 sqlite3;

/* The loop's connection db, of the database at path, checkpointed on y's
 * thread from now on (its commits' hook set: SQLite's own automatic
 * checkpoint is off). NULL, with a warning logged, where the second
 * connection cannot be opened: db keeps checkpointing by itself. */
struct ckpt *ckpt_new(sqlite3 *db, const char *path, struct syncer *y);

/* Give db back its automatic checkpoint and close the second connection.
 * y's thread must be done with it: free y first (its done() calls come
 * back here). NULL ok. */
void ckpt_free(struct ckpt *c);

/* For a checkpoint of the loop's own (a full disk's TRUNCATE): wait for
 * the thread's checkpoint in progress to end, and start none until
 * ckpt_release(). NULL ok. */
void ckpt_hold(struct ckpt *c);
void ckpt_release(struct ckpt *c);

struct ckpt_counters {
	int64_t runs;           /* checkpoints run on the thread */
	int64_t errors;         /* ... that failed (the WAL stays; logged) */
	int running;            /* one is queued or in progress now */
};
void ckpt_counters(const struct ckpt *c, struct ckpt_counters *out);

#endif
