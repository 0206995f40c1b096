/*
 * ptxcache: the command-line client, on libptxcache alone (no LLVM).
 *
 *   ptxcache [--socket PATH] [--timeout SECS] COMMAND [ARGS...]
 *
 * Commands are a table (name, handler, summary). `ptxcache llc ARGS` is a
 * drop-in for LLVM 22's llc: the same arguments, the same output bytes, the
 * same exit status, and death by the same signal where llc would abort.
 * Exit status 0 on success; otherwise non-zero with a one-line message on
 * stderr. No command waits without a timeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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
static void read_input(const char *path, struct buf *out)
{
	int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("cannot open '%s': %s", path, strerror(errno));
	for (;;) {
		if (buf_reserve(out, 1 << 16) < 0)
			die("out of memory reading '%s'", path);
		ssize_t n = read(fd, out->data + out->len, out->cap - out->len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("cannot read '%s': %s", path, strerror(errno));
		if (n == 0)
			break;
		out->len += (size_t)n;
	}
	out->data[out->len] = '\0';
	if (fd != STDIN_FILENO)
		close(fd);
}

static int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "wb");
	if (!f)
		return -1;
	int bad = n && fwrite(p, 1, n, f) != n;
	if (f == stdout)
		bad |= fflush(f) != 0;
	else
		bad |= fclose(f) != 0;
	return bad ? -1 : 0;
}

/* Diagnostics name the input "<stdin>" (the daemon never sees file names,
 * so cache entries do not depend on them); put the real name back. */
static void print_log(const char *log, size_t len, const char *name)
{
	static const char tag[] = "<stdin>:";
	size_t tl = sizeof tag - 1;
	const char *p = log, *end = log + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t line = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
		if (name && line >= tl && memcmp(p, tag, tl) == 0) {
			fprintf(stderr, "%s:", name);
			fwrite(p + tl, 1, line - tl, stderr);
		} else {
			fwrite(p, 1, line, stderr);
		}
		p += line;
	}
}

/* Die of sig the way llc would, without a core file. */
static void die_of_signal(int sig)
{
	struct rlimit no = { 0, 0 };
	fflush(stdout);
	setrlimit(RLIMIT_CORE, &no);
	signal(sig, SIG_DFL);
	raise(sig);
	_exit(128 + sig);
}

/* ---- llc ------------------------------------------------------------- */

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

static int cmd_llc(int argc, char **argv)
{
	struct ptxcache_compile_req req;
	struct buf input = BUF_INIT, attrs = BUF_INIT;
	const char *in = NULL, *out = NULL, *v;
	const char **opts = calloc((size_t)argc + 1, sizeof *opts);
	char **normal = calloc((size_t)argc + 1, sizeof *normal);
	int filetype_null = 0;

	prog = "llc";
	ptxcache_compile_req_init(&req);
	req.strict = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if ((v = opt_value(argc, argv, &i, "mtriple")))
			req.triple = v;
		else if ((v = opt_value(argc, argv, &i, "march")))
			req.march = v;
		else if ((v = opt_value(argc, argv, &i, "mcpu")))
			req.cpu = v;
		else if ((v = opt_value(argc, argv, &i, "mattr"))) {
			if (attrs.len)
				buf_puts(&attrs, ",");
			buf_puts(&attrs, v);
		} else if ((v = opt_value(argc, argv, &i, "o")))
			out = v;
		else if ((v = opt_value(argc, argv, &i, "filetype"))) {
			if (!strcmp(v, "null"))
				filetype_null = 1;
			else if (!strcmp(v, "obj")) {
				fprintf(stderr, "llc: error: target does not support generation of this file type\n");
				return 1;
			} else if (strcmp(v, "asm") != 0) {
				fprintf(stderr, "llc: for the --filetype option: Cannot find option named '%s'!\n", v);
				return 1;
			}
		} else if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3])
			req.opt_level = a[2] - '0';
		else if (!strcmp(a, "-") || a[0] != '-') {
			if (in)
				die("too many positional arguments: '%s'", a);
			in = a;
		} else {
			/* A backend option: normalise "--x" to "-x" so the same
			 * option is the same key. */
			normal[req.noptions] = strdup(a[1] == '-' ? a + 1 : a);
			opts[req.noptions] = normal[req.noptions];
			req.noptions++;
		}
	}
	req.options = opts;
	if (attrs.len)
		req.features = attrs.data;
	req.emit = !filetype_null;
	if (!in)
		in = "-";
	read_input(in, &input);
	req.input = input.data;
	req.input_len = input.len;

	ptxcache *pc = connect_or_die();
	struct ptxcache_result res;
	if (ptxcache_compile(pc, &req, &res) < 0)
		die("%s", ptxcache_errmsg(pc));
	ptxcache_close(pc);

	const char *name = strcmp(in, "-") ? in : NULL;
	switch (res.status) {
	case PTXCACHE_OK:
		print_log(res.log, res.log_len, name);
		if (filetype_null)
			break;
		if (!out) {
			/* llc's default: stdout for stdin, else IN with .ll/.bc
			 * replaced by .s. */
			if (!name) {
				out = "-";
			} else {
				static char def[4096];
				size_t l = strlen(in);
				if (l > 3 && (!strcmp(in + l - 3, ".ll") || !strcmp(in + l - 3, ".bc")))
					l -= 3;
				snprintf(def, sizeof def, "%.*s.s", (int)l, in);
				out = def;
			}
		}
		if (write_file(out, res.output, res.output_len) < 0) {
			fprintf(stderr, "llc: error: cannot write '%s': %s\n", out, strerror(errno));
			return 1;
		}
		break;
	case PTXCACHE_PARSE_ERROR:
		fputs("llc: error: llc: ", stderr);
		print_log(res.log, res.log_len, name);
		return 1;
	case PTXCACHE_ERROR:
		/* llc writes what it produced before failing; so do we. */
		print_log(res.log, res.log_len, name);
		if (!filetype_null && res.output_len)
			write_file(out ? out : "-", res.output, res.output_len);
		return 1;
	case PTXCACHE_FATAL:
		print_log(res.log, res.log_len, name);
		die_of_signal(SIGABRT);
		break;
	case PTXCACHE_CRASH:
		print_log(res.log, res.log_len, name);
		fputc('\n', stderr);
		die_of_signal(SIGSEGV);
		break;
	default:
		fprintf(stderr, "llc: error: %.*s\n", (int)res.log_len, res.log ? res.log : "");
		return 1;
	}
	ptxcache_result_free(&res);
	return 0;
}

/* ---- compile --------------------------------------------------------- */

static void json_str(FILE *f, const char *s, size_t n)
{
	fputc('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static const char *const status_names[] = {
	"ok", "parse_error", "error", "invalid", "fatal", "crash", "timeout", "unavailable",
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
	"                     be nvptx64-nvidia-cuda or nvptx-nvidia-cuda)\n"
	"  -O0..-O3           codegen level (default -O3)\n"
	"  --pipeline P       run a middle-end pipeline first (e.g. 'default<O3>')\n"
	"  --option OPT       a backend option, e.g. -nvptx-fma-level=1 (repeatable)\n"
	"  -o OUT             write the PTX here (default stdout)\n"
	"  --json             print a JSON summary instead of the PTX\n";

static int cmd_compile(int argc, char **argv)
{
	struct ptxcache_compile_req req;
	struct buf input = BUF_INIT, feats = BUF_INIT;
	const char *in = NULL, *out = NULL, *arch = "sm_90a", *isa = NULL, *v;
	const char **opts = calloc((size_t)argc + 1, sizeof *opts);
	int json = 0;

	ptxcache_compile_req_init(&req);
	req.opt_level = 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if ((v = opt_value(argc, argv, &i, "arch")))
			arch = v;
		else if ((v = opt_value(argc, argv, &i, "ptx-isa")))
			isa = v;
		else if ((v = opt_value(argc, argv, &i, "mattr"))) {
			if (feats.len)
				buf_puts(&feats, ",");
			buf_puts(&feats, v);
		} else if ((v = opt_value(argc, argv, &i, "triple")))
			req.triple = v;
		else if ((v = opt_value(argc, argv, &i, "pipeline")))
			req.pipeline = v;
		else if ((v = opt_value(argc, argv, &i, "option")))
			opts[req.noptions++] = v;
		else if ((v = opt_value(argc, argv, &i, "o")))
			out = v;
		else if (!strcmp(a, "--json"))
			json = 1;
		else if (!strcmp(a, "--cubin"))
			die("cubin output is not supported by this daemon yet");
		else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(compile_usage, stdout);
			return 0;
		} else if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3])
			req.opt_level = a[2] - '0';
		else if (!strcmp(a, "-") || a[0] != '-') {
			if (in)
				die("compile takes one input, got '%s' and '%s'", in, a);
			in = a;
		} else
			die("unknown compile option '%s' (see 'ptxcache compile --help')", a);
	}
	if (!in)
		die("compile needs an input file (see 'ptxcache compile --help')");
	if (isa) {
		char *end;
		long n = strtol(isa, &end, 10);
		if (*end || n < 10 || n > 999)
			die("bad --ptx-isa '%s' (e.g. 90 for PTX ISA 9.0)", isa);
		struct buf f = BUF_INIT;
		buf_printf(&f, "+ptx%ld%s%s", n, feats.len ? "," : "", feats.len ? feats.data : "");
		buf_free(&feats);
		feats = f;
	}
	req.cpu = arch;
	req.features = feats.len ? feats.data : NULL;
	req.options = opts;
	read_input(in, &input);
	req.input = input.data;
	req.input_len = input.len;

	ptxcache *pc = connect_or_die();
	struct ptxcache_result res;
	if (ptxcache_compile(pc, &req, &res) < 0)
		die("%s", ptxcache_errmsg(pc));
	ptxcache_close(pc);

	const char *name = strcmp(in, "-") ? in : NULL;
	if (res.status == PTXCACHE_OK && out && write_file(out, res.output, res.output_len) < 0)
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
		   write_file("-", res.output, res.output_len) < 0) {
		die("cannot write the output: %s", strerror(errno));
	}
	if (res.status != PTXCACHE_OK) {
		if (!json)
			print_log(res.log, res.log_len, name);
		if (!json && res.log_len && res.log[res.log_len - 1] != '\n')
			fputc('\n', stderr);
		fprintf(stderr, "ptxcache: compile of '%s' failed (%s)\n", in,
			status_names[res.status]);
		return 1;
	}
	if (res.log_len && !json)
		print_log(res.log, res.log_len, name);
	ptxcache_result_free(&res);
	return 0;
}

/* ---- stats, ping ----------------------------------------------------- */

static int cmd_stats(int argc, char **argv)
{
	int json = argc > 1 && !strcmp(argv[1], "--json");
	char *j;
	ptxcache *pc = connect_or_die();

	if (argc > 1 && !json)
		die("unknown stats option '%s' (try --json)", argv[1]);
	if (ptxcache_stats_json(pc, &j) < 0)
		die("%s", ptxcache_errmsg(pc));
	ptxcache_close(pc);
	if (json) {
		puts(j);
		free(j);
		return 0;
	}
	/* The object is flat: print "key value" rows. */
	for (char *p = j; (p = strchr(p, '"'));) {
		char *k = ++p, *e = strchr(p, '"');
		if (!e)
			break;
		*e = '\0';
		char *val = e + 2, *ve = val;
		if (*val == '"') {
			val++;
			ve = strchr(val, '"');
		} else {
			ve = val + strcspn(val, ",}");
		}
		if (!ve)
			break;
		char save = *ve;
		*ve = '\0';
		printf("%-20s %s\n", k, val);
		*ve = save;
		p = ve + (save == '"');
	}
	free(j);
	return 0;
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

/* ---- main ------------------------------------------------------------ */

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "compile", cmd_compile, "compile LLVM IR to PTX (see 'ptxcache compile --help')" },
	{ "llc", cmd_llc, "drop-in for LLVM 22's llc: same arguments, same output" },
	{ "stats", cmd_stats, "print the daemon's counters ([--json])" },
	{ "ping", cmd_ping, "check that the daemon answers" },
};

static void usage(FILE *f)
{
	fputs("usage: ptxcache [--socket PATH] [--timeout SECS] COMMAND [ARGS...]\n\n"
	      "Client of the ptxcached compile service. The socket is --socket, else\n"
	      "$PTXCACHE_SOCKET, else $XDG_RUNTIME_DIR/ptxcache/ptxcached.sock, else\n"
	      "/tmp/ptxcache-$UID/ptxcached.sock.\n\nCommands:\n", f);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
	int i = 1;
	const char *v;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if ((v = opt_value(argc, argv, &i, "socket"))) {
			socket_path = v;
		} else if ((v = opt_value(argc, argv, &i, "timeout"))) {
			char *end;
			double s = strtod(v, &end);
			if (*end || s <= 0 || s > 86400)
				die("bad --timeout '%s' (seconds)", v);
			timeout_ms = (int)(s * 1000);
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--version")) {
			puts("ptxcache 0.1.0");
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
