/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for proto/: frame headers, the msgpack validator, the writer. */
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/msg.h"
#include "tests/unit/unit.h"

static int valid(const char *p, size_t n)
{
	return msg_validate(p, n, &MSG_LIMITS_DEFAULT, NULL) == 0;
}

TEST(frame_header_checks_magic_version_and_length)
{
	struct frame_hdr h;
	struct buf err = BUF_INIT;

	CHECK(frame_parse_hdr("PX\x01\x03\x00\x00\x00\x05", 8, 100, &h, NULL) == 1);
	CHECK(h.type == 3 && h.len == 5);
	CHECK(frame_parse_hdr("PX\x01", 3, 100, &h, NULL) == 0);
	CHECK(frame_parse_hdr("QX\x01\x03\x00\x00\x00\x05", 8, 100, &h, NULL) == -1);
	CHECK(frame_parse_hdr("PX\x02\x03\x00\x00\x00\x05", 8, 100, &h, &err) == -1);
	CHECK(strstr(err.data, "version 2") != NULL);
	buf_reset(&err);
	CHECK(frame_parse_hdr("PX\x01\x03\xff\xff\xff\xff", 8, 100, &h, &err) == -1);
	CHECK(strstr(err.data, "exceeds the limit") != NULL);
	buf_free(&err);
}

TEST(validator_accepts_well_formed_messages)
{
	CHECK(valid("\x80", 1));                                /* {} */
	CHECK(valid("\x81\xa1" "a\x01", 4));                    /* {"a":1} */
	CHECK(valid("\x81\xa1" "a\x92\xa1x\xc4\x01z", 9));      /* {"a":["x",bin]} */
	CHECK(valid("\xcb\0\0\0\0\0\0\0\0", 9));                /* float64 */
}

TEST(validator_refuses_bombs_truncation_and_trailing_bytes)
{
	CHECK(!valid("\xdd\xff\xff\xff\xff", 5));               /* 4G-element array */
	CHECK(!valid("\xdf\x00\x01\x00\x00\xa1" "a", 7));       /* 65536-entry map, 2 bytes */
	CHECK(!valid("\xc6\xff\xff\xff\xff" "abc", 8));         /* bin longer than data */
	CHECK(!valid("\xa5" "abc", 4));                         /* truncated str */
	CHECK(!valid("\x80\x00", 2));                           /* trailing byte */
	CHECK(!valid("", 0));
	CHECK(!valid("\xc1", 1));                               /* reserved */
	CHECK(!valid("\xd4\x01\x02", 3));                       /* ext type */
	char deep[64];
	memset(deep, 0x91, sizeof deep - 1);                    /* [[[[...]]]] */
	deep[sizeof deep - 1] = 0x00;
	CHECK(!valid(deep, sizeof deep));
	CHECK(valid(deep + sizeof deep - 5, 5));                /* 4 deep is fine */
}

TEST(validator_bounds_total_elements)
{
	struct msg_limits lim = { .max_depth = 4, .max_elems = 3 };
	CHECK(msg_validate("\x94\x01\x02\x03\x04", 5, &lim, NULL) == -1);
	CHECK(msg_validate("\x93\x01\x02\x03", 4, &lim, NULL) == 0);
}

TEST(writer_round_trips_through_parser)
{
	struct buf out = BUF_INIT;
	struct msg_writer w;
	struct msg m;
	struct frame_hdr h;
	const char *opts[] = { "-a", "-b=1" };

	msg_begin(&w, &out, FRAME_COMPILE);
	msg_put_int(&w, "id", 42);
	msg_put_bin(&w, "input", "\0\1\2", 3);
	msg_put_str(&w, "cpu", "sm_90a");
	msg_put_bool(&w, "emit", 0);
	msg_put_strv(&w, "options", opts, 2);
	REQUIRE(msg_end(&w) == 0);
	REQUIRE(frame_parse_hdr(out.data, out.len, 1000, &h, NULL) == 1);
	CHECK(h.type == FRAME_COMPILE && h.len == out.len - FRAME_HDR_LEN);
	REQUIRE(msg_parse(&m, out.data + FRAME_HDR_LEN, h.len, &MSG_LIMITS_DEFAULT, NULL) == 0);
	int64_t id;
	const char *p;
	size_t n;
	char *cpu;
	int emit = 1;
	CHECK(msg_int(&m, "id", &id) == 1 && id == 42);
	CHECK(msg_bytes(&m, "input", &p, &n) == 1 && n == 3 && p[2] == 2);
	CHECK(msg_strdup(&m, "cpu", &cpu) == 1 && strcmp(cpu, "sm_90a") == 0);
	CHECK(msg_bool(&m, "emit", &emit) == 1 && emit == 0);
	CHECK(msg_int(&m, "cpu", &id) == -1);                  /* wrong type */
	CHECK(msg_int(&m, "missing", &id) == 0);
	const msgpack_object *o = msg_get(&m, "options");
	CHECK(o && o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 2);
	free(cpu);
	msg_free(&m);
	buf_free(&out);
}

TEST(writer_tail_is_counted_sent_after_and_last)
{
	struct buf out = BUF_INIT, wire = BUF_INIT;
	struct msg_writer w;
	struct msg m;
	struct frame_hdr h;
	static const char input[] = "define void @k() { ret void }";

	msg_begin(&w, &out, FRAME_COMPILE);
	msg_put_int(&w, "id", 7);
	msg_put_bin_tail(&w, "input", input, sizeof input);
	REQUIRE(msg_end(&w) == 0);
	/* Not copied: the frame's length covers bytes the buf does not hold. */
	CHECK(w.tail == input && w.tail_len == sizeof input);
	REQUIRE(frame_parse_hdr(out.data, out.len, 1000, &h, NULL) == 1);
	CHECK(h.len == out.len - FRAME_HDR_LEN + sizeof input);
	/* The buf, then the tail, is one well-formed frame. */
	buf_append(&wire, out.data, out.len);
	buf_append(&wire, input, sizeof input);
	REQUIRE(msg_parse(&m, wire.data + FRAME_HDR_LEN, h.len, &MSG_LIMITS_DEFAULT, NULL) == 0);
	const char *p;
	size_t n;
	int64_t id;
	CHECK(msg_int(&m, "id", &id) == 1 && id == 7);
	CHECK(msg_bytes(&m, "input", &p, &n) == 1 && n == sizeof input && !memcmp(p, input, n));
	msg_free(&m);

	/* A field after the tail would land in the middle of it: refused,
	 * and the frame removed again. */
	buf_reset(&out);
	msg_begin(&w, &out, FRAME_COMPILE);
	msg_put_bin_tail(&w, "input", input, sizeof input);
	msg_put_int(&w, "id", 8);
	CHECK(msg_end(&w) == -1);
	CHECK(out.len == 0 && w.tail_len == 0);
	buf_free(&out);
	buf_free(&wire);
}

TEST(tail_of_a_large_last_bin_is_found_and_its_head_parsed)
{
	struct buf out = BUF_INIT, copy = BUF_INIT;
	struct msg_writer w;
	struct msg_tail t;
	struct msg m;
	const char *p, *name;
	size_t n, name_len;
	int64_t id;
	static char value[70000];       /* a bin32, as msgpack-c writes it */

	memset(value, 'v', sizeof value);
	msg_begin(&w, &out, FRAME_ARTIFACT_PUT);
	msg_put_int(&w, "id", 9);
	msg_put_str(&w, "ns", "t");
	msg_put_bin_tail(&w, "value", value, sizeof value);
	REQUIRE(msg_end(&w) == 0);
	const char *body = out.data + FRAME_HDR_LEN;
	size_t head = out.len - FRAME_HDR_LEN, body_len = head + sizeof value;
	/* Found once the head is there, whatever of the value is not yet. */
	CHECK(msg_tail_find(body, head - 1, body_len, &MSG_LIMITS_DEFAULT, &t) == 0);
	REQUIRE(msg_tail_find(body, head, body_len, &MSG_LIMITS_DEFAULT, &t) == 1);
	CHECK(t.head_len == head && t.len == sizeof value);
	/* A body whose length the bin does not end: not this shape. */
	CHECK(msg_tail_find(body, head, body_len + 1, &MSG_LIMITS_DEFAULT, &t) == -1);
	REQUIRE(msg_tail_find(body, head, body_len, &MSG_LIMITS_DEFAULT, &t) == 1);
	/* The fields before it, as a message of their own (map32: its count
	 * patched), and its name. */
	REQUIRE(msg_parse_head(&m, body, &t, &MSG_LIMITS_DEFAULT, &copy, &name, &name_len,
			       NULL) == 0);
	CHECK(name_len == 5 && !memcmp(name, "value", 5));
	CHECK(m.map->size == 2 && msg_int(&m, "id", &id) == 1 && id == 9);
	CHECK(msg_bytes(&m, "ns", &p, &n) == 1 && n == 1 && *p == 't');
	CHECK(msg_get(&m, "value") == NULL);
	msg_free(&m);

	/* A fixmap, as Python writes it: {"id": 1, "value": bin32 of 4}. */
	static const char fix[] = "\x82\xa2id\x01\xa5value\xc6\x00\x00\x00\x04" "abcd";
	REQUIRE(msg_tail_find(fix, sizeof fix - 1, sizeof fix - 1, &MSG_LIMITS_DEFAULT, &t) == 1);
	CHECK(t.head_len == sizeof fix - 1 - 4 && t.len == 4);
	REQUIRE(msg_parse_head(&m, fix, &t, &MSG_LIMITS_DEFAULT, &copy, &name, &name_len,
			       NULL) == 0);
	CHECK(m.map->size == 1 && msg_int(&m, "id", &id) == 1 && id == 1);
	msg_free(&m);
	/* The bin not last, a bin8 last, a non-str key: read whole. */
	static const char first[] = "\x82\xa5value\xc6\x00\x00\x00\x01" "a" "\xa2id\x01";
	CHECK(msg_tail_find(first, sizeof first - 1, sizeof first - 1, &MSG_LIMITS_DEFAULT,
			    &t) == -1);
	static const char bin8[] = "\x81\xa5value\xc4\x01" "a";
	CHECK(msg_tail_find(bin8, sizeof bin8 - 1, sizeof bin8 - 1, &MSG_LIMITS_DEFAULT,
			    &t) == -1);
	static const char intkey[] = "\x81\x05\xc6\x00\x00\x00\x01" "a";
	CHECK(msg_tail_find(intkey, sizeof intkey - 1, sizeof intkey - 1, &MSG_LIMITS_DEFAULT,
			    &t) == -1);
	/* A head that is malformed or too deep is refused, never walked past. */
	static const char ext[] = "\x82\xa2id\xd4\x01\x01\xa5value\xc6\x00\x00\x00\x01" "a";
	CHECK(msg_tail_find(ext, sizeof ext - 1, sizeof ext - 1, &MSG_LIMITS_DEFAULT, &t) == -1);
	struct msg_limits shallow = { .max_depth = 1, .max_elems = 100 };
	static const char deep[] = "\x82\xa1" "a\x91\x01\xa5value\xc6\x00\x00\x00\x01" "a";
	CHECK(msg_tail_find(deep, sizeof deep - 1, sizeof deep - 1, &shallow, &t) == -1);
	CHECK(msg_validate(deep, sizeof deep - 1, &shallow, NULL) == -1);
	buf_free(&copy);
	buf_free(&out);
}

TEST(parser_requires_a_map)
{
	struct msg m;
	struct buf err = BUF_INIT;
	CHECK(msg_parse(&m, "\x92\x01\x02", 3, &MSG_LIMITS_DEFAULT, &err) == -1);
	CHECK(strstr(err.data, "not a map") != NULL);
	msg_free(&m);
	buf_free(&err);
}

TEST(buf_grows_and_detaches)
{
	struct buf b = BUF_INIT;
	for (int i = 0; i < 1000; i++)
		CHECK(buf_printf(&b, "%d,", i) == 0);
	CHECK(b.len == strlen(b.data));
	buf_consume(&b, 2);
	CHECK(strncmp(b.data, "1,2,", 4) == 0);
	size_t n;
	char *p = buf_detach(&b, &n);
	CHECK(p && n == strlen(p) && b.data == NULL && b.len == 0);
	free(p);
	buf_free(&b);
}

/* Regression: msgpack-c leaves an empty str's pointer NULL, and msg_bytes()
 * and msg_strdup() handed it on to memchr()/memcpy() (undefined behaviour,
 * found by tests/fuzz/fuzz_request under UBSan). */
TEST(msg_empty_string_is_not_a_null_pointer)
{
	struct msg m;
	const char *s = NULL;
	size_t n = 1;
	char *d = NULL;

	/* {"cpu": "", "input": bin(0), "": 1} */
	REQUIRE(msg_parse(&m, "\x83\xa3" "cpu\xa0\xa5input\xc4\x00\xa0\x01", 16,
			  &MSG_LIMITS_DEFAULT, NULL) == 0);
	CHECK(msg_bytes(&m, "cpu", &s, &n) == 1 && s != NULL && n == 0);
	s = NULL;
	CHECK(msg_bytes(&m, "input", &s, &n) == 1 && s != NULL && n == 0);
	CHECK(msg_strdup(&m, "cpu", &d) == 1 && d && *d == '\0');
	int64_t v = 0;
	CHECK(msg_int(&m, "", &v) == 1 && v == 1);
	free(d);
	msg_free(&m);
}
