/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_admin: the store's admin queries, over store_int.h: totals by
 * kind, show, ls, explain's nearest entry, remove, count and verify, and
 * a tenant's number. Called from manage.c, main.c (--verify) and tenant.c,
 * never on a hit's or a put's way. Each prepares its own statement (the
 * hit and put paths' are store.c's, prepared once at open) and flushes
 * the pending hits first, so what it reads is current; a filter (struct
 * store_filter) is one WHERE clause for them all (FILTER_WHERE). Rows are
 * checked as a hit checks them (check_row()); the files of the rows
 * remove takes go as an eviction's do (store_files.c), and verify sweeps
 * the files no row names (blobs_sweep()).
 */
#include "daemon/store.h"
#include "daemon/store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/store_blobs.h"
#include "daemon/store_flat.h"

void store_kind_totals(struct store *s, enum store_kind kind, int64_t *entries,
		       int64_t *bytes)
{
	sqlite3_stmt *st;

	*entries = *bytes = 0;
	if (sqlite3_prepare_v2(s->db, "SELECT count(*), total(size) FROM entries WHERE kind = ?1",
			       -1, &st, NULL) != SQLITE_OK)
		return;
	sqlite3_bind_int(st, 1, (int)kind);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*entries = sqlite3_column_int64(st, 0);
		*bytes = (int64_t)sqlite3_column_double(st, 1);
	}
	sqlite3_finalize(st);
}

static const char *kind_name(int64_t kind)
{
	return kind == STORE_PTX ? "ptx" : kind == STORE_CUBIN ? "cubin" :
	       kind == STORE_ARTIFACT ? "artifact" : "unknown";
}

/* Columns shared by show and list, in this order. */
#define ROW_COLS "key, kind, status, arch, data_len, size, hits, created, " \
		 "last_used, compile_us, components"

/* Append the metadata object of the row st is on (ROW_COLS first), without
 * its closing brace. */
static int row_json(sqlite3_stmt *st, struct buf *j)
{
	char hex[65];
	const void *k = sqlite3_column_blob(st, 0);
	unsigned char key[32] = { 0 };
	struct flat_field f[FLAT_MAX_FIELDS];

	if (k && sqlite3_column_bytes(st, 0) == 32)
		memcpy(key, k, 32);
	key_hex(key, hex);
	const char *arch = (const char *)sqlite3_column_text(st, 3);
	const char *comp = (const char *)sqlite3_column_text(st, 10);
	if (!arch)
		arch = "";
	if (!comp)
		comp = "";
	if (buf_printf(j, "{\"key\":\"%s\",\"kind\":\"%s\",\"status\":%lld,\"arch\":",
		       hex, kind_name(sqlite3_column_int64(st, 1)),
		       (long long)sqlite3_column_int64(st, 2)) < 0 ||
	    buf_json_str(j, arch, strlen(arch)) < 0 ||
	    buf_printf(j, ",\"data_len\":%lld,\"stored_bytes\":%lld,\"hits\":%lld,"
		       "\"created\":%lld,\"last_used\":%lld,\"compile_us\":%lld,"
		       "\"components\":",
		       (long long)sqlite3_column_int64(st, 4),
		       (long long)sqlite3_column_int64(st, 5),
		       (long long)sqlite3_column_int64(st, 6),
		       (long long)(sqlite3_column_int64(st, 7) / 1000000),
		       (long long)(sqlite3_column_int64(st, 8) / 1000000),
		       (long long)sqlite3_column_int64(st, 9)) < 0)
		return -1;
	/* Embed the components as an object when they are ours; anything else
	 * (a damaged row) as a string, so the output is always valid JSON. */
	if (flat_parse(comp, f, FLAT_MAX_FIELDS) >= 0)
		return buf_puts(j, comp);
	return buf_json_str(j, comp, strlen(comp));
}

/* The WHERE clause of a filter, with ?1..?4 and ?6..?8 bound by
 * bind_filter() (?5 and ?9 are left to the query). */
#define FILTER_WHERE " WHERE (?1 = 0 OR kind = ?1) AND (?2 IS NULL OR arch = ?2)" \
		     " AND (?3 = 0 OR last_used < ?3) AND (?4 = 0 OR data_len >= ?4)" \
		     " AND (?6 IS NULL OR (kind = 3 AND ns = ?6))" \
		     " AND (?7 IS NULL OR kind != 3 OR scope = ?7)" \
		     " AND (?8 IS NULL OR EXISTS (SELECT 1 FROM entry_users u" \
		     " WHERE u.key = entries.key AND u.identity = ?8))"

static void bind_filter(struct store *s, sqlite3_stmt *st, const struct store_filter *f)
{
	static const struct store_filter all = { 0 };

	if (!f)
		f = &all;
	sqlite3_bind_int(st, 1, (int)f->kind);
	if (f->arch && *f->arch)
		sqlite3_bind_text(st, 2, f->arch, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 2);
	sqlite3_bind_int64(st, 3, f->older_than_s > 0 ?
			   store_clock(s) - f->older_than_s * 1000000 : 0);
	sqlite3_bind_int64(st, 4, f->min_bytes);
	if (f->ns && *f->ns)
		sqlite3_bind_text(st, 6, f->ns, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 6);
	if (f->scoped)
		sqlite3_bind_int64(st, 7, f->scope);
	else
		sqlite3_bind_null(st, 7);
	if (f->own)
		sqlite3_bind_int64(st, 8, f->user);
	else
		sqlite3_bind_null(st, 8);
}

int store_show(struct store *s, const unsigned char key[32], const struct store_filter *f,
	       struct buf *json)
{
	sqlite3_stmt *st;
	struct buf data = BUF_INIT, log = BUF_INIT;
	const char *why = NULL;
	int ret = -1;

	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT " ROW_COLS ", log_len, checksum, data, log "
			       "FROM entries" FILTER_WHERE " AND key = ?9", -1, &st,
			       NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	sqlite3_bind_blob(st, 9, key, 32, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE) {
		ret = 0;
		goto out;
	}
	if (rc != SQLITE_ROW || row_json(st, json) < 0)
		goto out;
	if (sqlite3_column_int64(st, 2) != 0) {
		int bad = check_row(s, st, key, 1, 4, 11, 12, 13, 14, &data, &log, &why);
		if (bad < 0)
			goto out;
		if (bad) {
			if (buf_puts(json, ",\"log_error\":") < 0 ||
			    buf_json_str(json, why, strlen(why)) < 0)
				goto out;
		} else if (buf_puts(json, ",\"log\":") < 0 ||
			   buf_json_str(json, log.data ? log.data : "", log.len) < 0) {
			goto out;
		}
	}
	if (buf_puts(json, "}") < 0)
		goto out;
	ret = 1;
out:
	sqlite3_finalize(st);
	buf_free(&data);
	buf_free(&log);
	return ret;
}

int store_tenant_id(struct store *s, const char *name, int64_t *id)
{
	sqlite3_stmt *st = NULL;
	int ret = -1;

	/* Once given, a name's number is its own for the cache's life. */
	if (sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO tenants (name) VALUES (?1)", -1,
			       &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE ||
	    sqlite3_prepare_v2(s->db, "SELECT id FROM tenants WHERE name = ?1", -1, &st,
			       NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*id = sqlite3_column_int64(st, 0);
		ret = 0;
	}
	sqlite3_finalize(st);
	return ret;
}

int store_list(struct store *s, const struct store_filter *f, int limit,
	       struct buf *json)
{
	sqlite3_stmt *st;
	int n = 0, rc;

	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT " ROW_COLS " FROM entries" FILTER_WHERE
			       " ORDER BY created DESC, rowid DESC LIMIT ?5",
			       -1, &st, NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	sqlite3_bind_int64(st, 5, limit > 0 ? limit : -1);
	if (buf_puts(json, "[") < 0)
		goto fail;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if ((n && buf_puts(json, ",") < 0) || row_json(st, json) < 0 ||
		    buf_puts(json, "}") < 0)
			goto fail;
		n++;
	}
	if (rc != SQLITE_DONE || buf_puts(json, "]") < 0)
		goto fail;
	sqlite3_finalize(st);
	return n;
fail:
	sqlite3_finalize(st);
	return -1;
}

int store_remove(struct store *s, const struct store_filter *f)
{
	sqlite3_stmt *st;
	int rc;

	store_flush(s);
	/* The files of the rows it takes, unlinked once their delete is
	 * committed (the master is the only writer: nothing comes between). */
	if (sqlite3_prepare_v2(s->db, "SELECT key, checksum FROM entries" FILTER_WHERE
			       " AND length(data) = 8", -1, &st, NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const void *k = sqlite3_column_blob(st, 0);
		struct doomed d = { .sum = sqlite3_column_int64(st, 1) };
		if (!k || sqlite3_column_bytes(st, 0) != 32)
			continue;
		memcpy(d.key, k, 32);
		doomed_add(s, &d);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE ||
	    sqlite3_prepare_v2(s->db, "DELETE FROM entries" FILTER_WHERE, -1, &st,
			       NULL) != SQLITE_OK) {
		doomed_forget(s);
		return -1;
	}
	bind_filter(s, st, f);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		log_warn("cannot remove entries from '%s': %s", s->path, sqlite3_errmsg(s->db));
		doomed_forget(s);
		return -1;
	}
	doomed_commit(s);
	int removed = sqlite3_changes(s->db);
	/* Recount rather than track each row's size. */
	if (sqlite3_prepare_v2(s->db, "SELECT count(*), coalesce(sum(size), 0) FROM entries",
			       -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW) {
			s->entries = sqlite3_column_int64(st, 0);
			s->bytes = sqlite3_column_int64(st, 1);
		}
		sqlite3_finalize(st);
	}
	s->ctr.evictions += removed;
	if (removed)
		log_info("removed %d cache entries; %lld bytes in %lld entries remain",
			 removed, (long long)s->bytes, (long long)s->entries);
	return removed;
}

int store_count(struct store *s, const struct store_filter *f, int64_t *entries,
		int64_t *bytes)
{
	sqlite3_stmt *st;
	int ret = -1;

	*entries = *bytes = 0;
	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT count(*), total(size) FROM entries" FILTER_WHERE,
			       -1, &st, NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*entries = sqlite3_column_int64(st, 0);
		*bytes = (int64_t)sqlite3_column_double(st, 1);
		ret = 0;
	}
	sqlite3_finalize(st);
	return ret;
}

int store_nearest(struct store *s, const char *components_json, const struct store_filter *f,
		  struct buf *json)
{
	struct flat_field want[FLAT_MAX_FIELDS], have[FLAT_MAX_FIELDS];
	struct buf best = BUF_INIT;
	unsigned char best_key[32];
	int64_t best_kind = 0;
	int best_diff = -1, ret = -1, rc;
	sqlite3_stmt *st;

	int nw = flat_parse(components_json ? components_json : "", want, FLAT_MAX_FIELDS);
	if (nw < 0)
		return 0;
	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT key, kind, components FROM entries" FILTER_WHERE
			       " ORDER BY last_used DESC", -1, &st, NULL) != SQLITE_OK)
		return -1;
	bind_filter(s, st, f);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *comp = (const char *)sqlite3_column_text(st, 2);
		const void *k = sqlite3_column_blob(st, 0);
		if (!comp || !k || sqlite3_column_bytes(st, 0) != 32)
			continue;
		int nh = flat_parse(comp, have, FLAT_MAX_FIELDS);
		if (nh < 0)
			continue;
		int d = flat_diff(have, nh, want, nw);
		if (best_diff >= 0 && d >= best_diff)
			continue;
		best_diff = d;
		best_kind = sqlite3_column_int64(st, 1);
		memcpy(best_key, k, 32);
		buf_reset(&best);
		if (buf_puts(&best, comp) < 0)
			goto out;
		if (!d)
			break;
	}
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		goto out;
	if (best_diff < 0) {
		ret = 0;
		goto out;
	}

	char hex[65];
	int nh = flat_parse(best.data, have, FLAT_MAX_FIELDS);
	int first = 1;
	key_hex(best_key, hex);
	if (buf_printf(json, "{\"key\":\"%s\",\"kind\":\"%s\",\"differing\":[", hex,
		       kind_name(best_kind)) < 0)
		goto out;
	/* Requested order first, then the fields only the stored entry has. */
	for (int i = 0; i < nw + nh; i++) {
		const struct flat_field *sf, *rf;
		const struct flat_field *name;
		if (i < nw) {
			name = &want[i];
			rf = name;
			sf = flat_find(have, nh, name);
			if (sf && flat_eq_value(sf, rf))
				continue;
		} else {
			name = &have[i - nw];
			sf = name;
			if (flat_find(want, nw, name))
				continue;
			rf = NULL;
		}
		if ((!first && buf_puts(json, ",") < 0) ||
		    buf_puts(json, "{\"name\":\"") < 0 ||
		    buf_append(json, name->name, name->name_len) < 0 ||
		    buf_puts(json, "\",\"stored\":") < 0 || flat_value_json(json, sf) < 0 ||
		    buf_puts(json, ",\"requested\":") < 0 || flat_value_json(json, rf) < 0 ||
		    buf_puts(json, "}") < 0)
			goto out;
		first = 0;
	}
	if (buf_puts(json, "]}") < 0)
		goto out;
	ret = 1;
out:
	sqlite3_finalize(st);
	buf_free(&best);
	return ret;
}

/* Whether f matches every entry. */
static int filter_is_all(const struct store_filter *f)
{
	return !f->kind && !(f->arch && *f->arch) && f->older_than_s <= 0 && f->min_bytes <= 0 &&
	       !(f->ns && *f->ns) && !f->scoped && !f->own;
}

int store_verify(struct store *s, const struct store_filter *f, struct buf *report)
{
	sqlite3_stmt *st;
	struct buf data = BUF_INIT, log = BUF_INIT;
	int problems = 0, rc;

	store_flush(s);
	if (sqlite3_prepare_v2(s->db, "SELECT key, kind, data_len, log_len, checksum, "
			       "data, log FROM entries" FILTER_WHERE, -1, &st, NULL) != SQLITE_OK) {
		buf_printf(report, "cannot read entries: %s\n", sqlite3_errmsg(s->db));
		return -1;
	}
	bind_filter(s, st, f);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *why = NULL;
		char hex[65] = "(bad key)";
		const void *k = sqlite3_column_blob(st, 0);
		int ok_key = k && sqlite3_column_bytes(st, 0) == 32;
		if (ok_key)
			key_hex(k, hex);
		int bad = check_row(s, st, ok_key ? k : NULL, 1, 2, 3, 4, 5, 6, &data, &log, &why);
		if (bad < 0) {
			buf_printf(report, "cannot check entry %s: %s\n", hex,
				   why ? why : "out of memory");
			problems = -1;
			break;
		}
		if (bad) {
			buf_printf(report, "entry %s: %s\n", hex, why);
			problems++;
		}
	}
	if (problems >= 0 && rc != SQLITE_DONE) {
		buf_printf(report, "cannot read entries: %s\n", sqlite3_errmsg(s->db));
		problems = -1;
	}
	sqlite3_finalize(st);
	buf_free(&data);
	buf_free(&log);
	if (problems < 0)
		return -1;
	/* Files no row names: only a failed unlink leaves one while the
	 * daemon runs (a file's row commits in the same call that places it,
	 * and its removal in the same call that unlinks it). Everyone's, so
	 * for the whole cache only. */
	if (!f || filter_is_all(f))
		problems += blobs_sweep(s->blobs, row_names_file, s, report);

	if (sqlite3_prepare_v2(s->db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK) {
		buf_printf(report, "cannot run integrity_check: %s\n", sqlite3_errmsg(s->db));
		return -1;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *r = (const char *)sqlite3_column_text(st, 0);
		if (r && !strcmp(r, "ok"))
			continue;
		if (!r && (sqlite3_errcode(s->db) & 0xff) == SQLITE_NOMEM) {
			rc = SQLITE_NOMEM;
			break;
		}
		buf_printf(report, "integrity_check: %s\n", r ? r : "?");
		problems++;
	}
	/* A check that could not run (out of memory, I/O error) is not a
	 * problem found in the cache: say so and return -1. */
	if (rc != SQLITE_DONE) {
		buf_printf(report, "cannot run integrity_check: %s\n", sqlite3_errmsg(s->db));
		problems = -1;
	}
	sqlite3_finalize(st);
	return problems;
}
