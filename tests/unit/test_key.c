/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for daemon/key.c: the documented encoding, determinism,
 * separation of components, the components JSON and hex parsing. */
#include "tests/unit/unit.h"

#include <stdint.h>
#include <string.h>

#include "daemon/key.h"

static const char sha_empty[] =
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
static const char sha_abc[] =
	"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

static int same_key(const struct key *a, const struct key *b)
{
	return !memcmp(a->hash, b->hash, 32) && !strcmp(a->hex, b->hex);
}

TEST(key_sha256_known_answers)
{
	char hex[65];

	key_sha256_hex("", 0, hex);
	CHECK(!strcmp(hex, sha_empty));
	key_sha256_hex("abc", 3, hex);
	CHECK(!strcmp(hex, sha_abc));
}

/* The key is SHA-256 of exactly the encoding key.h documents. */
TEST(key_encoding_is_the_documented_one)
{
	struct key_part parts[] = { { "arch", "sm_90a" }, { "opt", NULL } };
	struct key k;
	unsigned char enc[128], *p = enc;
	char want[65];

	memcpy(p, "ptxcache-key", 13); /* with its NUL */
	p += 13;
	*p++ = 0; *p++ = 0; *p++ = 0; *p++ = KEY_SCHEMA_VERSION;
	*p++ = 0; *p++ = 0; *p++ = 0; *p++ = 4;
	memcpy(p, "arch", 4); p += 4;
	*p++ = 0; *p++ = 0; *p++ = 0; *p++ = 6;
	memcpy(p, "sm_90a", 6); p += 6;
	*p++ = 0; *p++ = 0; *p++ = 0; *p++ = 3;
	memcpy(p, "opt", 3); p += 3;
	*p++ = 0; *p++ = 0; *p++ = 0; *p++ = 0; /* NULL value: "" */
	key_sha256_hex(enc, (size_t)(p - enc), want);

	REQUIRE(key_derive(parts, 2, &k, NULL) == 0);
	CHECK(!strcmp(k.hex, want));
	unsigned char h[32];
	REQUIRE(key_from_hex(k.hex, h) == 0);
	CHECK(!memcmp(h, k.hash, 32));
}

TEST(key_deterministic)
{
	struct key_part parts[] = {
		{ "input", sha_abc }, { "arch", "sm_90a" }, { "llvm", "22.1.0" },
	};
	struct key a, b;
	struct buf ja = BUF_INIT, jb = BUF_INIT;

	REQUIRE(key_derive(parts, 3, &a, &ja) == 0);
	REQUIRE(key_derive(parts, 3, &b, &jb) == 0);
	CHECK(same_key(&a, &b));
	CHECK(ja.len == jb.len && !strcmp(ja.data, jb.data));
	CHECK(strlen(a.hex) == 64);
	buf_free(&ja);
	buf_free(&jb);
}

TEST(key_components_change_key)
{
	struct key_part base[] = { { "arch", "sm_90a" }, { "opt", "O3" } };
	struct key_part val[] = { { "arch", "sm_90" }, { "opt", "O3" } };
	struct key_part name[] = { { "arch", "sm_90a" }, { "opT", "O3" } };
	struct key_part order[] = { { "opt", "O3" }, { "arch", "sm_90a" } };
	struct key_part extra[] = { { "arch", "sm_90a" }, { "opt", "O3" }, { "", "" } };
	struct key k0, k1, k2, k3, k4;

	REQUIRE(key_derive(base, 2, &k0, NULL) == 0);
	REQUIRE(key_derive(val, 2, &k1, NULL) == 0);
	REQUIRE(key_derive(name, 2, &k2, NULL) == 0);
	REQUIRE(key_derive(order, 2, &k3, NULL) == 0);
	REQUIRE(key_derive(extra, 3, &k4, NULL) == 0);
	CHECK(!same_key(&k0, &k1));
	CHECK(!same_key(&k0, &k2));
	CHECK(!same_key(&k0, &k3));
	CHECK(!same_key(&k0, &k4));
}

/* Length prefixes keep the boundaries: "ab"+"c" is not "a"+"bc", and two
 * parts are not one part holding their concatenation. */
TEST(key_length_prefix_prevents_ambiguity)
{
	struct key_part a[] = { { "ab", "c" } };
	struct key_part b[] = { { "a", "bc" } };
	struct key_part c[] = { { "x", "ab" }, { "y", "c" } };
	struct key_part d[] = { { "x", "a" }, { "y", "bc" } };
	struct key_part e[] = { { "x", "" }, { "", "" } };
	struct key_part f[] = { { "x", "" } };
	struct key ka, kb, kc, kd, ke, kf;

	REQUIRE(key_derive(a, 1, &ka, NULL) == 0);
	REQUIRE(key_derive(b, 1, &kb, NULL) == 0);
	REQUIRE(key_derive(c, 2, &kc, NULL) == 0);
	REQUIRE(key_derive(d, 2, &kd, NULL) == 0);
	REQUIRE(key_derive(e, 2, &ke, NULL) == 0);
	REQUIRE(key_derive(f, 1, &kf, NULL) == 0);
	CHECK(!same_key(&ka, &kb));
	CHECK(!same_key(&kc, &kd));
	CHECK(!same_key(&ke, &kf));
}

TEST(key_components_json)
{
	struct key_part plain[] = { { "arch", "sm_90a" }, { "opt", NULL } };
	struct key_part odd[] = {
		{ "q\"b\\", "line\nnext\ttab\x01" },
		{ "utf8", "caf\xc3\xa9" },
		{ "bad", "\xff" "x" },
	};
	struct buf j = BUF_INIT;
	struct key k;

	REQUIRE(key_derive(plain, 2, &k, &j) == 0);
	CHECK(!strcmp(j.data, "{\"key_schema\":\"1\",\"arch\":\"sm_90a\",\"opt\":\"\"}"));
	buf_reset(&j);
	REQUIRE(key_derive(odd, 3, &k, &j) == 0);
	CHECK(!strcmp(j.data, "{\"key_schema\":\"1\","
			      "\"q\\\"b\\\\\":\"line\\nnext\\ttab\\u0001\","
			      "\"utf8\":\"caf\xc3\xa9\","
			      "\"bad\":\"\\u00ffx\"}"));
	/* Appends to what the buf already holds. */
	buf_reset(&j);
	buf_puts(&j, "X");
	REQUIRE(key_derive(plain, 1, &k, &j) == 0);
	CHECK(!strcmp(j.data, "X{\"key_schema\":\"1\",\"arch\":\"sm_90a\"}"));
	buf_free(&j);
}

TEST(key_long_parts)
{
	static char big[10000];
	struct key_part p1[] = { { "big", big } };
	struct key k1, k2;

	memset(big, 'a', sizeof big - 1);
	REQUIRE(key_derive(p1, 1, &k1, NULL) == 0);
	big[5000] = 'b';
	REQUIRE(key_derive(p1, 1, &k2, NULL) == 0);
	CHECK(!same_key(&k1, &k2));
}

TEST(key_from_hex_parses)
{
	unsigned char h[32];
	char up[65];

	REQUIRE(key_from_hex(sha_abc, h) == 0);
	CHECK(h[0] == 0xba && h[1] == 0x78 && h[31] == 0xad);
	for (int i = 0; i < 65; i++)
		up[i] = (sha_abc[i] >= 'a' && sha_abc[i] <= 'f') ? sha_abc[i] - 32 : sha_abc[i];
	unsigned char h2[32];
	CHECK(key_from_hex(up, h2) == 0 && !memcmp(h, h2, 32));
	CHECK(key_from_hex("", h2) < 0);
	CHECK(key_from_hex(NULL, h2) < 0);
	char s[70];
	memcpy(s, sha_abc, 63);
	s[63] = '\0';
	CHECK(key_from_hex(s, h2) < 0); /* 63 digits */
	memcpy(s, sha_abc, 64);
	s[64] = '0';
	s[65] = '\0';
	CHECK(key_from_hex(s, h2) < 0); /* 65 digits */
	memcpy(s, sha_abc, 65);
	s[10] = 'g';
	CHECK(key_from_hex(s, h2) < 0);
}
