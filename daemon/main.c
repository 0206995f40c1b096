/*
 * ptxcached: command line, defaults, and the maintenance modes.
 *
 * Defaults follow DESIGN.md: the socket in $XDG_RUNTIME_DIR/ptxcache (else
 * /tmp/ptxcache-$UID), the cache in $XDG_CACHE_HOME/ptxcache (else
 * ~/.cache/ptxcache); under systemd, $RUNTIME_DIRECTORY and
 * $CACHE_DIRECTORY, which the unit's RuntimeDirectory= and CacheDirectory=
 * set. Everything else lives in server.c.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/codegen.h"
#include "daemon/log.h"
#include "daemon/server.h"
#include "daemon/store.h"
#include "proto/frame.h"

static const char usage[] =
	"usage: ptxcached [options]\n"
	"\n"
	"The ptxcache daemon: compiles LLVM IR to PTX in a pool of warm LLVM\n"
	"workers and caches the results in SQLite. Runs in the foreground.\n"
	"\n"
	"  --socket PATH        listen here (default $XDG_RUNTIME_DIR/ptxcache/ptxcached.sock,\n"
	"                       else /tmp/ptxcache-$UID/ptxcached.sock)\n"
	"  --cache-dir DIR      cache directory (default $XDG_CACHE_HOME/ptxcache,\n"
	"                       else ~/.cache/ptxcache)\n"
	"  --workers N          compile workers (default: one per core)\n"
	"  --max-size SIZE      cache size cap, e.g. 512M, 10G (default 10G; 0 = none)\n"
	"  --job-timeout SECS   per-job limit before a worker is killed (default 120)\n"
	"  --recycle-after N    replace a worker after N jobs (default 1000; 0 = never)\n"
	"  --worker-mem SIZE    address-space cap per worker (default 8G; 0 = none)\n"
	"  --max-request SIZE   largest request accepted (default 64M)\n"
	"  --warm-cpu CPU       target of the built-in warm-up kernels (default sm_90a)\n"
	"  --log-level LEVEL    error, warning, info or debug (default info)\n"
	"  --verify             check every entry of the cache in --cache-dir and exit\n"
	"                       (the daemon must not be running)\n"
	"  --version            print the version and compiler identity\n"
	"  --help               this text\n";

/* "10G", "512M", "4096": bytes, or -1 if malformed. */
static int64_t parse_size(const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -1;
	int64_t mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1LL << 10; end++; break;
	case 'm': case 'M': mul = 1LL << 20; end++; break;
	case 'g': case 'G': mul = 1LL << 30; end++; break;
	case 't': case 'T': mul = 1LL << 40; end++; break;
	}
	if (*end == 'B' || *end == 'b' || (*end == 'i' && end[1] == 'B'))
		end += *end == 'i' ? 2 : 1;
	if (*end || v * (double)mul > 9e18)
		return -1;
	return (int64_t)(v * (double)mul);
}

static int parse_int(const char *s, int lo, int hi, const char *what)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi) {
		fprintf(stderr, "ptxcached: bad %s '%s' (expected %d..%d)\n", what, s, lo, hi);
		exit(2);
	}
	return (int)v;
}

static char *default_path(const char *systemd_var, const char *xdg_var,
			  const char *home_sub, const char *tmp_fmt, const char *leaf)
{
	const char *d = getenv(systemd_var);
	char *out = NULL;
	int r;

	if (d && *d) {
		/* systemd may list several directories; take the first. */
		r = asprintf(&out, "%.*s/%s", (int)strcspn(d, ":"), d, leaf);
	} else if ((d = getenv(xdg_var)) && *d) {
		r = asprintf(&out, "%s/ptxcache/%s", d, leaf);
	} else if (home_sub && (d = getenv("HOME")) && *d) {
		r = asprintf(&out, "%s/%s/ptxcache/%s", d, home_sub, leaf);
	} else {
		char tmp[64];
		snprintf(tmp, sizeof tmp, tmp_fmt, (unsigned)getuid());
		r = asprintf(&out, "%s/%s", tmp, leaf);
	}
	return r < 0 ? NULL : out;
}

int main(int argc, char **argv)
{
	enum { O_SOCKET = 256, O_CACHE, O_WORKERS, O_MAXSIZE, O_TIMEOUT, O_RECYCLE,
	       O_WMEM, O_MAXREQ, O_WARM, O_LOG, O_VERIFY, O_VERSION, O_HELP };
	static const struct option opts[] = {
		{ "socket", required_argument, 0, O_SOCKET },
		{ "cache-dir", required_argument, 0, O_CACHE },
		{ "workers", required_argument, 0, O_WORKERS },
		{ "max-size", required_argument, 0, O_MAXSIZE },
		{ "job-timeout", required_argument, 0, O_TIMEOUT },
		{ "recycle-after", required_argument, 0, O_RECYCLE },
		{ "worker-mem", required_argument, 0, O_WMEM },
		{ "max-request", required_argument, 0, O_MAXREQ },
		{ "warm-cpu", required_argument, 0, O_WARM },
		{ "log-level", required_argument, 0, O_LOG },
		{ "verify", no_argument, 0, O_VERIFY },
		{ "version", no_argument, 0, O_VERSION },
		{ "help", no_argument, 0, O_HELP },
		{ 0, 0, 0, 0 },
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct server_config cfg = {
		.max_size = 10LL << 30,
		.max_frame = FRAME_MAX_DEFAULT,
		.pool = {
			.size = ncpu > 0 ? (int)ncpu : 1,
			.job_timeout_s = 120,
			.recycle_after = 1000,
			.mem_limit = 8LL << 30,
			.warm_cpu = "sm_90a",
			.warm_features = "+ptx90",
		},
	};
	int verify = 0, c;
	int64_t v;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_SOCKET: cfg.socket_path = optarg; break;
		case O_CACHE: cfg.cache_dir = optarg; break;
		case O_WORKERS: cfg.pool.size = parse_int(optarg, 1, 256, "--workers"); break;
		case O_TIMEOUT: cfg.pool.job_timeout_s = parse_int(optarg, 1, 86400, "--job-timeout"); break;
		case O_RECYCLE: cfg.pool.recycle_after = parse_int(optarg, 0, INT_MAX, "--recycle-after"); break;
		case O_WARM: cfg.pool.warm_cpu = optarg; break;
		case O_MAXSIZE:
		case O_WMEM:
		case O_MAXREQ:
			if ((v = parse_size(optarg)) < 0 ||
			    (c == O_MAXREQ && (v < 1024 || v > (1LL << 30)))) {
				fprintf(stderr, "ptxcached: bad size '%s'\n", optarg);
				return 2;
			}
			if (c == O_MAXSIZE)
				cfg.max_size = v;
			else if (c == O_WMEM)
				cfg.pool.mem_limit = v;
			else
				cfg.max_frame = (uint32_t)v;
			break;
		case O_LOG:
			if (!strcmp(optarg, "error")) log_threshold = LOG_ERR;
			else if (!strcmp(optarg, "warning")) log_threshold = LOG_WARN;
			else if (!strcmp(optarg, "info")) log_threshold = LOG_INFO;
			else if (!strcmp(optarg, "debug")) log_threshold = LOG_DEBUG;
			else {
				fprintf(stderr, "ptxcached: bad log level '%s'\n", optarg);
				return 2;
			}
			break;
		case O_VERIFY: verify = 1; break;
		case O_VERSION:
			printf("ptxcached 0.1.0 (%s)\n", codegen_identity());
			return 0;
		case 'h':
		case O_HELP:
			fputs(usage, stdout);
			return 0;
		default:
			fputs("Try 'ptxcached --help'.\n", stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ptxcached: unexpected argument '%s'\nTry 'ptxcached --help'.\n",
			argv[optind]);
		return 2;
	}
	if (!cfg.socket_path)
		cfg.socket_path = default_path("RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR", NULL,
					       "/tmp/ptxcache-%u", "ptxcached.sock");
	if (!cfg.cache_dir) {
		char *d = default_path("CACHE_DIRECTORY", "XDG_CACHE_HOME", ".cache",
				       "/tmp/ptxcache-%u", "");
		if (d && strlen(d) > 1 && d[strlen(d) - 1] == '/')
			d[strlen(d) - 1] = '\0';
		cfg.cache_dir = d;
	}
	if (!cfg.socket_path || !cfg.cache_dir)
		fatal("out of memory");

	if (verify) {
		struct buf err = BUF_INIT, report = BUF_INIT;
		struct store *s = store_open(cfg.cache_dir, 0, &err);
		if (!s) {
			fprintf(stderr, "ptxcached: %s\n", err.data);
			return 1;
		}
		int problems = store_verify(s, &report);
		store_close(s);
		fputs(report.data ? report.data : "", stdout);
		if (problems < 0) {
			fprintf(stderr, "ptxcached: cannot verify '%s'\n", cfg.cache_dir);
			return 1;
		}
		printf("%d problem%s found\n", problems, problems == 1 ? "" : "s");
		return problems ? 1 : 0;
	}
	return server_run(&cfg);
}
