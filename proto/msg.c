/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msg: bounded msgpack validation, then msgpack-c for unpacking and packing.
 * See msg.h. The validator is the only code that reads raw bytes from a
 * peer before they are trusted; keep it small and obviously bounded.
 */
#include "proto/msg.h"

#include <string.h>

#include "proto/frame.h"

/* Length of a big-endian field of w bytes at p. */
static uint64_t be(const unsigned char *p, unsigned w)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < w; i++)
		v = v << 8 | p[i];
	return v;
}

/* Walk `objects` whole objects from *pp, not past end, within lim (elems
 * counts the elements met, across calls): 0 with *pp past them; -2 where
 * they run past end (truncated: more bytes may make them whole), or -1 for
 * what no more bytes would mend; *why says which. */
static int walk(const unsigned char **pp, const unsigned char *end, uint64_t objects,
		const struct msg_limits *lim, uint64_t *elems, const char **why)
{
	const unsigned char *p = *pp;
	/* pending[d]: objects still to read at depth d. */
	uint64_t pending[16];
	unsigned depth = 0, max_depth = lim->max_depth;

	if (max_depth >= sizeof pending / sizeof pending[0])
		max_depth = sizeof pending / sizeof pending[0] - 1;
	pending[0] = objects;
	while (pending[depth] > 0 || depth > 0) {
		if (pending[depth] == 0) {
			depth--;
			continue;
		}
		pending[depth]--;
		if (p >= end) {
			*why = "truncated message";
			return -2;
		}
		unsigned c = *p++;
		uint64_t skip = 0, count = 0;
		unsigned lenw = 0;
		int container = 0;

		if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
			continue;
		} else if (c >= 0x80 && c <= 0x8f) {
			count = (uint64_t)(c & 0x0f) * 2;
			container = 1;
		} else if (c >= 0x90 && c <= 0x9f) {
			count = c & 0x0f;
			container = 1;
		} else if (c >= 0xa0 && c <= 0xbf) {
			skip = c & 0x1f;
		} else {
			switch (c) {
			case 0xc4: case 0xd9: lenw = 1; break;          /* bin8, str8 */
			case 0xc5: case 0xda: lenw = 2; break;          /* bin16, str16 */
			case 0xc6: case 0xdb: lenw = 4; break;          /* bin32, str32 */
			case 0xcc: case 0xd0: skip = 1; break;
			case 0xcd: case 0xd1: skip = 2; break;
			case 0xce: case 0xd2: case 0xca: skip = 4; break;
			case 0xcf: case 0xd3: case 0xcb: skip = 8; break;
			case 0xdc: case 0xdd: case 0xde: case 0xdf:
				lenw = (c == 0xdc || c == 0xde) ? 2 : 4;
				if ((size_t)(end - p) < lenw) {
					*why = "truncated message";
					return -2;
				}
				count = be(p, lenw) * (c >= 0xde ? 2 : 1);
				p += lenw;
				lenw = 0;
				container = 1;
				break;
			default:
				*why = "unsupported msgpack type (ext or reserved)";
				return -1;
			}
		}
		if (lenw) {
			if ((size_t)(end - p) < lenw) {
				*why = "truncated message";
				return -2;
			}
			skip = be(p, lenw);
			p += lenw;
		}
		if (skip > (uint64_t)(end - p)) {
			*why = "length exceeds the message";
			return -2;
		}
		p += skip;
		if (!container)
			continue;
		/* Every element takes at least one byte. */
		if (count > (uint64_t)(end - p)) {
			*why = "element count exceeds the message";
			return -2;
		}
		*elems += count;
		if (*elems > lim->max_elems) {
			*why = "too many elements";
			return -1;
		}
		if (count == 0)
			continue;
		if (depth + 1 > max_depth) {
			*why = "nesting too deep";
			return -1;
		}
		pending[++depth] = count;
	}
	*pp = p;
	return 0;
}

int msg_validate(const void *data, size_t n, const struct msg_limits *lim,
		 struct buf *err)
{
	const unsigned char *p = data, *end = p + n;
	uint64_t elems = 0;
	const char *why = NULL;

	if (walk(&p, end, 1, lim, &elems, &why) < 0)
		goto bad;
	if (p != end) {
		why = "trailing bytes after the message";
		goto bad;
	}
	return 0;
bad:
	if (err)
		buf_printf(err, "malformed message: %s", why);
	return -1;
}

/* A map's header at p (n bytes there): its width (1, 3 or 5) and field
 * count, or 0 if it is not one (or not all there). */
static unsigned map_head(const unsigned char *p, size_t n, uint64_t *fields)
{
	if (n >= 1 && p[0] >= 0x80 && p[0] <= 0x8f) {
		*fields = p[0] & 0x0f;
		return 1;
	}
	if (n >= 3 && p[0] == 0xde) {
		*fields = be(p + 1, 2);
		return 3;
	}
	if (n >= 5 && p[0] == 0xdf) {
		*fields = be(p + 1, 4);
		return 5;
	}
	return 0;
}

int msg_tail_find(const void *data, size_t n, size_t body_len, const struct msg_limits *lim,
		  struct msg_tail *t)
{
	const unsigned char *start = data, *p = start, *end = start + n;
	uint64_t fields, elems;
	const char *why;
	unsigned w;

	if (n > body_len)
		return -1;
	if (n < 5 && n < body_len)
		return 0;
	if (!(w = map_head(p, n, &fields)) || fields == 0)
		return -1;
	elems = fields * 2;
	if (elems > lim->max_elems || lim->max_depth < 1)
		return -1;
	p += w;
	/* The fields before the last, then the last one's key (a str), one
	 * level below the map. */
	struct msg_limits in = *lim;
	in.max_depth = lim->max_depth - 1;
	int r = walk(&p, end, (fields - 1) * 2, &in, &elems, &why);
	if (r == 0) {
		t->key_at = (size_t)(p - start);
		if (p < end && !((*p >= 0xa0 && *p <= 0xbf) || *p == 0xd9 || *p == 0xda ||
				 *p == 0xdb))
			return -1;
		r = walk(&p, end, 1, &in, &elems, &why);
	}
	if (r == -2)
		return n < body_len ? 0 : -1;
	if (r < 0)
		return -1;
	/* Its value: a bin32 whose bytes are the rest of the body. */
	if ((size_t)(end - p) < 5)
		return n < body_len ? 0 : -1;
	if (p[0] != 0xc6)
		return -1;
	t->len = (uint32_t)be(p + 1, 4);
	t->head_len = (size_t)(p + 5 - start);
	if (t->head_len + t->len != body_len)
		return -1;
	return 1;
}

int msg_parse_head(struct msg *m, const void *data, const struct msg_tail *t,
		   const struct msg_limits *lim, struct buf *copy, const char **key,
		   size_t *key_len, struct buf *err)
{
	const unsigned char *p = data, *k = p + t->key_at;
	uint64_t fields;
	unsigned w = map_head(p, t->key_at, &fields);

	msgpack_unpacked_init(&m->up);
	m->map = NULL;
	buf_reset(copy);
	if (!w || fields == 0) {
		if (err)
			buf_puts(err, "malformed message: not a map");
		return -1;
	}
	/* The map's header, one field fewer in the same width, then the
	 * fields before the last. */
	unsigned char h[5] = { p[0] };
	if (w == 1)
		h[0] = (unsigned char)(0x80 | (fields - 1));
	for (unsigned i = 1; i < w; i++)
		h[i] = (unsigned char)((fields - 1) >> (8 * (w - 1 - i)));
	if (buf_append(copy, h, w) < 0 || buf_append(copy, p + w, t->key_at - w) < 0) {
		if (err)
			buf_puts(err, "out of memory");
		return -1;
	}
	/* The last field's name: msg_tail_find() walked it as a str. */
	if (k[0] >= 0xa0 && k[0] <= 0xbf) {
		*key_len = k[0] & 0x1f;
		*key = (const char *)k + 1;
	} else {
		unsigned lw = k[0] == 0xd9 ? 1 : k[0] == 0xda ? 2 : 4;
		*key_len = (size_t)be(k + 1, lw);
		*key = (const char *)k + 1 + lw;
	}
	return msg_parse(m, copy->data, copy->len, lim, err);
}

int msg_parse(struct msg *m, const void *p, size_t n,
	      const struct msg_limits *lim, struct buf *err)
{
	size_t off = 0;

	msgpack_unpacked_init(&m->up);
	m->map = NULL;
	if (msg_validate(p, n, lim, err) < 0)
		return -1;
	if (msgpack_unpack_next(&m->up, p, n, &off) != MSGPACK_UNPACK_SUCCESS) {
		if (err)
			buf_puts(err, "malformed message: cannot unpack");
		return -1;
	}
	if (m->up.data.type != MSGPACK_OBJECT_MAP) {
		if (err)
			buf_puts(err, "malformed message: body is not a map");
		return -1;
	}
	m->map = &m->up.data.via.map;
	return 0;
}

void msg_free(struct msg *m)
{
	msgpack_unpacked_destroy(&m->up);
	m->map = NULL;
}

const msgpack_object *msg_get(const struct msg *m, const char *key)
{
	size_t klen = strlen(key);

	if (!m->map)
		return NULL;
	for (uint32_t i = 0; i < m->map->size; i++) {
		const msgpack_object *k = &m->map->ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
		    (klen == 0 || memcmp(k->via.str.ptr, key, klen) == 0))
			return &m->map->ptr[i].val;
	}
	return NULL;
}

int msg_bytes(const struct msg *m, const char *key, const char **s, size_t *len)
{
	const msgpack_object *o = msg_get(m, key);

	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	/* msgpack-c leaves the pointer of an empty str or bin NULL; callers
	 * get "" instead, so that memcpy(dst, *s, 0) and the like are defined. */
	if (o->type == MSGPACK_OBJECT_STR) {
		*s = o->via.str.size ? o->via.str.ptr : "";
		*len = o->via.str.size;
		return 1;
	}
	if (o->type == MSGPACK_OBJECT_BIN) {
		*s = o->via.bin.size ? o->via.bin.ptr : "";
		*len = o->via.bin.size;
		return 1;
	}
	return -1;
}

int msg_int(const struct msg *m, const char *key, int64_t *v)
{
	const msgpack_object *o = msg_get(m, key);

	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		if (o->via.u64 > INT64_MAX)
			return -1;
		*v = (int64_t)o->via.u64;
		return 1;
	}
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*v = o->via.i64;
		return 1;
	}
	return -1;
}

int msg_bool(const struct msg *m, const char *key, int *v)
{
	const msgpack_object *o = msg_get(m, key);

	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (o->type == MSGPACK_OBJECT_BOOLEAN) {
		*v = o->via.boolean;
		return 1;
	}
	int64_t i;
	int r = msg_int(m, key, &i);
	if (r == 1)
		*v = i != 0;
	return r;
}

int msg_strdup(const struct msg *m, const char *key, char **out)
{
	const msgpack_object *o = msg_get(m, key);

	*out = NULL;
	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (o->type != MSGPACK_OBJECT_STR ||
	    (o->via.str.size && memchr(o->via.str.ptr, '\0', o->via.str.size)))
		return -1;
	*out = strndup(o->via.str.size ? o->via.str.ptr : "", o->via.str.size);
	return *out ? 1 : -1;
}

/* msgpack-c's packer writes through this callback into our buf. */
static int write_cb(void *data, const char *p, size_t n)
{
	struct msg_writer *w = data;

	if (buf_append(w->out, p, n) < 0) {
		w->failed = 1;
		return -1;
	}
	return 0;
}

void msg_begin(struct msg_writer *w, struct buf *out, uint8_t type)
{
	/* A map32 header whose count is patched by msg_end(), so fields can
	 * be optional without counting them first. */
	static const unsigned char map32[5] = { 0xdf, 0, 0, 0, 0 };

	w->out = out;
	w->fields = 0;
	w->failed = 0;
	w->tail = NULL;
	w->tail_len = 0;
	w->frame_at = frame_start(out, type);
	msgpack_packer_init(&w->pk, w, write_cb);
	if (out->len != w->frame_at + FRAME_HDR_LEN ||
	    buf_append(out, map32, sizeof map32) < 0)
		w->failed = 1;
}

static void key(struct msg_writer *w, const char *k)
{
	size_t n = strlen(k);

	if (w->tail)            /* nothing may follow the tail */
		w->failed = 1;
	w->fields++;
	if (msgpack_pack_str(&w->pk, n) < 0 || msgpack_pack_str_body(&w->pk, k, n) < 0)
		w->failed = 1;
}

void msg_put_str(struct msg_writer *w, const char *k, const char *s)
{
	if (!s) {
		key(w, k);
		msgpack_pack_nil(&w->pk);
		return;
	}
	msg_put_strn(w, k, s, strlen(s));
}

void msg_put_strn(struct msg_writer *w, const char *k, const char *s, size_t n)
{
	key(w, k);
	if (msgpack_pack_str(&w->pk, n) < 0 || msgpack_pack_str_body(&w->pk, s, n) < 0)
		w->failed = 1;
}

void msg_put_bin(struct msg_writer *w, const char *k, const void *p, size_t n)
{
	key(w, k);
	if (msgpack_pack_bin(&w->pk, n) < 0 || msgpack_pack_bin_body(&w->pk, p, n) < 0)
		w->failed = 1;
}

void msg_put_bin_tail(struct msg_writer *w, const char *k, const void *p, size_t n)
{
	key(w, k);
	if (msgpack_pack_bin(&w->pk, n) < 0)
		w->failed = 1;
	w->tail = p;
	w->tail_len = n;
}

void msg_put_int(struct msg_writer *w, const char *k, int64_t v)
{
	key(w, k);
	if (msgpack_pack_int64(&w->pk, v) < 0)
		w->failed = 1;
}

void msg_put_bool(struct msg_writer *w, const char *k, int v)
{
	key(w, k);
	if ((v ? msgpack_pack_true(&w->pk) : msgpack_pack_false(&w->pk)) < 0)
		w->failed = 1;
}

void msg_put_strv(struct msg_writer *w, const char *k, const char *const *v, size_t n)
{
	key(w, k);
	if (msgpack_pack_array(&w->pk, n) < 0)
		w->failed = 1;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(v[i]);
		if (msgpack_pack_str(&w->pk, l) < 0 ||
		    msgpack_pack_str_body(&w->pk, v[i], l) < 0)
			w->failed = 1;
	}
}

void msg_put_raw(struct msg_writer *w, const char *k, const void *p, size_t n)
{
	key(w, k);
	if (buf_append(w->out, p, n) < 0)
		w->failed = 1;
}

int msg_end(struct msg_writer *w)
{
	if (!w->failed) {
		unsigned char *c = (unsigned char *)w->out->data + w->frame_at +
				   FRAME_HDR_LEN + 1;
		c[0] = (unsigned char)(w->fields >> 24);
		c[1] = (unsigned char)(w->fields >> 16);
		c[2] = (unsigned char)(w->fields >> 8);
		c[3] = (unsigned char)w->fields;
		if (frame_finish(w->out, w->frame_at, w->tail_len) == 0)
			return 0;
	}
	/* Drop the partial frame so the buffer holds only whole frames. */
	w->tail = NULL;
	w->tail_len = 0;
	if (w->out->len > w->frame_at) {
		w->out->len = w->frame_at;
		if (w->out->data)
			w->out->data[w->out->len] = '\0';
	}
	return -1;
}
