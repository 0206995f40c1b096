/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxcached: entry point. Settings come from config.c; the daemon itself
 * is server.c (the master's loop, which drives the rest); this file only
 * picks the mode (serve, verify a stopped cache, or be a worker: the image
 * worker_spawn.c execs).
 */
#include <stdio.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/server.h"
#include "daemon/store.h"
#include "daemon/worker.h"

int main(int argc, char **argv)
{
	struct server_config cfg = { 0 };
	const char *mode;
	int code;

	/* A worker: exec'd by the pool (worker.c), never by hand. */
	if (argc == 2 && !strcmp(argv[1], "--worker"))
		return worker_run();

	int r = config_load(&cfg, argc, argv, &code, &mode);
	if (r != 0)
		return code;
	if (mode && !strcmp(mode, "verify")) {
		struct buf err = BUF_INIT, report = BUF_INIT;
		struct store *s = store_open(cfg.cache_dir, 0, &err);
		if (!s) {
			fprintf(stderr, "ptxcached: %s\n", err.data);
			return 1;
		}
		int problems = store_verify(s, NULL, &report);
		store_close(s);
		fputs(report.data ? report.data : "", stdout);
		buf_free(&report);
		buf_free(&err);
		if (problems < 0) {
			fprintf(stderr, "ptxcached: cannot verify '%s'\n", cfg.cache_dir);
			return 1;
		}
		printf("%d problem%s found\n", problems, problems == 1 ? "" : "s");
		return problems ? 1 : 0;
	}
	return server_run(&cfg);
}
