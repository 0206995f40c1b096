/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cubin_debug_int.h: what the two halves of the portable -lineinfo keys
 * share: cubin_debug.c (the PTX's paths taken out, the views) and
 * cubin_debug_elf.c (the cubin laid out again for a view). Not for any
 * other file: the rest of the daemon sees cubin_debug.h alone.
 */
#ifndef PTXCACHE_CUBIN_DEBUG_INT_H
#define PTXCACHE_CUBIN_DEBUG_INT_H

#include "daemon/cubin_debug.h"

/* ptxas keeps 32 bits of a stamp (measured): larger ones stay exact. */
#define DBG_MAX_STAMP 0xffffffffull

/* The same files (indices, directory groups) and runs: views of one key. */
int dbg_same_shape(const struct dbg_view *a, const struct dbg_view *b);

#endif
