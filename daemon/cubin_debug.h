/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin_debug: cubin keys free of source paths and stamps, and each
 * client's cubin laid out from the cached one.
 *
 * With -lineinfo, ptxas copies the source files the PTX's `.file`
 * directives name into the cubin's .debug_line header: each directory and
 * file name, and each file's mtime and size as ULEB128. Their lengths move
 * what follows (the line program, the sections after it, the section and
 * program headers), and the lengths of the DWARF byte lists that spell the
 * paths in the PTX's .debug_info show as the line count of the PTX copy in
 * .nv_debug_ptx_txt. Nothing else in the cubin depends on them (checked
 * byte for byte against the real ptxas by tests/test_lineinfo.py and
 * tests/test_reloc.py). So the cubin stage is keyed on the PTX with the
 * paths and everything their lengths decide taken out (the "shape") plus
 * which files share a directory; the assembler runs once; the cached cubin
 * is laid out for canonical paths and stamps; each client gets the cubin
 * laid out again for its own (dbg_rewrite()).
 *
 * The master uses it only (no file is read: a client's stamps come with its
 * request). Every byte it reads comes from a client (PTX, stamps) or from
 * an assembler or the cache (cubins): all of it is bounds-checked, and
 * anything unexpected makes the request not portable (an exact key, as
 * before) or a rewrite fail (a miss), never a wrong answer.
 */
#ifndef PTXCACHE_CUBIN_DEBUG_H
#define PTXCACHE_CUBIN_DEBUG_H

#include <stddef.h>
#include <stdint.h>

#include "proto/buf.h"

/* One `.file` of the PTX, as one client sees it. */
struct dbg_file {
	unsigned index;         /* N of `.file N "PATH"` */
	char *path;             /* owned, NUL-terminated, absolute */
	size_t dir_len;         /* path[0..dir_len) is the directory; path[dir_len] == '/' */
	unsigned group;         /* index of the directory among the distinct
	                           directories, in .file index order (as ptxas
	                           numbers its include_directories, from 0) */
	uint64_t mtime, size;   /* what ptxas records: 0, 0 for a missing file */
};

/* Where the PTX spells a directory, name or path of a `.file` as a DWARF
 * byte list (one `.b8` line a byte): ptxas copies each PTX line into
 * .nv_debug_ptx_txt, so the list's length moves the lines after it. */
struct dbg_run {
	size_t line;            /* its first line, 0-based, counting every
	                           earlier run as one line (the shape's count) */
	unsigned fi;            /* which file (position in dbg_view.f) */
	char kind;              /* 'D' directory, 'N' name, 'P' whole path */
};

/* Every `.file` of one PTX, sorted by index, and where its paths show. */
struct dbg_view {
	struct dbg_file *f;     /* owned */
	size_t n;
	struct dbg_run *runs;   /* owned; in line order */
	size_t nruns;
	size_t lines;           /* the PTX's lines ('\n' count + 1), every run
	                           counted as one */
};

/* What dbg_scan() derives from a request. Free with dbg_scan_free(). */
struct dbg_scan {
	struct buf shape;       /* the PTX without paths, without what their
	                           lengths decide (DWARF unit lengths and DIE
	                           offsets, written as what they are) and
	                           without comments ptxas ignores: hash it for
	                           the key */
	struct buf loose;       /* the PTX without paths and without the DWARF
	                           sections that spell them: hash it for the
	                           key that accepts other paths (lineinfo-loose) */
	struct buf layout;      /* key component: each .file's index and
	                           directory group */
	struct dbg_view view;   /* this client's paths and stamps */
	struct dbg_view run;    /* what the assembler is given: the view, with
	                           an mtime of 1 for 0 (ptxas reads the file
	                           itself when told 0); dbg_rewrite() gives the
	                           client its own */
	struct dbg_view canon;  /* the canonical view (dbg_view_canonical()):
	                           what is stored */
};

/*
 * Scan ptx[0..len) with the client's stamps (sources: "PATH\tMTIME:SIZE\n"
 * or "PATH\t-\n" lines, as client/ptxas.c sends them; NULL: none). Returns
 * 1 when the request is portable (out filled), 0 when it is not (no .file,
 * or one this file does not understand: relative path, explicit stamps,
 * escapes, duplicate index or path, control bytes in the PTX, a path
 * without stamps, a stamp of 2^32 or more (ptxas keeps 32 bits)), -1
 * when memory runs out. out must be zeroed.
 */
int dbg_scan(const char *ptx, size_t len, const char *sources, struct dbg_scan *out);
void dbg_scan_free(struct dbg_scan *s);

/* The PTX as the assembler runs it for this view: each `.file` given its
 * stamps explicitly (`.file N "PATH", MTIME, SIZE`), which ptxas records
 * exactly as if it had read them itself, so the daemon need not see the
 * client's files. Appends to out; 0, or -1 (out of memory, or a view that
 * does not match ptx). */
int dbg_stamp_ptx(const char *ptx, size_t len, const struct dbg_view *v, struct buf *out);

/* The canonical view: the same files, directory groups and runs, with
 * short directories and names of their own ("/d" and the group, "n" and
 * the position, in letters) and stamps 0, 0. Returns 0, or -1 (out of
 * memory). out must be zeroed. */
int dbg_view_canonical(const struct dbg_view *v, struct dbg_view *out);

/* 1 if a and b name the same paths with the same stamps (and runs). */
int dbg_view_equal(const struct dbg_view *a, const struct dbg_view *b);

/* Deep copy; 0, or -1 when memory runs out. out must be zeroed. */
int dbg_view_copy(const struct dbg_view *v, struct dbg_view *out);
void dbg_view_free(struct dbg_view *v);

/*
 * Lay cubin[0..n), assembled for `from`, out as ptxas does for `to` (the
 * same files, groups and runs, other paths and stamps): parses the ELF
 * (64-bit little-endian, section and program headers bounds-checked) and
 * the DWARF line-program header (versions 2 to 4, 32-bit); checks that its
 * include_directories and file_names are exactly those ptxas writes for
 * `from`, that .nv_debug_ptx_txt has `from`'s lines with the runs' lines
 * empty, and that the sections from .debug_line on, the section headers
 * and the program headers lie exactly where ptxas's layout puts them;
 * then writes `to`'s tables, grows or shrinks the unit, moves the
 * relocations into the line program, gives .nv_debug_ptx_txt `to`'s line
 * count, lays the sections out again, and fixes the ELF and program
 * headers. The result is laid out back for `from` and must give cubin
 * byte for byte. A cubin without .debug_line is copied as is. Appends to
 * out; returns 0, DBG_UNMODELLED when the cubin is sound but `to`'s layout
 * is one this file cannot reproduce (nothing appended), or -1 with a
 * reason in why (static text) when the cubin is not what `from` says.
 */
#define DBG_UNMODELLED (-2)
int dbg_rewrite(const void *cubin, size_t n, const struct dbg_view *from,
		const struct dbg_view *to, struct buf *out, const char **why);

/* Between cubin_debug.c and cubin_debug_elf.c, the two halves of the
 * portable keys: ptxas keeps 32 bits of a stamp (measured), so larger
 * ones stay exact; and whether two views have the same files (indices,
 * directory groups) and runs, as views of one key. */
#define DBG_MAX_STAMP 0xffffffffull
int dbg_same_shape(const struct dbg_view *a, const struct dbg_view *b);

#endif
