/*
 * server: the master process. Owns the listening socket, the client
 * connections, the store and the worker pool, all on one libevent loop.
 */
#ifndef PTXCACHE_SERVER_H
#define PTXCACHE_SERVER_H

#include <stdint.h>

#include "daemon/worker.h"

struct server_config {
	const char *socket_path;
	const char *cache_dir;
	int64_t max_size;       /* cache size cap in bytes; 0 = none */
	uint32_t max_frame;     /* largest request body accepted */
	struct pool_config pool;
};

/* Run the daemon until SIGTERM or SIGINT. Returns the exit status. */
int server_run(const struct server_config *cfg);

#endif
