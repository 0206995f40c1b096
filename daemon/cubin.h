/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin: the PTX to cubin stage's assembler back ends.
 *
 * Two back ends: the real `ptxas`, run as a subprocess (the default: it is
 * what the client's own step runs, so the bytes are the same), and
 * nvJitLink, loaded with dlopen() in the worker and run in process (no
 * spawn) for clients that ask for it. Nothing links CUDA at build time.
 *
 * The master finds each back end once, at start (cubin_find_*: discovery,
 * `ptxas --version`, SHA-256 of the binary; none of it is LLVM), and keeps
 * the identity that goes into every cubin key. Workers run the jobs
 * (cubin_run), never the master: an assembler can take seconds.
 */
#ifndef PTXCACHE_CUBIN_H
#define PTXCACHE_CUBIN_H

#include <stddef.h>
#include <stdint.h>

#include "proto/buf.h"

enum cubin_backend_kind { CUBIN_PTXAS = 0, CUBIN_NVJITLINK = 1 };

/* How the assembler's input file is named in a log: ptxas prints the path
 * it was given, the daemon's temporary one; the front puts the client's
 * path back in its place. */
#define CUBIN_INPUT_NAME "<input>"

/* One back end as found at start. All strings are owned (malloc'd). */
struct cubin_backend {
	enum cubin_backend_kind kind;
	char *path;             /* the ptxas binary or libnvJitLink; NULL: none */
	char *version;          /* `ptxas --version` output exactly (stdout), or
	                           "nvJitLink (libnvJitLink.so.13)" */
	char *identity;         /* the key component: version text, then
	                           "sha256:" and the hash of the binary */
	char *why;              /* when path is NULL: why, as a one-line message
	                           for refused requests */
};

/*
 * Find ptxas. configured is --ptxas (NULL: search; "none": disabled).
 * Search order: $PTXCACHE_PTXAS, $CUDA_HOME/bin, the default toolkit
 * ($PTXCACHE_DEFAULT_CUDA, else /usr/local/cuda; empty: none)/bin, PATH.
 * An explicit choice (--ptxas, $PTXCACHE_PTXAS) that does not work is not
 * searched past. Runs `ptxas --version` and hashes the binary: call at
 * start only (it blocks). Always fills b; b->path is NULL when there is no
 * usable ptxas, with b->why saying what is missing and how to point the
 * daemon at it. Free with cubin_backend_free().
 */
void cubin_find_ptxas(const char *configured, struct cubin_backend *b);

/* Find libnvJitLink.so.13 the same way: --nvjitlink, $PTXCACHE_NVJITLINK,
 * $CUDA_HOME/lib64, the default toolkit's lib64. Does not load it (workers
 * do); hashes the file. */
void cubin_find_nvjitlink(const char *configured, struct cubin_backend *b);

void cubin_backend_free(struct cubin_backend *b);

/* One assembler job, as a worker runs it. */
struct cubin_job {
	enum cubin_backend_kind backend;
	const char *path;       /* the back end's binary or library */
	const void *ptx;
	size_t ptx_len;
	const char *args;       /* canonical options, '\n'-separated
	                           (ptxas_args_check); never an input/output */
	int timeout_ms;         /* kill the assembler after this; 0: none */
	const char *sources;    /* the client's view of the source files the
	                           PTX's .file directives name, one
	                           "PATH\tSTAMP\n" line each (cubin_stamp());
	                           NULL: none given */
};

/* What ptxas records of a source file named by a .file directive (with
 * -lineinfo it copies the file's mtime and size into .debug_line): "MTIME:SIZE",
 * or "-" if it cannot be read. out holds at least 48 bytes. */
void cubin_stamp(const char *path, char *out, size_t len);

/* Outcome. status uses enum job_status's values: 0 ok (cubin set), 2 the
 * assembler failed (exit_code and log say how; deterministic), 5 it died
 * of a signal, 6 it ran out of time, 7 it could not be run at all. */
struct cubin_result {
	int status;
	int exit_code;          /* the assembler's exit status (255: ptxas's
	                           "fatal"; nvJitLink failures map to 255) */
	struct buf cubin;
	struct buf log;         /* what the assembler printed (stdout, then
	                           stderr), its temporary input path replaced
	                           by CUBIN_INPUT_NAME */
};

/* Run job; res must be zeroed by the caller, who frees its bufs. Blocks
 * until the assembler is done (a worker's business, never the master's). */
void cubin_run(const struct cubin_job *job, struct cubin_result *res);

#endif
