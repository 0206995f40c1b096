/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buf: the one growable byte buffer of ptxcache, shared by daemon and client.
 *
 * Invariants: data is NULL when cap is 0; otherwise data holds cap bytes, of
 * which the first len are valid, and data[len] is always a NUL byte, so the
 * contents can be used as a C string when they hold text. A buf owns its
 * data; buf_free() releases it and leaves an empty buf (and accepts a buf
 * that was never used). Functions that grow a buf return 0 on success and -1
 * when memory runs out, leaving the buf as it was.
 */
#ifndef PTXCACHE_BUF_H
#define PTXCACHE_BUF_H

#include <stddef.h>
#include <stdint.h>

struct buf {
	char *data;
	size_t len;
	size_t cap;
};

#define BUF_INIT { NULL, 0, 0 }

/* Ensure room for extra more bytes (plus the NUL). */
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Append everything fd gives until end of file, at most max bytes in b
 * (0: no limit); b->data is set and NUL-terminated even if fd gave nothing.
 * 0, or -1 with errno set (EFBIG past max). fd stays open. */
int buf_read_fd(struct buf *b, int fd, size_t max);
/* Write p[0..n) to fd whole, going on after short writes and EINTR.
 * 0, or -1 with errno set. */
int buf_write_fd(int fd, const void *p, size_t n);
/* Drop the first n bytes (n <= len). */
void buf_consume(struct buf *b, size_t n);
void buf_reset(struct buf *b);
/* Append s[0..n) as a JSON string literal, quotes included: control
 * characters, quotes and backslashes escaped, and every byte that is not
 * part of valid UTF-8 written as \u00XX, so the result is always valid
 * JSON. */
int buf_json_str(struct buf *b, const char *s, size_t n);
void buf_free(struct buf *b);
/* Hand the data over to the caller (who frees it with free()); the buf is
 * left empty. Returns a valid NUL-terminated string even for an empty buf,
 * or NULL if memory runs out. */
char *buf_detach(struct buf *b, size_t *len);

#endif
