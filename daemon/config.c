/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config: the table of ptxcached's settings; see config.h.
 *
 * One row per setting: its name (the flag, the file key, and, upper-cased
 * with PTXCACHE_ in front, the environment variable), type, place in
 * struct server_config, default, bounds, whether SIGHUP reloads it, and its
 * help line. Checklist when adding a setting: a field in server_config, a
 * row here, and the sample file in systemd/ptxcached.conf.
 */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/codegen.h"
#include "daemon/l2.h"
#include "daemon/log.h"

#define DEFAULT_CONFIG "/etc/ptxcache/ptxcached.conf"

enum ctype { C_STR, C_INT, C_SIZE, C_LEVEL, C_BOOL, C_MODE };

struct setting {
	const char *name;
	enum ctype type;
	size_t off;             /* offset in struct server_config */
	const char *def;        /* NULL: computed in default_of() */
	int64_t min, max;
	int live;               /* SIGHUP applies it */
	const char *help;
};

#define F(field) offsetof(struct server_config, field)
#define G (1LL << 30)

static const struct setting settings[] = {
	{ "socket", C_STR, F(socket_path), NULL, 0, 0, 0,
	  "listen here (default $RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR/ptxcache or /tmp/ptxcache-$UID, + /ptxcached.sock)" },
	{ "socket-mode", C_MODE, F(socket_mode), "0600", 0, 0777, 0,
	  "mode (octal) of the sockets the daemon makes: the main one (unless systemd passes "
	  "it) and the tenants'; a user it admits must still be allowed (allow-users, "
	  "allow-groups, socket-group)" },
	{ "socket-group", C_STR, F(socket_group), "", 0, 0, 0,
	  "group (name or gid) of the sockets the daemon makes, whose members it serves "
	  "(empty: the daemon's own)" },
	{ "tenant-dir", C_STR, F(tenant_dir), "", 0, 0, 1,
	  "directory of the tenants' sockets: DIR/NAME.sock for each of tenants "
	  "(made as the main socket is)" },
	{ "tenants", C_STR, F(tenants), "", 0, 0, 1,
	  "tenants (names of 1 to 32 of [a-z0-9-], comma-separated), each served on a socket "
	  "of its own whose clients share nothing with another tenant's or the main socket's "
	  "(empty: none)" },
	{ "cache-dir", C_STR, F(cache_dir), NULL, 0, 0, 0,
	  "cache directory (default $CACHE_DIRECTORY, $XDG_CACHE_HOME/ptxcache or ~/.cache/ptxcache)" },
	{ "workers", C_INT, F(pool.size), NULL, 1, 256, 0,
	  "compile worker processes (default: one per core)" },
	{ "max-size", C_SIZE, F(max_size), "10G", 0, 1LL << 50, 1,
	  "cache size cap, LRU eviction above it (0 = none)" },
	{ "job-timeout", C_INT, F(pool.job_timeout_s), "120", 1, 86400, 1,
	  "seconds a compile may run before its worker is killed" },
	{ "recycle-after", C_INT, F(pool.recycle_after), "1000", 0, 1 << 30, 1,
	  "replace a worker after this many jobs (0 = never)" },
	{ "worker-mem", C_SIZE, F(pool.mem_limit), "8G", 0, 1LL << 50, 1,
	  "address-space cap of each worker (0 = none)" },
	{ "warm-cpu", C_STR, F(pool.warm_cpu), "sm_90a", 0, 0, 0,
	  "target of the built-in warm-up kernels" },
	{ "sandbox", C_STR, F(pool.sandbox), "auto", 0, 0, 0,
	  "worker sandbox: auto (apply what the kernel has, report the rest), require, off" },
	{ "max-request", C_SIZE, F(max_frame), "64M", 1024, G, 1,
	  "largest request accepted" },
	{ "max-connections", C_INT, F(max_conns), "1024", 1, 1 << 20, 1,
	  "open client connections in all" },
	{ "max-connections-per-uid", C_INT, F(max_conns_per_uid), "256", 1, 1 << 20, 1,
	  "open client connections per user" },
	{ "max-jobs-per-uid", C_INT, F(pool.max_running), "64", 1, 1 << 20, 1,
	  "compiles of one user running at once; more wait their turn in the queue" },
	{ "max-queued-bytes", C_SIZE, F(max_queued_bytes), "1G", 1 << 16, 1LL << 50, 1,
	  "request bytes of compiles queued or running, in all; past it new ones are refused as busy" },
	{ "max-queued-bytes-per-uid", C_SIZE, F(max_queued_bytes_per_uid), "256M", 1 << 16,
	  1LL << 50, 1,
	  "request bytes of one user's compiles queued or running; past it theirs are refused as busy" },
	{ "header-timeout", C_INT, F(header_timeout_s), "10", 1, 3600, 1,
	  "seconds a started request may take to arrive whole" },
	{ "idle-timeout", C_INT, F(idle_timeout_s), "300", 1, 86400 * 7, 1,
	  "seconds an idle connection is kept (one still taking a reply is not idle)" },
	{ "max-output", C_SIZE, F(max_output), "256M", 1 << 20, 16 * G, 1,
	  "reply bytes queued for one slow reader before it is dropped" },
	{ "shutdown-timeout", C_INT, F(shutdown_timeout_s), "30", 0, 3600, 1,
	  "SIGTERM: seconds in-flight compiles may finish" },
	{ "idle-exit", C_INT, F(idle_exit_s), "0", 0, 86400 * 30, 1,
	  "stop after this many seconds with no connection and nothing in flight "
	  "(0 = never; a daemon the clients started for their user sets it)" },
	{ "allow-users", C_STR, F(allow_users), "", 0, 0, 1,
	  "users (names or uids, comma-separated) allowed besides root and the socket's group" },
	{ "allow-groups", C_STR, F(allow_groups), "", 0, 0, 1,
	  "groups (names or gids) whose members are allowed" },
	{ "confirm-workers", C_INT, F(pool.confirm_workers), "2", 0, 256, 1,
	  "background confirmation workers at most, at idle priority, on cores the compiles "
	  "leave (at most workers of them; 0: no background confirmation)" },
	{ "confirm-queue", C_SIZE, F(pool.confirm_queue), "256M", 1 << 16, 1LL << 50, 1,
	  "request bytes of confirmations waiting for idle time; past it the oldest are "
	  "dropped (confirms_dropped)" },
	{ "sharing", C_STR, F(sharing), "confirm", 0, 0, 0,
	  "who is served an entry: confirm (another user only once a clean worker computed the same bytes), trust (everyone), separate (its user alone)" },
	{ "namespace-per-uid", C_BOOL, F(namespace_per_uid), "no", 0, 0, 0,
	  "give each user their own cache entries (no sharing between users)" },
	{ "lineinfo-loose", C_BOOL, F(lineinfo_loose), "no", 0, 0, 1,
	  "accept a -lineinfo cubin whose line table names another client's source paths "
	  "(counted in lineinfo_loose_hits); default: each client gets its own bytes exactly" },
	{ "artifact-max-value", C_SIZE, F(artifact_max_value), "256M", 1024, G, 1,
	  "largest JIT cache artifact a client may store" },
	{ "artifact-share", C_INT, F(artifact_share), "50", 1, 100, 1,
	  "percent of max-size the artifacts of one user (or shared group) may take; "
	  "past it, that user's own oldest artifacts are evicted" },
	{ "artifact-lease-timeout", C_INT, F(artifact_lease_timeout_s), "300", 1, 86400, 1,
	  "seconds a client producing a missing artifact may take before another may" },
	{ "artifact-wait", C_INT, F(artifact_wait_s), "300", 0, 86400, 1,
	  "the longest an artifact get waits for another client producing it" },
	{ "artifact-max-leases", C_INT, F(artifact_max_leases), "4096", 1, 1 << 20, 1,
	  "artifacts one user may be producing at once" },
	{ "artifact-groups", C_STR, F(artifact_groups), "", 0, 0, 1,
	  "groups (names or gids) whose members share one scope of artifacts "
	  "(they trust each other's code)" },
	{ "l2", C_STR, F(l2_url), "", 0, 0, 1,
	  "shared tier: redis://host:port/db, a Unix socket path, or a Redis Cluster's "
	  "seeds redis-cluster://host:port,host:port (empty: off)" },
	{ "l2-secret-file", C_STR, F(l2_secret_file), "", 0, 0, 1,
	  "file holding the cluster secret that seals values in the shared tier" },
	{ "l2-prefix", C_STR, F(l2_prefix), "ptxcache:", 0, 0, 1,
	  "key prefix in Redis" },
	{ "l2-read-only", C_BOOL, F(l2_read_only), "no", 0, 0, 1,
	  "use the shared tier's entries but never publish" },
	{ "l2-timeout-ms", C_INT, F(l2_timeout_ms), "50", 1, 60000, 1,
	  "connect timeout for Redis, and how long a command's connection may be silent" },
	{ "l2-max-value", C_SIZE, F(l2_max_value), "1G", 1024, 4 * G, 1,
	  "largest value written to or read from Redis (values over 1 MiB go as 1 MiB chunks "
	  "and a manifest; keep it above artifact-max-value)" },
	{ "l2-lease-timeout", C_INT, F(l2_lease_timeout_s), "10", 0, 3600, 1,
	  "seconds a node producing a key the fleet misses may go unheard (it renews its lease "
	  "in Redis) before another node takes over; 0: every node produces its own" },
	{ "log-level", C_LEVEL, F(log_level), "info", 0, 0, 1,
	  "error, warning, info or debug" },
	{ "ptxas", C_STR, F(ptxas), "", 0, 0, 0,
	  "ptxas for cubin requests ('none': no cubin stage; default: search $CUDA_HOME/bin, "
	  "$PTXCACHE_DEFAULT_CUDA/bin (default /usr/local/cuda/bin; empty: skip), then PATH)" },
	{ "nvjitlink", C_STR, F(nvjitlink), "", 0, 0, 0,
	  "libnvJitLink.so.13 for cubin requests that ask for it ('none': off; default: "
	  "search $CUDA_HOME/lib64, then $PTXCACHE_DEFAULT_CUDA/lib64)" },
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

static const char *flag_value[NSETTINGS];       /* from argv, kept for reloads */
static char source[NSETTINGS][160];             /* where each value came from */
static char *owned[NSETTINGS];                  /* strings we allocated */
static const char *config_path = DEFAULT_CONFIG;

static const char *const levels[] = { "error", "warning", "info", "debug" };
static const int level_values[] = { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* "10G", "512M", "4096", "1.5G": bytes, or -1. */
static int64_t parse_size(const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -1;
	int64_t mul = 1;
	switch (toupper((unsigned char)*end)) {
	case 'K': mul = 1LL << 10; end++; break;
	case 'M': mul = 1LL << 20; end++; break;
	case 'G': mul = 1LL << 30; end++; break;
	case 'T': mul = 1LL << 40; end++; break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B')
		end++;
	if (*end || v * (double)mul > 9e18)
		return -1;
	return (int64_t)(v * (double)mul);
}

static char *default_dir(const char *systemd_var, const char *xdg_var,
			 const char *home_sub, const char *leaf)
{
	const char *d = getenv(systemd_var);
	char *out = NULL;
	int r;

	if (d && *d)    /* systemd may list several directories: the first */
		r = asprintf(&out, "%.*s%s%s", (int)strcspn(d, ":"), d, *leaf ? "/" : "", leaf);
	else if ((d = getenv(xdg_var)) && *d)
		r = asprintf(&out, "%s/ptxcache%s%s", d, *leaf ? "/" : "", leaf);
	else if (home_sub && (d = getenv("HOME")) && *d)
		r = asprintf(&out, "%s/%s/ptxcache%s%s", d, home_sub, *leaf ? "/" : "", leaf);
	else
		r = asprintf(&out, "/tmp/ptxcache-%u%s%s", (unsigned)getuid(), *leaf ? "/" : "", leaf);
	return r < 0 ? NULL : out;
}

/* The default of a setting whose row has def == NULL (caller frees). */
static char *default_of(const struct setting *s)
{
	if (!strcmp(s->name, "socket"))
		return default_dir("RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR", NULL, "ptxcached.sock");
	if (!strcmp(s->name, "cache-dir"))
		return default_dir("CACHE_DIRECTORY", "XDG_CACHE_HOME", ".cache", "");
	if (!strcmp(s->name, "workers")) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		char *out = NULL;
		return asprintf(&out, "%ld", n > 0 ? n : 1) < 0 ? NULL : out;
	}
	return NULL;
}

/* Parse text for setting i into cfg. 0, or -1 with a message in err. */
static int apply(struct server_config *cfg, size_t i, const char *text,
		 const char *from, struct buf *err)
{
	const struct setting *s = &settings[i];
	char *field = (char *)cfg + s->off;
	char *end;
	int64_t v;

	switch (s->type) {
	case C_STR: {
		char *copy = strdup(text);
		if (!copy) {
			buf_puts(err, "out of memory");
			return -1;
		}
		free(owned[i]);
		owned[i] = copy;
		*(const char **)field = copy;
		break;
	}
	case C_MODE:
		errno = 0;
		v = strtoll(text, &end, 8);
		if (errno || end == text || *end || v < s->min || v > s->max) {
			buf_printf(err, "bad mode '%s' for %s (from %s): octal, e.g. 0660",
				   text, s->name, from);
			return -1;
		}
		*(int *)field = (int)v;
		break;
	case C_INT:
		errno = 0;
		v = strtoll(text, &end, 10);
		if (errno || end == text || *end || v < s->min || v > s->max) {
			buf_printf(err, "bad value '%s' for %s (from %s): expected %lld..%lld",
				   text, s->name, from, (long long)s->min, (long long)s->max);
			return -1;
		}
		*(int *)field = (int)v;
		break;
	case C_SIZE:
		v = parse_size(text);
		if (v < s->min || v > s->max) {
			buf_printf(err, "bad size '%s' for %s (from %s): e.g. 512M, 10G",
				   text, s->name, from);
			return -1;
		}
		*(int64_t *)field = v;
		break;
	case C_BOOL:
		if (!strcmp(text, "yes") || !strcmp(text, "true") || !strcmp(text, "1")) {
			*(int *)field = 1;
		} else if (!strcmp(text, "no") || !strcmp(text, "false") || !strcmp(text, "0")) {
			*(int *)field = 0;
		} else {
			buf_printf(err, "bad value '%s' for %s (from %s): yes or no",
				   text, s->name, from);
			return -1;
		}
		break;
	case C_LEVEL:
		for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
			if (!strcmp(text, levels[l])) {
				*(int *)field = level_values[l];
				goto done;
			}
		}
		buf_printf(err, "bad log level '%s' (from %s): error, warning, info or debug",
			   text, from);
		return -1;
	}
done:
	snprintf(source[i], sizeof source[i], "%s", from);
	return 0;
}

static size_t find(const char *name, size_t len)
{
	for (size_t i = 0; i < NSETTINGS; i++)
		if (strlen(settings[i].name) == len && !strncmp(settings[i].name, name, len))
			return i;
	return NSETTINGS;
}

/* Defaults, then the file, then the environment, then flags, into cfg. */
static int load_all(struct server_config *cfg, struct buf *err)
{
	char from[160];

	for (size_t i = 0; i < NSETTINGS; i++) {
		char *d = settings[i].def ? NULL : default_of(&settings[i]);
		int r = apply(cfg, i, settings[i].def ? settings[i].def : d ? d : "", "default", err);
		free(d);
		if (r < 0)
			return -1;
	}

	FILE *f = fopen(config_path, "r");
	if (!f && (errno != ENOENT || strcmp(config_path, DEFAULT_CONFIG) != 0)) {
		buf_printf(err, "cannot read config file '%s': %s", config_path, strerror(errno));
		return -1;
	}
	char line[4096];
	for (int ln = 1; f && fgets(line, sizeof line, f); ln++) {
		char *p = line, *e;
		p[strcspn(p, "#\n")] = '\0';
		while (isspace((unsigned char)*p))
			p++;
		if (!*p)
			continue;
		char *eq = strchr(p, '=');
		if (!eq) {
			buf_printf(err, "%s:%d: expected 'name = value'", config_path, ln);
			fclose(f);
			return -1;
		}
		for (e = eq; e > p && isspace((unsigned char)e[-1]); e--)
			;
		size_t i = find(p, (size_t)(e - p));
		char *val = eq + 1;
		while (isspace((unsigned char)*val))
			val++;
		for (e = val + strlen(val); e > val && isspace((unsigned char)e[-1]); e--)
			*--e = '\0';
		if (i == NSETTINGS) {
			buf_printf(err, "%s:%d: unknown setting '%.*s'", config_path, ln,
				   (int)strcspn(p, " \t="), p);
			fclose(f);
			return -1;
		}
		snprintf(from, sizeof from, "%s:%d", config_path, ln);
		if (apply(cfg, i, val, from, err) < 0) {
			fclose(f);
			return -1;
		}
	}
	if (f)
		fclose(f);

	for (size_t i = 0; i < NSETTINGS; i++) {
		char env[64] = "PTXCACHE_";
		size_t n = strlen(env);
		for (const char *c = settings[i].name; *c && n < sizeof env - 1; c++)
			env[n++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
		env[n] = '\0';
		const char *v = getenv(env);
		if (v && *v) {
			snprintf(from, sizeof from, "environment %s", env);
			if (apply(cfg, i, v, from, err) < 0)
				return -1;
		}
	}
	for (size_t i = 0; i < NSETTINGS; i++)
		if (flag_value[i] && apply(cfg, i, flag_value[i], "flag", err) < 0)
			return -1;
	return 0;
}

static void usage(FILE *f)
{
	fputs("usage: ptxcached [options]\n"
	      "\n"
	      "The ptxcache daemon: compiles LLVM IR to PTX in a pool of warm LLVM\n"
	      "workers and caches the results in SQLite. Runs in the foreground.\n"
	      "Each setting can also come from the environment (PTXCACHE_NAME, e.g.\n"
	      "PTXCACHE_MAX_SIZE) or the config file; flags win, then the environment,\n"
	      "then the file.\n\n", f);
	for (size_t i = 0; i < NSETTINGS; i++) {
		char left[64];
		snprintf(left, sizeof left, "--%s %s", settings[i].name,
			 settings[i].type == C_SIZE ? "SIZE" : settings[i].type == C_INT ? "N" :
			 settings[i].type == C_LEVEL ? "LEVEL" : settings[i].type == C_MODE ? "MODE" :
			 settings[i].type == C_BOOL ?
			 "yes|no" : "VALUE");
		fprintf(f, "  %-34s %s", left, settings[i].help);
		if (settings[i].def && *settings[i].def)
			fprintf(f, " [%s]", settings[i].def);
		fprintf(f, "%s\n", settings[i].live ? " (SIGHUP)" : "");
	}
	fputs("  --config PATH                      config file [" DEFAULT_CONFIG "]\n"
	      "  --print-config                     print every setting, its value and its source\n"
	      "  --verify                           check every entry of the cache and exit\n"
	      "                                     (with the daemon stopped)\n"
	      "  --version                          print the version and compiler identity\n"
	      "  --help                             this text\n", f);
}

static void print_config(const struct server_config *cfg)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		const char *field = (const char *)cfg + settings[i].off;
		char val[4096];
		switch (settings[i].type) {
		case C_STR:
			if (settings[i].off == offsetof(struct server_config, l2_url)) {
				/* The tier's password never leaves the daemon. */
				struct buf shown = BUF_INIT;
				l2_url_redacted(*(const char *const *)field, &shown);
				snprintf(val, sizeof val, "%s", shown.data ? shown.data : "");
				buf_free(&shown);
				break;
			}
			snprintf(val, sizeof val, "%s", *(const char *const *)field);
			break;
		case C_INT:
			snprintf(val, sizeof val, "%d", *(const int *)field);
			break;
		case C_MODE:
			snprintf(val, sizeof val, "%04o", (unsigned)*(const int *)field);
			break;
		case C_BOOL:
			snprintf(val, sizeof val, "%s", *(const int *)field ? "yes" : "no");
			break;
		case C_SIZE:
			snprintf(val, sizeof val, "%lld", (long long)*(const int64_t *)field);
			break;
		case C_LEVEL:
			for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++)
				if (level_values[l] == *(const int *)field)
					snprintf(val, sizeof val, "%s", levels[l]);
			break;
		}
		printf("%s = %s\t# %s\n", settings[i].name, val, source[i]);
	}
}

int config_load(struct server_config *cfg, int argc, char **argv,
		int *exit_code, const char **mode)
{
	enum { O_CONFIG = 1000, O_PRINT, O_VERIFY, O_VERSION, O_HELP };
	struct option opts[NSETTINGS + 6];
	struct buf err = BUF_INIT;
	int print = 0, c;

	*mode = NULL;
	*exit_code = 0;
	for (size_t i = 0; i < NSETTINGS; i++)
		opts[i] = (struct option){ settings[i].name, required_argument, 0, (int)i };
	opts[NSETTINGS + 0] = (struct option){ "config", required_argument, 0, O_CONFIG };
	opts[NSETTINGS + 1] = (struct option){ "print-config", no_argument, 0, O_PRINT };
	opts[NSETTINGS + 2] = (struct option){ "verify", no_argument, 0, O_VERIFY };
	opts[NSETTINGS + 3] = (struct option){ "version", no_argument, 0, O_VERSION };
	opts[NSETTINGS + 4] = (struct option){ "help", no_argument, 0, O_HELP };
	opts[NSETTINGS + 5] = (struct option){ 0, 0, 0, 0 };

	const char *env_config = getenv("PTXCACHE_CONFIG");
	if (env_config && *env_config)
		config_path = env_config;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c >= 0 && c < (int)NSETTINGS) {
			flag_value[c] = optarg;
		} else if (c == O_CONFIG) {
			config_path = optarg;
		} else if (c == O_PRINT) {
			print = 1;
		} else if (c == O_VERIFY) {
			*mode = "verify";
		} else if (c == O_VERSION) {
			printf("ptxcached " PTXCACHE_VERSION " (%s)\n", codegen_identity());
			return 1;
		} else if (c == O_HELP || c == 'h') {
			usage(stdout);
			return 1;
		} else {
			fputs("Try 'ptxcached --help'.\n", stderr);
			*exit_code = 2;
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ptxcached: unexpected argument '%s'\nTry 'ptxcached --help'.\n",
			argv[optind]);
		*exit_code = 2;
		return -1;
	}
	cfg->pool.warm_features = "+ptx90";
	if (load_all(cfg, &err) < 0) {
		fprintf(stderr, "ptxcached: %s\n", err.data);
		buf_free(&err);
		*exit_code = 2;
		return -1;
	}
	log_threshold = (enum log_level)cfg->log_level;
	if (print) {
		print_config(cfg);
		return 1;
	}
	return 0;
}

int config_reload(struct server_config *cfg, struct buf *err)
{
	struct server_config next = *cfg;
	char saved[NSETTINGS][160];
	char *saved_owned[NSETTINGS];

	memcpy(saved, source, sizeof saved);
	memcpy(saved_owned, owned, sizeof saved_owned);
	memset(owned, 0, sizeof owned);
	if (load_all(&next, err) < 0) {
		for (size_t i = 0; i < NSETTINGS; i++)
			free(owned[i]);
		memcpy(owned, saved_owned, sizeof owned);
		memcpy(source, saved, sizeof source);
		return -1;
	}
	/* Copy the live settings; report the others if they changed. Strings
	 * of settings that stay are kept alive: the running daemon points at
	 * them. */
	for (size_t i = 0; i < NSETTINGS; i++) {
		const struct setting *s = &settings[i];
		char *dst = (char *)cfg + s->off, *src = (char *)&next + s->off;
		size_t sz = s->type == C_SIZE ? sizeof(int64_t) :
			    s->type == C_STR ? sizeof(char *) : sizeof(int);
		int same = s->type == C_STR ? !strcmp(*(char **)dst, *(char **)src)
					    : !memcmp(dst, src, sz);
		if (!same && s->live) {
			memcpy(dst, src, sz);
			log_info("reload: %s changed (%s)", s->name, source[i]);
			free(saved_owned[i]);
			saved_owned[i] = owned[i];
			owned[i] = NULL;
		} else if (!same) {
			log_warn("reload: %s changed; it takes effect at the next start", s->name);
		}
		free(owned[i]);
		owned[i] = saved_owned[i];
	}
	log_threshold = (enum log_level)cfg->log_level;
	return 0;
}

int config_list_next(const char **p, char *item, size_t n)
{
	while (*p && **p) {
		size_t len = strcspn(*p, ", ");
		const char *at = *p;
		*p += len;
		*p += strspn(*p, ", ");
		if (len && len < n) {
			memcpy(item, at, len);
			item[len] = '\0';
			return 1;
		}
	}
	return 0;
}

int config_list_id(const char *item, int is_group, unsigned *id)
{
	char *end;
	unsigned long v = strtoul(item, &end, 10);

	if (!*end && end != item) {
		*id = (unsigned)v;
		return 1;
	}
	if (is_group) {
		struct group *g = getgrnam(item);
		if (g)
			*id = g->gr_gid;
		return g != NULL;
	}
	struct passwd *pw = getpwnam(item);
	if (pw)
		*id = pw->pw_uid;
	return pw != NULL;
}
