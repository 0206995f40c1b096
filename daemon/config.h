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

#include "daemon/server.h"
#include "proto/buf.h"

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
