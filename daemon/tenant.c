/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant: tenants by socket; see tenant.h for the model.
 *
 * Design:
 *  - One listener per tenant, in a short list (tenants are few, and the
 *    list is walked only at a reload and when a connection's tenant is
 *    checked after one). Each listener carries its struct tenant, which
 *    it hands to the server's accept callback: the only way a
 *    connection gets a tenant.
 *  - A reload builds the new list beside the old one, binding only the
 *    sockets that are new, then swaps: any failure (a bad name, a socket
 *    that cannot be bound) undoes what it bound and leaves the old list
 *    serving, so a typo in the config file never takes a tenant's socket
 *    away.
 *  - Names are checked here and nowhere else; a name that passes cannot
 *    leave DIR, cannot be empty and cannot be "-" (the main socket's).
 *
 * Never: take a tenant from anything a client sends; unlink a socket
 * file that is not one this daemon bound.
 */
#include "daemon/tenant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "daemon/log.h"
#include "daemon/store.h"

const struct tenant tenant_main = { .id = 0, .name = TENANT_MAIN };

struct listener {
	struct tenant t;
	char path[sizeof ((struct sockaddr_un *)0)->sun_path];
	struct evconnlistener *l;
	struct event *resume;   /* after a failed accept (tenant_accept_failed()) */
	struct tenants *ts;
	struct listener *next;
};

struct tenants {
	struct event_base *base;
	struct store *store;
	tenant_accept_fn accept;
	void *arg;
	struct socket_perm perm;
	int enabled;
	struct listener *list;
};

int tenant_name_valid(const char *name, size_t n)
{
	if (n < 1 || n > TENANT_NAME_MAX || (n == 1 && name[0] == '-'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-'))
			return 0;
	}
	return 1;
}

void tenant_qualify(const struct tenant *t, const char *local, char *out, size_t n)
{
	if (t->id == 0)
		snprintf(out, n, "%s", local);
	else
		snprintf(out, n, "%s/%s", t->name, local);
}

/* ---- sockets ------------------------------------------------------------ */

int tenant_make_dir(const char *path, struct buf *err)
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

int tenant_listen(const char *path, const struct socket_perm *perm, struct buf *err)
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
		if (tenant_make_dir(dir, err) < 0)
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
	/* Bound with the owner's bits of the mode alone, then widened. */
	mode_t old = umask(0177 | (~(mode_t)perm->mode & 0600));
	int r = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (r == 0 && perm->gid >= 0 && chown(path, (uid_t)-1, (gid_t)perm->gid) < 0) {
		buf_printf(err, "cannot give '%s' the group %ld: %s", path, perm->gid,
			   strerror(errno));
		close(fd);
		unlink(path);
		return -1;
	}
	if (r == 0 && (perm->mode & 0777) != (perm->mode & 0600) &&
	    chmod(path, perm->mode & 0777) < 0) {
		buf_printf(err, "cannot make '%s' mode %04o: %s", path, perm->mode & 0777,
			   strerror(errno));
		close(fd);
		unlink(path);
		return -1;
	}
	if (r < 0 || listen(fd, 128) < 0) {
		buf_printf(err, "cannot listen on '%s': %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

void tenant_accept_failed(struct evconnlistener *l, struct event *resume, const char *path)
{
	static time_t logged;
	int e = EVUTIL_SOCKET_ERROR();
	struct timeval pause = { 0, 100 * 1000 };
	time_t now = time(NULL);

	if (now - logged >= 60) {
		logged = now;
		log_warn("cannot accept connections on '%s': %s; pausing (logged once a minute)",
			 path, strerror(e));
	}
	evconnlistener_disable(l);
	evtimer_add(resume, &pause);
}

/* ---- the tenants' listeners ------------------------------------------ */

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
		      int socklen, void *arg)
{
	struct listener *li = arg;

	li->ts->accept(li->ts->arg, fd, &li->t);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
	struct listener *li = arg;

	tenant_accept_failed(l, li->resume, li->path);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct listener *li = arg;

	if (li->l && li->ts->enabled)
		evconnlistener_enable(li->l);
}

struct tenants *tenants_new(struct event_base *base, struct store *store,
			    const struct socket_perm *perm, tenant_accept_fn accept,
			    void *arg)
{
	struct tenants *ts = calloc(1, sizeof *ts);

	if (ts) {
		ts->perm = *perm;
		ts->base = base;
		ts->store = store;
		ts->accept = accept;
		ts->arg = arg;
	}
	return ts;
}

static void listener_free(struct listener *li)
{
	if (li->resume)
		event_free(li->resume);
	if (li->l) {
		evconnlistener_free(li->l);     /* closes the socket */
		unlink(li->path);
	}
	free(li);
}

/* The listener of name under the path given, in list, or NULL. */
static struct listener *find(struct listener *list, const char *name, const char *path)
{
	for (; list; list = list->next)
		if (!strcmp(list->t.name, name) && (!path || !strcmp(list->path, path)))
			return list;
	return NULL;
}

/* A new listener for name under dir (not yet bound), checked. */
static struct listener *listener_new(struct tenants *ts, const char *dir, const char *name,
				     struct buf *err)
{
	struct listener *li = calloc(1, sizeof *li);

	if (!li) {
		buf_puts(err, "out of memory");
		return NULL;
	}
	li->ts = ts;
	memcpy(li->t.name, name, strnlen(name, TENANT_NAME_MAX));
	if (strlen(dir) + strlen(name) + sizeof "/.sock" > sizeof li->path) {
		buf_printf(err, "tenant '%s': socket path too long: '%s/%s.sock'", name, dir,
			   name);
		free(li);
		return NULL;
	}
	strcpy(li->path, dir);
	strcat(li->path, "/");
	strcat(li->path, name);
	strcat(li->path, ".sock");
	if (store_tenant_id(ts->store, name, &li->t.id) < 0 || li->t.id < 1 ||
	    li->t.id > TENANT_ID_MAX) {
		buf_printf(err, "tenant '%s': cannot give it a number in the cache", name);
		free(li);
		return NULL;
	}
	if (!(li->resume = evtimer_new(ts->base, on_resume, li))) {
		buf_puts(err, "out of memory");
		free(li);
		return NULL;
	}
	return li;
}

static int bind_listener(struct tenants *ts, struct listener *li, struct buf *err)
{
	struct buf why = BUF_INIT;
	int fd = tenant_listen(li->path, &ts->perm, &why);

	if (fd < 0) {
		buf_printf(err, "tenant '%s': %s", li->t.name, why.data ? why.data : "");
		buf_free(&why);
		return -1;
	}
	buf_free(&why);
	li->l = evconnlistener_new(ts->base, on_accept, li,
				   LEV_OPT_CLOSE_ON_FREE | (ts->enabled ? 0 : LEV_OPT_DISABLED),
				   -1, fd);
	if (!li->l) {
		buf_printf(err, "tenant '%s': cannot watch its socket", li->t.name);
		close(fd);
		unlink(li->path);
		return -1;
	}
	evconnlistener_set_error_cb(li->l, on_accept_error);
	return 0;
}

int tenants_configure(struct tenants *ts, const char *dir, const char *list,
		      struct buf *err)
{
	struct listener *next = NULL, **tail = &next;
	char name[TENANT_NAME_MAX + 1], base[sizeof next->path];
	int count = 0;

	/* "DIR/" is "DIR": a socket that stays is known by its path. */
	dir = dir ? dir : "";
	size_t dn = strlen(dir);
	while (dn > 1 && dir[dn - 1] == '/')
		dn--;
	if (dn >= sizeof base) {
		buf_printf(err, "tenant-dir too long: '%s'", dir);
		return -1;
	}
	memcpy(base, dir, dn);
	base[dn] = '\0';
	dir = base;
	list = list ? list : "";
	for (const char *p = list; *p;) {
		p += strspn(p, ", \t");
		size_t n = strcspn(p, ", \t");
		if (!n)
			break;
		if (!tenant_name_valid(p, n)) {
			buf_printf(err, "tenants: '%.*s' is not a valid tenant name (1 to %d "
				   "bytes of [a-z0-9-], and not '-')", n > 64 ? 64 : (int)n, p,
				   TENANT_NAME_MAX);
			goto fail;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		p += n;
		if (find(next, name, NULL)) {
			buf_printf(err, "tenants: '%s' is listed twice", name);
			goto fail;
		}
		if (++count > TENANTS_MAX) {
			buf_printf(err, "tenants: more than %d tenants", TENANTS_MAX);
			goto fail;
		}
		if (!*dir) {
			buf_printf(err, "tenants: '%s' needs a tenant-dir for its socket", name);
			goto fail;
		}
		struct listener *li = listener_new(ts, dir, name, err);
		if (!li)
			goto fail;
		*tail = li;
		tail = &li->next;
	}
	/* Bind the new ones; a tenant that stays keeps its socket. */
	for (struct listener *li = next; li; li = li->next)
		if (!find(ts->list, li->t.name, li->path) && bind_listener(ts, li, err) < 0)
			goto fail;
	for (struct listener *li = next; li; li = li->next) {
		struct listener *old = li->l ? NULL : find(ts->list, li->t.name, li->path);
		if (old) {
			li->l = old->l;
			evconnlistener_set_cb(li->l, on_accept, li);
			old->l = NULL;
			/* old's pause, if one runs, ends with old. */
			if (ts->enabled)
				evconnlistener_enable(li->l);
		} else {
			log_info("tenant '%s': listening on '%s'", li->t.name, li->path);
		}
	}
	while (ts->list) {
		struct listener *old = ts->list;
		ts->list = old->next;
		if (old->l)
			log_info("tenant '%s': its socket '%s' removed", old->t.name, old->path);
		listener_free(old);
	}
	ts->list = next;
	return 0;
fail:
	while (next) {
		struct listener *li = next;
		next = li->next;
		listener_free(li);
	}
	return -1;
}

void tenants_enable(struct tenants *ts, int on)
{
	if (!ts)
		return;
	ts->enabled = on;
	for (struct listener *li = ts->list; li; li = li->next)
		if (li->l) {
			if (on)
				evconnlistener_enable(li->l);
			else
				evconnlistener_disable(li->l);
		}
}

int tenants_serves(const struct tenants *ts, int64_t id)
{
	if (id == 0)
		return 1;
	for (const struct listener *li = ts ? ts->list : NULL; li; li = li->next)
		if (li->t.id == id)
			return 1;
	return 0;
}

int tenants_count(const struct tenants *ts)
{
	int n = 0;

	for (const struct listener *li = ts ? ts->list : NULL; li; li = li->next)
		n++;
	return n;
}

void tenants_free(struct tenants *ts)
{
	if (!ts)
		return;
	while (ts->list) {
		struct listener *li = ts->list;
		ts->list = li->next;
		listener_free(li);
	}
	free(ts);
}
