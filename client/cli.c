/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxcache: the command-line client, on libptxcache alone (no LLVM).
 *
 *   ptxcache [--socket PATH] [--timeout SECS] [--silence SECS] COMMAND [ARGS...]
 *
 * Commands are a table (name, handler, summary). `ptxcache llc ARGS` is a
 * drop-in for LLVM 22's llc: the same arguments, the same output bytes, the
 * same exit status, and death by the same signal where llc would abort.
 * Exit status 0 on success; otherwise non-zero with a one-line message on
 * stderr. No command waits without a timeout, and none waits on a daemon
 * that says nothing for the silence bound (one that keeps sending progress
 * for a compile is waited for, up to the timeout).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "client/front.h"
#include "client/artifact.h"
#include "client/autostart.h"
#include "client/llc.h"
#include "client/ptxas.h"
#include "client/ptxcache.h"
#include "proto/buf.h"

static const char *socket_path;        /* --socket, else the library's rules */
static int timeout_ms = 300 * 1000;    /* above the daemon's job timeout */
static const char *prog = "ptxcache";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static ptxcache *connect_or_die(void)
{
	char err[512];
	ptxcache *pc = ptxcache_connect(socket_path, timeout_ms, err, sizeof err);
	if (!pc)
		die("%s", err);
	return pc;
}

/* Read a whole file ("-" = stdin). */
/* Read a whole file ("-" = stdin), or die saying why. */
static void read_input(const char *path, struct buf *out)
{
	if (front_read_file(path, out) < 0)
		die("cannot read '%s': %s", path, strerror(errno));
}

/* ---- options ---------------------------------------------------------- */

/* The value of "-name=value" or "-name value" when arg is -name or --name;
 * NULL if arg is another option. Advances *i past a separate value. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
	const char *a = argv[*i];
	size_t n = strlen(name);

	if (a[0] != '-')
		return NULL;
	a += a[1] == '-' ? 2 : 1;
	if (strncmp(a, name, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc)
		die("option '%s' needs a value", argv[*i]);
	return argv[++*i];
}

static int run_llc(int argc, char **argv)
{
	prog = "llc";
	return cmd_llc(argc, argv, socket_path, timeout_ms);
}

/* ---- compile --------------------------------------------------------- */

static void json_str(FILE *f, const char *s, size_t n)
{
	struct buf b = BUF_INIT;

	if (buf_json_str(&b, s, n) == 0)
		fwrite(b.data, 1, b.len, f);
	buf_free(&b);
}

static const char *const status_names[] = {
	"ok", "parse_error", "error", "invalid", "fatal", "crash", "timeout", "unavailable",
	"fatal_exit",
};

static const char compile_usage[] =
	"usage: ptxcache compile [options] IN\n"
	"\n"
	"Compile LLVM IR (text or bitcode; '-' for stdin) to PTX through the daemon.\n"
	"\n"
	"  --arch SM          target GPU (default sm_90a)\n"
	"  --ptx-isa N        PTX ISA version as LLVM's +ptxN feature (e.g. 90)\n"
	"  --mattr LIST       further target features (+a,-b)\n"
	"  --triple T         override the module's triple (default: keep it; it must\n"
	"                     be an NVPTX triple; none means nvptx64-nvidia-cuda)\n"
	"  -O0..-O3           codegen level (default -O3)\n"
	"  --pipeline P       run a middle-end pipeline first (e.g. 'default<O3>')\n"
	"  --option OPT       a backend option, e.g. -nvptx-fma-level=1 (repeatable)\n"
	"  -o OUT             write the PTX (or cubin) here (default stdout)\n"
	"  --cubin            go on to a cubin: ptxas --gpu-name=SM on the PTX, each\n"
	"                     stage cached (an IN ending in .ptx is taken as PTX)\n"
	"  --backend B        the assembler for --cubin: ptxas (default) or nvjitlink\n"
	"  --json             print a JSON summary instead of the PTX\n";

/* What compile, explain and warm share: the request and how to read it. */
struct compile_args {
	struct ptxcache_compile_req req;
	const char *arch, *isa;
	struct buf feats;
	const char **opts;
};

static void compile_args_init(struct compile_args *ca, int argc)
{
	memset(ca, 0, sizeof *ca);
	ptxcache_compile_req_init(&ca->req);
	ca->req.opt_level = 3;
	ca->arch = "sm_90a";
	ca->opts = calloc((size_t)argc + 1, sizeof *ca->opts);
	if (!ca->opts)
		die("out of memory");
}

/* Consume argv[*i] if it is a compile option: 1 if it was, else 0. */
static int compile_option(struct compile_args *ca, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;

	if ((v = opt_value(argc, argv, i, "arch")))
		ca->arch = v;
	else if ((v = opt_value(argc, argv, i, "ptx-isa")))
		ca->isa = v;
	else if ((v = opt_value(argc, argv, i, "mattr"))) {
		if (ca->feats.len)
			buf_puts(&ca->feats, ",");
		buf_puts(&ca->feats, v);
	} else if ((v = opt_value(argc, argv, i, "triple")))
		ca->req.triple = v;
	else if ((v = opt_value(argc, argv, i, "pipeline")))
		ca->req.pipeline = v;
	else if ((v = opt_value(argc, argv, i, "option")))
		ca->opts[ca->req.noptions++] = v;
	else if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3])
		ca->req.opt_level = a[2] - '0';
	else
		return 0;
	return 1;
}

/* Finish the request once all options are read. */
static void compile_args_done(struct compile_args *ca)
{
	if (ca->isa) {
		char *end;
		long n = strtol(ca->isa, &end, 10);
		if (*end || n < 10 || n > 999)
			die("bad --ptx-isa '%s' (e.g. 90 for PTX ISA 9.0)", ca->isa);
		struct buf f = BUF_INIT;
		buf_printf(&f, "+ptx%ld%s%s", n, ca->feats.len ? "," : "",
			   ca->feats.len ? ca->feats.data : "");
		buf_free(&ca->feats);
		ca->feats = f;
	}
	ca->req.cpu = ca->arch;
	ca->req.features = ca->feats.len ? ca->feats.data : NULL;
	ca->req.options = ca->opts;
}

/* compile --cubin: IR (or PTX, for an IN ending in .ptx) through both
 * stages, each cached; ptxas gets --gpu-name=ARCH. */
static int compile_cubin(struct compile_args *ca, const char *in, const struct buf *input,
			 const char *out, int json, const char *backend)
{
	struct ptxcache_assemble_req req;
	struct ptxcache_result res;
	struct buf gpu = BUF_INIT;
	const char *args[1];
	size_t l = strlen(in);

	ptxcache_assemble_req_init(&req);
	req.input = input->data;
	req.input_len = input->len;
	if (!(l > 4 && !strcmp(in + l - 4, ".ptx")))
		req.ir = &ca->req;
	buf_printf(&gpu, "--gpu-name=%s", ca->arch);
	args[0] = gpu.data;
	req.args = args;
	req.nargs = 1;
	if (backend && !strcmp(backend, "nvjitlink"))
		req.backend = PTXCACHE_BACKEND_NVJITLINK;
	else if (backend && strcmp(backend, "ptxas") != 0)
		die("unknown --backend '%s' (ptxas or nvjitlink)", backend);

	ptxcache *pc = connect_or_die();
	if (ptxcache_assemble(pc, &req, &res) < 0)
		die("%s", ptxcache_errmsg(pc));
	ptxcache_close(pc);
	if (res.status == PTXCACHE_OK && front_write_file(out ? out : "-", res.output, res.output_len) < 0)
		die("cannot write '%s': %s", out ? out : "the output", strerror(errno));
	if (json) {
		printf("{\"status\":\"%s\",\"cached\":%s,\"key\":\"%s\",\"output_bytes\":%zu,"
		       "\"compile_us\":%lld,\"exit_code\":%d,\"log\":",
		       status_names[res.status], res.cached ? "true" : "false", res.key,
		       res.output_len, (long long)res.compile_us, res.exit_code);
		json_str(stdout, res.log ? res.log : "", res.log_len);
		puts("}");
	} else if (res.log_len) {
		fwrite(res.log, 1, res.log_len, stderr);
	}
	buf_free(&gpu);
	if (res.status != PTXCACHE_OK) {
		fprintf(stderr, "ptxcache: compile of '%s' to cubin failed (%s)\n", in,
			status_names[res.status]);
		ptxcache_result_free(&res);
		return 1;
	}
	ptxcache_result_free(&res);
	return 0;
}

static int cmd_compile(int argc, char **argv)
{
	struct compile_args ca;
	struct buf input = BUF_INIT;
	const char *in = NULL, *out = NULL, *v, *backend = NULL;
	int json = 0, cubin = 0;

	compile_args_init(&ca, argc);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (compile_option(&ca, argc, argv, &i))
			continue;
		if ((v = opt_value(argc, argv, &i, "o")))
			out = v;
		else if (!strcmp(a, "--json"))
			json = 1;
		else if (!strcmp(a, "--cubin"))
			cubin = 1;
		else if ((v = opt_value(argc, argv, &i, "backend")))
			backend = v;
		else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(compile_usage, stdout);
			return 0;
		} else if (!strcmp(a, "-") || a[0] != '-') {
			if (in)
				die("compile takes one input, got '%s' and '%s'", in, a);
			in = a;
		} else
			die("unknown compile option '%s' (see 'ptxcache compile --help')", a);
	}
	if (!in)
		die("compile needs an input file (see 'ptxcache compile --help')");
	compile_args_done(&ca);
	read_input(in, &input);
	ca.req.input = input.data;
	ca.req.input_len = input.len;
	if (cubin)
		return compile_cubin(&ca, in, &input, out, json, backend);

	ptxcache *pc = connect_or_die();
	struct ptxcache_result res;
	if (ptxcache_compile(pc, &ca.req, &res) < 0)
		die("%s", ptxcache_errmsg(pc));
	ptxcache_close(pc);

	const char *name = strcmp(in, "-") ? in : NULL;
	if (res.status == PTXCACHE_OK && out && front_write_file(out, res.output, res.output_len) < 0)
		die("cannot write '%s': %s", out, strerror(errno));
	if (json) {
		printf("{\"status\":\"%s\",\"cached\":%s,\"key\":\"%s\",\"output_bytes\":%zu,"
		       "\"compile_us\":%lld,\"log\":",
		       status_names[res.status], res.cached ? "true" : "false", res.key,
		       res.output_len, (long long)res.compile_us);
		json_str(stdout, res.log ? res.log : "", res.log_len);
		if (!out && res.output) {
			fputs(",\"ptx\":", stdout);
			json_str(stdout, res.output, res.output_len);
		}
		puts("}");
	} else if (res.status == PTXCACHE_OK && !out &&
		   front_write_file("-", res.output, res.output_len) < 0) {
		die("cannot write the output: %s", strerror(errno));
	}
	if (res.status != PTXCACHE_OK) {
		if (!json)
			front_print_log(res.log, res.log_len, name);
		if (!json && res.log_len && res.log[res.log_len - 1] != '\n')
			fputc('\n', stderr);
		fprintf(stderr, "ptxcache: compile of '%s' failed (%s)\n", in,
			status_names[res.status]);
		return 1;
	}
	if (res.log_len && !json)
		front_print_log(res.log, res.log_len, name);
	ptxcache_result_free(&res);
	return 0;
}

/* ---- queries and maintenance ----------------------------------------- */

/* Print the daemon's JSON answer as it is (--json) or through show(). */
static int answer(ptxcache *pc, int rc, char *json, int as_json,
		  void (*show)(json_object *))
{
	if (rc < 0)
		die("%s", ptxcache_errmsg(pc));
	ptxcache_close(pc);
	if (as_json || !show) {
		puts(json);
	} else {
		json_object *o = json_tokener_parse(json);
		if (!o)
			die("malformed answer from the daemon");
		show(o);
		json_object_put(o);
	}
	free(json);
	return 0;
}

static const char *jstr(json_object *o, const char *key)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return "-";
	return json_object_get_string(v);
}

static int64_t jint(json_object *o, const char *key)
{
	json_object *v;
	return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

/* "1.5M", "3d": human sizes and ages. */
static const char *human_size(int64_t n, char *buf, size_t len)
{
	const char *u = "BKMGT";
	double v = (double)n;
	while (v >= 1024 && u[1]) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, *u == 'B' ? "%.0f%c" : "%.1f%c", v, *u);
	return buf;
}

static const char *human_age(int64_t t, char *buf, size_t len)
{
	int64_t d = (int64_t)time(NULL) - t;
	if (d < 120)
		snprintf(buf, len, "%llds", (long long)d);
	else if (d < 7200)
		snprintf(buf, len, "%lldm", (long long)d / 60);
	else if (d < 172800)
		snprintf(buf, len, "%lldh", (long long)d / 3600);
	else
		snprintf(buf, len, "%lldd", (long long)d / 86400);
	return buf;
}

/* An artifact's namespace or scope, from its components. */
static const char *artifact_part(json_object *e, const char *name)
{
	json_object *comp;

	if (!json_object_object_get_ex(e, "components", &comp) ||
	    !json_object_is_type(comp, json_type_object))
		return "";
	return jstr(comp, name);
}

/* Entries as a table. Artifacts have no target: they show their
 * namespace and scope (the uid or group that may read them) instead, in
 * columns of their own when the list holds nothing else. */
static void show_ls(json_object *arr)
{
	char a[32], b[32], c[32], where[96];
	size_t n = json_object_array_length(arr), arts = 0;

	for (size_t i = 0; i < n; i++)
		arts += !strcmp(jstr(json_object_array_get_idx(arr, i), "kind"), "artifact");
	int only = n && arts == n;
	if (only)
		printf("%-16s %-8s %-16s %-8s %-6s %8s %8s %6s %6s\n", "KEY", "KIND", "NAMESPACE",
		       "SCOPE", "STATUS", "SIZE", "STORED", "HITS", "USED");
	else
		printf("%-16s %-5s %-8s %-6s %8s %8s %6s %6s\n", "KEY", "KIND", "ARCH", "STATUS",
		       "SIZE", "STORED", "HITS", "USED");
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(arr, i);
		int art = !strcmp(jstr(e, "kind"), "artifact");
		if (only)
			printf("%-16.16s %-8s %-16s %-8s ", jstr(e, "key"), jstr(e, "kind"),
			       artifact_part(e, "namespace"), artifact_part(e, "scope"));
		else {
			snprintf(where, sizeof where, "%s%s%s", art ? artifact_part(e, "namespace") :
				 jstr(e, "arch"), art ? "/" : "", art ? artifact_part(e, "scope") : "");
			printf("%-16.16s %-5s %-8s ", jstr(e, "key"), jstr(e, "kind"), where);
		}
		printf("%-6s %8s %8s %6lld %6s\n", jint(e, "status") ? "error" : "ok",
		       human_size(jint(e, "data_len"), a, sizeof a),
		       human_size(jint(e, "stored_bytes"), b, sizeof b),
		       (long long)jint(e, "hits"), human_age(jint(e, "last_used"), c, sizeof c));
	}
}

static void show_object(json_object *o)
{
	json_object_object_foreach(o, k, v) {
		if (json_object_is_type(v, json_type_object)) {
			printf("%s:\n", k);
			json_object_object_foreach(v, k2, v2)
				printf("  %-20s %s\n", k2, json_object_get_string(v2));
		} else {
			printf("%-22s %s\n", k, json_object_get_string(v));
		}
	}
}

static void show_explain(json_object *o)
{
	json_object *near, *diff, *v;

	printf("key %s: %s\n", jstr(o, "key"),
	       json_object_object_get_ex(o, "cached", &v) && json_object_get_boolean(v) ?
	       "cached (this request is a hit)" : "not cached (this request would compile)");
	if (!json_object_object_get_ex(o, "nearest", &near) || !near)
		return;
	printf("nearest entry: %s\n", jstr(near, "key"));
	if (json_object_object_get_ex(near, "differing", &diff))
		for (size_t i = 0; i < json_object_array_length(diff); i++) {
			json_object *d = json_object_array_get_idx(diff, i);
			printf("  %-14s stored: %s\n  %-14s requested: %s\n", jstr(d, "name"),
			       jstr(d, "stored"), "", jstr(d, "requested"));
		}
}

static void show_verify(json_object *o)
{
	json_object *rep;

	if (json_object_object_get_ex(o, "report", &rep))
		for (size_t i = 0; i < json_object_array_length(rep); i++)
			puts(json_object_get_string(json_object_array_get_idx(rep, i)));
	printf("%lld problems found\n", (long long)jint(o, "problems"));
}

static void show_evict(json_object *o)
{
	char a[32];
	printf("removed %lld entries; %lld entries (%s) remain\n", (long long)jint(o, "removed"),
	       (long long)jint(o, "entries"), human_size(jint(o, "bytes"), a, sizeof a));
}

/* "30d", "12h", "90m", "45s" or plain seconds. */
static int64_t parse_age(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	int64_t mul = 1;
	switch (*end) {
	case 'd': mul = 86400; end++; break;
	case 'h': mul = 3600; end++; break;
	case 'm': mul = 60; end++; break;
	case 's': end++; break;
	}
	if (*end || end == s || v < 0)
		die("bad age '%s' (e.g. 30d, 12h, 90m)", s);
	return (int64_t)(v * (double)mul);
}

static int64_t parse_bytes(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	int64_t mul = 1;
	switch (*end) {
	case 'K': case 'k': mul = 1 << 10; end++; break;
	case 'M': case 'm': mul = 1 << 20; end++; break;
	case 'G': case 'g': mul = 1 << 30; end++; break;
	}
	if (*end || end == s || v < 0)
		die("bad size '%s' (e.g. 512M, 10G)", s);
	return (int64_t)(v * (double)mul);
}

/* Filter options shared by ls and evict. 1 if argv[*i] was one. */
static const char *filter_ns;   /* --namespace: artifacts of one namespace */
static int filter_option(struct ptxcache_filter *f, int argc, char **argv, int *i)
{
	const char *v;

	if ((v = opt_value(argc, argv, i, "kind")))
		f->kind = v;
	else if ((v = opt_value(argc, argv, i, "namespace")))
		filter_ns = v;
	else if ((v = opt_value(argc, argv, i, "arch")))
		f->arch = v;
	else if ((v = opt_value(argc, argv, i, "older-than")))
		f->older_than_s = parse_age(v);
	else if ((v = opt_value(argc, argv, i, "min-size")))
		f->min_bytes = parse_bytes(v);
	else
		return 0;
	return 1;
}

static int cmd_ls(int argc, char **argv)
{
	struct ptxcache_filter f = { 0 };
	int json = 0, limit = 100;
	const char *v;
	char *out;

	for (int i = 1; i < argc; i++) {
		if (filter_option(&f, argc, argv, &i))
			continue;
		if ((v = opt_value(argc, argv, &i, "limit")))
			limit = atoi(v);
		else if (!strcmp(argv[i], "--json"))
			json = 1;
		else
			die("usage: ptxcache ls [--kind ptx|cubin|artifact] [--namespace NS] "
			    "[--arch SM] [--older-than AGE] [--min-size SIZE] [--limit N] [--json]");
	}
	ptxcache *pc = connect_or_die();
	int rc = ptxcache_ls_ns(pc, &f, filter_ns, limit, &out);
	return answer(pc, rc, out, json, show_ls);
}

static int cmd_show(int argc, char **argv)
{
	int json = argc > 2 && !strcmp(argv[2], "--json");
	char *out;

	if (argc < 2 || argc > 3 || (argc == 3 && !json))
		die("usage: ptxcache show KEY [--json]");
	ptxcache *pc = connect_or_die();
	int rc = ptxcache_show(pc, argv[1], &out);
	return answer(pc, rc, out, json, show_object);
}

static int cmd_explain(int argc, char **argv)
{
	struct compile_args ca;
	struct buf input = BUF_INIT;
	const char *in = NULL;
	int json = 0;
	char *out;

	/* explain [--json] --ptxas ARGS: the cubin stage of a ptxas call */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ptxas")) {
			char err[512];
			json = i > 1 && !strcmp(argv[1], "--json");
			if (i != 1 + json)
				die("usage: ptxcache explain [--json] --ptxas PTXAS-ARGS...");
			if (ptxas_explain(argc - i - 1, argv + i + 1, &out, err, sizeof err) < 0)
				die("%s", err);
			json_object *o = json_tokener_parse(out);
			if (!o)
				die("the daemon's answer is not JSON");
			if (json)
				puts(out);
			else
				show_explain(o);
			json_object_put(o);
			free(out);
			return 0;
		}
	}
	compile_args_init(&ca, argc);
	for (int i = 1; i < argc; i++) {
		if (compile_option(&ca, argc, argv, &i))
			continue;
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if ((!strcmp(argv[i], "-") || argv[i][0] != '-') && !in)
			in = argv[i];
		else
			die("usage: ptxcache explain IN [compile options] [--json]");
	}
	if (!in)
		die("usage: ptxcache explain IN [compile options] [--json]");
	compile_args_done(&ca);
	read_input(in, &input);
	ca.req.input = input.data;
	ca.req.input_len = input.len;
	ptxcache *pc = connect_or_die();
	int rc = ptxcache_explain(pc, &ca.req, &out);
	return answer(pc, rc, out, json, show_explain);
}

static int cmd_verify(int argc, char **argv)
{
	int json = argc > 1 && !strcmp(argv[1], "--json");
	char *out;
	ptxcache *pc = connect_or_die();
	int rc = ptxcache_verify(pc, &out);

	if (rc == 0) {
		json_object *o = json_tokener_parse(out);
		int bad = !o || jint(o, "problems") != 0;
		json_object_put(o);
		answer(pc, rc, out, json, show_verify);
		return bad;
	}
	return answer(pc, rc, NULL, json, NULL);
}

static int cmd_evict(int argc, char **argv)
{
	struct ptxcache_filter f = { 0 };
	int64_t max = -1;
	int json = 0;
	const char *v;
	char *out;

	for (int i = 1; i < argc; i++) {
		if (filter_option(&f, argc, argv, &i))
			continue;
		if ((v = opt_value(argc, argv, &i, "max-size")))
			max = parse_bytes(v);
		else if (!strcmp(argv[i], "--json"))
			json = 1;
		else
			die("usage: ptxcache evict [--older-than AGE] [--max-size SIZE] [--arch SM] "
			    "[--kind ptx|cubin|artifact] [--namespace NS] [--json]");
	}
	ptxcache *pc = connect_or_die();
	int rc = ptxcache_evict_ns(pc, &f, filter_ns, max, 0, &out);
	return answer(pc, rc, out, json, show_evict);
}

/* purge: every entry, or with --kind / --namespace every entry of those. */
static int cmd_purge(int argc, char **argv)
{
	struct ptxcache_filter f = { 0 };
	int json = 0;
	char *out;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!filter_option(&f, argc, argv, &i) || f.arch || f.older_than_s ||
			 f.min_bytes)
			die("usage: ptxcache purge [--kind ptx|cubin|artifact] [--namespace NS] [--json]");
	}
	int all = !f.kind && !filter_ns;
	ptxcache *pc = connect_or_die();
	int rc = ptxcache_evict_ns(pc, all ? NULL : &f, filter_ns, -1, all, &out);
	return answer(pc, rc, out, json, show_evict);
}

/* ---- warm ------------------------------------------------------------ */

/* Collect .ll and .bc files under path into list. */
static void collect(const char *path, struct buf *list)
{
	struct stat st;

	if (stat(path, &st) < 0)
		die("cannot read '%s': %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		buf_append(list, path, strlen(path) + 1);
		return;
	}
	struct dirent **names;
	int n = scandir(path, &names, NULL, alphasort);
	if (n < 0)
		die("cannot read '%s': %s", path, strerror(errno));
	for (int i = 0; i < n; i++) {
		const char *d = names[i]->d_name;
		size_t l = strlen(d);
		char sub[4096];
		if (d[0] != '.') {
			snprintf(sub, sizeof sub, "%s/%s", path, d);
			if (names[i]->d_type == DT_DIR ||
			    (l > 3 && (!strcmp(d + l - 3, ".ll") || !strcmp(d + l - 3, ".bc"))))
				collect(sub, list);
		}
		free(names[i]);
	}
	free(names);
}

static int cmd_warm(int argc, char **argv)
{
	struct compile_args ca;
	struct buf list = BUF_INIT, archs = BUF_INIT;
	const char *v;
	int jobs = 2, quiet = 0, failed = 0, hits = 0, n = 0, total = 0;

	compile_args_init(&ca, argc);
	for (int i = 1; i < argc; i++) {
		if ((v = opt_value(argc, argv, &i, "arch"))) {
			buf_puts(&archs, v);
			buf_puts(&archs, ",");
		} else if (compile_option(&ca, argc, argv, &i)) {
			continue;
		} else if ((v = opt_value(argc, argv, &i, "jobs"))) {
			jobs = atoi(v);
		} else if (!strcmp(argv[i], "--quiet")) {
			quiet = 1;
		} else if (argv[i][0] != '-') {
			collect(argv[i], &list);
		} else {
			die("usage: ptxcache warm [--arch SM[,SM...]] [--jobs N] [compile options] PATH...");
		}
	}
	if (!list.len)
		die("usage: ptxcache warm [--arch SM[,SM...]] [--jobs N] [compile options] PATH...");
	if (!archs.len)
		buf_puts(&archs, "sm_90a,");
	if (jobs < 1 || jobs > 64)
		die("bad --jobs %d (1-64)", jobs);
	compile_args_done(&ca);
	for (const char *p = list.data; p < list.data + list.len; p += strlen(p) + 1)
		for (const char *a = archs.data; *a; a += strcspn(a, ",") + 1)
			total++;

	/* jobs processes, each with its own connection, take every jobs-th
	 * (file, arch) pair and report each outcome as a byte on a pipe. */
	int fds[2];
	if (pipe(fds) < 0)
		die("cannot create a pipe: %s", strerror(errno));
	for (int j = 0; j < jobs; j++) {
		pid_t pid = fork();
		if (pid < 0)
			die("cannot fork: %s", strerror(errno));
		if (pid)
			continue;
		close(fds[0]);
		ptxcache *pc = connect_or_die();
		int k = 0;
		for (const char *p = list.data; p < list.data + list.len; p += strlen(p) + 1) {
			for (const char *a = archs.data; *a; a += strcspn(a, ",") + 1, k++) {
				if (k % jobs != j)
					continue;
				struct buf input = BUF_INIT;
				struct ptxcache_result res;
				char arch[64];
				snprintf(arch, sizeof arch, "%.*s", (int)strcspn(a, ","), a);
				read_input(p, &input);
				ca.req.input = input.data;
				ca.req.input_len = input.len;
				ca.req.cpu = arch;
				char r = 'f';
				if (ptxcache_compile(pc, &ca.req, &res) == 0) {
					r = res.status != PTXCACHE_OK ? 'e' : res.cached ? 'h' : 'c';
					ptxcache_result_free(&res);
				} else {
					fprintf(stderr, "ptxcache: %s: %s\n", p, ptxcache_errmsg(pc));
				}
				if (r == 'e')
					fprintf(stderr, "ptxcache: %s (%s): compile failed\n", p, arch);
				if (write(fds[1], &r, 1) != 1)
					_exit(1);
				buf_free(&input);
			}
		}
		_exit(0);
	}
	close(fds[1]);
	int tty = isatty(STDOUT_FILENO) && !quiet;
	char r;
	while (read(fds[0], &r, 1) == 1) {
		n++;
		hits += r == 'h';
		failed += r == 'e' || r == 'f';
		if (tty) {
			int w = 40, done = total ? n * w / total : w;
			printf("\r[%.*s%*s] %d/%d", done, "########################################",
			       w - done, "", n, total);
			fflush(stdout);
		} else if (!quiet) {
			printf("warm: %d/%d%s\n", n, total, r == 'h' ? " (cached)" : r == 'c' ? "" : " (failed)");
		}
	}
	while (wait(NULL) > 0)
		;
	if (tty)
		putchar('\n');
	printf("warm: %d compiled, %d already cached, %d failed\n", n - hits - failed, hits, failed);
	return failed ? 1 : 0;
}

/* ---- stats, ping ----------------------------------------------------- */

static void show_stats(json_object *o)
{
	json_object_object_foreach(o, k, v)
		printf("%-22s %s\n", k, json_object_get_string(v));
}

/* The text exposition format, for node_exporter's textfile collector. */
static void show_prometheus(json_object *o)
{
	/* What goes up and down; everything else only counts up. */
	static const char *const gauges[] = {
		"entries", "bytes", "workers", "workers_ready", "jobs_running", "jobs_queued",
		"uptime_s", "warm_up_ms", "users_waiting", "queued_bytes", "confirms_pending",
		"confirms_pending_bytes", "confirms_running", "confirms_paused",
		"confirm_workers_live", "artifact_entries", "artifact_bytes", "artifact_leases_held",
		"artifact_waiting", "tenants",
	};
	json_object_object_foreach(o, k, v) {
		if (!json_object_is_type(v, json_type_int))
			continue;
		int counter = 1;
		for (size_t i = 0; i < sizeof gauges / sizeof *gauges; i++)
			counter &= strcmp(k, gauges[i]) != 0;
		printf("# TYPE ptxcache_%s%s %s\nptxcache_%s%s %lld\n", k, counter ? "_total" : "",
		       counter ? "counter" : "gauge", k, counter ? "_total" : "",
		       (long long)json_object_get_int64(v));
	}
}

static int cmd_stats(int argc, char **argv)
{
	int json = argc > 1 && !strcmp(argv[1], "--json");
	int prom = argc > 1 && !strcmp(argv[1], "--prometheus");
	char *j;

	if (argc > 2 || (argc > 1 && !json && !prom))
		die("usage: ptxcache stats [--json | --prometheus]");
	ptxcache *pc = connect_or_die();
	int rc = ptxcache_stats_json(pc, &j);
	return answer(pc, rc, j, json,
		      prom ? show_prometheus : show_stats);
}

static int cmd_ping(int argc, char **argv)
{
	struct timespec a, b;
	char *server, *compiler;
	ptxcache *pc;

	clock_gettime(CLOCK_MONOTONIC, &a);
	pc = connect_or_die();
	if (ptxcache_hello(pc, &server, &compiler) < 0)
		die("%s", ptxcache_errmsg(pc));
	clock_gettime(CLOCK_MONOTONIC, &b);
	ptxcache_close(pc);
	printf("ok: %s (%s) answered in %.2f ms\n", server, compiler,
	       (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
	free(server);
	free(compiler);
	return 0;
}

/* `ptxcache autostart`: what the fronts do before their first request:
 * connect to the user's daemon or the node's, else start the user's own
 * (client/autostart.h). Prints where and how; python/ptxcache runs it. */
static int cmd_autostart(int argc, char **argv)
{
	char err[1024], *used = NULL;
	const char *how = NULL;

	if (argc != 1)
		die("usage: ptxcache autostart");
	ptxcache *pc = autostart_connect(socket_path, timeout_ms, err, sizeof err, &used, &how);
	if (!pc)
		die("%s", err);
	ptxcache_close(pc);
	printf("%s %s\n", how, used);
	free(used);
	return 0;
}

/* ---- main ------------------------------------------------------------ */

/* `ptxcache [--socket PATH] ptxas ARGS`: the front takes the socket from
 * the environment, as it does when called as `ptxas`. */
static int run_ptxas(int argc, char **argv)
{
	if (socket_path)
		setenv("PTXCACHE_SOCKET", socket_path, 1);
	return cmd_ptxas(argc, argv);
}

static int run_artifact(int argc, char **argv)
{
	return cmd_artifact(argc, argv, socket_path, timeout_ms);
}

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "compile", cmd_compile, "compile LLVM IR to PTX (see 'ptxcache compile --help')" },
	{ "llc", run_llc, "drop-in for LLVM 22's llc: same arguments, same output" },
	{ "ptxas", run_ptxas, "drop-in for ptxas: same arguments, the same cubin, cached" },
	{ "artifact", run_artifact, "get or put a JIT cache entry (artifact get NS KEY [-o FILE], "
	  "artifact put NS KEY FILE)" },
	{ "stats", cmd_stats, "the daemon's counters ([--json | --prometheus])" },
	{ "ping", cmd_ping, "check that the daemon answers" },
	{ "autostart", cmd_autostart, "use the user's or the node's daemon, else start the "
	  "user's own (as the fronts do); prints how and its socket" },
	{ "ls", cmd_ls, "list cache entries ([--kind K] [--namespace NS] [--arch SM] [--older-than AGE] [--min-size S])" },
	{ "show", cmd_show, "one entry: key components, sizes, hits, error text" },
	{ "explain", cmd_explain, "why a request would miss: the nearest entry and what differs" },
	{ "evict", cmd_evict, "remove entries ([--older-than AGE] [--max-size S] [--arch SM])" },
	{ "purge", cmd_purge, "remove every entry ([--kind K] [--namespace NS]: every one of those)" },
	{ "verify", cmd_verify, "check every entry's checksum and the database's integrity" },
	{ "warm", cmd_warm, "compile a tree of IR files for given targets ([--arch SM,...])" },
};

static void usage(FILE *f)
{
	fputs("usage: ptxcache [--socket PATH] [--timeout SECS] [--silence SECS] COMMAND [ARGS...]\n\n"
	      "Client of the ptxcached compile service. The socket is --socket, else\n"
	      "$PTXCACHE_SOCKET, else $XDG_RUNTIME_DIR/ptxcache/ptxcached.sock (else\n"
	      "/tmp/ptxcache-$UID/ptxcached.sock), else the node's /run/ptxcache/ptxcached.sock;\n"
	      "with none given and none answering, the fronts start the user's own daemon\n"
	      "(PTXCACHE_AUTOSTART=0: never). A daemon that says nothing for\n"
	      "--silence seconds ($PTXCACHE_SILENCE_MS, default 5 s) is given up on\n"
	      "(the llc and ptxas fronts then run the real tool).\n\nCommands:\n", f);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
	int i = 1;
	const char *v;
	const char *base = strrchr(argv[0], '/');

	/* Called through a symlink named ptxas: every argument is ptxas's. */
	if (!strcmp(base ? base + 1 : argv[0], "ptxas"))
		return cmd_ptxas(argc, argv);

	for (; i < argc && argv[i][0] == '-'; i++) {
		if ((v = opt_value(argc, argv, &i, "socket"))) {
			socket_path = v;
		} else if ((v = opt_value(argc, argv, &i, "timeout"))) {
			char *end;
			double s = strtod(v, &end);
			if (*end || s <= 0 || s > 86400)
				die("bad --timeout '%s' (seconds)", v);
			timeout_ms = (int)(s * 1000);
		} else if ((v = opt_value(argc, argv, &i, "silence"))) {
			/* For every connection of this process, the fronts' too. */
			char *end, ms[32];
			double s = strtod(v, &end);
			if (*end || s < 0 || s > 86400)
				die("bad --silence '%s' (seconds; 0: none)", v);
			snprintf(ms, sizeof ms, "%d", (int)(s * 1000));
			setenv("PTXCACHE_SILENCE_MS", ms, 1);
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--version")) {
			puts("ptxcache " PTXCACHE_VERSION);
			return 0;
		} else {
			die("unknown option '%s' (see 'ptxcache --help')", argv[i]);
		}
	}
	if (!socket_path)
		socket_path = getenv("PTXCACHE_SOCKET");
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++)
		if (!strcmp(argv[i], commands[c].name))
			return commands[c].run(argc - i, argv + i);
	die("unknown command '%s' (see 'ptxcache --help')", argv[i]);
}
