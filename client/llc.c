/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llc front: `ptxcache llc ARGS...`, a drop-in for LLVM 22's llc. The same
 * arguments give the same stdout, the same output file bytes and the same
 * exit status, or death by the same signal, as llc.
 *
 * The command line is read with proto/llc_args.c. One the daemon models
 * becomes a compile request; everything else runs the real llc, uncached,
 * with the arguments exactly as given: information options (--version,
 * --help, -mcpu=help), pipeline controls (-stop-after, -print-*), options
 * the table does not know, and every case where the daemon cannot answer
 * (not running, a request it refuses as invalid, a timeout, or nothing
 * heard from it for the silence bound, $PTXCACHE_SILENCE_MS: a daemon that
 * is stopped or stuck costs seconds, not the compile's timeout). The real llc
 * is $PTXCACHE_LLC, else LLVM 22's own (LLVM_BINDIR/llc, fixed at build
 * time); where there is none, a clear error names what needed it.
 *
 * How llc ends, and so how the front ends, for each answer:
 *   ok            diagnostics on stderr; output written (-o, else IN.s, or
 *                 stdout for stdin); exit 0
 *   parse error   "llc: error: llc: <diagnostic>"; no output; exit 1
 *   error         diagnostics; the output llc had opened is left with what
 *                 it held (often nothing); exit 1
 *   fatal         "LLVM ERROR: ..."; no output; death by SIGABRT
 *   fatal, exit   "LLVM ERROR: ..." (no crash diagnostics); no output; exit 1
 */
#include "client/llc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "client/autostart.h"
#include "client/front.h"
#include "client/ptxcache.h"
#include "proto/buf.h"
#include "proto/llc_args.h"

#ifndef LLVM_BINDIR
#define LLVM_BINDIR "/usr/lib/llvm-22/bin"
#endif

/* Set in the real llc's environment: seeing it, a "real" llc led back to
 * a front, and we must not go round again. */
#define GUARD_ENV "PTXCACHE_LLC_FRONT"

/* The real llc, or NULL. $PTXCACHE_LLC ("none": there is none), else
 * LLVM 22's own. */
static const char *find_real_llc(void)
{
	const char *e = getenv("PTXCACHE_LLC");

	if (e && *e)
		return strcmp(e, "none") && front_usable(e) ? e : NULL;
	return front_usable(LLVM_BINDIR "/llc") ? LLVM_BINDIR "/llc" : NULL;
}

/*
 * Hand the command to the real llc (why: what made us). If the front has
 * already read stdin, the real llc gets those bytes as its stdin. Returns
 * only when there is no real llc to run: the exit status, after an error.
 */
static int run_real(char **argv, const char *why, const struct buf *stdin_read)
{
	const char *real = find_real_llc();

	if (getenv(GUARD_ENV)) {
		fprintf(stderr, "llc: error: the llc found for ptxcache runs ptxcache again; "
			"set $PTXCACHE_LLC to LLVM's llc\n");
		return 1;
	}
	if (!real) {
		fprintf(stderr, "llc: error: %s: this needs LLVM's own llc, and none was "
			"found (set $PTXCACHE_LLC, or install LLVM 22 in %s)\n",
			why, LLVM_BINDIR);
		return 1;
	}
	if (getenv("PTXCACHE_DEBUG"))
		fprintf(stderr, "ptxcache: running %s: %s\n", real, why);
	if (stdin_read) {
		int fd = memfd_create("ptxcache-llc-stdin", MFD_CLOEXEC);
		if (fd < 0 || write(fd, stdin_read->data, stdin_read->len) != (ssize_t)stdin_read->len ||
		    lseek(fd, 0, SEEK_SET) < 0 || dup2(fd, STDIN_FILENO) < 0) {
			fprintf(stderr, "llc: error: cannot pass stdin on to %s: %s\n", real,
				strerror(errno));
			return 1;
		}
		close(fd);
	}
	front_exec(real, argv, GUARD_ENV);
	return 1;
}

/* Die of sig the way llc would, without a core file. */
static void die_of_signal(int sig)
{
	struct rlimit no = { 0, 0 };
	setrlimit(RLIMIT_CORE, &no);
	fflush(stdout);
	fflush(stderr);
	signal(sig, SIG_DFL);
	raise(sig);
	_exit(128 + sig);
}

/* llc's output path: -o, else "-" for stdin, else the input with .ll or
 * .bc replaced by .s. NULL for -filetype=null without -o (no file). */
static const char *output_path(const struct llc_cmd *cmd, struct buf *def)
{
	if (cmd->output)
		return cmd->output;
	if (cmd->filetype_null)
		return NULL;
	if (!cmd->input || !strcmp(cmd->input, "-"))
		return "-";
	size_t l = strlen(cmd->input);
	if (l > 3 && (!strcmp(cmd->input + l - 3, ".ll") || !strcmp(cmd->input + l - 3, ".bc")))
		l -= 3;
	buf_printf(def, "%.*s.s", (int)l, cmd->input);
	return def->data;
}

int cmd_llc(int argc, char **argv, const char *socket_path, int timeout_ms)
{
	struct llc_cmd cmd;
	struct ptxcache_compile_req req;
	struct ptxcache_result res;
	struct buf input = BUF_INIT, defout = BUF_INIT;
	char err[512];
	int rc = 1;

	if (getenv(GUARD_ENV) || llc_cmd_parse(argc - 1, argv + 1, &cmd) < 0)
		return run_real(argv, "out of memory", NULL);
	if (cmd.mode == LLC_REAL) {
		rc = run_real(argv, cmd.why, NULL);
		llc_cmd_free(&cmd);
		return rc;
	}
	const char *in = cmd.input ? cmd.input : "-";
	const char *name = strcmp(in, "-") ? in : NULL;
	if (front_read_file(in, &input) < 0) {
		/* llc's own words for a file it cannot read. */
		llc_cmd_free(&cmd);
		return run_real(argv, "an input the front cannot read", NULL);
	}

	ptxcache_compile_req_init(&req);
	req.strict = 0;
	req.input = input.data ? input.data : "";
	req.input_len = input.len;
	req.triple = cmd.triple;
	req.march = cmd.march;
	req.cpu = cmd.cpu;
	req.features = cmd.features;
	req.opt_level = cmd.opt_level;
	req.emit = !cmd.filetype_null;
	req.options = cmd.options;
	req.noptions = cmd.noptions;

	const char *stdin_note = name ? NULL : "stdin";
	ptxcache *pc = autostart_connect(socket_path, timeout_ms, err, sizeof err, NULL, NULL);
	if (!pc || ptxcache_compile(pc, &req, &res) < 0) {
		/* A cache that is down never fails a build. */
		if (pc)
			snprintf(err, sizeof err, "%s", ptxcache_errmsg(pc));
		ptxcache_close(pc);
		rc = run_real(argv, err, stdin_note ? &input : NULL);
		goto out;
	}
	ptxcache_close(pc);

	const char *out = output_path(&cmd, &defout);
	switch (res.status) {
	case PTXCACHE_OK:
		front_print_log(res.log, res.log_len, name);
		if (out && front_write_file(out, res.output, cmd.filetype_null ? 0 : res.output_len) < 0) {
			fprintf(stderr, "llc: error: cannot write '%s': %s\n", out, strerror(errno));
			break;
		}
		rc = 0;
		break;
	case PTXCACHE_PARSE_ERROR:
		fputs("llc: error: llc: ", stderr);
		front_print_log(res.log, res.log_len, name);
		break;
	case PTXCACHE_ERROR:
		/* llc had opened its output: it keeps what it wrote, if only
		 * an empty file. */
		front_print_log(res.log, res.log_len, name);
		if (out)
			front_write_file(out, res.output, cmd.filetype_null ? 0 : res.output_len);
		break;
	case PTXCACHE_FATAL:
		front_print_log(res.log, res.log_len, name);
		die_of_signal(SIGABRT);
		break;
	case PTXCACHE_FATAL_EXIT:
		front_print_log(res.log, res.log_len, name);
		break;
	case PTXCACHE_CRASH:
		front_print_log(res.log, res.log_len, name);
		fputc('\n', stderr);
		die_of_signal(SIGSEGV);
		break;
	default:
		/* Refused as invalid (a command line the daemon does not take
		 * as llc would), timed out, or unavailable: llc answers. */
		snprintf(err, sizeof err, "%.*s", (int)res.log_len, res.log ? res.log : "");
		ptxcache_result_free(&res);
		rc = run_real(argv, err, stdin_note ? &input : NULL);
		goto out;
	}
	ptxcache_result_free(&res);
out:
	buf_free(&input);
	buf_free(&defout);
	llc_cmd_free(&cmd);
	return rc;
}
