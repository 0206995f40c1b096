/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codegen: LLVM IR (text or bitcode) to PTX. The only interface to LLVM;
 * called in worker processes only, never in the master.
 *
 * A worker calls codegen_init() once, after fork, with the process-wide
 * backend options of its option set (LLVM keeps those in global state), then
 * codegen_run() once per job. Output is what `llc` of the same LLVM prints for
 * the same input and options, byte for byte.
 */
#ifndef PTXCACHE_CODEGEN_H
#define PTXCACHE_CODEGEN_H

#include <stddef.h>

#include "proto/buf.h"

/* What went wrong, if anything. Everything but CG_OK is deterministic for
 * the same input and options, so the master may cache it as a negative
 * entry; a crash (signal without a fatal-error message) is reported by the
 * worker layer, not here. */
enum cg_status {
	CG_OK = 0,
	CG_PARSE_ERROR = 1, /* input does not parse: log holds LLVM's SMDiagnostic
	                       text ("NAME:L:C: error: ...\n<line>\n<caret>\n"),
	                       which llc prints as "llc: error: llc: " + log */
	CG_ERROR = 2,       /* codegen reported errors through the diagnostic
	                       handler (llc exits 1): log is exactly llc's stderr */
	CG_INVALID = 3,     /* request refused before LLVM ran: unknown CPU or
	                       feature, non-NVPTX triple, bad pipeline; log holds
	                       a one-line message without trailing newline */
};

struct codegen_job {
	const void *input;      /* IR text or bitcode (detected by its magic) */
	size_t input_len;
	const char *name;       /* buffer name shown in diagnostics ("<stdin>") */
	const char *triple;     /* overrides the module's triple when non-empty */
	const char *march;      /* llc -march (arch name on the module's triple),
	                           or NULL */
	const char *cpu;        /* "sm_90a"; NULL or "" for the target default */
	const char *features;   /* "+ptx90,+..." or NULL */
	int opt_level;          /* codegen level 0..3 (llc's -O, default 2) */
	const char *pipeline;   /* middle-end pipeline for the new pass manager
	                           ("default<O3>", "always-inline") or NULL */
	int emit;               /* 1: produce PTX; 0: llc -filetype=null */
	int strict;             /* 1: refuse unknown CPUs/features (CG_INVALID)
	                           and modules whose own triple is not NVPTX;
	                           0: behave as llc (warn and go on) */
};

struct codegen_result {
	enum cg_status status;
	struct buf ptx;         /* the PTX text, when status is CG_OK */
	struct buf log;         /* what llc would print on stderr (warnings
	                           included, also on success) */
};

/*
 * Initialise LLVM's NVPTX target and apply the worker's backend options,
 * argv-style without a program name ("-nvptx-fma-level=1",
 * "-trap-unreachable", "--nvptx-short-ptr", "-fp-contract=fast", ...): any
 * option llc accepts that is not a per-job field above. An option LLVM does
 * not know is refused: returns -1 with a message in err. on_fatal is called
 * when LLVM hits a fatal error, with what the job had printed before it
 * (warnings, as llc would have shown them), LLVM's reason text and crash:
 * 1 where llc would abort, 0 where LLVM reports the error without crash
 * diagnostics and llc exits with status 1. The process then ends as llc
 * does (on_fatal may end it first). Call once per process.
 */
int codegen_init(int argc, const char *const *argv,
		 void (*on_fatal)(const char *printed, size_t printed_len,
				  const char *reason, int crash),
		 struct buf *err);

/* Compile one job. res must be zero-initialised by the caller, who owns and
 * frees its bufs. Never exits except through LLVM's fatal-error path. */
void codegen_run(const struct codegen_job *job, struct codegen_result *res);

/* 1 if name is an option codegen_init() would accept (the "name" part of
 * "-name=value", without dashes), else 0. Usable before codegen_init(). */
int codegen_option_known(const char *name);

/* The compiler identity that goes into every key: "LLVM 22.1.8" plus build
 * details. A static string; no LLVM call, so the master may use it. */
const char *codegen_identity(void);

/* Compile the built-in warm-up kernels for cpu (e.g. "sm_90a") so that
 * the first real job costs what the hundredth does. */
void codegen_warm_up(const char *cpu, const char *features);

#endif
