/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llc_args: the table of llc options we understand; see llc_args.h.
 *
 * llc (LLVM's cl library) takes "-name" and "--name" alike, a value after
 * '=' ("-mcpu=sm_90") or, for options that require one, in the next
 * argument ("-mcpu sm_90"); -O takes its digit attached (-O3). Prefix and
 * grouping forms are not used by llc's options, so they are not modelled:
 * such an argument is simply one this table does not know (real llc).
 */
#include "proto/llc_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* LLVM options a worker may be started with. Each changes only the code
 * emitted; see the checklist in llc_args.h. A trailing '*' is a prefix; a
 * trailing '=' marks an option that takes a value (which must then come
 * after '=': given as the next argument, the command goes to the real llc). */
static const char *const backend_opts[] = {
	/* NVPTX's own knobs (NVPTX*.cpp), but -nvptx-lower-global-ctor-dtor-id,
	 * whose string becomes a symbol name. */
	"nvptx-approx-log2f32", "nvptx-early-byval-copy", "nvptx-emit-init-fini-kernel",
	"nvptx-fma-level=", "nvptx-force-min-byval-param-align", "nvptx-mad-wide-opt",
	"nvptx-no-f16-math", "nvptx-no-f32x2", "nvptx-prec-divf32=", "nvptx-prec-sqrtf32",
	"nvptx-rsqrt-approx-opt", "nvptx-sched4reg", "nvptx-short-ptr",
	"nvptx-traverse-address-aliasing-limit=",
	"disable-nvptx-ir-peephole", "disable-nvptx-load-store-vectorizer",
	"disable-nvptx-require-structured-cfg",
	/* Codegen flags (llvm/CodeGen/CommandFlags.cpp) that reach the target
	 * machine or the module's functions. */
	"relocation-model=", "code-model=", "frame-pointer=", "fp-contract=",
	"denormal-fp-math=", "denormal-fp-math-f32=", "enable-no-infs-fp-math",
	"enable-no-nans-fp-math", "enable-no-signed-zeros-fp-math",
	"enable-no-trapping-fp-math", "float-abi=", "trap-unreachable",
	"no-trap-after-noreturn", "data-sections", "function-sections",
	"stackrealign", "emulated-tls", "use-ctors", "nozero-initialized-in-bss",
	"disable-tail-calls",
	/* Pass switches of the codegen pipeline (TargetPassConfig.cpp, ...). */
	"verify-machineinstrs", "disable-cgp*", "disable-copyprop",
	"disable-early-ifcvt", "disable-early-taildup", "disable-lsr",
	"disable-machine-cse", "disable-machine-dce", "disable-machine-licm",
	"disable-machine-sink", "disable-phi-elim-edge-splitting", "disable-post-ra",
	"disable-ssc", "disable-block-placement", "enable-misched", "enable-tail-merge",
	"enable-ipra",
};

/* Options llc answers by printing about itself, with or without a module:
 * the real llc says these best. */
static const char *const info_opts[] = {
	"version", "help", "help-hidden", "help-list", "help-list-hidden",
	"print-options", "print-all-options",
};

/* The name of an option argument ("-x=y" -> "x"), in out; 0 if arg is not
 * an option (a positional, or "-"). */
static int opt_name(const char *arg, char *out, size_t outlen)
{
	if (arg[0] != '-' || arg[1] == '\0')
		return 0;
	arg += arg[1] == '-' ? 2 : 1;
	size_t n = strcspn(arg, "=");
	if (n == 0 || n >= outlen)
		return 0;
	memcpy(out, arg, n);
	out[n] = '\0';
	return 1;
}

/* 0 if name is not in t; 2 if it is, as an option that takes a value;
 * else 1. */
static int in_table(const char *const *t, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(t[i]);
		char last = t[i][l - 1];
		if (last == '*' ? !strncmp(name, t[i], l - 1) :
		    last == '=' ? strlen(name) == l - 1 && !strncmp(name, t[i], l - 1) :
		    !strcmp(name, t[i]))
			return last == '=' ? 2 : 1;
	}
	return 0;
}

int llc_backend_option(const char *opt)
{
	char name[128];

	if (opt[0] != '-' || opt[1] == '-' || !opt_name(opt, name, sizeof name))
		return 0;
	return in_table(backend_opts, sizeof backend_opts / sizeof *backend_opts, name);
}

static void set_real(struct llc_cmd *cmd, const char *why, const char *arg)
{
	if (cmd->mode == LLC_REAL)
		return;
	cmd->mode = LLC_REAL;
	snprintf(cmd->why, sizeof cmd->why, "%s '%s'", why, arg);
}

/* The value of a job option: "-name=v", or "-name v" (advancing *i). */
static const char *job_value(int argc, char *const *argv, int *i, const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (eq)
		return eq + 1;
	if (*i + 1 >= argc)
		return NULL;
	return argv[++*i];
}

int llc_cmd_parse(int argc, char *const *argv, struct llc_cmd *cmd)
{
	char name[128];

	memset(cmd, 0, sizeof *cmd);
	cmd->mode = LLC_CACHEABLE;
	cmd->opt_level = 2;
	if (!(cmd->options = calloc((size_t)argc + 1, sizeof *cmd->options)))
		return -1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v;
		int backend;
		if (!strcmp(a, "--")) {
			set_real(cmd, "end of options", a);
			continue;
		}
		if (!opt_name(a, name, sizeof name)) {
			if (cmd->input)
				set_real(cmd, "a second input", a);
			cmd->input = a;
			continue;
		}
		if (!strcmp(name, "mtriple") || !strcmp(name, "march") ||
		    !strcmp(name, "mcpu") || !strcmp(name, "mattr") || !strcmp(name, "o") ||
		    !strcmp(name, "filetype") || !strcmp(name, "x")) {
			if (!(v = job_value(argc, argv, &i, a))) {
				set_real(cmd, "no value for", a);
				continue;
			}
			if (!strcmp(name, "mtriple"))
				cmd->triple = v;
			else if (!strcmp(name, "march"))
				cmd->march = v;
			else if (!strcmp(name, "o"))
				cmd->output = v;
			else if (!strcmp(name, "mcpu")) {
				if (!strcmp(v, "help"))
					set_real(cmd, "information option", a);
				cmd->cpu = v;
			} else if (!strcmp(name, "mattr")) {
				if (!strcmp(v, "help"))
					set_real(cmd, "information option", a);
				size_t old = cmd->features ? strlen(cmd->features) : 0;
				char *f = realloc(cmd->features, old + strlen(v) + 2);
				if (!f)
					return -1;
				if (old)
					f[old++] = ',';
				strcpy(f + old, v);
				cmd->features = f;
			} else if (!strcmp(name, "filetype")) {
				if (!strcmp(v, "null"))
					cmd->filetype_null = 1;
				else if (strcmp(v, "asm") != 0)
					set_real(cmd, "file type", a);
			} else if (strcmp(v, "ir") != 0) {      /* -x */
				set_real(cmd, "input language", a);
			}
		} else if (name[0] == 'O' && name[1] >= '0' && name[1] <= '3' && !name[2] &&
			   !strchr(a, '=')) {
			cmd->opt_level = name[1] - '0';
		} else if (in_table(info_opts, sizeof info_opts / sizeof *info_opts, name)) {
			set_real(cmd, "information option", a);
		} else if ((backend = in_table(backend_opts,
					       sizeof backend_opts / sizeof *backend_opts, name))) {
			if (backend == 2 && !strchr(a, '='))
				set_real(cmd, "value in the next argument for", a);
			/* "--x" and "-x" are one option: one spelling, one key. */
			cmd->options[cmd->noptions++] = a[1] == '-' ? a + 1 : a;
		} else {
			set_real(cmd, "option not modelled by the daemon", a);
		}
	}
	return 0;
}

void llc_cmd_free(struct llc_cmd *cmd)
{
	free(cmd->features);
	free(cmd->options);
	cmd->features = NULL;
	cmd->options = NULL;
}
