/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reply: the compile reply frame (FRAME_COMPILE | FRAME_REPLY), which both
 * stages of a compile request answer with (compile.c, cubin_req.c), at
 * once on a hit or from a flight's waiter. Below both families, above
 * conn.h. PROTOCOL.md has the fields.
 */
#ifndef PTXCACHE_REPLY_H
#define PTXCACHE_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/key.h"

struct conn;

/* Answer request id on c with a compile reply (everything borrowed):
 * status (enum job_status), cached, k, the output and log if not empty,
 * compile_us if not 0, and exit_code (the assembler's exit status for a
 * cubin reply; -1: none). */
void compile_reply(struct conn *c, uint64_t id, int status, int cached,
		   const struct key *k, const char *out, size_t outn,
		   const char *lg, size_t lgn, int64_t us, int exit_code);

#endif
