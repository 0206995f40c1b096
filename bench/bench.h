/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.h: what the bench's files share. bench.c holds main, its options
 * and the table of the full run's sections; harness.c the daemons, the
 * clock, the requests, the floor's echo server and the corpus; output.c
 * results.json and the table on stdout; each scn_*.c one section (a
 * scenario) and the figures it fills.
 */
#ifndef PTXCACHE_BENCH_H
#define PTXCACHE_BENCH_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "client/ptxcache.h"
#include "proto/frame.h"
#include "proto/msg.h"

#define CALL_TIMEOUT_MS 600000
#define NONCE_FMT "\n; ptxcache-bench nonce %d\n"

struct kernel {
	char *name;             /* file name without .ll */
	char *ir;
	size_t ir_len;
	int dup;                /* same IR as an earlier kernel: a hit, not a miss */
	size_t ptx_len, cubin_len;
	size_t req_frame, rep_frame;    /* hit request and reply frame sizes */
	double cold_llc_ms, cold_ptxas_ms;
	double miss_ptx_ms, miss_cubin_ms;
	double hit_ptx_us, hit_cubin_us, floor_us; /* medians */
};

/* The run's settings and what every section shares (harness.c). */
struct bench {
	const char *daemon, *corpus, *out, *llc, *ptxas;
	int quick, workers;
	unsigned only;          /* --only: ONLY_* sections; 0: all of them */
	char tmp[256];
	struct kernel *k;
	int nk, distinct;       /* kernels, and kernels with distinct IR */
	char notes[16][256];
	int nnotes;
};
extern struct bench g;

enum { ONLY_START = 1, ONLY_MISS = 2, ONLY_HIT = 4 };

struct daemon {
	pid_t pid;
	char dir[300], sock[340], cache[340];
	double start_ms;        /* spawn until it answers a ping: ready, workers warm */
};

struct figures {
	double cold_llc_ms, cold_ptxas_ms, miss_ptx_ms, miss_cubin_ms;
	double hit_ptx_ms, hit_cubin_ms, hit_p50_us, hit_p99_us;
	double floor_p50_us, floor_p99_us, hit_cubin_p50_us;
	double ranks8_wall_ms, ranks1_wall_ms;
	long long ranks8_compiles, ranks1_compiles;
	double first_request_ms, steady_request_ms, daemon_start_ms, warm_up_ms;
	/* CPU time per request, which a busy machine moves far less than
	 * wall time: the master's and its workers' over the corpus's misses,
	 * the master's over the steady misses and over the hits. */
	double miss_master_cpu_us, miss_workers_cpu_us, steady_master_cpu_us;
	double hit_master_cpu_us;
	/* The worker's own compile time (compile_us) of the first and the
	 * steady requests: what of first / steady is the worker's. */
	double first_compile_us, steady_compile_us;
	long long stored_bytes, raw_bytes, daemon_rss_kb;
	double hits_per_s;
	double fresh_hit_pct;   /* -lineinfo cubins of a second fresh run */
	int ptx_identical;      /* kernels whose daemon PTX matches llc's */
	/* The Redis tier: two nodes' first passes over the corpus. */
	double l2_node1_pass_ms, l2_node2_pass_ms;
	long long l2_node2_compiles, l2_node2_hits;
	/* The trust boundary: misses with the sandbox on and off, what exec
	 * adds to a worker's start, compiles for one user and for two. */
	double miss_sandbox_ms, miss_nosandbox_ms, exec_worker_ms, fork_exit_ms;
	double worker_start_ms;
	long long user1_compiles, user2_compiles, user2_confirmations, user2_mismatches;
	/* Artifact hits of 4 KiB and 4 MiB, and the floor of their sizes. */
	double art_hit_us[2], art_floor_us[2];
};

/* Large values (scn_large.c): 1, 8, 64 and 256 MiB. */
#define NLARGE 4
struct large_fig {
	double put_ms, fsync_ms, cget_ms, cread_ms, pyget_ms, pyread_ms, pyput_ms;
	long long idle_kb, peak_inline_kb, peak_fd_kb, peak_put_kb;
	double hit_ms, hit_max_ms;      /* another client's small hits during a put */
	double hit_replace_ms, hit_replace_max_ms;      /* ... of a value under its key */
};

/* ---- harness.c ---- */

/* The daemon running now, stopped by die() in the bench process itself. */
extern pid_t live_daemon, bench_pid;
/* The worker's own compile time of the last timed_req() (0 on a hit). */
extern int64_t last_compile_us;

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double bench_now_ms(void);
double quantile(double *v, size_t n, double q);
char *read_file(const char *path, size_t *len);
void set_path(struct sockaddr_un *sa, const char *path);
double run_timed(char *const argv[]);
double run_cold(char *const argv[], const char *what);
ptxcache *connect_or_die(const char *sock);
void daemon_start(struct daemon *d, const char *name);
void daemon_start_with(struct daemon *d, const char *name, const char *const *extra);
void daemon_stop(struct daemon *d);
long long stat_of(const char *sock, const char *name);
long long tree_rss_kb(pid_t pid);
double cpu_ns(pid_t pid);
double children_cpu_ns(pid_t pid);
void kernel_req(struct ptxcache_compile_req *r, const char *ir, size_t n);
char *with_nonce(const struct kernel *k, int nonce, size_t *n);
int ptx_req(ptxcache *pc, const char *ir, size_t n, struct ptxcache_result *res);
double timed_req(int (*call)(ptxcache *, const char *, size_t, struct ptxcache_result *),
		 ptxcache *pc, const char *ir, size_t n, int want_cached, const char *what,
		 size_t *out_len);
int cubin_req(ptxcache *pc, const char *ir, size_t n, struct ptxcache_result *res);
int probe_cubin(const char *sock, const struct kernel *k);
int read_full(int fd, void *p, size_t n);
int write_full(int fd, const void *p, size_t n);
pid_t floor_start(const char *path, size_t maxlen);
void load_corpus(void);
const char *find_ptxas(void);
void unmeasured(struct figures *f);
struct kernel *smallest(void);
double settle(const char *sock);
double clients(const char *sock, int nproc, double duration_ms, long long *total);
double corpus_pass(const char *sock);

/* ---- output.c ---- */

void write_json(const struct figures *x, const char *path);
void row(const char *what, double v, const char *unit, const char *ratio_what, double ratio);
void print_table(const struct figures *x);

/* ---- the sections, scn_*.c ---- */

void cold_runs(struct figures *f);
void start_runs(struct figures *f);
void miss_runs(struct figures *f, const struct daemon *d, int cubin);
void miss_loop(double seconds);
void hit_runs(struct figures *f, const struct daemon *d, int cubin);
void hit_loop(double seconds, int cubin);
void artifact_runs(struct figures *f, const struct daemon *d);
double fresh_runs(const struct daemon *d);
void large_runs(struct large_fig *lf);
void large_table(const struct large_fig *lf);
void large_json(const struct large_fig *lf, const char *path);
void second_node(struct figures *f);
void redis_runs(struct figures *f, double t0);
void trust_runs(struct figures *f);
double ranks(int n, long long *compiles);

#endif
