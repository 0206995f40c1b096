/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_flat: the components format read back. key.c writes an entry's
 * components (what its key was derived from) as a flat JSON object of
 * strings and scalars; the store's explain and show read them with this:
 * parse into fields that point into the text, find and compare fields,
 * count how many differ. Nothing is unescaped or copied, so two texts
 * key.c wrote compare equal field by field exactly when their raw forms do.
 */
#ifndef PTXCACHE_STORE_FLAT_H
#define PTXCACHE_STORE_FLAT_H

#include <stddef.h>

#include "proto/buf.h"

/* One field of a flat JSON object, pointing into the text: the name and,
 * for a string value, its contents as raw JSON (escapes kept, no quotes);
 * other scalars (numbers, true, false, null) raw, with is_str 0. Two texts
 * key.c wrote compare equal field by field exactly when their raw forms do. */
struct flat_field {
	const char *name;
	size_t name_len;
	const char *val;
	size_t val_len;
	int is_str;
};

#define FLAT_MAX_FIELDS 64

/* Parse a flat object into f[0..max). Returns the field count, or -1 if the
 * text is not such an object (nested values are not part of the format). */
int flat_parse(const char *text, struct flat_field *f, int max);

/* The field of f[0..n) named as like is, or NULL. */
const struct flat_field *flat_find(const struct flat_field *f, int n,
				   const struct flat_field *like);

/* Whether two fields hold the same value (same type, same raw text). */
int flat_eq_value(const struct flat_field *a, const struct flat_field *b);

/* Fields that differ between a and b, counting names present in one only. */
int flat_diff(const struct flat_field *a, int na, const struct flat_field *b, int nb);

/* Append f's value as JSON ("null" for no field). 0, or -1 out of memory. */
int flat_value_json(struct buf *b, const struct flat_field *f);

#endif
