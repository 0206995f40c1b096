/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scn_artifact: a JIT cache artifact's hit (ptxcache_artifact_get) of
 * 4 KiB and of 4 MiB, against the floor for the same frame sizes.
 */
#include "bench/bench.h"

/*
 * An artifact hit's round trip against the floor, for a small value (an
 * Inductor graph's entry) and a large one (a bundle of kernels): the get
 * and the echo alternate, with the frame sizes the get moves.
 */
void artifact_runs(struct figures *f, const struct daemon *d)
{
	static const size_t sizes[2] = { 4 << 10, 4 << 20 };
	int n = g.quick ? 50 : 200;
	double *hit = calloc((size_t)n, sizeof *hit), *flo = calloc((size_t)n, sizeof *flo);
	char path[400];

	snprintf(path, sizeof path, "%s/floor-artifact.sock", g.tmp);
	pid_t fpid = floor_start(path, sizes[1] + 4096);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	set_path(&sa, path);
	int ffd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char *req = calloc(1, sizes[1] + 4096 + 8), *rep = malloc(sizes[1] + 4096);
	if (!hit || !flo || !req || !rep)
		die("out of memory");
	if (ffd < 0 || connect(ffd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("cannot connect to the floor server: %s", strerror(errno));
	ptxcache *pc = connect_or_die(d->sock);
	for (int z = 0; z < 2; z++) {
		char key[64];
		char *value = malloc(sizes[z]);
		if (!value)
			die("out of memory");
		for (size_t i = 0; i < sizes[z]; i++)
			value[i] = (char)(i * 2654435761u >> 13);
		snprintf(key, sizeof key, "bench-%zu", sizes[z]);
		if (ptxcache_artifact_put(pc, "bench", key, value, sizes[z], 0) < 0)
			die("artifact put: %s", ptxcache_errmsg(pc));
		/* The frames a get moves: the request, and the reply with the value. */
		struct buf b = BUF_INIT;
		struct msg_writer w;
		msg_begin(&w, &b, FRAME_ARTIFACT_GET);
		msg_put_int(&w, "id", 1000);
		msg_put_str(&w, "ns", "bench");
		msg_put_str(&w, "key", key);
		msg_end(&w);
		uint32_t hdr[2] = { (uint32_t)b.len, 0 };
		buf_reset(&b);
		msg_begin(&w, &b, FRAME_ARTIFACT_GET | FRAME_REPLY);
		msg_put_int(&w, "id", 1000);
		msg_put_bool(&w, "found", 1);
		msg_put_bin(&w, "value", value, sizes[z]);
		msg_end(&w);
		hdr[1] = (uint32_t)b.len;
		buf_free(&b);
		memcpy(req, hdr, sizeof hdr);
		for (int i = 0; i < n; i++) {
			double t0 = bench_now_ms();
			if (write_full(ffd, req, 8 + hdr[0]) < 0 || read_full(ffd, rep, hdr[1]) < 0)
				die("floor server failed");
			flo[i] = (bench_now_ms() - t0) * 1e3;
			struct ptxcache_artifact a;
			t0 = bench_now_ms();
			if (ptxcache_artifact_get(pc, "bench", key, 0, 0, &a) < 0 || !a.found ||
			    a.len != sizes[z] || memcmp(a.value, value, sizes[z]))
				die("artifact get: not the value put (%s)", ptxcache_errmsg(pc));
			hit[i] = (bench_now_ms() - t0) * 1e3;
			ptxcache_artifact_free(&a);
		}
		f->art_hit_us[z] = quantile(hit, (size_t)n, 0.5);
		f->art_floor_us[z] = quantile(flo, (size_t)n, 0.5);
		free(value);
	}
	ptxcache_close(pc);
	close(ffd);
	waitpid(fpid, NULL, 0);
	free(hit);
	free(flo);
	free(req);
	free(rep);
}
