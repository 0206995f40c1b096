/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for daemon/tenant.c: which names pass, that no two tenants'
 * numbers meet (nor the main socket's, nor a one-shot confirmation
 * tenant's), the texts keys are made of, and that the store gives a name
 * its number once and for good. */
#include "tests/unit/unit.h"

#include <stdint.h>
#include <string.h>

#include "daemon/store.h"
#include "daemon/tenant.h"

static int valid(const char *s)
{
	return tenant_name_valid(s, strlen(s));
}

TEST(tenant_names)
{
	char n32[33], n33[34];

	memset(n32, 'a', 32);
	n32[32] = '\0';
	memset(n33, 'b', 33);
	n33[33] = '\0';
	CHECK(valid("a") && valid("pod-7") && valid("0") && valid("--") && valid(n32));
	CHECK(!valid("") && !valid(n33) && !valid("-"));
	CHECK(!valid("A") && !valid("a/b") && !valid("..") && !valid(".") && !valid("../x"));
	CHECK(!valid("a.b") && !valid("a_b") && !valid("a b") && !valid("a,b") && !valid("\xc3\xa9"));
	/* A NUL inside the bytes given is no name either. */
	CHECK(!tenant_name_valid("a\0b", 3));
}

TEST(tenant_numbers_never_meet)
{
	struct tenant one = { .id = 1, .name = "one" }, two = { .id = 2, .name = "two" },
		      top = { .id = TENANT_ID_MAX, .name = "top" };
	/* What tenant 0 keys on lies in [-2^32 - 1, 2^32): uids, everyone
	 * (-1), groups (-2 - gid). */
	const int64_t lo = -2 - (int64_t)UINT32_MAX, hi = (int64_t)UINT32_MAX;

	CHECK(tenant_number(&tenant_main, 1000) == 1000);
	CHECK(tenant_number(&tenant_main, lo) == lo);
	CHECK(tenant_number(&one, lo) > hi);
	CHECK(tenant_number(&one, hi) < tenant_number(&two, lo));
	CHECK(tenant_number(&top, hi) < ((int64_t)1 << 62));    /* confirm.c's one-shots */
	CHECK(tenant_number(&one, -1) != tenant_number(&two, -1));
}

TEST(tenant_texts)
{
	struct tenant x = { .id = 3, .name = "x" };
	char out[64];

	tenant_qualify(&tenant_main, "u0", out, sizeof out);
	CHECK(!strcmp(out, "u0"));
	tenant_qualify(&x, "u0", out, sizeof out);
	CHECK(!strcmp(out, "x/u0"));
}

TEST(tenant_ids_from_the_store)
{
	struct buf err = BUF_INIT;
	int64_t a = 0, b = 0, a2 = 0;
	struct store *s = store_open(unit_tmpdir(), 0, &err);

	REQUIRE(s);
	CHECK(store_tenant_id(s, "a", &a) == 0 && a >= 1);
	CHECK(store_tenant_id(s, "b", &b) == 0 && b >= 1 && b != a);
	CHECK(store_tenant_id(s, "a", &a2) == 0 && a2 == a);
	store_close(s);
	s = store_open(unit_tmpdir(), 0, &err);
	REQUIRE(s);
	CHECK(store_tenant_id(s, "b", &a2) == 0 && a2 == b);
	store_close(s);
	buf_free(&err);
}
