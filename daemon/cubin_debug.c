/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin_debug: portable keys for -lineinfo cubins, each client's cubin laid
 * out exactly as ptxas lays it out for that client.
 *
 * Why: Triton and Inductor write the path of a generated source file into
 * their PTX (`.file 1 "<cache dir>/xx/cxx....py"`, and the directory and
 * file name again as DWARF byte lists in .debug_info), and ptxas copies
 * that file's directory, name, mtime and size into the cubin. Every fresh
 * cache directory, user or node therefore sent PTX the cache had never
 * seen, for a cubin that differs from a cached one in a few header bytes
 * and, where the paths' lengths differ (`/tmp/torchinductor_alice` against
 * `/tmp/torchinductor_bob`), in where everything after them lies.
 *
 * What ptxas does (CUDA 13.0, measured, and proved again on every run of
 * tests/test_lineinfo.py and tests/test_reloc.py against the real ptxas):
 *  - The paths and stamps reach the cubin through the header of the line
 *    program in .debug_line: include_directories (the distinct
 *    directories, in .file index order of first use) and file_names (every
 *    .file in index order, used or not: name, directory number, ULEB128
 *    mtime, ULEB128 size). The header's unit_length and header_length
 *    follow; the line program after it is the same bytes, and its
 *    DW_LNE_set_address operands, relocated through .rela.debug_line, move
 *    with it.
 *  - .nv_debug_ptx_txt holds the PTX again, one NUL-terminated entry per
 *    line (comments and directives other than instructions and
 *    declarations left out: every line of a DWARF section's data is an
 *    empty entry). A DWARF byte list of another length is that many more
 *    or fewer empty entries; nothing else there moves (the DWARF sections
 *    come after the code, so no instruction changes its line).
 *  - The sections are laid out in file order from the ELF header on, each
 *    at the next multiple of its alignment (zeros between, NOBITS taking
 *    no room; a section of the offset and size of an earlier one names its
 *    bytes, sm_100's .nv.merc.* copies), then the section headers at the
 *    next multiple of 8, then the program headers. A program header starts
 *    where the sections at its offset go (or at the program headers), its
 *    file size ends where the sections ending its bytes (or the NOBITS
 *    starting there) go, and its memory size keeps what it adds to that
 *    (sm_80 has one over .nv.constant* and .text). Symbols and other
 *    relocations name section offsets, not file offsets; REL (sm_80) and
 *    RELA relocations into the line program move with it.
 *  - sm_100 on: a second line table, .nv.merc.debug_line, with the same
 *    header (and its .nv.merc.rela relocations), and .nv.merc.nv_debug_
 *    ptx_txt naming .nv_debug_ptx_txt's bytes. Both are laid out alike.
 *  - The .debug_info byte lists are not copied; only their line count
 *    shows (above), nor are the DWARF values their lengths decide (the
 *    unit's length, DIE offsets such as DW_AT_abstract_origin).
 *  - `.file N "PATH", MTIME, SIZE` gives the same bytes as ptxas reading
 *    the file, except that an MTIME of 0 makes ptxas read the file itself
 *    (so the assembler is given 1 instead, and the client gets its own 0
 *    written back); a missing file is recorded as 0, 0; ptxas keeps the
 *    low 32 bits of each stamp (stamps of 2^32 or more stay exact keys).
 *  - Not portable, so keyed on their bytes as before: full debug info
 *    (`.target sm_XX, debug`: ptxas then copies .debug_info, paths and
 *    all; dbg_scan() refuses it and dbg_rewrite() refuses any cubin with
 *    .debug_info), and relocatable output (-c and its kin: the section
 *    .nv_debug_ptx_txt.<hash> is named after a hash that follows the
 *    paths; cubin_req.c keeps those requests exact).
 *
 * How: dbg_scan() takes the paths out of the PTX (the `.file` strings,
 * the .debug_info/.debug_str byte runs that spell a directory, name or
 * path of a .file, each become one marker line), writes the DWARF values
 * their lengths decide as what they are (the unit length that spans the
 * section, a .b32 that is the offset of a later line: the line's number),
 * drops the comments ptxas ignores (`.loc` lines' and DWARF data lines'),
 * and records where the runs are; the daemon keys on that and on which
 * files share a directory, and nothing of any length. The first compile
 * runs the client's own PTX with its stamps written in (dbg_stamp_ptx());
 * dbg_rewrite() checks that the cubin is exactly what this model predicts
 * for that client and lays it out for the canonical view, which is what is
 * stored; every answer is the canonical cubin laid out for the asking
 * client. The model is checked against ptxas's own output on every store
 * and against the stored bytes on every hit, and every layout is laid
 * back and compared byte for byte; a cubin or a layout the model does not
 * cover is a miss, never an approximate answer.
 *
 * Never: search a cubin for byte patterns (the ELF section table, program
 * headers and the DWARF header are parsed), read past any length a client
 * or a cubin gives, or answer when a check fails (the caller misses
 * instead).
 */
#include "daemon/cubin_debug.h"

#include <stdlib.h>
#include <string.h>

/* More .file directives than this and the request is simply not portable
 * (Triton and Inductor kernels name a handful). The scan compares every
 * string of the debug sections with every file, on the master's loop, so
 * this bound is also what one request may cost it. */
#define DBG_MAX_FILES 256
#define DBG_MAX_PATH 4096
/* ptxas keeps 32 bits of a stamp (measured): larger ones stay exact. */
#define DBG_MAX_STAMP 0xffffffffull

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

/* A data line of a DWARF section: `.bN VALUE` with N 8, 16, 32 or 64 and
 * one value, then only blanks and maybe a `//` comment. The value is a
 * decimal number ("0" or no leading zero: PTX reads 017 as octal) or a
 * symbol expression (letters, digits, `_$.+-`). Returns 1 with the width
 * in bytes, where the value lies ([*v0, *v1)) and *num (1: decimal, value
 * in *val, below 2^63); 0 for any other line. */
static int parse_data(const char *line, size_t n, unsigned *width, size_t *v0,
		      size_t *v1, int *num, uint64_t *val)
{
	size_t i = 0;

	while (i < n && is_ws(line[i]))
		i++;
	if (n - i < 4 || line[i] != '.' || line[i + 1] != 'b')
		return 0;
	i += 2;
	if (n - i >= 1 && line[i] == '8')
		*width = 1, i += 1;
	else if (n - i >= 2 && !memcmp(line + i, "16", 2))
		*width = 2, i += 2;
	else if (n - i >= 2 && !memcmp(line + i, "32", 2))
		*width = 4, i += 2;
	else if (n - i >= 2 && !memcmp(line + i, "64", 2))
		*width = 8, i += 2;
	else
		return 0;
	if (i >= n || !is_ws(line[i]))
		return 0;
	while (i < n && is_ws(line[i]))
		i++;
	*v0 = i;
	int digits = 1;
	uint64_t v = 0;
	while (i < n) {
		char c = line[i];
		if (c >= '0' && c <= '9') {
			if (v > (UINT64_MAX / 2 - 9) / 10)
				digits = 0;     /* too large to be ours */
			v = v * 10 + (uint64_t)(c - '0');
		} else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
			   c == '$' || c == '.' || c == '+' || c == '-') {
			digits = 0;
		} else {
			break;
		}
		i++;
	}
	*v1 = i;
	if (i == *v0)
		return 0;
	if (line[*v0] == '0' && i - *v0 > 1)
		digits = 0;             /* octal or hex: not a value we read */
	while (i < n && is_ws(line[i]))
		i++;
	if (i < n && !(n - i >= 2 && line[i] == '/' && line[i + 1] == '/'))
		return 0;
	*num = digits;
	*val = v;
	return 1;
}

/* `.b8 N` with one decimal byte value (blanks and a comment may follow).
 * Returns 1 with the value. */
static int parse_b8(const char *line, size_t n, unsigned *val)
{
	unsigned w;
	size_t v0, v1;
	int num;
	uint64_t v;

	if (!parse_data(line, n, &w, &v0, &v1, &num, &v) || w != 1 || !num || v > 255)
		return 0;
	*val = (unsigned)v;
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

/* `.section NAME` where NAME is .debug_info: 2, .debug_str: 1; another
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
	if (i - s == 11 && !memcmp(line + s, ".debug_info", 11))
		return 2;
	return i - s == 10 && !memcmp(line + s, ".debug_str", 10);
}

/* A line ptxas takes as nothing: blanks, maybe a `//` comment, maybe the
 * `{` that opens a section. */
static int empty_line(const char *line, size_t n)
{
	size_t i = 0;

	while (i < n && is_ws(line[i]))
		i++;
	if (i < n && line[i] == '{')
		for (i++; i < n && is_ws(line[i]); i++)
			;
	return i == n || (n - i >= 2 && line[i] == '/' && line[i + 1] == '/');
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
	free(v->runs);
	v->f = NULL;
	v->n = 0;
	v->runs = NULL;
	v->nruns = 0;
	v->lines = 0;
}

void dbg_scan_free(struct dbg_scan *s)
{
	if (!s)
		return;
	buf_free(&s->shape);
	buf_free(&s->loose);
	buf_free(&s->layout);
	dbg_view_free(&s->view);
	dbg_view_free(&s->run);
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
			if (!find_stamp(sources, path, plen, &f->mtime, &f->size) ||
			    f->mtime > DBG_MAX_STAMP || f->size > DBG_MAX_STAMP)
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

/* The length of what run r spells in view v. */
static size_t run_len(const struct dbg_view *v, const struct dbg_run *r)
{
	const struct dbg_file *f = &v->f[r->fi];
	size_t pl = strlen(f->path);

	return r->kind == 'P' ? pl : r->kind == 'D' ? f->dir_len : pl - f->dir_len - 1;
}

/* The line ending at or after p (no newline), and the one after it. */
static size_t line_at(const char *p, const char *end, const char **next)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));

	*next = nl ? nl + 1 : end;
	return nl ? (size_t)(nl - p) : (size_t)(end - p);
}

/* What the shape is built from, line by line. */
struct shaper {
	struct dbg_scan *out;
	struct buf str;         /* the bytes of the string being read */
	size_t line;            /* the PTX line being read, 0-based */
	size_t extra;           /* lines of the runs so far beyond one each */
	size_t runs_cap;
	size_t *offs;           /* a DWARF section's items: byte offsets */
	size_t offs_cap;
};

/*
 * The C string whose non-zero `.b8` lines start at p: *k of them, then
 * where they stop (*zero: the `.b8 0` line, or the line that is not a
 * byte). The run it holds, if it ends with `.b8 0`: its longest tail that
 * spells a component of a file (the first file's first, path before
 * directory before name, among tails of one length), from byte *start on (*start == *k: none).
 */
static int scan_string(struct shaper *sh, const char *p, const char *end, size_t *k,
		       size_t *start, char *kind, size_t *fi, const char **zero)
{
	const struct dbg_view *v = &sh->out->view;
	unsigned c = 1;

	sh->str.len = 0;
	*k = 0;
	while (p < end) {
		const char *next;
		size_t n = line_at(p, end, &next);
		if (!parse_b8(p, n, &c) || !c)
			break;
		unsigned char b = (unsigned char)c;
		if (buf_append(&sh->str, &b, 1) < 0)
			return -1;
		(*k)++;
		p = next;
	}
	*zero = p;
	*start = *k;
	if (p == end || c)
		return 0;       /* not ended by a zero byte */
	const unsigned char *s = (const unsigned char *)sh->str.data;
	size_t best = 0;
	for (size_t i = 0; i < v->n; i++) {
		const struct dbg_file *f = &v->f[i];
		size_t pl = strlen(f->path);
		const struct { char kind; const char *at; size_t len; } comp[3] = {
			{ 'P', f->path, pl },
			{ 'D', f->path, f->dir_len },
			{ 'N', f->path + f->dir_len + 1, pl - f->dir_len - 1 },
		};
		for (int j = 0; j < 3; j++) {
			size_t l = comp[j].len;
			if (l > best && l <= *k && !memcmp(s + *k - l, comp[j].at, l)) {
				best = l;
				*kind = comp[j].kind;
				*fi = i;
			}
		}
	}
	*start = *k - best;
	return 0;
}

static int add_run(struct shaper *sh, char kind, size_t fi, size_t len)
{
	struct dbg_view *v = &sh->out->view;

	if (v->nruns == sh->runs_cap) {
		size_t nc = sh->runs_cap ? sh->runs_cap * 2 : 8;
		struct dbg_run *nr = realloc(v->runs, nc * sizeof *nr);
		if (!nr)
			return -1;
		v->runs = nr;
		sh->runs_cap = nc;
	}
	v->runs[v->nruns++] = (struct dbg_run){ .line = sh->line - sh->extra,
						.fi = (unsigned)fi, .kind = kind };
	sh->extra += len - 1;
	sh->line += len;
	return 0;
}

static int add_item(struct shaper *sh, size_t *nitems, size_t *total, size_t w)
{
	if (*nitems == sh->offs_cap) {
		size_t nc = sh->offs_cap ? sh->offs_cap * 2 : 256;
		size_t *no = realloc(sh->offs, nc * sizeof *no);
		if (!no)
			return -1;
		sh->offs = no;
		sh->offs_cap = nc;
	}
	sh->offs[(*nitems)++] = *total;
	*total += w;
	return 0;
}

/*
 * The body of a .debug_info (info = 1) or .debug_str section, from p to
 * the line that closes it (left to the caller: *stop) or the end, into the
 * shape: each run as one marker line, each data line without its comment,
 * and in .debug_info the values the runs' lengths decide as what they
 * are: `\2L` for a first .b32 that is the length of a unit spanning the
 * whole section, `\2@K` for a later .b32 that is the offset of item K in
 * it (items: data lines and runs, counted from 0). A section with any
 * other line keeps its values as they are. Two passes: the items' offsets
 * (this client's), then the shape.
 */
static int shape_section(struct shaper *sh, const char *body, const char *end, int info,
			 const char **stop)
{
	struct buf *shape = &sh->out->shape;
	size_t nitems = 0, total = 0;
	int sized = 1, unit = 0;
	const char *p = body;

	for (int emit = 0; emit < 2; emit++) {
		size_t item = 0;
		for (p = body; p < end;) {
			const char *next;
			size_t n = line_at(p, end, &next), v0, v1;
			unsigned w;
			int num;
			uint64_t val;
			if (memchr(p, '}', n))
				break;
			if (parse_b8(p, n, &w) && w) {
				size_t k, start, fi = 0;
				char kind = 0;
				const char *zero;
				if (scan_string(sh, p, end, &k, &start, &kind, &fi, &zero) < 0)
					return -1;
				for (size_t i = 0; i < start; i++, item++) {
					n = line_at(p, end, &next);
					parse_data(p, n, &w, &v0, &v1, &num, &val);
					if (!emit ? add_item(sh, &nitems, &total, 1) < 0
						  : buf_append(shape, p, v1) < 0 || buf_puts(shape, "\n") < 0)
						return -1;
					sh->line += emit;
					p = next;
				}
				if (start < k) {
					if (!emit ? add_item(sh, &nitems, &total, k - start) < 0
						  : buf_printf(shape, "\x01%c%zu\n", kind, fi) < 0 ||
						    add_run(sh, kind, fi, k - start) < 0)
						return -1;
					item++;
					p = zero;
				}
				continue;
			}
			if (!parse_data(p, n, &w, &v0, &v1, &num, &val)) {
				if (!emit && !empty_line(p, n))
					sized = 0;
				if (emit) {
					if (buf_append(shape, p, (size_t)(next - p)) < 0)
						return -1;
					sh->line++;
				}
				p = next;
				continue;
			}
			if (!emit) {
				if (add_item(sh, &nitems, &total, w) < 0)
					return -1;
				p = next;
				continue;
			}
			/* A value the runs' lengths decide? */
			const char *what = NULL;
			size_t at = 0;
			if (info && sized && num && w == 4) {
				if (item == 0 && val + 4 == total) {
					unit = 1;
					what = "L";
				} else if (unit && val < total) {
					size_t lo = 0, hi = nitems;
					while (lo < hi) {
						size_t mid = lo + (hi - lo) / 2;
						if (sh->offs[mid] < val)
							lo = mid + 1;
						else
							hi = mid;
					}
					if (lo < nitems && sh->offs[lo] == val)
						what = "@", at = lo;
				}
			}
			if (what ? buf_append(shape, p, v0) < 0 ||
				   (*what == 'L' ? buf_puts(shape, "\x02L\n")
						 : buf_printf(shape, "\x02@%zu\n", at)) < 0
				 : buf_append(shape, p, v1) < 0 || buf_puts(shape, "\n") < 0)
				return -1;
			item++;
			sh->line++;
			p = next;
		}
	}
	*stop = p;
	return 0;
}

int dbg_scan(const char *ptx, size_t len, const char *sources, struct dbg_scan *out)
{
	struct shaper sh = { .out = out, .str = BUF_INIT };
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
	while (p < end) {
		const char *next;
		size_t n = line_at(p, end, &next);
		unsigned idx;
		const char *path;
		size_t plen, close_at, cut;
		int sec = debug_section(p, n);

		if (sec >= 0) {
			in_dbg = sec && !memchr(p, '}', n);
			if (buf_append(&out->shape, p, (size_t)(next - p)) < 0 ||
			    (!in_dbg && buf_append(&out->loose, p, (size_t)(next - p)) < 0))
				goto oom;
			sh.line++;
			p = next;
			if (in_dbg && shape_section(&sh, p, end, sec == 2, &p) < 0)
				goto oom;
			continue;
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
			sh.line++;
			p = next;
			continue;
		} else if (loc_comment(p, n, &cut)) {
			if (buf_append(&out->shape, p, cut) < 0 || buf_puts(&out->shape, "\n") < 0 ||
			    buf_append(&out->loose, p, cut) < 0 || buf_puts(&out->loose, "\n") < 0)
				goto oom;
			sh.line++;
			p = next;
			continue;
		}
		if (buf_append(&out->shape, p, (size_t)(next - p)) < 0 ||
		    (!in_dbg && buf_append(&out->loose, p, (size_t)(next - p)) < 0))
			goto oom;
		sh.line++;
		p = next;
	}
	out->view.lines = sh.line - sh.extra;  /* a last newline ends a line */
	for (size_t i = 0; i < out->view.n; i++) {
		const struct dbg_file *f = &out->view.f[i];
		if (buf_printf(&out->layout, "%u:%u;", f->index, f->group) < 0)
			goto oom;
	}
	buf_free(&sh.str);
	free(sh.offs);
	sh.offs = NULL;
	if (!out->shape.data || !out->loose.data || dbg_view_copy(&out->view, &out->run) < 0 ||
	    dbg_view_canonical(&out->view, &out->canon) < 0)
		goto oom;
	for (size_t i = 0; i < out->run.n; i++)
		if (!out->run.f[i].mtime)
			out->run.f[i].mtime = 1;
	return 1;
oom:
	buf_free(&sh.str);
	free(sh.offs);
	dbg_scan_free(out);
	return -1;
}

int dbg_stamp_ptx(const char *ptx, size_t len, const struct dbg_view *v, struct buf *out)
{
	const char *p = ptx, *end = ptx + len;
	size_t seen = 0;

	while (p < end) {
		const char *next;
		size_t n = line_at(p, end, &next);
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
	memset(out, 0, sizeof *out);
	out->f = calloc(v->n ? v->n : 1, sizeof *out->f);
	out->runs = malloc((v->nruns ? v->nruns : 1) * sizeof *out->runs);
	if (!out->f || !out->runs) {
		dbg_view_free(out);
		return -1;
	}
	for (size_t i = 0; i < v->n; i++) {
		out->f[i] = v->f[i];
		if (!(out->f[i].path = strdup(v->f[i].path))) {
			dbg_view_free(out);
			return -1;
		}
		out->n++;
	}
	if (v->nruns)
		memcpy(out->runs, v->runs, v->nruns * sizeof *v->runs);
	out->nruns = v->nruns;
	out->lines = v->lines;
	return 0;
}

/* The same files (indices, directory groups) and runs: views of one key. */
static int same_shape(const struct dbg_view *a, const struct dbg_view *b)
{
	if (a->n != b->n || a->nruns != b->nruns || a->lines != b->lines)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->f[i].index != b->f[i].index || a->f[i].group != b->f[i].group)
			return 0;
	for (size_t i = 0; i < a->nruns; i++)
		if (a->runs[i].line != b->runs[i].line || a->runs[i].fi != b->runs[i].fi ||
		    a->runs[i].kind != b->runs[i].kind)
			return 0;
	return 1;
}

int dbg_view_equal(const struct dbg_view *a, const struct dbg_view *b)
{
	if (!same_shape(a, b))
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->f[i].mtime != b->f[i].mtime || a->f[i].size != b->f[i].size ||
		    strcmp(a->f[i].path, b->f[i].path))
			return 0;
	return 1;
}

/* n in letters ("a" for 0), at the end of s; returns its length. */
static size_t letters(char *s, unsigned long n)
{
	char tmp[16];
	size_t k = 0;

	do {
		tmp[k++] = (char)('a' + n % 26);
		n /= 26;
	} while (n && k < sizeof tmp);
	for (size_t i = 0; i < k; i++)
		s[i] = tmp[k - 1 - i];
	return k;
}

int dbg_view_canonical(const struct dbg_view *v, struct dbg_view *out)
{
	if (dbg_view_copy(v, out) < 0)
		return -1;
	for (size_t i = 0; i < out->n; i++) {
		struct dbg_file *f = &out->f[i];
		char *p = malloc(2 + 16 + 2 + 16 + 1);
		if (!p) {
			dbg_view_free(out);
			return -1;
		}
		size_t k = 0;
		p[k++] = '/';
		p[k++] = 'd';
		k += letters(p + k, f->group);
		f->dir_len = k;
		p[k++] = '/';
		p[k++] = 'n';
		k += letters(p + k, i);
		p[k] = '\0';
		free(f->path);
		f->path = p;
		f->mtime = f->size = 0;
	}
	return 0;
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

static void wr32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void wr64(unsigned char *p, uint64_t v)
{
	wr32(p, (uint32_t)v);
	wr32(p + 4, (uint32_t)(v >> 32));
}

enum {
	SHT_PROGBITS_ = 1, SHT_SYMTAB_ = 2, SHT_STRTAB_ = 3, SHT_RELA_ = 4,
	SHT_NOBITS_ = 8, SHT_REL_ = 9,
	SHT_MERC_RELA = 0x70000082, SHT_MERC_SYMTAB = 0x70000085,  /* sm_100 on */
	SHF_INFO_LINK_ = 0x40,
	SHDR = 64, PHDR = 56, SYM = 24,
};

/* What a section is to this file. */
enum role { PLAIN, LINE, PTX_TXT };

struct sec {
	uint32_t type, link, info;
	uint64_t flags, off, size, align, entsize;
	enum role role;
	int alias;              /* the section whose bytes it names too, or -1 */
	unsigned rel;           /* relocations: their entry size (24, 16), or 0 */
	int symtab;             /* a symbol table */
	size_t a, b;            /* LINE: where its header's tables lie */
	uint64_t noff, nsize;   /* where it goes, and its size there */
};

/* A cubin as this file reads it. */
struct elf {
	const unsigned char *d;
	size_t n;
	uint64_t phoff, shoff;
	unsigned phnum, shnum;
	struct sec *s;          /* shnum */
	unsigned *order;        /* sections 1.. by file offset */
	int lines, ptx;         /* how many LINE and PTX_TXT sections */
};

static void elf_free(struct elf *e)
{
	free(e->s);
	free(e->order);
}

static const struct elf *sort_elf;

static int by_offset(const void *a, const void *b)
{
	const struct sec *x = &sort_elf->s[*(const unsigned *)a];
	const struct sec *y = &sort_elf->s[*(const unsigned *)b];
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return *(const unsigned *)a < *(const unsigned *)b ? -1 : 1;
}

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), t = strlen(tail);
	return n >= t && !memcmp(s + n - t, tail, t);
}

/* Whether section i names (by index) a LINE or PTX_TXT section. */
static int moved(const struct elf *e, uint64_t i)
{
	return i && i < e->shnum && e->s[i].role != PLAIN;
}

/* Parse d[0..n): 0, or -1 (why). The line tables are .debug_line (and
 * sm_100's copy, .nv.merc.debug_line), the PTX's lines .nv_debug_ptx_txt
 * (and .nv.merc.nv_debug_ptx_txt, which names the same bytes). */
static int elf_parse(const unsigned char *d, size_t n, struct elf *e, const char **why)
{
	memset(e, 0, sizeof *e);
	e->d = d;
	e->n = n;
	*why = "not a 64-bit little-endian ELF";
	if (n < 64 || memcmp(d, "\x7f" "ELF", 4) || d[4] != 2 || d[5] != 1)
		return -1;
	e->phoff = rd64(d + 0x20);
	e->shoff = rd64(d + 0x28);
	unsigned phentsize = rd16(d + 0x36), shentsize = rd16(d + 0x3a);
	unsigned shstrndx = rd16(d + 0x3e);
	e->phnum = rd16(d + 0x38);
	e->shnum = rd16(d + 0x3c);
	*why = "bad ELF section table";
	if (shentsize != SHDR || e->shnum == 0 || shstrndx == 0 || shstrndx >= e->shnum ||
	    e->shoff > n ||
	    (uint64_t)e->shnum * SHDR > n - e->shoff)
		return -1;
	*why = "bad ELF program headers";
	if (e->phnum && (phentsize != PHDR || e->phoff > n ||
			 (uint64_t)e->phnum * PHDR > n - e->phoff))
		return -1;
	*why = "out of memory";
	e->s = calloc(e->shnum, sizeof *e->s);
	e->order = calloc(e->shnum, sizeof *e->order);
	if (!e->s || !e->order)
		return -1;
	*why = "bad ELF section";
	for (unsigned i = 0; i < e->shnum; i++) {
		const unsigned char *h = d + e->shoff + (size_t)i * SHDR;
		struct sec *s = &e->s[i];
		s->type = rd32(h + 4);
		s->flags = rd64(h + 8);
		s->off = rd64(h + 0x18);
		s->size = rd64(h + 0x20);
		s->link = rd32(h + 0x28);
		s->info = rd32(h + 0x2c);
		s->align = rd64(h + 0x30);
		s->entsize = rd64(h + 0x38);
		s->noff = s->off;
		s->nsize = s->size;
		s->alias = -1;
		/* NOBITS sections have no bytes, but ptxas places them within
		 * the file too, and elf_place() reads up to their offset. */
		if (i && (s->off > n || (s->type != SHT_NOBITS_ && s->size > n - s->off)))
			return -1;
		if (s->align & (s->align - 1) || s->align > 65536)
			return -1;
	}
	const struct sec *str = &e->s[shstrndx];
	if (str->type != SHT_STRTAB_)
		return -1;
	for (unsigned i = 1; i < e->shnum; i++) {
		struct sec *s = &e->s[i];
		uint32_t nm = rd32(d + e->shoff + (size_t)i * SHDR);
		if (nm >= str->size || !memchr(d + str->off + nm, 0, str->size - nm)) {
			*why = "bad ELF section name";
			return -1;
		}
		const char *sn = (const char *)d + str->off + nm;
		if (ends_with(sn, ".debug_info") || ends_with(sn, ".debug_str")) {
			/* Full debug info names the paths again, in places this
			 * file does not rewrite. */
			*why = "the cubin carries .debug_info";
			return -1;
		}
		if (!strcmp(sn, ".debug_line") || !strcmp(sn, ".nv.merc.debug_line"))
			s->role = LINE;
		else if (!strcmp(sn, ".nv_debug_ptx_txt") || !strcmp(sn, ".nv.merc.nv_debug_ptx_txt"))
			s->role = PTX_TXT;
		*why = "bad .debug_line or .nv_debug_ptx_txt section";
		if (s->role != PLAIN && s->type != SHT_PROGBITS_)
			return -1;
		e->lines += s->role == LINE;
		e->ptx += s->role == PTX_TXT;
		s->rel = s->type == SHT_RELA_ || s->type == SHT_MERC_RELA ? 24 :
			 s->type == SHT_REL_ ? 16 : 0;
		s->symtab = s->type == SHT_SYMTAB_ || s->type == SHT_MERC_SYMTAB;
		*why = "bad ELF relocations or symbols";
		if ((s->rel && s->entsize != s->rel) || (s->symtab && s->entsize != SYM) ||
		    ((s->rel || s->symtab) && s->size % (s->rel ? s->rel : SYM)))
			return -1;
	}
	for (unsigned i = 1; i < e->shnum; i++) {
		const struct sec *s = &e->s[i];
		/* Only relocations and symbols may name what moves. */
		*why = "a section names the line table in a way this file does not follow";
		if (!s->rel && ((s->flags & SHF_INFO_LINK_ && moved(e, s->info)) ||
				moved(e, s->link)))
			return -1;
		if (s->rel && (s->link >= e->shnum || !e->s[s->link].symtab))
			return -1;
	}
	for (unsigned i = 1; i < e->shnum; i++)
		e->order[i - 1] = i;
	sort_elf = e;
	qsort(e->order, e->shnum - 1, sizeof *e->order, by_offset);
	/* A section of the same offset and size as one before it names its
	 * bytes: it moves and grows with it. */
	for (unsigned k = 1; k + 1 < e->shnum; k++) {
		struct sec *s = &e->s[e->order[k]];
		const struct sec *p;
		if (s->type == SHT_NOBITS_ || !s->size)
			continue;
		for (unsigned j = k; j-- > 0;) {
			p = &e->s[e->order[j]];
			if (p->off != s->off)
				break;
			if (p->type != SHT_NOBITS_ && p->size == s->size) {
				s->alias = p->alias >= 0 ? p->alias : (int)e->order[j];
				break;
			}
		}
		if (s->alias >= 0 && s->role != e->s[s->alias].role) {
			*why = "a line table shares its bytes with another section";
			return -1;
		}
	}
	return 0;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return a > 1 ? (v + a - 1) & ~(a - 1) : v;
}

/*
 * ptxas's layout from offset start on (sections in file order, each at the
 * next multiple of its alignment, NOBITS taking no room, one that names
 * another's bytes where that one goes; the section headers at the next
 * multiple of 8; the program headers right after): check, the cubin must
 * lie exactly so, with zeros between; else sets each section's noff for
 * its nsize and the headers' offsets. 0, or -1 (why).
 */
static int elf_place(struct elf *e, uint64_t start, int check, uint64_t *shoff,
		     uint64_t *phoff, uint64_t *total, const char **why)
{
	uint64_t pos = start;

	*why = "the cubin is not laid out as ptxas lays it out";
	for (unsigned k = 0; k + 1 < e->shnum; k++) {
		struct sec *s = &e->s[e->order[k]];
		if (s->off < start) {
			if (s->type != SHT_NOBITS_ && s->off + s->size > start)
				return -1;
			continue;
		}
		if (s->alias >= 0) {
			if (!check) {
				s->noff = e->s[s->alias].noff;
				s->nsize = e->s[s->alias].nsize;
			}
			continue;
		}
		uint64_t o = align_up(pos, s->align);
		if (check && o != s->off)
			return -1;
		for (uint64_t z = pos; check && z < o; z++)
			if (e->d[z])
				return -1;
		if (!check)
			s->noff = o;
		pos = o + (s->type == SHT_NOBITS_ ? 0 : check ? s->size : s->nsize);
	}
	uint64_t o = align_up(pos, 8);
	if (check) {
		if (o != e->shoff)
			return -1;
		for (uint64_t z = pos; z < o; z++)
			if (e->d[z])
				return -1;
	}
	*shoff = o;
	pos = o + (uint64_t)e->shnum * SHDR;
	if (check && e->phnum ? e->phoff != pos : check && e->phoff != 0)
		return -1;
	*phoff = e->phnum ? pos : 0;
	pos += (uint64_t)e->phnum * PHDR;
	if (check && pos != e->n)
		return -1;
	*total = pos;
	return 0;
}

/*
 * A program header for the new layout (p: its 56 bytes, rewritten): one
 * at the program headers stays there; any other starts where the sections
 * that start at its offset go, and ends its bytes where the sections that
 * end its bytes there (or NOBITS ones that start there) go; its memory
 * size keeps what it adds to the file size. 0, DBG_UNMODELLED (those
 * sections would go to different places), or -1 (why).
 */
static int elf_segment(const struct elf *e, unsigned char *p, uint64_t phoff,
		       const char **why)
{
	uint64_t off = rd64(p + 8), fsz = rd64(p + 32), msz = rd64(p + 40);
	uint64_t nlo = UINT64_MAX, nend = UINT64_MAX;

	*why = "a program header this file does not follow";
	if (off == e->phoff) {
		wr64(p + 8, phoff);
		return 0;
	}
	if (off > e->n || fsz > e->n - off || msz < fsz)
		return -1;
	for (unsigned k = 1; k < e->shnum; k++) {
		const struct sec *s = &e->s[k];
		if (s->alias >= 0)
			continue;
		if (s->off == off) {
			if (nlo != UINT64_MAX && nlo != s->noff)
				goto apart;
			nlo = s->noff;
		}
		uint64_t at = s->type == SHT_NOBITS_ ? s->off : s->off + s->size;
		uint64_t nat = s->type == SHT_NOBITS_ ? s->noff : s->noff + s->nsize;
		if (fsz && at == off + fsz && (s->type == SHT_NOBITS_ || s->size)) {
			if (nend != UINT64_MAX && nend != nat)
				goto apart;
			nend = nat;
		}
	}
	if (nlo == UINT64_MAX || (fsz && (nend == UINT64_MAX || nend < nlo)))
		return -1;
	uint64_t nfsz = fsz ? nend - nlo : 0;
	wr64(p + 8, nlo);
	wr64(p + 32, nfsz);
	wr64(p + 40, msz - fsz + nfsz);
	return 0;
apart:
	*why = "the sections of a segment would go apart";
	return DBG_UNMODELLED;
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
		    put_uleb(out, (uint64_t)f->group + 1) < 0 ||
		    put_uleb(out, f->mtime & DBG_MAX_STAMP) < 0 ||
		    put_uleb(out, f->size & DBG_MAX_STAMP) < 0)
			return -1;
	}
	return buf_append(out, "", 1);
}

/* The lines of the PTX in view v (each run's bytes one line each). */
static size_t view_lines(const struct dbg_view *v)
{
	size_t n = v->lines;

	for (size_t i = 0; i < v->nruns; i++)
		n += run_len(v, &v->runs[i]) - 1;
	return n;
}

/* from's .nv_debug_ptx_txt sec[0..n) with to's line count: each run's
 * entries (which must be empty) that many for to, appended to out (NULL:
 * only checked); its size in *nsize. 0, or -1 (why). */
static int relay_ptx_txt(const unsigned char *sec, size_t n, const struct dbg_view *from,
			 const struct dbg_view *to, struct buf *out, uint64_t *nsize,
			 const char **why)
{
	size_t i = 0, entry = 0, extra = 0, copied = 0;

	*why = ".nv_debug_ptx_txt does not hold the PTX's lines";
	if (!n || sec[n - 1])
		return -1;
	for (size_t r = 0; r < from->nruns; r++) {
		const struct dbg_run *run = &from->runs[r];
		size_t at = run->line + extra, lf = run_len(from, run), lt = run_len(to, run);
		if (r && run->line <= from->runs[r - 1].line)
			return -1;
		for (; entry < at; entry++) {   /* up to the run's first line */
			const unsigned char *z = memchr(sec + i, 0, n - i);
			if (!z)
				return -1;
			i = (size_t)(z - sec) + 1;
		}
		if (out && buf_append(out, sec + copied, i - copied) < 0)
			goto oom;
		for (size_t k = 0; k < lf; k++, i++, entry++)
			if (i >= n || sec[i])
				return -1;      /* a byte of the run's shows */
		copied = i;
		if (out) {
			if (buf_reserve(out, lt) < 0)
				goto oom;
			memset(out->data + out->len, 0, lt);
			out->len += lt;
		}
		*nsize += lt - lf;
		extra += lf - 1;
	}
	if (out && buf_append(out, sec + copied, n - copied) < 0)
		goto oom;
	for (const unsigned char *z; i < n && (z = memchr(sec + i, 0, n - i)); entry++)
		i = (size_t)(z - sec) + 1;
	if (entry != view_lines(from))
		return -1;
	*nsize += n;
	return 0;
oom:
	*why = "out of memory";
	return -1;
}

/* A relocation whose offset moves: entry `at` of section `sec`. */
struct patch {
	unsigned sec;
	uint64_t at, val;
};

/*
 * The relocations and symbols: every relocation into a line table's
 * program moves by delta (patches; none may point into the tables, nor
 * any into .nv_debug_ptx_txt), and no symbol or relocation may name a
 * place inside what moves other than its start.
 */
static int elf_refs(const struct elf *e, int64_t delta, struct patch **patches, size_t *np,
		    const char **why)
{
	size_t cap = 0;

	*why = "a relocation or symbol into the line table this file does not move";
	for (unsigned i = 1; i < e->shnum; i++) {
		const struct sec *s = &e->s[i];
		if (s->symtab) {
			for (uint64_t k = 0; k < s->size; k += SYM) {
				const unsigned char *sym = e->d + s->off + k;
				if (moved(e, rd16(sym + 6)) && (rd64(sym + 8) || rd64(sym + 16)))
					return -1;
			}
		}
		if (!s->rel)
			continue;
		const struct sec *symtab = &e->s[s->link];
		const struct sec *t = s->info < e->shnum ? &e->s[s->info] : NULL;
		if (t && t->role == PTX_TXT && s->size)
			return -1;
		for (uint64_t k = 0; k < s->size; k += s->rel) {
			const unsigned char *r = e->d + s->off + k;
			uint64_t off = rd64(r), sym = rd64(r + 8) >> 32;
			if (sym) {
				if (sym >= symtab->size / SYM)
					return -1;
				if (moved(e, rd16(e->d + symtab->off + sym * SYM + 6)) &&
				    (s->rel == 16 || rd64(r + 16)))
					return -1;      /* into them, not at their start */
			}
			if (!t || t->role != LINE || (off < t->b && off + 8 <= t->a))
				continue;       /* not into a line table, or before its tables */
			if (off < t->b)
				return -1;
			if (*np == cap) {
				size_t nc = cap ? cap * 2 : 16;
				struct patch *pp = realloc(*patches, nc * sizeof *pp);
				if (!pp) {
					*why = "out of memory";
					return -1;
				}
				*patches = pp;
				cap = nc;
			}
			(*patches)[(*np)++] = (struct patch){ .sec = i, .at = k,
							      .val = off + (uint64_t)delta };
		}
	}
	return 0;
}

static int pad_to(struct buf *out, size_t base, uint64_t to)
{
	static const unsigned char zeros[256];

	while (out->len - base < to) {
		uint64_t n = to - (out->len - base);
		if (buf_append(out, zeros, n < sizeof zeros ? (size_t)n : sizeof zeros) < 0)
			return -1;
	}
	return 0;
}

/*
 * One layout: cubin d[0..n), assembled for `from`, as ptxas lays it out
 * for `to`, appended to out. 0, DBG_UNMODELLED, or -1 (why).
 */
static int relocate(const unsigned char *d, size_t n, const struct dbg_view *from,
		    const struct dbg_view *to, struct buf *out, const char **why)
{
	struct elf e;
	struct buf want = BUF_INIT, put = BUF_INIT, ph = BUF_INIT;
	struct patch *patches = NULL;
	size_t np = 0, base = out->len;
	uint64_t start = UINT64_MAX, shoff, phoff, total;
	int64_t delta = 0;
	int rc = -1;

	if (elf_parse(d, n, &e, why) < 0)
		goto out;
	*why = "the views name other files or runs";
	if (!same_shape(from, to))
		goto out;
	for (size_t i = 0; i < from->nruns; i++)
		if (from->runs[i].fi >= from->n || from->runs[i].line >= from->lines)
			goto out;
	if (!e.lines && !e.ptx) {
		/* Nothing of the paths shows (no line info). */
		*why = "out of memory";
		rc = buf_append(out, d, n) < 0 ? -1 : 0;
		goto out;
	}
	*why = "out of memory";
	if (model(from, &want) < 0 || model(to, &put) < 0)
		goto out;
	delta = (int64_t)put.len - (int64_t)want.len;

	/* The line tables' headers, the PTX's lines. */
	for (unsigned i = 1; i < e.shnum; i++) {
		struct sec *s = &e.s[i];
		if (s->role == PLAIN || s->alias >= 0)
			continue;
		if (s->off < start)
			start = s->off;
		if (s->role == PTX_TXT) {
			s->nsize = 0;
			if (relay_ptx_txt(d + s->off, (size_t)s->size, from, to, NULL, &s->nsize,
					  why) < 0)
				goto out;
			continue;
		}
		const unsigned char *line = d + s->off;
		if (header_tables(line, (size_t)s->size, &s->a, &s->b, why) < 0)
			goto out;
		*why = "the line table names other files than the key says";
		if (want.len != s->b - s->a || memcmp(want.data, line + s->a, want.len))
			goto out;
		s->nsize = s->size + (uint64_t)delta;
		*why = "the line table grows too large";
		if (s->nsize - 4 >= 0xfffffff0u || rd32(line + 6) + delta > 0xffffffffll) {
			rc = DBG_UNMODELLED;
			goto out;
		}
	}
	if (!e.ptx && view_lines(from) != view_lines(to)) {
		*why = "no .nv_debug_ptx_txt to give the PTX's lines";
		rc = DBG_UNMODELLED;
		goto out;
	}
	if (elf_refs(&e, delta, &patches, &np, why) < 0)
		goto out;

	/* Where everything lies, and will. */
	if (elf_place(&e, start, 1, &shoff, &phoff, &total, why) < 0 ||
	    elf_place(&e, start, 0, &shoff, &phoff, &total, why) < 0)
		goto out;
	*why = "out of memory";
	if (e.phnum && buf_append(&ph, d + e.phoff, (size_t)e.phnum * PHDR) < 0)
		goto out;
	for (unsigned i = 0; i < e.phnum; i++)
		if ((rc = elf_segment(&e, (unsigned char *)ph.data + (size_t)i * PHDR, phoff,
				      why)) < 0)
			goto out;
	rc = -1;

	/* The new cubin. */
	*why = "out of memory";
	if (total > SIZE_MAX / 2 || buf_reserve(out, (size_t)total) < 0 ||
	    buf_append(out, d, (size_t)start) < 0)
		goto out;
	wr64((unsigned char *)out->data + base + 0x20, phoff);
	wr64((unsigned char *)out->data + base + 0x28, shoff);
	for (unsigned k = 0; k + 1 < e.shnum; k++) {
		const struct sec *s = &e.s[e.order[k]];
		if (s->off < start || s->alias >= 0)
			continue;
		if (pad_to(out, base, s->noff) < 0)
			goto out;
		if (s->type == SHT_NOBITS_)
			continue;
		if (s->role == LINE) {
			const unsigned char *line = d + s->off;
			size_t at = out->len;
			if (buf_append(out, line, s->a) < 0 || buf_append(out, put.data, put.len) < 0 ||
			    buf_append(out, line + s->b, (size_t)s->size - s->b) < 0)
				goto out;
			unsigned char *w = (unsigned char *)out->data + at;
			wr32(w, (uint32_t)(s->nsize - 4));
			wr32(w + 6, (uint32_t)(rd32(line + 6) + delta));
		} else if (s->role == PTX_TXT) {
			uint64_t z = 0;
			if (relay_ptx_txt(d + s->off, (size_t)s->size, from, to, out, &z, why) < 0)
				goto out;
		} else if (buf_append(out, d + s->off, (size_t)s->size) < 0) {
			goto out;
		}
	}
	if (pad_to(out, base, shoff) < 0)
		goto out;
	for (unsigned i = 0; i < e.shnum; i++) {
		size_t at = out->len;
		if (buf_append(out, d + e.shoff + (size_t)i * SHDR, SHDR) < 0)
			goto out;
		if (i) {
			wr64((unsigned char *)out->data + at + 0x18, e.s[i].noff);
			wr64((unsigned char *)out->data + at + 0x20, e.s[i].nsize);
		}
	}
	if (buf_append(out, ph.data, ph.len) < 0)
		goto out;
	for (size_t i = 0; i < np; i++)
		wr64((unsigned char *)out->data + base + e.s[patches[i].sec].noff + patches[i].at,
		     patches[i].val);
	*why = "the new layout came out at another size";
	if (out->len - base == total)
		rc = 0;
out:
	if (rc)
		out->len = base;
	free(patches);
	buf_free(&want);
	buf_free(&put);
	buf_free(&ph);
	elf_free(&e);
	return rc;
}

int dbg_rewrite(const void *cubin, size_t n, const struct dbg_view *from,
		const struct dbg_view *to, struct buf *out, const char **why)
{
	struct buf back = BUF_INIT;
	size_t base = out->len;
	const char *why2 = "";

	int rc = relocate(cubin, n, from, to, out, why);
	if (rc)
		return rc;
	/* Laid back out for from, it must be the cubin we were given. */
	rc = relocate((const unsigned char *)out->data + base, out->len - base, to, from, &back,
		      &why2);
	if (rc || back.len != n || memcmp(back.data, cubin, n)) {
		int oom = rc == -1 && !strcmp(why2, "out of memory");
		*why = oom ? why2 : "the new layout does not lay back out as the cubin";
		rc = oom ? -1 : DBG_UNMODELLED;
		out->len = base;
	}
	buf_free(&back);
	return rc;
}
