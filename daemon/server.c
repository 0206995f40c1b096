/*
 * server: the master process of ptxcached.
 *
 * One libevent loop owns everything: the listening Unix socket, client
 * connections, the SQLite store and the worker pool. A request flows:
 *
 *   frame in -> header checked against limits -> body validated (msg.c)
 *   -> request table -> compile: key derived (key.c) -> store hit? reply
 *   -> in-flight flight for the same key? join it (single flight)
 *   -> else a new flight, queued on the pool -> worker result -> stored
 *      (committed) -> replied to every waiter
 *
 * Connections are state machines (enum conn_state). Several requests may be
 * in flight per connection; replies carry the request's id. A connection
 * that closes while it waits keeps its struct alive until its last waiter
 * is answered (refcount), so no callback ever touches freed memory.
 *
 * The master never runs LLVM code and never waits on a compile.
 */
#include "daemon/server.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "daemon/codegen.h"
#include "daemon/config.h"
#include "daemon/cubin.h"
#include "daemon/cubin_debug.h"
#include "daemon/key.h"
#include "daemon/l2.h"
#include "daemon/confirm.h"
#include "daemon/log.h"
#include "daemon/sandbox.h"
#include "daemon/store.h"
#include "proto/frame.h"
#include "proto/llc_args.h"
#include "proto/msg.h"
#include "proto/ptxas_args.h"

#define SERVER_NAME "ptxcached 0.1.0"
/* Single flights are found by the first bytes of their key. */
#define FLIGHT_BUCKETS 1024

enum conn_state {
	CONN_READING,   /* reading frames; requests may be in flight */
	CONN_CLOSING,   /* an error frame is queued; close once it is sent */
	CONN_CLOSED,    /* socket gone; struct lives while waiters hold it */
};

/* Per peer uid: what its connections hold, for the per-user caps. */
struct peer {
	uid_t uid;
	int conns;
	int jobs;               /* flights it started that are not done */
	struct peer *next;
};

struct conn {
	struct server *srv;
	struct bufferevent *bev;
	enum conn_state state;
	int refs;               /* 1 for the socket + 1 per waiting request */
	int waiting;            /* requests waiting on a compile */
	uint64_t serial;
	struct peer *peer;      /* NULL if it could not be allocated */
	uid_t uid;              /* SO_PEERCRED: who it is, always set */
	struct event *timer;    /* header or idle timeout, see conn_arm() */
	enum { TIMER_NONE, TIMER_HEADER, TIMER_IDLE } timer_mode;
	int partial;            /* a frame has started but not arrived whole */
	struct conn *prev, *next;       /* the server's open connections */
};

/* What a cubin request asks of the assembler (owned strings). */
struct asm_req {
	enum cubin_backend_kind backend;
	char *args;             /* canonical options, '\n'-separated */
	char *arch;             /* --gpu-name's value, or NULL */
	char *sources;          /* the client's stamps of the PTX's .file
	                           sources (see cubin.h), or NULL */
};

struct waiter {
	struct conn *conn;
	uint64_t id;
	struct asm_req *then;   /* IR to cubin: run this cubin stage on the PTX
	                           (owned); NULL: answer with this flight's result */
	struct dbg_view *view;  /* a portable -lineinfo cubin: this client's
	                           source paths and stamps (owned), or NULL */
	struct waiter *next;
};

/* One key being compiled, and everyone waiting for it. */
struct flight {
	struct key key;
	char *components;       /* JSON, stored beside the entry */
	char *arch;
	struct waiter *waiters;
	struct pool_job job;
	struct flight *next;    /* bucket chain */
	enum store_kind kind;   /* the stage: STORE_PTX or STORE_CUBIN */
	struct server *srv;
	struct peer *peer;      /* who started it (per-uid job cap) */
	int64_t tenant;         /* whose compile it is (confirm.h) */
	int background;         /* a confirmation nobody waits for */
	struct flight_dbg *dbg; /* a portable -lineinfo cubin, or NULL */
};

/* A portable cubin flight: whose paths the assembler ran with, the
 * canonical view that is stored, and the key that accepts other paths. */
struct flight_dbg {
	struct dbg_view view, canon;
	struct key loose;
	char *loose_components;
};

struct counters {
	int64_t requests, hits, misses, compiles, compile_errors, dedup_joins,
		store_errors, protocol_errors, connections, refused_connections,
		denied_connections, header_timeouts, idle_timeouts, output_overflows,
		refused_jobs, confirmations, confirm_mismatches,
		lineinfo_hits,          /* portable cubins served by rewriting */
		lineinfo_layout_misses, /* misses whose shape was compiled before
		                           with paths or stamps of other lengths */
		lineinfo_loose_hits,    /* lineinfo-loose: answers naming other paths */
		lineinfo_unportable,    /* compiles whose line table was not as
		                           cubin_debug.c predicts: not stored */
		lineinfo_rewrite_errors;/* stored portable cubins that failed their
		                           check on a hit (compiled again) */
};

/* Loose keys compiled since start (the first 8 bytes, direct-mapped), to
 * tell a miss caused by path or stamp lengths from a new kernel. */
#define SEEN_SLOTS 65536

struct server {
	struct server_config *cfg;
	struct event_base *base;
	struct l2 *l2;          /* the Redis tier, or NULL */
	struct evconnlistener *listener;
	struct store *store;
	struct pool *pool;
	struct flight *flights[FLIGHT_BUCKETS];
	int nflights;
	struct peer *peers;
	struct conn *conns;     /* open connections (for a stop that drains) */
	int nconns;
	gid_t socket_gid;
	int stopping;           /* SIGTERM: finishing in-flight compiles */
	int socket_from_systemd;
	struct counters n;
	enum sharing sharing;   /* confirm.h */
	struct event *flush_timer, *sigterm, *sigint, *sighup, *stop_timer;
	struct cubin_backend asm_be[2]; /* by enum cubin_backend_kind, found
	                                   at start */
	char *asm_roots;        /* their directories, for the assembler
	                           workers' sandbox */
	char *worker_tmp;       /* <cache>/workers: assembler workers' dirs */
	uint64_t next_serial;
	time_t started;
	uint64_t *seen_loose;   /* SEEN_SLOTS entries, or NULL */
};

static uint64_t key_prefix(const struct key *k)
{
	uint64_t v;
	memcpy(&v, k->hash, sizeof v);
	return v | 1;   /* never 0, the empty slot */
}

static void seen_add(struct server *s, const struct key *k)
{
	if (s->seen_loose)
		s->seen_loose[key_prefix(k) % SEEN_SLOTS] = key_prefix(k);
}

static int seen_has(const struct server *s, const struct key *k)
{
	return s->seen_loose && s->seen_loose[key_prefix(k) % SEEN_SLOTS] == key_prefix(k);
}

static void flight_dbg_free(struct flight_dbg *d)
{
	if (!d)
		return;
	dbg_view_free(&d->view);
	dbg_view_free(&d->canon);
	free(d->loose_components);
	free(d);
}

static void view_free(struct dbg_view *v)
{
	dbg_view_free(v);
	free(v);
}

static void maybe_stop(struct server *s);

static const char *const state_names[] = { "reading", "closing", "closed" };

static void conn_set_state(struct conn *c, enum conn_state s)
{
	log_debug("conn %llu: %s -> %s", (unsigned long long)c->serial,
		  state_names[c->state], state_names[s]);
	c->state = s;
}

static struct peer *peer_get(struct server *s, uid_t uid)
{
	struct peer *p;

	for (p = s->peers; p; p = p->next)
		if (p->uid == uid)
			return p;
	p = calloc(1, sizeof *p);
	if (p) {
		p->uid = uid;
		p->next = s->peers;
		s->peers = p;
	}
	return p;
}

/* Forget a peer that holds nothing any more. */
static void peer_put(struct server *s, struct peer *p)
{
	if (!p || p->conns || p->jobs)
		return;
	struct peer **pp = &s->peers;
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	free(p);
}

static void conn_unref(struct conn *c)
{
	if (--c->refs == 0)
		free(c);
}

static void conn_close(struct conn *c)
{
	if (c->state == CONN_CLOSED)
		return;
	conn_set_state(c, CONN_CLOSED);
	bufferevent_free(c->bev);
	c->bev = NULL;
	if (c->timer)
		event_free(c->timer);
	c->timer = NULL;
	c->srv->nconns--;
	if (c->prev)
		c->prev->next = c->next;
	else
		c->srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->peer) {
		c->peer->conns--;
		peer_put(c->srv, c->peer);
		c->peer = NULL;
	}
	/* Its queued compiles may now have nobody to answer. */
	if (c->waiting && c->srv->pool)
		pool_prune(c->srv->pool);
	conn_unref(c);
}

/*
 * One timer per connection: while a frame is partly read, it must arrive
 * whole within header_timeout (slowloris); while nothing is in flight and
 * nothing is partly read, the connection may idle for idle_timeout; while
 * the connection waits on compiles, no timer runs.
 */
static void conn_arm(struct conn *c)
{
	struct server_config *cfg = c->srv->cfg;

	if (c->state != CONN_READING || !c->timer)
		return;
	int want = c->partial ? TIMER_HEADER : c->waiting == 0 ? TIMER_IDLE : TIMER_NONE;
	/* A frame's deadline counts from its first byte, not its latest. */
	if (want == TIMER_HEADER && c->timer_mode == TIMER_HEADER)
		return;
	evtimer_del(c->timer);
	c->timer_mode = want;
	if (want != TIMER_NONE) {
		struct timeval tv = { want == TIMER_HEADER ? cfg->header_timeout_s
							   : cfg->idle_timeout_s, 0 };
		evtimer_add(c->timer, &tv);
	}
}

/* Queue a finished frame from out on c (dropped if c has gone). */
static void conn_send(struct conn *c, const struct buf *out)
{
	if (c->state == CONN_CLOSED)
		return;
	struct evbuffer *o = bufferevent_get_output(c->bev);
	if (evbuffer_get_length(o) + out->len > (size_t)c->srv->cfg->max_output) {
		/* A reader this slow would make us hold unbounded memory. */
		c->srv->n.output_overflows++;
		log_warn("conn %llu: client does not read its replies (%zu bytes queued); closing",
			 (unsigned long long)c->serial, evbuffer_get_length(o));
		conn_close(c);
		return;
	}
	/* Nothing queued before it: write it now. bufferevent_write() would
	 * copy it, turn EPOLLOUT on and send it on the next loop iterations,
	 * 16 KB each, then turn EPOLLOUT off again (bench/NOTES.md). Only
	 * what the socket does not take is queued; errors are left to the
	 * bufferevent, which sees them on its own write. */
	size_t off = 0;
	if (evbuffer_get_length(o) == 0) {
		ssize_t w = send(bufferevent_getfd(c->bev), out->data, out->len,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w > 0)
			off = (size_t)w;
	}
	if (off < out->len && bufferevent_write(c->bev, out->data + off, out->len - off) < 0) {
		log_warn("conn %llu: cannot queue reply; closing",
			 (unsigned long long)c->serial);
		conn_close(c);
	}
}

/* Answer request id with an error frame. */
static void send_error(struct conn *c, uint64_t id, const char *code,
		       const char *message)
{
	struct buf out = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &out, FRAME_ERROR);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_str(&w, "code", code);
	msg_put_str(&w, "message", message);
	if (msg_end(&w) == 0)
		conn_send(c, &out);
	buf_free(&out);
}

/* Send an error frame, then close once it is sent. */
static void refuse(struct conn *c, const char *code, const char *message)
{
	send_error(c, 0, code, message);
	if (c->state == CONN_READING) {
		conn_set_state(c, CONN_CLOSING);
		bufferevent_disable(c->bev, EV_READ);
		if (c->timer)
			evtimer_del(c->timer);
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
			conn_close(c);
	}
}

/* A frame that cannot be understood: say why, then close. */
static void protocol_error(struct conn *c, const char *message)
{
	c->srv->n.protocol_errors++;
	log_info("conn %llu: %s", (unsigned long long)c->serial, message);
	refuse(c, "protocol", message);
}

/* ---- compile -------------------------------------------------------- */

struct compile_req {
	const char *input;
	size_t input_len;
	char *kind, *triple, *march, *cpu, *features, *pipeline;
	int64_t opt;
	int emit, strict;
	char *optset;           /* '\n'-separated backend options */
	char ns[16];            /* the user's namespace, or "" (shared) */
	char input_sha[65];     /* SHA-256 of input, once computed */
	int cubin;              /* kind "cubin": asmr says how */
	int from_ptx;           /* input_kind "ptx": the input is PTX already */
	struct asm_req asmr;
};

static void asm_req_free(struct asm_req *a)
{
	if (!a)
		return;
	free(a->args);
	free(a->arch);
	free(a->sources);
	a->args = a->arch = a->sources = NULL;
}

static void start_cubin(struct conn *c, uint64_t id, const char *ptx,
			size_t ptx_len, const struct asm_req *a, int chained);

static void compile_req_free(struct compile_req *r)
{
	asm_req_free(&r->asmr);
	free(r->kind);
	free(r->triple);
	free(r->march);
	free(r->cpu);
	free(r->features);
	free(r->pipeline);
	free(r->optset);
}

/* Bounded text field: 0 ok, -1 with why set. */
static int text_field(const struct msg *m, const char *name, size_t max,
		      char **out, const char **why)
{
	int r = msg_strdup(m, name, out);
	if (r < 0 || (*out && strlen(*out) > max) ||
	    (*out && strpbrk(*out, "\n\r"))) {
		*why = name;
		return -1;
	}
	return 0;
}

/* The cubin fields of a compile request: input_kind, backend, asm_args
 * (checked and made canonical by ptxas_args_check). 0, or -1 with a
 * message. */
static int parse_asm(const struct msg *m, struct compile_req *r, struct buf *err)
{
	const char *v, *args[PTXAS_MAX_ARGS];
	size_t n, nargs = 0;
	struct buf canon = BUF_INIT;

	if (msg_bytes(m, "input_kind", &v, &n) == 1) {
		if (n == 3 && !memcmp(v, "ptx", 3)) {
			r->from_ptx = 1;
		} else if (!(n == 2 && !memcmp(v, "ir", 2))) {
			buf_puts(err, "'input_kind' must be \"ir\" or \"ptx\"");
			return -1;
		}
	}
	if (msg_bytes(m, "asm_sources", &v, &n) == 1) {
		if (n > 65536 || memchr(v, '\0', n) || !(r->asmr.sources = strndup(v, n))) {
			buf_puts(err, "bad 'asm_sources'");
			return -1;
		}
	}
	if (msg_bytes(m, "backend", &v, &n) == 1) {
		if (n == 9 && !memcmp(v, "nvjitlink", 9)) {
			r->asmr.backend = CUBIN_NVJITLINK;
		} else if (!(n == 5 && !memcmp(v, "ptxas", 5))) {
			buf_puts(err, "'backend' must be \"ptxas\" or \"nvjitlink\"");
			return -1;
		}
	}
	const msgpack_object *o = msg_get(m, "asm_args");
	if (o && o->type != MSGPACK_OBJECT_NIL) {
		if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PTXAS_MAX_ARGS) {
			buf_printf(err, "'asm_args' must be an array of at most %d strings",
				   PTXAS_MAX_ARGS);
			return -1;
		}
		char *tmp[PTXAS_MAX_ARGS];
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			const msgpack_object *e = &o->via.array.ptr[i];
			if (e->type != MSGPACK_OBJECT_STR || e->via.str.size > 300 ||
			    memchr(e->via.str.ptr, '\0', e->via.str.size) ||
			    !(tmp[nargs] = strndup(e->via.str.ptr, e->via.str.size))) {
				buf_puts(err, "bad assembler option in 'asm_args'");
				while (nargs)
					free(tmp[--nargs]);
				return -1;
			}
			args[nargs] = tmp[nargs];
			nargs++;
		}
		int rc = ptxas_args_check(args, nargs, &canon, &r->asmr.arch, err);
		while (nargs)
			free(tmp[--nargs]);
		if (rc < 0) {
			buf_free(&canon);
			return -1;
		}
	}
	r->asmr.args = buf_detach(&canon, NULL);
	if (!r->asmr.args) {
		buf_puts(err, "out of memory");
		return -1;
	}
	return 0;
}

/* Decode and check a compile request. Returns 0, or -1 with a message. */
static int parse_compile(const struct msg *m, uint32_t max_input,
			 struct compile_req *r, struct buf *err)
{
	const char *why = NULL;
	int64_t opt = 2;

	memset(r, 0, sizeof *r);
	r->emit = 1;
	if (msg_bytes(m, "input", &r->input, &r->input_len) != 1) {
		buf_puts(err, "compile request without 'input'");
		return -1;
	}
	if (r->input_len > max_input) {
		buf_printf(err, "input of %zu bytes exceeds the limit", r->input_len);
		return -1;
	}
	if (text_field(m, "kind", 16, &r->kind, &why) < 0 ||
	    text_field(m, "triple", 128, &r->triple, &why) < 0 ||
	    text_field(m, "march", 64, &r->march, &why) < 0 ||
	    text_field(m, "cpu", 64, &r->cpu, &why) < 0 ||
	    text_field(m, "features", 1024, &r->features, &why) < 0 ||
	    text_field(m, "pipeline", 4096, &r->pipeline, &why) < 0 ||
	    msg_int(m, "opt", &opt) < 0 || msg_bool(m, "emit", &r->emit) < 0 ||
	    msg_bool(m, "strict", &r->strict) < 0) {
		buf_printf(err, "bad field '%s' in compile request", why ? why : "opt/emit/strict");
		return -1;
	}
	if (opt < 0 || opt > 3) {
		buf_printf(err, "bad optimisation level %lld (0-3)", (long long)opt);
		return -1;
	}
	r->opt = opt;
	if (r->kind && strcmp(r->kind, "ptx") != 0 && strcmp(r->kind, "cubin") != 0) {
		buf_printf(err, "unsupported output kind '%s'", r->kind);
		return -1;
	}
	r->cubin = r->kind && !strcmp(r->kind, "cubin");
	if (r->cubin && parse_asm(m, r, err) < 0)
		return -1;

	/* Backend options: an array of "-name[=value]" strings. */
	struct buf os = BUF_INIT;
	const msgpack_object *o = msg_get(m, "options");
	if (o && o->type != MSGPACK_OBJECT_NIL) {
		if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > 32) {
			buf_puts(err, "'options' must be an array of at most 32 strings");
			return -1;
		}
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			const msgpack_object *s = &o->via.array.ptr[i];
			if (s->type != MSGPACK_OBJECT_STR || s->via.str.size < 2 ||
			    s->via.str.size > 256 || s->via.str.ptr[0] != '-' ||
			    memchr(s->via.str.ptr, '\n', s->via.str.size) ||
			    memchr(s->via.str.ptr, '\0', s->via.str.size)) {
				buf_puts(err, "bad backend option: each must be a string "
					 "starting with '-'");
				buf_free(&os);
				return -1;
			}
			/* Only the options the table models start a worker:
			 * never one that prints, times, touches files or stops
			 * the pipeline. "--x" is "-x". */
			char name[258];
			const char *p = s->via.str.ptr;
			size_t n = s->via.str.size;
			if (n > 2 && p[1] == '-')
				p++, n--;
			memcpy(name, p, n);
			name[n] = '\0';
			if (!llc_backend_option(name)) {
				buf_printf(err, "backend option '%s' is not one the daemon models "
					   "(proto/llc_args.c); run llc itself for it", name);
				buf_free(&os);
				return -1;
			}
			if (i)
				buf_puts(&os, "\n");
			buf_puts(&os, name);
		}
	}
	r->optset = buf_detach(&os, NULL);
	return r->optset ? 0 : -1;
}

/* Key components of a compile request, in their fixed order. The input
 * enters as its SHA-256; the diagnostic name never enters (clients map it). */
static int compile_key(struct compile_req *r, struct key *k,
		       struct buf *components)
{
	char opt[4];

	/* Hashed once per request: a miss derives the key again, with its
	 * components. */
	if (!r->input_sha[0])
		key_sha256_hex(r->input, r->input_len, r->input_sha);
	snprintf(opt, sizeof opt, "%d", (int)r->opt);
	const struct key_part parts[] = {
		{ "kind", "ptx" },
		{ "compiler", codegen_identity() },
		{ "input_sha256", r->input_sha },
		{ "triple", r->triple },
		{ "march", r->march },
		{ "cpu", r->cpu },
		{ "features", r->features },
		{ "opt", opt },
		{ "pipeline", r->pipeline },
		{ "emit", r->emit ? "1" : "0" },
		{ "strict", r->strict ? "1" : "0" },
		{ "options", r->optset },
		{ "namespace", r->ns },        /* last: only with namespaces */
	};
	size_t n = sizeof parts / sizeof parts[0] - (r->ns[0] ? 0 : 1);
	return key_derive(parts, n, k, components);
}

/* With namespace-per-uid, a user's entries are theirs alone. */
static void set_namespace(struct server *s, struct conn *c, struct compile_req *r)
{
	if (s->sharing == SHARING_SEPARATE)
		snprintf(r->ns, sizeof r->ns, "uid:%u", (unsigned)c->uid);
}

/* exit_code: the assembler's exit status for a cubin reply; -1: none. */
static void send_compile_reply(struct conn *c, uint64_t id, int status,
			       int cached, const struct key *k,
			       const char *out, size_t outn,
			       const char *lg, size_t lgn, int64_t us,
			       int exit_code)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, FRAME_COMPILE | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_int(&w, "status", status);
	msg_put_bool(&w, "cached", cached);
	msg_put_str(&w, "key", k->hex);
	if (outn)
		msg_put_bin(&w, "output", out, outn);
	if (lgn)
		msg_put_strn(&w, "log", lg, lgn);
	if (us)
		msg_put_int(&w, "compile_us", us);
	if (exit_code >= 0)
		msg_put_int(&w, "exit_code", exit_code);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	else
		send_error(c, id, "internal", "out of memory building the reply");
	buf_free(&b);
}

static unsigned bucket_of(const struct key *k)
{
	return ((unsigned)k->hash[0] << 8 | k->hash[1]) % FLIGHT_BUCKETS;
}

/* The tenant c's compiles run for: its uid. */
static int64_t conn_tenant(const struct conn *c)
{
	return (int64_t)c->uid;
}

/* The flight computing k that c may join: one for c's own tenant (a
 * result another tenant's worker computes is no answer for c yet). */
static struct flight *flight_find(struct server *s, const struct key *k, const struct conn *c)
{
	for (struct flight *f = s->flights[bucket_of(k)]; f; f = f->next)
		if (memcmp(f->key.hash, k->hash, sizeof k->hash) == 0 && !f->background &&
		    (s->sharing == SHARING_TRUST || f->tenant == conn_tenant(c)))
			return f;
	return NULL;
}

/* The stored entry for k, if it may answer c (confirm.h); 1 if so. */
static int lookup_for(struct conn *c, const struct key *k, struct store_result *hit)
{
	struct server *s = c->srv;

	if (store_get(s->store, k->hash, hit) != 1)
		return 0;
	if (confirm_may_serve(s->sharing, hit, conn_tenant(c)))
		return 1;
	store_result_free(hit);
	memset(hit, 0, sizeof *hit);
	return 0;
}

static void flight_unlink(struct server *s, struct flight *f)
{
	struct flight **pp = &s->flights[bucket_of(&f->key)];
	while (*pp != f)
		pp = &(*pp)->next;
	*pp = f->next;
}

static int add_waiter(struct flight *f, struct conn *c, uint64_t id)
{
	struct waiter *wt = malloc(sizeof *wt);
	if (!wt)
		return -1;
	wt->conn = c;
	wt->id = id;
	wt->then = NULL;
	wt->view = NULL;
	wt->next = f->waiters;
	f->waiters = wt;
	c->refs++;
	c->waiting++;
	conn_arm(c);
	return 0;
}

static void confirm_in_background(struct server *s, const struct flight *f);
static void flight_register(struct server *s, struct flight *f);

/* A flight has its result, compiled here or fetched from the Redis tier:
 * store it if deterministic, publish what we compiled, then answer every
 * waiter. Storing first means an acknowledged result is durable. */
static void flight_finish(struct flight *f, const struct job_result *res,
			  int compiled)
{
	struct server *s = f->srv;

	if (compiled && !res->not_run) {
		s->n.compiles++;
		if (res->status != JOB_OK)
			s->n.compile_errors++;
	}
	/* An assembler's failure is deterministic (a syntax error, say) and
	 * cached with its exit status as the entry's status; its death by a
	 * signal, a timeout or a missing binary are not. */
	int cubin = f->kind == STORE_CUBIN;
	int status = res->status;
	if (cubin && status == JOB_ERROR)
		status = res->exit_code ? res->exit_code : 255;
	/* A portable -lineinfo cubin is stored with the canonical paths and
	 * stamps (what came from the cache or Redis has them already); one
	 * whose line table is not what cubin_debug.c predicts is not stored,
	 * and answers only the clients whose paths it names. */
	const char *data = res->output;
	size_t data_len = res->output_len;
	struct buf canon = BUF_INIT;
	int unportable = 0;
	if (f->dbg && compiled && res->status == JOB_OK) {
		const char *why = "";
		if (dbg_rewrite(res->output, res->output_len, &f->dbg->view, &f->dbg->canon,
				&canon, &why) == 0) {
			data = canon.data;
			data_len = canon.len;
		} else {
			unportable = 1;
			s->n.lineinfo_unportable++;
			log_warn("cubin %.16s: line table not as predicted (%s); not cached",
				 f->key.hex, why);
		}
	}
	if (unportable) {
		/* nothing stored */
	} else if (cubin ? res->status == JOB_OK || res->status == JOB_ERROR
			 : JOB_CACHEABLE(res->status)) {
		struct buf err = BUF_INIT;
		/* Computed here: its producer is the flight's tenant. From the
		 * Redis tier: confirmed by the node that published it. */
		int trusted = !compiled || s->sharing == SHARING_TRUST;
		struct store_entry e = {
			.kind = f->kind,
			.status = status,
			.data = data,
			.data_len = data_len,
			.log = res->log,
			.log_len = res->log_len,
			.components = f->components,
			.arch = f->arch,
			.compile_us = res->compile_us,
			.producer = trusted ? -1 : f->tenant,
			.trust = trusted ? STORE_CONFIRMED : STORE_UNCONFIRMED,
		};
		enum settle v = trusted || s->sharing != SHARING_CONFIRM ? SETTLE_STORE :
				confirm_settle(s->store, f->key.hash, f->key.hex, &e);
		if (v == SETTLE_CONFIRMED)
			s->n.confirmations++;
		else if (v == SETTLE_MISMATCH)
			s->n.confirm_mismatches++;
		if (v == SETTLE_STORE && !f->background &&
		    store_put(s->store, f->key.hash, &e, &err) < 0) {
			s->n.store_errors++;
			log_warn("%s", err.data ? err.data : "cannot store entry");
		}
		buf_free(&err);
		/* Only what no single tenant's worker alone vouches for goes to
		 * the Redis tier: confirmed entries (confirm.h). */
		if (compiled && s->l2 && (s->sharing != SHARING_CONFIRM || v == SETTLE_CONFIRMED)) {
			struct l2_value lv = {
				.kind = f->kind, .status = status,
				.data = data, .data_len = data_len,
				.log = res->log, .log_len = res->log_len,
			};
			l2_put(s->l2, f->key.hash, &lv);
		} else if (compiled && s->l2 && v == SETTLE_STORE && !f->background) {
			confirm_in_background(s, f);
		}
		if (f->dbg && compiled && res->status == JOB_OK && !f->background) {
			seen_add(s, &f->dbg->loose);
			/* lineinfo-loose: this client's own cubin also answers
			 * the same kernel under other paths of any length. */
			if (s->cfg->lineinfo_loose) {
				e.data = res->output;
				e.data_len = res->output_len;
				e.components = f->dbg->loose_components;
				if (store_put(s->store, f->dbg->loose.hash, &e, &err) < 0) {
					s->n.store_errors++;
					log_warn("%s", err.data ? err.data : "cannot store entry");
				}
				buf_free(&err);
			}
		}
	} else {
		log_warn("compile of %.16s failed: %.*s", f->key.hex,
			 (int)res->log_len, res->log ? res->log : "");
	}
	flight_unlink(s, f);
	s->nflights--;
	if (f->peer) {
		f->peer->jobs--;
		peer_put(s, f->peer);
	}
	while (f->waiters) {
		struct waiter *wt = f->waiters;
		f->waiters = wt->next;
		if (wt->then && res->status == JOB_OK) {
			/* IR to cubin: on to the second stage, unless the
			 * client has gone. */
			if (wt->conn->state != CONN_CLOSED)
				start_cubin(wt->conn, wt->id, res->output,
					    res->output_len, wt->then, 1);
		} else if (f->dbg && res->status == JOB_OK) {
			/* Each waiter gets its own paths and stamps; one whose
			 * view is missing (out of memory) gets no answer. */
			struct buf own = BUF_INIT;
			const char *why = "out of memory";
			int ok = !wt->view ? 0 :
				 unportable ? dbg_view_equal(wt->view, &f->dbg->view) &&
					      buf_append(&own, res->output, res->output_len) == 0
					    : dbg_rewrite(data, data_len, &f->dbg->canon, wt->view,
							  &own, &why) == 0;
			if (ok) {
				send_compile_reply(wt->conn, wt->id, JOB_OK, 0, &f->key, own.data,
						   own.len, res->log, res->log_len,
						   res->compile_us, 0);
			} else {
				static const char msg[] = "cannot give this client's source paths "
							  "the cached cubin's layout";
				send_compile_reply(wt->conn, wt->id, JOB_UNAVAILABLE, 0, &f->key,
						   NULL, 0, msg, sizeof msg - 1, 0, 0);
			}
			buf_free(&own);
		} else {
			send_compile_reply(wt->conn, wt->id, res->status, 0, &f->key,
					   res->output, res->output_len, res->log,
					   res->log_len, res->compile_us,
					   cubin ? (res->status == JOB_ERROR ? status : 0) : -1);
		}
		asm_req_free(wt->then);
		free(wt->then);
		if (wt->view)
			view_free(wt->view);
		wt->conn->waiting--;
		conn_arm(wt->conn);
		conn_unref(wt->conn);
		free(wt);
	}
	buf_free(&f->job.frame);
	free(f->job.optset);
	free(f->components);
	free(f->arch);
	flight_dbg_free(f->dbg);
	free(f);
	buf_free(&canon);
	maybe_stop(s);
}

/* With the Redis tier on, a new entry is confirmed before it is published:
 * the same job again, in a worker exec'd for it alone (confirm.h). */
static void confirm_in_background(struct server *s, const struct flight *f)
{
	struct flight *b = calloc(1, sizeof *b);

	if (!b || buf_append(&b->job.frame, f->job.frame.data, f->job.frame.len) < 0 ||
	    !(b->job.optset = strdup(f->job.optset))) {
		if (b)
			buf_free(&b->job.frame);
		free(b);
		return;         /* unconfirmed, so unpublished: no harm */
	}
	/* A portable cubin: the same paths to write out of its result, so
	 * that it compares with the stored canonical bytes. */
	if (f->dbg && (!(b->dbg = calloc(1, sizeof *b->dbg)) ||
		       dbg_view_copy(&f->dbg->view, &b->dbg->view) < 0 ||
		       dbg_view_copy(&f->dbg->canon, &b->dbg->canon) < 0)) {
		flight_dbg_free(b->dbg);
		buf_free(&b->job.frame);
		free(b->job.optset);
		free(b);
		return;
	}
	b->key = f->key;
	b->kind = f->kind;
	b->background = 1;
	b->tenant = confirm_oneshot_tenant();
	b->job.oneshot = 1;
	flight_register(s, b);
	pool_submit(s->pool, &b->job);
}

/* Whether a miss may start a new compile: not while the daemon stops
 * (it would outlive the shutdown deadline), and not past the user's cap
 * (fairness: one user's flood of misses may not fill the queue). If not,
 * the client is told why and 1 returned. */
static int refuse_new_flight(struct server *s, struct conn *c, uint64_t id)
{
	char why[128];

	if (s->stopping) {
		send_error(c, id, "unavailable", "the daemon is shutting down");
		return 1;
	}
	if (c->peer && c->peer->jobs >= s->cfg->max_jobs_per_uid) {
		s->n.refused_jobs++;
		snprintf(why, sizeof why,
			 "too many compiles in flight for uid %u (limit %d); retry later",
			 (unsigned)c->peer->uid, s->cfg->max_jobs_per_uid);
		send_error(c, id, "busy", why);
		return 1;
	}
	return 0;
}

/* The pool finished a flight's job. */
static void flight_done(struct pool_job *job, const struct job_result *res)
{
	flight_finish((struct flight *)((char *)job - offsetof(struct flight, job)), res, 1);
}

/* Whether any client still waits for a flight's queued job. */
static int flight_wanted(struct pool_job *job)
{
	const struct flight *f = (struct flight *)((char *)job - offsetof(struct flight, job));
	if (f->background)
		return 1;
	for (const struct waiter *wt = f->waiters; wt; wt = wt->next)
		if (wt->conn->state != CONN_CLOSED)
			return 1;
	return 0;
}

/* The Redis tier answered for f: a verified value of the right stage
 * finishes the flight as a hit; anything else sends it to the pool. */
static void flight_l2_done(void *arg, int found, const struct l2_value *v)
{
	struct flight *f = arg;

	/* Sealed by a node of the cluster, so authentic, but still a value
	 * from outside: a status this daemon would never have stored (another
	 * version, another bug) is no answer; compile instead. */
	if (found && v->kind == (int)f->kind &&
	    v->status >= 0 && (f->kind == STORE_CUBIN ? v->status <= 255 :
			       JOB_CACHEABLE(v->status))) {
		struct job_result res = {
			.status = f->kind == STORE_CUBIN && v->status > 0 ? JOB_ERROR :
				  (enum job_status)v->status,
			.exit_code = f->kind == STORE_CUBIN ? v->status : 0,
			.output = v->data, .output_len = v->data_len,
			.log = v->log, .log_len = v->log_len,
		};
		flight_finish(f, &res, 0);
		return;
	}
	pool_submit(f->srv->pool, &f->job);
}

/* Start a flight that has its key, job and first waiter: register it for
 * single flight (which so holds across both tiers), then ask Redis, or
 * the pool directly. */
static void flight_register(struct server *s, struct flight *f)
{
	f->srv = s;
	unsigned b = bucket_of(&f->key);
	f->next = s->flights[b];
	s->flights[b] = f;
	s->nflights++;
	f->job.done = flight_done;
	f->job.wanted = flight_wanted;
	f->job.tenant = s->sharing == SHARING_TRUST ? POOL_ANY_TENANT : f->tenant;
}

static void flight_launch(struct server *s, struct flight *f, struct conn *c)
{
	f->peer = c->peer;
	if (f->peer)
		f->peer->jobs++;
	f->tenant = conn_tenant(c);
	flight_register(s, f);
	if (s->l2)
		l2_get(s->l2, f->key.hash, flight_l2_done, f);
	else
		pool_submit(s->pool, &f->job);
}

/* ---- the cubin stage ------------------------------------------------ */

static const char *const backend_names[] = { "ptxas", "nvjitlink" };

/* Key components of the PTX to cubin stage, in their fixed order: the PTX
 * as its SHA-256, the back end and its identity (version text and binary
 * hash), the canonical options (no paths: see ptxas_args.h), and the
 * client's stamps of the source files. For a portable -lineinfo request
 * (ds), the PTX is its shape without paths and the stamps give way to the
 * layout (cubin_debug.h); loose: the key that accepts other paths and
 * stamps (lineinfo-loose). */
static int cubin_key(const struct server *s, const struct asm_req *a,
		     const char *ptx_sha, const struct dbg_scan *ds, int loose,
		     struct key *k, struct buf *components)
{
	const char *id = s->asm_be[a->backend].identity;
	const struct key_part parts[] = {
		{ "kind", "cubin" },
		{ "backend", backend_names[a->backend] },
		{ "assembler", id ? id : "" },
		{ "input_sha256", ptx_sha },
		{ "asm_args", a->args },
		{ "sources", a->sources },
	};
	const struct key_part portable[] = {
		{ "kind", "cubin" },
		{ "backend", backend_names[a->backend] },
		{ "assembler", id ? id : "" },
		{ "input_sha256", ptx_sha },
		{ "asm_args", a->args },
		{ "lineinfo", loose ? "any-paths" : "portable" },
		{ "debug_layout", loose ? "" : ds ? ds->layout.data : "" },
	};
	if (ds)
		return key_derive(portable, sizeof portable / sizeof portable[0], k,
				  components);
	return key_derive(parts, sizeof parts / sizeof parts[0], k, components);
}

static int cubin_job_frame(const struct server *s, const struct asm_req *a,
			   const char *ptx, size_t n, const char *sources,
			   struct buf *out)
{
	struct msg_writer w;

	msg_begin(&w, out, FRAME_JOB);
	msg_put_str(&w, "kind", "cubin");
	msg_put_bin(&w, "input", ptx, n);
	msg_put_int(&w, "backend", a->backend);
	msg_put_str(&w, "asm_path", s->asm_be[a->backend].path);
	msg_put_str(&w, "args", a->args);
	if (sources)
		msg_put_str(&w, "sources", sources);
	return msg_end(&w);
}

/* What a cubin request's PTX is keyed on: for ptxas, a -lineinfo PTX whose
 * source paths cubin_debug.c can take out is portable (1, ds filled);
 * anything else is keyed on its bytes (0). -1: out of memory. */
static int cubin_scan(const struct asm_req *a, const char *ptx, size_t n,
		      struct dbg_scan *ds, char sha[65], char loose_sha[65])
{
	/* Relocatable output (-c and its kin) names the paths elsewhere too:
	 * it stays keyed on its bytes (measured: test_cubin.py's clang form). */
	static const char *const relocatable[] = {
		"--compile-only", "--preserve-relocs", "--extensible-whole-program",
	};
	int r = a->backend == CUBIN_PTXAS;
	for (size_t i = 0; r && i < sizeof relocatable / sizeof relocatable[0]; i++) {
		const char *hit = a->args ? strstr(a->args, relocatable[i]) : NULL;
		size_t l = strlen(relocatable[i]);
		if (hit && (hit == a->args || hit[-1] == '\n') &&
		    (hit[l] == '\0' || hit[l] == '\n'))
			r = 0;
	}
	r = r ? dbg_scan(ptx, n, a->sources, ds) : 0;

	if (r == 1) {
		key_sha256_hex(ds->shape.data, ds->shape.len, sha);
		key_sha256_hex(ds->loose.data, ds->loose.len, loose_sha);
	} else if (r == 0) {
		key_sha256_hex(ptx, n, sha);
	}
	return r;
}

/* Answer from the cubin a portable entry holds (canonical paths): with
 * this client's own written in. 0, or -1 if the entry fails its check. */
static int send_portable(struct conn *c, uint64_t id, const struct key *k,
			 const struct store_result *hit, const struct dbg_scan *ds)
{
	struct buf own = BUF_INIT;
	const char *why = "out of memory";
	int rc = -1;

	if (dbg_rewrite(hit->data.data, hit->data.len, &ds->canon, &ds->view, &own,
			&why) == 0) {
		send_compile_reply(c, id, JOB_OK, 1, k, own.data, own.len, hit->log.data,
				   hit->log.len, 0, 0);
		rc = 0;
	} else {
		c->srv->n.lineinfo_rewrite_errors++;
		log_warn("cubin %.16s: cached entry fails its line table check (%s); "
			 "compiling again", k->hex, why);
	}
	buf_free(&own);
	return rc;
}

/*
 * Assemble ptx as a asks (borrowed) and answer request id on c: from the
 * cache, by joining the same assembly in flight, or as a new flight on the
 * pool (any worker: an assembler job needs no LLVM). chained: the request
 * was accepted already (its PTX came from stage one), so the per-user cap
 * is not applied twice.
 */
static void start_cubin(struct conn *c, uint64_t id, const char *ptx,
			size_t ptx_len, const struct asm_req *a, int chained)
{
	struct server *s = c->srv;
	const struct cubin_backend *be = &s->asm_be[a->backend];
	struct buf comp = BUF_INIT, stamped = BUF_INIT;
	struct dbg_scan ds = { 0 };
	struct flight *f = NULL;
	struct key k;
	char sha[65], loose_sha[65];

	int portable = cubin_scan(a, ptx, ptx_len, &ds, sha, loose_sha);
	if (portable < 0 || cubin_key(s, a, sha, portable ? &ds : NULL, 0, &k, NULL) < 0) {
		send_error(c, id, "internal", "out of memory");
		goto out;
	}
	if (!be->path) {
		const char *why = be->why ? be->why : "no assembler";
		send_compile_reply(c, id, JOB_UNAVAILABLE, 0, &k, NULL, 0, why,
				   strlen(why), 0, 0);
		goto out;
	}
	struct store_result hit = { 0 };
	if (lookup_for(c, &k, &hit)) {
		if (!portable || hit.status != 0) {
			s->n.hits++;
			send_compile_reply(c, id, hit.status ? JOB_ERROR : JOB_OK, 1, &k,
					   hit.data.data, hit.data.len, hit.log.data,
					   hit.log.len, 0, hit.status);
			store_result_free(&hit);
			goto out;
		}
		if (send_portable(c, id, &k, &hit, &ds) == 0) {
			s->n.hits++;
			s->n.lineinfo_hits++;
			store_result_free(&hit);
			goto out;
		}
	}
	store_result_free(&hit);

	struct key lk;
	if (portable) {
		if (cubin_key(s, a, loose_sha, &ds, 1, &lk, NULL) < 0) {
			send_error(c, id, "internal", "out of memory");
			goto out;
		}
		if (s->cfg->lineinfo_loose && lookup_for(c, &lk, &hit) &&
		    hit.status == 0) {
			s->n.hits++;
			s->n.lineinfo_loose_hits++;
			send_compile_reply(c, id, JOB_OK, 1, &lk, hit.data.data, hit.data.len,
					   hit.log.data, hit.log.len, 0, 0);
			store_result_free(&hit);
			goto out;
		}
		store_result_free(&hit);
		if (seen_has(s, &lk))
			s->n.lineinfo_layout_misses++;
	}
	s->n.misses++;

	f = flight_find(s, &k, c);
	if (f) {
		if (add_waiter(f, c, id) < 0) {
			send_error(c, id, "internal", "out of memory");
		} else {
			s->n.dedup_joins++;
			if (portable && (!(f->waiters->view = malloc(sizeof *f->waiters->view)) ||
					 dbg_view_copy(&ds.view, f->waiters->view) < 0)) {
				free(f->waiters->view);
				f->waiters->view = NULL;        /* answered "unavailable" */
			}
		}
		f = NULL;
		goto out;
	}
	if (!chained && refuse_new_flight(s, c, id))
		goto out;
	f = calloc(1, sizeof *f);
	if (!f || cubin_key(s, a, sha, portable ? &ds : NULL, 0, &f->key, &comp) < 0)
		goto oom;
	if (portable) {
		struct buf lcomp = BUF_INIT;
		if (!(f->dbg = calloc(1, sizeof *f->dbg)) ||
		    dbg_view_copy(&ds.view, &f->dbg->view) < 0 ||
		    cubin_key(s, a, loose_sha, &ds, 1, &f->dbg->loose, &lcomp) < 0 ||
		    !(f->dbg->loose_components = buf_detach(&lcomp, NULL)) ||
		    dbg_view_copy(&ds.canon, &f->dbg->canon) < 0 ||
		    dbg_stamp_ptx(ptx, ptx_len, &ds.view, &stamped) < 0) {
			buf_free(&lcomp);
			goto oom;
		}
	}
	if (cubin_job_frame(s, a, portable ? stamped.data : ptx,
			    portable ? stamped.len : ptx_len,
			    portable ? NULL : a->sources, &f->job.frame) < 0 ||
	    !(f->job.optset = strdup(POOL_ASM_SET)) || add_waiter(f, c, id) < 0)
		goto oom;
	if (portable && (!(f->waiters->view = malloc(sizeof *f->waiters->view)) ||
			 dbg_view_copy(&ds.view, f->waiters->view) < 0)) {
		free(f->waiters->view);
		f->waiters->view = NULL;
	}
	f->kind = STORE_CUBIN;
	f->components = buf_detach(&comp, NULL);
	f->arch = a->arch ? strdup(a->arch) : NULL;
	flight_launch(s, f, c);
	f = NULL;
	goto out;
oom:
	send_error(c, id, "internal", "out of memory");
	if (f) {
		/* add_waiter() is the last step that can fail: no waiter yet. */
		buf_free(&f->job.frame);
		free(f->job.optset);
		flight_dbg_free(f->dbg);
	}
	free(f);
out:
	buf_free(&comp);
	buf_free(&stamped);
	dbg_scan_free(&ds);
}

/* Move a's strings into a new asm_req for a waiter; NULL if out of memory
 * (a is then unchanged). */
static struct asm_req *asm_req_take(struct asm_req *a)
{
	struct asm_req *t = malloc(sizeof *t);

	if (t) {
		*t = *a;
		a->args = a->arch = a->sources = NULL;
	}
	return t;
}

/* Build the FRAME_JOB message a worker runs. */
static int job_frame(const struct compile_req *r, struct buf *out)
{
	struct msg_writer w;

	msg_begin(&w, out, FRAME_JOB);
	msg_put_bin(&w, "input", r->input, r->input_len);
	msg_put_str(&w, "triple", r->triple);
	msg_put_str(&w, "march", r->march);
	msg_put_str(&w, "cpu", r->cpu);
	msg_put_str(&w, "features", r->features);
	msg_put_str(&w, "pipeline", r->pipeline);
	msg_put_int(&w, "opt", r->opt);
	msg_put_bool(&w, "emit", r->emit);
	msg_put_bool(&w, "strict", r->strict);
	return msg_end(&w);
}

static void handle_compile(struct conn *c, uint64_t id, const struct msg *m)
{
	struct server *s = c->srv;
	struct compile_req r;
	struct buf err = BUF_INIT;
	struct key k;

	if (parse_compile(m, s->cfg->max_frame, &r, &err) < 0) {
		send_error(c, id, "invalid", err.data ? err.data : "out of memory");
		goto out;
	}
	set_namespace(s, c, &r);
	if (r.cubin && r.from_ptx) {
		start_cubin(c, id, r.input, r.input_len, &r.asmr, 0);
		goto out;
	}
	if (r.cubin)
		r.emit = 1;     /* stage one of IR to cubin: PTX it must be */
	if (compile_key(&r, &k, NULL) < 0) {
		send_error(c, id, "internal", "out of memory");
		goto out;
	}

	struct store_result hit = { 0 };
	if (lookup_for(c, &k, &hit)) {
		s->n.hits++;
		if (r.cubin && hit.status == JOB_OK) {
			/* Stage one is cached; stage two may be too. */
			start_cubin(c, id, hit.data.data, hit.data.len, &r.asmr, 0);
			store_result_free(&hit);
			goto out;
		}
		send_compile_reply(c, id, hit.status, 1, &k, hit.data.data,
				   hit.data.len, hit.log.data, hit.log.len, 0, -1);
		store_result_free(&hit);
		goto out;
	}
	s->n.misses++;

	struct asm_req *then = NULL;
	if (r.cubin && !(then = asm_req_take(&r.asmr))) {
		send_error(c, id, "internal", "out of memory");
		goto out;
	}
	struct flight *f = flight_find(s, &k, c);
	if (f) {
		if (add_waiter(f, c, id) < 0) {
			send_error(c, id, "internal", "out of memory");
			asm_req_free(then);
			free(then);
		} else {
			f->waiters->then = then;
			s->n.dedup_joins++;
		}
		goto out;
	}

	if (refuse_new_flight(s, c, id)) {
		asm_req_free(then);
		free(then);
		goto out;
	}

	struct buf comp = BUF_INIT;
	f = calloc(1, sizeof *f);
	if (!f || compile_key(&r, &f->key, &comp) < 0 ||
	    job_frame(&r, &f->job.frame) < 0 || add_waiter(f, c, id) < 0) {
		send_error(c, id, "internal", "out of memory");
		if (f)
			buf_free(&f->job.frame);
		free(f);
		buf_free(&comp);
		asm_req_free(then);
		free(then);
		goto out;
	}
	f->waiters->then = then;
	f->kind = STORE_PTX;
	f->components = buf_detach(&comp, NULL);
	f->arch = r.cpu ? strdup(r.cpu) : NULL;
	f->job.optset = r.optset;
	r.optset = NULL;
	flight_launch(s, f, c);
out:
	compile_req_free(&r);
	buf_free(&err);
}

/* ---- other requests ------------------------------------------------- */

static void reply_json(struct conn *c, uint8_t type, uint64_t id,
		       const struct buf *json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, type | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_strn(&w, "json", json->data ? json->data : "{}", json->len ? json->len : 2);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	buf_free(&b);
}

static void handle_hello(struct conn *c, uint64_t id, const struct msg *m)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, FRAME_HELLO | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	msg_put_int(&w, "proto", FRAME_VERSION);
	msg_put_str(&w, "server", SERVER_NAME);
	msg_put_str(&w, "compiler", codegen_identity());
	msg_put_int(&w, "pid", getpid());
	if (c->srv->asm_be[CUBIN_PTXAS].version)
		msg_put_str(&w, "assembler", c->srv->asm_be[CUBIN_PTXAS].version);
	if (c->srv->asm_be[CUBIN_NVJITLINK].version)
		msg_put_str(&w, "nvjitlink", c->srv->asm_be[CUBIN_NVJITLINK].version);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	buf_free(&b);
}

static void handle_ping(struct conn *c, uint64_t id, const struct msg *m)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;

	msg_begin(&w, &b, FRAME_PING | FRAME_REPLY);
	msg_put_int(&w, "id", (int64_t)id);
	if (msg_end(&w) == 0)
		conn_send(c, &b);
	buf_free(&b);
}

static void handle_stats(struct conn *c, uint64_t id, const struct msg *m)
{
	struct server *s = c->srv;
	struct pool_counters pc;
	struct store_counters sc;
	struct buf j = BUF_INIT;
	int64_t entries = 0, bytes = 0;

	pool_counters(s->pool, &pc);
	store_counters(s->store, &sc);
	store_totals(s->store, &entries, &bytes);
	buf_printf(&j,
		   "{\"entries\":%lld,\"bytes\":%lld,\"hits\":%lld,\"misses\":%lld,"
		   "\"compiles\":%lld,\"compile_errors\":%lld,\"worker_crashes\":%lld,"
		   "\"dedup_joins\":%lld,\"requests\":%lld,\"connections\":%lld,"
		   "\"protocol_errors\":%lld,\"store_errors\":%lld,"
		   "\"refused_connections\":%lld,\"denied_connections\":%lld,"
		   "\"header_timeouts\":%lld,\"idle_timeouts\":%lld,"
		   "\"output_overflows\":%lld,\"refused_jobs\":%lld,"
		   "\"corrupt_blobs\":%lld,\"evictions\":%lld,"
		   "\"worker_timeouts\":%lld,\"workers_spawned\":%lld,"
		   "\"workers_recycled\":%lld,\"worker_start_failures\":%lld,"
		   "\"jobs_dropped\":%lld,\"sandbox_violations\":%lld,"
		   "\"confirmations\":%lld,\"confirm_mismatches\":%lld,\"sharing\":\"%s\","
		   "\"jobs_running\":%d,\"jobs_queued\":%d,"
		   "\"workers\":%d,\"workers_ready\":%d,\"warm_up_ms\":%lld,"
		   "\"uptime_s\":%lld,"
		   "\"lineinfo_hits\":%lld,\"lineinfo_layout_misses\":%lld,"
		   "\"lineinfo_loose_hits\":%lld,\"lineinfo_unportable\":%lld,"
		   "\"lineinfo_rewrite_errors\":%lld,\"lineinfo_loose\":%s,"
		   "\"compiler\":\"%s\"}",
		   (long long)entries, (long long)bytes, (long long)s->n.hits,
		   (long long)s->n.misses, (long long)s->n.compiles,
		   (long long)s->n.compile_errors, (long long)pc.crashes,
		   (long long)s->n.dedup_joins, (long long)s->n.requests,
		   (long long)s->n.connections, (long long)s->n.protocol_errors,
		   (long long)(s->n.store_errors), (long long)s->n.refused_connections,
		   (long long)s->n.denied_connections, (long long)s->n.header_timeouts,
		   (long long)s->n.idle_timeouts, (long long)s->n.output_overflows,
		   (long long)s->n.refused_jobs, (long long)sc.corrupt_blobs,
		   (long long)sc.evictions, (long long)pc.timeouts,
		   (long long)pc.spawned, (long long)pc.recycled,
		   (long long)pc.start_failures, (long long)pc.dropped,
		   (long long)pc.sandbox_violations, (long long)s->n.confirmations,
		   (long long)s->n.confirm_mismatches,
		   s->sharing == SHARING_CONFIRM ? "confirm" :
		   s->sharing == SHARING_TRUST ? "trust" : "separate", pc.busy, pc.queued,
		   s->cfg->pool.size, pc.ready, (long long)pool_warm_ms(s->pool),
		   (long long)(time(NULL) - s->started),
		   (long long)s->n.lineinfo_hits, (long long)s->n.lineinfo_layout_misses,
		   (long long)s->n.lineinfo_loose_hits, (long long)s->n.lineinfo_unportable,
		   (long long)s->n.lineinfo_rewrite_errors,
		   s->cfg->lineinfo_loose ? "true" : "false", codegen_identity());
	struct buf sb = BUF_INIT;
	pool_sandbox(s->pool, &sb);
	if (j.len && sb.len) {
		j.len--;        /* reopen the object */
		buf_puts(&j, ",\"sandbox\":");
		buf_json_str(&j, sb.data, sb.len);
		buf_puts(&j, "}");
	}
	buf_free(&sb);
	if (s->l2 && j.len) {
		struct l2_counters lc;
		l2_counters(s->l2, &lc);
		j.len--;        /* reopen the object */
		buf_printf(&j, ",\"l2_hits\":%lld,\"l2_misses\":%lld,\"l2_errors\":%lld,"
			   "\"l2_timeouts\":%lld,\"l2_rejects\":%lld,\"l2_writes\":%lld,"
			   "\"l2_breaker_opens\":%lld,\"l2_breaker_open\":%d}",
			   (long long)lc.hits, (long long)lc.misses, (long long)lc.errors,
			   (long long)lc.timeouts, (long long)lc.rejects, (long long)lc.writes,
			   (long long)lc.breaker_opens, lc.breaker_open);
	}
	reply_json(c, FRAME_STATS, id, &j);
	buf_free(&j);
}

/* ls / evict filter fields: kind, arch, older_than (s), min_bytes. */
static int parse_filter(const struct msg *m, struct store_filter *f, char **arch,
			struct buf *err)
{
	const char *k;
	size_t n;
	const char *why = NULL;

	memset(f, 0, sizeof *f);
	*arch = NULL;
	if (msg_bytes(m, "kind", &k, &n) == 1) {
		if (n == 3 && !memcmp(k, "ptx", 3))
			f->kind = STORE_PTX;
		else if (n == 5 && !memcmp(k, "cubin", 5))
			f->kind = STORE_CUBIN;
		else
			why = "'kind' must be \"ptx\" or \"cubin\"";
	}
	if (!why && (text_field(m, "arch", 64, arch, &why) < 0 ||
		     msg_int(m, "older_than", &f->older_than_s) < 0 ||
		     msg_int(m, "min_bytes", &f->min_bytes) < 0))
		why = why ? why : "bad filter field";
	if (why) {
		buf_printf(err, "%s", why);
		return -1;
	}
	f->arch = *arch;
	return 0;
}

static void handle_ls(struct conn *c, uint64_t id, const struct msg *m)
{
	struct store_filter f;
	struct buf j = BUF_INIT, err = BUF_INIT;
	char *arch = NULL;
	int64_t limit = 100;

	if (parse_filter(m, &f, &arch, &err) < 0 || msg_int(m, "limit", &limit) < 0) {
		send_error(c, id, "invalid", err.len ? err.data : "bad 'limit'");
	} else if (store_list(c->srv->store, &f, (int)(limit > 1000000 ? 1000000 : limit), &j) < 0) {
		send_error(c, id, "internal", "cannot list the cache");
	} else {
		reply_json(c, FRAME_LS, id, &j);
	}
	free(arch);
	buf_free(&j);
	buf_free(&err);
}

static void handle_show(struct conn *c, uint64_t id, const struct msg *m)
{
	unsigned char hash[32];
	char *hex = NULL;
	struct buf j = BUF_INIT;

	if (msg_strdup(m, "key", &hex) != 1 || key_from_hex(hex, hash) < 0) {
		send_error(c, id, "invalid", "'key' must be 64 hex digits");
	} else {
		int r = store_show(c->srv->store, hash, &j);
		if (r == 1)
			reply_json(c, FRAME_SHOW, id, &j);
		else
			send_error(c, id, r == 0 ? "not_found" : "internal",
				   r == 0 ? "no such entry" : "cannot read the cache");
	}
	free(hex);
	buf_free(&j);
}

/* Why would this compile request miss? The exact key's presence, the
 * request's components, and the nearest stored entry with what differs. */
static void handle_explain(struct conn *c, uint64_t id, const struct msg *m)
{
	struct server *s = c->srv;
	struct compile_req r;
	struct buf err = BUF_INIT, comp = BUF_INIT, j = BUF_INIT, shown = BUF_INIT;
	struct key k;

	if (parse_compile(m, (uint32_t)s->cfg->max_frame, &r, &err) < 0) {
		send_error(c, id, "invalid", err.data ? err.data : "out of memory");
		goto out;
	}
	set_namespace(s, c, &r);
	if (r.cubin && r.from_ptx) {
		/* The cubin stage of PTX: its own key (portable or exact). */
		struct dbg_scan ds = { 0 };
		char sha[65], loose_sha[65];
		int portable = cubin_scan(&r.asmr, r.input, r.input_len, &ds, sha, loose_sha);
		int rc = portable < 0 ? -1 : cubin_key(s, &r.asmr, sha, portable ? &ds : NULL,
						      0, &k, &comp);
		dbg_scan_free(&ds);
		if (rc < 0) {
			send_error(c, id, "internal", "out of memory");
			goto out;
		}
	} else if (compile_key(&r, &k, &comp) < 0) {
		send_error(c, id, "internal", "out of memory");
		goto out;
	}
	int cached = store_show(s->store, k.hash, &shown) == 1;
	buf_printf(&j, "{\"key\":\"%s\",\"cached\":%s,\"components\":%s,\"nearest\":",
		   k.hex, cached ? "true" : "false", comp.data);
	if (cached || store_nearest(s->store, comp.data, &j) != 1)
		buf_puts(&j, "null");
	buf_puts(&j, "}");
	reply_json(c, FRAME_EXPLAIN, id, &j);
out:
	compile_req_free(&r);
	buf_free(&err);
	buf_free(&comp);
	buf_free(&j);
	buf_free(&shown);
}

static void handle_verify(struct conn *c, uint64_t id, const struct msg *m)
{
	struct buf report = BUF_INIT, j = BUF_INIT;
	int problems = store_verify(c->srv->store, &report);

	if (problems < 0) {
		send_error(c, id, "internal", "cannot verify the cache");
	} else {
		buf_printf(&j, "{\"problems\":%d,\"report\":[", problems);
		/* One JSON string per report line. */
		for (char *line = report.data; line && *line;) {
			size_t n = strcspn(line, "\n");
			if (line != report.data)
				buf_puts(&j, ",");
			buf_json_str(&j, line, n);
			line += n + (line[n] == '\n');
		}
		buf_puts(&j, "]}");
		reply_json(c, FRAME_VERIFY, id, &j);
	}
	buf_free(&report);
	buf_free(&j);
}

/* Eviction rewrites the cache for everyone: root and the daemon's own
 * user only. Fields: the ls filter, or max_size (LRU down to it), or all. */
static void handle_evict(struct conn *c, uint64_t id, const struct msg *m)
{
	struct store_filter f;
	struct buf j = BUF_INIT, err = BUF_INIT;
	char *arch = NULL;
	int64_t max_size = -1;
	int all = 0, removed;

	if (c->uid != 0 && c->uid != geteuid()) {
		send_error(c, id, "denied", "evicting needs root or the daemon's user");
		return;
	}
	if (parse_filter(m, &f, &arch, &err) < 0 || msg_int(m, "max_size", &max_size) < 0 ||
	    msg_bool(m, "all", &all) < 0) {
		send_error(c, id, "invalid", err.len ? err.data : "bad evict field");
		goto out;
	}
	if (all)
		removed = store_remove(c->srv->store, NULL);
	else if (max_size >= 0)
		removed = store_evict_lru(c->srv->store, max_size);
	else if (f.kind || f.arch || f.older_than_s > 0 || f.min_bytes > 0)
		removed = store_remove(c->srv->store, &f);
	else {
		send_error(c, id, "invalid", "evict needs a filter, max_size or all");
		goto out;
	}
	if (removed < 0) {
		send_error(c, id, "internal", "cannot evict from the cache");
		goto out;
	}
	int64_t entries, bytes;
	store_totals(c->srv->store, &entries, &bytes);
	buf_printf(&j, "{\"removed\":%d,\"entries\":%lld,\"bytes\":%lld}", removed,
		   (long long)entries, (long long)bytes);
	reply_json(c, FRAME_EVICT, id, &j);
out:
	free(arch);
	buf_free(&j);
	buf_free(&err);
}

/* The request table. Checklist when adding a request: frame.h's enum,
 * frame_type_name(), PROTOCOL.md, and the client. */
static const struct request_type {
	uint8_t type;
	void (*handler)(struct conn *c, uint64_t id, const struct msg *m);
} requests[] = {
	{ .type = FRAME_HELLO, .handler = handle_hello },
	{ .type = FRAME_PING, .handler = handle_ping },
	{ .type = FRAME_COMPILE, .handler = handle_compile },
	{ .type = FRAME_STATS, .handler = handle_stats },
	{ .type = FRAME_LS, .handler = handle_ls },
	{ .type = FRAME_SHOW, .handler = handle_show },
	{ .type = FRAME_EXPLAIN, .handler = handle_explain },
	{ .type = FRAME_VERIFY, .handler = handle_verify },
	{ .type = FRAME_EVICT, .handler = handle_evict },
};

static void handle_frame(struct conn *c, const struct frame_hdr *h,
			 const void *body)
{
	struct msg m;
	struct buf err = BUF_INIT;
	int64_t id = 0;

	c->srv->n.requests++;
	if (msg_parse(&m, body, h->len, &MSG_LIMITS_DEFAULT, &err) < 0) {
		protocol_error(c, err.data ? err.data : "malformed message");
		goto out;
	}
	if (msg_int(&m, "id", &id) < 0 || id < 0) {
		protocol_error(c, "request 'id' must be a non-negative integer");
		goto out;
	}
	for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++) {
		if (requests[i].type == h->type) {
			requests[i].handler(c, (uint64_t)id, &m);
			goto out;
		}
	}
	buf_printf(&err, "unknown request type %u", h->type);
	send_error(c, (uint64_t)id, "unsupported", err.data);
out:
	msg_free(&m);
	buf_free(&err);
}

/* ---- connections ---------------------------------------------------- */

/*
 * libevent 2.1 reads a socket 4 KB per loop iteration (EVBUFFER_MAX_READ),
 * each costing epoll_wait, FIONREAD and readv: a 1 MB request took 256
 * iterations (bench/NOTES.md). Once a header has said how long its frame
 * is, read what the socket holds of the rest straight into the input
 * buffer, at most READ_REST_CHUNK at a time and never beyond the frame, so
 * nothing is allocated far ahead of what the client has sent.
 */
#define READ_REST_CHUNK (256 * 1024)
static void read_rest(struct bufferevent *bev, struct evbuffer *in, size_t need)
{
	evutil_socket_t fd = bufferevent_getfd(bev);
	size_t have = evbuffer_get_length(in);

	/* The bufferevent keeps the end of its input frozen outside its own
	 * reads; thaw it as bufferevent_readcb() does around evbuffer_read(). */
	evbuffer_unfreeze(in, 0);
	while (have < need) {
		struct evbuffer_iovec v;
		size_t want = need - have < READ_REST_CHUNK ? need - have : READ_REST_CHUNK;
		if (evbuffer_reserve_space(in, (ev_ssize_t)want, &v, 1) < 1)
			break;
		ssize_t r = recv(fd, v.iov_base, want, MSG_DONTWAIT);
		if (r <= 0)
			break; /* EAGAIN, EOF, errors: the bufferevent sees them */
		v.iov_len = (size_t)r;
		if (evbuffer_commit_space(in, &v, 1) < 0)
			break;
		have += (size_t)r;
	}
	evbuffer_freeze(in, 0);
}

static void on_conn_read(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	/* Hold a reference: a handler may close the connection. */
	c->refs++;
	while (c->state == CONN_READING) {
		unsigned char hdr[FRAME_HDR_LEN];
		struct frame_hdr h;
		struct buf err = BUF_INIT;
		ev_ssize_t got = evbuffer_copyout(in, hdr, sizeof hdr);
		int r = frame_parse_hdr(hdr, got < 0 ? 0 : (size_t)got,
					c->srv->cfg->max_frame, &h, &err);
		if (r < 0) {
			protocol_error(c, err.data);
			buf_free(&err);
			break;
		}
		if (r == 0)
			break;
		if (evbuffer_get_length(in) < FRAME_HDR_LEN + (size_t)h.len)
			read_rest(bev, in, FRAME_HDR_LEN + (size_t)h.len);
		if (evbuffer_get_length(in) < FRAME_HDR_LEN + (size_t)h.len)
			break;
		unsigned char *all = evbuffer_pullup(in, FRAME_HDR_LEN + (ev_ssize_t)h.len);
		if (!all) {
			protocol_error(c, "out of memory reading the request");
			break;
		}
		/* A whole frame: the next one gets a deadline of its own. */
		c->partial = 0;
		c->timer_mode = TIMER_NONE;
		handle_frame(c, &h, all + FRAME_HDR_LEN);
		if (c->state != CONN_CLOSED)
			evbuffer_drain(in, FRAME_HDR_LEN + h.len);
	}
	if (c->state == CONN_READING) {
		c->partial = evbuffer_get_length(in) > 0;
		conn_arm(c);
	}
	conn_unref(c);
}

static void on_conn_timer(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	if (c->partial) {
		c->srv->n.header_timeouts++;
		log_info("conn %llu: request not complete after %d s; closing",
			 (unsigned long long)c->serial, c->srv->cfg->header_timeout_s);
		refuse(c, "timeout", "request did not arrive in time");
	} else {
		c->srv->n.idle_timeouts++;
		log_debug("conn %llu: idle; closing", (unsigned long long)c->serial);
		conn_close(c);
	}
}

static void on_conn_write(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct server *s = c->srv;

	if (c->state == CONN_CLOSING)
		conn_close(c);
	maybe_stop(s);
}

static void on_conn_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;

	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_close(c);
}

/* Is id (a name or a number) in the comma-separated list? */
static int listed(const char *list, unsigned id, int is_group)
{
	char item[256];

	for (const char *p = list; p && *p;) {
		size_t n = strcspn(p, ", ");
		if (n && n < sizeof item) {
			memcpy(item, p, n);
			item[n] = '\0';
			char *end;
			unsigned long v = strtoul(item, &end, 10);
			if (!*end) {
				if (v == id)
					return 1;
			} else if (is_group) {
				struct group *g = getgrnam(item);
				if (g && g->gr_gid == id)
					return 1;
			} else {
				struct passwd *pw = getpwnam(item);
				if (pw && pw->pw_uid == id)
					return 1;
			}
		}
		p += n;
		p += strspn(p, ", ");
	}
	return 0;
}

/*
 * The access policy: root, the daemon's own user, members of the socket's
 * group, and the configured users and groups. The peer's groups come from
 * SO_PEERGROUPS (all of them, not only the primary one).
 */
static int allowed(struct server *s, int fd, const struct ucred *cr)
{
	if (cr->uid == 0 || cr->uid == geteuid() ||
	    listed(s->cfg->allow_users, cr->uid, 0))
		return 1;
	gid_t groups[256];
	socklen_t len = sizeof groups;
	int n = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0)
		n = (int)(len / sizeof groups[0]);
	for (int i = -1; i < n; i++) {
		gid_t g = i < 0 ? cr->gid : groups[i];
		if ((g == s->socket_gid && s->socket_gid != 0) ||
		    listed(s->cfg->allow_groups, g, 1))
			return 1;
	}
	return 0;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
		      struct sockaddr *sa, int socklen, void *arg)
{
	struct server *s = arg;
	struct conn *c = calloc(1, sizeof *c);
	struct ucred cr = { 0 };
	socklen_t crlen = sizeof cr;
	char why[160];

	if (!c) {
		close(fd);
		return;
	}
	c->srv = s;
	c->refs = 1;
	c->serial = ++s->next_serial;
	c->state = CONN_READING;
	c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->timer = evtimer_new(s->base, on_conn_timer, c);
	if (!c->bev || !c->timer ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0) {
		if (c->bev)
			bufferevent_free(c->bev);
		else
			close(fd);
		if (c->timer)
			event_free(c->timer);
		free(c);
		return;
	}
	s->n.connections++;
	s->nconns++;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	c->uid = cr.uid;
	c->peer = peer_get(s, cr.uid);
	if (c->peer)
		c->peer->conns++;
	/* What the socket did not take at once goes out as fast as it drains. */
	bufferevent_set_max_single_write(c->bev, 1 << 20);
	bufferevent_setcb(c->bev, on_conn_read, on_conn_write, on_conn_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);

	if (!allowed(s, fd, &cr)) {
		s->n.denied_connections++;
		log_warn("refused connection from uid %u (pid %d): not allowed",
			 (unsigned)cr.uid, (int)cr.pid);
		snprintf(why, sizeof why, "uid %u is not allowed to use this daemon",
			 (unsigned)cr.uid);
		refuse(c, "denied", why);
	} else if (!c->peer) {
		/* No per-user accounting, so no per-user limits: refuse. */
		refuse(c, "internal", "out of memory");
	} else if (s->nconns > s->cfg->max_conns ||
		   (c->peer && c->peer->conns > s->cfg->max_conns_per_uid) ||
		   s->stopping) {
		s->n.refused_connections++;
		snprintf(why, sizeof why, s->stopping ? "the daemon is shutting down" :
			 s->nconns > s->cfg->max_conns ? "too many connections (limit %d)" :
			 "too many connections for this user (limit %d)",
			 s->nconns > s->cfg->max_conns ? s->cfg->max_conns :
			 s->cfg->max_conns_per_uid);
		log_info("refused connection from uid %u: %s", (unsigned)cr.uid, why);
		refuse(c, "limit", why);
	} else {
		conn_arm(c);
	}
}

/* ---- start and stop ------------------------------------------------- */

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
	store_flush(((struct server *)arg)->store);
}

/* Tell systemd (Type=notify) how we are; nothing without NOTIFY_SOCKET. */
static void notify(const char *msg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!path || !*path || strlen(path) >= sizeof sa.sun_path)
		return;
	strcpy(sa.sun_path, path);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
		log_debug("cannot notify systemd: %s", strerror(errno));
	close(fd);
}

static void on_stop_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	log_warn("%d compiles still running after %d s; stopping anyway",
		 s->nflights, s->cfg->shutdown_timeout_s);
	event_base_loopexit(s->base, NULL);
}

/* While stopping: exit the loop once no compile is in flight and every
 * reply has been written (on_conn_write() asks again as output drains). */
static void maybe_stop(struct server *s)
{
	if (!s->stopping || s->nflights)
		return;
	for (struct conn *c = s->conns; c; c = c->next)
		if (c->bev && evbuffer_get_length(bufferevent_get_output(c->bev)))
			return;
	event_base_loopexit(s->base, NULL);
}

/* SIGTERM, SIGINT: stop accepting, let in-flight compiles finish (up to
 * shutdown_timeout), then leave the loop; server_run() checkpoints. */
static void on_stop(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;
	struct timeval tv = { s->cfg->shutdown_timeout_s, 0 };

	if (s->stopping) {
		event_base_loopexit(s->base, NULL);
		return;
	}
	log_info("signal %d: stopping; %d compiles in flight", (int)sig, s->nflights);
	notify("STOPPING=1");
	s->stopping = 1;
	/* A socket of our own: new connections get "shutting down" (in
	 * on_accept()). A socket from systemd stays with systemd: connections
	 * wait there for the next start instead of failing. */
	if (s->socket_from_systemd)
		evconnlistener_disable(s->listener);
	s->stop_timer = evtimer_new(s->base, on_stop_deadline, s);
	if (s->stop_timer)
		evtimer_add(s->stop_timer, &tv);
	maybe_stop(s);
}

/* Every worker of the first round is warm (or failed to start): only now
 * is the daemon ready, to systemd and to the clients waiting in the
 * backlog. Answering earlier would hand the first request to a cold
 * worker, or keep it waiting for the warm-up anyway. */
static void on_warm(void *arg)
{
	struct server *s = arg;
	struct pool_counters pc;

	pool_counters(s->pool, &pc);
	log_info("serving: %d of %d workers warm after %lld ms", pc.ready, s->cfg->pool.size,
		 (long long)pool_warm_ms(s->pool));
	if (!s->stopping)
		evconnlistener_enable(s->listener);
	notify("READY=1\nSTATUS=serving");
}

/* The Redis tier's settings, as l2.c takes them. */
static void l2_config_of(const struct server_config *cfg, struct l2_config *lc)
{
	*lc = (struct l2_config){
		.url = cfg->l2_url,
		.secret_file = cfg->l2_secret_file,
		.prefix = cfg->l2_prefix,
		.read_only = cfg->l2_read_only,
		.connect_timeout_ms = cfg->l2_timeout_ms,
		.command_timeout_ms = cfg->l2_timeout_ms,
		.max_value = cfg->l2_max_value,
		.identity = codegen_identity(),
	};
}

/* A reload's Redis tier: started, changed (the secret file is read again
 * each time) or switched off; lookups in flight finish under the settings
 * they began with (l2_reconfigure()). Settings l2.c refuses leave the tier
 * as it was. */
static void reload_l2(struct server *s)
{
	struct l2_config lc;
	struct buf err = BUF_INIT;

	l2_config_of(s->cfg, &lc);
	if (!s->l2) {
		if (lc.url && *lc.url && !(s->l2 = l2_new(s->base, &lc, &err)))
			log_err("reload: the shared tier stays off: %s", err.data);
		else if (s->l2)
			log_info("l2: on");
	} else if (l2_reconfigure(s->l2, &lc, &err) < 0) {
		log_err("reload: the shared tier keeps its settings: %s", err.data);
	}
	buf_free(&err);
}

/* SIGHUP: reload what can change live. */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;
	struct buf err = BUF_INIT;

	if (config_reload(s->cfg, &err) < 0) {
		log_err("reload failed, keeping the old settings: %s", err.data);
	} else {
		store_set_max_size(s->store, s->cfg->max_size);
		pool_reconfigure(s->pool, &s->cfg->pool);
		reload_l2(s);
		log_info("configuration reloaded");
	}
	buf_free(&err);
}

/* mkdir -p with the last component 0700. */
static int make_dir(const char *path, struct buf *err)
{
	char tmp[4096];

	if (strlen(path) >= sizeof tmp) {
		buf_printf(err, "path too long: '%s'", path);
		return -1;
	}
	strcpy(tmp, path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST) {
			buf_printf(err, "cannot create '%s': %s", tmp, strerror(errno));
			return -1;
		}
		*p = '/';
	}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create '%s': %s", tmp, strerror(errno));
		return -1;
	}
	return 0;
}

/* A listening socket passed by systemd (socket activation), or -1. */
static int systemd_socket(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");

	if (!pid || !fds || atol(pid) != (long)getpid() || atoi(fds) < 1)
		return -1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	int fd = 3;     /* SD_LISTEN_FDS_START */
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	evutil_make_socket_nonblocking(fd);
	return fd;
}

/* The group of the socket file behind fd, for the access policy. */
static gid_t socket_group(int fd)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof sa;
	struct stat st;

	memset(&sa, 0, sizeof sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || !sa.sun_path[0] ||
	    stat(sa.sun_path, &st) < 0)
		return 0;
	return st.st_gid;
}

/* Bind the Unix socket (0600 in a 0700 directory unless the directory
 * exists already). A live socket of another daemon is never taken over. */
static int listen_socket(const char *path, struct buf *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (strlen(path) >= sizeof sa.sun_path) {
		buf_printf(err, "socket path too long: '%s'", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	char dir[sizeof sa.sun_path];
	strcpy(dir, path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (make_dir(dir, err) < 0)
			return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		buf_printf(err, "cannot create socket: %s", strerror(errno));
		return -1;
	}
	/* A leftover socket file: take it over only if nobody answers. */
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
		close(probe);
		close(fd);
		buf_printf(err, "another daemon is serving '%s'", path);
		return -1;
	}
	if (probe >= 0)
		close(probe);
	unlink(path);
	mode_t old = umask(0177);
	int r = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (r < 0 || listen(fd, 128) < 0) {
		buf_printf(err, "cannot listen on '%s': %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* One daemon per cache directory, through a lock on DIR/lock. */
static int lock_cache(const char *dir, struct buf *err)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/lock", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		buf_printf(err, "cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		buf_printf(err, "cache directory '%s' is in use by another daemon", dir);
		close(fd);
		return -1;
	}
	return fd;
}

int server_run(struct server_config *cfg)
{
	struct server s = { .cfg = cfg, .started = time(NULL),
			    .seen_loose = calloc(SEEN_SLOTS, sizeof(uint64_t)) };
	struct buf err = BUF_INIT;
	int lock = -1, lfd = -1, rc = 1;

	signal(SIGPIPE, SIG_IGN);
	/* Past a file-size limit, writes fail with EFBIG (a store error the
	 * client never sees) instead of killing the daemon. */
	signal(SIGXFSZ, SIG_IGN);
	/* A hit moves its blob through buffers of its size (decompression,
	 * reply, socket queue). glibc would hand blocks over 128 KB back to the
	 * kernel on free and fault them in again, page by page, on the next
	 * hit: 80% of the master's time on a 1.3 MB cubin (bench/NOTES.md).
	 * Keep up to 64 MB of freed memory for reuse instead. */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	if (make_dir(cfg->cache_dir, &err) < 0 ||
	    (lock = lock_cache(cfg->cache_dir, &err)) < 0)
		goto out;
	s.store = store_open(cfg->cache_dir, cfg->max_size, &err);
	if (!s.store)
		goto out;
	s.base = event_base_new();
	if (!s.base) {
		buf_puts(&err, "cannot create event loop");
		goto out;
	}
	/* The assemblers: found once, before any worker is forked. */
	cubin_find_ptxas(cfg->ptxas && *cfg->ptxas ? cfg->ptxas : NULL,
			 &s.asm_be[CUBIN_PTXAS]);
	cubin_find_nvjitlink(cfg->nvjitlink && *cfg->nvjitlink ? cfg->nvjitlink : NULL,
			     &s.asm_be[CUBIN_NVJITLINK]);
	const struct cubin_backend *pb = &s.asm_be[CUBIN_PTXAS];
	const char *rel = pb->version ? strstr(pb->version, "release") : NULL;
	if (pb->path)
		log_info("ptxas '%s' (%.*s)", pb->path, rel ? (int)strcspn(rel, "\n") : 0,
			 rel ? rel : "");
	else
		log_warn("%s; cubin requests will be refused", s.asm_be[CUBIN_PTXAS].why);
	if (s.asm_be[CUBIN_NVJITLINK].path)
		log_info("nvJitLink '%s'", s.asm_be[CUBIN_NVJITLINK].path);
	const char *const asm_paths[2] = { s.asm_be[0].path, s.asm_be[1].path };
	if (sandbox_start(&cfg->pool, cfg->cache_dir, asm_paths, &s.asm_roots,
			  &s.worker_tmp, &err) < 0)
		goto out;
	if (sharing_parse(cfg->sharing, &s.sharing) < 0) {
		buf_printf(&err, "sharing must be confirm, trust or separate, not '%s'",
			   cfg->sharing ? cfg->sharing : "");
		goto out;
	}
	if (cfg->namespace_per_uid)
		s.sharing = SHARING_SEPARATE;
	s.pool = pool_new(s.base, &cfg->pool, &err);
	if (!s.pool)
		goto out;
	/* The master's own first-use costs, while the workers warm up. */
	char hex[65];
	key_sha256_hex(SERVER_NAME, sizeof SERVER_NAME, hex);
	store_warm_up(s.store);
	if (cfg->l2_url && *cfg->l2_url) {
		struct l2_config lc;
		l2_config_of(cfg, &lc);
		s.l2 = l2_new(s.base, &lc, &err);
		if (!s.l2)
			goto out;
	}
	if ((lfd = systemd_socket()) >= 0)
		s.socket_from_systemd = 1;
	else if ((lfd = listen_socket(cfg->socket_path, &err)) < 0)
		goto out;
	s.socket_gid = socket_group(lfd);
	/* Disabled until the workers are warm (on_warm()): connections wait
	 * in the socket's backlog meanwhile, under systemd or not. */
	s.listener = evconnlistener_new(s.base, on_accept, &s,
					LEV_OPT_CLOSE_ON_FREE | LEV_OPT_DISABLED, -1, lfd);
	if (!s.listener) {
		buf_puts(&err, "cannot watch the listening socket");
		close(lfd);
		goto out;
	}
	struct timeval second = { 1, 0 };
	s.flush_timer = event_new(s.base, -1, EV_PERSIST, on_flush, &s);
	s.sigterm = evsignal_new(s.base, SIGTERM, on_stop, &s);
	s.sigint = evsignal_new(s.base, SIGINT, on_stop, &s);
	s.sighup = evsignal_new(s.base, SIGHUP, on_reload, &s);
	event_add(s.flush_timer, &second);
	evsignal_add(s.sigterm, NULL);
	evsignal_add(s.sigint, NULL);
	evsignal_add(s.sighup, NULL);
	log_info("listening on '%s'%s, cache '%s', %d workers, %s", cfg->socket_path,
		 s.socket_from_systemd ? " (from systemd)" : "", cfg->cache_dir,
		 cfg->pool.size, codegen_identity());
	notify("STATUS=warming up the workers");
	pool_when_warm(s.pool, on_warm, &s);

	event_base_dispatch(s.base);
	rc = 0;
	if (!s.socket_from_systemd)
		unlink(cfg->socket_path);
out:
	if (err.len)
		log_err("%s", err.data);
	if (s.listener)
		evconnlistener_free(s.listener);
	l2_free(s.l2);
	pool_free(s.pool);
	if (s.flush_timer)
		event_free(s.flush_timer);
	if (s.sigterm)
		event_free(s.sigterm);
	if (s.sigint)
		event_free(s.sigint);
	if (s.sighup)
		event_free(s.sighup);
	if (s.stop_timer)
		event_free(s.stop_timer);
	store_close(s.store);
	free(s.asm_roots);
	free(s.worker_tmp);
	cubin_backend_free(&s.asm_be[CUBIN_PTXAS]);
	cubin_backend_free(&s.asm_be[CUBIN_NVJITLINK]);
	free(s.seen_loose);
	if (s.base)
		event_base_free(s.base);
	if (lock >= 0)
		close(lock);
	buf_free(&err);
	return rc;
}
