/* SPDX-License-Identifier: Apache-2.0 */
/* frame: the 8-byte frame header; see frame.h. */
#include "proto/frame.h"

#include <string.h>

int frame_parse_hdr(const void *p, size_t n, uint32_t max_len,
		    struct frame_hdr *h, struct buf *err)
{
	const unsigned char *b = p;

	if (n < FRAME_HDR_LEN)
		return 0;
	if (b[0] != 'P' || b[1] != 'X') {
		if (err)
			buf_printf(err, "bad frame magic 0x%02x%02x", b[0], b[1]);
		return -1;
	}
	if (b[2] != FRAME_VERSION) {
		if (err)
			buf_printf(err, "unsupported protocol version %u (this side speaks %u)",
				   b[2], FRAME_VERSION);
		return -1;
	}
	uint32_t len = (uint32_t)b[4] << 24 | (uint32_t)b[5] << 16 |
		       (uint32_t)b[6] << 8 | (uint32_t)b[7];
	if (len > max_len) {
		if (err)
			buf_printf(err, "frame of %u bytes exceeds the limit of %u bytes",
				   len, max_len);
		return -1;
	}
	h->type = b[3];
	h->len = len;
	return 1;
}

size_t frame_start(struct buf *out, uint8_t type)
{
	unsigned char hdr[FRAME_HDR_LEN] = { 'P', 'X', FRAME_VERSION, type, 0, 0, 0, 0 };
	size_t at = out->len;

	buf_append(out, hdr, sizeof hdr);
	return at;
}

int frame_finish(struct buf *out, size_t start, size_t tail)
{
	size_t body = out->len - start - FRAME_HDR_LEN;

	if (tail > UINT32_MAX || body > UINT32_MAX - tail)
		return -1;
	body += tail;
	unsigned char *l = (unsigned char *)out->data + start + 4;
	l[0] = (unsigned char)(body >> 24);
	l[1] = (unsigned char)(body >> 16);
	l[2] = (unsigned char)(body >> 8);
	l[3] = (unsigned char)body;
	return 0;
}

const char *frame_type_name(uint8_t type)
{
	switch (type & ~FRAME_REPLY) {
	case FRAME_HELLO: return "hello";
	case FRAME_PING: return "ping";
	case FRAME_COMPILE: return "compile";
	case FRAME_STATS: return "stats";
	case FRAME_LS: return "ls";
	case FRAME_SHOW: return "show";
	case FRAME_EXPLAIN: return "explain";
	case FRAME_VERIFY: return "verify";
	case FRAME_EVICT: return "evict";
	case FRAME_ARTIFACT_GET: return "artifact_get";
	case FRAME_ARTIFACT_PUT: return "artifact_put";
	case FRAME_ARTIFACT_RELEASE: return "artifact_release";
	case FRAME_JOB: return "job";
	}
	return type == FRAME_ERROR ? "error" : type == FRAME_PROGRESS ? "progress" : "unknown";
}
