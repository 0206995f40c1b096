/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manage: the stats and cache-management requests (stats, ls, show,
 * explain, verify, evict; purge is evict with all). See manage.c.
 */
#ifndef PTXCACHE_MANAGE_H
#define PTXCACHE_MANAGE_H

#include "daemon/master.h"

/* This family's part of the request table. */
extern const struct request_table manage_requests;

#endif
