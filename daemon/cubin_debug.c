/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin_debug: portable keys for -lineinfo cubins, exact bytes restored.
 *
 * Why: Triton and Inductor write the path of a generated source file into
 * their PTX (`.file 1 "<cache dir>/xx/cxx....py"`, and the directory and
 * file name again as DWARF byte lists in .debug_info), and ptxas copies
 * that file's directory, name, mtime and size into the cubin. Every fresh
 * cache directory, user or node therefore sent PTX the cache had never
 * seen, for a cubin that differs from a cached one in a few header bytes.
 *
 * What ptxas does (CUDA 13.0, measured, and proved again on every run of
 * tests/test_lineinfo.py against the real ptxas):
 *  - The paths and stamps reach the cubin only through the header of the
 *    line program in .debug_line: include_directories (the distinct
 *    directories, in .file index order of first use) and file_names (every
 *    .file in index order, used or not: name, directory number, ULEB128
 *    mtime, ULEB128 size). The .debug_info byte lists are not copied; only
 *    their line count shows (in .nv_debug_ptx_txt), and that is in the key.
 *  - `.file N "PATH", MTIME, SIZE` gives the same bytes as ptxas reading
 *    the file; a missing file is recorded as 0, 0.
 *  - A path or stamp of another length moves everything after it (header
 *    length, relocation offsets, section offsets): such a request gets a
 *    key of its own (the layout is a key component), never a patched
 *    layout.
 *  - Not portable, so keyed on their bytes as before: full debug info
 *    (`.target sm_XX, debug`: ptxas then copies .debug_info, paths and
 *    all; dbg_scan() refuses it and dbg_rewrite() refuses any cubin with
 *    .debug_info), and relocatable output (-c and its kin: the section
 *    .nv_debug_ptx_txt.<hash> is named after a hash that follows the
 *    paths; cubin_req.c keeps those requests exact).
 *
 * How: dbg_scan() takes the paths out of the PTX (the `.file` strings,
 * the .debug_info/.debug_str byte runs that spell a directory, name or
 * path of a .file, and the comments of `.loc` lines, which ptxas ignores)
 * and describes their layout; the daemon keys on that. The first compile
 * runs the client's own PTX with its stamps written in (dbg_stamp_ptx());
 * dbg_rewrite() checks that the header is exactly what this model predicts
 * for that client and swaps in the canonical view, which is what is
 * stored; every answer is the canonical cubin with the asking client's
 * view swapped in. The model is checked against ptxas's own output on
 * every store, and against the stored bytes on every hit.
 *
 * Never: search a cubin for byte patterns (the ELF section table and the
 * DWARF header are parsed), read past any length a client or a cubin
 * gives, or answer when a check fails (the caller misses instead).
 */
#include "daemon/cubin_debug.h"

#include <stdlib.h>
#include <string.h>

/* More .file directives than this and the request is simply not portable. */
#define DBG_MAX_FILES 4096
#define DBG_MAX_PATH 4096

/* ---- PTX ------------------------------------------------------------- */

static int is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* A `.file N "PATH"` line (line[0..n), no newline), nothing after the
 * closing quote but blanks. Returns 1 with its parts, 0 if the line is no
 * .file directive, -1 if it is one this file does not take apart
 * (explicit stamps, DWARF 5's directory form, escapes, anything else). */
static int parse_file_line(const char *line, size_t n, unsigned *idx,
			   const char **path, size_t *plen, size_t *close_at)
{
	size_t i = 0;

	while (i < n && is_ws(line[i]))
		i++;
	if (n - i < 6 || memcmp(line + i, ".file", 5) || !is_ws(line[i + 5]))
		return 0;
	i += 5;
	while (i < n && is_ws(line[i]))
		i++;
	unsigned long v = 0;
	size_t d0 = i;
	while (i < n && line[i] >= '0' && line[i] <= '9' && i - d0 < 9)
		v = v * 10 + (unsigned long)(line[i++] - '0');
	if (i == d0 || i >= n || !is_ws(line[i]))
		return -1;
	while (i < n && is_ws(line[i]))
		i++;
	if (i >= n || line[i] != '"')
		return -1;
	size_t p0 = ++i;
	while (i < n && line[i] != '"' && line[i] != '\\')
		i++;
	if (i >= n || line[i] != '"')
		return -1;
	*close_at = i;
	*path = line + p0;
	*plen = i - p0;
	for (i++; i < n; i++)
		if (!is_ws(line[i]))
			return -1;
	*idx = (unsigned)v;
	return 1;
}

/* Whether line[0..n) is a `.loc` directive; if so *cut is where its
 * trailing `//` comment starts (n if none). Only plain tokens may precede
 * the comment, so that `//` cannot be inside anything else. */
static int loc_comment(const char *line, size_t n, size_t *cut)
{
	size_t i = 0;

	while (i < n && is_ws(line[i]))
		i++;
	if (n - i < 5 || memcmp(line + i, ".loc", 4) || !is_ws(line[i + 4]))
		return 0;
	for (i += 4; i < n; i++) {
		char c = line[i];
		if (c == '/' && i + 1 < n && line[i + 1] == '/') {
			*cut = i;
			return 1;
		}
		if (!(is_ws(c) || c == ',' || c == '.' || c == '_' || c == '$' ||
		      (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
		      (c >= 'A' && c <= 'Z')))
			return 0;
	}
	*cut = n;
	return 1;
}

/* `.b8 N` with one decimal byte value (blanks and a comment may follow).
 * Returns 1 with the value and where its digits are. */
static int parse_b8(const char *line, size_t n, unsigned *val, size_t *d0, size_t *d1)
{
	size_t i = 0;
	unsigned v = 0;

	while (i < n && is_ws(line[i]))
		i++;
	if (n - i < 5 || memcmp(line + i, ".b8", 3) || !is_ws(line[i + 3]))
		return 0;
	i += 3;
	while (i < n && is_ws(line[i]))
		i++;
	*d0 = i;
	while (i < n && line[i] >= '0' && line[i] <= '9' && i - *d0 < 4)
		v = v * 10 + (unsigned)(line[i++] - '0');
	if (i == *d0 || v > 255)
		return 0;
	*d1 = i;
	while (i < n && is_ws(line[i]))
		i++;
	if (i < n && !(n - i >= 2 && line[i] == '/' && line[i + 1] == '/'))
		return 0;
	*val = v;
	return 1;
}

/* A `.target` line asking for full debug info (`, debug`): ptxas then
 * copies .debug_info, paths and all, into the cubin. 1 if so. */
static int target_debug(const char *line, size_t n)
{
	size_t i = 0;

	while (i < n && is_ws(line[i]))
		i++;
	if (n - i < 8 || memcmp(line + i, ".target", 7) || !is_ws(line[i + 7]))
		return 0;
	for (i += 7; i + 5 <= n; i++)
		if (!memcmp(line + i, "debug", 5))
			return 1;
	return 0;
}

/* `.section NAME` where NAME is .debug_info or .debug_str: 1; another
 * section: 0; no section directive: -1. */
static int debug_section(const char *line, size_t n)
{
	size_t i = 0;

	while (i < n && is_ws(line[i]))
		i++;
	if (n - i < 9 || memcmp(line + i, ".section", 8) || !is_ws(line[i + 8]))
		return -1;
	i += 8;
	while (i < n && is_ws(line[i]))
		i++;
	size_t s = i;
	while (i < n && !is_ws(line[i]) && line[i] != '{')
		i++;
	return (i - s == 11 && !memcmp(line + s, ".debug_info", 11)) ||
	       (i - s == 10 && !memcmp(line + s, ".debug_str", 10));
}

static int uleb_len(uint64_t v)
{
	int n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static int put_uleb(struct buf *b, uint64_t v)
{
	unsigned char tmp[10];
	int n = 0;
	do {
		unsigned char c = v & 0x7f;
		v >>= 7;
		tmp[n++] = c | (v ? 0x80 : 0);
	} while (v);
	return buf_append(b, tmp, (size_t)n);
}

void dbg_view_free(struct dbg_view *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++)
		free(v->f[i].path);
	free(v->f);
	v->f = NULL;
	v->n = 0;
}

void dbg_scan_free(struct dbg_scan *s)
{
	if (!s)
		return;
	buf_free(&s->shape);
	buf_free(&s->loose);
	buf_free(&s->layout);
	dbg_view_free(&s->view);
	dbg_view_free(&s->canon);
}

/* The stamp line of path in sources: 1 with mtime and size, 0 if there is
 * none or it is malformed. "-" (cannot be read) is 0, 0, as ptxas writes. */
static int find_stamp(const char *sources, const char *path, size_t plen,
		      uint64_t *mtime, uint64_t *size)
{
	const char *p = sources;

	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		if (n > plen && p[plen] == '\t' && !memcmp(p, path, plen)) {
			const char *s = p + plen + 1, *e = p + n;
			if (e - s == 1 && *s == '-') {
				*mtime = *size = 0;
				return 1;
			}
			uint64_t v[2] = { 0, 0 };
			for (int k = 0; k < 2; k++) {
				const char *d0 = s;
				while (s < e && *s >= '0' && *s <= '9' && s - d0 < 18)
					v[k] = v[k] * 10 + (uint64_t)(*s++ - '0');
				if (s == d0 || (k == 0 ? (s >= e || *s != ':') : s != e))
					return 0;
				s++;
			}
			*mtime = v[0];
			*size = v[1];
			return 1;
		}
		p += n + (nl != NULL);
	}
	return 0;
}

static int by_index(const void *a, const void *b)
{
	const struct dbg_file *x = a, *y = b;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* Number the distinct directories in index order, as ptxas does. */
static void assign_groups(struct dbg_view *v)
{
	unsigned next = 0;

	for (size_t i = 0; i < v->n; i++) {
		v->f[i].group = next;
		for (size_t j = 0; j < i; j++) {
			if (v->f[j].dir_len == v->f[i].dir_len &&
			    !memcmp(v->f[j].path, v->f[i].path, v->f[i].dir_len)) {
				v->f[i].group = v->f[j].group;
				break;
			}
		}
		if (v->f[i].group == next)
			next++;
	}
}

/* Pass one: the .file directives and their stamps. 1, 0 (not portable), -1. */
static int collect_files(const char *ptx, size_t len, const char *sources,
			 struct dbg_view *v)
{
	const char *p = ptx, *end = ptx + len;
	size_t cap = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		unsigned idx;
		const char *path;
		size_t plen, close_at;
		int r = parse_file_line(p, n, &idx, &path, &plen, &close_at);
		if (r < 0 || target_debug(p, n))
			return 0;
		if (r == 1) {
			const char *slash = plen ? memrchr(path, '/', plen) : NULL;
			if (!plen || plen >= DBG_MAX_PATH || path[0] != '/' || !slash ||
			    slash == path || slash == path + plen - 1 || memchr(path, '\0', plen) ||
			    v->n >= DBG_MAX_FILES)
				return 0;
			if (v->n == cap) {
				size_t nc = cap ? cap * 2 : 8;
				struct dbg_file *nf = realloc(v->f, nc * sizeof *nf);
				if (!nf)
					return -1;
				v->f = nf;
				cap = nc;
			}
			struct dbg_file *f = &v->f[v->n];
			memset(f, 0, sizeof *f);
			if (!(f->path = strndup(path, plen)))
				return -1;
			v->n++;
			f->index = idx;
			f->dir_len = (size_t)(slash - path);
			if (!find_stamp(sources, path, plen, &f->mtime, &f->size))
				return 0;
		}
		p = nl ? nl + 1 : end;
	}
	if (!v->n)
		return 0;
	qsort(v->f, v->n, sizeof *v->f, by_index);
	for (size_t i = 1; i < v->n; i++)
		if (v->f[i].index == v->f[i - 1].index)
			return 0;
	for (size_t i = 0; i < v->n; i++)
		for (size_t j = 0; j < i; j++)
			if (!strcmp(v->f[i].path, v->f[j].path))
				return 0;
	assign_groups(v);
	return 1;
}

/* Which component of which file the string s[0..n) spells, if any:
 * 'D' directory, 'N' name, 'P' whole path; *fi the file's position. */
static char match_component(const struct dbg_view *v, const unsigned char *s,
			    size_t n, size_t *fi)
{
	for (size_t i = 0; i < v->n; i++) {
		const struct dbg_file *f = &v->f[i];
		size_t pl = strlen(f->path);
		*fi = i;
		if (n == pl && !memcmp(s, f->path, n))
			return 'P';
		if (n == f->dir_len && !memcmp(s, f->path, n))
			return 'D';
		if (n == pl - f->dir_len - 1 && !memcmp(s, f->path + f->dir_len + 1, n))
			return 'N';
	}
	return 0;
}

int dbg_scan(const char *ptx, size_t len, const char *sources, struct dbg_scan *out)
{
	int r;

	if (!ptx || !len || memchr(ptx, '\0', len))
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)ptx[i] < 0x09)
			return 0;       /* the shape's markers must be unambiguous */
	r = collect_files(ptx, len, sources, &out->view);
	if (r <= 0) {
		dbg_scan_free(out);
		return r;
	}

	/* Pass two: the shape and the loose shape. */
	const char *p = ptx, *end = ptx + len;
	int in_dbg = 0;
	unsigned char *run = malloc(DBG_MAX_PATH);
	if (!run)
		goto oom;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		const char *next = nl ? nl + 1 : end;
		unsigned idx, val;
		const char *path;
		size_t plen, close_at, cut, d0, d1;
		int sec = debug_section(p, n);

		if (sec >= 0) {
			in_dbg = sec;
		} else if (in_dbg && memchr(p, '}', n)) {
			in_dbg = 0;
		} else if (parse_file_line(p, n, &idx, &path, &plen, &close_at) == 1) {
			size_t open_at = (size_t)(path - p);
			if (buf_append(&out->shape, p, open_at) < 0 ||
			    buf_puts(&out->shape, "\x01") < 0 ||
			    buf_append(&out->loose, p, open_at) < 0 ||
			    buf_puts(&out->loose, "\x01\n") < 0 ||
			    buf_append(&out->shape, p + close_at, (size_t)(next - p) - close_at) < 0)
				goto oom;
			p = next;
			continue;
		} else if (loc_comment(p, n, &cut)) {
			if (buf_append(&out->shape, p, cut) < 0 || buf_puts(&out->shape, "\n") < 0 ||
			    buf_append(&out->loose, p, cut) < 0 || buf_puts(&out->loose, "\n") < 0)
				goto oom;
			p = next;
			continue;
		} else if (in_dbg && parse_b8(p, n, &val, &d0, &d1) && val) {
			/* A run of non-zero bytes ended by `.b8 0`: a C string. */
			const char *q = p;
			size_t k = 0;
			int whole = 0;
			while (q < end && k < DBG_MAX_PATH) {
				const char *qn = memchr(q, '\n', (size_t)(end - q));
				size_t m = qn ? (size_t)(qn - q) : (size_t)(end - q);
				unsigned c;
				size_t e0, e1;
				if (!parse_b8(q, m, &c, &e0, &e1))
					break;
				if (!c) {
					whole = 1;
					break;
				}
				run[k++] = (unsigned char)c;
				q = qn ? qn + 1 : end;
			}
			size_t fi;
			char kind = whole ? match_component(&out->view, run, k, &fi) : 0;
			if (kind) {
				/* Each byte's line loses its value (and the blanks
				 * that pad its comment); which byte of what it was
				 * is in the marker and the position. */
				for (size_t b = 0; b < k; b++) {
					const char *qn = memchr(p, '\n', (size_t)(end - p));
					size_t m = qn ? (size_t)(qn - p) : (size_t)(end - p);
					const char *cm = NULL;
					parse_b8(p, m, &val, &d0, &d1);
					for (size_t t = d1; t + 1 < m; t++)
						if (p[t] == '/' && p[t + 1] == '/') {
							cm = p + t;
							break;
						}
					if (buf_append(&out->shape, p, d0) < 0 ||
					    buf_printf(&out->shape, "\x01%c%zu", kind, fi) < 0 ||
					    (cm && buf_append(&out->shape, cm, (size_t)(p + m - cm)) < 0) ||
					    buf_puts(&out->shape, "\n") < 0)
						goto oom;
					p = qn ? qn + 1 : end;
				}
				continue;
			}
		}
		if (buf_append(&out->shape, p, (size_t)(next - p)) < 0 ||
		    (!in_dbg && buf_append(&out->loose, p, (size_t)(next - p)) < 0))
			goto oom;
		p = next;
	}
	free(run);
	run = NULL;
	for (size_t i = 0; i < out->view.n; i++) {
		const struct dbg_file *f = &out->view.f[i];
		if (buf_printf(&out->layout, "%u:%zu:%zu:%u:%d:%d;", f->index, f->dir_len,
			       strlen(f->path) - f->dir_len - 1, f->group,
			       uleb_len(f->mtime), uleb_len(f->size)) < 0)
			goto oom;
	}
	if (!out->shape.data || !out->loose.data)
		goto oom;
	if (dbg_view_canonical(&out->view, &out->canon) < 0) {
		dbg_scan_free(out);
		return 0;       /* out of memory is taken as "not portable" too */
	}
	return 1;
oom:
	free(run);
	dbg_scan_free(out);
	return -1;
}

int dbg_stamp_ptx(const char *ptx, size_t len, const struct dbg_view *v, struct buf *out)
{
	const char *p = ptx, *end = ptx + len;
	size_t seen = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		const char *next = nl ? nl + 1 : end;
		unsigned idx;
		const char *path;
		size_t plen, close_at;
		if (parse_file_line(p, n, &idx, &path, &plen, &close_at) == 1) {
			const struct dbg_file *f = NULL;
			for (size_t i = 0; i < v->n; i++)
				if (v->f[i].index == idx)
					f = &v->f[i];
			if (!f || strlen(f->path) != plen || memcmp(f->path, path, plen))
				return -1;
			if (buf_append(out, p, close_at + 1) < 0 ||
			    buf_printf(out, ", %llu, %llu", (unsigned long long)f->mtime,
				       (unsigned long long)f->size) < 0 ||
			    buf_append(out, p + close_at + 1, (size_t)(next - p) - close_at - 1) < 0)
				return -1;
			seen++;
		} else if (buf_append(out, p, (size_t)(next - p)) < 0) {
			return -1;
		}
		p = next;
	}
	return seen == v->n ? 0 : -1;
}

/* ---- views ------------------------------------------------------------ */

int dbg_view_copy(const struct dbg_view *v, struct dbg_view *out)
{
	out->n = 0;
	out->f = calloc(v->n ? v->n : 1, sizeof *out->f);
	if (!out->f)
		return -1;
	for (size_t i = 0; i < v->n; i++) {
		out->f[i] = v->f[i];
		if (!(out->f[i].path = strdup(v->f[i].path))) {
			dbg_view_free(out);
			return -1;
		}
		out->n++;
	}
	return 0;
}

int dbg_view_equal(const struct dbg_view *a, const struct dbg_view *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->f[i].index != b->f[i].index || a->f[i].mtime != b->f[i].mtime ||
		    a->f[i].size != b->f[i].size || strcmp(a->f[i].path, b->f[i].path))
			return 0;
	return 1;
}

static uint64_t smallest_of_len(int n)
{
	return n <= 1 ? 0 : (uint64_t)1 << (7 * (n - 1));
}

int dbg_view_canonical(const struct dbg_view *v, struct dbg_view *out)
{
	if (dbg_view_copy(v, out) < 0)
		return -1;
	for (size_t i = 0; i < out->n; i++) {
		struct dbg_file *f = &out->f[i];
		size_t pl = strlen(f->path), d = f->dir_len;
		/* Directory: 'd' bytes ending in the group number in base 26,
		 * so that distinct directories stay distinct. */
		memset(f->path, 'd', d);
		unsigned g = f->group;
		for (size_t k = d; g && k > 0; k--, g /= 26)
			f->path[k - 1] = (char)('A' + g % 26);
		if (g)
			goto fail;
		f->path[d] = '/';
		memset(f->path + d + 1, 'n', pl - d - 1);
		f->mtime = smallest_of_len(uleb_len(f->mtime));
		f->size = smallest_of_len(uleb_len(f->size));
	}
	for (size_t i = 0; i < out->n; i++)
		for (size_t j = 0; j < i; j++)
			if (!strcmp(out->f[i].path, out->f[j].path))
				goto fail;      /* two names alike: ambiguous */
	return 0;
fail:
	dbg_view_free(out);
	return -1;
}

/* ---- the cubin -------------------------------------------------------- */

static uint16_t rd16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Find the one .debug_line section. 1 with its offset and size, 0 if the
 * cubin has none, -1 if the ELF is not one we read. */
static int find_debug_line(const unsigned char *d, size_t n, size_t *off,
			   size_t *size, const char **why)
{
	static const char name[] = ".debug_line";

	*why = "not a 64-bit little-endian ELF";
	if (n < 64 || memcmp(d, "\x7f" "ELF", 4) || d[4] != 2 || d[5] != 1)
		return -1;
	uint64_t shoff = rd64(d + 0x28);
	unsigned shentsize = rd16(d + 0x3a), shnum = rd16(d + 0x3c), shstrndx = rd16(d + 0x3e);
	*why = "bad ELF section table";
	if (shentsize != 64 || shnum == 0 || shstrndx >= shnum || shoff > n ||
	    (uint64_t)shnum * 64 > n - shoff)
		return -1;
	const unsigned char *strh = d + shoff + (size_t)shstrndx * 64;
	uint64_t so = rd64(strh + 0x18), ss = rd64(strh + 0x20);
	if (rd32(strh + 4) != 3 || so > n || ss > n - so)
		return -1;
	int found = 0;
	for (unsigned i = 0; i < shnum; i++) {
		const unsigned char *sh = d + shoff + (size_t)i * 64;
		uint32_t nm = rd32(sh);
		if (nm >= ss || !memchr(d + so + nm, 0, ss - nm)) {
			*why = "bad ELF section name";
			return -1;
		}
		const char *sn = (const char *)d + so + nm;
		if (!strcmp(sn, ".debug_info") || !strcmp(sn, ".debug_str")) {
			/* Full debug info names the paths again, in places this
			 * file does not rewrite. */
			*why = "the cubin carries .debug_info";
			return -1;
		}
		if (strcmp(sn, name))
			continue;
		uint64_t o = rd64(sh + 0x18), z = rd64(sh + 0x20);
		*why = "bad .debug_line section";
		if (found++ || rd32(sh + 4) != 1 || o > n || z > n - o)
			return -1;
		*off = (size_t)o;
		*size = (size_t)z;
	}
	return found;
}

static int read_uleb(const unsigned char *p, size_t n, size_t *i, uint64_t *v)
{
	*v = 0;
	for (int s = 0; s < 64 && *i < n; s += 7) {
		unsigned char c = p[(*i)++];
		*v |= (uint64_t)(c & 0x7f) << s;
		if (!(c & 0x80))
			return 0;
	}
	return -1;
}

/* Where the include_directories and file_names of the line program's
 * header lie within sec[0..n): [*a, *b). 0, or -1 with why. */
static int header_tables(const unsigned char *sec, size_t n, size_t *a, size_t *b,
			 const char **why)
{
	*why = "unexpected .debug_line header";
	if (n < 4)
		return -1;
	uint32_t unit = rd32(sec);
	if (unit >= 0xfffffff0u || unit != n - 4)
		return -1;      /* 64-bit DWARF, or more than one unit */
	if (n < 10)
		return -1;
	unsigned ver = rd16(sec + 4);
	uint32_t hl = rd32(sec + 6);
	if (ver < 2 || ver > 4 || hl > n - 10)
		return -1;
	size_t end = 10 + (size_t)hl, i = 10;
	i += ver >= 4 ? 5 : 4;  /* min_inst_length, [max_ops], default_is_stmt,
	                           line_base, line_range */
	if (i >= end)
		return -1;
	unsigned opcode_base = sec[i++];
	if (!opcode_base || i + opcode_base - 1 > end)
		return -1;
	i += opcode_base - 1;
	*a = i;
	while (i < end && sec[i]) {     /* include_directories */
		const unsigned char *z = memchr(sec + i, 0, end - i);
		if (!z)
			return -1;
		i = (size_t)(z - sec) + 1;
	}
	if (i++ >= end)
		return -1;
	while (i < end && sec[i]) {     /* file_names */
		const unsigned char *z = memchr(sec + i, 0, end - i);
		uint64_t v;
		if (!z)
			return -1;
		i = (size_t)(z - sec) + 1;
		for (int k = 0; k < 3; k++)
			if (read_uleb(sec, end, &i, &v) < 0)
				return -1;
	}
	if (i >= end || i + 1 != end)
		return -1;      /* the program must start right after */
	*b = end;
	return 0;
}

/* The include_directories and file_names ptxas writes for v. */
static int model(const struct dbg_view *v, struct buf *out)
{
	unsigned groups = 0;

	for (size_t i = 0; i < v->n; i++) {
		if (v->f[i].group == groups) {
			if (buf_append(out, v->f[i].path, v->f[i].dir_len) < 0 ||
			    buf_append(out, "", 1) < 0)
				return -1;
			groups++;
		} else if (v->f[i].group > groups) {
			return -1;
		}
	}
	if (buf_append(out, "", 1) < 0)
		return -1;
	for (size_t i = 0; i < v->n; i++) {
		const struct dbg_file *f = &v->f[i];
		if (buf_puts(out, f->path + f->dir_len + 1) < 0 || buf_append(out, "", 1) < 0 ||
		    put_uleb(out, (uint64_t)f->group + 1) < 0 || put_uleb(out, f->mtime) < 0 ||
		    put_uleb(out, f->size) < 0)
			return -1;
	}
	return buf_append(out, "", 1);
}

int dbg_rewrite(const void *cubin, size_t n, const struct dbg_view *from,
		const struct dbg_view *to, struct buf *out, const char **why)
{
	const unsigned char *d = cubin;
	struct buf want = BUF_INIT, put = BUF_INIT;
	size_t off = 0, size = 0, a, b;
	int rc = -1;

	int r = find_debug_line(d, n, &off, &size, why);
	if (r < 0)
		return -1;
	if (r == 0)
		return buf_append(out, cubin, n);
	if (header_tables(d + off, size, &a, &b, why) < 0)
		goto out;
	*why = "out of memory";
	if (model(from, &want) < 0 || model(to, &put) < 0)
		goto out;
	*why = "the line table names other files than the key says";
	if (want.len != b - a || memcmp(want.data, d + off + a, want.len))
		goto out;
	*why = "the files' layout differs";
	if (put.len != want.len)
		goto out;
	*why = "out of memory";
	size_t base = out->len;
	if (buf_append(out, cubin, n) < 0)
		goto out;
	memcpy(out->data + base + off + a, put.data, put.len);
	rc = 0;
out:
	buf_free(&want);
	buf_free(&put);
	return rc;
}
