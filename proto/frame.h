/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frame: the wire format shared by daemon, workers and clients.
 *
 * Every message is a frame: an 8-byte header followed by a body that is one
 * msgpack map (see proto/PROTOCOL.md):
 *
 *   offset 0  'P' 'X'   magic
 *   offset 2  version   FRAME_VERSION
 *   offset 3  type      enum frame_type
 *   offset 4  length    body length, 4 bytes big-endian
 *
 * The length is checked against the receiver's limit before anything is
 * allocated for the body.
 */
#ifndef PTXCACHE_FRAME_H
#define PTXCACHE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "proto/buf.h"

#define FRAME_VERSION 1
#define FRAME_HDR_LEN 8
/* Default cap on a request body: a large kernel's IR is a few MB. */
#define FRAME_MAX_DEFAULT (64u << 20)

/* Requests have the high bit clear; the reply to a request of type T has
 * type T | FRAME_REPLY, and FRAME_ERROR answers any request that failed
 * before it could run. Checklist when adding a type: PROTOCOL.md, the
 * server's request table, and frame_type_name(). */
enum frame_type {
	FRAME_HELLO = 1,
	FRAME_PING = 2,
	FRAME_COMPILE = 3,
	FRAME_STATS = 4,
	FRAME_LS = 5,
	FRAME_SHOW = 6,
	FRAME_EXPLAIN = 7,
	FRAME_VERIFY = 8,
	FRAME_EVICT = 9,
	FRAME_ARTIFACT_GET = 10,
	FRAME_ARTIFACT_PUT = 11,
	FRAME_ARTIFACT_RELEASE = 12,
	/* master <-> worker only */
	FRAME_JOB = 0x40,
	FRAME_REPLY = 0x80,
	FRAME_PROGRESS = 0xfe,  /* daemon to client: a request still waits */
	FRAME_ERROR = 0xff,
};

struct frame_hdr {
	uint8_t type;
	uint32_t len;
};

/*
 * Parse a header from the first n bytes of p. Returns 0 if fewer than
 * FRAME_HDR_LEN bytes are there, 1 with *h filled in, or -1 with a message
 * in err (may be NULL) for a bad magic, an unknown version or a body longer
 * than max_len.
 */
int frame_parse_hdr(const void *p, size_t n, uint32_t max_len,
		    struct frame_hdr *h, struct buf *err);

/* Append a header of the given type with a zero length to out and return
 * its offset, to be passed to frame_finish() once the body is appended. */
size_t frame_start(struct buf *out, uint8_t type);

/* Patch the length of the frame started at offset start: its bytes in out
 * and tail more sent after them. Returns 0, or -1 if the body is longer
 * than 4 GiB - 1. */
int frame_finish(struct buf *out, size_t start, size_t tail);

const char *frame_type_name(uint8_t type);

#endif
