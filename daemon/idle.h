/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idle: the idle-exit setting. A daemon that a client started for its
 * user (client/autostart.c, python/ptxcache/autostart.py) is not a node
 * service: once nobody has used it for idle-exit seconds it stops, through
 * the same path as SIGTERM, and the next client starts a fresh one.
 */
#ifndef PTXCACHE_IDLE_H
#define PTXCACHE_IDLE_H

struct server;
struct idle;

/* Watch s once a second (its cfg->idle_exit_s is read at each tick, so a
 * reload may turn the exit on or off). The caller owns the result and
 * frees it with idle_free() before s's event base; NULL (out of memory)
 * means no idle exit, never an error. */
struct idle *idle_start(struct server *s);
/* Accepts NULL. */
void idle_free(struct idle *idle);

#endif
