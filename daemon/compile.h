/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compile: the compile request (FRAME_COMPILE), in the master: its fields,
 * the key of the PTX stage, and the hit, join or flight that answers it.
 * See compile.c. A cubin request is a compile request too: compile.c
 * reads it and cubin_req.h takes the cubin stage.
 */
#ifndef PTXCACHE_COMPILE_H
#define PTXCACHE_COMPILE_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/cubin_req.h"
#include "daemon/key.h"
#include "daemon/master.h"
#include "proto/buf.h"

struct msg;

/* A compile request as read by compile_parse(): input points into the
 * message (borrowed); the strings are owned (compile_req_free()). */
struct compile_req {
	const char *input;
	size_t input_len;
	char *kind, *triple, *march, *cpu, *features, *pipeline;
	int64_t opt;
	int emit, strict;
	char *optset;           /* '\n'-separated backend options */
	char ns[TENANT_NAME_MAX + 24]; /* the user's namespace, or "" (shared) */
	char input_sha[65];     /* SHA-256 of input, once computed */
	int cubin;              /* kind "cubin": asmr says how */
	int from_ptx;           /* input_kind "ptx": the input is PTX already */
	struct asm_req asmr;
};

/* The compile request family's part of the request table: compile. */
extern const struct request_table compile_requests;

/* Decode and check compile request m (borrowed; r borrows its input) into
 * r; free r with compile_req_free() in any case. 0, or -1 with a message
 * in err. */
int compile_parse(const struct msg *m, uint32_t max_input,
		  struct compile_req *r, struct buf *err);

void compile_req_free(struct compile_req *r);

/* With namespace-per-uid (sharing = separate), r's entries are c's user's
 * alone: the namespace enters the key. */
void compile_set_namespace(struct server *s, struct conn *c, struct compile_req *r);

/* The key of r's PTX stage, and its components as JSON into components
 * if not NULL. 0, or -1 if out of memory. */
int compile_key(struct compile_req *r, struct key *k, struct buf *components);

#endif
