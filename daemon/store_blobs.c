/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_blobs: large values as files beside the database; see store_blobs.h for the
 * interface.
 *
 * Design:
 *  - Why files: a value of hundreds of KB and more costs SQLite a walk of
 *    its overflow pages on every read and a copy into the WAL and again
 *    into the database on every write, and a hit must be copied out of
 *    SQLite's pages before it can be sent. A file is read by the kernel
 *    straight from its page cache: sent with sendfile(), or its
 *    descriptor passed to the client (SCM_RIGHTS, conn.c), which maps or
 *    reads it itself. So the bytes are stored raw, never compressed
 *    (zstd -3 takes 2x a write+fsync of the same 64 MB, and a compressed
 *    file could not be handed over): store_put.c's measurements are in its
 *    design comment.
 *
 *  - Named by their row: <key hex>-<checksum hex>, not by content alone.
 *    Two scopes that store the same bytes get two files, so no descriptor
 *    a client is given is ever the same file as another scope's entry (an
 *    inode, a change time, a link count shared would tell one scope what
 *    another stored). A value replaced under its key gets a new name, so
 *    the row is switched to the new file by its commit, and the old one
 *    unlinked after it. The same value put again has the same name: the
 *    new file is exchanged into it (renameat2()), and the old one, left
 *    under the new one's temporary name, is unlinked by the caller, off
 *    the loop, rather than freed inside a rename over it (a 64 MB re-put
 *    took 127 ms that way, 66-79 ms now, on a 2-core VM).
 *
 *  - Durable before its row: written to a temporary name in blobs/ (its
 *    own open file, 0400 from its creation: whole by blobs_write(), or in
 *    pieces as a put's value arrives, blobs_tmp_*()), fsync'd (a put's by
 *    syncer.c's thread, blobs_tmp_sync(), off the loop), renamed into
 *    blobs/<kk>/, and that directory fsync'd; only then does store.c
 *    commit the row. A kill -9 at any point leaves either no file, a
 *    temporary file, or a file no row names; blobs_sweep() at open
 *    removes both kinds. Deletion is the other way round: the row's
 *    removal is committed first, then the file unlinked (in the daemon,
 *    renamed to a temporary name first and unlinked on a thread:
 *    blobs_retire()); a kill between leaves a file no row names, or a
 *    temporary, for the sweep.
 *
 *  - Never written again: a file is 0400 and never opened for writing
 *    once renamed; a client given its descriptor gets O_RDONLY, a new
 *    open file description each time (so no offset is shared with anyone).
 *    An unlinked file a client still holds keeps its blocks until the
 *    client closes it; the cache's size no longer counts them.
 *
 *  - Checked before served: every read hashes the bytes (XXH64, the row's
 *    checksum) unless this very file was hashed before and has not changed
 *    since, which is the (device, inode, size, mtime, ctime) it had then,
 *    kept in a small table. Any write or truncation through the
 *    filesystem changes mtime and ctime, and a file is believed unchanged
 *    only once its change time is older than the start of the hash that
 *    vouched for it by more than a timestamp tick (git's racy-entry rule:
 *    a write within the same tick would keep the old times): 50 ms where
 *    the file system keeps sub-second times, else more than 1 s (settled()).
 *    A hit on a 64 MB value then costs an fstat, not a 64 MB read. What
 *    this trusts, as the hot entries (store_hot.c) trust memory: the page
 *    cache and the disk under an unchanged inode; `verify` reads every file
 *    in full.
 *
 *  - Answers given together share a hash: between blobs_together(b, 1)
 *    and (b, 0), the gets of one key answered one after another in one
 *    turn of the loop (the waiters of a put, which find its file a moment
 *    old), a hash of a file too fresh for the table vouches for the rest
 *    of them too. What a client is promised is the bytes as they were
 *    while a hash read them, whichever get it was made for: a write after
 *    it would reach the first client's descriptor as well. Six waiters of
 *    an 8 MB put cost the daemon 8.4 MB of reads, not 50.3 MB.
 */
#include "daemon/store_blobs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "daemon/log.h"

/* Hashed files remembered (direct-mapped by inode). */
#define SEEN_SLOTS 4096
/* Read and hashed this much at a time: the daemon's memory does not grow
 * with the value. */
#define CHUNK (1u << 20)
/* Files are written in whole pieces of this size from their start (the
 * last one excepted), whatever sizes their bytes arrive in: the page cache
 * then holds them in large folios, and a read of 8 MB copies them out in
 * 0.24 ms rather than the 0.29-0.36 ms that a file written in the socket's
 * odd-sized pieces costs (Linux 6.18, ext4). */
#define PIECE (256u << 10)
/* Writeback of a file being written is started every this many bytes
 * (sync_file_range(), which only queues it): the disk is busy while the
 * rest arrives, and the fsync before the rename, which the put waits
 * for, finds less to do. For 64 MB that fsync took 26-29 ms rather than
 * 38-48 ms (Linux 6.18, ext4, a 2-core VM). */
#define WRITEBACK_STEP (4u << 20)
#define TMP_PREFIX ".tmp-"

struct seen {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
	uint64_t hash;
	int used;
};

struct blobs {
	char *dir;              /* <cache dir>/blobs */
	int dfd;                /* that directory, for the *at() calls */
	uint64_t tmp_serial;
	struct seen *seen;      /* SEEN_SLOTS, made on first use */
	int together;           /* blobs_together(): answers given together */
	struct seen fresh;      /* meanwhile, the last file hashed too fresh */
	char *chunk;            /* CHUNK bytes of read buffer, made on first use */
	char why[96];           /* a file that cannot be opened now: why */
};

static void name_of(const unsigned char key[32], int64_t sum, char sub[3], char name[90])
{
	static const char hexdig[] = "0123456789abcdef";
	char hex[65];

	for (int i = 0; i < 32; i++) {
		hex[2 * i] = hexdig[key[i] >> 4];
		hex[2 * i + 1] = hexdig[key[i] & 15];
	}
	hex[64] = '\0';
	memcpy(sub, hex, 2);
	sub[2] = '\0';
	snprintf(name, 90, "%s/%s-%016llx", sub, hex, (unsigned long long)(uint64_t)sum);
}

/* Parse "<64 hex>-<16 hex>"; 0 if it is one of ours. */
static int parse_name(const char *n, unsigned char key[32], int64_t *sum)
{
	unsigned long long v = 0;

	if (strlen(n) != 64 + 1 + 16 || n[64] != '-')
		return -1;
	for (int i = 0; i < 64 + 1 + 16; i++) {
		int c = n[i], d;
		if (i == 64)
			continue;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else
			return -1;
		if (i < 64)
			key[i / 2] = (unsigned char)(i % 2 ? key[i / 2] | d : d << 4);
		else
			v = v << 4 | (unsigned)d;
	}
	*sum = (int64_t)v;
	return 0;
}

struct blobs *blobs_open(const char *dir, struct buf *err)
{
	struct blobs *b = calloc(1, sizeof *b);

	if (!b || asprintf(&b->dir, "%s/blobs", dir) < 0) {
		free(b);
		buf_printf(err, "cannot open blob files in '%s': out of memory", dir);
		return NULL;
	}
	b->dfd = -1;
	if (mkdir(b->dir, 0700) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create '%s': %s", b->dir, strerror(errno));
		goto fail;
	}
	b->dfd = open(b->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (b->dfd < 0) {
		buf_printf(err, "cannot open '%s': %s", b->dir, strerror(errno));
		goto fail;
	}
	return b;
fail:
	blobs_close(b);
	return NULL;
}

void blobs_close(struct blobs *b)
{
	if (!b)
		return;
	if (b->dfd >= 0)
		close(b->dfd);
	free(b->seen);
	free(b->chunk);
	free(b->dir);
	free(b);
}

static int fsync_dir(int dfd, const char *sub)
{
	int fd = openat(dfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

struct blob_tmp {
	struct blobs *b;
	int fd;
	char name[BLOBS_RETIRED_MAX];   /* under blobs/, TMP_PREFIX first */
	char *stage;            /* PIECE bytes, made on first use */
	size_t staged;          /* of them, not written yet */
	off_t written;          /* bytes in the file */
	off_t queued;           /* of them, handed to writeback */
	off_t synced;           /* of them, on the disk (blobs_tmp_sync()) */
	int sync_err;           /* blobs_tmp_sync()'s failure: final */
};

struct blob_tmp *blobs_tmp_new(struct blobs *b, const char *tag, struct buf *err)
{
	struct blob_tmp *t = calloc(1, sizeof *t);
	int e;

	if (!t) {
		buf_printf(err, "cannot create a file in '%s': out of memory", b->dir);
		errno = ENOMEM;
		return NULL;
	}
	t->b = b;
	snprintf(t->name, sizeof t->name, TMP_PREFIX "%.16s-%d-%llu", tag, (int)getpid(),
		 (unsigned long long)++b->tmp_serial);
	t->fd = openat(b->dfd, t->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
	if (t->fd < 0) {
		e = errno;
		buf_printf(err, "cannot create '%s/%s': %s", b->dir, t->name, strerror(e));
		free(t);
		errno = e;
		return NULL;
	}
	return t;
}

/* Write all of [p, p + len) at the file's end: 0, or -1 with errno and
 * a message in err, *done saying how much went. In WRITEBACK_STEP slices,
 * the writeback of each started once it is written. */
static int write_all(struct blob_tmp *t, const char *p, size_t len, size_t *done,
		     struct buf *err)
{
	size_t off = 0;

	while (off < len) {
		size_t n = len - off > WRITEBACK_STEP ? WRITEBACK_STEP : len - off;
		ssize_t w = write(t->fd, p + off, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			buf_printf(err, "cannot write '%s/%s': %s", t->b->dir, t->name, strerror(e));
			*done = off;
			errno = e;
			return -1;
		}
		off += (size_t)w;
		t->written += w;
		if (t->written - t->queued >= (off_t)WRITEBACK_STEP) {
			/* A hint: whatever it fails at, the fsync before the
			 * rename does, and reports. */
			sync_file_range(t->fd, t->queued, t->written - t->queued,
					SYNC_FILE_RANGE_WRITE);
			t->queued = t->written;
		}
	}
	*done = off;
	return 0;
}

/* Write the staged bytes; what a full disk refuses stays staged. */
static int flush_stage(struct blob_tmp *t, struct buf *err)
{
	size_t done;
	int rc = write_all(t, t->stage, t->staged, &done, err);

	memmove(t->stage, t->stage + done, t->staged - done);
	t->staged -= done;
	return rc;
}

int blobs_tmp_write(struct blob_tmp *t, const void *data, size_t len, size_t *done,
		    struct buf *err)
{
	const char *p = data;
	size_t off = 0, wrote;

	*done = 0;
	if (t->staged == PIECE && flush_stage(t, err) < 0)
		return -1;
	while (off < len) {
		if (t->staged == 0 && len - off >= PIECE) {
			/* Whole pieces straight from the caller's bytes. */
			int rc = write_all(t, p + off, (len - off) / PIECE * PIECE, &wrote, err);
			off += wrote;
			*done = off;
			if (rc < 0)
				return -1;
			continue;
		}
		if (!t->stage && !(t->stage = malloc(PIECE))) {
			buf_printf(err, "cannot write '%s/%s': out of memory", t->b->dir, t->name);
			errno = ENOMEM;
			return -1;
		}
		size_t n = len - off < PIECE - t->staged ? len - off : PIECE - t->staged;
		memcpy(t->stage + t->staged, p + off, n);
		t->staged += n;
		off += n;
		*done = off;
		if (t->staged == PIECE && flush_stage(t, err) < 0)
			return -1;
	}
	return 0;
}

int blobs_tmp_flush(struct blob_tmp *t, struct buf *err)
{
	return t->staged ? flush_stage(t, err) : 0;
}

int blobs_tmp_sync(struct blob_tmp *t)
{
	off_t written = t->written;

	if (fsync(t->fd) < 0)
		return t->sync_err = errno;
	t->synced = written;
	return 0;
}

void blobs_tmp_drop(struct blob_tmp *t)
{
	if (!t)
		return;
	if (t->fd >= 0)
		close(t->fd);
	unlinkat(t->b->dfd, t->name, 0);
	free(t->stage);
	free(t);
}

/* Rename t's file to name. Where name is there already (the same value
 * put again under its key: the same name), the two are exchanged, so
 * that the old file's blocks are not freed here, in the rename, but when
 * the caller unlinks t's temporary name, which now holds it (*replaced
 * 1). A filesystem without renameat2()'s flags gets a plain rename
 * (*replaced 2 where it replaced a file). */
static int place(struct blob_tmp *t, const char *name, int *replaced)
{
	int dfd = t->b->dfd;
	struct stat st;

	*replaced = 0;
	if (renameat2(dfd, t->name, dfd, name, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno == EEXIST && renameat2(dfd, t->name, dfd, name, RENAME_EXCHANGE) == 0) {
		*replaced = 1;
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != ENOENT && errno != EEXIST)
		return -1;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		*replaced = 2;
	return renameat(dfd, t->name, dfd, name);
}

int blobs_tmp_place(struct blob_tmp *t, const unsigned char key[32], int64_t sum,
		    char *replaced, struct buf *err)
{
	struct blobs *b = t->b;
	char sub[3], name[90];
	int e, swapped;

	name_of(key, sum, sub, name);
	replaced[0] = '\0';
	if (blobs_tmp_flush(t, err) < 0) {
		e = errno;
		goto fail;
	}
	/* A failed sync is never tried again: Linux reports a write-back
	 * error to one fsync() of the file only, and the next one would
	 * say 0 for pages that never reached the disk. */
	if (t->sync_err || ((t->synced < t->written || t->written == 0) && fsync(t->fd) < 0)) {
		e = t->sync_err ? t->sync_err : errno;
		buf_printf(err, "cannot sync '%s/%s': %s", b->dir, t->name, strerror(e));
		goto fail;
	}
	close(t->fd);
	t->fd = -1;
	if (mkdirat(b->dfd, sub, 0700) == 0) {
		if (fsync(b->dfd) < 0) {
			e = errno;
			buf_printf(err, "cannot sync '%s': %s", b->dir, strerror(e));
			goto fail;
		}
	} else if (errno != EEXIST) {
		e = errno;
		buf_printf(err, "cannot create '%s/%s': %s", b->dir, sub, strerror(e));
		goto fail;
	}
	if (place(t, name, &swapped) < 0) {
		e = errno;
		buf_printf(err, "cannot rename '%s/%s' to '%s': %s", b->dir, t->name, name,
			   strerror(e));
		goto fail;
	}
	if (fsync_dir(b->dfd, sub) < 0) {
		e = errno;
		buf_printf(err, "cannot sync '%s/%s': %s", b->dir, sub, strerror(e));
		/* A file that took another's place under its name stays:
		 * a row names it (the same key and sum: the same bytes), and
		 * the one it replaced goes with t's temporary name (or went
		 * in the plain rename). */
		if (!swapped)
			unlinkat(b->dfd, name, 0);
		goto fail;
	}
	if (swapped == 1)
		snprintf(replaced, BLOBS_RETIRED_MAX, "%s", t->name);
	free(t->stage);
	free(t);
	return 0;
fail:
	blobs_tmp_drop(t);
	errno = e;
	return -1;
}

int blobs_write(struct blobs *b, const unsigned char key[32], int64_t sum,
		const void *data, size_t len, char *replaced, struct buf *err)
{
	char sub[3], name[90];
	size_t done;

	name_of(key, sum, sub, name);
	struct blob_tmp *t = blobs_tmp_new(b, name + 3, err);
	if (!t)
		return -1;
	if (blobs_tmp_write(t, data, len, &done, err) < 0) {
		int e = errno;
		blobs_tmp_drop(t);
		errno = e;
		return -1;
	}
	return blobs_tmp_place(t, key, sum, replaced, err);
}

static struct seen *seen_slot(struct blobs *b, const struct stat *st)
{
	if (!b->seen && !(b->seen = calloc(SEEN_SLOTS, sizeof *b->seen)))
		return NULL;
	return &b->seen[((uint64_t)st->st_ino * 0x9e3779b97f4a7c15ull >> 40) % SEEN_SLOTS];
}

static int same_times(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* Whether s was made of this very file, unchanged since. */
static int seen_is(const struct seen *s, const struct stat *st)
{
	return s->used && s->dev == st->st_dev && s->ino == st->st_ino &&
	       s->size == st->st_size && same_times(&s->mtime, &st->st_mtim) &&
	       same_times(&s->ctime, &st->st_ctim);
}

static void seen_set(struct seen *s, const struct stat *st, uint64_t hash)
{
	s->dev = st->st_dev;
	s->ino = st->st_ino;
	s->size = st->st_size;
	s->mtime = st->st_mtim;
	s->ctime = st->st_ctim;
	s->hash = hash;
	s->used = 1;
}

void blobs_together(struct blobs *b, int on)
{
	b->together = on;
	b->fresh.used = 0;
}

/*
 * Whether a hash that started at start may vouch for the file st was
 * taken of: a change within the same timestamp tick as st's change time
 * would not show in the times, so the hash must start a tick after it. A
 * file system that keeps sub-second times (this file's change and
 * modification times have nanoseconds: ext4, xfs, btrfs, tmpfs) takes
 * them from the kernel's coarse clock, whose tick is at most 10 ms
 * (HZ=100): SETTLE_NS is five of those. One that keeps whole seconds
 * needs their seconds two apart (more than one second). A value put a
 * moment ago is then hashed by its gets for 50 ms, not for a second and
 * more (an 8 MB get took 1.3 ms so, 0.4 ms once trusted, on a 2-core VM).
 */
#define SETTLE_NS 50000000
static int settled(const struct stat *st, const struct timespec *start)
{
	if (!st->st_ctim.tv_nsec || !st->st_mtim.tv_nsec)
		return st->st_ctim.tv_sec + 1 < start->tv_sec;
	int64_t age = ((int64_t)start->tv_sec - st->st_ctim.tv_sec) * 1000000000 +
		      (start->tv_nsec - st->st_ctim.tv_nsec);
	return age > SETTLE_NS;
}

/* Hash fd's len bytes, CHUNK at a time, with pread (the offset is left
 * alone). 0, or with *why -1 (the file cannot be read) or -2 (memory). */
static int hash_fd(struct blobs *b, int fd, int64_t len, uint64_t *hash, const char **why)
{
	XXH64_state_t *h = XXH64_createState();
	int64_t off = 0;

	if (!h || (!b->chunk && !(b->chunk = malloc(CHUNK)))) {
		XXH64_freeState(h);
		*why = "out of memory";
		return -2;
	}
	XXH64_reset(h, 0);
	while (off < len) {
		size_t want = len - off > CHUNK ? CHUNK : (size_t)(len - off);
		ssize_t r = pread(fd, b->chunk, want, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			XXH64_freeState(h);
			*why = r < 0 ? "blob file unreadable" : "blob file shorter than its entry";
			return -1;
		}
		XXH64_update(h, b->chunk, (size_t)r);
		off += r;
	}
	*hash = XXH64_digest(h);
	XXH64_freeState(h);
	return 0;
}

/* Why fd cannot be had now, errno's: -2 with *why. */
static int not_now(struct blobs *b, int fd, const char **why)
{
	int e = errno;

	if (fd >= 0)
		close(fd);
	snprintf(b->why, sizeof b->why, "blob file cannot be opened now: %s", strerror(e));
	*why = b->why;
	return -2;
}

/* Open key's file for sum and check its type and size: fd, or with *why
 * -1 (damage: missing, not a plain file, of another size) or -2 (nothing
 * wrong with the file: out of descriptors or memory, say). */
static int open_checked(struct blobs *b, const unsigned char key[32], int64_t sum, int64_t len,
			struct stat *st, const char **why)
{
	char sub[3], name[90];

	name_of(key, sum, sub, name);
	int fd = openat(b->dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd < 0 && errno != ENOENT && errno != ELOOP && errno != ENOTDIR)
		return not_now(b, -1, why);
	if (fd < 0) {
		*why = errno == ENOENT ? "blob file missing" : "blob file is not a regular file";
		return -1;
	}
	if (fstat(fd, st) < 0)
		return not_now(b, fd, why);
	if (!S_ISREG(st->st_mode)) {
		*why = "blob file is not a regular file";
		close(fd);
		return -1;
	}
	if ((int64_t)st->st_size != len) {
		*why = "blob file of the wrong size";
		close(fd);
		return -1;
	}
	return fd;
}

int blobs_open_file(struct blobs *b, const unsigned char key[32], int64_t sum, int64_t len,
		    uint64_t *hash, const char **why)
{
	struct stat st;
	struct timespec start;
	int fd = open_checked(b, key, sum, len, &st, why);

	if (fd < 0)
		return fd;
	struct seen *s = seen_slot(b, &st);
	const struct seen *known = s && seen_is(s, &st) ? s :
				   b->together && seen_is(&b->fresh, &st) ? &b->fresh : NULL;
	if (known) {
		*hash = known->hash;
		return fd;
	}
	clock_gettime(CLOCK_REALTIME, &start);
	int rc = hash_fd(b, fd, len, hash, why);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	if (s && settled(&st, &start)) {
		seen_set(s, &st, *hash);
	} else {
		if (s && s->used && s->dev == st.st_dev && s->ino == st.st_ino)
			s->used = 0;
		if (b->together)
			seen_set(&b->fresh, &st, *hash);
	}
	return fd;
}

int blobs_read(struct blobs *b, const unsigned char key[32], int64_t sum, int64_t len,
	       struct buf *dst, uint64_t *hash, const char **why)
{
	struct stat st;
	int64_t off = 0;

	buf_reset(dst);
	int fd = open_checked(b, key, sum, len, &st, why);
	if (fd < 0)
		return fd == -1 ? 1 : -1;
	if (buf_reserve(dst, (size_t)len) < 0) {
		close(fd);
		*why = "out of memory";
		return -1;
	}
	while (off < len) {
		ssize_t r = pread(fd, dst->data + off, (size_t)(len - off), (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			*why = r < 0 ? "blob file unreadable" : "blob file shorter than its entry";
			close(fd);
			buf_reset(dst);
			return 1;
		}
		off += r;
	}
	close(fd);
	dst->len = (size_t)len;
	dst->data[len] = '\0';
	*hash = XXH64(dst->data, (size_t)len, 0);
	return 0;
}

void blobs_unlink(struct blobs *b, const unsigned char key[32], int64_t sum)
{
	char sub[3], name[90];

	name_of(key, sum, sub, name);
	if (unlinkat(b->dfd, name, 0) < 0 && errno != ENOENT)
		log_warn("cannot remove '%s/%s': %s", b->dir, name, strerror(errno));
}

int blobs_retire(struct blobs *b, const unsigned char key[32], int64_t sum, char *name)
{
	char sub[3], from[90];

	name_of(key, sum, sub, from);
	snprintf(name, BLOBS_RETIRED_MAX, TMP_PREFIX "gone-%d-%llu", (int)getpid(),
		 (unsigned long long)++b->tmp_serial);
	if (renameat(b->dfd, from, b->dfd, name) == 0)
		return 0;
	if (errno != ENOENT)
		log_warn("cannot remove '%s/%s': %s", b->dir, from, strerror(errno));
	return -1;
}

void blobs_unlink_retired(struct blobs *b, const char *name)
{
	/* (The log is the loop's: a failure here is left to the sweep.) */
	unlinkat(b->dfd, name, 0);
}

int blobs_sweep(struct blobs *b,
		int (*named)(void *arg, const unsigned char key[32], int64_t sum), void *arg,
		struct buf *report)
{
	int removed = 0, top = dup(b->dfd);
	DIR *d = top >= 0 ? fdopendir(top) : NULL;
	struct dirent *de;

	if (!d) {
		if (top >= 0)
			close(top);
		log_warn("cannot read '%s': %s", b->dir, strerror(errno));
		return 0;
	}
	rewinddir(d);   /* the offset is b->dfd's too: where the last sweep ended */
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		if (!strncmp(n, TMP_PREFIX, strlen(TMP_PREFIX))) {
			if (!report && unlinkat(b->dfd, n, 0) == 0)
				removed++;
			continue;
		}
		if (strlen(n) != 2 || !strchr("0123456789abcdef", n[0]) ||
		    !strchr("0123456789abcdef", n[1]))
			continue;
		int sfd = openat(b->dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		DIR *sd = sfd >= 0 ? fdopendir(sfd) : NULL;
		if (!sd) {
			if (sfd >= 0)
				close(sfd);
			continue;
		}
		struct dirent *fe;
		while ((fe = readdir(sd))) {
			unsigned char key[32];
			int64_t sum;
			if (fe->d_name[0] == '.')
				continue;
			/* Not ours, or no row names it: nobody would ever reclaim it. */
			if (parse_name(fe->d_name, key, &sum) < 0 || memcmp(fe->d_name, n, 2) ||
			    !named(arg, key, sum)) {
				if (unlinkat(dirfd(sd), fe->d_name, 0) < 0)
					continue;
				removed++;
				if (report)
					buf_printf(report, "blob file %s/%s: no entry names it; "
						   "removed\n", n, fe->d_name);
			}
		}
		closedir(sd);
	}
	closedir(d);
	if (removed)
		log_info("removed %d blob files no entry names (%s) from '%s'", removed,
			 report ? "found by verify" : "an interrupted put or eviction", b->dir);
	return removed;
}
