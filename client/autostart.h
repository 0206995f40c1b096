/* SPDX-License-Identifier: Apache-2.0 */
/*
 * autostart: a daemon of the user's own where no node service answers.
 *
 * The fronts (client/llc.c, client/ptxas.c) connect through
 * autostart_connect(). With a socket given (--socket, $PTXCACHE_SOCKET)
 * it is that socket and nothing else: whoever named it runs it. Otherwise
 * the user's default socket, then the node's service socket; when neither
 * answers, and $PTXCACHE_AUTOSTART is not "0", ptxcached is started for
 * this user, detached (double fork, setsid), on the user's default socket
 * and cache directory, its output appended to CACHE_DIR/ptxcached.log,
 * with idle-exit (900 s) and a size cap within the disk's free space, and
 * the call connects to it. The same protocol is python/ptxcache/autostart.py's
 * (keep them together): a lock file beside the socket
 * (SOCKETDIR/autostart.lock, flock) is held from the check to the moment
 * the new daemon's socket answers, so that of eight processes starting at
 * once exactly one starts a daemon and the others use it. A node service
 * that answers is always used instead.
 */
#ifndef PTXCACHE_AUTOSTART_H
#define PTXCACHE_AUTOSTART_H

#include <stddef.h>

#include "client/ptxcache.h"

/* The idle-exit the started daemon gets unless $PTXCACHE_IDLE_EXIT is set. */
#define AUTOSTART_IDLE_EXIT_S 900

/*
 * Connect as the fronts do (see above); socket_path NULL: not given on the
 * command line. Returns a handle (the caller closes it), or NULL with a
 * message in err. used, if not NULL, receives the socket connected to
 * (malloc'd, the caller frees) and how it was chosen ("given", "own",
 * "node", "started").
 */
ptxcache *autostart_connect(const char *socket_path, int timeout_ms, char *err,
			    size_t errlen, char **used, const char **how);

/*
 * Start the user's daemon on socket (the user's default) unless one
 * answers there already, under the lock; wait until its socket takes
 * connections. 0, or -1 with a message in err. Never called for a socket
 * the user gave.
 */
int autostart_start(const char *socket, char *err, size_t errlen);

#endif
