/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxas_args: the table of ptxas options we understand; see ptxas_args.h.
 *
 * ptxas spells an option "--long-name" or "-short", with its value after
 * '=' or in the next argument; -O and -m also take it attached (-O3, -m64).
 * "--short" and "-long-name" are errors to ptxas, so they are unknown here
 * too (and passed through, so the user sees ptxas's own message).
 *
 * Checklist when adding an option: it must name no file and its effect on
 * the cubin and the log must depend on nothing but its value; then add it
 * to opts[] and a case to tests/test_cubin.py if it is one a real client
 * passes.
 */
#include "proto/ptxas_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum opt_kind {
	OK_FLAG,                /* no value */
	OK_VALUE,               /* a value */
	OK_ARCH,                /* a value that must be a real GPU (sm_...) */
	OK_OUTPUT,              /* -o FILE: the front's business only */
	OK_VERSION,             /* --version */
};

struct opt {
	const char *lng;        /* without the dashes */
	const char *shrt;       /* without the dash, or NULL */
	enum opt_kind kind;
	int attach;             /* the short form takes its value attached */
};

static const struct opt opts[] = {
	{ "gpu-name", "arch", OK_ARCH, 0 },
	{ "output-file", "o", OK_OUTPUT, 0 },
	{ "version", "V", OK_VERSION, 0 },
	{ "opt-level", "O", OK_VALUE, 1 },
	{ "machine", "m", OK_VALUE, 1 },
	{ "verbose", "v", OK_FLAG, 0 },
	{ "generate-line-info", "lineinfo", OK_FLAG, 0 },
	{ "suppress-debug-info", "suppress-debug-info", OK_FLAG, 0 },
	{ "compile-only", "c", OK_FLAG, 0 },
	{ "fmad", "fmad", OK_VALUE, 0 },
	{ "maxrregcount", "maxrregcount", OK_VALUE, 0 },
	{ "device-function-maxrregcount", "func-maxrregcount", OK_VALUE, 0 },
	{ "maxntid", "maxntid", OK_VALUE, 0 },
	{ "minnctapersm", "minnctapersm", OK_VALUE, 0 },
	{ "override-directive-values", "override-directive-values", OK_FLAG, 0 },
	{ "allow-expensive-optimizations", "allow-expensive-optimizations", OK_VALUE, 0 },
	{ "register-usage-level", "regUsageLevel", OK_VALUE, 0 },
	{ "Ofast-compile", "Ofc", OK_VALUE, 0 },
	{ "position-independent-code", "pic", OK_VALUE, 0 },
	{ "extensible-whole-program", "ewp", OK_FLAG, 0 },
	{ "preserve-relocs", "preserve-relocs", OK_FLAG, 0 },
	{ "entry", "e", OK_VALUE, 0 },
	{ "disable-warnings", "w", OK_FLAG, 0 },
	{ "warning-as-error", "Werror", OK_FLAG, 0 },
	{ "warn-on-spills", "warn-spills", OK_FLAG, 0 },
	{ "warn-on-local-memory-usage", "warn-lmem-usage", OK_FLAG, 0 },
	{ "warn-on-double-precision-use", "warn-double-usage", OK_FLAG, 0 },
	{ "disable-optimizer-constants", "disable-optimizer-consts", OK_FLAG, 0 },
	{ "dont-merge-basicblocks", "no-bb-merge", OK_FLAG, 0 },
	{ "return-at-end", "ret-end", OK_FLAG, 0 },
	{ "sp-bounds-check", "sp-bounds-check", OK_FLAG, 0 },
	{ "make-errors-visible-at-exit", "make-errors-visible-at-exit", OK_FLAG, 0 },
	{ "optimize-float-atomics", "opt-fp-atomics", OK_FLAG, 0 },
	{ "device-stack-protector", "device-stack-protector", OK_VALUE, 0 },
	{ "split-compile", "split-compile", OK_VALUE, 0 },
	{ "suppress-stack-size-warning", "suppress-stack-size-warning", OK_FLAG, 0 },
	{ "suppress-double-demote-warning", "suppress-double-demote-warning", OK_FLAG, 0 },
	{ "suppress-async-bulk-multicast-advisory-warning",
	  "suppress-async-bulk-multicast-advisory-warning", OK_FLAG, 0 },
	{ "suppress-sparse-mma-advisory-info", "suppress-sparse-mma-advisory-info",
	  OK_FLAG, 0 },
};

#define NOPTS (sizeof opts / sizeof opts[0])

/* A value we pass on: non-empty, printable, no '=' games, bounded. */
static int value_ok(const char *v)
{
	size_t n = strlen(v);

	if (n == 0 || n > 256 || v[0] == '-')
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x21 || v[i] == 0x7f)
			return 0;
	return 1;
}

/* Find the option arg names; *val gets an '=' or attached value (NULL if
 * none). NULL if arg is no option of the table. */
static const struct opt *lookup(const char *arg, const char **val)
{
	int dbl = arg[1] == '-';
	const char *name = arg + (dbl ? 2 : 1);
	size_t n = strcspn(name, "=");

	*val = name[n] == '=' ? name + n + 1 : NULL;
	for (size_t i = 0; i < NOPTS; i++) {
		const char *want = dbl ? opts[i].lng : opts[i].shrt;
		if (want && strlen(want) == n && strncmp(name, want, n) == 0)
			return &opts[i];
	}
	if (dbl)
		return NULL;
	for (size_t i = 0; i < NOPTS; i++) {
		size_t sl = opts[i].shrt ? strlen(opts[i].shrt) : 0;
		if (opts[i].attach && strncmp(name, opts[i].shrt, sl) == 0 &&
		    name[sl] >= '0' && name[sl] <= '9' && !strchr(name, '=')) {
			*val = name + sl;
			return &opts[i];
		}
	}
	return NULL;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Length of the "--name" part of a canonical argument. */
static size_t name_len(const char *canon)
{
	return strcspn(canon, "=");
}

/* Sort and deduplicate args[0..*n); -1 if one option has two values. */
static int canonicalise(char **args, size_t *n)
{
	size_t out = 0;

	qsort(args, *n, sizeof *args, cmp_str);
	for (size_t i = 0; i < *n; i++) {
		if (out && strcmp(args[out - 1], args[i]) == 0) {
			free(args[i]);
			continue;
		}
		if (out && name_len(args[out - 1]) == name_len(args[i]) &&
		    strncmp(args[out - 1], args[i], name_len(args[i])) == 0) {
			/* Same option, another value: which wins is ptxas's
			 * business, not ours to guess. */
			for (size_t j = i; j < *n; j++)
				free(args[j]);
			*n = out;
			return -1;
		}
		args[out++] = args[i];
	}
	*n = out;
	return 0;
}

static void passthrough(struct ptxas_cmd *cmd, const char *fmt, const char *arg)
{
	if (cmd->mode == PTXAS_PASSTHROUGH)
		return;
	cmd->mode = PTXAS_PASSTHROUGH;
	snprintf(cmd->why, sizeof cmd->why, fmt, arg);
}

int ptxas_cmd_parse(int argc, char *const *argv, struct ptxas_cmd *cmd)
{
	int version = 0;

	memset(cmd, 0, sizeof *cmd);
	cmd->mode = PTXAS_CACHEABLE;
	for (int i = 0; i < argc && cmd->mode == PTXAS_CACHEABLE; i++) {
		const char *a = argv[i], *val;
		if (a[0] != '-' || !a[1]) {
			if (!strcmp(a, "-"))
				passthrough(cmd, "input from stdin", a);
			else if (cmd->input)
				passthrough(cmd, "more than one input ('%s')", a);
			else
				cmd->input = a;
			continue;
		}
		const struct opt *o = lookup(a, &val);
		if (!o) {
			passthrough(cmd, "option '%s' is not one ptxcache caches", a);
			continue;
		}
		if (o->kind == OK_FLAG || o->kind == OK_VERSION) {
			if (val) {
				passthrough(cmd, "unexpected value in '%s'", a);
				continue;
			}
		} else if (!val) {
			if (i + 1 >= argc) {
				passthrough(cmd, "option '%s' without a value", a);
				continue;
			}
			val = argv[++i];
		}
		switch (o->kind) {
		case OK_VERSION:
			version = 1;
			continue;
		case OK_OUTPUT:
			if (cmd->output)
				passthrough(cmd, "two output files ('%s')", val);
			cmd->output = val;
			continue;
		case OK_ARCH:
			if (strncmp(val, "sm_", 3) != 0) {
				passthrough(cmd, "GPU name '%s' is no real GPU", val);
				continue;
			}
			break;
		default:
			break;
		}
		if (o->kind != OK_FLAG && !value_ok(val)) {
			passthrough(cmd, "odd value in '%s'", a);
			continue;
		}
		if (cmd->nargs >= PTXAS_MAX_ARGS) {
			passthrough(cmd, "too many options (%s)", a);
			continue;
		}
		char *c = NULL;
		if (o->kind == OK_FLAG)
			c = malloc(strlen(o->lng) + 3);
		else
			c = malloc(strlen(o->lng) + strlen(val) + 4);
		if (!c)
			return -1;
		if (o->kind == OK_FLAG)
			sprintf(c, "--%s", o->lng);
		else
			sprintf(c, "--%s=%s", o->lng, val);
		cmd->args[cmd->nargs++] = c;
	}
	if (cmd->mode != PTXAS_CACHEABLE)
		return 0;
	if (version) {
		if (argc == 1)
			cmd->mode = PTXAS_VERSION;
		else
			passthrough(cmd, "%s with other arguments", "--version");
		return 0;
	}
	if (!cmd->input) {
		passthrough(cmd, "%s", "no input file");
		return 0;
	}
	if (canonicalise(cmd->args, &cmd->nargs) < 0) {
		passthrough(cmd, "%s", "an option given twice with different values");
		return 0;
	}
	for (size_t i = 0; i < cmd->nargs; i++)
		if (!strncmp(cmd->args[i], "--gpu-name=", 11))
			cmd->arch = cmd->args[i] + 11;
	return 0;
}

void ptxas_cmd_free(struct ptxas_cmd *cmd)
{
	for (size_t i = 0; i < cmd->nargs; i++)
		free(cmd->args[i]);
	cmd->nargs = 0;
}

int ptxas_args_check(const char *const *args, size_t n, struct buf *canon,
		     char **arch, struct buf *err)
{
	char *list[PTXAS_MAX_ARGS];
	size_t m = 0;
	int rc = -1;

	*arch = NULL;
	if (n > PTXAS_MAX_ARGS) {
		buf_printf(err, "more than %d assembler options", PTXAS_MAX_ARGS);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		const char *a = args[i], *val;
		const struct opt *o = a[0] == '-' && a[1] == '-' ? lookup(a, &val) : NULL;
		if (!o || o->kind == OK_OUTPUT || o->kind == OK_VERSION ||
		    (o->kind == OK_FLAG && val) ||
		    (o->kind != OK_FLAG && (!val || !value_ok(val))) ||
		    (o->kind == OK_ARCH && strncmp(val, "sm_", 3) != 0)) {
			buf_printf(err, "assembler option '%s' is not one ptxcache "
				   "runs (options are sent as --name or --name=value)", a);
			goto out;
		}
		if (!(list[m] = strdup(a))) {
			buf_puts(err, "out of memory");
			goto out;
		}
		m++;
	}
	if (canonicalise(list, &m) < 0) {
		buf_puts(err, "an assembler option is given twice with different values");
		goto out;
	}
	rc = 0;
	for (size_t i = 0; i < m && rc == 0; i++) {
		if (!strncmp(list[i], "--gpu-name=", 11) && !(*arch = strdup(list[i] + 11)))
			rc = -1;
		if ((i && buf_puts(canon, "\n") < 0) || buf_puts(canon, list[i]) < 0)
			rc = -1;
	}
	if (rc < 0)
		buf_puts(err, "out of memory");
out:
	for (size_t i = 0; i < m; i++)
		free(list[i]);
	if (rc < 0) {
		free(*arch);
		*arch = NULL;
	}
	return rc;
}
