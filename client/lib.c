/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libptxcache: see ptxcache.h for the contract.
 *
 * One request at a time per handle: send a frame, then read frames until
 * the reply with our id arrives (poll), under two bounds: the call's
 * timeout, and the silence bound, the longest the daemon may say nothing
 * at all (no byte taken, none sent). A compile that waits in the daemon is
 * not silent: the daemon sends progress frames (PROTOCOL.md) meanwhile,
 * which we skip. The library
 * runs inside other people's processes, so it never exits, never aborts,
 * never lets SIGPIPE through (MSG_NOSIGNAL), and checks every frame the
 * daemon sends before trusting it.
 */
#include "client/ptxcache.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/msg.h"

/* Where the node's systemd service listens (systemd/ptxcached.socket);
 * $PTXCACHE_NODE_SOCKET moves it (the tests' stand-in for a node service). */
#define SYSTEM_SOCKET "/run/ptxcache/ptxcached.sock"

static const char *node_socket(void)
{
	const char *e = getenv("PTXCACHE_NODE_SOCKET");
	return e && *e ? e : SYSTEM_SOCKET;
}

/* Replies carry PTX or cubin: generous, but bounded. */
#define REPLY_MAX (1u << 30)
/* At most this much room made ahead of a reply's bytes. */
#define READ_AHEAD (4u << 20)
/* Descriptors received ahead of the frames that claim them: each rides on
 * its frame's first byte, so at most the frames one read can hold. */
#define FDS_MAX 16

/* The silence bound without $PTXCACHE_SILENCE_MS or an explicit one: the
 * daemon sends progress about once a second while a request waits. */
#define SILENCE_DEFAULT_MS 5000

struct ptxcache {
	int fd;
	int timeout_ms;
	int silence_ms;         /* 0: no silence bound */
	uint64_t next_id;
	struct buf in;          /* bytes read but not yet consumed */
	struct buf req;         /* the compile request being sent: kept from
	                           call to call (see req_buf()) */
	int fds[FDS_MAX];       /* descriptors received, not yet claimed by
	                           their frame (fd_take()), oldest first */
	int nfds;
	int64_t max_value;      /* the daemon's artifact-max-value: 0 not asked
	                           yet, -1 not said (an older daemon) */
	char err[512];
};

static void set_err(ptxcache *pc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pc->err, sizeof pc->err, fmt, ap);
	va_end(ap);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *ptxcache_default_socket(void)
{
	const char *e = getenv("PTXCACHE_SOCKET");
	char *out = NULL;

	if (e && *e)
		return strdup(e);
	e = getenv("XDG_RUNTIME_DIR");
	if (e && *e ? asprintf(&out, "%s/ptxcache/ptxcached.sock", e) < 0 :
	    asprintf(&out, "/tmp/ptxcache-%u/ptxcached.sock", (unsigned)getuid()) < 0)
		return NULL;
	/* No daemon of the user's own: the node's service, if there is one. */
	if (access(out, F_OK) != 0 && access(node_socket(), F_OK) == 0) {
		free(out);
		return strdup(node_socket());
	}
	return out;
}

/* $PTXCACHE_SILENCE_MS (0: none), else the default. */
static int silence_from_env(void)
{
	const char *e = getenv("PTXCACHE_SILENCE_MS");
	char *end;

	if (e && *e) {
		long v = strtol(e, &end, 10);
		if (!*end && v >= 0 && v <= 86400000)
			return (int)v;
	}
	return SILENCE_DEFAULT_MS;
}

/* What a wait for the daemon is bounded by: the call's deadline and the
 * time it was last heard from. */
struct bounds {
	int64_t deadline;
	int64_t heard;
	int silence_ms;         /* 0: no silence bound for this call */
};

static void bounds_init(ptxcache *pc, struct bounds *b, int silence)
{
	b->heard = now_ms();
	b->deadline = b->heard + pc->timeout_ms;
	b->silence_ms = silence ? pc->silence_ms : 0;
}

/* Wait until fd is ready for events, or a bound passes. */
static int wait_fd(ptxcache *pc, short events, const struct bounds *b)
{
	for (;;) {
		int64_t now = now_ms(), left = b->deadline - now;
		int quiet = 0;
		if (b->silence_ms && b->heard + b->silence_ms - now < left) {
			left = b->heard + b->silence_ms - now;
			quiet = 1;
		}
		if (left <= 0 && quiet) {
			set_err(pc, "ptxcached said nothing for %d ms (the silence bound, "
				"PTXCACHE_SILENCE_MS); giving up on it", b->silence_ms);
			return -1;
		}
		if (left <= 0) {
			set_err(pc, "timed out after %d ms waiting for ptxcached",
				pc->timeout_ms);
			return -1;
		}
		struct pollfd p = { .fd = pc->fd, .events = events };
		int r = poll(&p, 1, left > 1000000 ? 1000000 : (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR) {
			set_err(pc, "poll: %s", strerror(errno));
			return -1;
		}
	}
}

void ptxcache_opts_init(struct ptxcache_opts *o)
{
	memset(o, 0, sizeof *o);
	o->size = sizeof *o;
	o->silence_ms = -1;
}

ptxcache *ptxcache_connect(const char *path, int timeout_ms, char *err,
			   size_t errlen)
{
	struct ptxcache_opts o;

	ptxcache_opts_init(&o);
	o.timeout_ms = timeout_ms;
	return ptxcache_connect_opts(path, &o, err, errlen);
}

ptxcache *ptxcache_connect_opts(const char *path, const struct ptxcache_opts *opts,
				char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ptxcache_opts o;
	char *def = NULL;
	ptxcache *pc = calloc(1, sizeof *pc);

	if (!pc) {
		if (errlen)
			snprintf(err, errlen, "out of memory");
		return NULL;
	}
	/* Only the fields the caller's struct has (an older, smaller one). */
	ptxcache_opts_init(&o);
	if (opts && opts->size >= offsetof(struct ptxcache_opts, timeout_ms) + sizeof o.timeout_ms)
		o.timeout_ms = opts->timeout_ms;
	if (opts && opts->size >= offsetof(struct ptxcache_opts, silence_ms) + sizeof o.silence_ms)
		o.silence_ms = opts->silence_ms;
	pc->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 10000;
	ptxcache_set_silence(pc, o.silence_ms);
	pc->fd = -1;
	if (!path)
		path = def = ptxcache_default_socket();
	if (!path || strlen(path) >= sizeof sa.sun_path) {
		set_err(pc, "bad socket path '%s'", path ? path : "");
		goto fail;
	}
	strcpy(sa.sun_path, path);
	pc->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (pc->fd < 0) {
		set_err(pc, "cannot create socket: %s", strerror(errno));
		goto fail;
	}
	if (connect(pc->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		if (errno == EINPROGRESS || errno == EAGAIN) {
			int e = 0;
			socklen_t l = sizeof e;
			struct bounds b;
			bounds_init(pc, &b, 1);
			if (wait_fd(pc, POLLOUT, &b) < 0)
				goto fail;
			getsockopt(pc->fd, SOL_SOCKET, SO_ERROR, &e, &l);
			errno = e;
		}
		if (errno) {
			set_err(pc, "cannot connect to ptxcached at '%s': %s", path,
				strerror(errno));
			goto fail;
		}
	}
	free(def);
	return pc;
fail:
	if (errlen)
		snprintf(err, errlen, "%s", pc->err);
	if (pc->fd >= 0)
		close(pc->fd);
	free(pc);
	free(def);
	return NULL;
}

void ptxcache_set_timeout(ptxcache *pc, int timeout_ms)
{
	pc->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
}

void ptxcache_set_silence(ptxcache *pc, int silence_ms)
{
	pc->silence_ms = silence_ms < 0 ? silence_from_env() : silence_ms;
}

void ptxcache_close(ptxcache *pc)
{
	if (!pc)
		return;
	close(pc->fd);
	buf_free(&pc->in);
	for (int i = 0; i < pc->nfds; i++)
		close(pc->fds[i]);
	buf_free(&pc->req);
	free(pc);
}

const char *ptxcache_errmsg(const ptxcache *pc)
{
	return pc->err;
}

/* Send the frame w holds whole: its buf, then its tail from where it lies
 * (msg_put_bin_tail(): a kernel's input is not copied into the request).
 * A daemon that takes bytes is heard from: a large request to a daemon
 * that reads it slowly is no silence. */
static int send_all(ptxcache *pc, const struct msg_writer *w, struct bounds *bd)
{
	const struct buf *b = w->out;
	size_t off = 0, total = b->len + w->tail_len;

	while (off < total) {
		struct iovec v[2];
		int nv = 0;
		if (off < b->len)
			v[nv++] = (struct iovec){ b->data + off, b->len - off };
		if (w->tail_len) {
			size_t t = off > b->len ? off - b->len : 0;
			v[nv++] = (struct iovec){ (char *)w->tail + t, w->tail_len - t };
		}
		struct msghdr mh = { .msg_iov = v, .msg_iovlen = (size_t)nv };
		ssize_t n = sendmsg(pc->fd, &mh, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			bd->heard = now_ms();
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (wait_fd(pc, POLLOUT, bd) < 0) {
				/* Part of a frame is out: the stream is unusable.
				 * End it, so that a later call on this handle
				 * fails at once instead of sending into the middle
				 * of a frame. */
				if (off)
					shutdown(pc->fd, SHUT_RDWR);
				return -1;
			}
			continue;
		}
		int e = n < 0 ? errno : EPIPE;
		set_err(pc, "cannot send to ptxcached: %s",
			n < 0 ? strerror(errno) : "connection closed");
		errno = e;
		return -1;
	}
	return 0;
}

/*
 * recv() that also takes the descriptors the daemon sends (SCM_RIGHTS,
 * close-on-exec), queued in pc->fds for the frames that claim them. The
 * daemon sends one per sendmsg(), and the kernel ends a read after the
 * bytes that carried one: more than one in a read, a truncated control
 * message (MSG_CTRUNC: this process may be out of descriptors), or more
 * than FDS_MAX unclaimed is the daemon misbehaving. -2 with the message
 * set, else recv()'s result.
 */
static ssize_t recv_fds(ptxcache *pc, void *p, size_t room)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} u;
	struct iovec v = { p, room };
	struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof u.b };
	int got = 0, bad = 0;

	ssize_t n = recvmsg(pc->fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
			if (got++ || pc->nfds == FDS_MAX) {
				close(fd);
				bad = 1;
			} else {
				pc->fds[pc->nfds++] = fd;
			}
		}
	}
	if (bad || (mh.msg_flags & MSG_CTRUNC)) {
		set_err(pc, "ptxcached sent %s", (mh.msg_flags & MSG_CTRUNC) ?
			"a descriptor this process could not take (out of descriptors?)" :
			"more descriptors than replies");
		return -2;
	}
	return n;
}

/* The oldest descriptor received (its frame is being read), or -1 with
 * the message set if none came. */
static int fd_take(ptxcache *pc)
{
	if (!pc->nfds) {
		set_err(pc, "malformed reply from ptxcached: a descriptor announced, none sent");
		return -1;
	}
	int fd = pc->fds[0];
	memmove(pc->fds, pc->fds + 1, (size_t)--pc->nfds * sizeof *pc->fds);
	return fd;
}

/*
 * Send the frame w holds (whose "id" is id) and read until the reply to id.
 * On success, *m is parsed from pc->in, whose first *consumed bytes hold
 * the frame; the caller frees m and drops those bytes.
 *
 * Any byte from the daemon counts as hearing from it (a progress frame, or
 * a large reply on its way). verify, evict and explain walk the whole
 * cache before the daemon answers, with nothing sent meanwhile: the
 * timeout alone bounds them.
 */
static int call(ptxcache *pc, const struct msg_writer *req, uint64_t id,
		uint8_t want_type, struct msg *m, size_t *consumed)
{
	struct bounds bd;

	bounds_init(pc, &bd, want_type != FRAME_VERIFY && want_type != FRAME_EVICT &&
			     want_type != FRAME_EXPLAIN);
	msgpack_unpacked_init(&m->up);
	m->map = NULL;
	/* A daemon that refuses the connection (not allowed, too many) sends
	 * an error frame and closes: if sending fails, read that reason. */
	int unsent = send_all(pc, req, &bd) < 0;
	if (unsent && errno != EPIPE && errno != ECONNRESET)
		return -1;
	/* Whether the socket may hold more. Not right after the send (the
	 * reply takes the daemon a while), nor after a read that took less
	 * than there was room for: then poll() first, since a recv() would
	 * only say EAGAIN. */
	int more = 0;
	for (;;) {
		struct frame_hdr h;
		int r = frame_parse_hdr(pc->in.data, pc->in.len, REPLY_MAX, &h, NULL);
		if (r < 0) {
			set_err(pc, "malformed reply from ptxcached");
			return -1;
		}
		if (r == 1 && pc->in.len >= FRAME_HDR_LEN + (size_t)h.len) {
			struct buf e = BUF_INIT;
			int64_t rid = -1;
			if (msg_parse(m, pc->in.data + FRAME_HDR_LEN, h.len,
				      &MSG_LIMITS_DEFAULT, &e) < 0 ||
			    msg_int(m, "id", &rid) != 1) {
				set_err(pc, "malformed reply from ptxcached: %s",
					e.data ? e.data : "no id");
				buf_free(&e);
				return -1;
			}
			*consumed = FRAME_HDR_LEN + h.len;
			if (h.type == FRAME_ERROR && (rid == (int64_t)id || rid == 0)) {
				const char *s = "", *code = "";
				size_t n = 0, cn = 0;
				msg_bytes(m, "message", &s, &n);
				msg_bytes(m, "code", &code, &cn);
				set_err(pc, "ptxcached: %.*s", (int)n, s);
				return -1;
			}
			if (rid == (int64_t)id && h.type == (want_type | FRAME_REPLY))
				return 0;
			/* Progress (a request still waits), or a stray reply (an
			 * abandoned earlier request): skip it, and the descriptor
			 * it came with. */
			int with_fd = 0;
			if (msg_bool(m, "fd", &with_fd) == 1 && with_fd) {
				int sfd = fd_take(pc);
				if (sfd < 0)
					return -1;
				close(sfd);
			}
			msg_free(m);
			buf_consume(&pc->in, *consumed);
			continue;
		}
		/* Room for the rest of a frame whose header is here (up to
		 * READ_AHEAD at a time), to read it in one go. */
		size_t want = 65536;
		if (r == 1 && FRAME_HDR_LEN + (size_t)h.len - pc->in.len > want)
			want = FRAME_HDR_LEN + (size_t)h.len - pc->in.len;
		if (buf_reserve(&pc->in, want < READ_AHEAD ? want : READ_AHEAD) < 0) {
			set_err(pc, "out of memory");
			return -1;
		}
		if (!more && wait_fd(pc, POLLIN, &bd) < 0)
			return -1;
		size_t room = pc->in.cap - pc->in.len - 1;
		ssize_t n = recv_fds(pc, pc->in.data + pc->in.len, room);
		if (n == -2)
			return -1;
		more = n == (ssize_t)room;
		if (n > 0) {
			pc->in.len += (size_t)n;
			bd.heard = now_ms();
			continue;
		}
		if (n == 0 || (unsent && errno != EAGAIN && errno != EINTR)) {
			if (!unsent)    /* else keep the send's error */
				set_err(pc, "ptxcached closed the connection");
			return -1;
		}
		if (errno != EAGAIN && errno != EINTR) {
			set_err(pc, "cannot read from ptxcached: %s", strerror(errno));
			return -1;
		}
	}
}

/* A str or bin field copied out, NUL-terminated (caller frees); NULL if
 * absent or out of memory. */
static char *dup_field(const struct msg *m, const char *key, size_t *len)
{
	const char *s;
	size_t n;

	if (msg_bytes(m, key, &s, &n) != 1)
		return NULL;
	char *p = malloc(n + 1);
	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
		if (len)
			*len = n;
	}
	return p;
}

/* Begin a request frame of type in b with a fresh id; returns the id. */
static uint64_t begin(ptxcache *pc, struct msg_writer *w, struct buf *b, uint8_t type)
{
	uint64_t id = ++pc->next_id;

	msg_begin(w, b, type);
	msg_put_int(w, "id", (int64_t)id);
	return id;
}

/* Send the request that w holds (begun with msg_begin, "id" written) and
 * return the reply's "json" field. */
static int json_call(ptxcache *pc, struct msg_writer *w, uint64_t id,
		     uint8_t type, char **json)
{
	struct msg m;
	size_t used = 0;
	int r;

	*json = NULL;
	if (msg_end(w) < 0) {
		set_err(pc, "out of memory");
		buf_free(w->out);
		return -1;
	}
	r = call(pc, w, id, type, &m, &used);
	buf_free(w->out);
	if (r == 0 && !(*json = dup_field(&m, "json", NULL))) {
		set_err(pc, "malformed reply from ptxcached");
		r = -1;
	}
	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}

/* A request with only an id, whose reply we parse into m. */
static int simple_call(ptxcache *pc, uint8_t type, struct msg *m, size_t *consumed)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	uint64_t id = ++pc->next_id;

	msg_begin(&w, &b, type);
	msg_put_int(&w, "id", (int64_t)id);
	if (msg_end(&w) < 0) {
		set_err(pc, "out of memory");
		buf_free(&b);
		msgpack_unpacked_init(&m->up);
		return -1;
	}
	int r = call(pc, &w, id, type, m, consumed);
	buf_free(&b);
	return r;
}

/* The fields of a compile request, shared by compile, assemble and
 * explain: the input last, sent from the caller's memory. */
static void put_compile_fields(struct msg_writer *w,
			       const struct ptxcache_compile_req *req)
{
	if (req->triple)
		msg_put_str(w, "triple", req->triple);
	if (req->march)
		msg_put_str(w, "march", req->march);
	if (req->cpu)
		msg_put_str(w, "cpu", req->cpu);
	if (req->features)
		msg_put_str(w, "features", req->features);
	if (req->pipeline)
		msg_put_str(w, "pipeline", req->pipeline);
	msg_put_int(w, "opt", req->opt_level);
	msg_put_bool(w, "emit", req->emit);
	msg_put_bool(w, "strict", req->strict);
	if (req->noptions)
		msg_put_strv(w, "options", req->options, req->noptions);
	msg_put_bin_tail(w, "input", req->input, req->input_len);
}

void ptxcache_compile_req_init(struct ptxcache_compile_req *req)
{
	memset(req, 0, sizeof *req);
	req->opt_level = 2;
	req->emit = 1;
	req->strict = 1;
}

/* The buffer a compile or assemble request's fields are built in: the
 * handle's own, kept between calls. The input itself is not copied into
 * it (put_compile_fields()). */
static struct buf *req_buf(ptxcache *pc)
{
	buf_reset(&pc->req);
	return &pc->req;
}

/* Send the compile frame in b (request id) and read its reply into res. */
static int compile_call(ptxcache *pc, struct msg_writer *w, uint64_t id,
			struct ptxcache_result *res)
{
	struct msg m;
	size_t used = 0;
	int64_t st, us = 0, xc = 0;
	const char *k;
	size_t kn;
	int cached = 0;

	if (msg_end(w) < 0) {
		set_err(pc, "out of memory");
		return -1;
	}
	int r = call(pc, w, id, FRAME_COMPILE, &m, &used);
	if (r == 0) {
		if (msg_int(&m, "status", &st) != 1 || st < 0 || st > PTXCACHE_FATAL_EXIT ||
		    msg_bytes(&m, "key", &k, &kn) != 1 || kn != 64 ||
		    msg_bool(&m, "cached", &cached) < 0 ||
		    msg_int(&m, "compile_us", &us) < 0 ||
		    msg_int(&m, "exit_code", &xc) < 0 || xc < 0 || xc > 255) {
			set_err(pc, "malformed compile reply from ptxcached");
			r = -1;
		} else {
			res->status = (enum ptxcache_status)st;
			res->cached = cached;
			res->compile_us = us;
			res->exit_code = (int)xc;
			memcpy(res->key, k, 64);
			res->key[64] = '\0';
			res->output = dup_field(&m, "output", &res->output_len);
			res->log = dup_field(&m, "log", &res->log_len);
		}
	}
	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}

int ptxcache_compile(ptxcache *pc, const struct ptxcache_compile_req *req,
		     struct ptxcache_result *res)
{
	struct buf *b = req_buf(pc);
	struct msg_writer w;
	uint64_t id = begin(pc, &w, b, FRAME_COMPILE);

	memset(res, 0, sizeof *res);
	put_compile_fields(&w, req);
	return compile_call(pc, &w, id, res);
}

void ptxcache_result_free(struct ptxcache_result *res)
{
	if (!res)
		return;
	free(res->output);
	free(res->log);
	res->output = res->log = NULL;
}

int ptxcache_ping(ptxcache *pc)
{
	struct msg m;
	size_t used = 0;
	int r = simple_call(pc, FRAME_PING, &m, &used);

	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}


int ptxcache_stats_json(ptxcache *pc, char **json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	uint64_t id = begin(pc, &w, &b, FRAME_STATS);

	return json_call(pc, &w, id, FRAME_STATS, json);
}

int ptxcache_hello(ptxcache *pc, char **server, char **compiler)
{
	struct msg m;
	size_t used = 0;
	int r = simple_call(pc, FRAME_HELLO, &m, &used);

	*server = *compiler = NULL;
	if (r == 0) {
		*server = dup_field(&m, "server", NULL);
		*compiler = dup_field(&m, "compiler", NULL);
		if (!*server || !*compiler) {
			free(*server);
			free(*compiler);
			*server = *compiler = NULL;
			set_err(pc, "malformed hello reply from ptxcached");
			r = -1;
		}
	}
	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}

static void put_filter(struct msg_writer *w, const struct ptxcache_filter *f)
{
	if (!f)
		return;
	if (f->kind)
		msg_put_str(w, "kind", f->kind);
	if (f->arch)
		msg_put_str(w, "arch", f->arch);
	if (f->older_than_s > 0)
		msg_put_int(w, "older_than", f->older_than_s);
	if (f->min_bytes > 0)
		msg_put_int(w, "min_bytes", f->min_bytes);
}

int ptxcache_ls(ptxcache *pc, const struct ptxcache_filter *f, int limit,
		char **json)
{
	return ptxcache_ls_ns(pc, f, NULL, limit, json);
}

int ptxcache_ls_ns(ptxcache *pc, const struct ptxcache_filter *f, const char *ns,
		   int limit, char **json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	uint64_t id = begin(pc, &w, &b, FRAME_LS);

	put_filter(&w, f);
	if (ns)
		msg_put_str(&w, "namespace", ns);
	msg_put_int(&w, "limit", limit > 0 ? limit : 100);
	return json_call(pc, &w, id, FRAME_LS, json);
}

int ptxcache_show(ptxcache *pc, const char *key, char **json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	uint64_t id = begin(pc, &w, &b, FRAME_SHOW);

	msg_put_str(&w, "key", key);
	return json_call(pc, &w, id, FRAME_SHOW, json);
}

int ptxcache_explain(ptxcache *pc, const struct ptxcache_compile_req *req,
		     char **json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	uint64_t id = begin(pc, &w, &b, FRAME_EXPLAIN);

	put_compile_fields(&w, req);
	return json_call(pc, &w, id, FRAME_EXPLAIN, json);
}

int ptxcache_verify(ptxcache *pc, char **json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	uint64_t id = begin(pc, &w, &b, FRAME_VERIFY);

	return json_call(pc, &w, id, FRAME_VERIFY, json);
}

int ptxcache_evict(ptxcache *pc, const struct ptxcache_filter *f,
		   int64_t max_size, int all, char **json)
{
	return ptxcache_evict_ns(pc, f, NULL, max_size, all, json);
}

int ptxcache_evict_ns(ptxcache *pc, const struct ptxcache_filter *f, const char *ns,
		      int64_t max_size, int all, char **json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	uint64_t id = begin(pc, &w, &b, FRAME_EVICT);

	put_filter(&w, f);
	if (ns)
		msg_put_str(&w, "namespace", ns);
	if (max_size >= 0)
		msg_put_int(&w, "max_size", max_size);
	if (all)
		msg_put_bool(&w, "all", 1);
	return json_call(pc, &w, id, FRAME_EVICT, json);
}

/* ---- artifacts -------------------------------------------------------- */

/* Send w's artifact request and parse its reply into m. A get may wait
 * for another client's put: the call then allows for that wait too. */
static int artifact_call(ptxcache *pc, struct msg_writer *w, uint64_t id, uint8_t type,
			 int64_t wait_ms, struct msg *m, size_t *used)
{
	int saved = pc->timeout_ms;
	int r;

	if (msg_end(w) < 0) {
		set_err(pc, "out of memory");
		buf_free(w->out);
		msgpack_unpacked_init(&m->up);
		m->map = NULL;
		return -1;
	}
	if (wait_ms > 0)
		pc->timeout_ms = (int)(wait_ms + saved > INT32_MAX ? INT32_MAX : wait_ms + saved);
	r = call(pc, w, id, type, m, used);
	pc->timeout_ms = saved;
	buf_free(w->out);
	return r;
}

/* A value that came as a descriptor and is smaller than this is read into
 * malloc'd memory; a larger one is mapped. Mapping pays page-table work
 * for every page (8 MiB: 3.0 ms mapped and touched, 0.8 ms read); reading
 * pays fresh anonymous pages once malloc takes them from mmap() (from 32
 * MiB, glibc's largest threshold: 64 MiB 191 ms read, 21 ms mapped). */
#define MAP_MIN ((size_t)32 << 20)

/*
 * Values of MAP_MIN and more that came as a descriptor are mapped, not
 * copied: ptxcache_artifact's value is then a private mapping of the
 * daemon's file (writable: a write makes a private copy of that page, as
 * a malloc'd value would take it),
 * which ptxcache_artifact_free() must unmap rather than free(). The struct
 * has no room to say which (its size is ABI), so the mappings are kept
 * here, few at a time: those the caller has not freed yet.
 */
struct mapping {
	void *p;
	size_t len;
	struct mapping *next;
};
static struct mapping *mappings;
static pthread_mutex_t mappings_lock = PTHREAD_MUTEX_INITIALIZER;

/* fd's len bytes read into malloc'd memory, NUL-terminated: NULL with the
 * message set. */
static void *read_value(ptxcache *pc, int fd, size_t len)
{
	char *p = malloc(len + 1);
	size_t got = 0;

	if (!p) {
		set_err(pc, "out of memory");
		return NULL;
	}
	while (got < len) {
		ssize_t r = pread(fd, p + got, len - got, (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			set_err(pc, "cannot read the value ptxcached sent: %s",
				r < 0 ? strerror(errno) : "its file is shorter than the value");
			free(p);
			return NULL;
		}
		got += (size_t)r;
	}
	p[len] = '\0';
	return p;
}

/* The value behind fd, len bytes (checked: one regular file of exactly
 * len bytes), NUL-terminated as a malloc'd value is: read (under MAP_MIN)
 * or mapped, where a zero page or the page's zero fill follows the last
 * byte. NULL with the message set. */
static void *fd_value(ptxcache *pc, int fd, size_t len)
{
	struct stat st;
	long page = sysconf(_SC_PAGESIZE);

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != len) {
		set_err(pc, "malformed reply from ptxcached: its descriptor is not a file of "
			"the value's %zu bytes", len);
		return NULL;
	}
	if (len < MAP_MIN)
		return read_value(pc, fd, len);
	struct mapping *m = malloc(sizeof *m);
	size_t total = (len + 1 + (size_t)page - 1) / (size_t)page * (size_t)page;
	char *p = m ? mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			   -1, 0) : MAP_FAILED;
	if (p != MAP_FAILED &&
	    mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) {
		munmap(p, total);
		p = MAP_FAILED;
	}
#ifdef MADV_POPULATE_READ
	/* The page cache's pages mapped in one call (Linux 5.14), not one
	 * fault at a time as the caller reads them; still shared, not copied
	 * (a write makes its page private). Best effort. */
	if (p != MAP_FAILED)
		madvise(p, len, MADV_POPULATE_READ);
#endif
	if (p == MAP_FAILED) {
		set_err(pc, "cannot map the value ptxcached sent: %s", m ? strerror(errno) :
			"out of memory");
		free(m);
		return NULL;
	}
	m->p = p;
	m->len = total;
	pthread_mutex_lock(&mappings_lock);
	m->next = mappings;
	mappings = m;
	pthread_mutex_unlock(&mappings_lock);
	return p;
}

/* Unmap p if it is one of ours: 1 if it was, 0 if not (malloc'd). */
static int unmap_value(void *p)
{
	struct mapping **pp, *m = NULL;

	pthread_mutex_lock(&mappings_lock);
	for (pp = &mappings; *pp; pp = &(*pp)->next) {
		if ((*pp)->p == p) {
			m = *pp;
			*pp = m->next;
			break;
		}
	}
	pthread_mutex_unlock(&mappings_lock);
	if (!m)
		return 0;
	munmap(m->p, m->len);
	free(m);
	return 1;
}

int ptxcache_artifact_get(ptxcache *pc, const char *ns, const char *key, int take_lease,
			  int wait_ms, struct ptxcache_artifact *out)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	struct msg m;
	size_t used = 0;
	uint64_t id = begin(pc, &w, &b, FRAME_ARTIFACT_GET);

	memset(out, 0, sizeof *out);
	msg_put_str(&w, "ns", ns);
	msg_put_str(&w, "key", key);
	if (take_lease)
		msg_put_bool(&w, "lease", 1);
	if (wait_ms >= 0)
		msg_put_int(&w, "wait_ms", wait_ms);
	/* A large value may come as its file's descriptor (PROTOCOL.md). */
	msg_put_bool(&w, "fd", 1);
	/* The daemon's own bound when none is given: artifact-wait, 300 s by
	 * default. */
	int r = artifact_call(pc, &w, id, FRAME_ARTIFACT_GET, wait_ms >= 0 ? wait_ms : 300000,
			      &m, &used);
	if (r == 0) {
		int64_t lease = 0, vlen = -1;
		int with_fd = 0;
		msg_bool(&m, "found", &out->found);
		msg_int(&m, "lease", &lease);
		out->lease = lease > 0 ? (uint64_t)lease : 0;
		if (msg_bool(&m, "fd", &with_fd) == 1 && with_fd) {
			int fd = fd_take(pc);
			if (fd < 0 || !out->found || msg_int(&m, "value_len", &vlen) != 1 ||
			    vlen < 0 || (uint64_t)vlen > REPLY_MAX) {
				if (fd >= 0)
					set_err(pc, "malformed reply from ptxcached: a descriptor "
						"without a found value's length");
				r = -1;
			} else if (!(out->value = fd_value(pc, fd, (size_t)vlen))) {
				r = -1;
			} else {
				out->len = (size_t)vlen;
			}
			if (fd >= 0)
				close(fd);
			if (r < 0)
				out->found = 0;
		} else if (out->found && !(out->value = dup_field(&m, "value", &out->len))) {
			set_err(pc, "malformed reply from ptxcached: a found artifact without a value");
			out->found = 0;
			r = -1;
		}
	}
	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}

/* The daemon's artifact-max-value, from hello, into pc->max_value; -1 on
 * an error (the message set). */
static int ask_max_value(ptxcache *pc)
{
	struct msg m;
	size_t used = 0;
	int64_t v = -1;
	int r = simple_call(pc, FRAME_HELLO, &m, &used);

	if (r == 0)
		pc->max_value = msg_int(&m, "artifact_max_value", &v) == 1 && v > 0 ? v : -1;
	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}

/* A put of more than this asks the daemon's limit first (one hello per
 * handle), so that a value it would refuse after its head is not sent. */
#define ASK_MAX_VALUE_OVER ((size_t)1 << 20)

/* Whether a put of len bytes is over the daemon's artifact-max-value. The
 * limit is live (SIGHUP): one learned earlier is asked again before it
 * refuses, and a lowered one is the daemon's to refuse. A daemon that
 * cannot be asked is left to answer the put itself. */
static int over_max_value(ptxcache *pc, size_t len)
{
	int asked = 0;

	if (len <= ASK_MAX_VALUE_OVER)
		return 0;
	if (!pc->max_value) {
		if (ask_max_value(pc) < 0)
			return 0;
		asked = 1;
	}
	if (pc->max_value < 0 || len <= (uint64_t)pc->max_value)
		return 0;
	if (!asked && ask_max_value(pc) < 0)
		return 0;
	return pc->max_value > 0 && len > (uint64_t)pc->max_value;
}

int ptxcache_artifact_put(ptxcache *pc, const char *ns, const char *key, const void *value,
			  size_t len, uint64_t lease)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	struct msg m;
	size_t used = 0;

	if (over_max_value(pc, len)) {
		set_err(pc, "ptxcached: value of %zu bytes is over the limit of %lld "
			"(artifact-max-value)", len, (long long)pc->max_value);
		return -1;
	}
	uint64_t id = begin(pc, &w, &b, FRAME_ARTIFACT_PUT);

	msg_put_str(&w, "ns", ns);
	msg_put_str(&w, "key", key);
	if (lease)
		msg_put_int(&w, "lease", (int64_t)lease);
	msg_put_bin_tail(&w, "value", value ? value : "", len);
	int r = artifact_call(pc, &w, id, FRAME_ARTIFACT_PUT, 0, &m, &used);
	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}

int ptxcache_artifact_release(ptxcache *pc, uint64_t lease)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	struct msg m;
	size_t used = 0;
	uint64_t id = begin(pc, &w, &b, FRAME_ARTIFACT_RELEASE);

	msg_put_int(&w, "lease", (int64_t)lease);
	int r = artifact_call(pc, &w, id, FRAME_ARTIFACT_RELEASE, 0, &m, &used);
	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}

void ptxcache_artifact_free(struct ptxcache_artifact *a)
{
	if (!a)
		return;
	if (a->value && !unmap_value(a->value))
		free(a->value);
	memset(a, 0, sizeof *a);
}

/* ---- PTX to cubin ----------------------------------------------------- */

void ptxcache_assemble_req_init(struct ptxcache_assemble_req *req)
{
	memset(req, 0, sizeof *req);
}

/* The fields of an assemble request, shared by assemble and explain. */
static void put_assemble_fields(struct msg_writer *w,
				const struct ptxcache_assemble_req *req)
{
	msg_put_str(w, "kind", "cubin");
	msg_put_str(w, "backend", req->backend == PTXCACHE_BACKEND_NVJITLINK ?
		    "nvjitlink" : "ptxas");
	msg_put_strv(w, "asm_args", req->args, req->nargs);
	if (req->sources)
		msg_put_str(w, "asm_sources", req->sources);
	if (req->ir) {
		struct ptxcache_compile_req ir = *req->ir;
		ir.input = req->input;
		ir.input_len = req->input_len;
		ir.emit = 1;
		put_compile_fields(w, &ir);     /* the input last */
	} else {
		msg_put_str(w, "input_kind", "ptx");
		msg_put_bin_tail(w, "input", req->input, req->input_len);
	}
}

int ptxcache_explain_assemble(ptxcache *pc, const struct ptxcache_assemble_req *req,
			      char **json)
{
	struct buf b = BUF_INIT;
	struct msg_writer w;
	uint64_t id = begin(pc, &w, &b, FRAME_EXPLAIN);

	put_assemble_fields(&w, req);
	return json_call(pc, &w, id, FRAME_EXPLAIN, json);
}

int ptxcache_assemble(ptxcache *pc, const struct ptxcache_assemble_req *req,
		      struct ptxcache_result *res)
{
	struct buf *b = req_buf(pc);
	struct msg_writer w;
	uint64_t id = begin(pc, &w, b, FRAME_COMPILE);

	memset(res, 0, sizeof *res);
	put_assemble_fields(&w, req);
	return compile_call(pc, &w, id, res);
}

int ptxcache_assembler_version(ptxcache *pc, char **text)
{
	struct msg m;
	size_t used = 0;
	int r = simple_call(pc, FRAME_HELLO, &m, &used);

	*text = NULL;
	if (r == 0 && !(*text = dup_field(&m, "assembler", NULL))) {
		set_err(pc, "ptxcached has no ptxas");
		r = -1;
	}
	msg_free(&m);
	buf_consume(&pc->in, used);
	return r;
}
