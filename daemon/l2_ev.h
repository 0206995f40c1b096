/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_ev: hiredis on the master's libevent loop (l2_ev.c), for the tier's
 * connection layer l2_conn.c.
 */
#ifndef PTXCACHE_L2_EV_H
#define PTXCACHE_L2_EV_H

#include <stdint.h>

#include <event2/event.h>
#include <hiredis/async.h>

/* Attach ac to base, its reader guarded: a reply larger than any may be
 * is handed to too_long, which ends the connection (redisAsyncFree()).
 * 0, or -1 (ac untouched: the caller frees it). */
int ev_attach(redisAsyncContext *ac, struct event_base *base,
	      void (*too_long)(redisAsyncContext *ac));

/* ac's progress: read events and writes that shrank its output buffer
 * (0 for NULL or no adapter), compared across a command's timer. */
uint64_t progress_of(const redisAsyncContext *ac);
/* The bytes in ac's kernel send queue (TIOCOUTQ), or -1. */
int outq_of(const redisAsyncContext *ac);
/* The bytes waiting to be read on ac (FIONREAD), or 0. */
int inq_of(const redisAsyncContext *ac);

#endif
