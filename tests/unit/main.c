/* SPDX-License-Identifier: Apache-2.0 */
/* unit: runner for the tests registered with TEST(); see unit.h. */
#include "tests/unit/unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct unit_test *tests;
static int failures_in_test;
static char tmpdir[256];

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void unit_register(struct unit_test *t)
{
	t->next = tests;
	tests = t;
}

void unit_fail(const char *file, int line, const char *expr)
{
	fprintf(stderr, "  %s:%d: check failed: %s\n", file, line, expr);
	failures_in_test++;
}

const char *unit_tmpdir(void)
{
	return tmpdir;
}

int main(int argc, char **argv)
{
	int passed = 0, failed = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);      /* a check's failure on stderr lands beside its test */

	/* Registration order is reversed; run in declaration order. */
	struct unit_test *rev = NULL;
	while (tests) {
		struct unit_test *n = tests->next;
		tests->next = rev;
		rev = tests;
		tests = n;
	}
	for (struct unit_test *t = rev; t; t = t->next) {
		if (argc > 1 && !strstr(t->name, argv[1]))
			continue;
		snprintf(tmpdir, sizeof tmpdir, "/tmp/ptxcache-unit-XXXXXX");
		if (!mkdtemp(tmpdir)) {
			perror("mkdtemp");
			return 2;
		}
		failures_in_test = 0;
		double t0 = now_s();
		t->fn();
		double took = now_s() - t0;
		char cmd[300];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "  cannot remove '%s'\n", tmpdir);
		if (failures_in_test) {
			printf("FAIL %s (%.1f s)\n", t->name, took);
			failed++;
		} else {
			printf("ok   %s (%.1f s)\n", t->name, took);
			passed++;
		}
	}
	printf("unit: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
