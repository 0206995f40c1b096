/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The drop-in llc front of the ptxcache CLI (client/llc.c).
 */
#ifndef PTXCACHE_LLC_FRONT_H
#define PTXCACHE_LLC_FRONT_H

/*
 * Run `llc ARGS...` through the daemon at socket_path (NULL: the library's
 * rules): argv[1..argc) are llc's arguments. Returns the exit status llc
 * would have, dies of the signal llc would die of, or does not return
 * because it execs the real llc (see llc.c).
 */
int cmd_llc(int argc, char **argv, const char *socket_path, int timeout_ms);

#endif
