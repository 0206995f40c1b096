/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_cubin_debug: libFuzzer harness for daemon/cubin_debug.c and
 * cubin_debug_elf.c, which read a client's PTX and stamps and every cubin
 * they rewrite.
 *
 * The input is SOURCES '\0' PTX '\0' CUBIN (missing parts are empty): the
 * stamps as the front sends them, the PTX, and a cubin (the seeds hold real
 * ptxas output for their PTX, tests/fuzz/make_seeds.py's cubin_debug set).
 *
 * Properties checked beyond "no crash, no sanitizer report, no leak":
 *  - a portable scan's view stamps its own PTX, and its canonical view
 *    is canonical already (a fixed point);
 *  - rewriting a rewrite's result back gives the input cubin byte for
 *    byte (the layout is exact and touches nothing the checks did not
 *    vouch for), and the result is an ELF whose rewrite succeeds again;
 *  - the CUBIN part, whatever it is, is read only within its bounds, also
 *    against a fixed view of its own.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cubin_debug.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A view to check any cubin against, whatever the PTX part says. */
static const char fixed_ptx[] = ".version 8.7\n.target sm_90a\n\t.file\t1 \"/tmp/icache/zb/k.py\"\n";
static const char fixed_sources[] = "/tmp/icache/zb/k.py\t1700000000:4\n";

static void roundtrip(const uint8_t *cubin, size_t n, const struct dbg_view *a,
		      const struct dbg_view *b)
{
	struct buf out = BUF_INIT, back = BUF_INIT;
	const char *why = "";

	if (dbg_rewrite(cubin, n, a, b, &out, &why) == 0) {
		if (dbg_rewrite(out.data, out.len, b, a, &back, &why) != 0 ||
		    back.len != n || memcmp(back.data, cubin, n))
			abort();
	}
	buf_free(&out);
	buf_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *z1 = memchr(data, 0, size);
	const uint8_t *ptx = z1 ? z1 + 1 : data + size;
	size_t ptx_len = z1 ? (size_t)(data + size - ptx) : 0;
	const uint8_t *z2 = memchr(ptx, 0, ptx_len);
	const uint8_t *cubin = z2 ? z2 + 1 : data + size;
	size_t cubin_len = z2 ? (size_t)(data + size - cubin) : 0;
	char *sources = strndup((const char *)data, z1 ? (size_t)(z1 - data) : size);
	struct dbg_scan ds = { 0 }, fixed = { 0 };

	if (z2)
		ptx_len = (size_t)(z2 - ptx);
	if (!sources)
		return 0;
	if (dbg_scan((const char *)ptx, ptx_len, sources, &ds) == 1) {
		struct buf stamped = BUF_INIT;
		if (ds.view.n == 0 || ds.canon.n != ds.view.n ||
		    dbg_stamp_ptx((const char *)ptx, ptx_len, &ds.view, &stamped) != 0)
			abort();
		buf_free(&stamped);
		roundtrip(cubin, cubin_len, &ds.view, &ds.canon);
		roundtrip(cubin, cubin_len, &ds.canon, &ds.view);
		/* The canonical view is a view of the same layout. */
		struct dbg_view c2 = { 0 };
		if (dbg_view_canonical(&ds.canon, &c2) != 0 || !dbg_view_equal(&c2, &ds.canon))
			abort();
		dbg_view_free(&c2);
	}
	if (dbg_scan(fixed_ptx, sizeof fixed_ptx - 1, fixed_sources, &fixed) != 1)
		abort();
	roundtrip(cubin, cubin_len, &fixed.view, &fixed.canon);
	dbg_scan_free(&ds);
	dbg_scan_free(&fixed);
	free(sources);
	return 0;
}
