/* SPDX-License-Identifier: Apache-2.0 */
/*
 * syncer: a file's slow work off the event loop. A file the loop has
 * written whole is handed here (syncer_sync()); a thread of the daemon's
 * syncs it (or unlinks it), and the loop is told (done(), on the loop's
 * own thread) once that is done. The loop answers every other client
 * meanwhile.
 *
 * Why: an fsync of a 64 MB value's file takes 25-60 ms and its unlink
 * 18-24 ms (bench --large, bench/NOTES.md), and while the loop waits in
 * either, every hit of every client waits too.
 */
#ifndef PTXCACHE_SYNCER_H
#define PTXCACHE_SYNCER_H

struct event_base;
struct syncer;

/* sync(arg) runs on the syncer's thread: it syncs a file (and touches
 * nothing else the loop may touch meanwhile) and gives 0 or an errno.
 * done(arg, err) runs on the loop after it: err is sync()'s result, or
 * ECANCELED if the syncer was freed before sync() began. */
typedef int (*sync_fn)(void *arg);
typedef void (*sync_done_fn)(void *arg, int err);

/* NULL if memory is short. The thread starts at the first syncer_sync(). */
struct syncer *syncer_new(struct event_base *base);

/* Run sync(arg) on the thread, then done(arg, err) from the loop (never
 * within this call). Requests are synced and answered in the order they
 * were made. -1 if no thread could be started or memory is short (done
 * never runs then: sync on the loop). */
int syncer_sync(struct syncer *s, sync_fn sync, sync_done_fn done, void *arg);

/* Wait for the sync in progress, call every done() not yet called (with
 * ECANCELED where sync() did not run), free s. NULL ok. */
void syncer_free(struct syncer *s);

#endif
