/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_hot: decoded entries kept for hits (store_hot.h), direct-mapped by
 * the key's first bytes (a SHA-256: already uniform). Past HOT_BYTES a
 * clock hand empties slots in turn until the new entry fits. A lent slot
 * (hot_lend(): a hit's reply sent from it) is neither emptied nor
 * replaced until it is returned.
 */
#include "daemon/store_hot.h"

#include <stdlib.h>
#include <string.h>

/* A decoded entry: valid while data.data is set and only for a row whose
 * checksum is sum. */
struct hot {
	unsigned char key[32];
	int64_t sum;
	struct buf data;
	struct buf log;
	int lent;               /* hot_lend()s not yet returned */
};

#define HOT_SLOTS 1024
#define HOT_BYTES ((size_t)64 << 20)
/* Larger entries are decoded on every hit: they would crowd out the rest. */
#define HOT_MAX_ENTRY ((size_t)8 << 20)

static struct hot *hot_slot(struct hot_cache *c, const unsigned char key[32])
{
	uint64_t h;

	if (!c->slot && !(c->slot = calloc(HOT_SLOTS, sizeof *c->slot)))
		return NULL;
	memcpy(&h, key, sizeof h); /* a SHA-256: already uniform */
	return &c->slot[h % HOT_SLOTS];
}

static void hot_drop(struct hot_cache *c, struct hot *h)
{
	c->bytes -= h->data.len + h->log.len;
	buf_free(&h->data);
	buf_free(&h->log);
}

void hot_keep(struct hot_cache *c, const unsigned char key[32], int64_t sum,
	      const struct buf *data, const struct buf *log)
{
	size_t n = data->len + log->len;
	struct hot *h = hot_slot(c, key);

	if (!h || !data->len || n > HOT_MAX_ENTRY || h->lent)
		return;
	if (h->data.data)
		hot_drop(c, h);
	for (size_t i = 0; i < HOT_SLOTS && c->bytes + n > HOT_BYTES; i++) {
		struct hot *o = &c->slot[c->hand];
		c->hand = (c->hand + 1) % HOT_SLOTS;
		if (o->data.data && !o->lent)
			hot_drop(c, o);
	}
	if (buf_append(&h->data, data->data, data->len) < 0 ||
	    buf_append(&h->log, log->data ? log->data : "", log->len) < 0) {
		buf_free(&h->data);
		buf_free(&h->log);
		return;
	}
	memcpy(h->key, key, 32);
	h->sum = sum;
	c->bytes += n;
}

/* The slot kept for this very row, or NULL. */
static struct hot *hot_find(struct hot_cache *c, const unsigned char key[32], int64_t sum,
			    int64_t data_len, int64_t log_len)
{
	struct hot *h = c->slot ? hot_slot(c, key) : NULL;

	if (!h || !h->data.data || memcmp(h->key, key, 32) || h->sum != sum ||
	    (int64_t)h->data.len != data_len || (int64_t)h->log.len != log_len)
		return NULL;
	return h;
}

struct hot *hot_lend(struct hot_cache *c, const unsigned char key[32], int64_t sum,
		     int64_t data_len, int64_t log_len, struct buf *data, struct buf *log)
{
	struct hot *h = hot_find(c, key, sum, data_len, log_len);

	if (h) {
		h->lent++;
		*data = h->data;
		*log = h->log;
	}
	return h;
}

void hot_return(struct hot *h)
{
	h->lent--;
}

int hot_get(struct hot_cache *c, const unsigned char key[32], int64_t sum,
	    int64_t data_len, int64_t log_len, struct buf *data, struct buf *log)
{
	struct hot *h = hot_find(c, key, sum, data_len, log_len);

	if (!h)
		return 0;
	if (buf_append(data, h->data.data, h->data.len) < 0 ||
	    buf_append(log, h->log.data ? h->log.data : "", h->log.len) < 0)
		return -1;
	return 1;
}

void hot_free(struct hot_cache *c)
{
	for (size_t i = 0; c->slot && i < HOT_SLOTS; i++) {
		buf_free(&c->slot[i].data);
		buf_free(&c->slot[i].log);
	}
	free(c->slot);
	memset(c, 0, sizeof *c);
}
