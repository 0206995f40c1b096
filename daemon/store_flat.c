/* SPDX-License-Identifier: Apache-2.0 */
/* store_flat: see store_flat.h. */
#include "daemon/store_flat.h"

#include <string.h>

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Scan a JSON string at p (at its opening quote); its contents go to *s,
 * *n. Returns the position after the closing quote, or NULL if malformed. */
static const char *scan_str(const char *p, const char **s, size_t *n)
{
	if (*p != '"')
		return NULL;
	const char *start = ++p;
	for (;;) {
		unsigned char c = (unsigned char)*p;
		if (c == '"')
			break;
		if (c < 0x20)
			return NULL; /* includes the NUL at the end of the text */
		if (c == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!is_hex(p[i]))
						return NULL;
				p += 4;
			} else if (!*p || !strchr("\"\\/bfnrt", *p)) {
				return NULL;
			}
		}
		p++;
	}
	*s = start;
	*n = (size_t)(p - start);
	return p + 1;
}

int flat_parse(const char *text, struct flat_field *f, int max)
{
	const char *p = skip_ws(text);
	int n = 0;

	if (*p++ != '{')
		return -1;
	p = skip_ws(p);
	if (*p == '}')
		return *skip_ws(p + 1) ? -1 : 0;
	for (;;) {
		if (n == max)
			return -1;
		p = scan_str(skip_ws(p), &f[n].name, &f[n].name_len);
		if (!p)
			return -1;
		p = skip_ws(p);
		if (*p++ != ':')
			return -1;
		p = skip_ws(p);
		if (*p == '"') {
			p = scan_str(p, &f[n].val, &f[n].val_len);
			if (!p)
				return -1;
			f[n].is_str = 1;
		} else {
			const char *v = p;
			while (*p && strchr("+-.0123456789abcdefghijklmnopqrstuvwxyzE", *p))
				p++;
			if (p == v)
				return -1;
			f[n].val = v;
			f[n].val_len = (size_t)(p - v);
			f[n].is_str = 0;
		}
		n++;
		p = skip_ws(p);
		if (*p == ',') {
			p++;
			continue;
		}
		if (*p++ != '}')
			return -1;
		return *skip_ws(p) ? -1 : n;
	}
}

static int flat_eq_name(const struct flat_field *a, const struct flat_field *b)
{
	return a->name_len == b->name_len && !memcmp(a->name, b->name, a->name_len);
}

int flat_eq_value(const struct flat_field *a, const struct flat_field *b)
{
	return a->is_str == b->is_str && a->val_len == b->val_len &&
	       !memcmp(a->val, b->val, a->val_len);
}

const struct flat_field *flat_find(const struct flat_field *f, int n,
				   const struct flat_field *like)
{
	for (int i = 0; i < n; i++)
		if (flat_eq_name(&f[i], like))
			return &f[i];
	return NULL;
}

int flat_diff(const struct flat_field *a, int na, const struct flat_field *b, int nb)
{
	int d = 0;

	for (int i = 0; i < na; i++) {
		const struct flat_field *o = flat_find(b, nb, &a[i]);
		if (!o || !flat_eq_value(&a[i], o))
			d++;
	}
	for (int i = 0; i < nb; i++)
		if (!flat_find(a, na, &b[i]))
			d++;
	return d;
}

int flat_value_json(struct buf *b, const struct flat_field *f)
{
	if (!f)
		return buf_puts(b, "null");
	if (!f->is_str)
		return buf_append(b, f->val, f->val_len);
	if (buf_append(b, "\"", 1) < 0 || buf_append(b, f->val, f->val_len) < 0)
		return -1;
	return buf_append(b, "\"", 1);
}
