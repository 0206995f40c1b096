/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compile: the compile request (FRAME_COMPILE), in the master.
 *
 * A request is read whole and checked before anything else happens
 * (compile_parse(): every field bounded, backend options only from
 * proto/llc_args.c's table, the cubin fields through cubin_req.c), then
 * keyed (compile_key(): SHA-256 of the input, then of the canonical
 * components in their fixed order) and answered by the first of:
 *
 *   PTX input for the cubin stage: cubin_req.c, at once;
 *   an entry stored for the key that this user may be served: the reply,
 *     at once (IR to cubin: stage two on the stored PTX, cubin_req.c);
 *   a flight computing the key for this user: joined (flight.c);
 *   a new flight (flight.c), unless the daemon stops or the user is at
 *     their cap; its job frame is what a worker runs.
 *
 * The hit path is this file, the store, compile_reply() (reply.c) and
 * conn_send(), and never waits. A waiter of a flight is answered through
 * the waiter_ops this file gives it (ptx_waiter, or cubin_next for IR to
 * cubin, which goes on to cubin_req.c with the PTX).
 * Nothing here runs LLVM or reads a file; the request's bytes are a
 * client's and are checked before they are used.
 */
#include "daemon/compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/codegen.h"
#include "daemon/flight.h"
#include "daemon/reply.h"
#include "daemon/store.h"
#include "daemon/tenant.h"
#include "proto/frame.h"
#include "proto/llc_args.h"
#include "proto/msg.h"

void compile_req_free(struct compile_req *r)
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

/* Decode and check a compile request. Returns 0, or -1 with a message. */
int compile_parse(const struct msg *m, uint32_t max_input,
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
	if (request_text_field(m, "kind", 16, &r->kind, &why) < 0 ||
	    request_text_field(m, "triple", 128, &r->triple, &why) < 0 ||
	    request_text_field(m, "march", 64, &r->march, &why) < 0 ||
	    request_text_field(m, "cpu", 64, &r->cpu, &why) < 0 ||
	    request_text_field(m, "features", 1024, &r->features, &why) < 0 ||
	    request_text_field(m, "pipeline", 4096, &r->pipeline, &why) < 0 ||
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
	if (r->cubin && asm_req_parse(m, &r->asmr, &r->from_ptx, err) < 0)
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
int compile_key(struct compile_req *r, struct key *k,
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

/* With namespace-per-uid, a user's entries are theirs alone: an identity's
 * (tenant, uid), "uid:1000" on the main socket, "NAME/uid:1000" on tenant
 * NAME's. */
void compile_set_namespace(struct server *s, struct conn *c, struct compile_req *r)
{
	char uid[24];

	if (s->sharing == SHARING_SEPARATE) {
		snprintf(uid, sizeof uid, "uid:%u", (unsigned)c->uid);
		tenant_qualify(&c->tenant, uid, r->ns, sizeof r->ns);
	}
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

/* A waiter of a PTX stage flight: answered with its result. */
static void answer_ptx(const struct flight *f, struct waiter *wt,
		       const struct flight_result *r)
{
	const struct job_result *res = r->res;

	compile_reply(wt->conn, wt->id, res->status, 0, &f->key, res->output,
		      res->output_len, res->log, res->log_len, res->compile_us, -1);
}

/* IR to cubin (wt->arg: the cubin stage it asked for): on to the second
 * stage with the PTX, unless the client has gone; a PTX stage that failed
 * answers it. */
static void answer_cubin_next(const struct flight *f, struct waiter *wt,
			      const struct flight_result *r)
{
	if (r->res->status != JOB_OK)
		answer_ptx(f, wt, r);
	else if (wt->conn->state != CONN_CLOSED)
		cubin_start(wt->conn, wt->id, r->res->output, r->res->output_len, wt->arg, 1);
}

static void drop_asm_req(void *arg)
{
	asm_req_free(arg);
	free(arg);
}

static const struct waiter_ops ptx_waiter = { .answer = answer_ptx };
static const struct waiter_ops cubin_next = {
	.answer = answer_cubin_next, .drop = drop_asm_req,
};

static void handle_compile(struct conn *c, uint64_t id, const struct msg *m)
{
	struct server *s = c->srv;
	struct compile_req r;
	struct buf err = BUF_INIT;
	struct key k;

	if (compile_parse(m, s->cfg->max_frame, &r, &err) < 0) {
		conn_send_error(c, id, "invalid", err.data ? err.data : "out of memory");
		goto out;
	}
	compile_set_namespace(s, c, &r);
	if (r.cubin && r.from_ptx) {
		cubin_start(c, id, r.input, r.input_len, &r.asmr, 0);
		goto out;
	}
	if (r.cubin)
		r.emit = 1;     /* stage one of IR to cubin: PTX it must be */
	if (compile_key(&r, &k, NULL) < 0) {
		conn_send_error(c, id, "internal", "out of memory");
		goto out;
	}

	struct store_result hit = { 0 };
	if (flight_lookup(c, &k, &hit)) {
		s->n.hits++;
		if (r.cubin && hit.status == JOB_OK) {
			/* Stage one is cached; stage two may be too. */
			cubin_start(c, id, hit.data.data, hit.data.len, &r.asmr, 0);
			store_result_free(&hit);
			goto out;
		}
		compile_reply(c, id, hit.status, 1, &k, hit.data.data,
			      hit.data.len, hit.log.data, hit.log.len, 0, -1);
		store_result_free(&hit);
		goto out;
	}
	s->n.misses++;

	struct asm_req *then = NULL;
	if (r.cubin && !(then = asm_req_take(&r.asmr))) {
		conn_send_error(c, id, "internal", "out of memory");
		goto out;
	}
	struct flight *f = flight_find(s, &k, c);
	if (f) {
		if (flight_add_waiter(f, c, id, then ? &cubin_next : &ptx_waiter, then) < 0) {
			conn_send_error(c, id, "internal", "out of memory");
			asm_req_free(then);
			free(then);
		} else {
			s->n.dedup_joins++;
		}
		goto out;
	}

	if (flight_refuse_new(s, c, id, (int64_t)r.input_len)) {
		asm_req_free(then);
		free(then);
		goto out;
	}

	struct buf comp = BUF_INIT;
	f = calloc(1, sizeof *f);
	if (!f || compile_key(&r, &f->key, &comp) < 0 ||
	    job_frame(&r, &f->job.frame) < 0 ||
	    flight_add_waiter(f, c, id, then ? &cubin_next : &ptx_waiter, then) < 0) {
		conn_send_error(c, id, "internal", "out of memory");
		if (f)
			buf_free(&f->job.frame);
		free(f);
		buf_free(&comp);
		asm_req_free(then);
		free(then);
		goto out;
	}
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

static const struct request_kind compile_kinds[] = {
	{ .type = FRAME_COMPILE, .handler = handle_compile },
};

const struct request_table compile_requests = {
	.kinds = compile_kinds,
	.n = sizeof compile_kinds / sizeof compile_kinds[0],
};
