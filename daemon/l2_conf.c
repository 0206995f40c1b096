/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l2_conf: the shared tier's settings, one generation at a time; the
 * layers that use them are l2.c (values) and l2_conn.c (connections).
 *
 * What: conf_new() turns an l2_config (the l2 URL, the secret file, the
 * prefix, the compiler identity, the timeouts and the size limit) into a
 * struct l2_conf, or says in err what is wrong with it; conf_unref()
 * lets one go (the secret and the password wiped); conf_moved() says
 * whether a new generation needs other connections than the one before.
 * l2_new() makes the first generation, each l2_reconfigure() (SIGHUP) the
 * next; a command and a transfer hold the one they began under.
 *
 * Why it is built this way:
 *  - The URL is a stranger's input to the daemon's operator, parsed
 *    defensively: redis://[user:password@]host[:port][/db], unix:PATH (or
 *    a bare socket path), redis-cluster://[user:password@]host[:port]
 *    [,host[:port]...] (at most L2_SEEDS_MAX seeds); percent-decoded
 *    credentials; bounded numbers; an error names the URL with its
 *    password redacted (l2_url_redacted(), which everything that shows
 *    a URL calls: --print-config, stats, the log).
 *  - hiredis would call getaddrinfo() on every connect, blocking the loop:
 *    only numeric addresses leave this file. A host name is resolved here
 *    (blocking, at start or on a reload that names a new one; a reload
 *    naming the same host reuses the known address); l2_conn.c looks it up
 *    again, in the background, before each reconnect. Cluster seeds are
 *    resolved here once.
 *  - The secret file must hold 1 to L2_SECRET_MAX bytes (a trailing
 *    newline is not part of it).
 *
 * Never: log the secret or a password; keep either after the last
 * reference to its generation.
 */
#include "daemon/l2_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/crypto.h>

#define L2_DEFAULT_TIMEOUT_MS 50
#define L2_DEFAULT_MAX_VALUE (1LL << 30)

static int parse_url(struct l2_conf *l2, const char *url, const struct l2_conf *known,
		     struct buf *err);
static int read_secret(struct l2_conf *l2, const char *path, struct buf *err);

/* A new generation of settings from cfg (one reference), or NULL with a
 * message in err. known: the current generation, whose resolved address
 * is reused if the host name is the same. */
struct l2_conf *conf_new(const struct l2_config *cfg, const struct l2_conf *known,
			 struct buf *err)
{
	struct l2_conf *c = calloc(1, sizeof *c);
	const char *prefix = cfg->prefix ? cfg->prefix : "ptxcache:";
	const char *identity = cfg->identity ? cfg->identity : "";

	if (!c) {
		buf_printf(err, "out of memory");
		return NULL;
	}
	c->refs = 1;
	c->read_only = cfg->read_only;
	c->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms :
				L2_DEFAULT_TIMEOUT_MS;
	c->command_timeout_ms = cfg->command_timeout_ms > 0 ? cfg->command_timeout_ms :
				L2_DEFAULT_TIMEOUT_MS;
	c->max_value = cfg->max_value > 0 ? cfg->max_value : L2_DEFAULT_MAX_VALUE;
	if (strlen(prefix) > L2_PREFIX_MAX) {
		buf_printf(err, "l2 prefix is longer than %d bytes", L2_PREFIX_MAX);
		goto fail;
	}
	if (strlen(identity) > UINT16_MAX) {
		buf_printf(err, "l2: compiler identity is longer than %d bytes", UINT16_MAX);
		goto fail;
	}
	if (parse_url(c, cfg->url, known, err) < 0 || read_secret(c, cfg->secret_file, err) < 0)
		goto fail;
	if (!(c->prefix = strdup(prefix)) || !(c->identity = strdup(identity))) {
		buf_printf(err, "out of memory");
		goto fail;
	}
	return c;
fail:
	conf_unref(c);
	return NULL;
}

static int same_str(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* Does b need other connections than a? */
int conf_moved(const struct l2_conf *a, const struct l2_conf *b)
{
	if (a->cluster != b->cluster || a->nseeds != b->nseeds)
		return 1;
	for (int i = 0; i < a->nseeds; i++)
		if (a->seeds[i].port != b->seeds[i].port || strcmp(a->seeds[i].host, b->seeds[i].host))
			return 1;
	return !same_str(a->path, b->path) || !same_str(a->name, b->name) ||
	       strcmp(a->host, b->host) || a->port != b->port || a->db != b->db ||
	       !same_str(a->user, b->user) || !same_str(a->password, b->password);
}

void conf_unref(struct l2_conf *c)
{
	if (!c || --c->refs > 0)
		return;
	OPENSSL_cleanse(c->secret, sizeof c->secret);
	if (c->password)
		OPENSSL_cleanse(c->password, strlen(c->password));
	free(c->password);
	free(c->user);
	free(c->path);
	free(c->name);
	free(c->where);
	free(c->prefix);
	free(c->identity);
	free(c);
}

/* ---- configuration ----------------------------------------------------- */

static int read_secret(struct l2_conf *l2, const char *path, struct buf *err)
{
	unsigned char tmp[L2_SECRET_MAX + 2];
	size_t n = 0;
	int fd;

	if (!path || !*path) {
		buf_printf(err, "l2 needs a secret file (l2-secret-file)");
		return -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		buf_printf(err, "cannot read l2 secret '%s': %s", path, strerror(errno));
		return -1;
	}
	while (n < sizeof tmp) {
		ssize_t r = read(fd, tmp + n, sizeof tmp - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			buf_printf(err, "cannot read l2 secret '%s': %s", path, strerror(errno));
			close(fd);
			OPENSSL_cleanse(tmp, sizeof tmp);
			return -1;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (n && tmp[n - 1] == '\n')
		n--;
	if (n && tmp[n - 1] == '\r')
		n--;
	if (n > L2_SECRET_MAX)
		buf_printf(err, "l2 secret '%s' is longer than %d bytes", path, L2_SECRET_MAX);
	else if (n == 0)
		buf_printf(err, "l2 secret '%s' is empty", path);
	else
		memcpy(l2->secret, tmp, n);
	OPENSSL_cleanse(tmp, sizeof tmp);
	if (n == 0 || n > L2_SECRET_MAX)
		return -1;
	l2->secret_len = n;
	return 0;
}

/* The URL as it may be shown (l2.h): the password replaced by "***", the
 * user name kept. Whatever stands before the last '@' of what follows the
 * scheme is the user information, whatever the scheme (redis://,
 * rediss://, redis-cluster://, one the parser refuses): a password with a
 * raw '/' or '@' in it is hidden all the same. User information without a
 * ':' may be a password alone: hidden whole. A Unix socket path (unix:,
 * or one starting with '/') has no credentials and is shown as it is. */
void l2_url_redacted(const char *url, struct buf *out)
{
	if (!url) {
		buf_puts(out, "");
		return;
	}
	const char *sep = strstr(url, "://");
	const char *auth = sep ? sep + 3 : url[0] == '/' || !strncmp(url, "unix:", 5) ? NULL : url;
	const char *at = auth ? strrchr(auth, '@') : NULL;

	if (!at) {
		buf_puts(out, url);
		return;
	}
	const char *colon = memchr(auth, ':', (size_t)(at - auth));
	buf_printf(out, "%.*s%s%s", colon ? (int)(colon - url) : (int)(auth - url), url,
		   colon ? ":***" : "***", at);
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decode [s, e) into a new string; NULL if malformed or no memory. */
static char *pct_decode(const char *s, const char *e)
{
	char *out = malloc((size_t)(e - s) + 1), *o = out;

	if (!out)
		return NULL;
	while (s < e) {
		if (*s == '%') {
			int h, l;
			if (e - s < 3 || (h = hexval(s[1])) < 0 || (l = hexval(s[2])) < 0) {
				free(out);
				return NULL;
			}
			*o++ = (char)(h << 4 | l);
			s += 3;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
	return out;
}

/* host[:port] or [v6]:port in [*host, end): *host, *hend the host alone
 * (brackets off), *colon the ':' before a port or NULL. 0, or -1. */
static int split_host(const char **host, const char *end, const char **hend,
		      const char **colon)
{
	const char *h = *host;

	if (*h == '[') {
		*hend = memchr(h, ']', (size_t)(end - h));
		if (!*hend)
			return -1;
		*colon = *hend + 1 < end && (*hend)[1] == ':' ? *hend + 1 : NULL;
		if (*hend + 1 < end && !*colon)
			return -1;
		*host = h + 1;
	} else {
		*colon = memchr(h, ':', (size_t)(end - h));
		*hend = *colon ? *colon : end;
	}
	return 0;
}

/* The credentials before the last '@' of [auth, end), if any: user:password
 * or :password, percent-decoded into l2->user (when named) and
 * l2->password; *at the '@', or NULL where there are none. 0; -1 with a
 * message in err (no ':'); -2 where one does not decode (malformed, or no
 * memory): the caller says what its URL looks like. shown: the URL as it
 * may be logged. */
static int parse_auth(struct l2_conf *l2, const char *auth, const char *end, const char **at,
		      const char *shown, struct buf *err)
{
	const char *c;

	*at = NULL;
	for (const char *q = auth; q < end; q++)
		if (*q == '@')
			*at = q;
	if (!*at)
		return 0;
	c = memchr(auth, ':', (size_t)(*at - auth));
	if (!c) {
		buf_printf(err, "bad l2 URL '%s': credentials are user:password or :password",
			   shown);
		return -1;
	}
	if ((c > auth && !(l2->user = pct_decode(auth, c))) ||
	    !(l2->password = pct_decode(c + 1, *at)))
		return -2;
	return 0;
}

/* name (a host name or a numeric address) as a numeric address into out
 * (outlen bytes), IPv4 first as hiredis would: blocking, for start-up and
 * reloads alone. 0, or -1 with a message in err. */
static int resolve_numeric(const char *name, char *out, size_t outlen, struct buf *err)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	int e;

	hints.ai_family = AF_INET;
	e = getaddrinfo(name, NULL, &hints, &res);
	if (e) {
		hints.ai_family = AF_INET6;
		e = getaddrinfo(name, NULL, &hints, &res);
	}
	if (!e) {
		e = getnameinfo(res->ai_addr, res->ai_addrlen, out, (socklen_t)outlen, NULL, 0,
				NI_NUMERICHOST);
		freeaddrinfo(res);
	}
	if (e) {
		buf_printf(err, "cannot resolve l2 host '%s': %s", name, gai_strerror(e));
		return -1;
	}
	return 0;
}

/* shown (scheme://hosts..., no credentials) with the URL's user name and
 * "***" for its password put back, through l2_url_redacted(): what the log
 * calls the server. auth..at: the credentials in the URL. */
static void shown_with_user(struct buf *shown, const char *auth, const char *at)
{
	const char *rest = strstr(shown->data, "://");
	struct buf full = BUF_INIT;

	if (!rest)
		return;
	rest += 3;
	buf_printf(&full, "%.*s%.*s%s", (int)(rest - shown->data), shown->data,
		   (int)(at - auth + 1), auth, rest);
	if (full.data) {
		buf_reset(shown);
		l2_url_redacted(full.data, shown);
		OPENSSL_cleanse(full.data, full.len);
	}
	buf_free(&full);
}

/* redis-cluster://[user:password@]host[:port][,host[:port]...][/]: the
 * seeds into l2 (numeric; names resolved here, blocking). auth: after the
 * scheme; shown: the URL as it may be logged. */
static int parse_cluster_url(struct l2_conf *l2, const char *auth, struct buf *shown,
			     struct buf *err)
{
	const char *end = auth + strcspn(auth, "/"), *at, *h;
	struct buf disp = BUF_INIT;     /* shown, once parsed */
	int rc;

	if (*end == '/' && end[1] && strcmp(end + 1, "0")) {
		buf_printf(err, "bad l2 URL '%s': a cluster has database 0 alone", shown->data);
		return -1;
	}
	rc = parse_auth(l2, auth, end, &at, shown->data, err);
	if (rc == -1)
		return -1;
	if (rc < 0)
		goto bad;
	l2->cluster = 1;
	h = at ? at + 1 : auth;
	if (h == end || end[-1] == ',')
		goto bad;
	buf_puts(&disp, "redis-cluster://");
	while (h < end) {
		const char *he = h + strcspn(h, ","), *colon, *hend, *host = h;
		struct cluster_addr *a;
		char name[NI_MAXHOST];
		long port = 6379;

		if (he > end)
			he = end;
		if (l2->nseeds == L2_SEEDS_MAX) {
			buf_printf(err, "bad l2 URL '%s': more than %d seeds", shown->data, L2_SEEDS_MAX);
			goto fail;
		}
		if (split_host(&host, he, &hend, &colon) < 0)
			goto bad;
		if (hend == host || (size_t)(hend - host) >= sizeof name ||
		    (colon && cluster_decimal(colon + 1, he, 65535, &port) < 0) || port == 0)
			goto bad;
		memcpy(name, host, (size_t)(hend - host));
		name[hend - host] = '\0';
		a = &l2->seeds[l2->nseeds++];
		if (cluster_numeric_host(name)) {
			if (strlen(name) >= sizeof a->host)
				goto bad;
			snprintf(a->host, sizeof a->host, "%s", name);
		} else {
			char num[NI_MAXHOST];
			if (resolve_numeric(name, num, sizeof num, err) < 0)
				goto fail;
			if (strlen(num) >= sizeof a->host)
				goto bad;
			snprintf(a->host, sizeof a->host, "%s", num);
		}
		a->port = (int)port;
		buf_printf(&disp, "%s%s:%d", l2->nseeds > 1 ? "," : "", name, a->port);
		h = he < end ? he + 1 : he;
	}
	if (!disp.data) {
		buf_printf(err, "out of memory");
		goto fail;
	}
	buf_reset(shown);
	buf_puts(shown, disp.data);
	buf_free(&disp);
	if (at)
		shown_with_user(shown, auth, at);
	return 0;
bad:
	buf_printf(err, "bad l2 URL '%s': expected "
		   "redis-cluster://[user:password@]host[:port][,host[:port]...]", shown->data);
fail:
	buf_free(&disp);
	return -1;
}

/* Fill where to connect from url. A host name is resolved here, blocking
 * (at start, and on a reload that names a new one), unless known holds the
 * same name already resolved: then its address is taken, and the name is
 * resolved again in the background at the next connect. */
static int parse_url(struct l2_conf *l2, const char *url, const struct l2_conf *known,
		     struct buf *err)
{
	struct buf shown = BUF_INIT;
	const char *auth, *end, *at = NULL, *host, *hend, *colon;
	long port = 6379, db = 0;
	struct sockaddr_un sa;
	int rc = -1;

	if (!url || !*url) {
		buf_printf(err, "l2 needs a URL: redis://host:port/db or a Unix socket path");
		return -1;
	}
	l2_url_redacted(url, &shown);
	if (url[0] == '/' || !strncmp(url, "unix:", 5)) {
		const char *path = url[0] == '/' ? url : !strncmp(url, "unix://", 7) ? url + 7 : url + 5;
		if (!*path || strlen(path) >= sizeof sa.sun_path) {
			buf_printf(err, "bad l2 socket path '%s'", path);
			goto out;
		}
		if (!(l2->path = strdup(path)))
			goto oom;
		buf_reset(&shown);
		buf_printf(&shown, "unix:%s", path);
		rc = 0;
		goto out;
	}
	if (!strncmp(url, "redis-cluster://", 16)) {
		rc = parse_cluster_url(l2, url + 16, &shown, err);
		goto out;
	}
	if (strncmp(url, "redis://", 8)) {
		buf_printf(err, "bad l2 URL '%s': expected redis://host:port/db, "
			   "redis-cluster://host:port,host:port... or a Unix socket path",
			   shown.data);
		goto out;
	}
	auth = url + 8;
	end = auth + strcspn(auth, "/");
	switch (parse_auth(l2, auth, end, &at, shown.data, err)) {
	case -1:
		goto out;
	case -2:
		goto badurl;
	}
	host = at ? at + 1 : auth;
	if (split_host(&host, end, &hend, &colon) < 0)
		goto badurl;
	if (hend == host || (size_t)(hend - host) >= sizeof l2->host)
		goto badurl;
	if (colon && cluster_decimal(colon + 1, end, 65535, &port) < 0)
		goto badurl;
	if (port == 0)
		goto badurl;
	if (*end == '/' && end[1] &&
	    cluster_decimal(end + 1, end + strlen(end), 1L << 30, &db) < 0)
		goto badurl;
	l2->port = (int)port;
	l2->db = (int)db;

	/* hiredis 0.14 resolves on every connect, blocking: resolve here and
	 * hand it the numeric address. IPv4 first, as hiredis would. */
	{
		char name[NI_MAXHOST];
		unsigned char bin[sizeof(struct in6_addr)];

		memcpy(name, host, (size_t)(hend - host));
		name[hend - host] = '\0';
		if (inet_pton(AF_INET, name, bin) != 1 && inet_pton(AF_INET6, name, bin) != 1 &&
		    !(l2->name = strdup(name)))
			goto oom;
		if (l2->name && known && known->name && !strcmp(known->name, name)) {
			snprintf(l2->host, sizeof l2->host, "%s", known->host);
			buf_reset(&shown);
			buf_printf(&shown, "redis://%s:%d/%d", name, l2->port, l2->db);
			rc = 0;
			goto out;
		}
		if (resolve_numeric(name, l2->host, sizeof l2->host, err) < 0)
			goto out;
		buf_reset(&shown);
		buf_printf(&shown, "redis://%s:%d/%d", name, l2->port, l2->db);
	}
	rc = 0;
	goto out;
badurl:
	buf_printf(err, "bad l2 URL '%s': expected redis://[user:password@]host[:port][/db]",
		   shown.data);
	goto out;
oom:
	buf_printf(err, "out of memory");
out:
	if (rc == 0 && at && shown.data)
		shown_with_user(&shown, auth, at);
	if (rc == 0 && !(l2->where = buf_detach(&shown, NULL))) {
		buf_printf(err, "out of memory");
		rc = -1;
	}
	buf_free(&shown);
	return rc;
}
