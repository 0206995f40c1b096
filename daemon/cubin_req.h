/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin_req: the PTX to cubin stage of a compile request (`kind:
 * "cubin"`), in the master: its fields, its key, and the hit, join or
 * flight that answers it. See cubin_req.c; the assembler itself runs in
 * the workers (cubin.h), the portable -lineinfo keys come from
 * cubin_debug.h. The stage has no frame type of its own: compile.c reads
 * the request and hands it here, at once for PTX input, after stage one
 * for IR (from the waiter compile.c gave stage one's flight).
 */
#ifndef PTXCACHE_CUBIN_REQ_H
#define PTXCACHE_CUBIN_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/cubin.h"
#include "daemon/cubin_debug.h"
#include "daemon/key.h"
#include "proto/buf.h"

struct conn;
struct msg;
struct server;

/* What a cubin request asks of the assembler (owned strings). */
struct asm_req {
	enum cubin_backend_kind backend;
	char *args;             /* canonical options, '\n'-separated */
	char *arch;             /* --gpu-name's value, or NULL */
	char *sources;          /* the client's stamps of the PTX's .file
	                           sources (see cubin.h), or NULL */
};

/* The cubin fields of compile request m into a (asm_sources, backend,
 * asm_args: checked and made canonical by ptxas_args_check()) and
 * *from_ptx (input_kind "ptx": 1). a's strings are the caller's
 * (asm_req_free()), set even on failure. 0, or -1 with a message in err. */
int asm_req_parse(const struct msg *m, struct asm_req *a, int *from_ptx, struct buf *err);

/* Free a's strings (a itself is the caller's; NULL: nothing). */
void asm_req_free(struct asm_req *a);

/* Move a's strings into a new asm_req (owned by the caller: asm_req_free()
 * and free()); NULL if out of memory (a is then unchanged). */
struct asm_req *asm_req_take(struct asm_req *a);

/*
 * What a cubin request's PTX is keyed on: for ptxas, a -lineinfo PTX whose
 * source paths cubin_debug.c can take out is portable (1, ds filled: the
 * caller frees it with dbg_scan_free(); sha: the hash of its shape,
 * loose_sha: of its loose form); anything else is keyed on its bytes (0,
 * sha their hash). -1: out of memory.
 */
int cubin_scan(const struct asm_req *a, const char *ptx, size_t n,
	       struct dbg_scan *ds, char sha[65], char loose_sha[65]);

/*
 * The key of the PTX to cubin stage (components: JSON into components if
 * not NULL): the PTX as ptx_sha, the back end and its identity, the
 * canonical options, and the client's stamps; for a portable request (ds
 * not NULL) the layout instead of the stamps, or with loose, the key that
 * accepts other paths and stamps (lineinfo-loose). 0, or -1 if out of
 * memory.
 */
int cubin_key(const struct server *s, const struct asm_req *a,
	      const char *ptx_sha, const struct dbg_scan *ds, int loose,
	      struct key *k, struct buf *components);

/*
 * Assemble ptx as a asks (both borrowed) and answer request id on c: from
 * the cache, by joining the same assembly in flight, or as a new flight on
 * the pool. chained: the request was accepted already (its PTX came from
 * stage one), so the per-user cap is not applied twice.
 */
void cubin_start(struct conn *c, uint64_t id, const char *ptx, size_t ptx_len,
		 const struct asm_req *a, int chained);

#endif
