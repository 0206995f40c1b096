/* SPDX-License-Identifier: Apache-2.0 */
/*
 * relocdrive: daemon/cubin_debug.c and cubin_debug_elf.c on their own
 * against cubins of the real ptxas, for tests/test_reloc.py's oracle.
 *
 *   relocdrive BASE.ptx BASE.src BASE.cubin [PTX SRC CUBIN]...
 *
 * Each .src holds the stamps as the ptxas front sends them ("PATH\tMTIME:
 * SIZE\n" or "PATH\t-\n" a line). BASE's cubin is laid out for its
 * canonical view, as the daemon stores it; each further PTX is scanned as
 * the daemon scans a request and, where its key is BASE's, the stored
 * cubin is laid out for it, as the daemon answers it. One line a request:
 * "identical" (the same bytes as its CUBIN, which ptxas wrote for it),
 * "differs" (the result is left in CUBIN.got), "other-key", "not-portable",
 * "unmodelled: WHY" or "error: WHY". Exit status 0 when all ran, 2 when
 * BASE is not portable or does not lay out.
 *
 *   relocdrive --shape PTX SRC   writes what the key hashes: the layout,
 *                                a newline, then the shape
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cubin_debug.h"
#include "proto/buf.h"

static int slurp(const char *path, struct buf *b)
{
	FILE *f = fopen(path, "rb");
	char tmp[65536];
	size_t n;

	if (!f)
		return -1;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		if (buf_append(b, tmp, n) < 0) {
			fclose(f);
			return -1;
		}
	fclose(f);
	return buf_append(b, "", 1) < 0 ? -1 : (int)(b->len--, 0);
}

static int spill(const char *path, const struct buf *b)
{
	FILE *f = fopen(path, "wb");
	int ok = f && fwrite(b->data, 1, b->len, f) == b->len;

	if (f && fclose(f))
		ok = 0;
	return ok ? 0 : -1;
}

/* A request's PTX and stamps, scanned: 1 portable, 0 not, -1 error. */
static int scan(const char *ptx, const char *src, struct buf *p, struct buf *s,
		struct dbg_scan *ds)
{
	if (slurp(ptx, p) < 0 || slurp(src, s) < 0) {
		fprintf(stderr, "relocdrive: cannot read %s or %s\n", ptx, src);
		return -1;
	}
	return dbg_scan(p->data, p->len, s->data, ds);
}

/* Every exit frees what it read (a sanitized build checks for leaks). */
static struct buf p = BUF_INIT, s = BUF_INIT, c = BUF_INIT, stored = BUF_INIT;
static struct dbg_scan base;

static int finish(int rc)
{
	dbg_scan_free(&base);
	buf_free(&p);
	buf_free(&s);
	buf_free(&c);
	buf_free(&stored);
	return rc;
}

int main(int argc, char **argv)
{
	const char *why = "";

	if (argc == 4 && !strcmp(argv[1], "--shape")) {
		if (scan(argv[2], argv[3], &p, &s, &base) != 1)
			return finish(2);
		fwrite(base.layout.data, 1, base.layout.len, stdout);
		fputc('\n', stdout);
		fwrite(base.shape.data, 1, base.shape.len, stdout);
		return finish(0);
	}
	if (argc < 4 || (argc - 4) % 3) {
		fprintf(stderr, "usage: relocdrive BASE.ptx BASE.src BASE.cubin [PTX SRC CUBIN]...\n");
		return 1;
	}
	if (scan(argv[1], argv[2], &p, &s, &base) != 1) {
		printf("base: not-portable\n");
		return finish(2);
	}
	if (slurp(argv[3], &c) < 0)
		return finish(1);
	int r = dbg_rewrite(c.data, c.len, &base.view, &base.canon, &stored, &why);
	if (r) {
		printf("base: %s: %s\n", r == DBG_UNMODELLED ? "unmodelled" : "error", why);
		return finish(2);
	}
	for (int i = 4; i < argc; i += 3) {
		struct buf vp = BUF_INIT, vs = BUF_INIT, vc = BUF_INIT, got = BUF_INIT;
		struct dbg_scan v = { 0 };
		int k = scan(argv[i], argv[i + 1], &vp, &vs, &v);
		if (k < 0)
			return 1;
		if (k == 0) {
			printf("not-portable\n");
		} else if (v.shape.len != base.shape.len ||
			   memcmp(v.shape.data, base.shape.data, v.shape.len) ||
			   v.layout.len != base.layout.len ||
			   memcmp(v.layout.data, base.layout.data, v.layout.len) ||
			   !dbg_view_equal(&v.canon, &base.canon)) {
			printf("other-key\n");
		} else if ((r = dbg_rewrite(stored.data, stored.len, &v.canon, &v.view, &got,
					    &why)) != 0) {
			printf("%s: %s\n", r == DBG_UNMODELLED ? "unmodelled" : "error", why);
		} else {
			char out[4200];
			if (slurp(argv[i + 2], &vc) < 0)
				return 1;
			int same = got.len == vc.len && !memcmp(got.data, vc.data, got.len);
			snprintf(out, sizeof out, "%s.got", argv[i + 2]);
			if (!same && spill(out, &got) < 0)
				return 1;
			printf("%s\n", same ? "identical" : "differs");
		}
		fflush(stdout);
		dbg_scan_free(&v);
		buf_free(&vp);
		buf_free(&vs);
		buf_free(&vc);
		buf_free(&got);
	}
	return finish(0);
}
