/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server: the master process of ptxcached: its loop, on top of the rest.
 *
 * One libevent loop owns everything: the listening Unix socket, client
 * connections, the SQLite store and the worker pool. This file is the
 * top floor (ARCHITECTURE.md, "Floors"): the listeners (the main
 * socket's here, the tenants' through tenant.c, which hands each
 * connection to accept_conn() with its tenant) and their access
 * policy, the request table's dispatch (with hello and ping, its own),
 * the timers, signals, start, reload and stop; it starts and stops the
 * floors below and hands them, at start, the only ways they call back up
 * (struct server's on_frame and on_quiet, the close hooks). A request
 * flows downward:
 *
 *   frame in (conn.c: header checked against limits) -> body validated
 *   (msg.c) -> the request table (here) -> its family: compile.c (the PTX
 *   stage) and cubin_req.c (the cubin stage), manage.c (stats and the
 *   cache), artifact.c (the JIT's own entries), or hello and ping here
 *   -> compile: key derived (key.c) -> store hit? reply (reply.c, conn.c)
 *   -> in-flight flight for the same key? join it (single flight: flight.c)
 *   -> else a new flight, asked of Redis, then queued on the pool
 *   -> worker result -> stored (committed) -> each waiter answered as its
 *      family asked when it joined (struct waiter_ops)
 *
 * The master never runs LLVM code and never waits on a compile.
 */
#include "daemon/server.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "daemon/artifact.h"
#include "daemon/codegen.h"
#include "daemon/compile.h"
#include "daemon/config.h"
#include "daemon/flight.h"
#include "daemon/l2_fleet.h"
#include "daemon/idle.h"
#include "daemon/cubin.h"
#include "daemon/key.h"
#include "daemon/l2.h"
#include "daemon/confirm.h"
#include "daemon/conn.h"
#include "daemon/log.h"
#include "daemon/manage.h"
#include "daemon/master.h"
#include "daemon/sandbox.h"
#include "daemon/store.h"
#include "daemon/syncer.h"
#include "daemon/tenant.h"
#include "proto/frame.h"
#include "proto/msg.h"

#define SERVER_NAME "ptxcached " PTXCACHE_VERSION

/* ---- requests ------------------------------------------------------- */

static void handle_hello(struct conn *c, uint64_t id, const struct msg *m)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, FRAME_HELLO | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_int(&w, "proto", FRAME_VERSION);
	msg_put_str(&w, "server", SERVER_NAME);
	msg_put_str(&w, "version", PTXCACHE_VERSION);
	msg_put_str(&w, "compiler", codegen_identity());
	msg_put_int(&w, "pid", getpid());
	msg_put_int(&w, "artifact_max_value", c->srv->cfg->artifact_max_value);
	if (c->srv->asm_be[CUBIN_PTXAS].version)
		msg_put_str(&w, "assembler", c->srv->asm_be[CUBIN_PTXAS].version);
	if (c->srv->asm_be[CUBIN_NVJITLINK].version)
		msg_put_str(&w, "nvjitlink", c->srv->asm_be[CUBIN_NVJITLINK].version);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	buf_free(&b);
}

static void handle_ping(struct conn *c, uint64_t id, const struct msg *m)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, FRAME_PING | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	buf_free(&b);
}

static const struct request_kind server_kinds[] = {
	{ .type = FRAME_HELLO, .handler = handle_hello },
	{ .type = FRAME_PING, .handler = handle_ping },
};

static const struct request_table server_requests = {
	.kinds = server_kinds,
	.n = sizeof server_kinds / sizeof server_kinds[0],
};

/* The request table, a part per family (master.h has the checklist for
 * adding a request). */
static const struct request_table *const request_tables[] = {
	&server_requests,
	&compile_requests,
	&manage_requests,
	&artifact_requests,
};

static void handle_frame(struct conn *c, uint8_t type, const void *body, uint32_t len)
{
	struct msg m;
	struct buf err = BUF_INIT;
	int64_t id = 0;

	c->srv->n.requests++;
	if (msg_parse(&m, body, len, &MSG_LIMITS_DEFAULT, &err) < 0) {
		conn_protocol_error(c, err.data ? err.data : "malformed message");
		goto out;
	}
	if (msg_int(&m, "id", &id) < 0 || id < 0) {
		conn_protocol_error(c, "request 'id' must be a non-negative integer");
		goto out;
	}
	for (size_t t = 0; t < sizeof request_tables / sizeof request_tables[0]; t++) {
		const struct request_table *rt = request_tables[t];
		for (size_t i = 0; i < rt->n; i++) {
			if (rt->kinds[i].type == type) {
				rt->kinds[i].handler(c, (uint64_t)id, &m);
				goto out;
			}
		}
	}
	buf_printf(&err, "unknown request type %u", type);
	conn_send_error(c, (uint64_t)id, "unsupported", err.data);
out:
	msg_free(&m);
	buf_free(&err);
}

/* The head of a frame whose last field conn.c would take as it arrives:
 * to its request's head handler, if it has one and the field is the one
 * it names (master.h); else the frame is read whole. */
static int handle_frame_head(struct conn *c, uint8_t type, const void *body,
			     const struct msg_tail *t, struct frame_sink **sink)
{
	const struct request_kind *kind = NULL;
	struct msg m;
	struct buf copy = BUF_INIT, err = BUF_INIT;
	const char *name;
	size_t name_len;
	int64_t id = 0;
	int r = 1;

	*sink = NULL;
	for (size_t i = 0; i < sizeof request_tables / sizeof request_tables[0]; i++)
		for (size_t j = 0; j < request_tables[i]->n; j++)
			if (request_tables[i]->kinds[j].type == type)
				kind = &request_tables[i]->kinds[j];
	if (!kind || !kind->head)
		return 0;
	if (msg_parse_head(&m, body, t, &MSG_LIMITS_DEFAULT, &copy, &name, &name_len,
			   &err) < 0) {
		c->srv->n.requests++;
		conn_protocol_error(c, err.data ? err.data : "malformed message");
		goto out;
	}
	if (name_len != strlen(kind->tail) || memcmp(name, kind->tail, name_len)) {
		r = 0;
		goto out;
	}
	if (msg_int(&m, "id", &id) < 0 || id < 0) {
		c->srv->n.requests++;
		conn_protocol_error(c, "request 'id' must be a non-negative integer");
		goto out;
	}
	r = kind->head(c, (uint64_t)id, &m, t->len, sink);
	if (r)
		c->srv->n.requests++;
out:
	msg_free(&m);
	buf_free(&copy);
	buf_free(&err);
	return r;
}

/* ---- the listener and its access policy -------------------------- */

/* Is id (a name or a number) in the comma-separated list? */
static int listed(const char *list, unsigned id, int is_group)
{
	char item[256];
	unsigned v;

	for (const char *p = list; config_list_next(&p, item, sizeof item);)
		if (config_list_id(item, is_group, &v) && v == id)
			return 1;
	return 0;
}

/*
 * The access policy: root, the daemon's own user, members of the socket's
 * group, and the configured users and groups. The peer's groups come from
 * conn_groups() (all of them, not only the primary one).
 */
static int allowed(struct server *s, struct conn *c)
{
	if (c->uid == 0 || c->uid == geteuid() || listed(s->cfg->allow_users, c->uid, 0))
		return 1;
	for (int i = -1, n = conn_groups(c); i < n; i++) {
		gid_t g = i < 0 ? c->gid : c->groups[i];
		if ((g == s->socket_gid && s->socket_gid != 0) ||
		    listed(s->cfg->allow_groups, g, 1))
			return 1;
	}
	return 0;
}

/* A connection on the main socket (t: tenant_main) or on tenant t's
 * (tenant.c's listeners, through tenants_new()): the same policy and
 * limits for each, its identity (t, its uid) fixed from here on. */
static void accept_conn(void *arg, int fd, const struct tenant *t)
{
	struct server *s = arg;
	struct conn *c = conn_new(s, fd, t);
	char why[160], who[80];

	if (!c)
		return;
	conn_who(c, who, sizeof who);
	if (!allowed(s, c)) {
		s->n.denied_connections++;
		log_warn("refused connection from %s (pid %d): not allowed", who, (int)c->pid);
		snprintf(why, sizeof why, "uid %u is not allowed to use this daemon",
			 (unsigned)c->uid);
		conn_refuse(c, "denied", why);
	} else if (!c->peer) {
		/* No per-user accounting, so no per-user limits: refuse. */
		conn_refuse(c, "internal", "out of memory");
	} else if (s->nconns > s->cfg->max_conns ||
		   (c->peer && c->peer->conns > s->cfg->max_conns_per_uid) ||
		   s->stopping) {
		s->n.refused_connections++;
		snprintf(why, sizeof why, s->stopping ? "the daemon is shutting down" :
			 s->nconns > s->cfg->max_conns ? "too many connections (limit %d)" :
			 "too many connections for this user (limit %d)",
			 s->nconns > s->cfg->max_conns ? s->cfg->max_conns :
			 s->cfg->max_conns_per_uid);
		log_info("refused connection from %s: %s", who, why);
		conn_refuse(c, "limit", why);
	} else {
		conn_arm(c);
	}
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int socklen, void *arg)
{
	accept_conn(arg, fd, &tenant_main);
}

/* The tenants' sockets as the settings say (start: fatal where they
 * cannot be; reload: the old ones kept). A reload that removes a tenant
 * closes its connections too: its socket gone, nobody is that tenant any
 * more. */
static int configure_tenants(struct server *s, struct buf *err)
{
	if (tenants_configure(s->tenants, s->cfg->tenant_dir, s->cfg->tenants, err) < 0)
		return -1;
	/* From the top after each close: a close's hooks may answer (and so
	 * close) other connections; a closed one leaves the list. */
	for (struct conn *c = s->conns; c;) {
		if (tenants_serves(s->tenants, c->tenant.id)) {
			c = c->next;
			continue;
		}
		log_info("conn %llu: tenant '%s' removed; closing",
			 (unsigned long long)c->serial, c->tenant.name);
		conn_close(c);
		c = s->conns;
	}
	return 0;
}

/* ---- start and stop ------------------------------------------------- */

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
	store_flush(((struct server *)arg)->store);
}

/* Every second: a progress frame to each request waiting on a flight
 * (flight_progress()), so that its client, which gives up on a daemon it
 * does not hear from, keeps waiting. */
static void on_progress(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	flight_progress(s);
	artifacts_progress(s->arts);
}

/* Tell systemd (Type=notify) how we are; nothing without NOTIFY_SOCKET. */
static void notify(const char *msg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!path || !*path || strlen(path) >= sizeof sa.sun_path)
		return;
	strcpy(sa.sun_path, path);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
		log_debug("cannot notify systemd: %s", strerror(errno));
	close(fd);
}

static void on_stop_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	log_warn("%d compiles still running after %d s; stopping anyway",
		 s->nflights, s->cfg->shutdown_timeout_s);
	event_base_loopexit(s->base, NULL);
}

/* While stopping: exit the loop once no compile is in flight, no put's
 * file is being synced and every reply has been written. s->on_quiet:
 * conn.c asks again as output drains, flight.c as each flight ends,
 * artifact.c as each synced put is answered (server_maybe_stop()). */
static void stop_if_quiet(struct server *s)
{
	struct artifact_counters ac;

	if (!s->stopping || s->nflights)
		return;
	artifacts_counters(s->arts, &ac);
	if (ac.syncing)
		return;
	for (struct conn *c = s->conns; c; c = c->next)
		if (c->bev && evbuffer_get_length(bufferevent_get_output(c->bev)))
			return;
	event_base_loopexit(s->base, NULL);
}

/* SIGTERM, SIGINT: stop accepting, let in-flight compiles finish (up to
 * shutdown_timeout), then leave the loop; server_run() checkpoints. */
static void on_stop(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;
	struct timeval tv = { s->cfg->shutdown_timeout_s, 0 };

	if (s->stopping) {
		event_base_loopexit(s->base, NULL);
		return;
	}
	notify("STOPPING=1");
	s->stopping = 1;
	/* Nobody waits on an artifact through a stop: each gets its miss now. */
	artifacts_stop(s->arts);
	/* Confirmations are idle-time work: none holds up the stop. */
	pool_cancel_background(s->pool);
	log_info("signal %d: stopping; %d compiles in flight", (int)sig, s->nflights);
	/* A socket of our own: new connections get "shutting down" (in
	 * on_accept()). A socket from systemd stays with systemd: connections
	 * wait there for the next start instead of failing. */
	if (s->socket_from_systemd)
		evconnlistener_disable(s->listener);
	s->stop_timer = evtimer_new(s->base, on_stop_deadline, s);
	if (s->stop_timer)
		evtimer_add(s->stop_timer, &tv);
	stop_if_quiet(s);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
	struct server *s = arg;

	tenant_accept_failed(l, s->accept_resume, s->cfg->socket_path);
}

/* After a failed accept's pause: accepting again, unless a stop turned
 * systemd's socket off meanwhile. */
static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	if (!(s->stopping && s->socket_from_systemd))
		evconnlistener_enable(s->listener);
}

/* Every worker of the first round is warm (or failed to start): only now
 * is the daemon ready, to systemd and to the clients waiting in the
 * backlog. Answering earlier would hand the first request to a cold
 * worker, or keep it waiting for the warm-up anyway. */
static void on_warm(void *arg)
{
	struct server *s = arg;
	struct pool_counters pc;

	pool_counters(s->pool, &pc);
	log_info("serving: %d of %d workers warm after %lld ms", pc.ready, s->cfg->pool.size,
		 (long long)pool_warm_ms(s->pool));
	if (!s->stopping) {
		evconnlistener_enable(s->listener);
		tenants_enable(s->tenants, 1);
	}
	notify("READY=1\nSTATUS=serving");
}

static void arts_conn_closed(void *arts, struct conn *c)
{
	artifacts_conn_closed(arts, c);
}

static void artifact_config_of(const struct server *s, struct artifact_config *ac)
{
	const struct server_config *cfg = s->cfg;

	*ac = (struct artifact_config){
		.max_value = cfg->artifact_max_value,
		.lease_timeout_s = cfg->artifact_lease_timeout_s,
		.wait_s = cfg->artifact_wait_s,
		.max_leases = cfg->artifact_max_leases,
		.groups = cfg->artifact_groups,
		.trust = s->sharing == SHARING_TRUST,
	};
	store_set_artifact_share(s->store, cfg->max_size / 100 * cfg->artifact_share);
}

/* The Redis tier's settings, as l2.h takes them. */
static void l2_config_of(const struct server_config *cfg, struct l2_config *lc)
{
	*lc = (struct l2_config){
		.url = cfg->l2_url,
		.secret_file = cfg->l2_secret_file,
		.prefix = cfg->l2_prefix,
		.read_only = cfg->l2_read_only,
		.connect_timeout_ms = cfg->l2_timeout_ms,
		.command_timeout_ms = cfg->l2_timeout_ms,
		.max_value = cfg->l2_max_value,
		.identity = codegen_identity(),
	};
}

/* A reload's Redis tier: started, changed (the secret file is read again
 * each time) or switched off; lookups in flight finish under the settings
 * they began with (l2_reconfigure()). Settings the tier refuses leave it
 * as it was. */
static void reload_l2(struct server *s)
{
	struct l2_config lc;
	struct buf err = BUF_INIT;

	l2_config_of(s->cfg, &lc);
	if (!s->l2) {
		if (lc.url && *lc.url && !(s->l2 = l2_new(s->base, &lc, &err)))
			log_err("reload: the shared tier stays off: %s", err.data);
		else if (s->l2)
			log_info("l2: on");
	} else if (l2_reconfigure(s->l2, &lc, &err) < 0) {
		log_err("reload: the shared tier keeps its settings: %s", err.data);
	}
	buf_free(&err);
}

/* SIGHUP: reload what can change live. */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;
	struct buf err = BUF_INIT;

	if (config_reload(s->cfg, &err) < 0) {
		log_err("reload failed, keeping the old settings: %s", err.data);
	} else {
		store_set_max_size(s->store, s->cfg->max_size);
		pool_reconfigure(s->pool, &s->cfg->pool);
		reload_l2(s);
		fleet_set_lease_ms(s->fleet, (int64_t)s->cfg->l2_lease_timeout_s * 1000);
		struct artifact_config ac;
		artifact_config_of(s, &ac);
		artifacts_configure(s->arts, &ac);
		if (configure_tenants(s, &err) < 0)
			log_err("reload: the tenants' sockets stay as they were: %s", err.data);
		log_info("configuration reloaded");
	}
	buf_free(&err);
}

/* A listening socket passed by systemd (socket activation), or -1. */
static int systemd_socket(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");

	if (!pid || !fds || atol(pid) != (long)getpid() || atoi(fds) < 1)
		return -1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	int fd = 3;     /* SD_LISTEN_FDS_START */
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	evutil_make_socket_nonblocking(fd);
	return fd;
}

/* The group of the socket file behind fd, for the access policy. */
static gid_t socket_group(int fd)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof sa;
	struct stat st;

	memset(&sa, 0, sizeof sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || !sa.sun_path[0] ||
	    stat(sa.sun_path, &st) < 0)
		return 0;
	return st.st_gid;
}

/* One daemon per cache directory, through a lock on DIR/lock. */
static int lock_cache(const char *dir, struct buf *err)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/lock", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		buf_printf(err, "cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		buf_printf(err, "cache directory '%s' is in use by another daemon", dir);
		close(fd);
		return -1;
	}
	return fd;
}

int server_run(struct server_config *cfg)
{
	struct server s = { .cfg = cfg, .started = time(NULL),
			    .seen_loose = calloc(SEEN_SLOTS, sizeof(uint64_t)),
			    .on_frame = handle_frame,
			    .on_frame_head = handle_frame_head, .on_quiet = stop_if_quiet };
	struct buf err = BUF_INIT;
	struct idle *idle = NULL;
	int lock = -1, lfd = -1, rc = 1;

	signal(SIGPIPE, SIG_IGN);
	/* Past a file-size limit, writes fail with EFBIG (a store error the
	 * client never sees) instead of killing the daemon. */
	signal(SIGXFSZ, SIG_IGN);
	/* A hit moves its blob through buffers of its size (decompression,
	 * reply, socket queue). glibc would hand blocks over 128 KB back to the
	 * kernel on free and fault them in again, page by page, on the next
	 * hit: 80% of the master's time on a 1.3 MB cubin (bench/NOTES.md).
	 * Keep up to 64 MB of freed memory for reuse instead. */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	if (tenant_make_dir(cfg->cache_dir, &err) < 0 ||
	    (lock = lock_cache(cfg->cache_dir, &err)) < 0)
		goto out;
	s.store = store_open(cfg->cache_dir, cfg->max_size, &err);
	if (!s.store)
		goto out;
	s.base = event_base_new();
	if (!s.base) {
		buf_puts(&err, "cannot create event loop");
		goto out;
	}
	/* The assemblers: found once, before any worker is forked. */
	cubin_find_ptxas(cfg->ptxas && *cfg->ptxas ? cfg->ptxas : NULL,
			 &s.asm_be[CUBIN_PTXAS]);
	cubin_find_nvjitlink(cfg->nvjitlink && *cfg->nvjitlink ? cfg->nvjitlink : NULL,
			     &s.asm_be[CUBIN_NVJITLINK]);
	const struct cubin_backend *pb = &s.asm_be[CUBIN_PTXAS];
	const char *rel = pb->version ? strstr(pb->version, "release") : NULL;
	if (pb->path)
		log_info("ptxas '%s' (%.*s)", pb->path, rel ? (int)strcspn(rel, "\n") : 0,
			 rel ? rel : "");
	else
		log_warn("%s; cubin requests will be refused", s.asm_be[CUBIN_PTXAS].why);
	if (s.asm_be[CUBIN_NVJITLINK].path)
		log_info("nvJitLink '%s'", s.asm_be[CUBIN_NVJITLINK].path);
	const char *const asm_paths[2] = { s.asm_be[0].path, s.asm_be[1].path };
	if (sandbox_start(&cfg->pool, cfg->cache_dir, asm_paths, &s.asm_roots,
			  &s.worker_tmp, &err) < 0)
		goto out;
	if (sharing_parse(cfg->sharing, &s.sharing) < 0) {
		buf_printf(&err, "sharing must be confirm, trust or separate, not '%s'",
			   cfg->sharing ? cfg->sharing : "");
		goto out;
	}
	if (cfg->namespace_per_uid)
		s.sharing = SHARING_SEPARATE;
	s.pool = pool_new(s.base, &cfg->pool, &err);
	if (!s.pool)
		goto out;
	/* The master's own first-use costs, while the workers warm up. */
	char hex[65];
	key_sha256_hex(SERVER_NAME, sizeof SERVER_NAME, hex);
	store_warm_up(s.store);
	if (cfg->l2_url && *cfg->l2_url) {
		struct l2_config lc;
		l2_config_of(cfg, &lc);
		s.l2 = l2_new(s.base, &lc, &err);
		if (!s.l2)
			goto out;
	}
	struct artifact_config ac;
	artifact_config_of(&s, &ac);
	if (!(s.sync = syncer_new(s.base)) || !(s.unlinks = syncer_new(s.base)) ||
	    !(s.checkpoints = syncer_new(s.base)) ||
	    !(s.fleet = fleet_new(s.base, &s.l2, (int64_t)cfg->l2_lease_timeout_s * 1000)) ||
	    !(s.arts = artifacts_new(s.base, s.store, &s.l2, s.fleet, s.sync, &ac))) {
		buf_puts(&err, "out of memory");
		goto out;
	}
	store_set_syncer(s.store, s.unlinks);
	store_set_checkpointer(s.store, s.checkpoints);
	/* What a connection's close ends: its queued compiles may have
	 * nobody left to answer; its leases pass on, its waits end. */
	conn_on_close(&s, flight_conn_closed, &s);
	conn_on_close(&s, arts_conn_closed, s.arts);
	/* Every socket the daemon makes: socket-mode, socket-group. */
	struct socket_perm perm = { .mode = (unsigned)cfg->socket_mode, .gid = -1 };
	unsigned gid;
	if (cfg->socket_group && *cfg->socket_group) {
		if (!config_list_id(cfg->socket_group, 1, &gid)) {
			buf_printf(&err, "socket-group: no group '%s'", cfg->socket_group);
			goto out;
		}
		perm.gid = (long)gid;
	}
	/* The tenants' sockets, first (a bad name binds nothing): accepting
	 * once the workers are warm, as the main one. */
	if (!(s.tenants = tenants_new(s.base, s.store, &perm, accept_conn, &s))) {
		buf_puts(&err, "out of memory");
		goto out;
	}
	if (configure_tenants(&s, &err) < 0)
		goto out;
	if ((lfd = systemd_socket()) >= 0)
		s.socket_from_systemd = 1;
	else if ((lfd = tenant_listen(cfg->socket_path, &perm, &err)) < 0)
		goto out;
	s.socket_gid = socket_group(lfd);
	/* Disabled until the workers are warm (on_warm()): connections wait
	 * in the socket's backlog meanwhile, under systemd or not. */
	s.listener = evconnlistener_new(s.base, on_accept, &s,
					LEV_OPT_CLOSE_ON_FREE | LEV_OPT_DISABLED, -1, lfd);
	s.accept_resume = evtimer_new(s.base, on_accept_resume, &s);
	if (!s.listener || !s.accept_resume) {
		buf_puts(&err, "cannot watch the listening socket");
		if (!s.listener)
			close(lfd);
		goto out;
	}
	evconnlistener_set_error_cb(s.listener, on_accept_error);
	struct timeval second = { 1, 0 };
	s.flush_timer = event_new(s.base, -1, EV_PERSIST, on_flush, &s);
	s.progress_timer = event_new(s.base, -1, EV_PERSIST, on_progress, &s);
	s.sigterm = evsignal_new(s.base, SIGTERM, on_stop, &s);
	s.sigint = evsignal_new(s.base, SIGINT, on_stop, &s);
	s.sighup = evsignal_new(s.base, SIGHUP, on_reload, &s);
	event_add(s.flush_timer, &second);
	if (s.progress_timer)
		event_add(s.progress_timer, &second);
	evsignal_add(s.sigterm, NULL);
	evsignal_add(s.sigint, NULL);
	evsignal_add(s.sighup, NULL);
	log_info("listening on '%s'%s, cache '%s', %d workers, %s", cfg->socket_path,
		 s.socket_from_systemd ? " (from systemd)" : "", cfg->cache_dir,
		 cfg->pool.size, codegen_identity());
	notify("STATUS=warming up the workers");
	pool_when_warm(s.pool, on_warm, &s);
	idle = idle_start(&s);

	event_base_dispatch(s.base);
	rc = 0;
	if (!s.socket_from_systemd)
		unlink(cfg->socket_path);
out:
	tenants_free(s.tenants);        /* their sockets closed and removed */
	s.tenants = NULL;
	if (err.len)
		log_err("%s", err.data);
	idle_free(idle);
	if (s.listener)
		evconnlistener_free(s.listener);
	l2_free(s.l2);
	s.l2 = NULL;
	pool_free(s.pool);      /* ends the flights it held: their waiters told */
	s.pool = NULL;
	/* Connections still open: closed, each freed once no flight holds it;
	 * then the flights left, whose Redis lookup l2_free() cancelled. */
	while (s.conns)
		conn_close(s.conns);
	flight_abandon_all(&s);
	/* The puts being synced stored and answered (or refused) while their
	 * requests' state is there; files not yet unlinked are left for the
	 * next start's sweep. */
	syncer_free(s.sync);
	store_set_syncer(s.store, NULL);
	syncer_free(s.unlinks);
	syncer_free(s.checkpoints);     /* the checkpoint in progress ends */
	store_set_checkpointer(s.store, NULL);
	artifacts_free(s.arts);
	fleet_free(s.fleet);    /* after everyone ended their waits */
	if (s.accept_resume)
		event_free(s.accept_resume);
	if (s.flush_timer)
		event_free(s.flush_timer);
	if (s.progress_timer)
		event_free(s.progress_timer);
	if (s.sigterm)
		event_free(s.sigterm);
	if (s.sigint)
		event_free(s.sigint);
	if (s.sighup)
		event_free(s.sighup);
	if (s.stop_timer)
		event_free(s.stop_timer);
	store_close(s.store);
	free(s.asm_roots);
	free(s.worker_tmp);
	cubin_backend_free(&s.asm_be[CUBIN_PTXAS]);
	cubin_backend_free(&s.asm_be[CUBIN_NVJITLINK]);
	free(s.seen_loose);
	if (s.base)
		event_base_free(s.base);
	if (lock >= 0)
		close(lock);
	buf_free(&err);
	return rc;
}
