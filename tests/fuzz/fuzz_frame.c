/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_frame: libFuzzer harness for the bytes a peer sends down the socket.
 *
 * The input is a byte stream, read the way conn.c's on_conn_read() reads
 * a connection: header by header (frame_parse_hdr() against a length cap,
 * before anything is allocated for the body), and each whole body through
 * msg_parse() (our bounded validator first, then msgpack-c). The stream
 * ends at the first bad header, as the connection would.
 *
 * Properties checked beyond "no crash, no sanitizer report, no leak":
 *  - a header that parses never claims more than the cap;
 *  - a body that msg_validate() refuses is refused by msg_parse() too, and
 *    one that it accepts unpacks (msgpack-c agrees with our validator);
 *  - a parsed body's top level is a map;
 *  - msg_tail_find() (conn.c's spooling) agrees with itself and with the
 *    validator: a body it finds a tail in validates whole, any prefix of
 *    it gives the same tail or asks for more, and its head parses.
 *
 * Built two ways (see the Makefile): with clang -fsanitize=fuzzer for
 * `make fuzz`, and with the normal compiler plus tests/fuzz/replay.c so
 * that `make test` replays the seed corpus in tests/fuzz/corpus/frame.
 */
#include <stdint.h>
#include <stdlib.h>

#include "proto/frame.h"
#include "proto/msg.h"

/* Small, so that the fuzzer reaches the limit; the daemon's is 64 MiB. */
#define FUZZ_MAX_FRAME (1u << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	for (int frames = 0; frames < 64; frames++) {
		struct frame_hdr h;
		struct buf err = BUF_INIT;
		int r = frame_parse_hdr(data + off, size - off, FUZZ_MAX_FRAME, &h, &err);

		if (r < 0 && (!err.data || !err.len))
			abort();        /* every refusal says why */
		buf_free(&err);
		if (r <= 0)
			return 0;
		if (h.len > FUZZ_MAX_FRAME)
			abort();
		if (size - off - FRAME_HDR_LEN < h.len)
			return 0;       /* the rest has not arrived */
		const uint8_t *body = data + off + FRAME_HDR_LEN;
		int valid = msg_validate(body, h.len, &MSG_LIMITS_DEFAULT, NULL) == 0;
		struct msg m;
		r = msg_parse(&m, body, h.len, &MSG_LIMITS_DEFAULT, &err);
		if (r == 0 && (!valid || !m.map))
			abort();
		if (r < 0 && (!err.data || !err.len))
			abort();
		if (r == 0) {
			int64_t id;
			msg_int(&m, "id", &id);
		}
		msg_free(&m);
		buf_free(&err);
		struct msg_tail t, u;
		if (msg_tail_find(body, h.len, h.len, &MSG_LIMITS_DEFAULT, &t) == 1) {
			struct buf copy = BUF_INIT;
			const char *name;
			size_t name_len;
			if (!valid || t.head_len + t.len != h.len || t.key_at >= t.head_len)
				abort();
			for (size_t k = 0; k < h.len; k += 1 + k / 4) {
				int q = msg_tail_find(body, k, h.len, &MSG_LIMITS_DEFAULT, &u);
				if (q < 0 || (q == 1 && (u.head_len != t.head_len || u.len != t.len)))
					abort();
			}
			if (msg_parse_head(&m, body, &t, &MSG_LIMITS_DEFAULT, &copy, &name,
					   &name_len, NULL) < 0 || !m.map ||
			    name + name_len > (const char *)body + t.head_len)
				abort();
			msg_free(&m);
			buf_free(&copy);
		}
		off += FRAME_HDR_LEN + h.len;
	}
	return 0;
}
