/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_flat: libFuzzer harness for daemon/store_flat.c, which reads back the
 * components JSON of every entry that show and explain look at: text out
 * of the database, which a damaged disk or another writer can make
 * anything.
 *
 * The input is the text (a NUL ends it early, as the column's text would).
 * Properties checked beyond "no crash, no sanitizer report":
 *  - every field lies within the text;
 *  - where the names are distinct, a parse equals itself (flat_diff 0), and
 *    writing its fields out again as JSON parses to the same fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/store_flat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void within(const char *text, size_t len, const char *p, size_t n)
{
	if (p < text || p + n > text + len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct flat_field f[FLAT_MAX_FIELDS], g[FLAT_MAX_FIELDS];
	struct buf again = BUF_INIT;
	char *text = malloc(size + 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	size_t len = strlen(text);
	int n = flat_parse(text, f, FLAT_MAX_FIELDS);
	int distinct = n >= 0;
	for (int i = 0; i < n; i++) {
		within(text, len, f[i].name, f[i].name_len);
		within(text, len, f[i].val, f[i].val_len);
		if (flat_find(f, i, &f[i]))
			distinct = 0;
	}
	if (distinct) {
		if (flat_diff(f, n, f, n) != 0)
			abort();
		buf_puts(&again, "{");
		for (int i = 0; i < n; i++) {
			buf_puts(&again, i ? ",\"" : "\"");
			buf_append(&again, f[i].name, f[i].name_len);
			buf_puts(&again, "\":");
			flat_value_json(&again, &f[i]);
		}
		buf_puts(&again, "}");
		int m = flat_parse(again.data, g, FLAT_MAX_FIELDS);
		if (m != n || flat_diff(f, n, g, m) != 0)
			abort();
	}
	buf_free(&again);
	free(text);
	return 0;
}
