/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The drop-in ptxas front of the ptxcache CLI (client/ptxas.c).
 */
#ifndef PTXCACHE_PTXAS_FRONT_H
#define PTXCACHE_PTXAS_FRONT_H

#include <stddef.h>

/*
 * Run `ptxas ARGS...` through the daemon: argv[0] is the name it was called
 * by, argv[1..argc) are ptxas's arguments. Returns the exit status the real
 * ptxas would have (or does not return: it execs the real ptxas when it
 * cannot or should not answer itself). The socket is $PTXCACHE_SOCKET, else
 * the library's default.
 */
int cmd_ptxas(int argc, char **argv);

/*
 * `ptxcache explain --ptxas ARGS...`: the daemon's explain answer (JSON,
 * malloc'd into *json) for the cubin request this ptxas command line
 * (argv[0..argc), without a program name) would send. Returns 0, or -1
 * with a message in err (the call is not cacheable, the daemon is down).
 */
int ptxas_explain(int argc, char **argv, char **json, char *err, size_t errlen);

struct buf;
/* The source files the PTX's .file directives name, as this process sees
 * them: one "PATH\tMTIME:SIZE\n" or "PATH\t-\n" line each, appended to
 * out. Returns 0, or -1 for a relative path. */
int ptxas_source_stamps(const struct buf *ptx, struct buf *out);

#endif
