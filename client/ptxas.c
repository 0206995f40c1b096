/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxas front: `ptxcache ptxas ARGS...`, or the same binary under the name
 * `ptxas` (a symlink), for Triton (TRITON_PTXAS_PATH), CUDA.jl and clang
 * (--ptxas-path).
 *
 * A command line ptxas_args.c knows to be safe (one PTX file, known
 * options) goes to the daemon as a cubin request; the front writes the
 * cubin where ptxas would (-o, else elf.o), replays the log ptxas printed
 * on stderr with the client's input path put back, and exits with ptxas's
 * exit status. `--version` prints the daemon's ptxas text byte for byte
 * (Triton parses it and hashes it into its own cache key), so it always
 * names the assembler that made the cubins.
 *
 * Everything else runs the real ptxas itself, with the arguments exactly as
 * given: options we do not know, -g (its debug info names the input path),
 * and every case where the daemon cannot answer (not running, no ptxas of
 * its own, timed out, silent for the silence bound, the assembler
 * crashed). A cache that is down must
 * never fail a build, and an answer we are not sure of is worse than none.
 *
 * Never: guess at an unknown option, write a partial output file, or run
 * itself in a loop (the real ptxas is found skipping this very binary, and
 * a guard variable stops a second hop).
 */
#include "client/ptxas.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/autostart.h"
#include "client/front.h"
#include "client/ptxcache.h"
#include "proto/buf.h"
#include "proto/ptxas_args.h"

/* Set in the real ptxas's environment: if we see it, a "real" ptxas led
 * back to us, and we must not go round again. */
#define GUARD_ENV "PTXCACHE_PTXAS_FRONT"
/* The assembler may take long on a large kernel; the daemon's own job
 * limit (120 s by default) comes first. A daemon that acknowledges the
 * request keeps sending progress and is waited for while it does; one
 * that says nothing for the silence bound ($PTXCACHE_SILENCE_MS, 5 s) is
 * given up on, and the real ptxas runs (libptxcache). */
#define FRONT_TIMEOUT_MS (300 * 1000)

/* The real ptxas, found as the daemon finds it ($PTXCACHE_PTXAS,
 * $CUDA_HOME/bin, $PTXCACHE_DEFAULT_CUDA or /usr/local/cuda /bin, PATH),
 * skipping this binary. Returns a malloc'd path, or NULL. */
static char *find_real_ptxas(void)
{
	const char *e, *def;
	char *p = NULL;

	if ((e = getenv("PTXCACHE_PTXAS")) && *e && strcmp(e, "none") != 0 &&
	    front_usable(e))
		return strdup(e);
	def = getenv("PTXCACHE_DEFAULT_CUDA");
	const char *roots[] = { getenv("CUDA_HOME"), def ? def : "/usr/local/cuda" };
	for (size_t i = 0; i < 2; i++) {
		if (!roots[i] || !*roots[i] || asprintf(&p, "%s/bin/ptxas", roots[i]) < 0)
			continue;
		if (front_usable(p))
			return p;
		free(p);
	}
	if (!(e = getenv("PATH")))
		return NULL;
	for (const char *d = e; *d;) {
		size_t n = strcspn(d, ":");
		if (n && asprintf(&p, "%.*s/ptxas", (int)n, d) >= 0) {
			if (front_usable(p))
				return p;
			free(p);
		}
		d += n + (d[n] == ':');
	}
	return NULL;
}

/* Run the real ptxas with argv[1..] as given; returns only on failure. */
static int exec_real(char **argv)
{
	char *real;

	if (getenv(GUARD_ENV)) {
		fprintf(stderr, "ptxcache: the ptxas found for '%s' runs ptxcache "
			"again; set $PTXCACHE_PTXAS to the real ptxas\n", argv[0]);
		return 255;
	}
	real = find_real_ptxas();
	if (!real) {
		fprintf(stderr, "ptxcache: cannot find the real ptxas (set "
			"$PTXCACHE_PTXAS or CUDA_HOME)\n");
		return 255;
	}
	front_exec(real, argv, GUARD_ENV);
	free(real);
	return 255;
}

/* The log as ptxas printed it: the daemon's "<input>" is our input path. */
static void replay_log(const char *log, size_t len, const char *input)
{
	static const char tag[] = "<input>";
	const char *p = log, *end = log + len, *hit;

	while (p < end && (hit = memmem(p, (size_t)(end - p), tag, sizeof tag - 1))) {
		fwrite(p, 1, (size_t)(hit - p), stderr);
		fputs(input, stderr);
		p = hit + sizeof tag - 1;
	}
	fwrite(p, 1, (size_t)(end - p), stderr);
	fflush(stderr);
}

/*
 * The source files the PTX's .file directives name, as this process sees
 * them: with line info, ptxas copies each one's mtime and size into the
 * cubin, so they belong in the key (daemon/cubin.h). A directive that gives
 * them itself needs no stat. Returns 0, or -1 for a relative path (it
 * depends on the cwd, which the daemon's ptxas does not share).
 */
int ptxas_source_stamps(const struct buf *ptx, struct buf *out)
{
	const char *p = ptx->data, *end = ptx->data + ptx->len;

	while (p && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *line_end = nl ? nl : end, *q = p;
		while (q < line_end && (*q == ' ' || *q == '\t'))
			q++;
		if (line_end - q > 6 && !memcmp(q, ".file", 5) && (q[5] == ' ' || q[5] == '\t')) {
			const char *a = memchr(q, '"', (size_t)(line_end - q));
			const char *b = a ? memchr(a + 1, '"', (size_t)(line_end - a - 1)) : NULL;
			const char *rest = b ? b + 1 : line_end;
			while (rest < line_end && (*rest == ' ' || *rest == '\t'))
				rest++;
			if (a && b && (rest == line_end || *rest != ',')) {
				char path[4096];
				struct stat st;
				size_t n = (size_t)(b - a - 1);
				if (n == 0 || n >= sizeof path || a[1] != '/')
					return -1;
				memcpy(path, a + 1, n);
				path[n] = '\0';
				if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
					buf_printf(out, "%s\t%lld:%lld\n", path, (long long)st.st_mtime,
						   (long long)st.st_size);
				else
					buf_printf(out, "%s\t-\n", path);
			}
		}
		p = nl ? nl + 1 : NULL;
	}
	return 0;
}

static int version(char **argv)
{
	char err[256], *text = NULL;
	ptxcache *pc = autostart_connect(NULL, 2000, err, sizeof err, NULL, NULL);

	if (!pc || ptxcache_assembler_version(pc, &text) < 0) {
		ptxcache_close(pc);
		return exec_real(argv);
	}
	ptxcache_close(pc);
	fputs(text, stdout);
	free(text);
	return fflush(stdout) == 0 ? 0 : 255;
}

/* The cubin request for a parsed command line and its input. */
static void assemble_req(struct ptxcache_assemble_req *req, const struct ptxas_cmd *cmd,
			 const struct buf *ptx, const struct buf *stamps)
{
	ptxcache_assemble_req_init(req);
	req->input = ptx->data ? ptx->data : "";
	req->input_len = ptx->len;
	req->args = (const char *const *)cmd->args;
	req->nargs = cmd->nargs;
	req->sources = stamps->len ? stamps->data : NULL;
}

int ptxas_explain(int argc, char **argv, char **json, char *err, size_t errlen)
{
	struct ptxas_cmd cmd;
	struct buf ptx = BUF_INIT, stamps = BUF_INIT;
	struct ptxcache_assemble_req req;
	ptxcache *pc = NULL;
	int rc = -1;

	if (ptxas_cmd_parse(argc, argv, &cmd) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (cmd.mode != PTXAS_CACHEABLE) {
		snprintf(err, errlen, "this ptxas call is not cached: %s",
			 cmd.mode == PTXAS_VERSION ? "--version" : cmd.why);
	} else if (front_read_file(cmd.input, &ptx) < 0) {
		snprintf(err, errlen, "cannot read '%s': %s", cmd.input, strerror(errno));
	} else if (ptxas_source_stamps(&ptx, &stamps) < 0) {
		snprintf(err, errlen, "a .file directive names a relative path: not cached");
	} else if ((pc = autostart_connect(NULL, 2000, err, errlen, NULL, NULL))) {
		assemble_req(&req, &cmd, &ptx, &stamps);
		rc = ptxcache_explain_assemble(pc, &req, json);
		if (rc < 0)
			snprintf(err, errlen, "%s", ptxcache_errmsg(pc));
	}
	ptxcache_close(pc);
	buf_free(&ptx);
	buf_free(&stamps);
	ptxas_cmd_free(&cmd);
	return rc;
}

int cmd_ptxas(int argc, char **argv)
{
	struct ptxas_cmd cmd;
	struct buf ptx = BUF_INIT;
	struct ptxcache_assemble_req req;
	struct ptxcache_result res;
	char err[256];
	ptxcache *pc;
	int rc;

	if (getenv(GUARD_ENV) || ptxas_cmd_parse(argc - 1, argv + 1, &cmd) < 0)
		return exec_real(argv);
	if (cmd.mode == PTXAS_VERSION)
		return version(argv);
	if (cmd.mode != PTXAS_CACHEABLE) {
		if (getenv("PTXCACHE_DEBUG"))
			fprintf(stderr, "ptxcache: running the real ptxas: %s\n", cmd.why);
		ptxas_cmd_free(&cmd);
		return exec_real(argv);
	}
	/* Whatever goes wrong on our side, the real ptxas says it better. */
	struct buf stamps = BUF_INIT;
	if (front_read_file(cmd.input, &ptx) < 0 || ptxas_source_stamps(&ptx, &stamps) < 0 ||
	    !(pc = autostart_connect(NULL, 2000, err, sizeof err, NULL, NULL))) {
		buf_free(&ptx);
		buf_free(&stamps);
		ptxas_cmd_free(&cmd);
		return exec_real(argv);
	}
	ptxcache_set_timeout(pc, FRONT_TIMEOUT_MS);
	assemble_req(&req, &cmd, &ptx, &stamps);
	rc = ptxcache_assemble(pc, &req, &res);
	ptxcache_close(pc);
	buf_free(&ptx);
	buf_free(&stamps);
	if (rc < 0 || (res.status != PTXCACHE_OK && res.status != PTXCACHE_ERROR)) {
		if (getenv("PTXCACHE_DEBUG"))
			fprintf(stderr, "ptxcache: running the real ptxas: %s\n",
				rc < 0 ? "the daemon did not answer" :
				res.log ? res.log : "the daemon could not assemble");
		if (rc == 0)
			ptxcache_result_free(&res);
		ptxas_cmd_free(&cmd);
		return exec_real(argv);
	}
	if (res.status == PTXCACHE_OK &&
	    front_write_file(cmd.output ? cmd.output : "elf.o", res.output,
			 res.output_len) < 0) {
		ptxcache_result_free(&res);
		ptxas_cmd_free(&cmd);
		return exec_real(argv);
	}
	replay_log(res.log ? res.log : "", res.log_len, cmd.input);
	rc = res.status == PTXCACHE_OK ? 0 : res.exit_code ? res.exit_code : 255;
	ptxcache_result_free(&res);
	ptxas_cmd_free(&cmd);
	return rc;
}
