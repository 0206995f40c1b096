/* SPDX-License-Identifier: Apache-2.0 */
/*
 * confirm: tenants, and who may be served what (the `sharing` setting).
 *
 * A worker that LLVM or ptxas has parsed hostile input in may be in the
 * attacker's hands; the sandbox keeps it from reaching anything but its
 * replies. What it could still do is answer wrongly. So:
 *
 *   - every compile runs for a tenant (the requesting identity: its uid,
 *     and off the main socket its socket's tenant, packed into one number
 *     by conn_tenant(); tenant.h), and a worker serves one tenant from
 *     its exec to its end (worker.c);
 *   - an entry records its producer, the tenant whose worker computed it;
 *   - sharing = confirm (the default): an entry answers its producer at
 *     once, and another user only once it is confirmed: computed again, for
 *     that user, by a worker that never ran a job of the producer, with the
 *     same bytes (codegen and ptxas are deterministic). Other bytes are an
 *     alarm: the entry is quarantined (its producer alone is served from
 *     it), the mismatch logged with both uids and counted, and the second
 *     user gets its own result. One user alone pays nothing in the
 *     foreground; each new entry costs one extra compile, once, in idle
 *     time;
 *   - sharing = trust: everyone is served every entry (one trusted team);
 *   - sharing = separate: every user has entries of their own (the key
 *     holds the uid), as namespace-per-uid.
 *
 * A new entry is confirmed in the background, in idle time, by a worker
 * exec'd for that one job (a one-shot tenant of its own; worker.h: it
 * runs only on a core no compile wants, so it never delays a reply), so
 * that the next user on the node hits; when a user's own compile comes
 * first, it confirms instead and the background job is dropped. The Redis
 * tier carries only confirmed entries for everyone, so that no node ever
 * serves another user bytes one tenant's worker alone produced: an entry
 * is published once confirmed; such a value read from Redis is stored as
 * confirmed. A new entry also goes to the tier for its tenant alone, under
 * a key derived from the tenant (flight.c), and is stored as that
 * tenant's own, unconfirmed, by the node that reads it.
 *
 * What confirmation cannot catch: two colluding users (each confirms the
 * other's bytes), and a kernel whose own input takes the compiler over
 * deterministically (every worker computes the same wrong bytes for it;
 * everyone who asks for that very input gets what it makes of itself).
 */
#ifndef PTXCACHE_CONFIRM_H
#define PTXCACHE_CONFIRM_H

#include <stdint.h>
#include <sys/types.h>

#include "daemon/store.h"

enum sharing {
	SHARING_CONFIRM,
	SHARING_TRUST,
	SHARING_SEPARATE,
};

/* "confirm", "trust" or "separate"; -1 for anything else. */
int sharing_parse(const char *s, enum sharing *out);

/* Tenants that are no uid: one per background confirmation, each used
 * for a single job in a worker exec'd for it. */
int64_t confirm_oneshot_tenant(void);

/* Whether entry e may answer uid now. */
int confirm_may_serve(enum sharing pol, const struct store_result *e, int64_t uid);

enum settle {
	SETTLE_STORE,           /* new: store it with its producer */
	SETTLE_CONFIRMED,       /* another tenant's entry had the same bytes:
	                           it is now marked confirmed */
	SETTLE_MISMATCH,        /* another tenant's entry has other bytes: it
	                           is now quarantined (logged, counted) */
	SETTLE_QUARANTINED,     /* the entry is quarantined already */
};

/*
 * A deterministic result e (its producer the tenant it ran for) is in for
 * key under sharing = confirm: compare it with what the store holds and
 * settle (see enum settle). The caller stores e on SETTLE_STORE only, and
 * answers its waiters with e whatever the verdict. uid_name is for the
 * alarm's log line.
 */
enum settle confirm_settle(struct store *s, const unsigned char key[32],
			   const char *key_hex, const struct store_entry *e);

#endif
