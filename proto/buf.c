/* SPDX-License-Identifier: Apache-2.0 */
/* buf: growable byte buffer; see buf.h for the invariants. */
#include "proto/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int buf_reserve(struct buf *b, size_t extra)
{
	if (extra > SIZE_MAX / 2 - b->len)
		return -1;
	size_t need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p)
		return -1;
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_read_fd(struct buf *b, int fd, size_t max)
{
	for (;;) {
		if (max && b->len >= max) {
			errno = EFBIG;
			return -1;
		}
		if (buf_reserve(b, 65536) < 0) {
			errno = ENOMEM;
			return -1;
		}
		b->data[b->len] = '\0';        /* also when nothing comes */
		ssize_t n = read(fd, b->data + b->len, b->cap - b->len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -1 : 0;
		b->len += (size_t)n;
		b->data[b->len] = '\0';
	}
}

int buf_write_fd(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	if (buf_reserve(b, n) < 0)
		return -1;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	char small[256];

	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	if ((size_t)n < sizeof small)
		return buf_append(b, small, (size_t)n);
	if (buf_reserve(b, (size_t)n) < 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void buf_consume(struct buf *b, size_t n)
{
	if (n >= b->len) {
		buf_reset(b);
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	b->data[b->len] = '\0';
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

char *buf_detach(struct buf *b, size_t *len)
{
	if (!b->data && buf_reserve(b, 0) < 0)
		return NULL;
	b->data[b->len] = '\0';
	char *p = b->data;
	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

/* Length of a valid UTF-8 sequence starting at p (at most n bytes), or 0 if
 * the bytes there are not one (overlong, surrogate, out of range, cut). */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0];
	size_t len;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

int buf_json_str(struct buf *b, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run = 0;

	if (buf_reserve(b, n + 2) < 0 || buf_append(b, "\"", 1) < 0)
		return -1;
	while (i < n) {
		unsigned char c = p[i];
		size_t l = (c >= 0x20 && c != '"' && c != '\\') ? utf8_seq(p + i, n - i) : 0;
		if (l) {
			i += l;
			continue;
		}
		/* Flush the plain run before this byte, then escape it. */
		if (buf_append(b, s + run, i - run) < 0)
			return -1;
		char esc[8];
		const char *e = esc;
		switch (c) {
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		default:
			snprintf(esc, sizeof esc, "\\u%04x", c);
		}
		if (buf_puts(b, e) < 0)
			return -1;
		run = ++i;
	}
	if (buf_append(b, s + run, n - run) < 0 || buf_append(b, "\"", 1) < 0)
		return -1;
	return 0;
}
