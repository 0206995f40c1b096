/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2drive: the tier (daemon/l2.c, l2_conn.c, l2_conf.c) against a live
 * Redis, for tests/test_l2_live.py.
 *
 * usage: l2drive [--read-only] [--timeout MS] [--max-value N] [--prefix P]
 *                [--identity S] URL SECRET_FILE
 *
 * Reads one command a line on stdin and answers each with one line on
 * stdout, on the same libevent loop the daemon runs (so a command waits
 * for its answer while the loop turns):
 *   put HEX PATH      publish PATH's bytes (kind 1, status 0, log "log")
 *                     under key HEX; answers "queued" (puts are background)
 *   get HEX [PATH]    answers "hit sync=S len=N status=N" (and writes the
 *                     data to PATH) or "miss sync=S"; S is 1 when the
 *                     callback ran inside l2_get()
 *   lat HEX N         N gets of HEX one after another; answers "lat n=N
 *                     hits=H p50_us=.. p99_us=.. max_us=.." (each get timed
 *                     on the loop, from l2_get() to its callback)
 *   lat HEX N         N gets of HEX one after another; answers "lat n=N
 *                     hits=H p50_us=.. p99_us=.. max_us=.." (each get timed
 *                     on the loop, from l2_get() to its callback)
 *   space S           puts and gets from now on under the space S
 *                     (l2_put_in(), l2_get_in(); "-": none, the default)
 *   sleep MS          let the loop run MS ms, then "slept"
 *   counters          "hits=.. misses=.. errors=.. timeouts=.. rejects=..
 *                     writes=.. breaker_opens=.. breaker_open=.. redirects=..
 *                     map_refreshes=.. overruns=.."
 *   quit
 * Exit status 2 for a bad command line (with the reason on stderr).
 *
 * usage: l2drive --crypto MB
 *   the seal alone, for bench/large.py: seals and opens an MB-megabyte
 *   value (l2_seal(), l2_open(): AES-256-GCM) and computes one
 *   HMAC-SHA-256 over the same bytes (what an HMAC-only seal costs a
 *   side); prints "seal_mb_s=.. open_mb_s=.. hmac_mb_s=..", best of 5.
 */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "daemon/l2.h"
#include "daemon/log.h"

static struct event_base *base;
static struct l2 *l2;
static struct event *in_ev, *sleep_ev;
static struct buf line = BUF_INIT;
static int busy;                        /* waiting for a get or a sleep */
static int in_get;
static int eof;                         /* stdin is done */
static char get_path[4096];
static char space[80];                  /* of puts and gets: "" none */

static void next_command(void);

static int from_hex(const char *s, unsigned char key[32])
{
	if (strlen(s) != 64)
		return -1;
	for (int i = 0; i < 32; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		key[i] = (unsigned char)v;
	}
	return 0;
}

static int read_file(const char *path, struct buf *out)
{
	FILE *f = fopen(path, "rb");
	char chunk[65536];
	size_t n;

	if (!f)
		return -1;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		if (buf_append(out, chunk, n) < 0) {
			fclose(f);
			return -1;
		}
	fclose(f);
	return 0;
}

static void got(void *arg, int found, const struct l2_value *v)
{
	int sync = in_get;

	if (found) {
		if (get_path[0]) {
			FILE *f = fopen(get_path, "wb");
			if (!f || fwrite(v->data, 1, v->data_len, f) != v->data_len)
				fprintf(stderr, "l2drive: cannot write '%s'\n", get_path);
			if (f)
				fclose(f);
		}
		printf("hit sync=%d len=%zu status=%d\n", sync, v->data_len, v->status);
	} else {
		printf("miss sync=%d\n", sync);
	}
	fflush(stdout);
	busy = 0;
	if (!sync)
		next_command();
}

/* lat: gets of one key one after another, each timed from l2_get() to
 * its callback on this loop (no pipe in the figure). */
#define LAT_MAX 100000
static unsigned char lat_key[32];
static int lat_left, lat_n, lat_hits;
static double lat_us[LAT_MAX];
static struct timespec lat_t0;

static void lat_next(void);

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void lat_got(void *arg, int found, const struct l2_value *v)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	lat_us[lat_n++] = (t.tv_sec - lat_t0.tv_sec) * 1e6 + (t.tv_nsec - lat_t0.tv_nsec) / 1e3;
	lat_hits += found;
	if (--lat_left > 0) {
		/* From the loop, not from inside the callback: as a daemon would. */
		event_base_once(base, -1, EV_TIMEOUT, (void (*)(evutil_socket_t, short, void *))lat_next,
				NULL, NULL);
		return;
	}
	qsort(lat_us, (size_t)lat_n, sizeof lat_us[0], cmp_double);
	printf("lat n=%d hits=%d p50_us=%.0f p99_us=%.0f max_us=%.0f\n", lat_n, lat_hits,
	       lat_us[lat_n / 2], lat_us[(lat_n * 99) / 100], lat_us[lat_n - 1]);
	fflush(stdout);
	busy = 0;
	next_command();
}

static void lat_next(void)
{
	clock_gettime(CLOCK_MONOTONIC, &lat_t0);
	l2_get(l2, lat_key, lat_got, NULL);
}

static void on_slept(evutil_socket_t fd, short what, void *arg)
{
	printf("slept\n");
	fflush(stdout);
	busy = 0;
	next_command();
}

/* Run one command line; sets busy if its answer comes later. */
static void run(char *cmd)
{
	char *argv[4] = { 0 };
	int argc = 0;
	unsigned char key[32];

	for (char *t = strtok(cmd, " \t"); t && argc < 4; t = strtok(NULL, " \t"))
		argv[argc++] = t;
	if (!argc)
		return;
	if (!strcmp(argv[0], "put") && argc == 3 && !from_hex(argv[1], key)) {
		struct buf data = BUF_INIT;
		struct l2_value v = { .kind = 1, .log = "log", .log_len = 3 };
		if (read_file(argv[2], &data) < 0) {
			printf("error cannot read '%s'\n", argv[2]);
		} else {
			v.data = data.data;
			v.data_len = data.len;
			l2_put_in(l2, space[0] ? space : NULL, key, &v);
			printf("queued\n");
		}
		buf_free(&data);
	} else if (!strcmp(argv[0], "get") && argc >= 2 && !from_hex(argv[1], key)) {
		snprintf(get_path, sizeof get_path, "%s", argc > 2 ? argv[2] : "");
		busy = 1;
		in_get = 1;
		l2_get_in(l2, space[0] ? space : NULL, key, got, NULL);
		in_get = 0;
	} else if (!strcmp(argv[0], "lat") && argc == 3 && !from_hex(argv[1], key)) {
		memcpy(lat_key, key, 32);
		lat_left = atoi(argv[2]);
		lat_n = lat_hits = 0;
		if (lat_left < 1 || lat_left > LAT_MAX) {
			printf("error bad count\n");
		} else {
			busy = 1;
			lat_next();
		}
	} else if (!strcmp(argv[0], "space") && argc == 2) {
		snprintf(space, sizeof space, "%s", strcmp(argv[1], "-") ? argv[1] : "");
		printf("space %s\n", space[0] ? space : "-");
	} else if (!strcmp(argv[0], "sleep") && argc == 2) {
		long ms = atol(argv[1]);
		struct timeval tv = { ms / 1000, ms % 1000 * 1000 };
		busy = 1;
		evtimer_add(sleep_ev, &tv);
	} else if (!strcmp(argv[0], "counters")) {
		struct l2_counters c;
		l2_counters(l2, &c);
		printf("hits=%lld misses=%lld errors=%lld timeouts=%lld rejects=%lld "
		       "writes=%lld breaker_opens=%lld breaker_open=%d bytes_read=%lld "
		       "bytes_written=%lld redirects=%lld map_refreshes=%lld overruns=%lld\n",
		       (long long)c.hits, (long long)c.misses, (long long)c.errors,
		       (long long)c.timeouts, (long long)c.rejects, (long long)c.writes,
		       (long long)c.breaker_opens, c.breaker_open, (long long)c.bytes_read,
		       (long long)c.bytes_written, (long long)c.redirects,
		       (long long)c.map_refreshes, (long long)c.overruns);
	} else if (!strcmp(argv[0], "quit")) {
		event_base_loopbreak(base);
		busy = 1;
	} else {
		printf("error bad command\n");
	}
	fflush(stdout);
}

/* Run the complete lines buffered, until one leaves us waiting. */
static void next_command(void)
{
	char *nl;

	while (!busy && line.len && (nl = memchr(line.data, '\n', line.len))) {
		size_t n = (size_t)(nl - line.data) + 1;
		char cmd[8192];
		snprintf(cmd, sizeof cmd, "%.*s", (int)(n - 1), line.data);
		buf_consume(&line, n);
		run(cmd);
	}
	if (!busy && eof)
		event_base_loopbreak(base);
}

static void on_stdin(evutil_socket_t fd, short what, void *arg)
{
	char chunk[4096];
	ssize_t n = read(fd, chunk, sizeof chunk);

	if (n <= 0) {
		event_del(in_ev);
		eof = 1;
	} else {
		buf_append(&line, chunk, (size_t)n);
	}
	next_command();
}
static double secs_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static int crypto_bench(size_t mb)
{
	static const char secret[] = "a cluster secret";
	const unsigned char key[32] = { 1 };
	size_t n = mb << 20;
	unsigned char *data = malloc(n), mac[32];
	struct buf sealed = BUF_INIT, plain = BUF_INIT;
	double best[3] = { 1e9, 1e9, 1e9 };
	struct l2_value v = { .kind = 1 }, got;
	const char *why;
	unsigned len;

	if (!data || !n)
		return 2;
	for (size_t i = 0; i < n; i++)
		data[i] = (unsigned char)(i * 131 + (i >> 12));
	v.data = data;
	v.data_len = n;
	for (int round = 0; round < 5; round++) {
		struct timespec t0;
		double t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (l2_seal("ptxcache:", key, &v, "id", secret, sizeof secret - 1, &sealed) < 0)
			return 1;
		if ((t = secs_since(&t0)) < best[0])
			best[0] = t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (l2_open("ptxcache:", key, sealed.data, sealed.len, "id", secret,
			    sizeof secret - 1, &plain, &got, &why) < 0 || got.data_len != n)
			return 1;
		if ((t = secs_since(&t0)) < best[1])
			best[1] = t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (!HMAC(EVP_sha256(), secret, sizeof secret - 1, data, n, mac, &len))
			return 1;
		if ((t = secs_since(&t0)) < best[2])
			best[2] = t;
	}
	printf("seal_mb_s=%.0f open_mb_s=%.0f hmac_mb_s=%.0f\n", (double)mb / best[0],
	       (double)mb / best[1], (double)mb / best[2]);
	free(data);
	buf_free(&sealed);
	buf_free(&plain);
	return 0;
}

int main(int argc, char **argv)
{
	struct l2_config cfg = {
		.prefix = "ptxcache:", .connect_timeout_ms = 50, .command_timeout_ms = 50,
		.max_value = 0, .identity = "l2drive test compiler",
	};
	struct buf err = BUF_INIT;
	int i;

	/* The daemon's heap (server.c): freed blocks kept for reuse. */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	if (argc == 3 && !strcmp(argv[1], "--crypto"))
		return crypto_bench((size_t)atoll(argv[2]));
	for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
		if (!strcmp(argv[i], "--read-only"))
			cfg.read_only = 1;
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			cfg.connect_timeout_ms = cfg.command_timeout_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--max-value") && i + 1 < argc)
			cfg.max_value = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--prefix") && i + 1 < argc)
			cfg.prefix = argv[++i];
		else if (!strcmp(argv[i], "--identity") && i + 1 < argc)
			cfg.identity = argv[++i];
		else
			break;
	}
	if (argc - i != 2) {
		fprintf(stderr, "usage: l2drive [--read-only] [--timeout MS] [--max-value N] "
			"[--prefix P] [--identity S] URL SECRET_FILE\n");
		return 2;
	}
	cfg.url = argv[i];
	cfg.secret_file = argv[i + 1];
	signal(SIGPIPE, SIG_IGN);
	log_threshold = LOG_DEBUG;
	base = event_base_new();
	if (!base || !(l2 = l2_new(base, &cfg, &err))) {
		fprintf(stderr, "l2drive: %s\n", err.data ? err.data : "cannot start");
		return 2;
	}
	in_ev = event_new(base, STDIN_FILENO, EV_READ | EV_PERSIST, on_stdin, NULL);
	sleep_ev = evtimer_new(base, on_slept, NULL);
	event_add(in_ev, NULL);
	event_base_dispatch(base);
	l2_free(l2);
	event_free(in_ev);
	event_free(sleep_ev);
	event_base_free(base);
	buf_free(&line);
	buf_free(&err);
	return 0;
}
