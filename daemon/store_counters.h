/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_counters: what the store counts since it opened (store_counters()
 * in store.h reads them), apart so that the store's private header
 * (store_int.h), which keeps them, stands below the store's contract.
 */
#ifndef PTXCACHE_STORE_COUNTERS_H
#define PTXCACHE_STORE_COUNTERS_H

#include <stdint.h>

struct store_counters {
	int64_t corrupt_blobs;  /* blobs that failed their checksum */
	int64_t write_errors;   /* puts that failed */
	int64_t evictions;      /* entries removed by the size cap */
	int64_t share_evictions;/* artifacts removed by their scope's share */
	int64_t full_retries;   /* puts that found the disk full, evicted the
	                           oldest entries and tried once more */
	/* From store_set_checkpointer()'s thread (0 without one): */
	int64_t checkpoints;    /* the WAL's checkpoints it ran */
	int64_t checkpoint_errors; /* ... that failed */
	int checkpointing;      /* one queued or running now */
};

#endif
