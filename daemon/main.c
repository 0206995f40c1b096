/*
 * ptxcached: entry point. Settings come from config.c; the daemon itself
 * is server.c; this file only picks the mode (serve, or verify a stopped
 * cache).
 */
#include <stdio.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/server.h"
#include "daemon/store.h"

int main(int argc, char **argv)
{
	struct server_config cfg = { 0 };
	const char *mode;
	int code;

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
		int problems = store_verify(s, &report);
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
