/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_cold: the tools ptxcache replaces, run cold: one llc process and one
 * ptxas process per kernel of the corpus, wall time per process. llc's PTX
 * stays in the run's cold/ directory, for the miss section's comparison
 * and the cubin probe.
 */
#include "bench/bench.h"

void cold_runs(struct figures *f)
{
	char out[400], in[1024], cub[400];
	int ok_ptxas = !!g.ptxas;

	f->cold_llc_ms = 0;
	f->cold_ptxas_ms = ok_ptxas ? 0 : NAN;
	for (int i = 0; i < g.nk; i++) {
		struct kernel *k = &g.k[i];
		snprintf(in, sizeof in, "%s/%s.ll", g.corpus, k->name);
		snprintf(out, sizeof out, "%s/cold/%s.ptx", g.tmp, k->name);
		char *llc[] = { (char *)g.llc, "-O3", "-mtriple=nvptx64-nvidia-cuda",
				"-mcpu=sm_90a", "-mattr=+ptx90", in, "-o", out, NULL };
		k->cold_llc_ms = run_cold(llc, in);
		f->cold_llc_ms += k->cold_llc_ms;
		k->cold_ptxas_ms = NAN;
		if (!ok_ptxas)
			continue;
		snprintf(cub, sizeof cub, "%s/cold/%s.cubin", g.tmp, k->name);
		char *ptxas[] = { (char *)g.ptxas, "-arch=sm_90a", out, "-o", cub, NULL };
		k->cold_ptxas_ms = run_cold(ptxas, out);
		f->cold_ptxas_ms += k->cold_ptxas_ms;
	}
}
