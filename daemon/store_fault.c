/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_fault: the testing seam of store_fault.h, the way SQLite tests
 * itself: allocations go through a wrapper installed with
 * SQLITE_CONFIG_MALLOC, file I/O through a VFS that forwards to the
 * default one ("unix"). Both count operations of the armed kind and fail
 * the nth. Only the unit tests link this file.
 */
#include "daemon/store_fault.h"

#include <string.h>

#include <sqlite3.h>

static struct {
	int installed;
	enum store_fault kind;
	long nth, seen, fired, allocs;
	int persist;
	sqlite3_mem_methods mem;        /* SQLite's own allocator */
	sqlite3_vfs *real;              /* the VFS we forward to */
} fault;

/* Does this operation of kind k fail? */
static int fault_fires(enum store_fault k)
{
	if (fault.kind != k || fault.nth <= 0)
		return 0;
	fault.seen++;
	if (fault.seen < fault.nth || (fault.seen > fault.nth && !fault.persist))
		return 0;
	fault.fired++;
	return 1;
}

static void *fault_malloc(int n)
{
	if (fault_fires(STORE_FAULT_ALLOC))
		return NULL;
	void *p = fault.mem.xMalloc(n);
	if (p)
		fault.allocs++;
	return p;
}

static void fault_free(void *p)
{
	if (p)
		fault.allocs--;
	fault.mem.xFree(p);
}

static void *fault_realloc(void *p, int n)
{
	if (fault_fires(STORE_FAULT_ALLOC))
		return NULL;
	return fault.mem.xRealloc(p, n);
}

static int fault_size(void *p)
{
	return fault.mem.xSize(p);
}

static int fault_roundup(int n)
{
	return fault.mem.xRoundup(n);
}

static int fault_mem_init(void *app)
{
	return fault.mem.xInit(app);
}

static void fault_mem_shutdown(void *app)
{
	fault.mem.xShutdown(app);
}

/* A file of the shim: ours first, the real VFS's file FF_HDR bytes on. */
struct fault_file {
	sqlite3_file base;
	sqlite3_file *real;
};

#define FF_HDR ((sizeof(struct fault_file) + 15) / 16 * 16)

#define REAL(f) (((struct fault_file *)(f))->real)

static int ff_close(sqlite3_file *f)
{
	return REAL(f)->pMethods->xClose(REAL(f));
}

static int ff_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
	return REAL(f)->pMethods->xRead(REAL(f), p, n, off);
}

static int ff_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
	if (fault_fires(STORE_FAULT_WRITE))
		return SQLITE_IOERR_WRITE;
	if (fault_fires(STORE_FAULT_FULL)) {
		/* A torn write: what fits goes to disk, the rest does not. */
		if (n > 1)
			REAL(f)->pMethods->xWrite(REAL(f), p, n / 2, off);
		return SQLITE_FULL;
	}
	return REAL(f)->pMethods->xWrite(REAL(f), p, n, off);
}

static int ff_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int ff_sync(sqlite3_file *f, int flags)
{
	if (fault_fires(STORE_FAULT_SYNC))
		return SQLITE_IOERR_FSYNC;
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int ff_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	return REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int ff_lock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xLock(REAL(f), l);
}

static int ff_unlock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), l);
}

static int ff_check_lock(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int ff_control(sqlite3_file *f, int op, void *arg)
{
	return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int ff_sector_size(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int ff_device_chars(sqlite3_file *f)
{
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int ff_shm_map(sqlite3_file *f, int pg, int sz, int extend, void volatile **pp)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, extend, pp);
}

static int ff_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
	return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}

static void ff_shm_barrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int ff_shm_unmap(sqlite3_file *f, int del)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static int ff_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
	return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}

static int ff_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
	return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods fault_io = {
	.iVersion = 3,
	.xClose = ff_close,
	.xRead = ff_read,
	.xWrite = ff_write,
	.xTruncate = ff_truncate,
	.xSync = ff_sync,
	.xFileSize = ff_file_size,
	.xLock = ff_lock,
	.xUnlock = ff_unlock,
	.xCheckReservedLock = ff_check_lock,
	.xFileControl = ff_control,
	.xSectorSize = ff_sector_size,
	.xDeviceCharacteristics = ff_device_chars,
	.xShmMap = ff_shm_map,
	.xShmLock = ff_shm_lock,
	.xShmBarrier = ff_shm_barrier,
	.xShmUnmap = ff_shm_unmap,
	.xFetch = ff_fetch,
	.xUnfetch = ff_unfetch,
};

static int fault_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file,
		      int flags, int *out_flags)
{
	struct fault_file *ff = (struct fault_file *)file;

	ff->real = (sqlite3_file *)((char *)ff + FF_HDR);
	int rc = fault.real->xOpen(fault.real, name, ff->real, flags, out_flags);
	/* Methods only on success: SQLite closes only files that have them. */
	ff->base.pMethods = ff->real->pMethods ? &fault_io : NULL;
	return rc;
}

static sqlite3_vfs fault_vfs;

int store_fault_inject(enum store_fault kind, long nth, int persist)
{
	static const sqlite3_mem_methods wrap = {
		.xMalloc = fault_malloc,
		.xFree = fault_free,
		.xRealloc = fault_realloc,
		.xSize = fault_size,
		.xRoundup = fault_roundup,
		.xInit = fault_mem_init,
		.xShutdown = fault_mem_shutdown,
	};

	if (!fault.installed) {
		if (sqlite3_shutdown() != SQLITE_OK ||
		    sqlite3_config(SQLITE_CONFIG_GETMALLOC, &fault.mem) != SQLITE_OK ||
		    sqlite3_config(SQLITE_CONFIG_MALLOC, &wrap) != SQLITE_OK ||
		    sqlite3_initialize() != SQLITE_OK)
			return -1;
		fault.real = sqlite3_vfs_find(NULL);
		if (!fault.real || fault.real->iVersion < 1)
			return -1;
		fault_vfs = *fault.real;
		fault_vfs.szOsFile = (int)FF_HDR + fault.real->szOsFile;
		fault_vfs.zName = "ptxcache-fault";
		fault_vfs.xOpen = fault_open;
		fault_vfs.pNext = NULL;
		if (sqlite3_vfs_register(&fault_vfs, 1) != SQLITE_OK)
			return -1;
		fault.installed = 1;
	}
	fault.kind = nth > 0 ? kind : STORE_FAULT_NONE;
	fault.nth = nth;
	fault.persist = persist;
	fault.seen = fault.fired = 0;
	return 0;
}

void store_fault_stats(struct store_fault_stats *st)
{
	st->seen = fault.seen;
	st->fired = fault.fired;
	st->allocs = fault.allocs;
}
