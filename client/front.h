/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the drop-in fronts (client/llc.c, client/ptxas.c) share: finding
 * the real tool they stand in for, handing a command over to it, and
 * reading and writing files as the tool would.
 */
#ifndef PTXCACHE_FRONT_H
#define PTXCACHE_FRONT_H

#include <stddef.h>

#include "proto/buf.h"

/* 1 if path is a regular executable file other than this very binary (a
 * front must never find itself as "the real tool"). */
int front_usable(const char *path);

/*
 * Run the real tool at path with argv[1..] as given (argv[0] becomes path),
 * with guard set in its environment so that a "real" tool that leads back
 * to a front is caught there. Returns only on failure, with a message on
 * stderr.
 */
void front_exec(const char *path, char **argv, const char *guard);

/* Read a whole file ("-": stdin) into out. 0, or -1 with errno set. */
int front_read_file(const char *path, struct buf *out);

/* Write p to path ("-": stdout) whole or not at all: a temporary file
 * renamed over it, so that a build never sees half an output. 0 or -1. */
int front_write_file(const char *path, const void *p, size_t n);

/* Write a daemon's log to stderr with the input's real name put back: the
 * daemon names every input "<stdin>" (so that cache entries do not depend
 * on file names). name NULL: leave "<stdin>". */
void front_print_log(const char *log, size_t len, const char *name);

#endif
