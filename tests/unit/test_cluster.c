/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for daemon/l2_cluster.c: hash slots against the Redis Cluster
 * specification's vectors and hash-tag rules, slot maps from well-formed
 * and hostile CLUSTER SLOTS replies (built here by hand), MOVED/ASK
 * redirections, IPv6 and empty hosts included, and l2_new()'s checks of a
 * redis-cluster:// URL. The routing against real servers:
 * tests/test_l2_cluster.py. */
#include "tests/unit/unit.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/l2_cluster.h"
#include "daemon/l2.h"

static unsigned slot_of(const char *k)
{
	return cluster_slot(k, strlen(k));
}

TEST(cluster_slot_vectors)
{
	/* The specification's check value of CRC16-XMODEM. */
	CHECK(slot_of("123456789") == 12739);
	CHECK(slot_of("") == 0);
	CHECK(slot_of("foo") == 12182);
	CHECK(slot_of("bar") == 5061);
	CHECK(slot_of("{user1000}.following") == slot_of("{user1000}.followers"));
	CHECK(slot_of("{user1000}.following") == slot_of("user1000"));
	/* An empty tag hashes the whole key; only the first '{' counts.
	 * The numbers below are a real redis-server's (7.0.15, cluster-enabled)
	 * answers to CLUSTER KEYSLOT for each key, asked with redis-cli. */
	CHECK(slot_of("{user1000}.following") == 3443);
	CHECK(slot_of("foo{}{bar}") == 8363);
	CHECK(slot_of("foo{{bar}}zap") == 4015 && slot_of("{bar") == 4015);
	CHECK(slot_of("ptxcache:0") == 12490);
	CHECK(slot_of("foo{bar}{zap}") == 5061 && slot_of("bar") == 5061);
	/* No tag (a brace unmatched, or a '}' before the first '{'): the
	 * whole key is hashed. Each of these differs from the slot of any
	 * part of it that a wrong tag rule would hash (checked beside). */
	CHECK(slot_of("{") == 4092);
	CHECK(slot_of("}") == 12090);
	CHECK(slot_of("}{") == 12793);
	CHECK(slot_of("{}") == 15257);
	CHECK(slot_of("{a") == 10276 && slot_of("a") == 15495);
	CHECK(slot_of("a{b") == 13340 && slot_of("b") == 3300);
	CHECK(slot_of("tag{") == 14750 && slot_of("tag") == 8338);
	CHECK(slot_of("no}tag{here") == 14611);
	CHECK(slot_of("a}b{c") == 13587 && slot_of("c") == 7365);
	CHECK(slot_of("x{}y") == 16116);
	CHECK(slot_of("{}tag") == 10776);
	/* A '}' before the first '{' does not close it: the tag follows. */
	CHECK(slot_of("}{tag}") == 8338);
	/* Binary keys: a NUL is a byte like any other. */
	CHECK(cluster_slot("a\0b", 3) != cluster_slot("a", 1));
	/* Tagless keys: the slot is the CRC16 of the whole key modulo 16384,
	 * against a CRC16-XMODEM computed here bit by bit (not l2_cluster.c's
	 * table). Most of these keys' CRCs are 16384 or more: the value the
	 * daemon reduces, which must land on the remainder, not merely in
	 * range. */
	int over = 0;
	for (int i = 0; i < 1000; i++) {
		char k[32];
		snprintf(k, sizeof k, "ptxcache:%d", i);
		unsigned crc = 0;
		for (const char *p = k; *p; p++) {
			crc ^= (unsigned)(unsigned char)*p << 8;
			for (int b = 0; b < 8; b++)
				crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
		}
		over += crc >= CLUSTER_SLOTS;
		CHECK(slot_of(k) == crc % CLUSTER_SLOTS);
	}
	CHECK(over > 500);
}

/* ---- replies built by hand --------------------------------------------- */

static redisReply *rep(int type)
{
	redisReply *r = calloc(1, sizeof *r);
	r->type = type;
	return r;
}

static redisReply *rnum(long long v)
{
	redisReply *r = rep(REDIS_REPLY_INTEGER);
	r->integer = v;
	return r;
}

static redisReply *rstr(const char *s)
{
	redisReply *r = rep(REDIS_REPLY_STRING);
	r->len = strlen(s);
	r->str = strdup(s);
	return r;
}

/* An array of n elements, given as arguments. */
static redisReply *rarr(size_t n, ...)
{
	redisReply *r = rep(REDIS_REPLY_ARRAY);
	va_list ap;

	r->elements = n;
	r->element = calloc(n ? n : 1, sizeof *r->element);
	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		r->element[i] = va_arg(ap, redisReply *);
	va_end(ap);
	return r;
}

static void rfree(redisReply *r)
{
	if (!r)
		return;
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
		rfree(r->element[i]);
	free(r->element);
	free(r->str);
	free(r);
}

static redisReply *node(const char *host, long long port)
{
	return rarr(3, host ? rstr(host) : rep(REDIS_REPLY_NIL), rnum(port), rstr("0123abcd"));
}

static redisReply *three_masters(void)
{
	return rarr(3,
		    rarr(4, rnum(0), rnum(5460), node("127.0.0.1", 7000), node("127.0.0.1", 7003)),
		    rarr(4, rnum(5461), rnum(10922), node("127.0.0.1", 7001), node("127.0.0.1", 7004)),
		    rarr(4, rnum(10923), rnum(16383), node("::1", 7002), node("127.0.0.1", 7005)));
}

TEST(cluster_map_three_masters)
{
	redisReply *r = three_masters();
	char err[128] = "";
	struct cluster_map *m = cluster_map_parse(r, "127.0.0.1", err, sizeof err);
	const struct cluster_addr *a;

	REQUIRE(m);
	CHECK(m->nnodes == 3);
	a = cluster_map_lookup(m, 0);
	CHECK(a && !strcmp(a->host, "127.0.0.1") && a->port == 7000);
	a = cluster_map_lookup(m, 5461);
	CHECK(a && a->port == 7001);
	a = cluster_map_lookup(m, 16383);
	CHECK(a && !strcmp(a->host, "::1") && a->port == 7002);
	CHECK(cluster_map_lookup(m, slot_of("123456789"))->port == 7002);
	CHECK(cluster_map_lookup(m, 16384) == NULL);
	cluster_map_free(m);
	rfree(r);
}

TEST(cluster_map_gaps_and_shared_masters)
{
	/* A master with two ranges is one node; an uncovered slot has none;
	 * an empty or NULL host is the answering connection's. */
	redisReply *r = rarr(3,
			     rarr(3, rnum(0), rnum(99), node("", 7000)),
			     rarr(3, rnum(200), rnum(299), node(NULL, 7000)),
			     rarr(3, rnum(300), rnum(300), node("10.0.0.2", 7001)));
	char err[128] = "";
	struct cluster_map *m = cluster_map_parse(r, "10.0.0.1", err, sizeof err);

	REQUIRE(m);
	CHECK(m->nnodes == 2);
	CHECK(!strcmp(cluster_map_lookup(m, 250)->host, "10.0.0.1"));
	CHECK(cluster_map_lookup(m, 150) == NULL);
	CHECK(cluster_map_lookup(m, 300)->port == 7001);
	cluster_map_free(m);
	/* No connection's host to take: an error. */
	CHECK(!cluster_map_parse(r, NULL, err, sizeof err));
	rfree(r);
	/* An empty map (a cluster with no slots assigned) is a map. */
	r = rarr(0);
	m = cluster_map_parse(r, "10.0.0.1", err, sizeof err);
	CHECK(m && m->nnodes == 0 && cluster_map_lookup(m, 0) == NULL);
	cluster_map_free(m);
	rfree(r);
}

/* Each hostile reply is refused with a reason, never a crash. */
static void refused(redisReply *r, const char *why_part)
{
	char err[128] = "";
	struct cluster_map *m = cluster_map_parse(r, "127.0.0.1", err, sizeof err);

	CHECK(m == NULL);
	if (!strstr(err, why_part))
		fprintf(stderr, "  reason: got '%s', want '%s'\n", err, why_part);
	CHECK(strstr(err, why_part) != NULL);
	cluster_map_free(m);
	rfree(r);
}

TEST(cluster_map_hostile_replies)
{
	refused(NULL, "array");
	refused(rstr("ERR This instance has cluster support disabled"), "array");
	refused(rnum(3), "array");
	refused(rarr(1, rnum(0)), "entry 0");
	refused(rarr(1, rarr(2, rnum(0), rnum(1))), "entry 0");
	refused(rarr(1, rarr(3, rnum(0), rnum(16384), node("127.0.0.1", 7000))), "0..16383");
	refused(rarr(1, rarr(3, rnum(-1), rnum(5), node("127.0.0.1", 7000))), "0..16383");
	refused(rarr(1, rarr(3, rnum(9), rnum(5), node("127.0.0.1", 7000))), "0..16383");
	refused(rarr(1, rarr(3, rstr("0"), rnum(5), node("127.0.0.1", 7000))), "0..16383");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), rstr("127.0.0.1:7000"))), "node");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), rarr(1, rstr("127.0.0.1")))), "node");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), node("127.0.0.1", 0))), "port");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), node("127.0.0.1", 65536))), "port");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), rarr(2, rnum(1), rnum(7000)))), "host");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), rarr(2, rstr("127.0.0.1"), rstr("7000")))), "port");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), node("redis-1.example", 7000))), "numeric");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), node("?", 7000))), "numeric");
	refused(rarr(1, rarr(3, rnum(0), rnum(5),
			      node("1111:2222:3333:4444:5555:6666:7777:8888:9999:aaaa:bbbb:cccc:dddd", 1))),
		"bytes");
	/* A replica of the wrong shape, overlapping ranges, NULL elements. */
	refused(rarr(1, rarr(4, rnum(0), rnum(5), node("127.0.0.1", 7000), rnum(1))), "node");
	refused(rarr(2, rarr(3, rnum(0), rnum(5), node("127.0.0.1", 7000)),
		     rarr(3, rnum(5), rnum(9), node("127.0.0.1", 7001))), "two ranges");
	refused(rarr(1, NULL), "entry 0");
	refused(rarr(1, rarr(3, NULL, rnum(5), node("127.0.0.1", 7000))), "0..16383");
	refused(rarr(1, rarr(3, rnum(0), rnum(5), rarr(2, NULL, rnum(7000)))), "host");
	/* A host with a NUL inside its length. */
	redisReply *h = rstr("127.0.0.1");
	h->str[3] = '\0';
	refused(rarr(1, rarr(3, rnum(0), rnum(5), rarr(2, h, rnum(7000)))), "bytes");
}

TEST(cluster_map_too_many_masters)
{
	redisReply *r = rep(REDIS_REPLY_ARRAY);
	char err[128] = "";

	r->elements = CLUSTER_NODES_MAX + 1;
	r->element = calloc(r->elements, sizeof *r->element);
	for (size_t i = 0; i < r->elements; i++) {
		char host[32];
		snprintf(host, sizeof host, "10.0.%zu.%zu", i / 256, i % 256);
		r->element[i] = rarr(3, rnum((long long)i), rnum((long long)i), node(host, 7000));
	}
	CHECK(!cluster_map_parse(r, "10.0.0.1", err, sizeof err) && strstr(err, "masters"));
	rfree(r);
}

static int redirect(const char *s, const char *conn, struct cluster_redirect *out)
{
	return cluster_redirect_parse(s, strlen(s), conn, out);
}

TEST(cluster_redirects)
{
	struct cluster_redirect r;

	REQUIRE(redirect("MOVED 3999 127.0.0.1:6381", "10.0.0.1", &r) == 0);
	CHECK(!r.ask && r.slot == 3999 && !strcmp(r.to.host, "127.0.0.1") && r.to.port == 6381);
	REQUIRE(redirect("ASK 16383 10.1.2.3:7002", NULL, &r) == 0);
	CHECK(r.ask && r.slot == 16383 && !strcmp(r.to.host, "10.1.2.3") && r.to.port == 7002);
	/* IPv6, as Redis writes it (no brackets) and bracketed. */
	REQUIRE(redirect("MOVED 0 2001:db8::1:6379", NULL, &r) == 0);
	CHECK(!strcmp(r.to.host, "2001:db8::1") && r.to.port == 6379);
	REQUIRE(redirect("ASK 7 [::1]:7000", NULL, &r) == 0);
	CHECK(!strcmp(r.to.host, "::1") && r.to.port == 7000);
	REQUIRE(redirect("MOVED 7 ::1:7000", NULL, &r) == 0);
	CHECK(!strcmp(r.to.host, "::1") && r.to.port == 7000);
	/* An empty host: the connection's own. */
	REQUIRE(redirect("MOVED 12 :7005", "127.0.0.1", &r) == 0);
	CHECK(!strcmp(r.to.host, "127.0.0.1") && r.to.port == 7005);
	CHECK(redirect("MOVED 12 :7005", NULL, &r) < 0);
	/* Not redirections, or malformed ones. */
	const char *bad[] = {
		"ERR unknown command", "MOVED", "MOVED ", "MOVED 3999", "MOVED 3999 ",
		"MOVED 16384 127.0.0.1:6381", "MOVED -1 127.0.0.1:6381", "MOVED x 127.0.0.1:6381",
		"MOVED 3999 127.0.0.1", "MOVED 3999 127.0.0.1:", "MOVED 3999 127.0.0.1:0",
		"MOVED 3999 127.0.0.1:65536", "MOVED 3999 127.0.0.1:63x", "MOVED 3999 127.0.0.1:6381 x",
		"MOVED 3999  127.0.0.1:6381", "MOVED 3999 redis.example:6381", "ASK 1 []:7000",
		"ASK 1 [::1:7000", "moved 3999 127.0.0.1:6381", "MOVED 0000001 127.0.0.1:1",
		"MOVED 3999 127.0.0.1:0000006381", "ASKING", "CLUSTERDOWN The cluster is down",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		if (redirect(bad[i], "127.0.0.1", &r) == 0)
			fprintf(stderr, "  accepted '%s'\n", bad[i]);
		CHECK(redirect(bad[i], "127.0.0.1", &r) < 0);
	}
	/* A NUL inside the reply's length. */
	CHECK(cluster_redirect_parse("MOVED 1 1.2.3.4:5\0", 18, NULL, &r) < 0);
	CHECK(cluster_redirect_parse("MOVED 1 1.2.3.4:5", 17, NULL, &r) == 0);
}

/* ---- l2_new() with a cluster's URL -------------------------------------- */

static struct l2 *cluster_l2(struct event_base *base, const char *url, const char *secret,
			     struct buf *err)
{
	struct l2_config cfg = { .url = url, .secret_file = secret, .identity = "test" };

	buf_reset(err);
	return l2_new(base, &cfg, err);
}

TEST(cluster_urls)
{
	struct event_base *base = event_base_new();
	struct buf err = BUF_INIT;
	char secret[300], many[64 * 20 + 64];
	FILE *f;
	struct l2 *l2;

	REQUIRE(base);
	snprintf(secret, sizeof secret, "%s/secret", unit_tmpdir());
	REQUIRE((f = fopen(secret, "w")) && fputs("s3cret\n", f) >= 0 && fclose(f) == 0);
	static const char *good[] = {
		"redis-cluster://127.0.0.1:7000", "redis-cluster://127.0.0.1:7000,127.0.0.1:7001/",
		"redis-cluster://127.0.0.1", "redis-cluster://[::1]:7000,127.0.0.1:7001/0",
		"redis-cluster://u:p%40ss@127.0.0.1:7000,localhost:7001",
	};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
		l2 = cluster_l2(base, good[i], secret, &err);
		if (!l2)
			fprintf(stderr, "  %s: %s\n", good[i], err.data);
		CHECK(l2 != NULL);
		l2_free(l2);            /* its map request in flight, never run */
	}
	static const char *bad[] = {
		"redis-cluster://", "redis-cluster:///", "redis-cluster://127.0.0.1:0",
		"redis-cluster://127.0.0.1:7000/3", "redis-cluster://127.0.0.1:7000,",
		"redis-cluster://127.0.0.1:7000,,127.0.0.1:7001", "redis-cluster://[::1",
		"redis-cluster://127.0.0.1:70000", "redis-cluster://u@127.0.0.1:7000",
		"redis-cluster://127.0.0.1:7000x", "redis-cluster://no-such-host.invalid:7000",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		l2 = cluster_l2(base, bad[i], secret, &err);
		if (l2)
			fprintf(stderr, "  accepted '%s'\n", bad[i]);
		CHECK(l2 == NULL && err.len > 0);
		l2_free(l2);
	}
	/* At most 64 seeds; credentials never show in a message. */
	size_t n = (size_t)snprintf(many, sizeof many, "redis-cluster://");
	for (int i = 0; i < 65; i++)
		n += (size_t)snprintf(many + n, sizeof many - n, "%s127.0.0.1:%d", i ? "," : "", 7000 + i);
	CHECK(cluster_l2(base, many, secret, &err) == NULL && strstr(err.data, "seeds"));
	CHECK(cluster_l2(base, "redis-cluster://me:hunter2@127.0.0.1:x", secret, &err) == NULL);
	CHECK(!strstr(err.data, "hunter2") && strstr(err.data, "***"));
	buf_free(&err);
	event_base_free(base);
}
