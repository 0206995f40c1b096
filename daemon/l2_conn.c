/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_conn: the shared second tier on Redis, its connection layer: nodes,
 * routing, timers and breakers; the value layer above it is l2.c, the
 * contract l2.h.
 *
 * What: hiredis asynchronous connections on the master's libevent loop:
 * one to a single Redis (redis://, unix:), or one per node of a Redis
 * Cluster (redis-cluster://seeds), each made on demand. send_cmd() takes
 * one command of the value layer (argv[1] is its key: a cluster's slot),
 * sends it to the node that serves it, bounds its connection's silence,
 * and completes it exactly once (complete()): its reply, or how it failed,
 * goes back up through the command's own ops (xfer_step()), the only way
 * this file reaches l2.c. Nothing is sent from here but the value layer's
 * commands, AUTH and SELECT when a connection opens, and to a cluster
 * CLUSTER SLOTS and ASKING (the ACL needs those, and no more). The
 * tier's life is here too: l2_new(), l2_reconfigure() (which puts the
 * tier on a new generation of the settings, made by l2_conf.c, and
 * reconnects only if the servers moved), l2_free() and l2_counters().
 *
 * Why it is built this way:
 *  - hiredis 0.14 has no timeouts in its asynchronous API, so every command
 *    and every connect carries a libevent timer of ours. The timer bounds
 *    its connection's silence, not the command's size: when it fires and
 *    the connection has moved bytes since it was armed (read events, writes
 *    that shrank hiredis's output buffer, counted by our own libevent
 *    adapter, l2_ev.c; or the kernel's send queue, TIOCOUTQ, draining), it is armed
 *    again (but never past L2_CMD_MAX_MS: bytes that trickle without a
 *    pause as long as the period hold nothing for ever). A connection
 *    silent for a whole period is dropped with
 *    redisAsyncFree() (not redisAsyncDisconnect(), which waits politely for
 *    the pending replies of a server that is not answering): the replies
 *    still owed on it can never be matched to newer requests, and each
 *    pending command is completed exactly once, as a timeout. Only that
 *    connection: a cluster's other nodes go on.
 *  - A command is completed (counted, its callback called) exactly once,
 *    by whichever comes first: its reply, its timer, or the end of its
 *    connection; hiredis calls our reply callback exactly once too (with a
 *    NULL reply when the connection goes away), so a command holds two
 *    references, one for each, and is freed when both are gone.
 *  - hiredis 0.14 calls getaddrinfo() on every connect, which would block
 *    the loop: it only ever gets a numeric address. A host name is
 *    resolved (blocking) in l2_new() and on a reload that names a new one;
 *    after that, each new connection looks it up again in the background
 *    (evdns, reading /etc/resolv.conf and /etc/hosts afresh), and once the
 *    name points elsewhere the connection is replaced, so a Redis that
 *    moved is found again without a restart.
 *  - Reloads (l2_reconfigure()) never drop a request in flight: settings
 *    are generations (struct l2_conf) and a command keeps the one it was
 *    sent under; a connection that a new address or new credentials
 *    replace is retired with redisAsyncDisconnect(), which closes it only
 *    once the replies owed on it are in.
 *  - Circuit breakers, one per node (a single Redis is one node): L2_TRIP
 *    consecutive failures open it for a period (1 s, doubling on each
 *    failed probe up to 30 s); while open, gets of that node's keys answer
 *    "not found" at once and puts are dropped; after the period the next
 *    request is a probe (half-open), and only its outcome counts: success
 *    closes the breaker, failure reopens it. Connections are made on
 *    demand, so the breaker is also the reconnect back-off. A failure is a
 *    connection that could not be made or went away, or a silence (above):
 *    an error reply (OOM, NOAUTH, CLUSTERDOWN) is Redis answering, counted
 *    as an error but no failure; replies that do not verify are Redis
 *    working as asked (someone else's data is wrong): rejects. One dead
 *    shard turns its own keys off, not the others'.
 *  - A cluster (l2_cluster.c does the arithmetic): the slot map is read with
 *    CLUSTER SLOTS from a seed at start, and again, in the background, at
 *    most every L2_REFRESH_MS (doubling while reads fail, up to 5 s),
 *    after a MOVED, a failed or silent node, a CLUSTERDOWN or a command
 *    skipped by an open breaker (its slot may have moved to a live node),
 *    and every L2_DOWN_REFRESH_MS while the map names a node that is down
 *    (its replica is being promoted). Each command goes to its slot's
 *    master (argv[1]'s slot); a slot with no
 *    known owner goes to any node, which redirects it. MOVED updates that
 *    slot's owner and resends there; ASK sends ASKING and the command to
 *    that node, once; at most L2_REDIRECTS_MAX redirections, then an error.
 *    A command whose connection failed (a master killed) waits for the
 *    next map, its timer running, and goes where it says (GETRANGE and SET
 *    may be sent twice). A cluster command keeps its formatted bytes until
 *    it completes, to be sent again. Only numeric addresses reach hiredis
 *    (seeds resolved when the URL is parsed; the cluster reports IPs, and
 *    l2_cluster.c refuses a map or a redirection that names a host).
 *
 * Never: block the loop; log the secret or a password; call a callback
 * twice; let a command outlive its bound.
 */
#include "daemon/l2_int.h"
#include "daemon/l2_ev.h"
#include "daemon/l2_seal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/crypto.h>

#include "daemon/log.h"

#define L2_TRIP 5                       /* consecutive failures to open */
#define L2_OPEN_MS 1000                 /* first open period */
#define L2_OPEN_MAX_MS 30000            /* cap of the doubling */
/* No command outlives this (or twice its silence bound, if longer), bytes
 * moving or not: one carries at most a chunk each way, so a command still
 * going after 10 s crosses under about 400 KiB/s with its window's others,
 * a server trickling bytes to hold this node rather than a tier. */
#define L2_CMD_MAX_MS 10000

enum breaker { BR_CLOSED, BR_OPEN, BR_HALF_OPEN };

#define L2_NODES_MAX 1024               /* nodes ever known: beyond, a hostile map */
#define L2_REDIRECTS_MAX 5              /* MOVED/ASK followed per command */
#define L2_REFRESH_MS 100               /* at most ten slot-map reads a second, */
#define L2_REFRESH_MAX_MS 5000          /* doubling while they fail, up to this */
#define L2_DOWN_REFRESH_MS 500          /* while the map names a node that is down:
                                           until its replica takes over */


#define L2_RETIRED_MAX 8

/* One server: the Redis of a redis:// or unix: URL (single), or a node of
 * a cluster. Its connection, made on demand, and its own breaker: one dead
 * shard turns itself off, not the others. Nodes are freed by l2_free(),
 * and by map_room() those that no connection, timer, command, slot or
 * seed names, so that whatever points to a node may go on doing so. */
struct l2_node {
	struct l2 *l2;
	struct l2_node *next;           /* l2->nodes */
	int single;                     /* its address is l2->conf's */
	int seed, in_map;               /* a cluster's: asked for the slot map */
	int keep;                       /* map_install()'s mark */
	int down;                       /* failed since it last connected */
	struct cluster_addr addr;       /* a cluster's node: numeric */
	char where[CLUSTER_HOST_MAX + 16];

	redisAsyncContext *ac;          /* NULL: not connected */
	char ac_host[NI_MAXHOST];       /* the address ac went to */
	int connected;
	struct event *connect_timer;
	/* Connections replaced by a reload or a new address: they close once
	 * the replies still owed on them are in (redisAsyncDisconnect()). */
	redisAsyncContext *retired[L2_RETIRED_MAX];

	enum breaker state;
	int failures;                   /* consecutive, while closed */
	int probing;                    /* a probe is out */
	int64_t open_until_us;
	int64_t period_ms;
};

static void ms_to_tv(int64_t ms, struct timeval *tv)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)(ms % 1000 * 1000);
}

/* ---- the breakers ------------------------------------------------------ */

static const char *node_where(const struct l2_node *nd)
{
	return nd->single ? nd->l2->conf->where : nd->where;
}

/* May a request go to nd now? Sets *probe for the half-open probe. */
static int node_admit(struct l2_node *nd, int *probe)
{
	*probe = 0;
	switch (nd->state) {
	case BR_CLOSED:
		return 1;
	case BR_OPEN:
		if (now_us() < nd->open_until_us)
			return 0;
		nd->state = BR_HALF_OPEN;
		nd->probing = 0;
		/* fall through */
	case BR_HALF_OPEN:
		if (nd->probing)
			return 0;
		nd->probing = 1;
		*probe = 1;
		return 1;
	}
	return 0;
}

/* May a request go to Redis now? A single Redis: its breaker. A cluster:
 * yes; each command asks its node's breaker once routed (send_cmd()). */
int admit(struct l2 *l2, int *probe)
{
	*probe = 0;
	return l2->single ? node_admit(l2->single, probe) : 1;
}

static void breaker_open(struct l2_node *nd)
{
	struct l2 *l2 = nd->l2;

	nd->state = BR_OPEN;
	nd->probing = 0;
	nd->failures = 0;
	nd->open_until_us = now_us() + nd->period_ms * 1000;
	l2->n.breaker_opens++;
	log_warn("l2: %s: %s; going on without it for %.1f s", node_where(nd),
		 l2->last_error, nd->period_ms / 1000.0);
	nd->period_ms = nd->period_ms * 2 > L2_OPEN_MAX_MS ? L2_OPEN_MAX_MS : nd->period_ms * 2;
}

static void breaker_note(struct l2_node *nd, int probe, int ok)
{
	if (probe) {
		if (ok) {
			nd->state = BR_CLOSED;
			nd->probing = 0;
			nd->failures = 0;
			nd->period_ms = L2_OPEN_MS;
			log_info("l2: %s answers again", node_where(nd));
		} else {
			breaker_open(nd);
		}
		return;
	}
	if (nd->state != BR_CLOSED)
		return;                 /* sent before it opened: moot now */
	if (ok)
		nd->failures = 0;
	else if (++nd->failures >= L2_TRIP)
		breaker_open(nd);
}

static void breaker_reset(struct l2_node *nd)
{
	nd->state = BR_CLOSED;
	nd->failures = 0;
	nd->probing = 0;
	nd->period_ms = L2_OPEN_MS;
}

/* ---- commands ---------------------------------------------------------- */

static void cmd_unref(struct l2_cmd *cmd)
{
	if (--cmd->refs > 0)
		return;
	if (cmd->timer)
		event_free(cmd->timer);
	if (cmd->wire)
		redisFreeSdsCommand(cmd->wire);
	conf_unref(cmd->conf);
	if (cmd->xfer)
		cmd->ops->unref(cmd->xfer);
	free(cmd);
}

static void map_refresh(struct l2 *l2);
static void unpark_all(struct l2 *l2);

/* Finish cmd once, by whichever comes first (its reply, its timer, the end
 * of its connection): feed its node's breaker, and hand the outcome to its
 * transfer, which counts it (once a transfer) and calls back. */
static void complete(struct l2_cmd *cmd, enum outcome o, const redisReply *reply)
{
	struct l2 *l2 = cmd->l2;

	if (cmd->completed)
		return;
	cmd->completed = 1;
	cmd->parked = 0;
	if (cmd->timer)
		evtimer_del(cmd->timer);
	if (cmd->prev)
		cmd->prev->next = cmd->next;
	else
		l2->pending = cmd->next;
	if (cmd->next)
		cmd->next->prev = cmd->prev;
	cmd->prev = cmd->next = NULL;

	if (!l2->freeing) {
		if ((o == OUT_ERROR || o == OUT_TIMEOUT || o == OUT_REFUSED) && cmd->node)
			log_debug("l2: %s: %s", node_where(cmd->node), l2->last_error);
		if (cmd->node && o != OUT_SKIPPED)
			breaker_note(cmd->node, cmd->probe, o != OUT_ERROR && o != OUT_TIMEOUT);
		if (cmd->internal) {
			l2->refreshing = 0;
			if (o != OUT_MAP) {
				if (l2->refresh_fails < 16)
					l2->refresh_fails++;
				map_refresh(l2);        /* another node, after the limit */
			} else {
				l2->refresh_fails = 0;
				unpark_all(l2);
			}
		}
	}
	if (cmd->xfer)
		cmd->ops->step(cmd, o, reply);
	cmd_unref(cmd);
}

/* Close ac, one of nd's connections, now. Its pending commands complete
 * as how (their NULL replies, run by redisAsyncFree(), now or when hiredis
 * returns from the callback it is in). */
static void drop_ac(struct l2_node *nd, redisAsyncContext *ac, enum outcome how)
{
	struct l2 *l2 = nd->l2;

	if (!ac)
		return;
	if (nd->ac == ac) {
		nd->ac = NULL;
		nd->connected = 0;
		evtimer_del(nd->connect_timer);
	}
	for (int i = 0; i < L2_RETIRED_MAX; i++)
		if (nd->retired[i] == ac)
			nd->retired[i] = NULL;
	for (struct l2_cmd *c = l2->pending; c; c = c->next)
		if (c->ac == ac)
			c->fail = how;
	redisAsyncFree(ac);
}

static void drop_connection(struct l2_node *nd, enum outcome how)
{
	drop_ac(nd, nd->ac, how);
}

/* nd failed (a connect, a connection, a silence): a cluster's map may be
 * out of date (a failover); read it again, in the background. */
static void node_failed(struct l2_node *nd)
{
	nd->down = 1;
	if (!nd->single)
		map_refresh(nd->l2);
}

/* ac went away by itself (hiredis frees it): forget it. */
static void node_lost(struct l2_node *nd, redisAsyncContext *ac)
{
	if (nd->ac != ac)
		return;
	nd->ac = NULL;
	nd->connected = 0;
	evtimer_del(nd->connect_timer);
	node_failed(nd);
}

static int follow_redirect(struct l2_cmd *cmd, const redisReply *reply);
static int park(struct l2_cmd *cmd);

static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct l2_cmd *cmd = privdata;
	struct l2 *l2 = cmd->l2;
	redisReply *reply = r;

	if (cmd->completed) {
		/* Timed out or dropped already: a stale reply, ignored. */
	} else if (!reply) {
		/* The connection went away under it. */
		node_lost(ac->data, ac);
		if (ac->err)
			note_error(l2, ac->errstr);
		if (cmd->fail != OUT_ERROR || !park(cmd))
			complete(cmd, cmd->fail, NULL);
	} else if (reply->type == REDIS_REPLY_ERROR && follow_redirect(cmd, reply)) {
		/* MOVED or ASK: sent again there (or completed, if it cannot be). */
	} else if (reply->type == REDIS_REPLY_ERROR) {
		note_error(l2, reply->str);
		if (!l2->single && reply->str && !strncmp(reply->str, "CLUSTERDOWN", 11))
			map_refresh(l2);
		complete(cmd, OUT_REFUSED, NULL);
	} else {
		complete(cmd, OUT_REPLY, reply);
	}
	cmd_unref(cmd);
}

/* AUTH and SELECT: a failure drops the connection (and with it the
 * commands queued behind them). */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct l2_node *nd = privdata;
	redisReply *reply = r;

	if (reply && reply->type == REDIS_REPLY_ERROR && nd->ac == ac) {
		note_error(nd->l2, reply->str);
		drop_connection(nd, OUT_ERROR);
	}
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct l2_node *nd = ac->data;

	if (nd->ac != ac)
		return;
	evtimer_del(nd->connect_timer);
	if (status == REDIS_OK) {
		nd->connected = 1;
		nd->down = 0;
		return;
	}
	/* hiredis frees it after this returns; its commands fail then. */
	note_error(nd->l2, ac->errstr);
	nd->ac = NULL;
	node_failed(nd);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct l2_node *nd = ac->data;

	for (int i = 0; i < L2_RETIRED_MAX; i++)
		if (nd->retired[i] == ac)
			nd->retired[i] = NULL;
	if (nd->ac != ac)
		return;
	nd->ac = NULL;
	nd->connected = 0;
	evtimer_del(nd->connect_timer);
	if (status != REDIS_OK) {
		note_error(nd->l2, ac->errstr);
		node_failed(nd);
	}
}

static void on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct l2_node *nd = arg;

	if (nd->ac && !nd->connected) {
		snprintf(nd->l2->last_error, sizeof nd->l2->last_error,
			 "no connection within %d ms", nd->l2->conf->connect_timeout_ms);
		drop_connection(nd, OUT_TIMEOUT);
		node_failed(nd);
	}
}

/* A command's timer: if its connection moved bytes since it was armed,
 * it is armed again; only a connection silent for the whole period times
 * out, and then that connection alone is dropped (completing every
 * command on it). Silent means the other end's: bytes waiting to be read,
 * or a timer that fires late (this process was not run: a loaded machine,
 * a long callback), are this side's delay, and the timer is armed again.
 * A command past L2_CMD_MAX_MS times out however its bytes move. */
static void on_cmd_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct l2_cmd *cmd = arg;
	struct l2 *l2 = cmd->l2;
	struct timeval tv;

	int q = outq_of(cmd->ac);
	int64_t now = now_us(), late_us = now - cmd->armed_us - cmd->timeout_ms * 1000;
	int64_t max_ms = cmd->timeout_ms * 2 > L2_CMD_MAX_MS ? cmd->timeout_ms * 2 : L2_CMD_MAX_MS;
	int too_long = now - cmd->sent_us > max_ms * 1000;

	if (cmd->ac && !too_long &&
	    (progress_of(cmd->ac) != cmd->seen || (q >= 0 && q < cmd->outq) ||
	     inq_of(cmd->ac) > 0 || late_us > cmd->timeout_ms * 1000 / 2)) {
		cmd->seen = progress_of(cmd->ac);
		cmd->outq = q;
		cmd->armed_us = now;
		ms_to_tv(cmd->timeout_ms, &tv);
		evtimer_add(cmd->timer, &tv);
		return;
	}
	if (too_long) {
		l2->n.overruns++;
		snprintf(l2->last_error, sizeof l2->last_error,
			 "no whole answer within %lld ms (bytes trickling)", (long long)max_ms);
	} else {
		snprintf(l2->last_error, sizeof l2->last_error, "no answer within %lld ms",
			 (long long)cmd->timeout_ms);
	}
	if (cmd->ac && cmd->node) {
		struct l2_node *nd = cmd->node;
		drop_ac(nd, cmd->ac, OUT_TIMEOUT);      /* completes cmd too */
		node_failed(nd);
	} else {
		complete(cmd, OUT_TIMEOUT, NULL);
	}
}

/* ev_attach()'s hook: a reply longer than any may be (l2_ev.c) ends its
 * connection, as one that broke. */
static void reply_too_long_drop(redisAsyncContext *ac)
{
	struct l2_node *nd = ac->data;

	note_error(nd->l2, "a reply longer than any chunk; dropping the connection");
	drop_ac(nd, ac, OUT_ERROR);     /* frees ac */
	node_failed(nd);
}

/* The most of a reader's buffer a connection keeps between replies. */
#define L2_READER_KEEP ((size_t)8 << 20)

static void resolve_again(struct l2 *l2);

/* Open nd's connection (it completes in the background). 0 or -1. A
 * single Redis's host name is looked up again meanwhile (resolve_again()):
 * this connection goes to the latest address known, the next to what the
 * name says now. A cluster's nodes are numeric addresses. */
static int node_connect(struct l2_node *nd)
{
	struct l2 *l2 = nd->l2;
	struct l2_conf *c = l2->conf;
	const char *host = nd->single ? c->host : nd->addr.host;
	redisAsyncContext *ac;
	struct timeval tv;

	if (nd->single) {
		resolve_again(l2);
		ac = c->path ? redisAsyncConnectUnix(c->path) : redisAsyncConnect(c->host, c->port);
	} else {
		ac = redisAsyncConnect(nd->addr.host, nd->addr.port);
	}
	if (!ac) {
		note_error(l2, "out of memory");
		return -1;
	}
	if (ac->err) {
		note_error(l2, ac->errstr);
		redisAsyncFree(ac);
		return -1;
	}
	ac->data = nd;
	/* The reader keeps its buffer between replies up to L2_READER_KEEP
	 * (hiredis's default frees one over 16 KiB each time it empties): a
	 * value's chunks, a MiB each, then reuse the pages the first one
	 * faulted in, at the cost of about 2 MiB held per connection that has
	 * carried a chunk. A larger one (a hostile reply's, up to 64 MiB) is
	 * freed when the next reply starts to arrive. */
	if (ac->c.reader)
		ac->c.reader->maxbuf = L2_READER_KEEP;
	if (ev_attach(ac, l2->base, reply_too_long_drop) < 0) {
		note_error(l2, "cannot attach to the event loop");
		redisAsyncFree(ac);
		return -1;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	nd->ac = ac;
	snprintf(nd->ac_host, sizeof nd->ac_host, "%s", host);
	nd->connected = 0;
	/* Queued now, sent first: pipelined ahead of every command. */
	if (c->password) {
		const char *argv[3] = { "AUTH", c->user ? c->user : c->password, c->password };
		redisAsyncCommandArgv(ac, on_setup_reply, nd, c->user ? 3 : 2, argv, NULL);
	}
	if (c->db && nd->single) {
		char db[16];
		const char *argv[2] = { "SELECT", db };
		snprintf(db, sizeof db, "%d", c->db);
		redisAsyncCommandArgv(ac, on_setup_reply, nd, 2, argv, NULL);
	}
	ms_to_tv(c->connect_timeout_ms, &tv);
	evtimer_add(nd->connect_timer, &tv);
	return 0;
}

/* Send cmd->wire to nd (after ASKING if asking), its reply to fn; on any
 * failure to send, cmd completes as an error at once. */
static void node_send(struct l2_node *nd, struct l2_cmd *cmd, int asking,
		      redisCallbackFn *fn)
{
	struct l2 *l2 = nd->l2;
	struct timeval tv;

	cmd->node = nd;
	/* A connection hiredis is tearing down takes no commands. */
	if (nd->ac && (nd->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING))) {
		nd->ac = NULL;
		nd->connected = 0;
	}
	if (!nd->ac && node_connect(nd) < 0) {
		node_failed(nd);
		if (!park(cmd))
			complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if (!cmd->timer && !(cmd->timer = evtimer_new(l2->base, on_cmd_timeout, cmd))) {
		note_error(l2, "out of memory");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if ((asking && redisAsyncCommand(nd->ac, NULL, NULL, "ASKING") != REDIS_OK) ||
	    redisAsyncFormattedCommand(nd->ac, fn, cmd, cmd->wire, sdslen(cmd->wire)) != REDIS_OK) {
		note_error(l2, "cannot queue a command");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	cmd->ac = nd->ac;
	cmd->refs++;                    /* hiredis's callback */
	cmd->seen = progress_of(cmd->ac);
	cmd->outq = outq_of(cmd->ac);
	cmd->armed_us = now_us();
	if (!cmd->sent_us)              /* its first send: a redirect's keeps it */
		cmd->sent_us = cmd->armed_us;
	if (nd->single) {               /* never sent again: no redirects */
		redisFreeSdsCommand(cmd->wire);
		cmd->wire = NULL;
	}
	ms_to_tv(cmd->timeout_ms, &tv);
	evtimer_add(cmd->timer, &tv);
}

static void pending_add(struct l2 *l2, struct l2_cmd *cmd)
{
	cmd->next = l2->pending;
	if (l2->pending)
		l2->pending->prev = cmd;
	l2->pending = cmd;
}

static struct l2_node *route(struct l2 *l2, unsigned slot);

/* cmd to nd, if nd's breaker lets it (else it is skipped: a miss, and
 * the map read again, in case the slot has moved on to a live node). */
static void route_send(struct l2 *l2, struct l2_cmd *cmd, struct l2_node *nd, int asking)
{
	if (!nd) {
		note_error(l2, "no cluster node known");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if (!node_admit(nd, &cmd->probe)) {
		/* The map may not know yet that the slot has moved on (a
		 * failover): wait for the next one, once, then skip. */
		cmd->node = NULL;
		if (cmd->waited) {
			complete(cmd, OUT_SKIPPED, NULL);
		} else {
			cmd->waited = 1;
			if (!park(cmd))
				complete(cmd, OUT_SKIPPED, NULL);
		}
		map_refresh(l2);
		return;
	}
	node_send(nd, cmd, asking, on_reply);
}

/* Send one command for cmd (which the caller has set up); argv[1] is the
 * key, which picks a cluster's node. On any failure to send, cmd
 * completes as an error at once; timeout_ms bounds its connection's
 * silence (on_cmd_timeout()). */
void send_cmd(struct l2 *l2, struct l2_cmd *cmd, int argc, const char **argv,
	      const size_t *argvlen, int64_t timeout_ms)
{
	pending_add(l2, cmd);
	cmd->timeout_ms = timeout_ms;
	if (l2->single)
		cmd->node = l2->single;
	if (redisFormatSdsCommandArgv(&cmd->wire, argc, argv, argvlen) < 0) {
		cmd->wire = NULL;
		note_error(l2, "out of memory");
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	if (l2->single) {
		node_send(l2->single, cmd, 0, on_reply);
	} else {
		cmd->slot = cluster_slot(argv[1], argvlen[1]);
		route_send(l2, cmd, route(l2, cmd->slot), 0);
	}
}

/* ---- the cluster: nodes, routing, redirects, the slot map -------------- */

static struct l2_node *node_new(struct l2 *l2, const struct cluster_addr *a)
{
	struct l2_node *nd;

	if (l2->nnodes >= L2_NODES_MAX || !(nd = calloc(1, sizeof *nd)))
		return NULL;
	nd->l2 = l2;
	nd->single = a == NULL;
	nd->state = BR_CLOSED;
	nd->period_ms = L2_OPEN_MS;
	if (!(nd->connect_timer = evtimer_new(l2->base, on_connect_timeout, nd))) {
		free(nd);
		return NULL;
	}
	if (a) {
		nd->addr = *a;
		snprintf(nd->where, sizeof nd->where, strchr(a->host, ':') ? "[%s]:%d" : "%s:%d",
			 a->host, a->port);
	}
	nd->next = l2->nodes;
	l2->nodes = nd;
	l2->nnodes++;
	return nd;
}

static struct l2_node *node_find(struct l2 *l2, const struct cluster_addr *a)
{
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		if (!nd->single && nd->addr.port == a->port && !strcmp(nd->addr.host, a->host))
			return nd;
	return NULL;
}

/* The node at a, made if new; NULL: no memory, or too many nodes. */
static struct l2_node *node_get(struct l2 *l2, const struct cluster_addr *a)
{
	struct l2_node *nd = node_find(l2, a);

	return nd ? nd : node_new(l2, a);
}

/* The next node to ask for the map (or to take a command whose slot has
 * no known owner): the seeds and the map's masters in turn, those whose
 * breaker is closed first. */
static struct l2_node *next_node(struct l2 *l2)
{
	if (!l2->nodes)
		return NULL;
	for (int pass = 0; pass < 2; pass++) {
		struct l2_node *start = l2->rr && l2->rr->next ? l2->rr->next : l2->nodes;
		struct l2_node *nd = start;
		do {
			if (!nd->single && (nd->seed || nd->in_map) &&
			    (pass || nd->state == BR_CLOSED)) {
				l2->rr = nd;
				return nd;
			}
			nd = nd->next ? nd->next : l2->nodes;
		} while (nd != start);
	}
	return NULL;
}

static struct l2_node *route(struct l2 *l2, unsigned slot)
{
	struct l2_node *nd = l2->owner[slot];

	return nd ? nd : next_node(l2);
}

/* A MOVED or an ASK in reply to cmd: follow it (MOVED also teaches the
 * map that slot's owner and has the map read again). 1 if it was one
 * (cmd is then sent again or completed), 0 if reply is another error. */
static int follow_redirect(struct l2_cmd *cmd, const redisReply *reply)
{
	struct l2 *l2 = cmd->l2;
	struct l2_node *from = cmd->node, *to;
	struct cluster_redirect rd;

	if (l2->single || !from || !cmd->wire || !reply->str ||
	    cluster_redirect_parse(reply->str, reply->len, from->addr.host, &rd) < 0)
		return 0;
	l2->n.redirects++;
	breaker_note(from, cmd->probe, 1);      /* it answered */
	cmd->probe = 0;
	cmd->node = NULL;
	if (++cmd->redirects > L2_REDIRECTS_MAX) {
		snprintf(l2->last_error, sizeof l2->last_error,
			 "more than %d redirections for slot %u", L2_REDIRECTS_MAX, rd.slot);
		complete(cmd, OUT_REFUSED, NULL);
		map_refresh(l2);
		return 1;
	}
	if (!(to = node_get(l2, &rd.to))) {
		note_error(l2, "too many cluster nodes");
		complete(cmd, OUT_ERROR, NULL);
		map_refresh(l2);        /* a new map makes room (map_room()) */
		return 1;
	}
	if (!rd.ask) {
		l2->owner[rd.slot] = to;
		map_refresh(l2);
	}
	route_send(l2, cmd, to, rd.ask);
	return 1;
}

/* A cluster's command whose connection failed (could not be made, or went
 * away before the reply: GETRANGE and SET may be sent twice): its node may
 * be gone, in a failover the map does not show yet. It is counted against
 * that node's breaker and waits for the map to be read again, its timer
 * running, then goes where the new map says; at most L2_REDIRECTS_MAX
 * times. 1 if parked, 0 if cmd is to complete now. */
static int park(struct l2_cmd *cmd)
{
	struct l2 *l2 = cmd->l2;

	if (l2->single || l2->freeing || cmd->internal || !cmd->wire ||
	    cmd->redirects >= L2_REDIRECTS_MAX)
		return 0;
	cmd->redirects++;
	if (cmd->node)
		breaker_note(cmd->node, cmd->probe, 0);
	cmd->probe = 0;
	cmd->node = NULL;
	cmd->ac = NULL;
	if (!cmd->timer && !(cmd->timer = evtimer_new(l2->base, on_cmd_timeout, cmd)))
		return 0;
	cmd->parked = 1;
	if (!evtimer_pending(cmd->timer, NULL)) {
		struct timeval tv;
		ms_to_tv(cmd->timeout_ms, &tv);
		evtimer_add(cmd->timer, &tv);
	}
	map_refresh(l2);
	return 1;
}

/* A new map is in: the parked commands go where it says. */
static void unpark_all(struct l2 *l2)
{
	struct l2_cmd **list;
	size_t n = 0, i = 0;

	for (struct l2_cmd *c = l2->pending; c; c = c->next)
		n += c->parked;
	if (!n)
		return;
	if (!(list = calloc(n, sizeof *list))) {
		return;                 /* their timers end them */
	}
	for (struct l2_cmd *c = l2->pending; c && i < n; c = c->next)
		if (c->parked) {
			c->parked = 0;
			c->refs++;      /* held across the sends below */
			list[i++] = c;
		}
	for (size_t j = 0; j < i; j++) {
		if (!list[j]->completed)
			route_send(l2, list[j], route(l2, list[j]->slot), 0);
		cmd_unref(list[j]);
	}
	free(list);
}

/*
 * Room for m's new nodes: the nodes m and the seeds do not name, with no
 * connection, connect or command of theirs, are freed, where more room
 * is needed (a fleet whose masters come back at new addresses, month
 * after month; a map that named 1,024 nodes once). 0, or -1 if m would
 * not fit even so, nothing freed. Then the old map's owners are gone:
 * the caller installs m.
 */
static int map_room(struct l2 *l2, const struct cluster_map *m)
{
	int fresh = 0, spare = 0;

	for (int i = 0; i < m->nnodes; i++)
		fresh += !node_find(l2, &m->node[i]);
	if (l2->nnodes + fresh <= L2_NODES_MAX)
		return 0;
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next) {
		nd->keep = nd->single || nd->seed || nd->ac ||
			   evtimer_pending(nd->connect_timer, NULL);
		for (int i = 0; i < L2_RETIRED_MAX; i++)
			nd->keep |= nd->retired[i] != NULL;
	}
	for (int i = 0; i < m->nnodes; i++) {
		struct l2_node *nd = node_find(l2, &m->node[i]);
		if (nd)
			nd->keep = 1;
	}
	for (struct l2_cmd *c = l2->pending; c; c = c->next)
		if (c->node)
			c->node->keep = 1;
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		spare += !nd->keep;
	if (l2->nnodes - spare + fresh > L2_NODES_MAX)
		return -1;
	memset(l2->owner, 0, sizeof l2->owner);
	for (struct l2_node **pp = &l2->nodes; *pp;) {
		struct l2_node *nd = *pp;
		if (nd->keep) {
			pp = &nd->next;
			continue;
		}
		*pp = nd->next;
		if (l2->rr == nd)
			l2->rr = NULL;
		event_free(nd->connect_timer);
		free(nd);
		l2->nnodes--;
	}
	return 0;
}

/* Install m: each slot's owner a node of ours. 0, or -1: too many nodes
 * (the old map stays), or no memory (no slot may have a known owner until
 * the next map). */
static int map_install(struct l2 *l2, const struct cluster_map *m)
{
	struct l2_node **by = calloc((size_t)m->nnodes + 1, sizeof *by);

	if (!by || map_room(l2, m) < 0) {
		free(by);
		return -1;
	}
	for (int i = 0; i < m->nnodes; i++)
		if (!(by[i] = node_get(l2, &m->node[i]))) {
			free(by);
			return -1;
		}
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		nd->in_map = 0;
	for (int i = 0; i < m->nnodes; i++)
		by[i]->in_map = 1;
	for (int s = 0; s < CLUSTER_SLOTS; s++)
		l2->owner[s] = m->owner[s] >= 0 ? by[m->owner[s]] : NULL;
	free(by);
	l2->n.map_refreshes++;
	/* A master that is down is being failed over, perhaps: read the map
	 * again soon, even if nothing asks for its slots meanwhile. */
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		if (nd->in_map && nd->down && !evtimer_pending(l2->refresh_timer, NULL)) {
			struct timeval tv;
			ms_to_tv(L2_DOWN_REFRESH_MS, &tv);
			evtimer_add(l2->refresh_timer, &tv);
		}
	return 0;
}

static void on_slots_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct l2_cmd *cmd = privdata;
	struct l2 *l2 = cmd->l2;
	struct l2_node *nd = ac->data;
	redisReply *reply = r;

	if (cmd->completed) {
		/* timed out or dropped already */
	} else if (!reply) {
		node_lost(nd, ac);
		if (ac->err)
			note_error(l2, ac->errstr);
		complete(cmd, cmd->fail, NULL);
	} else if (reply->type == REDIS_REPLY_ERROR) {
		note_error(l2, reply->str);
		log_warn("l2: %s does not give its slot map: %s", nd->where, reply->str);
		complete(cmd, OUT_REFUSED, NULL);
	} else if (cmd->conf != l2->conf || (!nd->seed && !nd->in_map)) {
		/* Asked before a reload: perhaps of another cluster. Again. */
		complete(cmd, OUT_REFUSED, NULL);
	} else {
		char why[128];
		struct cluster_map *m = cluster_map_parse(reply, nd->addr.host, why, sizeof why);
		if (!m || map_install(l2, m) < 0) {
			snprintf(l2->last_error, sizeof l2->last_error, "unusable slot map: %s",
				 m ? "more nodes than the daemon keeps, or out of memory" : why);
			log_warn("l2: %s: %s", nd->where, l2->last_error);
			complete(cmd, OUT_REFUSED, NULL);
		} else {
			log_debug("l2: slot map from %s: %d masters", nd->where, m->nnodes);
			complete(cmd, OUT_MAP, NULL);
		}
		cluster_map_free(m);
	}
	cmd_unref(cmd);
}

/* Read the slot map again (CLUSTER SLOTS to the next node), in the
 * background, at most once per L2_REFRESH_MS: later, from a timer, if the
 * last one was too recent; not at all if one is out. */
static void map_refresh(struct l2 *l2)
{
	static const char *argv[2] = { "CLUSTER", "SLOTS" };
	struct l2_node *nd;
	struct l2_cmd *cmd;
	int64_t now;

	if (l2->single || l2->off || l2->freeing || l2->refreshing)
		return;
	now = now_us();
	if (now < l2->refresh_after_us) {
		if (!evtimer_pending(l2->refresh_timer, NULL)) {
			struct timeval tv;
			ms_to_tv((l2->refresh_after_us - now) / 1000 + 1, &tv);
			evtimer_add(l2->refresh_timer, &tv);
		}
		return;
	}
	{
		int64_t ms = (int64_t)L2_REFRESH_MS << l2->refresh_fails;
		l2->refresh_after_us = now + (ms > L2_REFRESH_MAX_MS ? L2_REFRESH_MAX_MS : ms) * 1000;
	}
	if (!(nd = next_node(l2)) || !(cmd = calloc(1, sizeof *cmd)))
		return;
	cmd->l2 = l2;
	cmd->conf = l2->conf;
	l2->conf->refs++;
	cmd->refs = 1;
	cmd->fail = OUT_ERROR;
	cmd->internal = 1;
	cmd->timeout_ms = l2->conf->command_timeout_ms;
	pending_add(l2, cmd);
	l2->refreshing = 1;
	if (redisFormatSdsCommandArgv(&cmd->wire, 2, argv, NULL) < 0) {
		cmd->wire = NULL;
		complete(cmd, OUT_ERROR, NULL);
		return;
	}
	node_send(nd, cmd, 0, on_slots_reply);
}

static void on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
	map_refresh(arg);
}

/* A request that could not even be set up (no memory): an error here,
 * none of Redis's. */
void fail_unsent(struct l2 *l2, int probe)
{
	note_error(l2, "out of memory");
	l2->n.errors++;
	if (probe)
		probe_unsent(l2);
}

void probe_unsent(struct l2 *l2)
{
	if (l2->single && l2->single->state == BR_HALF_OPEN)
		l2->single->probing = 0;
}

/* ---- transfers: a value whole, or its chunks and manifest --------------- */

void l2_counters(struct l2 *l2, struct l2_counters *c)
{
	int mapped = 0;

	*c = l2->n;
	c->breaker_open = 0;
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		mapped |= nd->in_map;
	/* A cluster's: the masters that serve slots (the seeds, until a map
	 * is in); a seed that is down and serves none skips no request. */
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		if ((nd == l2->single || (!l2->single && (mapped ? nd->in_map : nd->seed))) &&
		    nd->state != BR_CLOSED)
			c->breaker_open = 1;
}

/* ---- settings, reloads and addresses ----------------------------------- */

/* Take no more commands on nd's connection. What is in flight on it still
 * gets its reply (redisAsyncDisconnect() waits for them), checked under
 * the settings it was sent with; then it closes. One that has not
 * connected yet has sent nothing: it is dropped, its commands fail (and
 * their requests compile). */
static void retire_connection(struct l2_node *nd)
{
	redisAsyncContext *ac = nd->ac;
	int slot = -1;

	if (!ac)
		return;
	for (int i = 0; i < L2_RETIRED_MAX && slot < 0; i++)
		if (!nd->retired[i])
			slot = i;
	if (!nd->connected || slot < 0) {
		drop_connection(nd, OUT_ERROR);
		return;
	}
	nd->ac = NULL;
	nd->connected = 0;
	evtimer_del(nd->connect_timer);
	nd->retired[slot] = ac;
	redisAsyncDisconnect(ac);
}

static void on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
	struct l2 *l2 = arg;
	struct l2_conf *c = l2->dns_conf;
	struct evutil_addrinfo *ai, *pick = NULL;
	char host[NI_MAXHOST];

	l2->resolving = 0;
	l2->dns_conf = NULL;
	if (result == EVUTIL_EAI_CANCEL) {
		conf_unref(c);
		return;
	}
	if (result) {
		log_warn("l2: cannot resolve '%s' again: %s; still using %s", c->name,
			 evutil_gai_strerror(result), c->host);
	} else {
		for (ai = res; ai && !pick; ai = ai->ai_next)   /* IPv4 first */
			if (ai->ai_family == AF_INET)
				pick = ai;
		if (!pick)
			pick = res;
		if (pick && getnameinfo(pick->ai_addr, (socklen_t)pick->ai_addrlen, host,
					sizeof host, NULL, 0, NI_NUMERICHOST) == 0 &&
		    strcmp(host, c->host)) {
			log_info("l2: '%s' now resolves to %s (was %s)", c->name, host, c->host);
			snprintf(c->host, sizeof c->host, "%s", host);
			/* The next command connects to the new address. */
			if (c == l2->conf && l2->single && l2->single->ac &&
			    strcmp(l2->single->ac_host, host))
				retire_connection(l2->single);
		}
	}
	if (res)
		evutil_freeaddrinfo(res);
	conf_unref(c);
}

/* Look the host name up again, in the background: hiredis would block the
 * loop on getaddrinfo(). A fresh evdns base each time reads
 * /etc/resolv.conf and /etc/hosts as they are now. */
static void resolve_again(struct l2 *l2)
{
	struct evutil_addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };

	if (!l2->conf->name || l2->resolving || l2->freeing)
		return;
	if (l2->dns)
		evdns_base_free(l2->dns, 0);
	l2->dns = evdns_base_new(l2->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
	if (!l2->dns) {
		log_warn("l2: cannot resolve '%s' again: no resolver", l2->conf->name);
		return;
	}
	l2->resolving = 1;
	l2->dns_conf = l2->conf;
	l2->conf->refs++;
	/* May call on_resolved() before it returns (/etc/hosts, a cache). */
	evdns_getaddrinfo(l2->dns, l2->conf->name, NULL, &hints, on_resolved, l2);
}

/* The node a single Redis's commands go to (made once, kept across
 * reloads), or NULL: no memory. */
static struct l2_node *single_node(struct l2 *l2)
{
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
		if (nd->single)
			return nd;
	return node_new(l2, NULL);
}

/* Point the tier at c's servers: a single Redis's node, or a cluster's
 * seeds with an empty map (read at once, in the background). Every
 * connection open is retired and every breaker closed. 0, or -1 (no
 * memory; nothing changed). */
static int use_servers(struct l2 *l2, const struct l2_conf *c)
{
	struct l2_node *single = NULL;

	if (!c->cluster && !(single = single_node(l2)))
		return -1;
	for (int i = 0; i < c->nseeds; i++)
		if (!node_get(l2, &c->seeds[i]))
			return -1;
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next) {
		retire_connection(nd);
		breaker_reset(nd);
		nd->seed = nd->in_map = 0;
	}
	for (int i = 0; i < c->nseeds; i++)
		node_get(l2, &c->seeds[i])->seed = 1;
	memset(l2->owner, 0, sizeof l2->owner);
	l2->single = single;
	l2->rr = NULL;
	l2->refresh_after_us = 0;
	l2->refresh_fails = 0;
	return 0;
}

/* A transfer's buffers (hiredis's reply, the record it opens into) come
 * from the heap, and in a fresh process each of their pages faults in at
 * its first write: about 12 us a page on a virtualised host, 3 ms a MiB,
 * so a fresh node's first 1 MiB get took 11 ms, 9 of them faults. Fault
 * L2_WARM_HEAP in here, at start, as huge pages where the kernel allows,
 * and give it back to malloc, which keeps it (the process's
 * M_TRIM_THRESHOLD, server.c): that first get then takes 2 ms
 * (bench/NOTES.md). */
#define L2_WARM_HEAP ((size_t)8 << 20)

static void heap_warm_up(void)
{
	char *p = malloc(L2_WARM_HEAP);

	if (!p)
		return;
#ifdef MADV_HUGEPAGE
	uintptr_t huge = (uintptr_t)2 << 20;
	uintptr_t from = ((uintptr_t)p + huge - 1) & ~(huge - 1);
	madvise((void *)from, (uintptr_t)p + L2_WARM_HEAP - from, MADV_HUGEPAGE);
#endif
	for (size_t i = 0; i < L2_WARM_HEAP; i += 4096)
		((volatile char *)p)[i] = 0;
	free(p);
}

struct l2 *l2_new(struct event_base *base, const struct l2_config *cfg, struct buf *err)
{
	struct l2 *l2 = calloc(1, sizeof *l2);

	if (!l2) {
		buf_printf(err, "out of memory");
		return NULL;
	}
	l2->base = base;
	{
		char host[64] = "";
		gethostname(host, sizeof host - 1);
		snprintf(l2->node, sizeof l2->node, "%s:%ld", host, (long)getpid());
	}
	if (!(l2->conf = conf_new(cfg, NULL, err)))
		goto fail;
	seal_warm_up();                 /* l2_seal.c: libcrypto, AES-GCM */
	heap_warm_up();
	if (!(l2->refresh_timer = evtimer_new(base, on_refresh_timer, l2)) ||
	    use_servers(l2, l2->conf) < 0) {
		buf_printf(err, "out of memory");
		goto fail;
	}
	map_refresh(l2);                /* a cluster: its map, in the background */
	return l2;
fail:
	l2_free(l2);
	return NULL;
}

int l2_reconfigure(struct l2 *l2, const struct l2_config *cfg, struct buf *err)
{
	struct l2_conf *next = NULL, *cur = l2->conf;

	if (!cfg->url || !*cfg->url) {
		if (!l2->off)
			log_info("l2: off");
		l2->off = 1;
		for (struct l2_node *nd = l2->nodes; nd; nd = nd->next)
			retire_connection(nd);
		return 0;
	}
	if (!(next = conf_new(cfg, cur, err)))
		return -1;
	int moved = conf_moved(cur, next);
	/* Another server: its own chance, with the breaker closed. */
	if (moved && use_servers(l2, next) < 0) {
		buf_printf(err, "out of memory");
		conf_unref(next);
		return -1;
	}
	if (l2->off || moved || strcmp(cur->prefix, next->prefix) ||
	    cur->read_only != next->read_only || cur->secret_len != next->secret_len ||
	    CRYPTO_memcmp(cur->secret, next->secret, next->secret_len) ||
	    cur->connect_timeout_ms != next->connect_timeout_ms ||
	    cur->command_timeout_ms != next->command_timeout_ms ||
	    cur->max_value != next->max_value)
		log_info("l2: %s, prefix '%s'%s, timeout %d ms, values up to %lld bytes%s",
			 next->where, next->prefix, next->read_only ? ", read-only" : "",
			 next->command_timeout_ms, (long long)next->max_value,
			 moved ? "; reconnecting" : "");
	l2->conf = next;
	l2->off = 0;
	conf_unref(cur);
	if (moved)
		map_refresh(l2);
	return 0;
}

void l2_free(struct l2 *l2)
{
	if (!l2)
		return;
	/* No callbacks from here on: the caller is going away. */
	l2->freeing = 1;
	for (struct l2_node *nd = l2->nodes; nd; nd = nd->next) {
		drop_connection(nd, OUT_ERROR);
		for (int i = 0; i < L2_RETIRED_MAX; i++) {
			redisAsyncContext *ac = nd->retired[i];
			nd->retired[i] = NULL;
			if (ac)
				redisAsyncFree(ac);
		}
	}
	while (l2->pending)             /* none: each was on a connection */
		complete(l2->pending, OUT_ERROR, NULL);
	if (l2->dns)
		evdns_base_free(l2->dns, 1);    /* cancels a lookup: on_resolved() */
	while (l2->nodes) {
		struct l2_node *nd = l2->nodes;
		l2->nodes = nd->next;
		event_free(nd->connect_timer);
		free(nd);
	}
	if (l2->refresh_timer)
		event_free(l2->refresh_timer);
	conf_unref(l2->conf);
	free(l2);
}
