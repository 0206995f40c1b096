/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flight: single flight, and what happens to a result.
 *
 * A miss (compile.c, cubin_req.c) joins the flight computing the same key
 * for the same tenant, or becomes a new one, registered in the server's
 * table at once so that identical requests join it during every step:
 *
 *   with the Redis tier on, it is asked first (fleet_get()): a value that
 *     verifies finishes the flight as if computed here; a miss takes the
 *     key's fleet lease, or waits for the node that holds it (l2_fleet.h);
 *     anything else (timeout, rejected value, breaker open) goes on to
 *   the pool (pool_submit()): the job waits its turn in its user's queue
 *     (users served in turn, worker.h), then a worker of the job's option
 *     set and tenant runs it; a queued job whose waiters have all gone is
 *     dropped.
 *
 * flight_finish() is the one place a result goes, whichever tier gave it:
 * counted; a portable cubin given its canonical paths (cubin_debug.c);
 * stored if deterministic, committed before anyone is answered (an
 * acknowledged result is durable), after confirmation under sharing =
 * confirm (confirm.h); published to Redis if confirmed (and, not yet
 * confirmed, for its own user alone: own_key() below); then every waiter
 * answered, each with its own source paths for a portable cubin, or sent
 * on to the cubin stage (IR to cubin), as the waiter's family said when it
 * joined (struct waiter_ops: this file calls no family); then a new entry
 * under sharing = confirm is queued for its confirmation in idle time (a
 * background job of the pool: a worker exec'd for it computes it again),
 * tier or not: after the answers, since the pool may start that worker at
 * once, and its spawn is no part of any reply; then the flight freed and a
 * stopping daemon told.
 *
 * No flight outlives server_run(): at the end, the pool ends those it
 * holds (pool_free()), and flight_abandon_all() those whose Redis lookup
 * was cancelled.
 */
#include "daemon/flight.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/confirm.h"
#include "daemon/l2_fleet.h"
#include "daemon/l2.h"
#include "daemon/log.h"
#include "daemon/tenant.h"

static unsigned bucket_of(const struct key *k)
{
	return ((unsigned)k->hash[0] << 8 | k->hash[1]) % FLIGHT_BUCKETS;
}

static void flight_unlink(struct server *s, struct flight *f)
{
	struct flight **pp = &s->flights[bucket_of(&f->key)];
	while (*pp != f)
		pp = &(*pp)->next;
	*pp = f->next;
}

void flight_dbg_free(struct flight_dbg *d)
{
	if (!d)
		return;
	dbg_view_free(&d->view);
	dbg_view_free(&d->canon);
	free(d->loose_components);
	free(d);
}

/* The loose keys compiled since start (s->seen_loose, master.h). */
static uint64_t key_prefix(const struct key *k)
{
	uint64_t v;
	memcpy(&v, k->hash, sizeof v);
	return v | 1;   /* never 0, the empty slot */
}

static void loose_seen_add(struct server *s, const struct key *k)
{
	if (s->seen_loose)
		s->seen_loose[key_prefix(k) % SEEN_SLOTS] = key_prefix(k);
}

int flight_loose_seen(const struct server *s, const struct key *k)
{
	return s->seen_loose && s->seen_loose[key_prefix(k) % SEEN_SLOTS] == key_prefix(k);
}

static void flight_finish(struct flight *f, const struct job_result *res,
			  int compiled);
static void confirm_in_background(struct server *s, const struct flight *f);

/* ---- a miss: join or start a flight --------------------------------- */

/* The stored entry for k, if it may answer c (confirm.h); 1 if so. */
int flight_lookup(struct conn *c, const struct key *k, struct store_result *hit)
{
	struct server *s = c->srv;

	if (store_get_lent(s->store, k->hash, hit) != 1)
		return 0;
	if (confirm_may_serve(s->sharing, hit, conn_tenant(c))) {
		store_note_user(s->store, k->hash, conn_tenant(c));
		return 1;
	}
	store_result_free(hit);
	memset(hit, 0, sizeof *hit);
	return 0;
}

/* The flight computing k that c may join: one for c's own tenant (a
 * result another tenant's worker computes is no answer for c yet). */
struct flight *flight_find(struct server *s, const struct key *k, const struct conn *c)
{
	for (struct flight *f = s->flights[bucket_of(k)]; f; f = f->next)
		if (memcmp(f->key.hash, k->hash, sizeof k->hash) == 0 && !f->background &&
		    (s->sharing == SHARING_TRUST || f->tenant == conn_tenant(c)))
			return f;
	return NULL;
}

int flight_add_waiter(struct flight *f, struct conn *c, uint64_t id,
		      const struct waiter_ops *ops, void *arg)
{
	struct waiter *wt = malloc(sizeof *wt);
	if (!wt)
		return -1;
	wt->conn = c;
	wt->id = id;
	wt->ops = ops;
	wt->arg = arg;
	wt->next = f->waiters;
	f->waiters = wt;
	conn_hold(c);
	/* Acknowledged at once: the client now knows the daemon is at it. */
	conn_send_progress(c, id, pool_job_running(&f->job) ? "running" : "queued");
	return 0;
}

void flight_conn_closed(void *arg, struct conn *c)
{
	struct server *s = arg;

	if (c->waiting && s->pool)
		pool_prune(s->pool);
}

void flight_progress(struct server *s)
{
	if (!s->nflights)
		return;
	/* conn_send_progress() closes nothing, so the table cannot change
	 * under the walk. */
	for (unsigned b = 0; b < FLIGHT_BUCKETS; b++)
		for (struct flight *f = s->flights[b]; f; f = f->next) {
			const char *state = pool_job_running(&f->job) ? "running" : "queued";
			for (struct waiter *wt = f->waiters; wt; wt = wt->next)
				conn_send_progress(wt->conn, wt->id, state);
		}
}

/* n bytes, for a message: "12.5 MiB". */
static const char *human(int64_t n, char *out, size_t size)
{
	if (n >= 1 << 20)
		snprintf(out, size, "%.1f MiB", (double)n / (1 << 20));
	else if (n >= 1 << 10)
		snprintf(out, size, "%.1f KiB", (double)n / (1 << 10));
	else
		snprintf(out, size, "%lld bytes", (long long)n);
	return out;
}

/* Not while the daemon stops (a new compile would outlive the shutdown
 * deadline), and not past the memory bounds, the user's and the daemon's:
 * compiles beyond a user's share wait their turn in the pool's queue
 * (worker.h), so memory is the only reason to refuse. A request that
 * finds nothing held is taken whatever its size (max-request bounds it). */
int flight_refuse_new(struct server *s, struct conn *c, uint64_t id, int64_t need)
{
	const struct server_config *cfg = s->cfg;
	char why[256], a[80], b[32];

	if (s->stopping) {
		conn_send_error(c, id, "unavailable", "the daemon is shutting down");
		return 1;
	}
	if (c->peer->held && c->peer->held + need > cfg->max_queued_bytes_per_uid)
		snprintf(why, sizeof why, "compiles of uid %u already hold %s of requests, queued "
			 "or running (max-queued-bytes-per-uid %s); retry later",
			 (unsigned)c->peer->uid, human(c->peer->held, a, sizeof a),
			 human(cfg->max_queued_bytes_per_uid, b, sizeof b));
	else if (s->held && s->held + need > cfg->max_queued_bytes)
		snprintf(why, sizeof why, "compiles already hold %s of requests, queued or "
			 "running (max-queued-bytes %s); retry later", human(s->held, a, sizeof a),
			 human(cfg->max_queued_bytes, b, sizeof b));
	else
		return 0;
	s->n.refused_jobs++;
	conn_who(c, a, sizeof a);
	log_info("refused a compile of %s: %s", a, why);
	conn_send_error(c, id, "busy", why);
	return 1;
}

/* ---- the flight's way through the tiers ----------------------------- */

/* The pool finished a flight's job. */
static void flight_done(struct pool_job *job, const struct job_result *res)
{
	flight_finish((struct flight *)((char *)job - offsetof(struct flight, job)), res, 1);
}

/* Whether any client still waits for a flight's queued job. */
static int flight_wanted(struct pool_job *job)
{
	const struct flight *f = (struct flight *)((char *)job - offsetof(struct flight, job));
	if (f->background) {
		/* Still one tenant's alone? (Another user's own compile may
		 * have confirmed it meanwhile, or it was evicted.) */
		struct store_result e;
		int r = store_peek(f->srv->store, f->key.hash, &e);
		int unconfirmed = r == 1 && e.trust == STORE_UNCONFIRMED;
		if (r == 1)
			store_result_free(&e);
		return unconfirmed;
	}
	for (const struct waiter *wt = f->waiters; wt; wt = wt->next)
		if (wt->conn->state != CONN_CLOSED)
			return 1;
	return 0;
}

/* Under sharing = confirm, Redis holds a key's confirmed value for
 * everyone under the key itself, and a result its tenant's worker alone
 * vouches for (not confirmed yet) for that tenant alone: under a key of
 * its own, the key with the tenant (the seal covers it, so that no copy
 * made in Redis moves a value from one to the other), in a space that
 * names the tenant. So a fleet compiles a user's kernel once for that
 * user without waiting for its confirmation, as artifacts are shared
 * (a uid names the same person on every node, ARCHITECTURE.md). */
struct own_key {
	struct key key;
	char space[L2_SPACE_MAX + 1];
};

static int own_key(const struct flight *f, struct own_key *o)
{
	/* f->own_name: the uid's text on the main socket ("u1000", the keys of a
	 * daemon without tenants), the tenant's name with it on another
	 * ("NAME/u1000": every node numbers its tenants its own way, but
	 * names them alike). */
	snprintf(o->space, sizeof o->space, "own:%s:", f->own_name);
	const struct key_part parts[] = {
		{ "kind", "own" }, { "tenant", f->own_name }, { "key", f->key.hex },
	};
	return key_derive(parts, sizeof parts / sizeof parts[0], &o->key, NULL);
}

static void flight_l2_done(void *arg, enum fleet_answer a, const struct l2_value *v);

/* Ask the tier for f: under sharing = confirm, the confirmed value (a
 * lookup), then, once that missed, its tenant's own (with the fleet's
 * lease: f->own); else the value, with the lease. 1: the tier will
 * answer; 0: go to the pool. */
static int flight_ask_tier(struct server *s, struct flight *f)
{
	int64_t wait_ms = (int64_t)s->cfg->pool.job_timeout_s * 1000;
	int looked_up = f->fw != NULL;  /* the value for everyone: missed */
	struct own_key o;

	fleet_end(f->fw, 0);
	f->fw = NULL;
	if (!s->l2)
		return 0;
	if (s->sharing != SHARING_CONFIRM) {
		f->fw = fleet_get(s->fleet, NULL, f->key.hash, 1, wait_ms, flight_l2_done, f);
	} else if (!looked_up) {
		f->fw = fleet_get(s->fleet, NULL, f->key.hash, 0, wait_ms, flight_l2_done, f);
	} else if (own_key(f, &o) == 0) {
		f->own = 1;
		f->fw = fleet_get(s->fleet, o.space, o.key.hash, 1, wait_ms, flight_l2_done, f);
	}
	return f->fw != NULL;
}

/* The tier answered for f: a verified value of the right stage finishes
 * the flight as a hit; a miss of the confirmed value asks for the
 * tenant's own; anything else (this node's turn to produce) sends it to
 * the pool. */
static void flight_l2_done(void *arg, enum fleet_answer a, const struct l2_value *v)
{
	struct flight *f = arg;

	/* Sealed by a node of the cluster, so authentic, but still a value
	 * from outside: a status this daemon would never have stored (another
	 * version, another bug) is no answer; compile instead. */
	if (a == FLEET_VALUE && v->kind == (int)f->kind &&
	    v->status >= 0 && (f->kind == STORE_CUBIN ? v->status <= 255 :
			       JOB_CACHEABLE(v->status))) {
		struct job_result res = {
			.status = f->kind == STORE_CUBIN && v->status > 0 ? JOB_ERROR :
				  (enum job_status)v->status,
			.exit_code = f->kind == STORE_CUBIN ? v->status : 0,
			.output = v->data, .output_len = v->data_len,
			.log = v->log, .log_len = v->log_len,
		};
		flight_finish(f, &res, 0);
		return;
	}
	if (a == FLEET_MISS && flight_ask_tier(f->srv, f))
		return;
	pool_submit(f->srv->pool, &f->job);
}

/* Start a flight that has its key, job and first waiter: register it for
 * single flight (which so holds across both tiers), then ask Redis, or
 * the pool directly. */
static void flight_register(struct server *s, struct flight *f)
{
	f->srv = s;
	unsigned b = bucket_of(&f->key);
	f->next = s->flights[b];
	s->flights[b] = f;
	s->nflights++;
	f->job.done = flight_done;
	f->job.wanted = flight_wanted;
	f->job.tenant = s->sharing == SHARING_TRUST ? POOL_ANY_TENANT : f->tenant;
}

void flight_launch(struct server *s, struct flight *f, struct conn *c)
{
	f->peer = c->peer;
	f->held = (int64_t)f->job.frame.len;
	s->held += f->held;
	if (f->peer) {
		f->peer->jobs++;
		f->peer->held += f->held;
	}
	f->tenant = conn_tenant(c);
	char uid[24];
	snprintf(uid, sizeof uid, "u%u", (unsigned)c->uid);
	tenant_qualify(&c->tenant, uid, f->own_name, sizeof f->own_name);
	flight_register(s, f);
	/* Fair shares and max-jobs-per-uid: per identity, so that a tenant's
	 * root is not another's. */
	f->job.owner = conn_tenant(c);
	if (!flight_ask_tier(s, f))
		pool_submit(s->pool, &f->job);
}

/* ---- its result ----------------------------------------------------- */

/* A flight has its result, compiled here or fetched from the Redis tier:
 * store it if deterministic, publish what we compiled, then answer every
 * waiter. Storing first means an acknowledged result is durable. */
static void flight_finish(struct flight *f, const struct job_result *res,
			  int compiled)
{
	struct server *s = f->srv;
	int published = 0, confirm = 0;

	if (compiled && !res->not_run && f->background) {
		s->n.confirm_compiles++;
	} else if (compiled && !res->not_run) {
		s->n.compiles++;
		if (res->status != JOB_OK)
			s->n.compile_errors++;
	}
	/* An assembler's failure is deterministic (a syntax error, say) and
	 * cached with its exit status as the entry's status; its death by a
	 * signal, a timeout or a missing binary are not. */
	int cubin = f->kind == STORE_CUBIN;
	int status = res->status;
	if (cubin && status == JOB_ERROR)
		status = res->exit_code ? res->exit_code : 255;
	/* A portable -lineinfo cubin is stored with the canonical paths and
	 * stamps (what came from the cache or Redis has them already); one
	 * whose line table is not what cubin_debug.c predicts is not stored,
	 * and answers only the clients whose paths it names. */
	const char *data = res->output;
	size_t data_len = res->output_len;
	struct buf canon = BUF_INIT;
	int unportable = 0;
	if (f->dbg && compiled && res->status == JOB_OK) {
		const char *why = "";
		if (dbg_rewrite(res->output, res->output_len, &f->dbg->view, &f->dbg->canon,
				&canon, &why) == 0) {
			data = canon.data;
			data_len = canon.len;
		} else {
			unportable = 1;
			s->n.lineinfo_unportable++;
			log_warn("cubin %.16s: line table not as predicted (%s); not cached",
				 f->key.hex, why);
		}
	}
	if (unportable || res->not_run) {
		/* nothing stored: a job that never reached a compiler (its
		 * worker could not start, the daemon is stopping) says nothing
		 * about its input */
	} else if (cubin ? res->status == JOB_OK || res->status == JOB_ERROR
			 : JOB_CACHEABLE(res->status)) {
		struct buf err = BUF_INIT;
		/* Computed here: its producer is the flight's tenant, whatever
		 * the policy, so that a site that moves from trust to confirm
		 * serves it to nobody else before another user's worker confirms
		 * it (under trust everyone is served it anyway). From the Redis
		 * tier: confirmed by the node that published it, or its
		 * tenant's own (own_key()), as if computed here. */
		int trusted = !compiled && !f->own;
		struct store_entry e = {
			.kind = f->kind,
			.status = status,
			.data = data,
			.data_len = data_len,
			.log = res->log,
			.log_len = res->log_len,
			.components = f->components,
			.arch = f->arch,
			.compile_us = res->compile_us,
			.producer = trusted ? -1 : f->tenant,
			.trust = trusted ? STORE_CONFIRMED : STORE_UNCONFIRMED,
		};
		enum settle v = trusted || s->sharing != SHARING_CONFIRM ? SETTLE_STORE :
				confirm_settle(s->store, f->key.hash, f->key.hex, &e);
		if (v == SETTLE_CONFIRMED)
			s->n.confirmations++;
		else if (v == SETTLE_MISMATCH)
			s->n.confirm_mismatches++;
		int kept = v == SETTLE_CONFIRMED;
		if (v == SETTLE_STORE && !f->background) {
			kept = store_put(s->store, f->key.hash, &e, &err) == 0;
			if (!kept) {
				s->n.store_errors++;
				log_warn("%s", err.data ? err.data : "cannot store entry");
			}
		}
		/* The entry is now its waiters' too (manage.c's view). */
		for (struct waiter *wt = f->waiters; kept && !f->background && wt; wt = wt->next)
			store_note_user(s->store, f->key.hash, conn_tenant(wt->conn));
		buf_free(&err);
		/* To the Redis tier: for everyone, only what no single tenant's
		 * worker alone vouches for (confirm.h); under sharing = confirm,
		 * for its tenant alone what is new, for the fleet's nodes that
		 * wait on its lease (own_key(); never what a mismatch
		 * quarantined). */
		const struct l2_value lv = {
			.kind = f->kind, .status = status,
			.data = data, .data_len = data_len,
			.log = res->log, .log_len = res->log_len,
		};
		struct own_key o;
		if (compiled && s->l2 && (s->sharing != SHARING_CONFIRM || v == SETTLE_CONFIRMED)) {
			l2_put(s->l2, f->key.hash, &lv);
			published = 1;
		}
		if (compiled && s->l2 && f->own && v != SETTLE_MISMATCH && own_key(f, &o) == 0) {
			l2_put_in(s->l2, o.space, o.key.hash, &lv);
			published = 1;
		}
		if (compiled && s->sharing == SHARING_CONFIRM && v == SETTLE_STORE &&
		    !f->background) {
			/* New, one tenant's alone: confirmed in idle time, so
			 * that the next user hits (and, with the tier on, so
			 * that it may be published); queued once every waiter
			 * is answered (below). */
			confirm = 1;
		}
		if (f->dbg && compiled && res->status == JOB_OK && !f->background) {
			loose_seen_add(s, &f->dbg->loose);
			/* lineinfo-loose: this client's own cubin also answers
			 * the same kernel under other paths of any length. */
			if (s->cfg->lineinfo_loose) {
				e.data = res->output;
				e.data_len = res->output_len;
				e.components = f->dbg->loose_components;
				if (store_put(s->store, f->dbg->loose.hash, &e, &err) < 0) {
					s->n.store_errors++;
					log_warn("%s", err.data ? err.data : "cannot store entry");
				} else {
					for (struct waiter *wt = f->waiters; wt; wt = wt->next)
						store_note_user(s->store, f->dbg->loose.hash,
								conn_tenant(wt->conn));
				}
				buf_free(&err);
			}
		}
	} else if (f->background && res->not_run) {
		log_debug("confirmation of %.16s not run: %.*s", f->key.hex,
			  (int)res->log_len, res->log ? res->log : "");
	} else {
		log_warn("%s of %.16s failed: %.*s", f->background ? "confirmation" : "compile",
			 f->key.hex, (int)res->log_len, res->log ? res->log : "");
	}
	fleet_end(f->fw, published);
	flight_unlink(s, f);
	s->nflights--;
	s->held -= f->held;
	if (f->peer) {
		f->peer->jobs--;
		f->peer->held -= f->held;
		peer_put(s, f->peer);
	}
	/* Each waiter answered as its family said when it joined. */
	const struct flight_result r = {
		.res = res, .status = status, .data = data, .data_len = data_len,
		.unportable = unportable,
	};
	while (f->waiters) {
		struct waiter *wt = f->waiters;
		f->waiters = wt->next;
		wt->ops->answer(f, wt, &r);
		if (wt->ops->drop)
			wt->ops->drop(wt->arg);
		conn_unhold(wt->conn);
		free(wt);
	}
	if (confirm)
		confirm_in_background(s, f);
	buf_free(&f->job.frame);
	free(f->job.optset);
	free(f->components);
	free(f->arch);
	flight_dbg_free(f->dbg);
	free(f);
	buf_free(&canon);
	server_maybe_stop(s);
}

/* Under sharing = confirm, a new entry is confirmed in idle time: the same
 * job again, in a worker exec'd for it alone (confirm.h), as a background
 * job of the pool, which runs it only on a core the foreground leaves
 * (worker.h). Then the next user hits, and with the tier on it is
 * published. One confirmation of a key at a time. */
static void confirm_in_background(struct server *s, const struct flight *f)
{
	if (s->stopping)
		return;
	for (struct flight *o = s->flights[bucket_of(&f->key)]; o; o = o->next)
		if (o->background && !memcmp(o->key.hash, f->key.hash, sizeof f->key.hash))
			return;
	struct flight *b = calloc(1, sizeof *b);

	if (!b || buf_append(&b->job.frame, f->job.frame.data, f->job.frame.len) < 0 ||
	    !(b->job.optset = strdup(f->job.optset))) {
		if (b)
			buf_free(&b->job.frame);
		free(b);
		return;         /* unconfirmed, so unpublished: no harm */
	}
	/* A portable cubin: the same paths to write out of its result, so
	 * that it compares with the stored canonical bytes. */
	if (f->dbg && (!(b->dbg = calloc(1, sizeof *b->dbg)) ||
		       dbg_view_copy(&f->dbg->view, &b->dbg->view) < 0 ||
		       dbg_view_copy(&f->dbg->canon, &b->dbg->canon) < 0)) {
		flight_dbg_free(b->dbg);
		buf_free(&b->job.frame);
		free(b->job.optset);
		free(b);
		return;
	}
	b->key = f->key;
	b->kind = f->kind;
	b->background = 1;
	b->tenant = confirm_oneshot_tenant();
	flight_register(s, b);
	b->job.background = 1;
	pool_submit(s->pool, &b->job);
}

void flight_abandon_all(struct server *s)
{
	static const char why[] = "the daemon is shutting down";
	struct job_result res = { .status = JOB_UNAVAILABLE, .log = why,
				  .log_len = sizeof why - 1 };

	for (unsigned b = 0; b < FLIGHT_BUCKETS; b++)
		while (s->flights[b])
			flight_finish(s->flights[b], &res, 0);
}
