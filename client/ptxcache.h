/*
 * libptxcache: the client library of the ptxcache compile service.
 *
 * A handle is one connection to ptxcached over its Unix socket. Every call
 * has a timeout, reports failure as a return value with a message
 * (ptxcache_errmsg), and never exits, aborts or raises a signal in the host
 * process (SIGPIPE included). A handle is not thread-safe: use one per
 * thread. Nothing here links LLVM.
 *
 * Socket rules: an explicit path, else $PTXCACHE_SOCKET, else
 * $XDG_RUNTIME_DIR/ptxcache/ptxcached.sock, else
 * /tmp/ptxcache-$UID/ptxcached.sock.
 */
#ifndef PTXCACHE_H
#define PTXCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ptxcache ptxcache;

/* How a compile went (the daemon answered in every case). */
enum ptxcache_status {
	PTXCACHE_OK = 0,
	PTXCACHE_PARSE_ERROR = 1,  /* log: LLVM's diagnostic for the input */
	PTXCACHE_ERROR = 2,        /* log: LLVM's errors, as llc prints them */
	PTXCACHE_INVALID = 3,      /* request refused: log says why */
	PTXCACHE_FATAL = 4,        /* LLVM fatal error ("LLVM ERROR: ..." in
	                              log); llc would have aborted */
	PTXCACHE_CRASH = 5,        /* the compiler died; not cached */
	PTXCACHE_TIMEOUT = 6,      /* the compile ran past its limit */
	PTXCACHE_UNAVAILABLE = 7,  /* the daemon cannot run this request */
};

/* The socket path the rules above give; caller frees. NULL if out of
 * memory. */
char *ptxcache_default_socket(void);

/*
 * Connect to the daemon at path (NULL: the rules above). timeout_ms bounds
 * the connect and, afterwards, each call (ptxcache_set_timeout changes it).
 * Returns a handle, or NULL with a message in err (if errlen > 0).
 */
ptxcache *ptxcache_connect(const char *path, int timeout_ms, char *err,
			   size_t errlen);
void ptxcache_set_timeout(ptxcache *pc, int timeout_ms);
/* Close and free; NULL is fine. */
void ptxcache_close(ptxcache *pc);
/* The message of the last failed call on pc; valid until the next call. */
const char *ptxcache_errmsg(const ptxcache *pc);

struct ptxcache_compile_req {
	const void *input;      /* LLVM IR text or bitcode */
	size_t input_len;
	const char *triple;     /* overrides the module's; NULL: keep it */
	const char *march;      /* llc -march; NULL: none */
	const char *cpu;        /* "sm_90a"; NULL: LLVM's default */
	const char *features;   /* "+ptx90"; NULL: none */
	int opt_level;          /* codegen level 0-3 */
	const char *pipeline;   /* middle-end pipeline, or NULL for none */
	int emit;               /* 1: return PTX; 0: only diagnostics */
	int strict;             /* 1: refuse unknown CPUs, features and
	                           non-NVPTX module triples; a module with no
	                           triple gets nvptx64-nvidia-cuda */
	const char *const *options; /* backend options ("-nvptx-fma-level=1") */
	size_t noptions;
};

/* Defaults: opt_level 2 (as llc), emit 1, strict 1, the rest NULL. */
void ptxcache_compile_req_init(struct ptxcache_compile_req *req);

/* The answer to a compile; free with ptxcache_result_free(). */
struct ptxcache_result {
	enum ptxcache_status status;
	int cached;             /* 1 if answered from the cache */
	char key[65];           /* the cache key, hex */
	char *output;           /* PTX (NUL-terminated), may be NULL */
	size_t output_len;
	char *log;              /* diagnostics (NUL-terminated), may be NULL */
	size_t log_len;
	int64_t compile_us;     /* compile time in the worker, 0 on a hit */
};

/*
 * Compile req. Returns 0 when the daemon answered (res->status tells how the
 * compile went), -1 when it could not be asked or did not answer in time
 * (ptxcache_errmsg says why; res is then empty).
 */
int ptxcache_compile(ptxcache *pc, const struct ptxcache_compile_req *req,
		     struct ptxcache_result *res);
void ptxcache_result_free(struct ptxcache_result *res);

/* 0 if the daemon answers, else -1. */
int ptxcache_ping(ptxcache *pc);

/* The daemon's counters as a JSON object (malloc'd, caller frees):
 * entries, bytes, hits, misses, compiles, compile_errors, worker_crashes,
 * dedup_joins and more. 0 or -1. */
int ptxcache_stats_json(ptxcache *pc, char **json);

/* The daemon's name and compiler identity (malloc'd, caller frees). */
int ptxcache_hello(ptxcache *pc, char **server, char **compiler);

#ifdef __cplusplus
}
#endif

#endif
