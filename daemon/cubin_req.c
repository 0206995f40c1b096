/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin_req: the PTX to cubin stage, in the master.
 *
 * A compile request of kind "cubin" carries the assembler's options, taken
 * only in canonical spelling from proto/ptxas_args.c's table (no option
 * names a file), the back end, and the client's stamps of the PTX's .file
 * sources: asm_req_parse() reads them. The stage then runs as the PTX
 * stage does, on a key of its own (cubin_key(): the PTX, the back end and
 * the identity found at start, the options, the stamps): a stored entry
 * answers; else a flight of the same key is joined; else a new flight
 * goes to any assembler worker (POOL_ASM_SET: it needs no LLVM).
 *
 * Portable -lineinfo PTX (cubin_debug.h): the key holds the PTX with its
 * source paths (and what their lengths decide) taken out, and which files
 * share a directory instead of the stamps. A hit is answered with the
 * cubin laid out for this client's paths and stamps (send_portable()); a
 * new flight's job runs the client's PTX with its stamps written into the
 * .file directives (the master never reads a client's files), and
 * flight.c stores the canonical form. A layout that fails its check or
 * that cubin_debug.c cannot reproduce is a miss (the latter counted in
 * lineinfo_layout_misses), or "unavailable" to a waiter, never an
 * approximate answer; with lineinfo-loose, a cubin naming other paths,
 * stored under the loose key, will do.
 *
 * Entered from compile.c: PTX input, IR whose PTX is stored, and IR whose
 * PTX stage a flight has just computed (chained: the waiter compile.c
 * gave that flight goes on here). A waiter of this stage's flight is
 * answered through cubin_waiter, or portable_waiter with its own paths.
 */
#include "daemon/cubin_req.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/flight.h"
#include "daemon/log.h"
#include "daemon/reply.h"
#include "daemon/store.h"
#include "proto/frame.h"
#include "proto/msg.h"
#include "proto/ptxas_args.h"

static const char *const backend_names[] = { "ptxas", "nvjitlink" };

void asm_req_free(struct asm_req *a)
{
	if (!a)
		return;
	free(a->args);
	free(a->arch);
	free(a->sources);
	a->args = a->arch = a->sources = NULL;
}

/* Move a's strings into a new asm_req for a waiter; NULL if out of memory
 * (a is then unchanged). */
struct asm_req *asm_req_take(struct asm_req *a)
{
	struct asm_req *t = malloc(sizeof *t);

	if (t) {
		*t = *a;
		a->args = a->arch = a->sources = NULL;
	}
	return t;
}

/* The cubin fields of a compile request: input_kind, backend, asm_args
 * (checked and made canonical by ptxas_args_check). 0, or -1 with a
 * message. */
int asm_req_parse(const struct msg *m, struct asm_req *a, int *from_ptx, struct buf *err)
{
	const char *v, *args[PTXAS_MAX_ARGS];
	size_t n, nargs = 0;
	struct buf canon = BUF_INIT;

	if (msg_bytes(m, "input_kind", &v, &n) == 1) {
		if (n == 3 && !memcmp(v, "ptx", 3)) {
			*from_ptx = 1;
		} else if (!(n == 2 && !memcmp(v, "ir", 2))) {
			buf_puts(err, "'input_kind' must be \"ir\" or \"ptx\"");
			return -1;
		}
	}
	if (msg_bytes(m, "asm_sources", &v, &n) == 1) {
		if (n > 65536 || memchr(v, '\0', n) || !(a->sources = strndup(v, n))) {
			buf_puts(err, "bad 'asm_sources'");
			return -1;
		}
	}
	if (msg_bytes(m, "backend", &v, &n) == 1) {
		if (n == 9 && !memcmp(v, "nvjitlink", 9)) {
			a->backend = CUBIN_NVJITLINK;
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
		int rc = ptxas_args_check(args, nargs, &canon, &a->arch, err);
		while (nargs)
			free(tmp[--nargs]);
		if (rc < 0) {
			buf_free(&canon);
			return -1;
		}
	}
	a->args = buf_detach(&canon, NULL);
	if (!a->args) {
		buf_puts(err, "out of memory");
		return -1;
	}
	return 0;
}

/* Key components of the PTX to cubin stage, in their fixed order: the PTX
 * as its SHA-256, the back end and its identity (version text and binary
 * hash), the canonical options (no paths: see ptxas_args.h), and the
 * client's stamps of the source files. For a portable -lineinfo request
 * (ds), the PTX is its shape without paths and the stamps give way to the
 * layout (cubin_debug.h); loose: the key that accepts other paths and
 * stamps (lineinfo-loose). */
int cubin_key(const struct server *s, const struct asm_req *a,
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
		{ "lineinfo", loose ? "any-paths" : "relocatable" },
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
int cubin_scan(const struct asm_req *a, const char *ptx, size_t n,
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

/* Answer from the cubin a portable entry holds (canonical paths): laid out
 * for this client's own. 0, DBG_UNMODELLED if it cannot be laid out for
 * them, or -1 if the entry fails its check. */
static int send_portable(struct conn *c, uint64_t id, const struct key *k,
			 const struct store_result *hit, const struct dbg_scan *ds)
{
	struct buf own = BUF_INIT;
	const char *why = "out of memory";
	int rc = dbg_rewrite(hit->data.data, hit->data.len, &ds->canon, &ds->view, &own, &why);

	if (rc == 0) {
		compile_reply(c, id, JOB_OK, 1, k, own.data, own.len, hit->log.data,
			      hit->log.len, 0, 0);
	} else if (rc == DBG_UNMODELLED) {
		log_warn("cubin %.16s: cannot lay the cached cubin out for this client's "
			 "paths (%s); compiling", k->hex, why);
	} else {
		c->srv->n.lineinfo_rewrite_errors++;
		log_warn("cubin %.16s: cached entry fails its line table check (%s); "
			 "compiling again", k->hex, why);
	}
	buf_free(&own);
	return rc;
}

/* A waiter of an assembler flight: the cubin, or the assembler's failure
 * with its exit status. */
static void answer_cubin(const struct flight *f, struct waiter *wt,
			 const struct flight_result *r)
{
	const struct job_result *res = r->res;

	compile_reply(wt->conn, wt->id, res->status, 0, &f->key, res->output,
		      res->output_len, res->log, res->log_len, res->compile_us,
		      res->status == JOB_ERROR ? r->status : 0);
}

/* A waiter of a portable -lineinfo flight (wt->arg: its own paths and
 * stamps, or NULL where memory was short): the cubin laid out for them,
 * or ptxas's own where it asked for exactly what ptxas ran with; else
 * "unavailable" (its front runs ptxas), never an approximate answer. */
static void answer_portable(const struct flight *f, struct waiter *wt,
			    const struct flight_result *r)
{
	const struct job_result *res = r->res;
	const struct dbg_view *view = wt->arg;
	struct buf own = BUF_INIT;
	const char *why = "out of memory";

	if (!f->dbg || res->status != JOB_OK) {
		answer_cubin(f, wt, r);
		return;
	}
	int rc = !view || r->unportable ? -1 :
		 dbg_rewrite(r->data, r->data_len, &f->dbg->canon, view, &own, &why);
	if (rc && view && dbg_view_equal(view, &f->dbg->view))
		rc = buf_append(&own, res->output, res->output_len);
	else if (rc == DBG_UNMODELLED)
		f->srv->n.lineinfo_layout_misses++;
	if (rc == 0) {
		compile_reply(wt->conn, wt->id, JOB_OK, 0, &f->key, own.data, own.len,
			      res->log, res->log_len, res->compile_us, 0);
	} else {
		static const char msg[] = "cannot give this client's source paths "
					  "the cached cubin's layout";
		compile_reply(wt->conn, wt->id, JOB_UNAVAILABLE, 0, &f->key, NULL, 0, msg,
			      sizeof msg - 1, 0, 0);
	}
	buf_free(&own);
}

static void view_free(void *arg)
{
	dbg_view_free(arg);
	free(arg);
}

/* A copy of v for a waiter; NULL if out of memory (it is then answered
 * "unavailable"). */
static struct dbg_view *view_dup(const struct dbg_view *v)
{
	struct dbg_view *d = malloc(sizeof *d);

	if (d && dbg_view_copy(v, d) < 0) {
		free(d);
		d = NULL;
	}
	return d;
}

static const struct waiter_ops cubin_waiter = { .answer = answer_cubin };
static const struct waiter_ops portable_waiter = {
	.answer = answer_portable, .drop = view_free,
};

/*
 * Assemble ptx as a asks (borrowed) and answer request id on c: from the
 * cache, by joining the same assembly in flight, or as a new flight on the
 * pool (any worker: an assembler job needs no LLVM). chained: the request
 * was accepted already (its PTX came from stage one), so the per-user cap
 * is not applied twice.
 */
void cubin_start(struct conn *c, uint64_t id, const char *ptx,
		 size_t ptx_len, const struct asm_req *a, int chained)
{
	struct server *s = c->srv;
	const struct cubin_backend *be = &s->asm_be[a->backend];
	struct buf comp = BUF_INIT, stamped = BUF_INIT;
	struct dbg_scan ds = { 0 };
	struct flight *f = NULL;
	struct dbg_view *wv = NULL;     /* the new waiter's, until it has it */
	struct key k;
	char sha[65], loose_sha[65];

	int portable = cubin_scan(a, ptx, ptx_len, &ds, sha, loose_sha);
	if (portable < 0 || cubin_key(s, a, sha, portable ? &ds : NULL, 0, &k, NULL) < 0) {
		conn_send_error(c, id, "internal", "out of memory");
		goto out;
	}
	if (!be->path) {
		const char *why = be->why ? be->why : "no assembler";
		compile_reply(c, id, JOB_UNAVAILABLE, 0, &k, NULL, 0, why,
			      strlen(why), 0, 0);
		goto out;
	}
	struct store_result hit = { 0 };
	int unmodelled = 0;
	if (flight_lookup(c, &k, &hit)) {
		if (!portable || hit.status != 0) {
			s->n.hits++;
			compile_reply(c, id, hit.status ? JOB_ERROR : JOB_OK, 1, &k,
				      hit.data.data, hit.data.len, hit.log.data,
				      hit.log.len, 0, hit.status);
			store_result_free(&hit);
			goto out;
		}
		int rc = send_portable(c, id, &k, &hit, &ds);
		if (rc == 0) {
			s->n.hits++;
			s->n.lineinfo_hits++;
			store_result_free(&hit);
			goto out;
		}
		unmodelled = rc == DBG_UNMODELLED;
	}
	store_result_free(&hit);

	struct key lk;
	if (portable) {
		if (cubin_key(s, a, loose_sha, &ds, 1, &lk, NULL) < 0) {
			conn_send_error(c, id, "internal", "out of memory");
			goto out;
		}
		if (s->cfg->lineinfo_loose && flight_lookup(c, &lk, &hit) &&
		    hit.status == 0) {
			s->n.hits++;
			s->n.lineinfo_loose_hits++;
			compile_reply(c, id, JOB_OK, 1, &lk, hit.data.data, hit.data.len,
				      hit.log.data, hit.log.len, 0, 0);
			store_result_free(&hit);
			goto out;
		}
		store_result_free(&hit);
		if (unmodelled || flight_loose_seen(s, &lk))
			s->n.lineinfo_layout_misses++;
	}
	s->n.misses++;

	const struct waiter_ops *ops = portable ? &portable_waiter : &cubin_waiter;
	wv = portable ? view_dup(&ds.view) : NULL;
	f = flight_find(s, &k, c);
	if (f) {
		if (flight_add_waiter(f, c, id, ops, wv) < 0) {
			conn_send_error(c, id, "internal", "out of memory");
		} else {
			s->n.dedup_joins++;
			wv = NULL;
		}
		f = NULL;
		goto out;
	}
	if (!chained && flight_refuse_new(s, c, id, (int64_t)ptx_len))
		goto out;
	f = calloc(1, sizeof *f);
	if (!f || cubin_key(s, a, sha, portable ? &ds : NULL, 0, &f->key, &comp) < 0)
		goto oom;
	if (portable) {
		struct buf lcomp = BUF_INIT;
		if (!(f->dbg = calloc(1, sizeof *f->dbg)) ||
		    dbg_view_copy(&ds.run, &f->dbg->view) < 0 ||
		    cubin_key(s, a, loose_sha, &ds, 1, &f->dbg->loose, &lcomp) < 0 ||
		    !(f->dbg->loose_components = buf_detach(&lcomp, NULL)) ||
		    dbg_view_copy(&ds.canon, &f->dbg->canon) < 0 ||
		    dbg_stamp_ptx(ptx, ptx_len, &ds.run, &stamped) < 0) {
			buf_free(&lcomp);
			goto oom;
		}
	}
	if (cubin_job_frame(s, a, portable ? stamped.data : ptx,
			    portable ? stamped.len : ptx_len,
			    portable ? NULL : a->sources, &f->job.frame) < 0 ||
	    !(f->job.optset = strdup(POOL_ASM_SET)) || flight_add_waiter(f, c, id, ops, wv) < 0)
		goto oom;
	wv = NULL;
	f->kind = STORE_CUBIN;
	f->components = buf_detach(&comp, NULL);
	f->arch = a->arch ? strdup(a->arch) : NULL;
	flight_launch(s, f, c);
	f = NULL;
	goto out;
oom:
	conn_send_error(c, id, "internal", "out of memory");
	if (f) {
		/* flight_add_waiter() is the last step that can fail: no waiter yet. */
		buf_free(&f->job.frame);
		free(f->job.optset);
		flight_dbg_free(f->dbg);
	}
	free(f);
out:
	if (wv)
		view_free(wv);
	buf_free(&comp);
	buf_free(&stamped);
	dbg_scan_free(&ds);
}
