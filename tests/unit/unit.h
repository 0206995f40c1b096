/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unit: a minimal C unit-test harness. Each test is a function declared with
 * TEST(name); it registers itself at load time. CHECK() records a failure and
 * goes on; REQUIRE() records it and leaves the test. build/unit runs every
 * test (or those whose name contains argv[1]) and ends with the line
 * "unit: N passed, N failed".
 */
#ifndef PTXCACHE_UNIT_H
#define PTXCACHE_UNIT_H

#include <stdio.h>

struct unit_test {
	const char *name;
	void (*fn)(void);
	struct unit_test *next;
};

void unit_register(struct unit_test *t);
void unit_fail(const char *file, int line, const char *expr);
/* A fresh temporary directory for the running test (removed afterwards). */
const char *unit_tmpdir(void);

#define TEST(name)                                                        \
	static void test_##name(void);                                    \
	static struct unit_test unit_##name = { #name, test_##name, 0 };  \
	__attribute__((constructor)) static void reg_##name(void)         \
	{ unit_register(&unit_##name); }                                  \
	static void test_##name(void)

#define CHECK(e) do { if (!(e)) unit_fail(__FILE__, __LINE__, #e); } while (0)
#define REQUIRE(e) do { if (!(e)) { unit_fail(__FILE__, __LINE__, #e); return; } } while (0)

#endif
