/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server: the master process. Owns the listening socket, the client
 * connections, the store and the worker pool, all on one libevent loop.
 */
#ifndef PTXCACHE_SERVER_H
#define PTXCACHE_SERVER_H

#include <stdint.h>

#include "daemon/worker.h"

/* Filled by config.c; the fields marked (live) change on SIGHUP. */
struct server_config {
	const char *socket_path;
	int socket_mode;        /* of the sockets the daemon makes */
	const char *socket_group; /* their group: a name, a gid, "" */
	const char *tenant_dir; /* the tenants' sockets' directory (live) */
	const char *tenants;    /* their names, comma-separated (live;
	                           tenant.h) */
	const char *cache_dir;
	int64_t max_size;       /* cache size cap in bytes; 0 = none (live) */
	int64_t max_frame;      /* largest request body accepted (live) */
	int max_conns;          /* open connections in all (live) */
	int max_conns_per_uid;  /* open connections per peer uid (live) */
	int64_t max_queued_bytes;       /* requests of compiles not done, in
	                                   all; past it new ones are refused
	                                   (live) */
	int64_t max_queued_bytes_per_uid; /* the same per uid (live) */
	int header_timeout_s;   /* a started frame must be complete in this (live) */
	int idle_timeout_s;     /* a connection with nothing to do is closed (live) */
	int64_t max_output;     /* queued reply bytes per connection (live) */
	int shutdown_timeout_s; /* SIGTERM: how long in-flight compiles may run */
	int idle_exit_s;        /* stop after this long idle; 0 never (idle.c, live) */
	const char *allow_users;  /* comma-separated names or uids (live) */
	const char *allow_groups; /* comma-separated names or gids (live) */
	int namespace_per_uid;  /* each user gets their own cache entries */
	const char *sharing;    /* confirm, trust or separate (confirm.h) */
	int lineinfo_loose;     /* a -lineinfo cubin naming other source paths
	                           or stamps is an acceptable answer (live) */
	int64_t artifact_max_value;  /* largest artifact value (live) */
	int artifact_share;     /* percent of max_size one scope's artifacts
	                           may take (live) */
	int artifact_lease_timeout_s; /* (live) */
	int artifact_wait_s;    /* the longest an artifact get waits (live) */
	int artifact_max_leases;/* leases one scope may hold (live) */
	const char *artifact_groups; /* groups sharing one scope (live) */
	const char *l2_url;     /* the Redis tier ("" = off) */
	const char *l2_secret_file;
	const char *l2_prefix;
	int l2_read_only;
	int l2_timeout_ms;
	int64_t l2_max_value;
	int l2_lease_timeout_s;
	int log_level;          /* (live) */
	const char *ptxas;      /* ptxas for cubin requests; "" search, "none" */
	const char *nvjitlink;  /* libnvJitLink.so.13; "" search, "none" */
	struct pool_config pool;
};

/* Run the daemon until SIGTERM or SIGINT (SIGHUP reloads cfg through
 * config_reload()). Returns the exit status. */
int server_run(struct server_config *cfg);

#endif
