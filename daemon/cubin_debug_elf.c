/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin_debug_elf: the cubin side of portable -lineinfo keys. A cubin
 * ptxas made for one view of the PTX's paths (cubin_debug.c takes them out
 * and keeps the views) laid out again for another view: dbg_rewrite().
 *
 * The model is ptxas's own layout, set out at the top of cubin_debug.c.
 * Here: the ELF parsed (section headers, program headers, symbols and
 * relocations; never a search for byte patterns), the header of each line
 * program (.debug_line, and .nv.merc.debug_line from sm_100 on) checked
 * against what the model writes for the old view and written for the new
 * one, the empty entries of .nv_debug_ptx_txt moved with the DWARF byte
 * lists' lengths, the sections placed again at their alignments, the
 * section and program headers after them, and the relocations into a line
 * program moved with it. Every layout is laid back and compared with the
 * cubin it came from, byte for byte; what the model does not cover is
 * DBG_UNMODELLED (a miss), never an approximate cubin.
 *
 * It reads cubins from an assembler or the cache, and uses nothing of the
 * daemon but the views (cubin_debug.h) and proto/buf.
 */
#include "daemon/cubin_debug.h"

#include <stdlib.h>
#include <string.h>


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

/* The length of what run r spells in view v. */
static size_t run_len(const struct dbg_view *v, const struct dbg_run *r)
{
	const struct dbg_file *f = &v->f[r->fi];
	size_t pl = strlen(f->path);

	return r->kind == 'P' ? pl : r->kind == 'D' ? f->dir_len : pl - f->dir_len - 1;
}

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
	if (!dbg_same_shape(from, to))
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
