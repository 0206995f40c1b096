/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_fresh: Inductor's case, -lineinfo cubins of fresh runs: the share
 * of a second fresh run's requests that hit, its source files in another
 * directory of the same length.
 */
#include "bench/bench.h"

/*
 * Inductor's case: every Triton PTX of the corpus assembled with -lineinfo
 * as a first run sends it (its .file naming a fresh cache directory, the
 * source file written just now), then as a second fresh run (another
 * directory of the same length, the file written again). The figure is the
 * share of the second run's requests that hit (goal: 100%).
 */
double fresh_runs(const struct daemon *d)
{
	static const char *const args[] = { "--generate-line-info", "--gpu-name=sm_90a" };
	DIR *dir = opendir(g.corpus);
	struct dirent *e;
	int n = 0, hits = 0;

	if (!dir)
		return NAN;
	ptxcache *pc = connect_or_die(d->sock);
	while ((e = readdir(dir))) {
		size_t l = strlen(e->d_name), len;
		char path[600], src[700], *ptx, *q, *b;
		if (l < 11 || strcmp(e->d_name + l - 11, ".triton.ptx"))
			continue;
		snprintf(path, sizeof path, "%s/%s", g.corpus, e->d_name);
		if (!(ptx = read_file(path, &len)))
			continue;
		if (!(q = strstr(ptx, ".file\t1 \"")) || !(b = strchr(q + 9, '"'))) {
			free(ptx);
			continue;
		}
		const char *name = q + 9;
		const char *slash = memrchr(name, '/', (size_t)(b - name));
		if (!slash) {
			free(ptx);
			continue;
		}
		for (int run = 0; run < 2; run++) {
			char d2[400];
			struct stat st;
			snprintf(d2, sizeof d2, "%s/fresh%d", g.tmp, run);
			mkdir(d2, 0700);
			snprintf(src, sizeof src, "%s/%.*s", d2, (int)(b - slash - 1), slash + 1);
			FILE *f = fopen(src, "w");
			if (!f || fprintf(f, "# kernel %s\n", e->d_name) < 0 || fclose(f) != 0 ||
			    stat(src, &st) < 0)
				die("cannot write '%s'", src);
			size_t pre = (size_t)(name - ptx), post = len - (size_t)(b - ptx);
			char *p2 = malloc(pre + strlen(src) + post + 1);
			if (!p2)
				die("out of memory");
			memcpy(p2, ptx, pre);
			memcpy(p2 + pre, src, strlen(src));
			memcpy(p2 + pre + strlen(src), b, post);
			p2[pre + strlen(src) + post] = '\0';
			/* Every .file's stamps, as the front sends them. */
			char sources[8192];
			size_t sl = 0;
			for (const char *f1 = p2; (f1 = strstr(f1, "\t.file\t")); f1++) {
				const char *o = strchr(f1, '"'), *c = o ? strchr(o + 1, '"') : NULL;
				char fp[600];
				if (!c || (size_t)(c - o) >= sizeof fp || sl + 700 > sizeof sources)
					break;
				snprintf(fp, sizeof fp, "%.*s", (int)(c - o - 1), o + 1);
				if (stat(fp, &st) == 0)
					sl += (size_t)snprintf(sources + sl, sizeof sources - sl,
							       "%s\t%lld:%lld\n", fp,
							       (long long)st.st_mtime,
							       (long long)st.st_size);
				else
					sl += (size_t)snprintf(sources + sl, sizeof sources - sl,
							       "%s\t-\n", fp);
			}
			struct ptxcache_assemble_req a;
			struct ptxcache_result res;
			ptxcache_assemble_req_init(&a);
			a.input = p2;
			a.input_len = pre + strlen(src) + post;
			a.args = args;
			a.nargs = 2;
			a.sources = sources;
			if (ptxcache_assemble(pc, &a, &res) < 0)
				die("%s: %s", e->d_name, ptxcache_errmsg(pc));
			if (run == 1) {
				n++;
				hits += res.status == PTXCACHE_OK && res.cached;
			}
			ptxcache_result_free(&res);
			free(p2);
			unlink(src);
		}
		free(ptx);
	}
	closedir(dir);
	ptxcache_close(pc);
	return n ? 100.0 * hits / n : NAN;
}
