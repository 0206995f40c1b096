/* SPDX-License-Identifier: Apache-2.0 */
/*
 * probe: test-only attacks from inside a worker (probe.c); only in the
 * PTXCACHE_PROBES build.
 */
#ifndef PTXCACHE_PROBE_H
#define PTXCACHE_PROBE_H

#include <stddef.h>

#include "proto/buf.h"

/* If input begins with a probe line, run that attack, write its outcome to
 * log and return 1; else 0. */
int probe_run(const char *input, size_t len, struct buf *log);

/* Set by the "fatal-linger" probe: MiB to write after a fatal reply, then
 * sleep rather than exit (-1: not set). */
extern long probe_linger_mb;

/* Set by the "compromise" probe: the worker alters every PTX it returns. */
extern int probe_compromised;
#define PROBE_ALTERED "// altered by a compromised worker\n"

#endif
