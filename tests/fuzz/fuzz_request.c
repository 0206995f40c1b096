/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_request: libFuzzer harness for a request body, read the way the
 * daemon reads a compile (or any other) request.
 *
 * The input is one frame body. It goes through msg_parse() with the
 * daemon's limits; then every accessor is called on every field a request
 * handler reads (compile, cubin, ls/evict filters, show) and on every key
 * the body itself holds (so unexpected keys, duplicates and keys with NULs
 * are reached too), the 'options' and 'asm_args' arrays are walked as
 * compile.c and cubin_req.c walk them, and what was read is written back
 * with msg_writer and parsed again: the round trip must give the same
 * values.
 *
 * Properties (abort() on violation, so libFuzzer reports them):
 *  - accessors return -1, 0 or 1 only, and on 1 their out-values are sane
 *    (a msg_bytes() span lies inside the input; msg_strdup() gives a
 *    string of the field's length with no NUL);
 *  - a written frame always parses, and gives back what was put in.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every field a request handler of the master reads (daemon/compile.c,
 * cubin_req.c, manage.c, artifact.c). */
static const char *const fields[] = {
	"id", "input", "kind", "input_kind", "triple", "march", "cpu",
	"features", "pipeline", "opt", "emit", "strict", "options", "backend",
	"asm_args", "arch", "older_than", "min_bytes", "limit", "key",
	"max_size", "all", "ns", "value", "lease", "wait_ms", "namespace",
};

#define NFIELDS (sizeof fields / sizeof fields[0])

static void check_span(const uint8_t *data, size_t size, const char *p, size_t n)
{
	if (!p)
		abort();        /* msg_bytes() gives "" for an empty value */
	if (n == 0)
		return;
	if ((const uint8_t *)p < data || n > size ||
	    (const uint8_t *)p + n > data + size)
		abort();
}

/* Read one field every way a handler might; remember what msg_bytes()
 * and msg_int() gave, for the round trip. */
struct seen {
	int bytes_r, int_r;
	const char *s;
	size_t n;
	int64_t i;
};

static void read_field(const struct msg *m, const uint8_t *data, size_t size,
		       const char *name, struct seen *sv)
{
	const char *s = NULL;
	size_t n = 0;
	int64_t i = 0;
	int b = 0;
	char *str = NULL;

	sv->bytes_r = msg_bytes(m, name, &s, &n);
	if (sv->bytes_r < -1 || sv->bytes_r > 1)
		abort();
	if (sv->bytes_r == 1)
		check_span(data, size, s, n);
	sv->s = s;
	sv->n = n;
	sv->int_r = msg_int(m, name, &i);
	if (sv->int_r < -1 || sv->int_r > 1)
		abort();
	sv->i = i;
	int r = msg_bool(m, name, &b);
	if (r < -1 || r > 1 || (r == 1 && b != 0 && b != 1))
		abort();
	r = msg_strdup(m, name, &str);
	if (r == 1 && (!str || sv->bytes_r != 1 || strlen(str) != n ||
		       memcmp(str, s, n)))
		abort();
	if (r != 1 && str)
		abort();
	free(str);

	const msgpack_object *o = msg_get(m, name);
	if (o && o->type == MSGPACK_OBJECT_ARRAY) {
		/* As compile.c and cubin_req.c walk 'options' and 'asm_args'. */
		for (uint32_t k = 0; k < o->via.array.size; k++) {
			const msgpack_object *e = &o->via.array.ptr[k];
			/* msgpack-c's pointer is NULL when the size is 0. */
			if (e->type == MSGPACK_OBJECT_STR && e->via.str.size)
				check_span(data, size, e->via.str.ptr, e->via.str.size);
		}
	}
}

/* Write back what was read and parse it again: same values. */
static void round_trip(const struct seen *sv)
{
	struct buf out = BUF_INIT;
	struct msg_writer w;
	struct msg m;
	struct frame_hdr h;

	msg_begin(&w, &out, FRAME_COMPILE);
	for (size_t f = 0; f < NFIELDS; f++) {
		if (sv[f].bytes_r == 1)
			msg_put_bin(&w, fields[f], sv[f].s, sv[f].n);
		else if (sv[f].int_r == 1)
			msg_put_int(&w, fields[f], sv[f].i);
	}
	if (msg_end(&w) < 0)
		abort();
	if (frame_parse_hdr(out.data, out.len, UINT32_MAX, &h, NULL) != 1 ||
	    h.type != FRAME_COMPILE || h.len != out.len - FRAME_HDR_LEN ||
	    msg_parse(&m, out.data + FRAME_HDR_LEN, h.len, &MSG_LIMITS_DEFAULT, NULL) < 0)
		abort();
	for (size_t f = 0; f < NFIELDS; f++) {
		const char *s;
		size_t n;
		int64_t i;
		if (sv[f].bytes_r == 1 &&
		    (msg_bytes(&m, fields[f], &s, &n) != 1 || n != sv[f].n ||
		     memcmp(s, sv[f].s, n)))
			abort();
		if (sv[f].bytes_r != 1 && sv[f].int_r == 1 &&
		    (msg_int(&m, fields[f], &i) != 1 || i != sv[f].i))
			abort();
	}
	msg_free(&m);
	buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct msg m;
	struct seen sv[NFIELDS];
	struct buf err = BUF_INIT;

	if (msg_parse(&m, data, size, &MSG_LIMITS_DEFAULT, &err) < 0) {
		if (!err.data || !err.len)
			abort();
		msg_free(&m);
		buf_free(&err);
		return 0;
	}
	for (size_t f = 0; f < NFIELDS; f++)
		read_field(&m, data, size, fields[f], &sv[f]);

	/* The body's own keys, whatever they are (a key holding a NUL is
	 * looked up by its prefix, as a C string would be). */
	for (uint32_t k = 0; k < m.map->size && k < 256; k++) {
		const msgpack_object *key = &m.map->ptr[k].key;
		struct seen tmp;
		char name[64];
		if (key->type != MSGPACK_OBJECT_STR || key->via.str.size >= sizeof name)
			continue;
		if (key->via.str.size)
			memcpy(name, key->via.str.ptr, key->via.str.size);
		name[key->via.str.size] = '\0';
		read_field(&m, data, size, name, &tmp);
	}
	round_trip(sv);
	msg_free(&m);
	return 0;
}
