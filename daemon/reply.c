/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reply: the compile reply frame, in the master (reply.h). One writer for
 * both stages, for hits and for flights' waiters alike, so that every
 * answer to a compile request has the same fields in the same order.
 */
#include "daemon/reply.h"

#include "daemon/conn.h"
#include "proto/buf.h"
#include "proto/frame.h"
#include "proto/msg.h"

/* exit_code: the assembler's exit status for a cubin reply; -1: none. */
void compile_reply(struct conn *c, uint64_t id, int status,
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
	if (lgn)
		msg_put_strn(&w, "log", lg, lgn);
	if (us)
		msg_put_int(&w, "compile_us", us);
	if (exit_code >= 0)
		msg_put_int(&w, "exit_code", exit_code);
	if (outn)       /* last, sent from where it lies */
		msg_put_bin_tail(&w, "output", out, outn);
	if (msg_end(&w) == 0)
		conn_sendv(c, &b, w.tail, w.tail_len);
	else
		conn_send_error(c, id, "internal", "out of memory building the reply");
	buf_free(&b);
}
