-- SPDX-License-Identifier: Apache-2.0
-- ptxcache cache database schema (cache.db). Embedded into the daemon at
-- build time and applied at every open, so every statement here must be
-- idempotent. Bump meta.schema_version (and STORE_SCHEMA_VERSION in
-- daemon/store.c) on any incompatible change: a cache whose version differs
-- is moved aside and a fresh one created (it is a cache, nothing is lost that
-- cannot be recompiled).

CREATE TABLE IF NOT EXISTS meta (
	name  TEXT PRIMARY KEY NOT NULL,
	value TEXT NOT NULL
) WITHOUT ROWID;

INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', '3');

-- One row per cache entry. A rowid table (not WITHOUT ROWID): rows carry
-- blobs of tens of KB to MBs, which belong in a table b-tree whose interior
-- pages hold only rowids; the key's own index stays small. The small columns
-- come first and the blobs last, so listing, eviction and explain never
-- walk a blob's overflow pages.
CREATE TABLE IF NOT EXISTS entries (
	key        BLOB PRIMARY KEY NOT NULL CHECK (length(key) = 32),
	kind       INTEGER NOT NULL,          -- 1 ptx, 2 cubin, 3 artifact (enum store_kind)
	status     INTEGER NOT NULL,          -- 0 compiled; else a negative entry
	arch       TEXT NOT NULL DEFAULT '',  -- "sm_90a"
	created    INTEGER NOT NULL,          -- unix time, microseconds
	last_used  INTEGER NOT NULL,          -- unix time, microseconds (LRU)
	hits       INTEGER NOT NULL DEFAULT 0,
	compile_us INTEGER NOT NULL DEFAULT 0,
	producer   INTEGER NOT NULL DEFAULT -1, -- the tenant (uid, tenant.h's number) whose worker computed it
	trust      INTEGER NOT NULL DEFAULT 0,  -- 0 unconfirmed, 1 confirmed, 2 quarantined
	scope      INTEGER NOT NULL DEFAULT -1, -- artifacts: who may read it (artifact.h)
	ns         TEXT NOT NULL DEFAULT '',    -- artifacts: the client's namespace
	size       INTEGER NOT NULL,          -- bytes this entry takes (cap accounting)
	data_len   INTEGER NOT NULL,          -- raw length of data
	log_len    INTEGER NOT NULL,          -- raw length of log
	checksum   INTEGER NOT NULL,          -- XXH64 of raw data, then raw log
	components TEXT NOT NULL,             -- JSON object of the key's components
	data       BLOB NOT NULL,             -- one zstd frame, or empty if data_len = 0
	log        BLOB NOT NULL              -- one zstd frame, or empty if log_len = 0
);

-- LRU eviction walks this index alone (it covers last_used, size, rowid).
CREATE INDEX IF NOT EXISTS entries_lru ON entries (last_used, size);
-- Listing, newest first.
CREATE INDEX IF NOT EXISTS entries_created ON entries (created);
-- Artifacts of one scope, oldest first: the per-scope share's eviction and
-- its total walk this index alone.
CREATE INDEX IF NOT EXISTS entries_scope ON entries (scope, last_used, size) WHERE kind = 3;

-- Tenants by socket (daemon/tenant.h): each name's number, which the
-- tenant's identities, producers and artifact scopes are derived from.
-- AUTOINCREMENT: a number is never given again, even once its row is gone.
CREATE TABLE IF NOT EXISTS tenants (
	id   INTEGER PRIMARY KEY AUTOINCREMENT,
	name TEXT UNIQUE NOT NULL
);

-- Who may see an entry in ls, show, explain and verify (daemon/manage.c):
-- the identities (tenant.h's numbers, conn_tenant()) that stored it or
-- were answered with it. Written with the hit bookkeeping (store_flush()),
-- never on the hit path. An entry's rows go with it: deleted (eviction,
-- purge, a corrupt row) or replaced (a put's upsert sets created anew).
CREATE TABLE IF NOT EXISTS entry_users (
	key      BLOB NOT NULL,
	identity INTEGER NOT NULL,
	PRIMARY KEY (key, identity)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS entry_users_deleted AFTER DELETE ON entries BEGIN
	DELETE FROM entry_users WHERE key = old.key;
END;

CREATE TRIGGER IF NOT EXISTS entry_users_replaced AFTER UPDATE OF created ON entries BEGIN
	DELETE FROM entry_users WHERE key = old.key;
END;
