/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_flat: daemon/store_flat.c against texts whose fields are known: what
 * key.c writes parses to its fields; anything else is refused.
 */
#include "tests/unit/unit.h"

#include <string.h>

#include "daemon/store_flat.h"

static int field_is(const struct flat_field *f, int n, const char *name, const char *val,
		    int is_str)
{
	struct flat_field like = { .name = name, .name_len = strlen(name) };
	const struct flat_field *got = flat_find(f, n, &like);
	return got && got->is_str == is_str && got->val_len == strlen(val) &&
	       !memcmp(got->val, val, got->val_len);
}

TEST(flat_parses_what_key_c_writes)
{
	struct flat_field f[FLAT_MAX_FIELDS];
	const char *art = "{\"key_schema\":\"1\",\"kind\":\"artifact\",\"scope\":\"u0\","
			  "\"namespace\":\"triton\",\"key\":\"k/1\"}";
	CHECK(flat_parse(art, f, FLAT_MAX_FIELDS) == 5);
	CHECK(field_is(f, 5, "kind", "artifact", 1));
	CHECK(field_is(f, 5, "key", "k/1", 1));
	CHECK(flat_parse(" { \"a\" : -1.5e+3 , \"b\":true,\"c\":null,\"d\":\"x\\\"y\" } ", f,
			 FLAT_MAX_FIELDS) == 4);
	CHECK(field_is(f, 4, "a", "-1.5e+3", 0));
	CHECK(field_is(f, 4, "b", "true", 0));
	CHECK(field_is(f, 4, "d", "x\\\"y", 1));      /* escapes kept, raw */
	CHECK(flat_parse("{}", f, FLAT_MAX_FIELDS) == 0);
}

TEST(flat_refuses_what_is_not_a_flat_object)
{
	static const char *const bad[] = {
		"", "[]", "{", "{\"a\":1", "{\"a\":1,}", "{\"a\" 1}", "{\"a\":}",
		"{\"a\":{\"b\":1}}", "{\"a\":[1]}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u00zz\"}",
		"{\"a\":\"\x01\"}", "{} x", "{a:1}",
	};
	struct flat_field f[FLAT_MAX_FIELDS];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(flat_parse(bad[i], f, FLAT_MAX_FIELDS) == -1);
	CHECK(flat_parse("{\"a\":1,\"b\":2,\"c\":3}", f, 2) == -1);     /* over max */
}

TEST(flat_diff_counts_changed_and_missing_fields)
{
	struct flat_field a[8], b[8];
	int na = flat_parse("{\"x\":\"1\",\"y\":\"2\",\"z\":3}", a, 8);
	int nb = flat_parse("{\"y\":\"2\",\"x\":\"9\",\"w\":3}", b, 8);
	REQUIRE(na == 3 && nb == 3);
	CHECK(flat_diff(a, na, a, na) == 0);
	CHECK(flat_diff(a, na, b, nb) == 3);    /* x changed, z gone, w new */
	struct flat_field c[8];
	int nc = flat_parse("{\"z\":\"3\",\"x\":\"1\",\"y\":\"2\"}", c, 8);
	CHECK(flat_diff(a, na, c, nc) == 1);    /* 3 against "3": types differ */
	struct buf j = BUF_INIT;
	CHECK(flat_value_json(&j, &a[0]) == 0 && !strcmp(j.data, "\"1\""));
	buf_reset(&j);
	CHECK(flat_value_json(&j, NULL) == 0 && !strcmp(j.data, "null"));
	buf_free(&j);
}
