/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config: every setting of ptxcached, from one table.
 *
 * A setting comes from, in order of precedence: a command-line flag
 * (--name VALUE), the environment (PTXCACHE_NAME), the configuration file
 * (/etc/ptxcache/ptxcached.conf or --config PATH: "name = value" lines,
 * '#' comments), or its default. The same table produces --help, parses the
 * file, and prints the effective values with their sources
 * (--print-config). Settings marked reloadable take effect on SIGHUP.
 */
#ifndef PTXCACHE_CONFIG_H
#define PTXCACHE_CONFIG_H

#include <stdint.h>

#include "daemon/worker.h"
#include "proto/buf.h"

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

/*
 * Fill cfg from defaults, the file, the environment and argv (argv wins).
 * Handles --help, --version and --print-config itself (prints, then
 * *exit_code is set and 1 returned). Returns 0 to go on, 1 to exit with
 * *exit_code, -1 on a bad setting (message printed, *exit_code 2).
 * Other flags that are not settings (--verify) come back in *mode.
 */
int config_load(struct server_config *cfg, int argc, char **argv,
		int *exit_code, const char **mode);

/* Re-read the file and the environment (flags keep precedence) and copy the
 * reloadable settings into cfg. Returns 0, or -1 with a message in err
 * (cfg unchanged). Messages about changed settings that need a restart are
 * logged. */
int config_reload(struct server_config *cfg, struct buf *err);

/* Lists of users or groups ("alice, 1001 render", the access and sharing
 * settings): copies the next item of *p into item (n bytes, NUL included;
 * longer items are skipped) and returns 1, or 0 at the list's end. */
int config_list_next(const char **p, char *item, size_t n);

/* The id an item names: a number, or a group's (is_group) or user's name.
 * 1 and *id set, or 0 where no such group or user exists. */
int config_list_id(const char *item, int is_group, unsigned *id);

#endif
