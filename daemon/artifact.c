/* SPDX-License-Identifier: Apache-2.0 */
/*
 * artifact: the JIT's own cache entries, per scope, produced once across
 * processes; see artifact.h for the interface and proto/PROTOCOL.md for the
 * requests.
 *
 * Design:
 *  - An artifact is stored like any entry (store.c: zstd, checksum on
 *    every read, commit before the reply, LRU under the cap) with kind
 *    STORE_ARTIFACT, under key = key_derive(kind, scope, namespace, key):
 *    a scope's entry has a key no other scope can ask for, so the store
 *    and the Redis tier need no access check of their own. The daemon
 *    cannot recompute these bytes (they are the client's), which is why
 *    they never cross a scope: the scope is chosen here, from the
 *    connection's SO_PEERCRED uid and groups and the socket it came in on
 *    (its tenant, tenant.h), never by the client. Off the main socket the
 *    key holds the tenant's name too, and the scope's number is the
 *    tenant's (tenant_number()): no two tenants' scopes meet, in the store
 *    or in Redis, whatever uid or group their clients share.
 *
 *  - One compile across processes: a get that misses with `lease` makes
 *    its caller the producer of that key (a slot: struct slot, found by
 *    key). Gets of the same key wait on the slot until the producer's put
 *    (they get its value), or the lease ends without one. A producer that
 *    releases its lease will not store the entry (the JIT chose not to
 *    cache it, or its compile failed): every waiter is answered with a
 *    miss and compiles for itself. A producer whose connection closed, or
 *    whose lease_timeout passed, may just have died: the oldest waiter that
 *    asked for a lease becomes the producer, and waiters that did not ask
 *    are answered with a miss. Every waiter has its own
 *    deadline (wait_ms, capped by wait_s), so nothing waits forever, and a
 *    progress frame a second, so its client can tell a wait from silence.
 *
 *  - With the Redis tier on, a local miss first asks Redis (the slot then
 *    has no producer yet; gets of the same key wait on it as on a lease).
 *    A value from Redis is sealed like every other (l2.c), and opened and
 *    verified whole before it is seen here; its waiters are answered first
 *    (on_fleet()), then it is stored locally. Puts publish in the background,
 *    under a Redis key that names the scope.
 *
 *  - Puts are staged, not written at once (store_batch.h): the puts of one
 *    turn of the loop share one commit, and each is answered, published
 *    and handed to its slot's waiters once committed (put_done()), with
 *    the slot as it is then.
 *
 *  - Bounds: a scope holds at most max_leases slots; a connection waits on
 *    at most MAX_WAITS_PER_CONN gets; values are at most max_value bytes
 *    (and the store refuses one over a scope's share of the cache).
 */
#include "daemon/artifact.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "daemon/config.h"
#include "daemon/l2_fleet.h"
#include "daemon/key.h"
#include "daemon/l2.h"
#include "daemon/log.h"
#include "daemon/master.h"
#include "daemon/store_batch.h"
#include "daemon/store.h"
#include "daemon/syncer.h"
#include "daemon/tenant.h"
#include "proto/frame.h"
#include "proto/msg.h"

#define NS_MAX 32
#define KEY_MAX 1024
#define SLOT_BUCKETS 1024
#define MAX_WAITS_PER_CONN 256
#define MAX_GROUPS 64
/* A value from the tier this large (a blob file's, BLOB_MIN) goes to its
 * waiters from a sealed memfd; a smaller one from memory. */
#define ANSWER_FD_MIN BLOB_MIN

struct waiter {
	struct artifacts *a;
	struct conn *conn;
	uint64_t id;
	int want_lease;
	int want_fd;            /* the get asked for a descriptor */
	struct event *deadline;
	struct slot *slot;
	struct waiter *next;
};

/* A scope: its number (the store's scope column; lease and share
 * counts), and its text: a key's components, Redis's space, logs. */
struct scope {
	int64_t id;
	char tenant[TENANT_NAME_MAX + 1];       /* "" on the main socket */
	char base[12];                          /* "u1000", "g2000", "all" */
	char name[TENANT_NAME_MAX + 13];        /* base, or "NAME/base" */
};

/* A key being produced (a lease) or looked up in Redis, and its waiters. */
struct slot {
	unsigned char key[32];
	struct scope scope;
	char ns[NS_MAX + 1];
	struct conn *holder;    /* the producer; NULL while Redis is asked */
	uint64_t token;         /* the holder's lease */
	struct event *expiry;   /* the lease's bound */
	int fetching;           /* the tier is asked (fleet_get()) */
	struct fleet_wait *fw;  /* the tier's lookup, and the fleet's lease */
	int published;          /* its value went to the tier */
	struct waiter *waiters; /* oldest first */
	struct artifacts *a;
	struct slot *next;      /* bucket chain */
	struct slot *prev_all, *next_all;
};

/* Slots per scope, for max_leases. Few scopes are active at once. */
struct scope_count {
	int64_t scope;
	int slots;
	struct scope_count *next;
};

struct artifacts {
	struct event_base *base;
	struct store *store;
	struct l2 **l2;
	struct fleet *fleet;
	struct artifact_config cfg;
	gid_t groups[MAX_GROUPS];       /* cfg.groups, resolved */
	int ngroups;
	struct slot *buckets[SLOT_BUCKETS];
	struct slot *all;               /* every slot, for connection close */
	struct scope_count *scopes;
	uint64_t next_token;
	struct artifact_counters n;
	struct put_batch *puts;         /* group commit (store_batch.h) */
	struct syncer *sync;            /* spooled files synced off the loop */
};

/* ---- scopes and names ------------------------------------------------- */

static void scope_base_name(int64_t scope, char *out, size_t n)
{
	if (scope == ARTIFACT_SCOPE_ALL)
		snprintf(out, n, "all");
	else if (scope < 0)
		snprintf(out, n, "g%u", (unsigned)(-2 - scope));       /* a gid */
	else
		snprintf(out, n, "u%u", (unsigned)scope);              /* a uid */
}

int artifact_ns_valid(const char *ns, size_t n)
{
	if (n < 1 || n > NS_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = ns[i];
		int alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
		if (!alnum && (i == 0 || (ch != '.' && ch != '_' && ch != '-')))
			return 0;
	}
	return 1;
}

/* Keys are printable ASCII: they appear in logs, listings and JSON. */
static int key_valid(const char *k, size_t n)
{
	if (n < 1 || n > KEY_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (k[i] < 0x20 || k[i] > 0x7e)
			return 0;
	return 1;
}

/* Within c's tenant: the first configured group the peer belongs to (its
 * primary group or one of SO_PEERGROUPS), else its uid; everyone under
 * sharing = trust. */
static int64_t base_scope(struct artifacts *a, struct conn *c)
{
	if (a->cfg.trust)
		return ARTIFACT_SCOPE_ALL;
	for (int g = 0; g < a->ngroups; g++)
		for (int i = -1, n = conn_groups(c); i < n; i++)
			if ((i < 0 ? c->gid : c->groups[i]) == a->groups[g])
				return ARTIFACT_SCOPE_GROUP(a->groups[g]);
	return (int64_t)c->uid;
}

static void scope_of(struct artifacts *a, struct conn *c, struct scope *sc)
{
	int64_t base = base_scope(a, c);

	memset(sc, 0, sizeof *sc);
	sc->id = tenant_number(&c->tenant, base);
	if (c->tenant.id != 0)
		snprintf(sc->tenant, sizeof sc->tenant, "%s", c->tenant.name);
	scope_base_name(base, sc->base, sizeof sc->base);
	tenant_qualify(&c->tenant, sc->base, sc->name, sizeof sc->name);
}

int64_t artifact_scope(struct artifacts *a, struct conn *c)
{
	return tenant_number(&c->tenant, base_scope(a, c));
}

static void resolve_groups(struct artifacts *a)
{
	char item[256];
	unsigned id;

	a->ngroups = 0;
	for (const char *p = a->cfg.groups;
	     a->ngroups < MAX_GROUPS && config_list_next(&p, item, sizeof item);) {
		if (config_list_id(item, 1, &id))
			a->groups[a->ngroups++] = (gid_t)id;
		else
			log_warn("artifact-groups: no group '%s'", item);
	}
}

/* The entry's key, its components, and the Redis space of its scope. A
 * tenant's name is a component of its own, only off the main socket: the
 * main socket's keys are those of a daemon without tenants. */
static int derive(const struct scope *sc, const char *ns, const char *key, struct key *k,
		  struct buf *components)
{
	const struct key_part parts[] = {
		{ "kind", "artifact" }, { "tenant", sc->tenant }, { "scope", sc->base },
		{ "namespace", ns }, { "key", key },
	};
	const struct key_part main_parts[] = {
		{ "kind", "artifact" }, { "scope", sc->base }, { "namespace", ns }, { "key", key },
	};
	if (sc->tenant[0])
		return key_derive(parts, sizeof parts / sizeof parts[0], k, components);
	return key_derive(main_parts, sizeof main_parts / sizeof main_parts[0], k, components);
}

static void l2_space(const struct scope *sc, char *out, size_t n)
{
	snprintf(out, n, "artifact:%s:", sc->name);
}

/* ---- replies ---------------------------------------------------------- */

static void reply_get(struct conn *c, uint64_t id, const struct buf *value, uint64_t lease)
{
	struct buf out = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &out, FRAME_ARTIFACT_GET | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_bool(&w, "found", value != NULL);
	if (value)
		msg_put_bin(&w, "value", value->data ? value->data : "", value->len);
	if (lease)
		msg_put_int(&w, "lease", (int64_t)lease);
	if (msg_end(&w) == 0)
		conn_send(c, &out);
	else
		conn_send_error(c, id, "internal", "out of memory");
	buf_free(&out);
}

/*
 * A hit whose value is in its blob file (store_get_file(): fd, checked):
 * to a get that asked for it, the descriptor itself (the reply says
 * value_len and fd: true; PROTOCOL.md); otherwise, or where the
 * descriptor cannot go now (conn_send_fd()), the value inline, sent by
 * the kernel from the file. Either way the daemon never reads it into
 * memory. Takes fd.
 */
static void reply_file(struct artifacts *a, struct conn *c, uint64_t id, int fd, size_t len,
		       int want_fd)
{
	struct buf out = BUF_INIT;
	struct msg_writer w;

	if (want_fd) {
		msg_begin(&w, &out, FRAME_ARTIFACT_GET | FRAME_REPLY);
		msg_put_int(&w, "id", (int64_t)id);
		msg_put_bool(&w, "found", 1);
		msg_put_int(&w, "value_len", (int64_t)len);
		msg_put_bool(&w, "fd", 1);
		if (msg_end(&w) == 0 && conn_send_fd(c, &out, fd) == 0) {
			a->n.fd_hits++;
			close(fd);
			buf_free(&out);
			return;
		}
		a->n.fd_fallbacks++;
		buf_reset(&out);
	}
	msg_begin(&w, &out, FRAME_ARTIFACT_GET | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_bool(&w, "found", 1);
	msg_put_bin_tail(&w, "value", "", len);
	if (msg_end(&w) == 0) {
		a->n.file_hits++;
		conn_send_file(c, &out, fd, len);
	} else {
		close(fd);
		conn_send_error(c, id, "internal", "out of memory");
	}
	buf_free(&out);
}

/* Answer a get from the store: 1 if key is there (answered, its length
 * in *len), else 0. */
static int reply_stored(struct artifacts *a, struct conn *c, uint64_t id,
			const unsigned char key[32], int want_fd, size_t *len)
{
	struct store_result r;
	int fd = -1;

	if (store_get_file(a->store, key, &r, &fd) != 1 || r.kind != STORE_ARTIFACT) {
		if (fd >= 0)
			close(fd);
		store_result_free(&r);
		return 0;
	}
	*len = r.data_len;
	if (fd >= 0)
		reply_file(a, c, id, fd, r.data_len, want_fd);
	else
		reply_get(c, id, &r.data, 0);
	store_result_free(&r);
	return 1;
}

static void reply_simple(struct conn *c, uint8_t type, uint64_t id, const char *flag)
{
	struct buf out = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &out, type | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	if (flag)
		msg_put_bool(&w, flag, 1);
	if (msg_end(&w) == 0)
		conn_send(c, &out);
	buf_free(&out);
}

/* ---- slots ------------------------------------------------------------ */

static unsigned bucket_of(const unsigned char key[32])
{
	return ((unsigned)key[0] | (unsigned)key[1] << 8) % SLOT_BUCKETS;
}

static struct slot *slot_find(struct artifacts *a, const unsigned char key[32])
{
	for (struct slot *s = a->buckets[bucket_of(key)]; s; s = s->next)
		if (!memcmp(s->key, key, 32))
			return s;
	return NULL;
}

static struct scope_count *scope_count(struct artifacts *a, int64_t scope, int create)
{
	struct scope_count *sc;

	for (sc = a->scopes; sc; sc = sc->next)
		if (sc->scope == scope)
			return sc;
	if (!create || !(sc = calloc(1, sizeof *sc)))
		return NULL;
	sc->scope = scope;
	sc->next = a->scopes;
	a->scopes = sc;
	return sc;
}

static void on_expiry(evutil_socket_t fd, short what, void *arg);

static struct slot *slot_new(struct artifacts *a, const struct key *k,
			     const struct scope *scope, const char *ns)
{
	struct scope_count *sc = scope_count(a, scope->id, 1);
	struct slot *s = sc ? calloc(1, sizeof *s) : NULL;

	if (!s || !(s->expiry = evtimer_new(a->base, on_expiry, s))) {
		free(s);
		return NULL;
	}
	memcpy(s->key, k->hash, 32);
	s->scope = *scope;
	snprintf(s->ns, sizeof s->ns, "%s", ns);
	s->a = a;
	unsigned b = bucket_of(s->key);
	s->next = a->buckets[b];
	a->buckets[b] = s;
	s->next_all = a->all;
	if (a->all)
		a->all->prev_all = s;
	a->all = s;
	sc->slots++;
	return s;
}

/* Take s out of the tables and free it; its wait in the tier ends (no
 * callback comes after fleet_end()), and a fleet lease it holds is left to
 * lapse if its value was published, else dropped for another node. */
static void slot_unlink(struct slot *s)
{
	struct artifacts *a = s->a;
	struct slot **pp = &a->buckets[bucket_of(s->key)];

	while (*pp != s)
		pp = &(*pp)->next;
	*pp = s->next;
	if (s->prev_all)
		s->prev_all->next_all = s->next_all;
	else
		a->all = s->next_all;
	if (s->next_all)
		s->next_all->prev_all = s->prev_all;
	struct scope_count *sc = scope_count(a, s->scope.id, 0);
	if (sc && --sc->slots == 0) {
		struct scope_count **sp = &a->scopes;
		while (*sp != sc)
			sp = &(*sp)->next;
		*sp = sc->next;
		free(sc);
	}
	if (s->holder)
		a->n.leases_held--;
	event_free(s->expiry);
	fleet_end(s->fw, s->published);
	free(s);
}

/* Give c the lease on s. */
static void lease_grant(struct slot *s, struct conn *c)
{
	struct artifacts *a = s->a;
	struct timeval tv = { a->cfg.lease_timeout_s, 0 };

	s->holder = c;
	s->token = ++a->next_token;
	a->n.leases++;
	a->n.leases_held++;
	evtimer_add(s->expiry, &tv);
}

static struct waiter *waiter_add(struct slot *s, struct conn *c, uint64_t id,
				 int want_lease, int64_t wait_ms);

/* Free a waiter already off its slot's list (its slot may be gone). */
static void waiter_free(struct waiter *w)
{
	w->a->n.waiting--;
	event_free(w->deadline);
	conn_unhold(w->conn);
	free(w);
}

/* Unhook w from its slot's list. */
static void waiter_unlink(struct waiter *w)
{
	struct waiter **pp = &w->slot->waiters;

	while (*pp != w)
		pp = &(*pp)->next;
	*pp = w->next;
}

/* Answer every waiter of s with value (NULL: a miss) and drop the slot.
 * stored: the value was stored under s's key, and waiters are answered
 * as hits are (a large value from its file), value where that fails (a
 * miss if there is none: a spooled put's value is in its file alone). */
static void slot_finish_from(struct slot *s, const struct buf *value, int stored)
{
	struct artifacts *a = s->a;
	struct waiter *w = s->waiters, *next;
	unsigned char key[32];

	memcpy(key, s->key, 32);        /* s is freed below */
	/* Off the tables first: a reply may close a connection (a reader too
	 * slow, conn_send()), whose artifacts_conn_closed() must find
	 * neither this slot nor these waiters. */
	s->waiters = NULL;
	slot_unlink(s);
	store_gets_together(a->store, 1);       /* one hash of a fresh file for all */
	for (; w; w = next) {
		next = w->next;
		size_t len;
		int hit = stored && reply_stored(a, w->conn, w->id, key, w->want_fd, &len);
		if (!hit)
			reply_get(w->conn, w->id, value, 0);
		if (hit || value) {
			a->n.wait_hits++;
			store_note_user(a->store, key, conn_tenant(w->conn));
		}
		waiter_free(w);
	}
	store_gets_together(a->store, 0);
}

static void slot_finish(struct slot *s, const struct buf *value)
{
	slot_finish_from(s, value, 0);
}

/*
 * The lease on s ended without a value (released, its holder gone, or
 * expired), or Redis did not have it: the oldest waiter that asked for a
 * lease becomes the producer and the others wait on; if none asked, every
 * waiter is answered with a miss.
 */
static void lease_pass_on(struct slot *s)
{
	struct waiter **pp;

	if (s->holder) {
		s->holder = NULL;
		s->a->n.leases_held--;
	}
	evtimer_del(s->expiry);
	for (pp = &s->waiters; *pp && !(*pp)->want_lease; pp = &(*pp)->next)
		;
	if (!*pp) {
		slot_finish(s, NULL);
		return;
	}
	struct waiter *w = *pp, *own = NULL, *o;
	*pp = w->next;
	lease_grant(s, w->conn);
	s->a->n.lease_handoffs++;
	/* The new holder's other gets of this key would wait on its own
	 * lease: off the list, to be answered as artifact_get() answers a
	 * holder (a miss with the token). */
	for (pp = &s->waiters; *pp;) {
		o = *pp;
		if (o->conn == w->conn) {
			*pp = o->next;
			o->next = own;
			own = o;
		} else {
			pp = &o->next;
		}
	}
	struct artifacts *a = s->a;
	uint64_t token = s->token;
	/* Last: a reply may close w's connection, and so end this lease and
	 * free s (the waiters hold the connection, not s). */
	reply_get(w->conn, w->id, NULL, token);
	waiter_free(w);
	for (; own; own = o) {
		o = own->next;
		a->n.misses++;
		reply_get(own->conn, own->id, NULL, token);
		waiter_free(own);
	}
}

static void on_expiry(evutil_socket_t fd, short what, void *arg)
{
	struct slot *s = arg;

	s->a->n.lease_expiries++;
	log_info("artifact lease in %s, namespace %s, not filled within %d s; passing it on",
		 s->scope.name, s->ns, s->a->cfg.lease_timeout_s);
	lease_pass_on(s);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct waiter *w = arg;

	struct slot *s = w->slot;

	s->a->n.wait_timeouts++;
	waiter_unlink(w);
	/* Nobody left to answer: stop asking the tier for it. Before the
	 * reply, which may close w's connection and so, through a lease
	 * passed on, free s. */
	if (s->fetching && !s->waiters)
		slot_finish(s, NULL);
	reply_get(w->conn, w->id, NULL, 0);
	waiter_free(w);
}

static struct waiter *waiter_add(struct slot *s, struct conn *c, uint64_t id,
				 int want_lease, int64_t wait_ms)
{
	struct waiter *w = calloc(1, sizeof *w), **pp;

	if (!w || !(w->deadline = evtimer_new(s->a->base, on_deadline, w))) {
		free(w);
		return NULL;
	}
	w->a = s->a;
	w->conn = c;
	w->id = id;
	w->want_lease = want_lease;
	w->slot = s;
	for (pp = &s->waiters; *pp; pp = &(*pp)->next)
		;
	*pp = w;
	conn_hold(c);
	s->a->n.waiting++;
	struct timeval tv = { wait_ms / 1000, (wait_ms % 1000) * 1000 };
	evtimer_add(w->deadline, &tv);
	return w;
}

void artifacts_progress(struct artifacts *a)
{
	/* conn_send_progress() closes nothing: the lists cannot change under
	 * the walk. */
	for (struct slot *s = a->all; s; s = s->next_all)
		for (struct waiter *w = s->waiters; w; w = w->next)
			conn_send_progress(w->conn, w->id, "waiting");
}

/* ---- the Redis tier --------------------------------------------------- */

/*
 * A value from the tier, opened (every chunk verified: l2.c), in a sealed
 * memfd (F_SEAL_WRITE, _SHRINK, _GROW, _SEAL): what its waiters are sent,
 * as a descriptor or from the file, before the value is stored. The
 * kernel copies it in without a page fault a page; the holder of the
 * descriptor can read that value alone, never change it. -1 if not.
 */
static int sealed_copy(const void *data, size_t len)
{
	int fd = memfd_create("ptxcache-l2-value", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t off = 0;

	if (fd < 0)
		return -1;
	while (off < len) {
		ssize_t w = write(fd, (const char *)data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Answer every waiter of s with a value from the tier and drop the slot:
 * from fd (sealed_copy()) where there is one, else from memory. Their
 * identities into users (up to n_users), for store_note_user() once the
 * value is stored; how many were answered. */
static size_t slot_answer(struct slot *s, const struct l2_value *v, int fd, int64_t *users,
			  size_t n_users)
{
	struct artifacts *a = s->a;
	struct waiter *w = s->waiters, *next;
	struct buf view = { .data = (char *)v->data, .len = v->data_len };
	size_t n = 0;

	s->waiters = NULL;              /* off the tables first: slot_finish_from() */
	slot_unlink(s);
	for (; w; w = next) {
		int wfd = fd >= 0 ? dup(fd) : -1;
		next = w->next;
		a->n.wait_hits++;
		if (n < n_users)
			users[n++] = conn_tenant(w->conn);
		if (wfd >= 0)
			reply_file(a, w->conn, w->id, wfd, v->data_len, w->want_fd);
		else
			reply_get(w->conn, w->id, &view, 0);
		waiter_free(w);
	}
	return n;
}

/* The tier answered for s: its value (from any node of the fleet), or
 * that this node is to produce it (a lease of the fleet's, or none to be
 * had), or a miss. A value is answered first, then stored: it is a copy
 * of what the tier holds, opened and verified whole (l2.c answers
 * nothing else), so no waiter waits for the blob file's write, fsyncs and
 * commit (about 10-20 ms for a MiB); the next get of the key is a local
 * hit. A large one goes to its waiters from a sealed memfd (a descriptor
 * where asked for, else from the file as the socket drains); a small one,
 * or where no memfd can be had, from memory. */
static void on_fleet(void *arg, enum fleet_answer answer, const struct l2_value *v)
{
	struct slot *s = arg;
	struct artifacts *a = s->a;

	s->fetching = 0;
	if (answer == FLEET_VALUE && v->kind == STORE_ARTIFACT && v->status == 0) {
		struct buf comp = BUF_INIT;
		char ns[NS_MAX + 1];
		struct store_entry e = {
			.kind = STORE_ARTIFACT, .data = v->data, .data_len = v->data_len,
			.producer = -1, .scope = s->scope.id, .ns = ns,
		};
		unsigned char key[32];
		size_t n_waiters = 0;
		for (struct waiter *w = s->waiters; w; w = w->next)
			n_waiters++;
		/* Out of memory: the notes are lost, which hides the entry
		 * from those waiters (until they ask again), never shows it. */
		int64_t *users = calloc(n_waiters ? n_waiters : 1, sizeof *users);
		int fd = v->data_len >= ANSWER_FD_MIN ? sealed_copy(v->data, v->data_len) : -1;

		a->n.l2_hits++;
		memcpy(key, s->key, 32);        /* s is gone once answered */
		memcpy(ns, s->ns, sizeof ns);
		size_t n = slot_answer(s, v, fd, users, users ? n_waiters : 0);
		if (fd >= 0)
			close(fd);
		/* Its components are not in the envelope: say where it came from. */
		buf_puts(&comp, "{\"kind\":\"artifact\",\"from\":\"l2\"}");
		e.components = comp.data;
		/* Who was answered is noted once the row is there (a note's
		 * time is at or after its row's creation: store.h). */
		if (store_put(a->store, key, &e, NULL) == 0)
			for (size_t i = 0; i < n; i++)
				store_note_user(a->store, key, users[i]);
		free(users);
		buf_free(&comp);
		return;
	}
	lease_pass_on(s);
}

/* ---- requests --------------------------------------------------------- */

/* The namespace and key fields of m, checked; NULL-terminated copies. */
static int parse_name(const struct msg *m, char ns[NS_MAX + 1], char **key, const char **why)
{
	const char *p;
	size_t n;

	*key = NULL;
	if (msg_bytes(m, "ns", &p, &n) != 1 || !artifact_ns_valid(p, n)) {
		*why = "'ns' must be 1 to 32 bytes of [a-z0-9._-], starting with a letter or digit";
		return -1;
	}
	memcpy(ns, p, n);
	ns[n] = '\0';
	if (msg_bytes(m, "key", &p, &n) != 1 || !key_valid(p, n)) {
		*why = "'key' must be 1 to 1024 bytes of printable ASCII";
		return -1;
	}
	if (!(*key = strndup(p, n))) {
		*why = "out of memory";
		return -1;
	}
	return 0;
}

/* One debug line per answer, to follow a JIT's lookups (--log-level debug). */
static void trace(const struct conn *c, const char *what, const char *ns, const struct key *k,
		  const char *outcome, size_t len)
{
	log_debug("conn %llu: artifact %s %s %.16s: %s (%zu bytes)",
		  (unsigned long long)c->serial, what, ns, k->hex, outcome, len);
}

static void artifact_get(struct conn *c, uint64_t id, const struct msg *m)
{
	struct artifacts *a = c->srv->arts;
	char ns[NS_MAX + 1], *ukey = NULL;
	const char *why = NULL;
	int want_lease = 0, want_fd = 0;
	int64_t wait_ms = (int64_t)a->cfg.wait_s * 1000;
	struct waiter *w;
	struct key k;

	if (parse_name(m, ns, &ukey, &why) < 0 || msg_bool(m, "lease", &want_lease) < 0 ||
	    msg_bool(m, "fd", &want_fd) < 0 ||
	    msg_int(m, "wait_ms", &wait_ms) < 0 || wait_ms < 0) {
		conn_send_error(c, id, "invalid", why ? why : "'lease' and 'fd' must be bools and "
			   "'wait_ms' a non-negative integer");
		goto out;
	}
	if (wait_ms > (int64_t)a->cfg.wait_s * 1000)
		wait_ms = (int64_t)a->cfg.wait_s * 1000;
	struct scope scope;
	scope_of(a, c, &scope);
	if (derive(&scope, ns, ukey, &k, NULL) < 0) {
		conn_send_error(c, id, "internal", "out of memory");
		goto out;
	}
	size_t len;
	if (reply_stored(a, c, id, k.hash, want_fd, &len)) {
		a->n.hits++;
		store_note_user(a->store, k.hash, conn_tenant(c));
		trace(c, "get", ns, &k, "hit", len);
		goto out;
	}
	if (c->srv->stopping) {
		/* Nothing waits through a stop (artifacts_stop()), and nobody is
		 * made a producer: a plain miss. Puts are still stored. */
		a->n.misses++;
		trace(c, "get", ns, &k, "miss, the daemon is stopping", 0);
		reply_get(c, id, NULL, 0);
		goto out;
	}

	struct slot *s = slot_find(a, k.hash);
	if (s && s->holder == c) {
		/* Its own lease: nothing to wait for. */
		a->n.misses++;
		trace(c, "get", ns, &k, "miss, its own lease", 0);
		reply_get(c, id, NULL, s->token);
		goto out;
	}
	if (s) {
		if (wait_ms == 0) {
			a->n.misses++;
			reply_get(c, id, NULL, 0);
		} else if (c->waiting >= MAX_WAITS_PER_CONN) {
			conn_send_error(c, id, "busy", "this connection already waits on 256 requests");
		} else if (!(w = waiter_add(s, c, id, want_lease, wait_ms))) {
			conn_send_error(c, id, "internal", "out of memory");
		} else {
			w->want_fd = want_fd;
			a->n.waits++;
			trace(c, "get", ns, &k, s->fetching ? "waits for Redis" : "waits for its producer", 0);
			conn_send_progress(c, id, "waiting");
		}
		goto out;
	}
	a->n.misses++;
	struct l2 *l2 = a->l2 ? *a->l2 : NULL;
	if (!want_lease && !l2) {
		trace(c, "get", ns, &k, "miss", 0);
		reply_get(c, id, NULL, 0);
		goto out;
	}
	struct scope_count *sc = scope_count(a, scope.id, 0);
	if (sc && sc->slots >= a->cfg.max_leases) {
		char msg[160];
		snprintf(msg, sizeof msg, "this scope already produces %d artifacts "
			 "(artifact-max-leases)", sc->slots);
		conn_send_error(c, id, "busy", msg);
		goto out;
	}
	if (!(s = slot_new(a, &k, &scope, ns))) {
		conn_send_error(c, id, "internal", "out of memory");
		goto out;
	}
	if (l2) {
		char space[L2_SPACE_MAX];
		/* Redis answers within its own timeout: wait for it at least. */
		if (!(w = waiter_add(s, c, id, want_lease, wait_ms > 1000 ? wait_ms : 1000))) {
			slot_unlink(s);
			conn_send_error(c, id, "internal", "out of memory");
			goto out;
		}
		w->want_fd = want_fd;
		l2_space(&scope, space, sizeof space);
		trace(c, "get", ns, &k, "miss, asking Redis", 0);
		conn_send_progress(c, id, "waiting");
		/* A get with a lease would produce: the fleet's lease too, so
		 * that a node that misses meanwhile waits for this one. */
		if ((s->fw = fleet_get(a->fleet, space, s->key, want_lease, wait_ms, on_fleet, s)))
			s->fetching = 1;
		else
			lease_pass_on(s);
		goto out;
	}
	lease_grant(s, c);
	trace(c, "get", ns, &k, "miss, a lease", 0);
	reply_get(c, id, NULL, s->token);
out:
	free(ukey);
}

/* A put's request, checked (put_check()): what storing and answering it
 * needs besides its value. */
struct put_req {
	struct scope scope;
	struct key k;
	char ns[NS_MAX + 1];
	struct buf comp;        /* the key's components */
	int64_t token;          /* its lease, or 0 */
};

/* The put's lease, as things are now: 0 if it may store key, else -1
 * with c answered. A lease names one key and one connection, and lives
 * until its put, release or end: a token that is not that is refused. */
static int put_lease_check(struct artifacts *a, struct conn *c, uint64_t id,
			   const unsigned char key[32], int64_t token)
{
	struct slot *s = slot_find(a, key);

	if (token && (!s || s->holder != c || s->token != (uint64_t)token)) {
		conn_send_error(c, id, "denied", s && s->holder && s->holder != c ?
				"that lease is held by another connection" :
				"this connection holds no such lease on this key (it may have "
				"ended: put without it)");
		return -1;
	}
	if (s && s->holder && s->holder != c) {
		a->n.conflicts++;
		conn_send_error(c, id, "conflict", "another client holds the lease on this "
			   "key and is producing its value");
		return -1;
	}
	return 0;
}

/* What a put must pass before its value is taken, whether the value is
 * in the request (value_ok: a bin) or still to arrive (spooled): its names,
 * its lease field, the value's length len, its scope and key, the lease.
 * 0 with *r filled (r->comp to free), or -1 with c answered. */
static int put_check(struct artifacts *a, struct conn *c, uint64_t id, const struct msg *m,
		     int value_ok, size_t len, struct put_req *r)
{
	char *ukey = NULL;
	const char *why = NULL;
	int rc = -1;

	memset(r, 0, sizeof *r);
	r->comp = (struct buf)BUF_INIT;
	if (parse_name(m, r->ns, &ukey, &why) < 0) {
		conn_send_error(c, id, "invalid", why);
		goto out;
	}
	if (!value_ok || msg_int(m, "lease", &r->token) < 0) {
		conn_send_error(c, id, "invalid", "'value' must be bin and 'lease' an integer");
		goto out;
	}
	if ((int64_t)len > a->cfg.max_value) {
		char msg[160];
		snprintf(msg, sizeof msg, "value of %zu bytes is over the limit of %lld "
			 "(artifact-max-value)", len, (long long)a->cfg.max_value);
		conn_send_error(c, id, "invalid", msg);
		goto out;
	}
	scope_of(a, c, &r->scope);
	if (derive(&r->scope, r->ns, ukey, &r->k, &r->comp) < 0) {
		conn_send_error(c, id, "internal", "out of memory");
		goto out;
	}
	rc = put_lease_check(a, c, id, r->k.hash, r->token);
out:
	if (rc < 0)
		buf_free(&r->comp);
	free(ukey);
	return rc;
}

/* The stored value of key, mapped read-only, checked against its row as
 * a hit's file is (store_peek_file()): for the tier, which takes a value's
 * bytes. NULL if it cannot be. */
static void *map_stored(struct artifacts *a, const unsigned char key[32], size_t len)
{
	struct store_result r;
	int fd = -1;
	void *p = NULL;

	if (store_peek_file(a->store, key, &r, &fd) == 1 && fd >= 0 && r.data_len == len) {
		p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			p = NULL;
	}
	if (fd >= 0)
		close(fd);
	store_result_free(&r);
	return p;
}

/* A put's commit is done (stored, or err): publish, hand the value to the
 * slot's waiters, answer. value: its len bytes, or NULL where they are
 * in the stored file alone (a spooled put). */
static void put_answer(struct artifacts *a, struct conn *c, uint64_t id, const struct put_req *r,
		       size_t len, const char *value, int stored, const char *err)
{
	if (stored)
		store_note_user(a->store, r->k.hash, conn_tenant(c));
	a->n.puts++;
	a->n.put_bytes += (int64_t)len;
	/* The slot as it is now: still this put's to end unless another
	 * connection took its lease meanwhile (that one's put ends it). */
	struct slot *s = slot_find(a, r->k.hash);
	if (s && s->holder && s->holder != c)
		s = NULL;
	struct l2 *l2 = a->l2 ? *a->l2 : NULL;
	/* The tier takes bytes: a value in its file alone is mapped. */
	void *map = NULL;
	if (!value && stored && l2)
		value = map = map_stored(a, r->k.hash, len);
	/* Waiters get the value whether or not it could be stored (from its
	 * file where it is one). */
	if (s) {
		struct buf v = { .data = (char *)value, .len = len };
		s->published = stored && l2 && value;
		slot_finish_from(s, value ? &v : NULL, stored);
	}
	trace(c, "put", r->ns, &r->k, stored ? "stored" : "not stored", len);
	/* Durable here is all the producer waits for: it is answered before
	 * the tier is given the value. */
	if (stored)
		reply_simple(c, FRAME_ARTIFACT_PUT, id, "stored");
	else
		conn_send_error(c, id, "internal", err);
	/* Then the tier, in the background (l2.c). */
	if (stored && l2 && value) {
		char space[L2_SPACE_MAX];
		struct l2_value lv = { .kind = STORE_ARTIFACT, .data = value, .data_len = len };
		l2_space(&r->scope, space, sizeof space);
		l2_put_in(l2, space, r->k.hash, &lv);
	}
	/* l2_put_in() copies the value into its record before it returns. */
	if (map)
		munmap(map, len);
}

/* A put staged for the group commit: what its answer needs. */
struct staged_put {
	struct artifacts *a;
	struct conn *conn;
	uint64_t id;
	struct put_req r;
	size_t len;
	const char *value;      /* copy, or the request's own (a direct put) */
	char copy[];
};

/* The put's commit is done (store_batch.h). */
static void put_done(void *arg, int stored, const char *err)
{
	struct staged_put *p = arg;
	struct conn *c = p->conn;

	put_answer(p->a, c, p->id, &p->r, p->len, p->value, stored, err);
	conn_unhold(c);
	buf_free(&p->r.comp);
	free(p);
}

static void artifact_put(struct conn *c, uint64_t id, const struct msg *m)
{
	struct artifacts *a = c->srv->arts;
	struct put_req r;
	struct buf err = BUF_INIT;

	const msgpack_object *v = msg_get(m, "value");
	int value_ok = v && v->type == MSGPACK_OBJECT_BIN;
	size_t len = value_ok ? v->via.bin.size : 0;
	if (put_check(a, c, id, m, value_ok, len, &r) < 0)
		return;
	const char *val = v->via.bin.ptr;
	/* A small value is stored with the puts of this turn of the loop, in
	 * one commit, and answered once committed (put_done()). A large one
	 * (a file of its own, whose write and fsync a shared commit would
	 * not save) is stored now, from the request itself, never copied:
	 * after the puts staged before it, so a connection's puts of one key
	 * land in the order it sent them. (A large value sent last does not
	 * come here: it is spooled, artifact_put_head().) */
	int direct = len >= BLOB_MIN;
	struct staged_put *p = malloc(sizeof *p + (direct ? 0 : len));
	if (!p) {
		buf_free(&r.comp);
		conn_send_error(c, id, "internal", "out of memory");
		return;
	}
	*p = (struct staged_put){ .a = a, .conn = c, .id = id, .r = r, .len = len,
				  .value = direct ? val : p->copy };
	if (!direct)
		memcpy(p->copy, val, len);
	struct store_entry e = {
		.kind = STORE_ARTIFACT, .data = p->value, .data_len = len,
		.components = p->r.comp.data, .producer = conn_tenant(c),
		.scope = p->r.scope.id, .ns = p->r.ns,
	};
	conn_hold(c);
	if (direct) {
		put_batch_flush(a->puts);
		int stored = store_put(a->store, p->r.k.hash, &e, &err) == 0;
		put_done(p, stored, err.data ? err.data : "cannot store the value");
	} else if (put_batch_add(a->puts, p->r.k.hash, &e, put_done, p) < 0) {
		conn_unhold(c);
		buf_free(&p->r.comp);
		free(p);
		conn_send_error(c, id, "internal", "out of memory");
	}
	buf_free(&err);
}

/*
 * A large put whose value comes last (both clients send it so) is
 * spooled: conn.c hands its other fields here first (artifact_put_head(),
 * the table's head), which makes every check a put makes before the
 * value is taken, and then feeds the value's bytes, as they arrive, to
 * a temporary blob file (store_spool_*()), never whole in memory. At the
 * last byte the file is synced off the loop (syncer.h), the connection
 * paused meanwhile (its next request is read once this one is answered:
 * its puts land in the order it sent them) while the loop serves everyone
 * else. Then the lease is checked again (it may have ended meanwhile),
 * the file is placed and its row committed after what is staged
 * (store_put_spool(), as a direct put), and the put is answered as any
 * other (put_answer(): waiters from the file, the tier from a mapping).
 */
struct spooled_put {
	struct frame_sink sink;         /* first: what conn.c holds */
	struct artifacts *a;
	struct conn *conn;              /* held while its file syncs */
	uint64_t id;
	struct put_req r;
	size_t len;
	struct store_spool *sp;
	struct buf err;                 /* why the value could not be written */
};

static void spool_write(struct frame_sink *k, const void *p, size_t n)
{
	struct spooled_put *sp = (struct spooled_put *)k;

	/* A failure is kept; the bytes after it are dropped as they come. */
	if (!sp->err.len)
		store_spool_write(sp->sp, p, n, &sp->err);
}

static void spool_free(struct spooled_put *p)
{
	store_spool_abort(p->sp);
	buf_free(&p->r.comp);
	buf_free(&p->err);
	free(p);
}

/* On the syncer's thread: p's file, and nothing else. */
static int spool_sync(void *arg)
{
	struct spooled_put *p = arg;

	return store_spool_sync(p->sp);
}

/* The file is synced (or err, which store_put_spool() answers: a sync
 * that failed is not tried again): store it, answer, read the
 * connection's next request. */
static void spool_synced(void *arg, int err)
{
	struct spooled_put *p = arg;
	struct artifacts *a = p->a;
	struct conn *c = p->conn;

	if (err == ECANCELED) {
		a->n.puts++;
		conn_send_error(c, p->id, "internal", "the daemon is stopping");
	} else if (put_lease_check(a, c, p->id, p->r.k.hash, p->r.token) == 0) {
		struct buf why = BUF_INIT;
		struct store_entry e = {
			.kind = STORE_ARTIFACT, .data_len = p->len, .components = p->r.comp.data,
			.producer = conn_tenant(c), .scope = p->r.scope.id, .ns = p->r.ns,
		};
		put_batch_flush(a->puts);
		int stored = store_put_spool(a->store, p->r.k.hash, &e, p->sp, &why) == 0;
		p->sp = NULL;
		a->n.spooled_puts++;
		put_answer(a, c, p->id, &p->r, p->len, NULL, stored,
			   why.data ? why.data : "cannot store the value");
		buf_free(&why);
	}
	spool_free(p);
	a->n.syncing--;
	conn_resume(c);
	server_maybe_stop(c->srv);      /* a stop waits for this answer */
	conn_unhold(c);
}

static void spool_end(struct frame_sink *k, struct conn *c, int arrived)
{
	struct spooled_put *p = (struct spooled_put *)k;
	struct artifacts *a = p->a;

	if (arrived && p->err.len) {
		a->n.puts++;
		conn_send_error(c, p->id, "internal", p->err.data);
	} else if (arrived) {
		p->conn = c;
		a->n.syncing++;
		conn_hold(c);
		conn_pause(c);
		if (syncer_sync(a->sync, spool_sync, spool_synced, p) < 0)
			spool_synced(p, 0);     /* store_put_spool() syncs on the loop */
		return;
	}
	spool_free(p);
}

/* The head of a put whose value (len bytes) is still to come (master.h's
 * request_kind head): 1 with *sink once the put may go on, or with none
 * once it is answered; 0 for a value too small for a file of its own,
 * read whole. */
static int artifact_put_head(struct conn *c, uint64_t id, const struct msg *m, uint32_t len,
			     struct frame_sink **sink)
{
	struct artifacts *a = c->srv->arts;
	struct spooled_put *p;
	struct buf err = BUF_INIT;

	if (len < BLOB_MIN || !(p = calloc(1, sizeof *p)))
		return 0;
	if (put_check(a, c, id, m, 1, len, &p->r) < 0) {
		free(p);
		return 1;
	}
	if (!(p->sp = store_spool_open(a->store, STORE_ARTIFACT, len, &err))) {
		a->n.puts++;
		conn_send_error(c, id, "internal", err.data ? err.data : "cannot store the value");
		buf_free(&err);
		buf_free(&p->r.comp);
		free(p);
		return 1;
	}
	p->sink = (struct frame_sink){ .write = spool_write, .end = spool_end };
	p->a = a;
	p->id = id;
	p->len = len;
	p->err = (struct buf)BUF_INIT;
	*sink = &p->sink;
	return 1;
}

static void artifact_release(struct conn *c, uint64_t id, const struct msg *m)
{
	struct artifacts *a = c->srv->arts;
	int64_t token = 0;

	if (msg_int(m, "lease", &token) != 1) {
		conn_send_error(c, id, "invalid", "'lease' must be an integer");
		return;
	}
	for (struct slot *s = a->all; s; s = s->next_all) {
		if (s->holder == c && s->token == (uint64_t)token) {
			/* Its producer will not store this entry: neither would the
			 * next one, so nobody waits for one. */
			a->n.lease_releases++;
			slot_finish(s, NULL);
			reply_simple(c, FRAME_ARTIFACT_RELEASE, id, NULL);
			return;
		}
	}
	conn_send_error(c, id, "invalid", "this connection holds no such lease");
}

static const struct request_kind artifact_kinds[] = {
	{ .type = FRAME_ARTIFACT_GET, .handler = artifact_get },
	{ .type = FRAME_ARTIFACT_PUT, .handler = artifact_put, .tail = "value",
	  .head = artifact_put_head },
	{ .type = FRAME_ARTIFACT_RELEASE, .handler = artifact_release },
};

const struct request_table artifact_requests = {
	.kinds = artifact_kinds,
	.n = sizeof artifact_kinds / sizeof artifact_kinds[0],
};

void artifacts_conn_closed(struct artifacts *a, struct conn *c)
{
	if (!a)
		return;
again:
	for (struct slot *s = a->all; s; s = s->next_all) {
		for (struct waiter **pp = &s->waiters; *pp;) {
			struct waiter *w = *pp;
			if (w->conn == c) {
				*pp = w->next;
				waiter_free(w);
			} else {
				pp = &w->next;
			}
		}
		if (s->holder == c) {
			/* Passing the lease on answers others, which may close
			 * connections and change any slot: walk again. */
			a->n.lease_closes++;
			lease_pass_on(s);
			goto again;
		}
	}
}

/* ---- life ------------------------------------------------------------- */

struct artifacts *artifacts_new(struct event_base *base, struct store *store,
				struct l2 **l2, struct fleet *fleet, struct syncer *sync,
				const struct artifact_config *cfg)
{
	struct artifacts *a = calloc(1, sizeof *a);

	if (!a)
		return NULL;
	a->base = base;
	a->store = store;
	a->l2 = l2;
	a->fleet = fleet;
	a->sync = sync;
	if (!(a->puts = put_batch_new(base, store))) {
		free(a);
		return NULL;
	}
	artifacts_configure(a, cfg);
	return a;
}

void artifacts_configure(struct artifacts *a, const struct artifact_config *cfg)
{
	a->cfg = *cfg;
	resolve_groups(a);
	a->cfg.groups = NULL;   /* not kept: resolved into a->groups */
}

void artifacts_stop(struct artifacts *a)
{
	put_batch_flush(a->puts);       /* committed and answered first */
	while (a->all)
		slot_finish(a->all, NULL);
}

void artifacts_free(struct artifacts *a)
{
	if (!a)
		return;
	artifacts_stop(a);
	put_batch_free(a->puts);
	free(a);
}

void artifacts_counters(struct artifacts *a, struct artifact_counters *out)
{
	*out = a->n;
	out->put_commits = put_batch_commits(a->puts);
}
