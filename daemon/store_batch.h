/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_batch: group commit of store puts. Puts staged while the loop
 * dispatches what is ready (put_batch_add()) are written by one event
 * that runs after those, in one transaction (store_batch_begin()), and
 * only then answered, each with its own outcome: a put is never answered
 * "stored" before it is committed. A put that fails in the batch (over
 * its scope's share, say) fails alone; a batch whose commit fails (or
 * that a full disk took back) is redone put by put, each as store_put()
 * alone would do it (the full disk's retry included), so no put is
 * lost or acknowledged falsely because of another.
 *
 * Why: a JIT's compile makes thousands of small puts (Inductor's
 * max-autotune, 4,715 in one compile), and one commit each is a write(2)
 * of WAL frames and a lock each; several clients' puts at once share one.
 */
#ifndef PTXCACHE_STORE_BATCH_H
#define PTXCACHE_STORE_BATCH_H

#include "daemon/store.h"

struct event_base;
struct put_batch;

/* stored: 1 if committed; else err says why (borrowed for the call). */
typedef void (*put_done_fn)(void *arg, int stored, const char *err);

/* NULL if memory is short. */
struct put_batch *put_batch_new(struct event_base *base, struct store *store);

/* Stage a put of key's entry e (the struct copied; its data, log,
 * components, arch and ns are the caller's to keep until done). done(arg)
 * runs once it is committed or failed: from the loop, never within this
 * call. -1 if memory is short (done never runs then). */
int put_batch_add(struct put_batch *b, const unsigned char key[32],
		  const struct store_entry *e, put_done_fn done, void *arg);

/* Commits made (one per batch, one per put written alone). */
int64_t put_batch_commits(const struct put_batch *b);

/* Commit and answer what is staged now (at a stop). NULL ok. */
void put_batch_flush(struct put_batch *b);

/* Flush, then free. NULL ok. */
void put_batch_free(struct put_batch *b);

#endif
