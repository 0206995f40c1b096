/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxas_args: what a `ptxas` command line means, shared by the drop-in
 * front (client/ptxas.c) and the daemon (which checks the options a client
 * sends before it runs an assembler with them).
 *
 * A command line is cacheable when every option is one this table knows to
 * be safe: it changes the cubin or the log only through its own value, and
 * names no file (ptxas embeds its normalised option string in the cubin,
 * not the input or output path, so the same PTX with the same options
 * gives the same bytes wherever it lives). Such options are rewritten to a
 * canonical spelling ("--long-name" or "--long-name=value"), sorted and
 * deduplicated: ptxas itself normalises spelling and order before it embeds
 * them, so the canonical list assembles to the very bytes the client's own
 * command line would.
 *
 * Anything else (an option not in the table, -g, which embeds the input
 * path, an options file, several inputs, stdin, a virtual architecture) is
 * not guessed at: the command is marked PTXAS_PASSTHROUGH and the front runs
 * the real ptxas with the original arguments.
 */
#ifndef PTXCACHE_PTXAS_ARGS_H
#define PTXCACHE_PTXAS_ARGS_H

#include <stddef.h>

#include "proto/buf.h"

enum ptxas_mode {
	PTXAS_CACHEABLE,        /* one PTX file, known options: ask the daemon */
	PTXAS_VERSION,          /* exactly `ptxas --version` (or -V) */
	PTXAS_PASSTHROUGH,      /* run the real ptxas with argv as given */
};

/* Most options a cacheable command may carry; more is a passthrough. */
#define PTXAS_MAX_ARGS 64

struct ptxas_cmd {
	enum ptxas_mode mode;
	const char *input;      /* the PTX file (points into argv) */
	const char *output;     /* -o FILE (points into argv); NULL: "elf.o" */
	char *args[PTXAS_MAX_ARGS]; /* canonical options, sorted; owned */
	size_t nargs;
	const char *arch;       /* --gpu-name's value (points into args), or NULL */
	char why[160];          /* for a passthrough: what was not understood */
};

/*
 * Parse a ptxas command line (argv[0..argc), without the program name).
 * Fills cmd (which the caller frees with ptxas_cmd_free) and returns 0, or
 * -1 when memory runs out. Never fails on odd arguments: those make the
 * command a passthrough, with the reason in cmd->why.
 */
int ptxas_cmd_parse(int argc, char *const *argv, struct ptxas_cmd *cmd);
void ptxas_cmd_free(struct ptxas_cmd *cmd);

/*
 * The daemon's check of the options in a request: each must be a cacheable
 * option in canonical spelling (as ptxas_cmd_parse() writes them), with no
 * input or output file. On success returns 0 and appends the canonical,
 * sorted, deduplicated list to canon, '\n'-separated (the key component and
 * the assembler's arguments), and sets *arch to a malloc'd copy of
 * --gpu-name's value (or NULL). Returns -1 with a message in err otherwise.
 */
int ptxas_args_check(const char *const *args, size_t n, struct buf *canon,
		     char **arch, struct buf *err);

#endif
