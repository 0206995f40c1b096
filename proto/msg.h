/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msg: frame bodies, one msgpack map each, for daemon, workers and clients.
 *
 * Reading: msg_parse() first walks the raw bytes with our own bounds
 * (nesting depth, element counts no larger than the bytes that remain,
 * exactly one object, no trailing bytes, no ext types) and only then hands
 * them to msgpack-c, whose unpacker would otherwise allocate whatever an
 * array header declares. Strings and binaries of a parsed msg point into the
 * caller's bytes, which must outlive it.
 *
 * Writing: a msg_writer appends one frame (header and map) to a buf. Errors
 * (out of memory) are sticky and reported once by msg_end(). A frame's
 * last field may be a blob the writer does not copy (msg_put_bin_tail()):
 * whoever sends the frame sends its bytes after the buf's, as a second
 * iovec, so a kernel's IR or PTX crosses from its own memory to the socket.
 */
#ifndef PTXCACHE_MSG_H
#define PTXCACHE_MSG_H

#include <stdint.h>
#include <msgpack.h>

#include "proto/buf.h"

struct msg_limits {
	unsigned max_depth;     /* containers nested deeper are refused */
	uint32_t max_elems;     /* total elements over all containers */
};

/* Requests nest at most a map of arrays of strings. */
#define MSG_LIMITS_DEFAULT ((struct msg_limits){ .max_depth = 4, .max_elems = 65536 })

/* 0 if p[0..n) is exactly one well-formed msgpack object within lim, else
 * -1 with a message in err (may be NULL). */
int msg_validate(const void *p, size_t n, const struct msg_limits *lim,
		 struct buf *err);

struct msg {
	msgpack_unpacked up;
	const msgpack_object_map *map;
};

/* Validate and unpack a body whose top level must be a map. Returns 0, or
 * -1 with a message in err; m must be released with msg_free() either way. */
int msg_parse(struct msg *m, const void *p, size_t n,
	      const struct msg_limits *lim, struct buf *err);
void msg_free(struct msg *m);

/*
 * A body whose last field is a bin too large to want whole in memory (a
 * large artifact put's value: the daemon takes its bytes as they arrive,
 * conn.c): the fields before it, parsed as a message of their own, and
 * the bin's length. Senders put such a field last, as a bin32
 * (msg_put_bin_tail() does).
 */
struct msg_tail {
	size_t key_at;          /* the last field's key: its offset in the body */
	size_t head_len;        /* the body's bytes before the bin's own */
	uint32_t len;           /* the bin's length: the rest of the body */
};

/* Whether a body of body_len bytes, of which p[0..n) has arrived, is a map
 * whose last field is a str key and a bin32 that runs exactly to the
 * body's end, the fields before it within lim: 1 with *t; 0 if more of
 * the body must arrive to tell; -1 if it is not (or is malformed). */
int msg_tail_find(const void *p, size_t n, size_t body_len,
		  const struct msg_limits *lim, struct msg_tail *t);

/* msg_parse() of the fields before t's last one (a copy of them in copy,
 * which must outlive m), and that field's name: *key, *key_len, pointing
 * into p. 0, or -1 with a message in err; m must be released with
 * msg_free() either way. */
int msg_parse_head(struct msg *m, const void *p, const struct msg_tail *t,
		   const struct msg_limits *lim, struct buf *copy, const char **key,
		   size_t *key_len, struct buf *err);

/* The value under key, or NULL. */
const msgpack_object *msg_get(const struct msg *m, const char *key);
/* A str or bin value: 1 and *s, *len set; 0 if absent or nil; -1 if another
 * type. *s is not NUL-terminated. */
int msg_bytes(const struct msg *m, const char *key, const char **s, size_t *len);
/* An integer value: 1, 0 if absent or nil, -1 if another type. */
int msg_int(const struct msg *m, const char *key, int64_t *v);
/* A boolean value (integers count: non-zero is true): 1, 0, -1 as above. */
int msg_bool(const struct msg *m, const char *key, int *v);
/* A str value copied into a NUL-terminated malloc'd string (caller frees):
 * 1, 0 if absent or nil (*out NULL), -1 if another type or it holds a NUL. */
int msg_strdup(const struct msg *m, const char *key, char **out);

struct msg_writer {
	msgpack_packer pk;
	struct buf *out;
	size_t frame_at;        /* offset of the frame header in out */
	uint32_t fields;        /* map entries written so far */
	int failed;
	const void *tail;       /* msg_put_bin_tail()'s bytes, sent after out's */
	size_t tail_len;
};

void msg_begin(struct msg_writer *w, struct buf *out, uint8_t type);
void msg_put_str(struct msg_writer *w, const char *key, const char *s);
void msg_put_strn(struct msg_writer *w, const char *key, const char *s, size_t n);
void msg_put_bin(struct msg_writer *w, const char *key, const void *p, size_t n);
void msg_put_int(struct msg_writer *w, const char *key, int64_t v);
void msg_put_bool(struct msg_writer *w, const char *key, int v);
/* An array of n strings. */
void msg_put_strv(struct msg_writer *w, const char *key, const char *const *v,
		  size_t n);
/* The frame's last field: a bin of p[0..n), counted in the frame's length
 * but not copied into out; w->tail and w->tail_len say what to send after
 * out's bytes, and p must live until it is sent. No field may follow. */
void msg_put_bin_tail(struct msg_writer *w, const char *key, const void *p, size_t n);
/* A value that is itself a msgpack-encoded object (copied verbatim). */
void msg_put_raw(struct msg_writer *w, const char *key, const void *p, size_t n);
/* Finish the frame: 0, or -1 if any step failed (the frame is then removed
 * from out again). */
int msg_end(struct msg_writer *w);

#endif
