/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for daemon/store.c: round trips, durability across close and
 * kill -9, checksums on read, corrupt databases, the size cap, hit
 * bookkeeping, write failures, verify, and the show/ls/explain queries.
 * Damage is done with a raw SQLite connection (or raw file writes), the way
 * it happens in the field. */
#include "tests/unit/unit.h"

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "daemon/key.h"
#include "daemon/log.h"
#include "daemon/store.h"

static void mkkey(int i, unsigned char key[32])
{
	char s[32], hex[65];
	snprintf(s, sizeof s, "entry-%d", i);
	key_sha256_hex(s, strlen(s), hex);
	key_from_hex(hex, key);
}

/* PTX-looking text (compressible), n bytes. */
static char *fake_ptx(size_t n, unsigned seed)
{
	char *p = malloc(n + 1);
	size_t i = 0;
	while (i < n) {
		char line[96];
		int l = snprintf(line, sizeof line,
				 "\tld.global.f32 \t%%f%u, [%%rd%u+%u];\n",
				 seed % 97, (unsigned)i % 13, (unsigned)(i * 4 + seed) % 4096);
		for (int j = 0; j < l && i < n; j++)
			p[i++] = line[j];
		seed = seed * 1103515245u + 12345u;
	}
	p[n] = '\0';
	return p;
}

/* Incompressible bytes. */
static unsigned char *fake_random(size_t n, uint64_t seed)
{
	unsigned char *p = malloc(n);
	uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)(x >> 24);
	}
	return p;
}

static struct store *open_store(int64_t max)
{
	struct buf err = BUF_INIT;
	struct store *s = store_open(unit_tmpdir(), max, &err);
	if (!s)
		fprintf(stderr, "  store_open: %s\n", err.data ? err.data : "?");
	buf_free(&err);
	return s;
}

static int put(struct store *s, int i, const void *data, size_t len, int status,
	       const char *log)
{
	unsigned char k[32];
	struct buf err = BUF_INIT;
	struct store_entry e = {
		.kind = STORE_PTX, .status = status, .data = data, .data_len = len,
		.log = log, .log_len = log ? strlen(log) : 0,
		.components = "{\"key_schema\":\"1\"}", .arch = "sm_90a", .compile_us = 1234,
	};
	mkkey(i, k);
	int rc = store_put(s, k, &e, &err);
	if (rc)
		fprintf(stderr, "  store_put: %s\n", err.data ? err.data : "?");
	buf_free(&err);
	return rc;
}

static int get(struct store *s, int i, struct store_result *r)
{
	unsigned char k[32];
	mkkey(i, k);
	return store_get(s, k, r);
}

static int has(struct store *s, int i)
{
	struct store_result r;
	int rc = get(s, i, &r);
	store_result_free(&r);
	return rc == 1;
}

static sqlite3 *raw_open(void)
{
	char path[512];
	sqlite3 *db = NULL;
	snprintf(path, sizeof path, "%s/cache.db", unit_tmpdir());
	if (sqlite3_open(path, &db) != SQLITE_OK) {
		sqlite3_close(db);
		return NULL;
	}
	sqlite3_busy_timeout(db, 2000);
	return db;
}

/* One integer from sql, with ?1 bound to entry i's key (if i >= 0). */
static int64_t raw_int(sqlite3 *db, const char *sql, int i)
{
	sqlite3_stmt *st;
	unsigned char k[32];
	int64_t v = -999;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return v;
	if (i >= 0) {
		mkkey(i, k);
		sqlite3_bind_blob(st, 1, k, 32, SQLITE_TRANSIENT);
	}
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* Flip one byte in the middle of entry i's stored data blob. */
static int flip_data_byte(int i)
{
	sqlite3 *db = raw_open();
	sqlite3_blob *b;
	int ok = 0;
	if (!db)
		return 0;
	int64_t rowid = raw_int(db, "SELECT rowid FROM entries WHERE key = ?1", i);
	if (rowid > 0 && sqlite3_blob_open(db, "main", "entries", "data", rowid, 1, &b) == SQLITE_OK) {
		int n = sqlite3_blob_bytes(b);
		unsigned char c;
		if (n > 8 && sqlite3_blob_read(b, &c, 1, n / 2) == SQLITE_OK) {
			c ^= 0x20;
			ok = sqlite3_blob_write(b, &c, 1, n / 2) == SQLITE_OK;
		}
		sqlite3_blob_close(b);
	}
	sqlite3_close(db);
	return ok;
}

static int count_files(const char *prefix)
{
	DIR *d = opendir(unit_tmpdir());
	struct dirent *de;
	int n = 0;
	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			n++;
	closedir(d);
	return n;
}

TEST(store_roundtrip)
{
	struct store *s = open_store(0);
	struct store_result r;
	REQUIRE(s);

	char *ptx = fake_ptx(50000, 1);
	unsigned char *big = fake_random(1 << 20, 7);
	memcpy(big, ptx, 40000); /* half text, half noise */
	const char *err = "LLVM ERROR: Cannot select: intrinsic %llvm.nvvm.foo";

	REQUIRE(put(s, 1, ptx, 50000, 0, "warning: something") == 0);
	REQUIRE(put(s, 2, NULL, 0, 3, err) == 0);
	REQUIRE(put(s, 3, big, 1 << 20, 0, NULL) == 0);

	REQUIRE(get(s, 1, &r) == 1);
	CHECK(r.kind == STORE_PTX && r.status == 0);
	CHECK(r.data.len == 50000 && !memcmp(r.data.data, ptx, 50000));
	CHECK(r.log.len == 18 && !strcmp(r.log.data, "warning: something"));
	store_result_free(&r);

	REQUIRE(get(s, 2, &r) == 1);
	CHECK(r.status == 3 && r.data.len == 0);
	CHECK(r.log.len == strlen(err) && !strcmp(r.log.data, err));
	store_result_free(&r);

	REQUIRE(get(s, 3, &r) == 1);
	CHECK(r.data.len == 1 << 20 && !memcmp(r.data.data, big, 1 << 20));
	CHECK(r.log.len == 0);
	store_result_free(&r);

	CHECK(get(s, 4, &r) == 0);
	store_result_free(&r);

	/* Stored compressed: the PTX takes far less than its raw size. */
	int64_t entries, bytes;
	store_totals(s, &entries, &bytes);
	CHECK(entries == 3);
	CHECK(bytes > (1 << 20) - 40000 && bytes < (1 << 20) + 50000 / 3);

	/* Replacing an entry keeps the totals right. */
	REQUIRE(put(s, 1, "short", 5, 0, NULL) == 0);
	int64_t e2, b2;
	store_totals(s, &e2, &b2);
	CHECK(e2 == 3 && b2 < bytes);
	REQUIRE(get(s, 1, &r) == 1);
	CHECK(r.data.len == 5 && !memcmp(r.data.data, "short", 5));
	store_result_free(&r);

	store_close(s);
	free(ptx);
	free(big);
}

TEST(store_persists_across_reopen)
{
	struct store *s = open_store(0);
	struct store_result r;
	int64_t e1, b1, e2, b2;
	REQUIRE(s);
	char *ptx = fake_ptx(20000, 2);
	REQUIRE(put(s, 1, ptx, 20000, 0, NULL) == 0);
	REQUIRE(put(s, 2, NULL, 0, 1, "bad IR") == 0);
	store_totals(s, &e1, &b1);
	store_close(s);

	s = open_store(0);
	REQUIRE(s);
	store_totals(s, &e2, &b2);
	CHECK(e1 == 2 && e2 == 2 && b1 == b2);
	REQUIRE(get(s, 1, &r) == 1);
	CHECK(r.data.len == 20000 && !memcmp(r.data.data, ptx, 20000));
	store_result_free(&r);
	REQUIRE(get(s, 2, &r) == 1);
	CHECK(r.status == 1 && !strcmp(r.log.data, "bad IR"));
	store_result_free(&r);
	store_close(s);
	free(ptx);
}

/* A put that returned is in the database even if the daemon is then killed
 * with SIGKILL (no close, no checkpoint). */
TEST(store_put_survives_kill9)
{
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct store *s = open_store(0);
		if (!s || put(s, 1, "kill me", 7, 0, NULL) != 0)
			_exit(1);
		raise(SIGKILL);
		_exit(2);
	}
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	struct store *s = open_store(0);
	struct store_result r;
	REQUIRE(s);
	REQUIRE(get(s, 1, &r) == 1);
	CHECK(r.data.len == 7 && !memcmp(r.data.data, "kill me", 7));
	store_result_free(&r);
	store_close(s);
}

TEST(store_corrupt_blob_is_a_miss)
{
	struct store *s = open_store(0);
	struct store_result r;
	struct store_counters c;
	REQUIRE(s);
	char *ptx = fake_ptx(50000, 3);
	REQUIRE(put(s, 1, ptx, 50000, 0, NULL) == 0);
	REQUIRE(put(s, 2, ptx, 50000, 0, NULL) == 0);
	REQUIRE(put(s, 3, ptx, 50000, 0, NULL) == 0);

	/* A flipped byte in the compressed data. */
	REQUIRE(flip_data_byte(1));
	memset(&r, 0x5a, sizeof r); /* store_get must not read *out */
	CHECK(get(s, 1, &r) == 0);
	CHECK(r.data.len == 0 && r.data.data == NULL);
	store_result_free(&r);
	store_counters(s, &c);
	CHECK(c.corrupt_blobs == 1);

	/* Bytes that still decompress, but not to what was stored. */
	sqlite3 *db = raw_open();
	REQUIRE(db);
	CHECK(raw_int(db, "SELECT count(*) FROM entries WHERE key = ?1", 1) == 0);
	raw_int(db, "UPDATE entries SET checksum = checksum + 1 WHERE key = ?1", 2);
	raw_int(db, "UPDATE entries SET data_len = data_len - 1 WHERE key = ?1", 3);
	CHECK(raw_int(db, "SELECT count(*) FROM entries", -1) == 2);
	CHECK(get(s, 2, &r) == 0);
	store_result_free(&r);
	CHECK(get(s, 3, &r) == 0);
	store_result_free(&r);
	CHECK(raw_int(db, "SELECT count(*) FROM entries", -1) == 0);
	sqlite3_close(db);

	store_counters(s, &c);
	CHECK(c.corrupt_blobs == 3);
	int64_t entries;
	store_totals(s, &entries, NULL);
	CHECK(entries == 0);
	store_close(s);
	free(ptx);
}

/* The decoded copy kept for hot entries answers only for the very row it
 * was decoded from: a replaced, damaged or deleted row is never answered
 * from memory. */
TEST(store_hot_copy_follows_its_row)
{
	struct store *s = open_store(0);
	struct store_result r;
	REQUIRE(s);
	char *a = fake_ptx(40000, 5), *b = fake_ptx(40000, 6);
	REQUIRE(memcmp(a, b, 40000));
	REQUIRE(put(s, 1, a, 40000, 0, NULL) == 0);
	for (int i = 0; i < 3; i++) {
		CHECK(get(s, 1, &r) == 1);
		CHECK(r.data.len == 40000 && !memcmp(r.data.data, a, 40000));
		store_result_free(&r);
	}
	REQUIRE(put(s, 1, b, 40000, 0, NULL) == 0);
	CHECK(get(s, 1, &r) == 1);
	CHECK(r.data.len == 40000 && !memcmp(r.data.data, b, 40000));
	store_result_free(&r);

	sqlite3 *db = raw_open();
	REQUIRE(db);
	raw_int(db, "UPDATE entries SET checksum = checksum + 1 WHERE key = ?1", 1);
	CHECK(get(s, 1, &r) == 0);
	store_result_free(&r);

	REQUIRE(put(s, 2, a, 40000, 0, NULL) == 0);
	CHECK(get(s, 2, &r) == 1);
	store_result_free(&r);
	raw_int(db, "DELETE FROM entries WHERE key = ?1", 2);
	CHECK(get(s, 2, &r) == 0);
	store_result_free(&r);
	sqlite3_close(db);
	store_close(s);
	free(a);
	free(b);
}

TEST(store_lent_entry_stays_until_returned)
{
	struct store *s = open_store(0);
	struct store_result first, r, lent;
	unsigned char k[32];
	REQUIRE(s);
	char *a = fake_ptx(40000, 5), *b = fake_ptx(40000, 6);
	mkkey(1, k);
	REQUIRE(put(s, 1, a, 40000, 0, NULL) == 0);
	/* The first hit decodes and keeps the entry; the next is lent it. */
	REQUIRE(store_get_lent(s, k, &first) == 1);
	CHECK(!first.lent);
	store_result_free(&first);
	REQUIRE(store_get_lent(s, k, &lent) == 1);
	CHECK(lent.lent && lent.data.len == 40000 && !memcmp(lent.data.data, a, 40000));
	/* While lent, the row is replaced and read again: the new bytes are
	 * served, and the lent ones are not touched. */
	REQUIRE(put(s, 1, b, 40000, 0, NULL) == 0);
	for (int i = 0; i < 2; i++) {
		REQUIRE(store_get_lent(s, k, &r) == 1);
		CHECK(!r.lent && !memcmp(r.data.data, b, 40000));
		store_result_free(&r);
	}
	CHECK(!memcmp(lent.data.data, a, 40000));
	store_result_free(&lent);
	CHECK(!lent.lent && !lent.data.data);
	/* Returned, the slot keeps the new entry and lends it. */
	REQUIRE(store_get_lent(s, k, &r) == 1);
	store_result_free(&r);
	REQUIRE(store_get_lent(s, k, &r) == 1);
	CHECK(r.lent && !memcmp(r.data.data, b, 40000));
	store_result_free(&r);
	store_close(s);
	free(a);
	free(b);
}

/* The hot copies' clock hand, making room, passes a lent slot by: entries
 * enough to fill the copies' budget several times over are kept while
 * one is lent, whose bytes stay the same until it is returned. */
TEST(store_lent_entry_survives_eviction)
{
	struct store *s = open_store(0);
	struct store_result first, r, lent;
	unsigned char k[32];
	const size_t big = (size_t)4 << 20;     /* 40 of them: past the 64 MiB */
	REQUIRE(s);
	char *a = fake_ptx(40000, 7), *b = fake_ptx(big, 8);
	mkkey(1, k);
	REQUIRE(put(s, 1, a, 40000, 0, NULL) == 0);
	REQUIRE(store_get_lent(s, k, &first) == 1);
	store_result_free(&first);
	REQUIRE(store_get_lent(s, k, &lent) == 1);
	REQUIRE(lent.lent && lent.data.len == 40000);
	for (int i = 100; i < 140; i++) {
		unsigned char ki[32];
		b[0] = (char)('a' + i % 26);    /* each its own bytes */
		REQUIRE(put(s, i, b, big, 0, NULL) == 0);
		mkkey(i, ki);
		REQUIRE(store_get_lent(s, ki, &r) == 1);
		CHECK(!r.lent && r.data.len == big);
		store_result_free(&r);
	}
	CHECK(lent.data.len == 40000 && !memcmp(lent.data.data, a, 40000));
	store_result_free(&lent);
	/* Returned: the slot lends it again, the same bytes. */
	REQUIRE(store_get_lent(s, k, &r) == 1);
	CHECK(r.data.len == 40000 && !memcmp(r.data.data, a, 40000));
	store_result_free(&r);
	store_close(s);
	free(a);
	free(b);
}

TEST(store_verify_reports_corruption)
{
	struct store *s = open_store(0);
	struct buf rep = BUF_INIT;
	REQUIRE(s);
	char *ptx = fake_ptx(30000, 4);
	for (int i = 0; i < 5; i++)
		REQUIRE(put(s, i, ptx, 30000, 0, NULL) == 0);
	CHECK(store_verify(s, NULL, &rep) == 0);
	CHECK(rep.len == 0);

	REQUIRE(flip_data_byte(3));
	buf_reset(&rep);
	CHECK(store_verify(s, NULL, &rep) == 1);
	unsigned char k[32];
	char hex[65];
	mkkey(3, k);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", k[i]);
	CHECK(rep.data && strstr(rep.data, hex) != NULL);
	CHECK(rep.data && strchr(rep.data, '\n') == rep.data + rep.len - 1); /* one line */
	buf_free(&rep);
	store_close(s);
	free(ptx);
}

TEST(store_garbage_database_is_moved_aside)
{
	char path[512];
	snprintf(path, sizeof path, "%s/cache.db", unit_tmpdir());
	FILE *f = fopen(path, "w");
	REQUIRE(f);
	for (int i = 0; i < 1000; i++)
		fputs("this is not an SQLite database\n", f);
	fclose(f);

	int saved = log_threshold;
	log_threshold = 0; /* the loud line is expected here */
	struct store *s = open_store(0);
	log_threshold = saved;
	REQUIRE(s);
	CHECK(count_files("cache.db.corrupt-") == 1);
	REQUIRE(put(s, 1, "fresh", 5, 0, NULL) == 0);
	CHECK(has(s, 1));
	store_close(s);

	/* And it stays fine on the next open. */
	s = open_store(0);
	REQUIRE(s);
	CHECK(has(s, 1));
	CHECK(count_files("cache.db.corrupt-") == 1);
	store_close(s);
}

TEST(store_damaged_database_fails_quick_check)
{
	struct store *s = open_store(0);
	REQUIRE(s);
	char *ptx = fake_ptx(3000, 5);
	for (int i = 0; i < 200; i++)
		REQUIRE(put(s, i, ptx, 3000, 0, NULL) == 0);
	store_close(s);
	free(ptx);

	/* Smash pages 3-6 (b-tree pages), leaving the header page intact. */
	char path[512];
	snprintf(path, sizeof path, "%s/cache.db", unit_tmpdir());
	FILE *f = fopen(path, "r+");
	REQUIRE(f);
	fseek(f, 2 * 4096, SEEK_SET);
	for (int i = 0; i < 4 * 4096; i++)
		fputc(0xa5, f);
	fclose(f);

	int saved = log_threshold;
	log_threshold = 0;
	s = open_store(0);
	log_threshold = saved;
	REQUIRE(s);
	CHECK(count_files("cache.db.corrupt-") == 1);
	int64_t entries;
	store_totals(s, &entries, NULL);
	CHECK(entries == 0);
	REQUIRE(put(s, 1, "fresh", 5, 0, NULL) == 0);
	CHECK(has(s, 1));
	store_close(s);
}

TEST(store_eviction_keeps_recently_used)
{
	const size_t sz = 30000;
	const int64_t cap = 200000;
	struct store *s = open_store(cap);
	struct store_counters c;
	int64_t entries, bytes;
	REQUIRE(s);

	for (int i = 0; i < 20; i++) {
		unsigned char *d = fake_random(sz, (uint64_t)i + 100);
		REQUIRE(put(s, i, d, sz, 0, NULL) == 0);
		free(d);
		/* Entry 0 is in use all along. */
		CHECK(has(s, 0));
		store_totals(s, &entries, &bytes);
		CHECK(bytes <= cap);
	}
	store_counters(s, &c);
	CHECK(c.evictions >= 12);
	store_totals(s, &entries, &bytes);
	CHECK(entries >= 4 && entries <= 6);
	CHECK(has(s, 0));
	CHECK(has(s, 19));
	CHECK(has(s, 18));
	CHECK(!has(s, 1));
	CHECK(!has(s, 10));

	/* The totals in memory match the table. */
	sqlite3 *db = raw_open();
	REQUIRE(db);
	CHECK(raw_int(db, "SELECT count(*) FROM entries", -1) == entries);
	CHECK(raw_int(db, "SELECT sum(size) FROM entries", -1) == bytes);
	sqlite3_close(db);

	/* Explicit eviction down to nothing. */
	CHECK(store_evict_lru(s, 0) == entries);
	store_totals(s, &entries, &bytes);
	CHECK(entries == 0 && bytes == 0);
	CHECK(!has(s, 0));
	store_close(s);
}

TEST(store_hits_are_flushed_not_written_per_hit)
{
	struct store *s = open_store(0);
	REQUIRE(s);
	REQUIRE(put(s, 1, "ptx", 3, 0, NULL) == 0);
	REQUIRE(put(s, 2, "ptx", 3, 0, NULL) == 0);
	for (int i = 0; i < 3; i++)
		CHECK(has(s, 1));
	CHECK(has(s, 2));

	sqlite3 *db = raw_open();
	REQUIRE(db);
	/* Nothing written by the hits themselves. */
	CHECK(raw_int(db, "SELECT hits FROM entries WHERE key = ?1", 1) == 0);
	int64_t used0 = raw_int(db, "SELECT last_used FROM entries WHERE key = ?1", 1);
	store_flush(s);
	CHECK(raw_int(db, "SELECT hits FROM entries WHERE key = ?1", 1) == 3);
	CHECK(raw_int(db, "SELECT hits FROM entries WHERE key = ?1", 2) == 1);
	CHECK(raw_int(db, "SELECT last_used FROM entries WHERE key = ?1", 1) > used0);
	/* A second flush with nothing pending adds nothing. */
	store_flush(s);
	CHECK(raw_int(db, "SELECT hits FROM entries WHERE key = ?1", 1) == 3);
	sqlite3_close(db);

	/* Pending hits are written at close too, and survive a reopen. */
	CHECK(has(s, 1));
	store_close(s);
	s = open_store(0);
	REQUIRE(s);
	struct buf j = BUF_INIT;
	unsigned char k[32];
	mkkey(1, k);
	REQUIRE(store_show(s, k, NULL, &j) == 1);
	CHECK(strstr(j.data, "\"hits\":4,") != NULL);
	buf_free(&j);
	store_close(s);
}

/* A real write failure: a file size limit (RLIMIT_FSIZE) stops SQLite's
 * writes part-way, as a full disk does. */
TEST(store_put_failure_is_reported_and_harmless)
{
	struct store *s = open_store(0);
	struct store_counters c;
	struct store_result r;
	struct rlimit old, lim;
	struct stat st;
	char path[512];
	int64_t e0, b0, e1, b1;
	REQUIRE(s);
	REQUIRE(put(s, 1, "first", 5, 0, NULL) == 0);
	store_totals(s, &e0, &b0);

	unsigned char *big = fake_random(1 << 20, 9);
	unsigned char k[32];
	struct buf err = BUF_INIT;
	struct store_entry e = {
		.kind = STORE_PTX, .data = big, .data_len = 1 << 20,
		.components = "{}", .arch = "sm_90a",
	};
	mkkey(2, k);

	snprintf(path, sizeof path, "%s/cache.db-wal", unit_tmpdir());
	off_t wal = stat(path, &st) == 0 ? st.st_size : 0;
	snprintf(path, sizeof path, "%s/cache.db", unit_tmpdir());
	off_t dbsz = stat(path, &st) == 0 ? st.st_size : 0;
	REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
	lim = old;
	lim.rlim_cur = (rlim_t)((wal > dbsz ? wal : dbsz) + 65536);
	signal(SIGXFSZ, SIG_IGN);
	int saved = log_threshold;
	log_threshold = 0;
	REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
	int rc = store_put(s, k, &e, &err);
	setrlimit(RLIMIT_FSIZE, &old);
	log_threshold = saved;
	signal(SIGXFSZ, SIG_DFL);

	CHECK(rc == -1);
	char want[600];
	snprintf(want, sizeof want, "cannot store entry in '%s': ", path);
	CHECK(err.data && !strncmp(err.data, want, strlen(want)));
	CHECK(err.data && strlen(err.data) > strlen(want));
	store_counters(s, &c);
	CHECK(c.write_errors == 1);
	store_totals(s, &e1, &b1);
	CHECK(e1 == e0 && b1 == b0);

	/* Consistent afterwards: the old entry is there, the failed one is not,
	 * and the same put now works. */
	CHECK(has(s, 1));
	CHECK(get(s, 2, &r) == 0);
	store_result_free(&r);
	buf_reset(&err);
	CHECK(store_put(s, k, &e, &err) == 0);
	REQUIRE(get(s, 2, &r) == 1);
	CHECK(r.data.len == 1 << 20 && !memcmp(r.data.data, big, 1 << 20));
	store_result_free(&r);
	struct buf rep = BUF_INIT;
	CHECK(store_verify(s, NULL, &rep) == 0);
	buf_free(&rep);
	buf_free(&err);
	free(big);
	store_close(s);
}

static void put_with(struct store *s, int i, const struct key_part *parts, size_t n,
		     int status, const char *log)
{
	struct key k;
	struct buf comp = BUF_INIT, err = BUF_INIT;
	unsigned char key[32];
	key_derive(parts, n, &k, &comp);
	mkkey(i, key);
	struct store_entry e = {
		.kind = STORE_PTX, .status = status, .data = "x", .data_len = status ? 0 : 1,
		.log = log, .log_len = log ? strlen(log) : 0, .components = comp.data,
		.arch = parts[0].value, .compile_us = 77,
	};
	CHECK(store_put(s, key, &e, &err) == 0);
	buf_free(&comp);
	buf_free(&err);
}

TEST(store_show_list_nearest)
{
	struct store *s = open_store(0);
	struct buf j = BUF_INIT;
	unsigned char k[32];
	char hex[65];
	REQUIRE(s);
	struct key_part a[] = { { "arch", "sm_90a" }, { "opt", "O3" }, { "input", "abc" } };
	struct key_part b[] = { { "arch", "sm_80" }, { "opt", "O2" }, { "input", "xyz" } };
	struct key_part n[] = { { "arch", "sm_90a" }, { "opt", "O3" }, { "input", "bad" } };
	put_with(s, 1, a, 3, 0, NULL);
	put_with(s, 2, b, 3, 0, NULL);
	put_with(s, 3, n, 3, 2, "LLVM ERROR: \"Cannot select\"\n");

	mkkey(1, k);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", k[i]);
	REQUIRE(store_show(s, k, NULL, &j) == 1);
	CHECK(!strncmp(j.data, "{\"key\":\"", 8) && !strncmp(j.data + 8, hex, 64));
	CHECK(strstr(j.data, "\"kind\":\"ptx\",\"status\":0,\"arch\":\"sm_90a\",\"data_len\":1,"));
	CHECK(strstr(j.data, "\"compile_us\":77,\"components\":{\"key_schema\":\"1\","
			     "\"arch\":\"sm_90a\",\"opt\":\"O3\",\"input\":\"abc\"}}"));
	CHECK(!strstr(j.data, "\"log\""));
	buf_reset(&j);

	mkkey(3, k);
	REQUIRE(store_show(s, k, NULL, &j) == 1);
	CHECK(strstr(j.data, ",\"log\":\"LLVM ERROR: \\\"Cannot select\\\"\\n\"}"));
	buf_reset(&j);
	mkkey(4, k);
	CHECK(store_show(s, k, NULL, &j) == 0);

	buf_reset(&j);
	CHECK(store_list(s, NULL, 0, &j) == 3);
	CHECK(j.data[0] == '[' && j.data[j.len - 1] == ']');
	char *p1 = strstr(j.data, "\"input\":\"bad\""); /* newest */
	char *p2 = strstr(j.data, "\"arch\":\"sm_80\"");
	char *p3 = strstr(j.data, "\"opt\":\"O3\",\"input\":\"abc\"");
	CHECK(p1 && p2 && p3 && p1 < p2 && p2 < p3);
	CHECK(!strstr(j.data, "LLVM ERROR"));
	buf_reset(&j);
	CHECK(store_list(s, NULL, 1, &j) == 1);
	CHECK(strstr(j.data, "\"input\":\"bad\"") && !strstr(j.data, "sm_80"));

	/* explain: sm_90a at O2 is one field away from entry 1, two from 2 and 3. */
	struct key_part q[] = { { "arch", "sm_90a" }, { "opt", "O2" }, { "input", "abc" } };
	struct key kq;
	struct buf comp = BUF_INIT;
	REQUIRE(key_derive(q, 3, &kq, &comp) == 0);
	buf_reset(&j);
	REQUIRE(store_nearest(s, comp.data, NULL, &j) == 1);
	mkkey(1, k);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", k[i]);
	char want[300];
	snprintf(want, sizeof want, "{\"key\":\"%s\",\"kind\":\"ptx\",\"differing\":"
		 "[{\"name\":\"opt\",\"stored\":\"O3\",\"requested\":\"O2\"}]}", hex);
	CHECK(!strcmp(j.data, want));

	/* A field the stored entry lacks shows as null. */
	struct key_part q2[] = { { "arch", "sm_80" }, { "opt", "O2" }, { "input", "xyz" },
				 { "fast_math", "1" } };
	buf_reset(&comp);
	REQUIRE(key_derive(q2, 4, &kq, &comp) == 0);
	buf_reset(&j);
	REQUIRE(store_nearest(s, comp.data, NULL, &j) == 1);
	CHECK(strstr(j.data, "[{\"name\":\"fast_math\",\"stored\":null,\"requested\":\"1\"}]"));
	CHECK(store_nearest(s, "not json", NULL, &j) == 0);
	buf_free(&comp);
	buf_free(&j);
	store_close(s);

	/* Nothing to be near in an empty cache. */
	char dir[600];
	snprintf(dir, sizeof dir, "%s/empty", unit_tmpdir());
	struct buf err = BUF_INIT;
	s = store_open(dir, 0, &err);
	REQUIRE(s);
	CHECK(store_nearest(s, "{\"key_schema\":\"1\"}", NULL, &j) == 0);
	CHECK(store_list(s, NULL, 10, &j) == 0 && !strcmp(j.data, "[]"));
	buf_free(&j);
	buf_free(&err);
	store_close(s);
}

/* The per-identity view: an entry is a user's once noted for it, stops
 * being so when replaced or deleted, and a note older than the row it
 * would apply to is dropped. */
TEST(store_view_per_identity)
{
	struct store *s = open_store(0);
	struct buf j = BUF_INIT;
	unsigned char k1[32], k2[32];
	struct store_filter mine = { .own = 1, .user = 1000 };
	struct store_filter theirs = { .own = 1, .user = 2000 };
	struct store_result r;
	int64_t n, b;
	REQUIRE(s);
	mkkey(1, k1);
	mkkey(2, k2);
	REQUIRE(put(s, 1, "one", 3, 0, NULL) == 0);
	store_note_user(s, k1, 1000);
	REQUIRE(put(s, 2, "two", 3, 0, NULL) == 0);
	store_note_user(s, k2, 2000);

	CHECK(store_list(s, &mine, 0, &j) == 1);
	CHECK(store_list(s, NULL, 0, &j) == 2);
	CHECK(store_show(s, k1, &mine, &j) == 1);
	CHECK(store_show(s, k2, &mine, &j) == 0);
	CHECK(store_show(s, k2, &theirs, &j) == 1);
	CHECK(store_count(s, &mine, &n, &b) == 0 && n == 1 && b > 0);
	buf_reset(&j);
	CHECK(store_nearest(s, "{\"key_schema\":\"1\"}", &theirs, &j) == 1);
	char hex2[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex2 + 2 * i, 3, "%02x", k2[i]);
	CHECK(strstr(j.data, hex2) != NULL);
	struct store_filter nobody = { .own = 1, .user = 3000 };
	CHECK(store_nearest(s, "{\"key_schema\":\"1\"}", &nobody, &j) == 0);

	/* A hit noted for 3000, then the entry replaced before the flush:
	 * the note was for the old row and is dropped. */
	REQUIRE(get(s, 1, &r) == 1);
	store_result_free(&r);
	store_note_user(s, k1, 3000);
	REQUIRE(put(s, 1, "uno", 3, 0, NULL) == 0);
	CHECK(store_show(s, k1, &nobody, &j) == 0);
	/* The replace took 1000's row with it too. */
	CHECK(store_show(s, k1, &mine, &j) == 0);
	store_note_user(s, k1, 1000);
	CHECK(store_show(s, k1, &mine, &j) == 1);

	/* Deleted: the rows go with it (a put again is no one's). */
	struct store_filter ptx = { .kind = STORE_PTX };
	CHECK(store_remove(s, &ptx) == 2);
	REQUIRE(put(s, 1, "one", 3, 0, NULL) == 0);
	CHECK(store_show(s, k1, &mine, &j) == 0);
	sqlite3 *db = raw_open();
	CHECK(raw_int(db, "SELECT count(*) FROM entry_users", 0) == 0);
	sqlite3_close(db);
	buf_free(&j);
	store_close(s);
}

TEST(store_open_errors)
{
	struct buf err = BUF_INIT;
	char path[600];
	/* A directory that cannot be created: a file is in the way. */
	snprintf(path, sizeof path, "%s/file", unit_tmpdir());
	FILE *f = fopen(path, "w");
	REQUIRE(f);
	fclose(f);
	snprintf(path, sizeof path, "%s/file/sub", unit_tmpdir());
	CHECK(store_open(path, 0, &err) == NULL);
	CHECK(err.len > 0 && strstr(err.data, path));
	buf_free(&err);

	/* A nested directory is created, 0700. */
	struct stat st;
	snprintf(path, sizeof path, "%s/a/b/c", unit_tmpdir());
	struct store *s = store_open(path, 0, &err);
	REQUIRE(s);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);
	store_close(s);
	buf_free(&err);
}
