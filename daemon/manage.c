/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manage: the stats and cache-management requests, in the master.
 *
 * stats (the counters of the master, the pool, the store and the Redis
 * tier, as one JSON object), ls, show, explain (the key a compile request
 * would have, and the nearest stored entry with what differs), verify and
 * evict (purge is evict with all). Each answers at once, in JSON, from the
 * store, and none starts a flight: this is how `ptxcache` manages the
 * cache without opening the database, which only the master does
 * (store.c). Evicting rewrites the cache for everyone: root and the
 * daemon's own user only; anyone may evict the artifacts of their own
 * scope that they see.
 *
 * What a client sees (view_of()): for anyone but root and the daemon's
 * user on the main socket (is_admin()), only the entries its identity
 * (conn_tenant(): tenant and uid) stored or was answered with, as
 * store_note_user() recorded them (artifact.c and flight.c note each put
 * and each answer), and of the artifacts only its scope's. Every query
 * applies that filter in SQL: ls lists nothing else, show answers
 * "no such entry" as for an absent key, explain finds neither "cached"
 * nor a nearest entry outside it, verify checks and reports nothing
 * else, and evict removes and counts nothing else. stats stays global
 * (ARCHITECTURE.md's threat model says what that tells).
 */
#include "daemon/manage.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/artifact.h"
#include "daemon/codegen.h"
#include "daemon/compile.h"
#include "daemon/cubin_req.h"
#include "daemon/l2_fleet.h"
#include "daemon/key.h"
#include "daemon/l2.h"
#include "daemon/store.h"
#include "daemon/tenant.h"
#include "proto/frame.h"
#include "proto/msg.h"

static void reply_json(struct conn *c, uint8_t type, uint64_t id,
		       const struct buf *json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, type | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_strn(&w, "json", json->data ? json->data : "{}", json->len ? json->len : 2);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	buf_free(&b);
}

static void handle_stats(struct conn *c, uint64_t id, const struct msg *m)
{
	struct server *s = c->srv;
	struct pool_counters pc;
	struct store_counters sc;
	struct buf j = BUF_INIT;
	int64_t entries = 0, bytes = 0;

	pool_counters(s->pool, &pc);
	store_counters(s->store, &sc);
	store_totals(s->store, &entries, &bytes);
	buf_printf(&j,
		   "{\"entries\":%lld,\"bytes\":%lld,\"hits\":%lld,\"misses\":%lld,"
		   "\"compiles\":%lld,\"compile_errors\":%lld,\"worker_crashes\":%lld,"
		   "\"dedup_joins\":%lld,\"requests\":%lld,\"connections\":%lld,"
		   "\"protocol_errors\":%lld,\"store_errors\":%lld,"
		   "\"refused_connections\":%lld,\"denied_connections\":%lld,"
		   "\"header_timeouts\":%lld,\"idle_timeouts\":%lld,"
		   "\"output_overflows\":%lld,\"refused_jobs\":%lld,"
		   "\"corrupt_blobs\":%lld,\"evictions\":%lld,\"disk_full_retries\":%lld,"
		   "\"checkpoints\":%lld,\"checkpoint_errors\":%lld,\"checkpointing\":%d,"
		   "\"worker_timeouts\":%lld,\"workers_spawned\":%lld,"
		   "\"workers_recycled\":%lld,\"worker_start_failures\":%lld,"
		   "\"jobs_dropped\":%lld,\"sandbox_violations\":%lld,"
		   "\"confirmations\":%lld,\"confirm_mismatches\":%lld,\"sharing\":\"%s\","
		   "\"jobs_running\":%d,\"jobs_queued\":%d,\"users_waiting\":%d,"
		   "\"queued_bytes\":%lld,\"confirm_compiles\":%lld,\"confirms_pending\":%d,"
		   "\"confirms_pending_bytes\":%lld,\"confirms_running\":%d,"
		   "\"confirms_paused\":%d,\"confirm_pauses\":%lld,\"confirms_dropped\":%lld,"
		   "\"confirm_workers_live\":%d,"
		   "\"workers\":%d,\"workers_ready\":%d,\"warm_up_ms\":%lld,"
		   "\"uptime_s\":%lld,"
		   "\"lineinfo_hits\":%lld,\"lineinfo_layout_misses\":%lld,"
		   "\"lineinfo_loose_hits\":%lld,\"lineinfo_unportable\":%lld,"
		   "\"lineinfo_rewrite_errors\":%lld,\"lineinfo_loose\":%s,"
		   "\"compiler\":\"%s\"}",
		   (long long)entries, (long long)bytes, (long long)s->n.hits,
		   (long long)s->n.misses, (long long)s->n.compiles,
		   (long long)s->n.compile_errors, (long long)pc.crashes,
		   (long long)s->n.dedup_joins, (long long)s->n.requests,
		   (long long)s->n.connections, (long long)s->n.protocol_errors,
		   (long long)(s->n.store_errors), (long long)s->n.refused_connections,
		   (long long)s->n.denied_connections, (long long)s->n.header_timeouts,
		   (long long)s->n.idle_timeouts, (long long)s->n.output_overflows,
		   (long long)s->n.refused_jobs, (long long)sc.corrupt_blobs,
		   (long long)sc.evictions, (long long)sc.full_retries,
		   (long long)sc.checkpoints, (long long)sc.checkpoint_errors, sc.checkpointing,
		   (long long)pc.timeouts,
		   (long long)pc.spawned, (long long)pc.recycled,
		   (long long)pc.start_failures, (long long)pc.dropped,
		   (long long)pc.sandbox_violations, (long long)s->n.confirmations,
		   (long long)s->n.confirm_mismatches,
		   s->sharing == SHARING_CONFIRM ? "confirm" :
		   s->sharing == SHARING_TRUST ? "trust" : "separate", pc.busy, pc.queued,
		   pc.owners_waiting, (long long)s->held, (long long)s->n.confirm_compiles,
		   pc.bg_queued, (long long)pc.bg_queued_bytes, pc.bg_running, pc.bg_paused,
		   (long long)pc.bg_pauses, (long long)pc.bg_dropped, pc.bg_workers,
		   s->cfg->pool.size, pc.ready, (long long)pool_warm_ms(s->pool),
		   (long long)(time(NULL) - s->started),
		   (long long)s->n.lineinfo_hits, (long long)s->n.lineinfo_layout_misses,
		   (long long)s->n.lineinfo_loose_hits, (long long)s->n.lineinfo_unportable,
		   (long long)s->n.lineinfo_rewrite_errors,
		   s->cfg->lineinfo_loose ? "true" : "false", codegen_identity());
	if (j.len) {
		j.len--;        /* reopen the object */
		buf_printf(&j, ",\"tenants\":%d,\"tenant\":", tenants_count(s->tenants));
		buf_json_str(&j, c->tenant.name, strlen(c->tenant.name));
		buf_puts(&j, "}");
	}
	struct buf sb = BUF_INIT;
	pool_sandbox(s->pool, &sb);
	if (j.len && sb.len) {
		j.len--;        /* reopen the object */
		buf_puts(&j, ",\"sandbox\":");
		buf_json_str(&j, sb.data, sb.len);
		buf_puts(&j, "}");
	}
	buf_free(&sb);
	if (s->l2 && j.len) {
		struct l2_counters lc;
		l2_counters(s->l2, &lc);
		j.len--;        /* reopen the object */
		buf_printf(&j, ",\"l2_hits\":%lld,\"l2_misses\":%lld,\"l2_errors\":%lld,"
			   "\"l2_timeouts\":%lld,\"l2_rejects\":%lld,\"l2_writes\":%lld,"
			   "\"l2_breaker_opens\":%lld,\"l2_breaker_open\":%d,"
			   "\"l2_bytes_read\":%lld,\"l2_bytes_written\":%lld,"
			   "\"l2_redirects\":%lld,\"l2_map_refreshes\":%lld,\"l2_abandoned\":%lld}",
			   (long long)lc.hits, (long long)lc.misses, (long long)lc.errors,
			   (long long)lc.timeouts, (long long)lc.rejects, (long long)lc.writes,
			   (long long)lc.breaker_opens, lc.breaker_open,
			   (long long)lc.bytes_read, (long long)lc.bytes_written,
			   (long long)lc.redirects, (long long)lc.map_refreshes,
			   (long long)lc.abandoned);
		/* The tier's URL, its password never shown (l2_url_redacted()). */
		struct buf url = BUF_INIT;
		l2_url_redacted(s->cfg->l2_url, &url);
		j.len--;
		buf_puts(&j, ",\"l2\":");
		buf_json_str(&j, url.data ? url.data : "", url.len);
		buf_puts(&j, "}");
		buf_free(&url);
		struct fleet_counters fc;
		fleet_counters(s->fleet, &fc);
		j.len--;
		buf_printf(&j, ",\"fleet_leases\":%lld,\"fleet_waits\":%lld,"
			   "\"fleet_wait_hits\":%lld,\"fleet_takeovers\":%lld,"
			   "\"fleet_wait_timeouts\":%lld,\"fleet_alone\":%lld}",
			   (long long)fc.leases, (long long)fc.waits, (long long)fc.wait_hits,
			   (long long)fc.takeovers, (long long)fc.wait_timeouts,
			   (long long)fc.alone);
	}
	if (j.len) {
		struct artifact_counters ac;
		int64_t an, ab;
		artifacts_counters(s->arts, &ac);
		store_kind_totals(s->store, STORE_ARTIFACT, &an, &ab);
		j.len--;        /* reopen the object */
		buf_printf(&j, ",\"artifact_entries\":%lld,\"artifact_bytes\":%lld,"
			   "\"artifact_hits\":%lld,\"artifact_misses\":%lld,"
			   "\"artifact_puts\":%lld,\"artifact_put_bytes\":%lld,"
			   "\"artifact_leases\":%lld,\"artifact_waits\":%lld,"
			   "\"artifact_wait_hits\":%lld,\"artifact_wait_timeouts\":%lld,"
			   "\"artifact_lease_expiries\":%lld,\"artifact_lease_releases\":%lld,"
			   "\"artifact_lease_closes\":%lld,\"artifact_lease_handoffs\":%lld,"
			   "\"artifact_conflicts\":%lld,\"artifact_l2_hits\":%lld,"
			   "\"artifact_leases_held\":%lld,\"artifact_waiting\":%lld,"
			   "\"artifact_share_evictions\":%lld,\"artifact_fd_hits\":%lld,"
			   "\"artifact_file_hits\":%lld,\"artifact_fd_fallbacks\":%lld,"
			   "\"artifact_put_commits\":%lld,\"artifact_spooled_puts\":%lld,"
			   "\"artifact_syncing\":%lld}",
			   (long long)an, (long long)ab, (long long)ac.hits, (long long)ac.misses,
			   (long long)ac.puts, (long long)ac.put_bytes, (long long)ac.leases,
			   (long long)ac.waits, (long long)ac.wait_hits,
			   (long long)ac.wait_timeouts, (long long)ac.lease_expiries,
			   (long long)ac.lease_releases, (long long)ac.lease_closes,
			   (long long)ac.lease_handoffs, (long long)ac.conflicts,
			   (long long)ac.l2_hits, (long long)ac.leases_held,
			   (long long)ac.waiting, (long long)sc.share_evictions,
			   (long long)ac.fd_hits, (long long)ac.file_hits,
			   (long long)ac.fd_fallbacks, (long long)ac.put_commits,
			   (long long)ac.spooled_puts, (long long)ac.syncing);
	}
	reply_json(c, FRAME_STATS, id, &j);
	buf_free(&j);
}

/* Root and the daemon's user, on the main socket only: on a tenant's, root
 * is whoever runs a pod as root, and sees and evicts only its own. */
static int is_admin(const struct conn *c)
{
	return c->tenant.id == 0 && (c->uid == 0 || c->uid == geteuid());
}

/* What c may see of the cache, as a filter's fields: everything for the
 * admin; for anyone else the entries its identity stored or was answered
 * with (store_note_user()), and of the artifacts only its scope's. */
static void view_of(struct conn *c, struct store_filter *f)
{
	if (is_admin(c))
		return;
	f->scoped = 1;
	f->scope = artifact_scope(c->srv->arts, c);
	f->own = 1;
	f->user = conn_tenant(c);
}

/* ls / evict filter fields: kind, arch, namespace, older_than (s),
 * min_bytes. For anyone but root and the daemon's user, only what they
 * may see matches (view_of()). *arch and *ns: the caller frees. */
static int parse_filter(struct conn *c, const struct msg *m, struct store_filter *f,
			char **arch, char **ns, struct buf *err)
{
	const char *k;
	size_t n;
	const char *why = NULL;

	memset(f, 0, sizeof *f);
	*arch = *ns = NULL;
	if (msg_bytes(m, "kind", &k, &n) == 1) {
		if (n == 3 && !memcmp(k, "ptx", 3))
			f->kind = STORE_PTX;
		else if (n == 5 && !memcmp(k, "cubin", 5))
			f->kind = STORE_CUBIN;
		else if (n == 8 && !memcmp(k, "artifact", 8))
			f->kind = STORE_ARTIFACT;
		else
			why = "'kind' must be \"ptx\", \"cubin\" or \"artifact\"";
	}
	if (!why && msg_bytes(m, "namespace", &k, &n) == 1 &&
	    (!artifact_ns_valid(k, n) || !(*ns = strndup(k, n))))
		why = "'namespace' must be 1 to 32 bytes of [a-z0-9._-]";
	f->ns = *ns;
	view_of(c, f);
	if (!why && (request_text_field(m, "arch", 64, arch, &why) < 0 ||
		     msg_int(m, "older_than", &f->older_than_s) < 0 ||
		     msg_int(m, "min_bytes", &f->min_bytes) < 0))
		why = why ? why : "bad filter field";
	if (why) {
		buf_printf(err, "%s", why);
		return -1;
	}
	f->arch = *arch;
	return 0;
}

static void handle_ls(struct conn *c, uint64_t id, const struct msg *m)
{
	struct store_filter f;
	struct buf j = BUF_INIT, err = BUF_INIT;
	char *arch = NULL, *ns = NULL;
	int64_t limit = 100;

	if (parse_filter(c, m, &f, &arch, &ns, &err) < 0 || msg_int(m, "limit", &limit) < 0) {
		conn_send_error(c, id, "invalid", err.len ? err.data : "bad 'limit'");
	} else if (store_list(c->srv->store, &f, (int)(limit > 1000000 ? 1000000 : limit), &j) < 0) {
		conn_send_error(c, id, "internal", "cannot list the cache");
	} else {
		reply_json(c, FRAME_LS, id, &j);
	}
	free(arch);
	free(ns);
	buf_free(&j);
	buf_free(&err);
}

static void handle_show(struct conn *c, uint64_t id, const struct msg *m)
{
	unsigned char hash[32];
	char *hex = NULL;
	struct buf j = BUF_INIT;

	struct store_filter view = { 0 };
	view_of(c, &view);
	if (msg_strdup(m, "key", &hex) != 1 || key_from_hex(hex, hash) < 0) {
		conn_send_error(c, id, "invalid", "'key' must be 64 hex digits");
	} else {
		/* What c may not see is no entry, as one that is absent. */
		int r = store_show(c->srv->store, hash, &view, &j);
		if (r == 1)
			reply_json(c, FRAME_SHOW, id, &j);
		else
			conn_send_error(c, id, r == 0 ? "not_found" : "internal",
					r == 0 ? "no such entry" : "cannot read the cache");
	}
	free(hex);
	buf_free(&j);
}

/* Why would this compile request miss? The exact key's presence, the
 * request's components, and the nearest stored entry with what differs. */
static void handle_explain(struct conn *c, uint64_t id, const struct msg *m)
{
	struct server *s = c->srv;
	struct compile_req r;
	struct buf err = BUF_INIT, comp = BUF_INIT, j = BUF_INIT, shown = BUF_INIT;
	struct key k;
	struct store_filter view = { 0 };

	view_of(c, &view);
	if (compile_parse(m, (uint32_t)s->cfg->max_frame, &r, &err) < 0) {
		conn_send_error(c, id, "invalid", err.data ? err.data : "out of memory");
		goto out;
	}
	compile_set_namespace(s, c, &r);
	if (r.cubin && r.from_ptx) {
		/* The cubin stage of PTX: its own key (portable or exact). */
		struct dbg_scan ds = { 0 };
		char sha[65], loose_sha[65];
		int portable = cubin_scan(&r.asmr, r.input, r.input_len, &ds, sha, loose_sha);
		int rc = portable < 0 ? -1 : cubin_key(s, &r.asmr, sha, portable ? &ds : NULL,
						      0, &k, &comp);
		dbg_scan_free(&ds);
		if (rc < 0) {
			conn_send_error(c, id, "internal", "out of memory");
			goto out;
		}
	} else if (compile_key(&r, &k, &comp) < 0) {
		conn_send_error(c, id, "internal", "out of memory");
		goto out;
	}
	/* Both within what c may see: an entry of another identity's is
	 * neither "cached" nor the nearest. */
	int cached = store_show(s->store, k.hash, &view, &shown) == 1;
	buf_printf(&j, "{\"key\":\"%s\",\"cached\":%s,\"components\":%s,\"nearest\":",
		   k.hex, cached ? "true" : "false", comp.data);
	if (cached || store_nearest(s->store, comp.data, &view, &j) != 1)
		buf_puts(&j, "null");
	buf_puts(&j, "}");
	reply_json(c, FRAME_EXPLAIN, id, &j);
out:
	compile_req_free(&r);
	buf_free(&err);
	buf_free(&comp);
	buf_free(&j);
	buf_free(&shown);
}

static void handle_verify(struct conn *c, uint64_t id, const struct msg *m)
{
	struct buf report = BUF_INIT, j = BUF_INIT;
	struct store_filter view = { 0 };

	/* Anyone's entries: the admin's; else those c may see (the database's
	 * own check names pages, not entries). */
	view_of(c, &view);
	int problems = store_verify(c->srv->store, &view, &report);

	if (problems < 0) {
		conn_send_error(c, id, "internal", "cannot verify the cache");
	} else {
		buf_printf(&j, "{\"problems\":%d,\"report\":[", problems);
		/* One JSON string per report line. */
		for (char *line = report.data; line && *line;) {
			size_t n = strcspn(line, "\n");
			if (line != report.data)
				buf_puts(&j, ",");
			buf_json_str(&j, line, n);
			line += n + (line[n] == '\n');
		}
		buf_puts(&j, "]}");
		reply_json(c, FRAME_VERIFY, id, &j);
	}
	buf_free(&report);
	buf_free(&j);
}

/* Eviction rewrites the cache for everyone: root and the daemon's own
 * user only, but for one's own artifacts. Fields: the ls filter, or
 * max_size (LRU down to it), or all. */
static void handle_evict(struct conn *c, uint64_t id, const struct msg *m)
{
	struct store_filter f;
	struct buf j = BUF_INIT, err = BUF_INIT;
	char *arch = NULL, *ns = NULL;
	int64_t max_size = -1;
	int all = 0, removed;

	if (parse_filter(c, m, &f, &arch, &ns, &err) < 0 ||
	    msg_int(m, "max_size", &max_size) < 0 || msg_bool(m, "all", &all) < 0) {
		conn_send_error(c, id, "invalid", err.len ? err.data : "bad evict field");
		goto out;
	}
	if (!is_admin(c)) {
		if (all || max_size >= 0 || (f.kind != STORE_ARTIFACT && !f.ns)) {
			conn_send_error(c, id, "denied", "evicting needs root or the daemon's "
					"user, but for your own artifacts (--kind artifact)");
			goto out;
		}
		f.kind = STORE_ARTIFACT;
	}
	if (all)
		removed = store_remove(c->srv->store, NULL);
	else if (max_size >= 0)
		removed = store_evict_lru(c->srv->store, max_size);
	else if (f.kind || f.arch || f.ns || f.older_than_s > 0 || f.min_bytes > 0)
		removed = store_remove(c->srv->store, &f);
	else {
		conn_send_error(c, id, "invalid", "evict needs a filter, max_size or all");
		goto out;
	}
	if (removed < 0) {
		conn_send_error(c, id, "internal", "cannot evict from the cache");
		goto out;
	}
	/* The cache's totals for the admin; for anyone else those of what
	 * they may see. */
	int64_t entries, bytes;
	struct store_filter view = { 0 };
	view_of(c, &view);
	if (is_admin(c))
		store_totals(c->srv->store, &entries, &bytes);
	else
		store_count(c->srv->store, &view, &entries, &bytes);
	buf_printf(&j, "{\"removed\":%d,\"entries\":%lld,\"bytes\":%lld}", removed,
		   (long long)entries, (long long)bytes);
	reply_json(c, FRAME_EVICT, id, &j);
out:
	free(arch);
	free(ns);
	buf_free(&j);
	buf_free(&err);
}

static const struct request_kind manage_kinds[] = {
	{ .type = FRAME_STATS, .handler = handle_stats },
	{ .type = FRAME_LS, .handler = handle_ls },
	{ .type = FRAME_SHOW, .handler = handle_show },
	{ .type = FRAME_EXPLAIN, .handler = handle_explain },
	{ .type = FRAME_VERIFY, .handler = handle_verify },
	{ .type = FRAME_EVICT, .handler = handle_evict },
};

const struct request_table manage_requests = {
	.kinds = manage_kinds,
	.n = sizeof manage_kinds / sizeof manage_kinds[0],
};
