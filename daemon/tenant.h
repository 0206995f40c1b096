/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant: tenants by socket. Besides its main socket the daemon serves one
 * socket per tenant (`tenant-dir = DIR`, `tenants = NAME,...`):
 * DIR/NAME.sock, bound as the main socket is (tenant_listen()), added and
 * removed on SIGHUP (tenants_configure()). A connection's tenant is the
 * socket it came in on, fixed when it is accepted: no byte of a request
 * names it. The main socket is tenant "-" (number 0), whose identities,
 * keys and Redis keys are those of a daemon without tenants, byte for
 * byte.
 *
 * A connection's identity is (tenant, uid). Where the daemon keys on a
 * number (a flight's and a worker's tenant, an entry's producer, an
 * artifact's scope, the fair queue's owner), that number is
 * tenant_number(tenant, what it was): unchanged for tenant 0, and for
 * any other tenant in a range of its own, which no uid, group, one-shot
 * confirmation tenant (confirm.h) or other tenant's number reaches. A
 * tenant's number is its name's row in the store (store_tenant_id()):
 * stable across restarts and reloads, never reused for another name, so
 * an entry a removed tenant produced is never another's. Where a key or a
 * Redis key holds text, the tenant's name goes in (tenant_qualify()),
 * never its number, so that every node of a fleet agrees on it.
 *
 * Names are 1 to 32 bytes of [a-z0-9-] (tenant_name_valid()): no '/', no
 * '.', nothing that could make DIR/NAME.sock a path outside DIR, and
 * nothing that could read as another tenant's name in a key ("-" itself
 * is the main socket's, and no configured tenant may be called so).
 */
#ifndef PTXCACHE_TENANT_H
#define PTXCACHE_TENANT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/buf.h"

struct event;
struct event_base;
struct evconnlistener;
struct store;

#define TENANT_NAME_MAX 32
#define TENANT_MAIN "-"
/* The most tenants one daemon serves: each is a listening socket, a
 * descriptor beside the connections' (a kubelet runs 110 pods a node by
 * default). */
#define TENANTS_MAX 256

/* A tenant's numbers lie TENANT_STRIDE apart: every number the daemon
 * keys on lies in [-2^32 - 1, 2^32) for tenant 0 (uids, -1, -2 - gid), so
 * each tenant's range is 2^33 + 1 wide, and the highest tenant number
 * (TENANT_ID_MAX) stays below the one-shot tenants (confirm.h, 2^62). */
#define TENANT_STRIDE ((int64_t)1 << 34)
#define TENANT_ID_MAX (((int64_t)1 << 27) - 1)

/* A tenant: its name, and its number (0: the main socket). */
struct tenant {
	int64_t id;
	char name[TENANT_NAME_MAX + 1];
};

/* The main socket's: "-", 0. */
extern const struct tenant tenant_main;

/* What the daemon keys on (a uid, a scope) for tenant t: base itself for
 * tenant 0. base must lie in [-2^32 - 1, 2^32). */
static inline int64_t tenant_number(const struct tenant *t, int64_t base)
{
	return base + t->id * TENANT_STRIDE;
}

/* Whether name[0..n) is a valid tenant name (1 to 32 of [a-z0-9-]). */
int tenant_name_valid(const char *name, size_t n);

/* "u1000" as tenant t names it in keys, Redis keys and logs: itself for
 * the main socket, "NAME/u1000" for tenant NAME ('/' is in no name, so
 * no two tenants' texts meet). out holds at least TENANT_NAME_MAX + 2 +
 * strlen(local) bytes. */
void tenant_qualify(const struct tenant *t, const char *local, char *out, size_t n);

/* What a socket the daemon makes is given (socket-mode, socket-group). */
struct socket_perm {
	unsigned mode;          /* e.g. 0600 */
	long gid;               /* its group; -1: the daemon's own */
};

/* Bind a listening Unix socket at path, as every socket of the daemon is:
 * perm's mode and group (bound 0600, then widened: never wider than asked
 * for, not even for a moment), its directory made (0700 for the last
 * part) if missing; a live socket of another daemon is never taken over.
 * The descriptor (nonblocking, close-on-exec), or -1 with a message in
 * err. */
int tenant_listen(const char *path, const struct socket_perm *perm, struct buf *err);

/* From a listener's error callback: accept() on l failed (out of
 * descriptors or memory), and l, readable still, would spin the loop.
 * It is turned off (its connections wait in the backlog) until resume,
 * an event of the caller's that turns it on again where it should be,
 * fires in a tenth of a second; logged at most once a minute. */
void tenant_accept_failed(struct evconnlistener *l, struct event *resume, const char *path);

/* mkdir -p path, its last component 0700. 0, or -1 with err set. */
int tenant_make_dir(const char *path, struct buf *err);

/* The tenants' sockets. accept(arg, fd, t) for each connection accepted
 * on tenant t's socket (t borrowed for the call; fd the caller's). */
struct tenants;
typedef void (*tenant_accept_fn)(void *arg, int fd, const struct tenant *t);

/* None yet, accepting nothing until tenants_enable(). NULL if memory is
 * short. store gives the tenants their numbers; perm (copied) is what
 * their sockets are made with, the main socket's. */
struct tenants *tenants_new(struct event_base *base, struct store *store,
			    const struct socket_perm *perm, tenant_accept_fn accept,
			    void *arg);

/*
 * Serve the tenants in list (comma- or space-separated names) under dir:
 * sockets of tenants that stay are kept, new ones bound, those of tenants
 * no longer listed (or all, where dir changed) closed and removed. All or
 * nothing: a name that is not valid, twice or too many, a dir missing
 * where names are given, a path too long or a socket that cannot be bound
 * leaves the sockets as they were and returns -1 with a message in err
 * naming it; else 0. Both empty: no tenants.
 */
int tenants_configure(struct tenants *ts, const char *dir, const char *list,
		      struct buf *err);

/* Accept connections on every tenant's socket (on: 1) or leave them in
 * the backlog (0), like the main socket's during warm-up. */
void tenants_enable(struct tenants *ts, int on);

/* Whether the tenant numbered id is served (the main socket's always is):
 * a connection of one that is not was accepted before a reload removed
 * it. */
int tenants_serves(const struct tenants *ts, int64_t id);

/* How many tenants' sockets are open. */
int tenants_count(const struct tenants *ts);

/* Close and remove every tenant's socket, free it all. NULL ok. */
void tenants_free(struct tenants *ts);

#endif
