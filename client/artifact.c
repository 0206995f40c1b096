/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `ptxcache artifact`: get and put one artifact.
 *
 *   ptxcache artifact get NS KEY [-o FILE]   the value to FILE (default
 *                                            stdout); waits for a client
 *                                            producing it, takes no lease
 *   ptxcache artifact put NS KEY FILE        FILE's bytes ("-": stdin)
 *
 * A get never takes a lease: a script that only reads must not make
 * others wait for a value it will not produce. A put takes none either:
 * it is refused (exit 2) while another client is producing that key.
 */
#include "client/artifact.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/front.h"
#include "client/ptxcache.h"

static const char usage[] =
	"usage: ptxcache artifact get NS KEY [-o FILE] [--wait SECS]\n"
	"       ptxcache artifact put NS KEY FILE\n"
	"\n"
	"The JIT's own cache entries, in your scope (your uid, or a group the\n"
	"daemon shares). NS: 1 to 32 of [a-z0-9._-] (triton, inductor-fx);\n"
	"KEY: 1 to 1024 printable ASCII bytes. get waits for another client\n"
	"producing KEY (at most --wait seconds, default the daemon's\n"
	"artifact-wait). Exit status: 0 found or stored, 1 not found, 2 error.\n";

static int fail(ptxcache *pc, const char *what)
{
	fprintf(stderr, "ptxcache: artifact %s: %s\n", what, pc ? ptxcache_errmsg(pc) : "");
	ptxcache_close(pc);
	return 2;
}

int cmd_artifact(int argc, char **argv, const char *socket_path, int timeout_ms)
{
	const char *out = "-";
	int wait_ms = -1;
	char err[512];

	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(usage, stdout);
		return 0;
	}
	int get = argc >= 4 && !strcmp(argv[1], "get");
	int put = argc == 5 && !strcmp(argv[1], "put");
	for (int i = 4; get && i < argc; i++) {
		if (!strcmp(argv[i], "-o") && i + 1 < argc) {
			out = argv[++i];
		} else if (!strcmp(argv[i], "--wait") && i + 1 < argc) {
			char *end;
			double s = strtod(argv[++i], &end);
			if (*end || s < 0 || s > 86400)
				get = 0;
			wait_ms = (int)(s * 1000);
		} else {
			get = 0;
		}
	}
	if (!get && !put) {
		fputs(usage, stderr);
		return 2;
	}
	const char *ns = argv[2], *key = argv[3];
	struct buf value = BUF_INIT;
	if (put && front_read_file(argv[4], &value) < 0) {
		fprintf(stderr, "ptxcache: cannot read '%s': %s\n", argv[4], strerror(errno));
		return 2;
	}
	ptxcache *pc = ptxcache_connect(socket_path, timeout_ms, err, sizeof err);
	if (!pc) {
		fprintf(stderr, "ptxcache: %s\n", err);
		buf_free(&value);
		return 2;
	}
	if (put) {
		int rc = ptxcache_artifact_put(pc, ns, key, value.data, value.len, 0);
		buf_free(&value);
		if (rc < 0)
			return fail(pc, "put");
		ptxcache_close(pc);
		return 0;
	}
	struct ptxcache_artifact a;
	if (ptxcache_artifact_get(pc, ns, key, 0, wait_ms, &a) < 0)
		return fail(pc, "get");
	ptxcache_close(pc);
	int rc = a.found ? 0 : 1;
	if (a.found && front_write_file(out, a.value, a.len) < 0) {
		fprintf(stderr, "ptxcache: cannot write '%s': %s\n", out, strerror(errno));
		rc = 2;
	}
	ptxcache_artifact_free(&a);
	return rc;
}
