/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_fleet: a key produced once in the fleet, not once per node.
 *
 * A request family whose key missed locally asks the shared tier through
 * fleet_get() instead of l2_get_in(). If the tier has the value, it is
 * the answer. If not and the caller would produce it, the node takes the
 * key's fleet lease in Redis (l2_claim_in()): won, it produces (and the
 * lease is renewed while it does); held by another node, it waits for
 * that node's value in the tier, asking again at growing intervals, and
 * takes the lease over if it lapses (its holder died, stopped, or was cut
 * off from the tier). A wait never outlasts its own bound; a node that
 * cannot reach the tier produces on its own. Nothing a lease says is
 * trusted: a value is still believed only if its seal verifies (l2.c).
 */
#ifndef PTXCACHE_L2_FLEET_H
#define PTXCACHE_L2_FLEET_H

#include <stdint.h>

struct event_base;
struct fleet;
struct fleet_wait;
struct l2;
struct l2_value;

enum fleet_answer {
	FLEET_VALUE,    /* the tier's value: v */
	FLEET_PRODUCE,  /* produce it: with the fleet's lease, or on its own */
	FLEET_MISS,     /* nothing in the tier (the caller would not produce) */
};

/* Called once per fleet_get(), always from the loop (never inside
 * fleet_get()); v is valid during the call only. */
typedef void (*fleet_cb)(void *arg, enum fleet_answer a, const struct l2_value *v);

struct fleet_counters {
	int64_t leases;         /* leases taken at once */
	int64_t waits;          /* misses that found another node's lease */
	int64_t wait_hits;      /* ... and then its value */
	int64_t takeovers;      /* ... or took its lease over when it lapsed */
	int64_t wait_timeouts;  /* ... or produced on their own at their bound */
	int64_t alone;          /* produced without a lease (tier unreachable) */
};

/* l2 is where the server keeps its tier (NULL while off; a reload may
 * replace it). lease_ms: a lease's lifetime without renewal, so the bound
 * on a takeover after its holder stops; 0: no leases (produce at once). */
struct fleet *fleet_new(struct event_base *base, struct l2 **l2, int64_t lease_ms);
void fleet_set_lease_ms(struct fleet *f, int64_t lease_ms);
/* After l2_free() (which calls back no more) and after every caller has
 * ended its waits: frees what is left. NULL ok. */
void fleet_free(struct fleet *f);

/* Look key (under space, as l2_get_in()) up in the tier; with produce,
 * a miss takes or waits on its lease, for at most wait_ms. NULL (out of
 * memory): no callback will come; produce on your own. */
struct fleet_wait *fleet_get(struct fleet *f, const char *space, const unsigned char key[32],
			     int produce, int64_t wait_ms, fleet_cb cb, void *arg);
/* The caller is done with w (answered or not: no callback comes after
 * this). published: its value went to the tier, so a lease it holds is
 * left to lapse (whoever waits finds the value first); otherwise the lease
 * is dropped now, for a waiting node to take. */
void fleet_end(struct fleet_wait *w, int published);

void fleet_counters(const struct fleet *f, struct fleet_counters *c);

#endif
