/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_fault: a testing seam for store.c, SQLite's own way
 * (SQLITE_CONFIG_MALLOC and a VFS shim). Linked into the unit tests
 * (tests/unit/test_faults.c) only; the daemon has none of it, so its
 * SQLite is untouched.
 */
#ifndef PTXCACHE_STORE_FAULT_H
#define PTXCACHE_STORE_FAULT_H

/*
 * The first call installs a malloc wrapper and a pass-through VFS as
 * SQLite's default, and must come before any database is open in the
 * process (it runs sqlite3_shutdown()). From each
 * call on, the nth SQLite allocation (STORE_FAULT_ALLOC), file write
 * (STORE_FAULT_WRITE: SQLITE_IOERR_WRITE; STORE_FAULT_FULL: the first half
 * written, then SQLITE_FULL, like a disk filling up mid-write) or fsync
 * (STORE_FAULT_SYNC) fails; with persist, every one after it fails too.
 * STORE_FAULT_NONE (or nth 0) turns injection off. tests/unit/test_faults.c
 * runs an operation for n = 1, 2, ... until it succeeds.
 */
enum store_fault {
	STORE_FAULT_NONE,
	STORE_FAULT_ALLOC,
	STORE_FAULT_WRITE,
	STORE_FAULT_FULL,
	STORE_FAULT_SYNC,
};
/* Returns 0, or -1 if the seam cannot be installed. */
int store_fault_inject(enum store_fault kind, long nth, int persist);

struct store_fault_stats {
	long seen;              /* operations of the armed kind since armed */
	long fired;             /* of them, failed on purpose */
	long allocs;            /* SQLite allocations outstanding now */
};
void store_fault_stats(struct store_fault_stats *st);

#endif
