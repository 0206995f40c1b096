/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fault injection for daemon/store.c, the way SQLite tests itself: run an
 * operation with its nth SQLite allocation, file write or fsync failing,
 * for n = 1, 2, 3, ... until it runs without meeting the fault, once with
 * a single failure and once with every operation after the nth failing too
 * (a disk that stays full). After every run, with injection off:
 *
 *  - the operation returned an error or succeeded; nothing crashed;
 *  - nothing corrupt is served: every entry reads back with its exact
 *    bytes or is a miss, and an entry the failed run did not touch is
 *    still there (a fault is never taken for damage: no entry deleted as
 *    corrupt, no database moved aside);
 *  - PRAGMA integrity_check and every checksum pass (store_verify());
 *  - the store's entry and byte totals, kept in memory, equal what a fresh
 *    open counts in the file;
 *  - SQLite holds no more allocations than before the store was opened.
 *
 * The seam (store_fault_inject(), daemon/store_fault.c) is a malloc wrapper installed with
 * SQLITE_CONFIG_MALLOC and a VFS shim; see store.h.
 */
#include "tests/unit/unit.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/key.h"
#include "daemon/log.h"
#include "daemon/store.h"
#include "daemon/store_fault.h"

/* Bounds the loops: no store operation comes near this many allocations. */
#define MAX_N 5000
#define BASE_ENTRIES 6

static const char *const kind_names[] = {
	[STORE_FAULT_NONE] = "none", [STORE_FAULT_ALLOC] = "alloc",
	[STORE_FAULT_WRITE] = "write", [STORE_FAULT_FULL] = "full",
	[STORE_FAULT_SYNC] = "sync",
};

static void fkey(int i, unsigned char key[32])
{
	char s[32], hex[65];

	snprintf(s, sizeof s, "fault-entry-%d", i);
	key_sha256_hex(s, strlen(s), hex);
	key_from_hex(hex, key);
}

/* Entry i's bytes: every third one 40 KB of incompressible bytes (its blob
 * spans overflow pages, so reading it allocates), the others PTX-like. */
static size_t fdata(int i, unsigned char **out)
{
	size_t n = i % 3 == 0 ? 40000 : 1500 + (size_t)i * 37;
	unsigned char *p = malloc(n);
	uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ULL + 7;

	for (size_t k = 0; k < n; k++) {
		if (i % 3 == 0) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			p[k] = (unsigned char)(x >> 24);
		} else {
			p[k] = "\tld.global.f32 %f1, [%rd2];\n"[(k + (size_t)i) % 28];
		}
	}
	*out = p;
	return n;
}

static int put(struct store *s, int i)
{
	unsigned char key[32], *data;
	char log[64];
	size_t n = fdata(i, &data);

	fkey(i, key);
	snprintf(log, sizeof log, "log of entry %d", i);
	struct store_entry e = {
		.kind = STORE_PTX, .data = data, .data_len = n, .log = log,
		.log_len = strlen(log), .components = "{\"kind\":\"ptx\"}",
		.arch = "sm_90a", .compile_us = i,
	};
	int r = store_put(s, key, &e, NULL);
	free(data);
	return r;
}

/* 1 if entry i reads back exactly, 0 if it is a miss, -1 on a lookup
 * error, -2 if it reads back WRONG. */
static int get(struct store *s, int i)
{
	unsigned char key[32], *data;
	struct store_result r;
	char log[64];
	size_t n = fdata(i, &data);

	fkey(i, key);
	snprintf(log, sizeof log, "log of entry %d", i);
	int rc = store_get(s, key, &r);
	if (rc == 1 && (r.data.len != n || memcmp(r.data.data, data, n) ||
			r.log.len != strlen(log) || memcmp(r.log.data, log, r.log.len) ||
			r.status != 0 || r.kind != STORE_PTX))
		rc = -2;
	store_result_free(&r);
	free(data);
	return rc;
}

/* No file of the cache was moved aside. */
static int nothing_moved_aside(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int ok = 1;

	while (d && (e = readdir(d)))
		if (strstr(e->d_name, ".corrupt-") || strstr(e->d_name, ".old-"))
			ok = 0;
	if (d)
		closedir(d);
	return ok;
}

/* Make dst a copy of the closed cache in src (cache.db alone: a closed
 * store has checkpointed and truncated its WAL). 0 on success. */
static int copy_cache(const char *src, const char *dst)
{
	char from[600], to[600];
	DIR *d;
	struct dirent *e;

	mkdir(dst, 0700);
	if (!(d = opendir(dst)))
		return -1;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
		unlink(to);
	}
	closedir(d);
	snprintf(from, sizeof from, "%s/cache.db", src);
	snprintf(to, sizeof to, "%s/cache.db", dst);
	FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
	char b[65536];
	size_t n;
	int rc = in && out ? 0 : -1;
	while (!rc && (n = fread(b, 1, sizeof b, in)) > 0)
		if (fwrite(b, 1, n, out) != n)
			rc = -1;
	if (in)
		fclose(in);
	if (out && fclose(out) != 0)
		rc = -1;
	return rc;
}

/* Where the runs keep their caches: tmpfs when there is one, since each
 * run opens and closes (checkpoints, fsyncs) a database a few times.
 * Removed when the process exits. */
static char shm[64];

static const char *work_dir(const char *leaf, char *out, size_t n)
{
	if (!shm[0]) {
		snprintf(shm, sizeof shm, "/dev/shm/ptxcache-faults-XXXXXX");
		if (!mkdtemp(shm))
			snprintf(shm, sizeof shm, "/tmp/ptxcache-faults-XXXXXX");
		if (!shm[0] || (strncmp(shm, "/dev/shm/", 9) && !mkdtemp(shm)))
			snprintf(shm, sizeof shm, "/tmp");
	}
	snprintf(out, n, "%s/%s", shm, leaf);
	return out;
}

__attribute__((destructor)) static void work_dir_remove(void)
{
	char cmd[128];

	if (strncmp(shm, "/dev/shm/ptxcache-faults-", 25) &&
	    strncmp(shm, "/tmp/ptxcache-faults-", 21))
		return;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", shm);
	if (system(cmd) != 0)
		fprintf(stderr, "  cannot remove '%s'\n", shm);
}

static long sqlite_allocs(void)
{
	struct store_fault_stats st;

	store_fault_stats(&st);
	return st.allocs;
}

/* A cache with entries 0..BASE_ENTRIES-1; 0 on success. */
static int make_base(const char *dir)
{
	struct buf err = BUF_INIT;
	struct store *s = store_open(dir, 0, &err);
	int ok = s != NULL;

	buf_free(&err);
	for (int i = 0; ok && i < BASE_ENTRIES; i++)
		ok = put(s, i) == 0;
	store_close(s);
	return ok ? 0 : -1;
}

/*
 * With injection off: every entry i in [0, upto) with want[i] set reads
 * back exactly (or is a miss, if may_miss: evicted); the others are exact
 * or a miss (a put that failed); verify finds nothing; the totals the store
 * kept equal a fresh count; no move-aside happened. 0 if all holds.
 */
static int check_cache(const char *dir, int upto, const char *want, int may_miss,
		       int64_t entries, int64_t bytes, const char *what, long n)
{
	struct buf err = BUF_INIT, report = BUF_INIT;
	struct store *s = store_open(dir, 0, &err);
	int bad = 0;

	if (!s) {
		fprintf(stderr, "  %s n=%ld: cannot reopen: %s\n", what, n, err.data);
		buf_free(&err);
		return -1;
	}
	int64_t e2, b2;
	store_totals(s, &e2, &b2);
	if (entries >= 0 && (e2 != entries || b2 != bytes)) {
		fprintf(stderr, "  %s n=%ld: store counted %lld entries / %lld bytes, "
			"the file holds %lld / %lld\n", what, n, (long long)entries,
			(long long)bytes, (long long)e2, (long long)b2);
		bad = 1;
	}
	for (int i = 0; i < upto; i++) {
		int r = get(s, i);
		if (r == 1 || (r == 0 && (!want[i] || may_miss)))
			continue;
		fprintf(stderr, "  %s n=%ld: entry %d %s\n", what, n, i,
			r == -2 ? "reads back WRONG" : r == 0 ? "is lost" : "cannot be read");
		bad = 1;
	}
	struct store_counters c;
	store_counters(s, &c);
	if (c.corrupt_blobs) {
		fprintf(stderr, "  %s n=%ld: %lld corrupt blobs\n", what, n,
			(long long)c.corrupt_blobs);
		bad = 1;
	}
	int problems = store_verify(s, NULL, &report);
	if (problems != 0) {
		fprintf(stderr, "  %s n=%ld: verify: %d: %s\n", what, n, problems,
			report.data ? report.data : "");
		bad = 1;
	}
	store_close(s);
	if (!nothing_moved_aside(dir)) {
		fprintf(stderr, "  %s n=%ld: the cache was moved aside\n", what, n);
		bad = 1;
	}
	buf_free(&err);
	buf_free(&report);
	return bad ? -1 : 0;
}

struct run_stats {
	long runs, failed;      /* runs; runs whose operation failed */
};

/*
 * store_put() of a new entry under each fault, each run on a fresh copy of
 * the same cache, for n = 1.. until the put meets no fault. With
 * max_bytes, the put also evicts.
 */
static int put_loop(enum store_fault kind, int persist, int64_t max_bytes,
		    struct run_stats *rs)
{
	char base[512], dir[512], what[64], want[BASE_ENTRIES + 1];
	const int id = BASE_ENTRIES;

	snprintf(what, sizeof what, "put %s%s%s", kind_names[kind],
		 persist ? " persistent" : "", max_bytes ? " evicting" : "");
	work_dir("base", base, sizeof base);
	work_dir("run", dir, sizeof dir);
	if (access(base, F_OK) != 0 && make_base(base) < 0)
		return -1;
	memset(want, 1, sizeof want);
	for (long n = 1; n < MAX_N; n++) {
		struct store_fault_stats st;
		struct buf err = BUF_INIT;
		if (copy_cache(base, dir) < 0)
			return -1;
		long before = sqlite_allocs();
		struct store *s = store_open(dir, max_bytes, &err);
		buf_free(&err);
		if (!s)
			return -1;
		store_fault_inject(kind, n, persist);
		int r = put(s, id);
		store_fault_stats(&st);
		store_fault_inject(STORE_FAULT_NONE, 0, 0);
		int64_t entries, bytes;
		store_totals(s, &entries, &bytes);
		/* What the put said must hold: a success reads back. */
		int g = get(s, id);
		if (g == -2 || (r == 0 && g != 1) || (r < 0 && g == 1)) {
			fprintf(stderr, "  %s n=%ld: put returned %d, get %d\n", what, n, r, g);
			store_close(s);
			return -1;
		}
		store_close(s);
		if (sqlite_allocs() != before) {
			fprintf(stderr, "  %s n=%ld: %ld SQLite allocations leaked\n", what, n,
				sqlite_allocs() - before);
			return -1;
		}
		rs->runs++;
		if (r < 0)
			rs->failed++;
		want[id] = r == 0;
		/* A full disk makes room from the oldest entries (store_put.c). */
		if (check_cache(dir, id + 1, want, max_bytes != 0 || kind == STORE_FAULT_FULL,
				entries, bytes, what, n) < 0)
			return -1;
		if (!st.fired) {
			if (r != 0) {
				fprintf(stderr, "  %s n=%ld: put failed with no fault\n", what, n);
				return -1;
			}
			return 0;
		}
	}
	fprintf(stderr, "  %s: still failing after %d runs\n", what, MAX_N);
	return -1;
}

/*
 * A whole session under each fault: open, read every entry, verify, flush
 * the hits, close. Lookups may fail but never answer wrong or a miss, and
 * verify may fail but never report a problem that is not there.
 */
static int session_loop(enum store_fault kind, int persist, struct run_stats *rs)
{
	char dir[512], what[64], want[BASE_ENTRIES];

	memset(want, 1, sizeof want);
	snprintf(what, sizeof what, "session %s%s", kind_names[kind],
		 persist ? " persistent" : "");
	char base[512];
	work_dir("base", base, sizeof base);
	work_dir("run", dir, sizeof dir);
	if (access(base, F_OK) != 0 && make_base(base) < 0)
		return -1;
	for (long n = 1; n < MAX_N; n++) {
		struct store_fault_stats st;
		if (copy_cache(base, dir) < 0)
			return -1;
		struct buf err = BUF_INIT, report = BUF_INIT;
		long before = sqlite_allocs();
		int failed = 0;

		store_fault_inject(kind, n, persist);
		struct store *s = store_open(dir, 0, &err);
		if (!s) {
			failed = 1;
			if (!err.len) {
				fprintf(stderr, "  %s n=%ld: open failed without a message\n",
					what, n);
				return -1;
			}
		}
		for (int i = 0; s && i < BASE_ENTRIES; i++) {
			int g = get(s, i);
			if (g == 0 || g == -2) {
				store_fault_inject(STORE_FAULT_NONE, 0, 0);
				fprintf(stderr, "  %s n=%ld: entry %d %s under the fault\n", what,
					n, i, g ? "read back WRONG" : "was a miss");
				store_close(s);
				return -1;
			}
			failed |= g < 0;
		}
		if (s) {
			int problems = store_verify(s, NULL, &report);
			if (problems > 0) {
				store_fault_inject(STORE_FAULT_NONE, 0, 0);
				fprintf(stderr, "  %s n=%ld: verify reported %d problems that "
					"are not there: %s", what, n, problems, report.data);
				store_close(s);
				return -1;
			}
			failed |= problems < 0;
		}
		store_close(s);
		store_fault_stats(&st);
		store_fault_inject(STORE_FAULT_NONE, 0, 0);
		buf_free(&err);
		buf_free(&report);
		if (sqlite_allocs() != before) {
			fprintf(stderr, "  %s n=%ld: %ld SQLite allocations leaked\n", what, n,
				sqlite_allocs() - before);
			return -1;
		}
		rs->runs++;
		rs->failed += failed;
		if (check_cache(dir, BASE_ENTRIES, want, 0, -1, -1, what, n) < 0)
			return -1;
		if (!st.fired)
			return failed ? -1 : 0;
	}
	fprintf(stderr, "  %s: still failing after %d runs\n", what, MAX_N);
	return -1;
}

static const enum store_fault kinds[] = {
	STORE_FAULT_ALLOC, STORE_FAULT_WRITE, STORE_FAULT_FULL, STORE_FAULT_SYNC,
};

TEST(fault_seam_installs_and_counts)
{
	REQUIRE(store_fault_inject(STORE_FAULT_NONE, 0, 0) == 0);
	long before = sqlite_allocs();
	struct buf err = BUF_INIT;
	struct store *s = store_open(unit_tmpdir(), 0, &err);
	buf_free(&err);
	REQUIRE(s);
	CHECK(sqlite_allocs() > before);
	/* The first write of a put fails: the put reports it. */
	store_fault_inject(STORE_FAULT_WRITE, 1, 1);
	CHECK(put(s, 1) < 0);
	struct store_fault_stats st;
	store_fault_stats(&st);
	CHECK(st.fired >= 1 && st.seen >= st.fired);
	store_fault_inject(STORE_FAULT_NONE, 0, 0);
	CHECK(put(s, 1) == 0 && get(s, 1) == 1);
	store_close(s);
	CHECK(sqlite_allocs() == before);
}

TEST(fault_put_fails_cleanly_at_every_point)
{
	REQUIRE(store_fault_inject(STORE_FAULT_NONE, 0, 0) == 0);
	log_threshold = getenv("FAULT_VERBOSE") ? LOG_WARN : LOG_ERR; /* thousands of expected warnings */
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		for (int persist = 0; persist < 2; persist++) {
			struct run_stats rs = { 0 };
			CHECK(put_loop(kinds[k], persist, 0, &rs) == 0);
			printf("     put, %s%s: %ld runs, %ld failed cleanly\n",
			       kind_names[kinds[k]], persist ? " (persistent)" : "",
			       rs.runs, rs.failed);
		}
	}
	log_threshold = LOG_WARN;
}

TEST(fault_put_with_eviction_fails_cleanly)
{
	REQUIRE(store_fault_inject(STORE_FAULT_NONE, 0, 0) == 0);
	log_threshold = getenv("FAULT_VERBOSE") ? LOG_WARN : LOG_ERR;
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		struct run_stats rs = { 0 };
		/* Under the base's size, so every put evicts. */
		CHECK(put_loop(kinds[k], 1, 60000, &rs) == 0);
		printf("     put+evict, %s: %ld runs, %ld failed cleanly\n",
		       kind_names[kinds[k]], rs.runs, rs.failed);
	}
	log_threshold = LOG_WARN;
}

/* A batch of three puts (store_batch_begin()) under a fault at every
 * point: a commit that returns 0 stored all three, one that fails stored
 * none (and the totals are as before it), never some. */
static int batch_loop(enum store_fault kind, int persist, struct run_stats *rs)
{
	char base[512], dir[512], what[64], want[BASE_ENTRIES + 4];
	const int id = BASE_ENTRIES;

	snprintf(what, sizeof what, "batch %s%s", kind_names[kind], persist ? " persistent" : "");
	work_dir("base", base, sizeof base);
	work_dir("run", dir, sizeof dir);
	if (access(base, F_OK) != 0 && make_base(base) < 0)
		return -1;
	memset(want, 1, sizeof want);
	for (long n = 1; n < MAX_N; n++) {
		struct store_fault_stats st;
		struct buf err = BUF_INIT;
		if (copy_cache(base, dir) < 0)
			return -1;
		struct store *s = store_open(dir, 0, &err);
		buf_free(&err);
		if (!s)
			return -1;
		int64_t e0, b0, entries, bytes;
		store_totals(s, &e0, &b0);
		store_fault_inject(kind, n, persist);
		int r = store_batch_begin(s);
		int staged = 0, ok[3] = { 0 };
		for (int i = 0; r == 0 && i < 3; i++)
			staged += ok[i] = put(s, id + i) == 0;
		if (r == 0)
			r = store_batch_commit(s, NULL);
		store_fault_stats(&st);
		store_fault_inject(STORE_FAULT_NONE, 0, 0);
		store_totals(s, &entries, &bytes);
		int found = 0, wrong = 0;
		for (int i = 0; i < 3; i++) {
			int g = get(s, id + i) == 1;
			found += g;
			wrong += g != (r == 0 && ok[i]);
		}
		if (wrong || (r == 0 && found != staged) || (r < 0 && found != 0) ||
		    (r < 0 && (entries != e0 || bytes != b0))) {
			fprintf(stderr, "  %s n=%ld: commit %d, %d staged, %d found\n", what, n, r,
				staged, found);
			store_close(s);
			return -1;
		}
		store_close(s);
		rs->runs++;
		if (r < 0)
			rs->failed++;
		for (int i = 0; i < 3; i++)
			want[id + i] = r == 0 && ok[i];
		if (check_cache(dir, id + 3, want, kind == STORE_FAULT_FULL, entries, bytes,
				what, n) < 0)
			return -1;
		if (!st.fired)
			return r == 0 && staged == 3 ? 0 : -1;
	}
	fprintf(stderr, "  %s: still failing after %d runs\n", what, MAX_N);
	return -1;
}

TEST(fault_batch_stores_all_or_none)
{
	REQUIRE(store_fault_inject(STORE_FAULT_NONE, 0, 0) == 0);
	log_threshold = getenv("FAULT_VERBOSE") ? LOG_WARN : LOG_ERR;
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		struct run_stats rs = { 0 };
		CHECK(batch_loop(kinds[k], 0, &rs) == 0);
		printf("     batch, %s: %ld runs, %ld failed cleanly\n", kind_names[kinds[k]],
		       rs.runs, rs.failed);
	}
	log_threshold = LOG_WARN;
}

/* A disk that fills up under a put: the put evicts the oldest entries,
 * tries once more and succeeds, where it used to fail (and every later
 * put with it, until someone made room). */
TEST(store_full_disk_put_makes_room_and_succeeds)
{
	char base[512], dir[512];
	struct buf err = BUF_INIT;
	struct store_counters c;

	REQUIRE(store_fault_inject(STORE_FAULT_NONE, 0, 0) == 0);
	work_dir("base", base, sizeof base);
	work_dir("run", dir, sizeof dir);
	REQUIRE(access(base, F_OK) == 0 || make_base(base) == 0);
	REQUIRE(copy_cache(base, dir) == 0);
	struct store *s = store_open(dir, 0, &err);
	REQUIRE(s);
	int64_t e0, b0, e1, b1;
	store_totals(s, &e0, &b0);
	log_threshold = LOG_ERR;
	store_fault_inject(STORE_FAULT_FULL, 1, 0);
	int r = put(s, BASE_ENTRIES);
	store_fault_inject(STORE_FAULT_NONE, 0, 0);
	log_threshold = LOG_WARN;
	CHECK(r == 0);
	CHECK(get(s, BASE_ENTRIES) == 1);
	store_counters(s, &c);
	CHECK(c.full_retries == 1 && c.write_errors == 0 && c.evictions > 0);
	store_totals(s, &e1, &b1);
	CHECK(e1 == e0 + 1 - c.evictions);
	store_close(s);
	buf_free(&err);
}

TEST(fault_open_read_verify_close_never_serves_damage)
{
	REQUIRE(store_fault_inject(STORE_FAULT_NONE, 0, 0) == 0);
	log_threshold = getenv("FAULT_VERBOSE") ? LOG_WARN : LOG_ERR;
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		for (int persist = 0; persist < 2; persist++) {
			struct run_stats rs = { 0 };
			CHECK(session_loop(kinds[k], persist, &rs) == 0);
			printf("     session, %s%s: %ld runs, %ld failed cleanly\n",
			       kind_names[kinds[k]], persist ? " (persistent)" : "",
			       rs.runs, rs.failed);
		}
	}
	log_threshold = LOG_WARN;
}

/* Regression: SQLite out of memory inside PRAGMA quick_check reports "failed
 * to get page N", and store_open() took that for damage and moved a healthy
 * cache aside (found by the session loop above). */
TEST(store_oom_in_quick_check_never_moves_cache_aside)
{
	char base[512], dir[512];
	long n, moved = 0, failed = 0;

	REQUIRE(store_fault_inject(STORE_FAULT_NONE, 0, 0) == 0);
	log_threshold = LOG_ERR;
	work_dir("base", base, sizeof base);
	work_dir("run", dir, sizeof dir);
	REQUIRE(access(base, F_OK) == 0 || make_base(base) == 0);
	for (n = 1; n < MAX_N; n++) {
		struct store_fault_stats st;
		REQUIRE(copy_cache(base, dir) == 0);
		struct buf err = BUF_INIT;
		store_fault_inject(STORE_FAULT_ALLOC, n, 0);
		struct store *s = store_open(dir, 0, &err);
		store_fault_stats(&st);
		store_fault_inject(STORE_FAULT_NONE, 0, 0);
		failed += !s;
		CHECK(s || err.len);
		buf_free(&err);
		store_close(s);
		moved += !nothing_moved_aside(dir);
		if (!st.fired)
			break;
	}
	log_threshold = LOG_WARN;
	CHECK(n < MAX_N && failed > 0);
	CHECK(moved == 0);
}

/* Regression: store_verify() counted an integrity_check that could not run
 * (out of memory) as a problem in the cache, so `ptxcache verify` called a
 * healthy cache damaged. */
TEST(store_verify_out_of_memory_is_not_a_problem)
{
	char base[512];
	struct buf report = BUF_INIT;
	long n, refused = 0;

	REQUIRE(store_fault_inject(STORE_FAULT_NONE, 0, 0) == 0);
	log_threshold = LOG_ERR;
	work_dir("base", base, sizeof base);
	REQUIRE(access(base, F_OK) == 0 || make_base(base) == 0);
	struct buf err = BUF_INIT;
	struct store *s = store_open(base, 0, &err);
	buf_free(&err);
	REQUIRE(s);
	for (n = 1; n < MAX_N; n++) {
		struct store_fault_stats st;
		buf_reset(&report);
		store_fault_inject(STORE_FAULT_ALLOC, n, 0);
		int problems = store_verify(s, NULL, &report);
		store_fault_stats(&st);
		store_fault_inject(STORE_FAULT_NONE, 0, 0);
		CHECK(problems <= 0);
		refused += problems < 0;
		if (!st.fired)
			break;
	}
	CHECK(n < MAX_N && refused > 0);
	CHECK(store_verify(s, NULL, &report) == 0);
	store_close(s);
	buf_free(&report);
	log_threshold = LOG_WARN;
}
