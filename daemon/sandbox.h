/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sandbox: what a worker may still do once it is ready for untrusted input.
 *
 * A worker applies its profile after LLVM is initialised and warmed up (or,
 * for an assembler worker, once its private temporary directory exists)
 * and before its first job. Nothing is ever loosened again.
 *
 *   codegen     PR_SET_NO_NEW_PRIVS; a seccomp filter (libseccomp) that
 *               allows only the system calls codegen makes (memory, the
 *               job's socket and capture file, signals to itself, time)
 *               and kills the process on anything else: no open, no
 *               socket, no execve, no ptrace, no process_vm_*, no signal to
 *               another process; Landlock with no filesystem access at
 *               all, no TCP, and (ABI 6) no signal or abstract socket
 *               outside the worker.
 *   assembler   the worker runs ptxas (a process that inherits all of
 *               this) or nvJitLink in process: PR_SET_NO_NEW_PRIVS; seccomp
 *               refuses socket(), ptrace and process_vm_* with an error;
 *               Landlock allows reading and executing only in the system's
 *               directories and the assembler's own tree, writing only in
 *               the worker's private temporary directory, no TCP, no
 *               signal outside.
 *
 * Where the kernel lacks seccomp or Landlock (or an ABI feature), the worker
 * applies what there is and says what it could not; the daemon logs it and
 * reports it in stats ("sandbox"), or refuses to start with
 * `sandbox = require`. Under AddressSanitizer (make check-asan) no filter
 * or ruleset is applied: its runtime opens files and maps memory in ways
 * no allow-list of codegen's needs covers.
 */
#ifndef PTXCACHE_SANDBOX_H
#define PTXCACHE_SANDBOX_H

#include "proto/buf.h"

enum sandbox_profile {
	SANDBOX_CODEGEN,
	SANDBOX_ASSEMBLER,
};

struct sandbox_paths {
	const char *const *read_roots;  /* assembler: readable (and executable)
	                                   trees; NULL-terminated */
	const char *write_root;         /* assembler: the private temp dir */
};

/*
 * Apply profile to the calling process (and every process it starts).
 * Returns 0 when everything applied; 1 when something the kernel lacks was
 * left out (what, in missing); -1 when applying failed (the reason in
 * missing): the caller must not go on to serve jobs then.
 */
int sandbox_apply(enum sandbox_profile profile, const struct sandbox_paths *paths,
		  struct buf *missing);

/* What this kernel supports, in words ("seccomp, landlock ABI 7"), for
 * stats and the start-up log; 1 if all of it, else 0. */
int sandbox_support(struct buf *out);

struct pool_config;

/*
 * The master's side, at start, before the pool: check the sandbox setting
 * (pc->sandbox: "auto", "require" or "off"; NULL is auto) against this
 * kernel, refusing to start where `require` cannot be met, and log what
 * the workers will get. Then name what an assembler worker may reach
 * besides the system's directories: the directories of asm_paths (ptxas
 * and nvJitLink; NULL: none) and <cache_dir>/workers, the parent of its
 * private directory, created or emptied (pool_prepare_tmp()). Both strings
 * go into pc and into *asm_roots and *worker_tmp, which the caller owns
 * (what they held before is freed). 0, or -1 with err.
 */
int sandbox_start(struct pool_config *pc, const char *cache_dir,
		  const char *const asm_paths[2], char **asm_roots,
		  char **worker_tmp, struct buf *err);

#endif
