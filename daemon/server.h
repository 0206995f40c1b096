/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server: the master process. Owns the listening socket, the client
 * connections, the store and the worker pool, all on one libevent loop.
 */
#ifndef PTXCACHE_SERVER_H
#define PTXCACHE_SERVER_H

#include "daemon/config.h"

/* Run the daemon until SIGTERM or SIGINT (SIGHUP reloads cfg through
 * config_reload()). Returns the exit status. */
int server_run(struct server_config *cfg);

#endif
