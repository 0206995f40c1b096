/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libptxcache: the client library of the ptxcache compile service.
 *
 * A handle is one connection to ptxcached over its Unix socket. Every call
 * has a timeout and a silence bound (ptxcache_set_silence), reports
 * failure as a return value with a message (ptxcache_errmsg), and never
 * exits, aborts or raises a signal in the host process (SIGPIPE included). A handle is not thread-safe: use one per
 * thread. Nothing here links LLVM.
 *
 * Socket rules: an explicit path, else $PTXCACHE_SOCKET, else
 * $XDG_RUNTIME_DIR/ptxcache/ptxcached.sock (or, without XDG_RUNTIME_DIR,
 * /tmp/ptxcache-$UID/ptxcached.sock); if that does not exist but the
 * node's service socket /run/ptxcache/ptxcached.sock ($PTXCACHE_NODE_SOCKET
 * where set) does, that one. The library never starts a daemon; the fronts
 * and the Python package do (client/autostart.h).
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
	PTXCACHE_FATAL_EXIT = 8,   /* LLVM fatal error without crash diagnostics
	                              ("LLVM ERROR: ..." in log): llc would exit
	                              with status 1 */
};

/* The socket path the rules above give; caller frees. NULL if out of
 * memory. */
char *ptxcache_default_socket(void);

/*
 * Connect to the daemon at path (NULL: the rules above). timeout_ms bounds
 * the connect and, afterwards, each call (ptxcache_set_timeout changes it);
 * the silence bound is $PTXCACHE_SILENCE_MS, else 5000 ms (see
 * ptxcache_set_silence). Returns a handle, or NULL with a message in err
 * (if errlen > 0).
 */
ptxcache *ptxcache_connect(const char *path, int timeout_ms, char *err,
			   size_t errlen);
void ptxcache_set_timeout(ptxcache *pc, int timeout_ms);

/*
 * The silence bound: a call gives up (returns -1) once the daemon has said
 * nothing for silence_ms, neither taken a byte of the request nor sent one
 * back, so that a daemon that is stopped, stuck or gone costs a caller
 * seconds, not the call's timeout; the fronts then run the real tool.
 * While a compile waits in the daemon (queued or running), the daemon
 * sends a progress frame about once a second, so a call that hears them
 * waits for its answer; the timeout still bounds every call, and is then
 * only the bound on the job (set it above the daemon's job-timeout).
 * 0: no silence bound (the timeout alone); < 0: $PTXCACHE_SILENCE_MS, else
 * 5000 ms. verify, evict and explain are bounded by the timeout alone (the
 * daemon walks the whole cache before it answers them).
 */
void ptxcache_set_silence(ptxcache *pc, int silence_ms);

/* Connection settings; ptxcache_opts_init() sets size and the defaults,
 * then set what differs. Fields may be added at the end: size tells the
 * library which ones the caller's struct has. */
struct ptxcache_opts {
	size_t size;            /* sizeof(struct ptxcache_opts) */
	int timeout_ms;         /* as ptxcache_connect's; <= 0: 10 s */
	int silence_ms;         /* as ptxcache_set_silence's; default -1 */
};
void ptxcache_opts_init(struct ptxcache_opts *opts);

/* ptxcache_connect with opts (NULL: the defaults). */
ptxcache *ptxcache_connect_opts(const char *path, const struct ptxcache_opts *opts,
				char *err, size_t errlen);
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
	int exit_code;          /* cubin: the assembler's exit status; else 0 */
};

/*
 * Compile req. Returns 0 when the daemon answered (res->status tells how the
 * compile went), -1 when it could not be asked or did not answer in time
 * (ptxcache_errmsg says why; res is then empty).
 */
int ptxcache_compile(ptxcache *pc, const struct ptxcache_compile_req *req,
		     struct ptxcache_result *res);
void ptxcache_result_free(struct ptxcache_result *res);

/*
 * PTX to cubin: the second cache stage. The daemon runs the assembler
 * (ptxas by default, nvJitLink on request) and caches the cubin with the
 * log the assembler printed. A request on LLVM IR goes through both stages,
 * each cached.
 */
enum ptxcache_backend {
	PTXCACHE_BACKEND_PTXAS = 0,     /* the real ptxas, as a process: the same
	                                   bytes as the client's own ptxas */
	PTXCACHE_BACKEND_NVJITLINK = 1, /* nvJitLink, in the daemon's worker */
};

struct ptxcache_assemble_req {
	const void *input;      /* PTX text, or LLVM IR when ir is set */
	size_t input_len;
	const struct ptxcache_compile_req *ir; /* NULL: input is PTX; else input
	                           is IR, compiled to PTX with these settings
	                           first (its input fields are not read) */
	const char *const *args; /* ptxas options in canonical spelling, as
	                           proto/ptxas_args.c writes them
	                           ("--gpu-name=sm_90a", "--verbose"); never an
	                           input or output file. Borrowed. */
	size_t nargs;
	enum ptxcache_backend backend;
	const char *sources;    /* NULL, or the client's view of the files
	                           the PTX's .file directives name, one
	                           "PATH\tMTIME:SIZE\n" (or "PATH\t-\n") line
	                           each: ptxas copies mtime and size into the
	                           line info, so they are part of the key, and
	                           the daemon refuses (unavailable) when it sees
	                           the files otherwise. Borrowed. */
};

/* Defaults: PTX input, no options, the ptxas back end. */
void ptxcache_assemble_req_init(struct ptxcache_assemble_req *req);

/*
 * Assemble req. Returns 0 when the daemon answered, -1 when it could not be
 * asked (ptxcache_errmsg says why). res (free with ptxcache_result_free())
 * then holds: status OK; ERROR when the assembler failed (exit_code and
 * log say how); a PTX-stage status when the IR did not compile;
 * UNAVAILABLE when the daemon has no such assembler (log says what is
 * missing and how to point the daemon at it). cached and key are those of
 * the stage that answered; output is the cubin; log is what the assembler
 * printed, its input named "<input>".
 */
int ptxcache_assemble(ptxcache *pc, const struct ptxcache_assemble_req *req,
		      struct ptxcache_result *res);

/* The daemon's ptxas `--version` text, byte for byte (malloc'd, caller
 * frees). 0, or -1 if the daemon has no ptxas or cannot be asked. */
int ptxcache_assembler_version(ptxcache *pc, char **text);

/* 0 if the daemon answers, else -1. */
int ptxcache_ping(ptxcache *pc);

/* The daemon's counters as a JSON object (malloc'd, caller frees):
 * entries, bytes, hits, misses, compiles, compile_errors, worker_crashes,
 * dedup_joins and more. 0 or -1. */
int ptxcache_stats_json(ptxcache *pc, char **json);

/* The daemon's name and compiler identity (malloc'd, caller frees). */
int ptxcache_hello(ptxcache *pc, char **server, char **compiler);

/* Which cache entries ptxcache_ls() and ptxcache_evict() take; NULL or
 * zero fields match everything. */
struct ptxcache_filter {
	const char *kind;       /* "ptx" or "cubin" */
	const char *arch;       /* "sm_90a" */
	int64_t older_than_s;   /* last used longer ago than this */
	int64_t min_bytes;      /* at least this large */
};

/*
 * Queries and maintenance. Each returns 0 and the daemon's answer as JSON
 * text in *json (malloc'd, caller frees), or -1 (ptxcache_errmsg):
 *  - ls: an array of entries, newest first, at most limit (<= 0: 100);
 *  - show: one entry's metadata, key components and, for a failed compile,
 *    its error text; key is 64 hex digits;
 *  - explain: why req would miss: {"key", "cached", "components",
 *    "nearest": {"key", "differing": [{"name", "stored", "requested"}]}};
 *  - verify: {"problems", "report": [lines]} after checking every entry;
 *  - evict: removes the entries f matches, or the least recently used ones
 *    down to max_size bytes (>= 0), or all of them (all = 1); needs root or
 *    the daemon's user. {"removed", "entries", "bytes"}.
 */
int ptxcache_ls(ptxcache *pc, const struct ptxcache_filter *f, int limit,
		char **json);
int ptxcache_show(ptxcache *pc, const char *key, char **json);
int ptxcache_explain(ptxcache *pc, const struct ptxcache_compile_req *req,
		     char **json);
/* explain for the cubin stage: the same answer for an assemble request
 * (its key components, for a portable -lineinfo PTX its "debug_layout"). */
int ptxcache_explain_assemble(ptxcache *pc, const struct ptxcache_assemble_req *req,
			      char **json);
int ptxcache_verify(ptxcache *pc, char **json);
int ptxcache_evict(ptxcache *pc, const struct ptxcache_filter *f,
		   int64_t max_size, int all, char **json);

/* ls and evict within one artifact namespace (ns NULL: as above; with f's
 * kind NULL, ns implies "artifact"). */
int ptxcache_ls_ns(ptxcache *pc, const struct ptxcache_filter *f, const char *ns,
		   int limit, char **json);
int ptxcache_evict_ns(ptxcache *pc, const struct ptxcache_filter *f, const char *ns,
		      int64_t max_size, int all, char **json);

/*
 * Artifacts: the JIT's own cache entries, bytes the caller produced,
 * stored in the caller's scope (its uid, or a group the daemon's site
 * shares) under a namespace ("triton", "inductor-fx": 1 to 32 of
 * [a-z0-9._-]) and a key (1 to 1024 printable ASCII bytes). See
 * proto/PROTOCOL.md, "Artifacts".
 */
struct ptxcache_artifact {
	int found;              /* 1: value holds the entry */
	void *value;            /* malloc'd (free with ptxcache_artifact_free) */
	size_t len;
	uint64_t lease;         /* not 0: the caller now produces this entry;
	                           put it, or release the lease */
};

/* Look ns/key up. A get of an entry another client is producing waits for
 * its value, at most wait_ms (< 0: the daemon's artifact-wait). With
 * take_lease, a miss nobody is producing makes the caller the producer
 * (out->lease). 0 with *out filled (found or not), or -1 (ptxcache_errmsg). */
int ptxcache_artifact_get(ptxcache *pc, const char *ns, const char *key, int take_lease,
			  int wait_ms, struct ptxcache_artifact *out);

/* Store value under ns/key, committed before it returns, and hand it to
 * every client waiting for it. lease: the one ptxcache_artifact_get() gave,
 * or 0 (then refused while another client holds the lease). A value over
 * the daemon's artifact-max-value is refused without being sent (asked
 * with hello before a put of more than 1 MiB). 0 or -1. */
int ptxcache_artifact_put(ptxcache *pc, const char *ns, const char *key, const void *value,
			  size_t len, uint64_t lease);

/* Give up a lease without a value (the caller will not produce it after
 * all), so a waiter takes over at once rather than at the lease's timeout.
 * 0 or -1. */
int ptxcache_artifact_release(ptxcache *pc, uint64_t lease);

void ptxcache_artifact_free(struct ptxcache_artifact *a);

#ifdef __cplusplus
}
#endif

#endif
