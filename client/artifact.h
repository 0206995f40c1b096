/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `ptxcache artifact get|put`: the JIT's own cache entries from a script
 * or a test (proto/PROTOCOL.md, "Artifacts").
 */
#ifndef PTXCACHE_CLIENT_ARTIFACT_H
#define PTXCACHE_CLIENT_ARTIFACT_H

/* argv[0] is "artifact". Exits as grep does: 0 found (get) or stored
 * (put), 1 not found, 2 an error. */
int cmd_artifact(int argc, char **argv, const char *socket_path, int timeout_ms);

#endif
