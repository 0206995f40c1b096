/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin_debug: cubin keys free of source paths and stamps, and each
 * client's exact bytes written back into the cached cubin.
 *
 * With -lineinfo, ptxas copies the source files the PTX's `.file`
 * directives name into the cubin's .debug_line header: each directory and
 * file name, and each file's mtime and size as ULEB128. Nothing else in the
 * cubin depends on those paths or stamps (checked byte for byte against
 * the real ptxas by tests/test_lineinfo.py). So the cubin stage is keyed on
 * the PTX with the paths taken out (the "shape") plus the layout they
 * decide (lengths, which files share a directory, the ULEB128 lengths of
 * the stamps); the assembler runs once; the cached cubin holds canonical
 * filler paths and stamps of the same layout; each client gets the cubin
 * with its own paths and stamps written back into the header.
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

/* Every `.file` of one PTX, sorted by index. */
struct dbg_view {
	struct dbg_file *f;     /* owned */
	size_t n;
};

/* What dbg_scan() derives from a request. Free with dbg_scan_free(). */
struct dbg_scan {
	struct buf shape;       /* the PTX without paths: hash it for the key */
	struct buf loose;       /* the PTX without paths and without the DWARF
	                           byte lists whose lengths they decide: hash it
	                           for the key that accepts other paths */
	struct buf layout;      /* key component: lengths, directory groups,
	                           ULEB128 lengths of the stamps */
	struct dbg_view view;   /* this client's paths and stamps */
	struct dbg_view canon;  /* the canonical view of the same layout
	                           (dbg_view_canonical()): what is stored */
};

/*
 * Scan ptx[0..len) with the client's stamps (sources: "PATH\tMTIME:SIZE\n"
 * or "PATH\t-\n" lines, as client/ptxas.c sends them; NULL: none). Returns
 * 1 when the request is portable (out filled), 0 when it is not (no .file,
 * or one this file does not understand: relative path, explicit stamps,
 * escapes, duplicate index or path, control bytes in the PTX, a path
 * without stamps, directories too many to tell apart), -1 when memory runs out. out must be zeroed.
 */
int dbg_scan(const char *ptx, size_t len, const char *sources, struct dbg_scan *out);
void dbg_scan_free(struct dbg_scan *s);

/* The PTX as the assembler runs it for this view: each `.file` given its
 * stamps explicitly (`.file N "PATH", MTIME, SIZE`), which ptxas records
 * exactly as if it had read them itself, so the daemon need not see the
 * client's files. Appends to out; 0, or -1 (out of memory, or a view that
 * does not match ptx). */
int dbg_stamp_ptx(const char *ptx, size_t len, const struct dbg_view *v, struct buf *out);

/* The canonical view of the same layout: directories and names of filler
 * bytes (distinct per directory group), stamps the smallest values of the
 * same ULEB128 lengths. Returns 0, or -1 (out of memory, or too many
 * directory groups of one length to tell apart). out must be zeroed. */
int dbg_view_canonical(const struct dbg_view *v, struct dbg_view *out);

/* 1 if a and b name the same paths with the same stamps. */
int dbg_view_equal(const struct dbg_view *a, const struct dbg_view *b);

/* Deep copy; 0, or -1 when memory runs out. out must be zeroed. */
int dbg_view_copy(const struct dbg_view *v, struct dbg_view *out);
void dbg_view_free(struct dbg_view *v);

/*
 * Rewrite cubin[0..n), whose .debug_line header names what `from` names,
 * to name what `to` names: parses the ELF (64-bit little-endian, section
 * headers bounds-checked) and the DWARF line-program header (versions 2 to
 * 4, 32-bit), checks that its include_directories and file_names are
 * exactly those ptxas writes for `from`, and replaces them with those it
 * writes for `to` (same length: the layout is in the key). A cubin without
 * .debug_line is copied as is. Appends to out; returns 0, or -1 with a
 * reason in why (static text) when the cubin is not what `from` says or the
 * views differ in layout.
 */
int dbg_rewrite(const void *cubin, size_t n, const struct dbg_view *from,
		const struct dbg_view *to, struct buf *out, const char **why);

#endif
