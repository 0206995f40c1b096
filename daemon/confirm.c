/* SPDX-License-Identifier: Apache-2.0 */
/*
 * confirm: see confirm.h for the model.
 */
#include "daemon/confirm.h"

#include <stdio.h>
#include <string.h>

#include "daemon/log.h"

int sharing_parse(const char *s, enum sharing *out)
{
	static const char *const names[] = { "confirm", "trust", "separate" };
	for (int i = 0; i < 3; i++)
		if (s && !strcmp(s, names[i])) {
			*out = (enum sharing)i;
			return 0;
		}
	return -1;
}

int64_t confirm_oneshot_tenant(void)
{
	/* Above every identity (uid_t is 32 bits; a tenant's numbers stay
	 * below 2^62, tenant.h). Never stored: a confirmation's result is
	 * compared, not kept (flight.c). */
	static int64_t next = (int64_t)1 << 62;
	return next++;
}

int confirm_may_serve(enum sharing pol, const struct store_result *e, int64_t uid)
{
	if (pol == SHARING_TRUST)
		return 1;
	/* separate: PTX keys hold the uid already; cubin keys do not (a PTX
	 * file is the same whoever sends it), so the producer decides. */
	if (pol == SHARING_SEPARATE)
		return e->producer == uid;
	if (e->producer < 0 || e->producer == uid)
		return 1;
	return e->trust == STORE_CONFIRMED;
}

/* A log with what varies from run to run of the same compile (ptxas -v's
 * "Compile time = 1.406 ms") cut down to "Compile time = # ms". */
static void stable_log(const char *p, size_t n, struct buf *out)
{
	static const char tag[] = "Compile time = ";
	const char *end = p + n, *hit;

	while (p < end && (hit = memmem(p, (size_t)(end - p), tag, sizeof tag - 1))) {
		hit += sizeof tag - 1;
		buf_append(out, p, (size_t)(hit - p));
		buf_puts(out, "#");
		while (hit < end && ((*hit >= '0' && *hit <= '9') || *hit == '.'))
			hit++;
		p = hit;
	}
	buf_append(out, p, (size_t)(end - p));
}

/* Where a and b first differ ("data byte 120"), or NULL if they do not. */
static const char *first_difference(const struct store_result *a, const struct store_entry *b,
				    char *where, size_t n)
{
	struct buf la = BUF_INIT, lb = BUF_INIT;
	const char *diff = NULL;

	if (a->kind != b->kind || a->status != b->status) {
		snprintf(where, n, "status %d vs %d", a->status, b->status);
		return where;
	}
	stable_log(a->log.data ? a->log.data : "", a->log.len, &la);
	stable_log(b->log ? b->log : "", b->log_len, &lb);
	const struct { const char *name; const char *x, *y; size_t xn, yn; } parts[] = {
		{ "data", a->data.data, b->data, a->data.len, b->data_len },
		{ "log", la.data, lb.data, la.len, lb.len },
	};
	for (size_t p = 0; p < 2 && !diff; p++) {
		size_t m = parts[p].xn < parts[p].yn ? parts[p].xn : parts[p].yn, i = 0;
		while (i < m && parts[p].x[i] == parts[p].y[i])
			i++;
		if (i < m || parts[p].xn != parts[p].yn) {
			snprintf(where, n, "%s byte %zu of %zu vs %zu", parts[p].name, i,
				 parts[p].xn, parts[p].yn);
			diff = where;
		}
	}
	buf_free(&la);
	buf_free(&lb);
	return diff;
}

enum settle confirm_settle(struct store *s, const unsigned char key[32],
			   const char *key_hex, const struct store_entry *e)
{
	struct store_result old;
	enum settle v;
	char where[96];
	const char *diff;

	if (store_peek(s, key, &old) != 1)
		return SETTLE_STORE;
	if (old.trust == STORE_QUARANTINED) {
		v = SETTLE_QUARANTINED;
	} else if (old.producer < 0 || old.producer == e->producer) {
		v = SETTLE_STORE;       /* its own tenant's again: nothing new */
	} else if (!(diff = first_difference(&old, e, where, sizeof where))) {
		v = old.trust == STORE_CONFIRMED ? SETTLE_CONFIRMED :
		    store_set_trust(s, key, STORE_CONFIRMED) == 0 ? SETTLE_CONFIRMED : SETTLE_STORE;
	} else {
		store_set_trust(s, key, STORE_QUARANTINED);
		log_err("confirmation mismatch for %.16s: the worker of uid %lld and a worker of "
			"uid %lld computed different bytes (%s); the entry is quarantined and "
			"served to uid %lld alone. One of the workers was not computing what the "
			"compiler computes: look for an exploit in that user's inputs",
			key_hex, (long long)old.producer, (long long)e->producer, diff,
			(long long)old.producer);
		v = SETTLE_MISMATCH;
	}
	store_result_free(&old);
	return v;
}
