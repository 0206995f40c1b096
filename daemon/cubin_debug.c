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
 * cover is a miss, never an approximate answer. This file holds the PTX
 * side (dbg_scan(), dbg_stamp_ptx(), the views); the cubin side, the ELF
 * and dbg_rewrite(), is cubin_debug_elf.c.
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

/* cubin_debug.h */
int dbg_same_shape(const struct dbg_view *a, const struct dbg_view *b)
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
	if (!dbg_same_shape(a, b))
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
