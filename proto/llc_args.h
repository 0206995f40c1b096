/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llc_args: what an `llc` command line means, shared by the drop-in front
 * (`ptxcache llc`, client/cli.c) and the daemon (which checks the backend
 * options a client sends before it starts a worker with them). It is to
 * llc what ptxas_args.c is to ptxas.
 *
 * Every argument falls in one class:
 *
 *   job       a field of the compile request: -mtriple, -march, -mcpu,
 *             -mattr, -O<n>, -filetype, -x ir; the input (a path or "-")
 *             and -o are the front's own business;
 *   backend   an LLVM option the daemon models process-wide: a worker is
 *             started with exactly that set, and the option is part of the
 *             key. Only options in this table's allow-list (NVPTX's own
 *             knobs and codegen flags whose whole effect is on the code
 *             emitted) are here: nothing that prints, times, writes or
 *             reads a file, or stops the pipeline early;
 *   info      options llc answers by printing something about itself
 *             (--version, --help*, -mcpu=help, -mattr=help, ...);
 *   real      everything else (-stop-after, -start-before, -print-*,
 *             -debug-pass, -time-passes, -stats, options of other targets,
 *             options this table does not know).
 *
 * A command line with any info or real argument, or one this parser cannot
 * take apart with certainty (two inputs, a backend option's value given as
 * a separate argument, a -filetype or -x it does not model), is run by the
 * real llc, uncached, with the arguments exactly as given. The daemon
 * refuses any backend option that is not in the allow-list, so no client
 * can make it start a worker with an option LLVM would only honour by
 * changing what the process prints or touches.
 *
 * Checklist when adding a backend option: its effect must be on the code
 * emitted and nothing else (no output to stdout or stderr beyond what llc
 * prints as diagnostics of the module, no file named by its value); then a
 * case in tests/test_llc_front.py.
 */
#ifndef PTXCACHE_LLC_ARGS_H
#define PTXCACHE_LLC_ARGS_H

#include <stddef.h>

enum llc_mode {
	LLC_CACHEABLE,          /* the daemon can answer it */
	LLC_REAL,               /* run the real llc with argv as given */
};

struct llc_cmd {
	enum llc_mode mode;
	const char *input;      /* path or "-" (points into argv); NULL: stdin */
	const char *output;     /* -o's value (points into argv), or NULL */
	const char *triple, *march, *cpu;   /* point into argv, or NULL */
	char *features;         /* every -mattr joined with ','; owned, or NULL */
	int opt_level;          /* -O<n>; 2 (llc's default) if not given */
	int filetype_null;      /* -filetype=null: compile, write nothing */
	const char **options;   /* backend options as "-name[=value]" (point
	                           into argv, one leading '-' dropped from a
	                           "--name"); owned array */
	size_t noptions;
	char why[160];          /* LLC_REAL: the argument that decided it */
};

/*
 * Parse an llc command line (argv[0..argc), without the program name) into
 * cmd (free it with llc_cmd_free). Returns 0, or -1 when memory runs out.
 * Never fails on odd arguments: those make the command LLC_REAL, with the
 * reason in cmd->why.
 */
int llc_cmd_parse(int argc, char *const *argv, struct llc_cmd *cmd);
void llc_cmd_free(struct llc_cmd *cmd);

/*
 * 1 if opt ("-name" or "-name=value", one leading dash) is a backend option
 * the daemon models, else 0. The daemon's check of a request's options.
 */
int llc_backend_option(const char *opt);

#endif
