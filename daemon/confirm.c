/*
 * confirm: see confirm.h for the model.
 */
#include "daemon/confirm.h"

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
	/* Above every uid (uid_t is 32 bits). */
	static int64_t next = (int64_t)1 << 40;
	return next++;
}

int confirm_may_serve(enum sharing pol, const struct store_result *e, int64_t uid)
{
	if (pol != SHARING_CONFIRM || e->producer < 0 || e->producer == uid)
		return 1;
	return e->trust == STORE_CONFIRMED;
}

static int same_bytes(const struct store_result *a, const struct store_entry *b)
{
	return a->kind == b->kind && a->status == b->status &&
	       a->data.len == b->data_len && a->log.len == b->log_len &&
	       (!b->data_len || !memcmp(a->data.data, b->data, b->data_len)) &&
	       (!b->log_len || !memcmp(a->log.data, b->log, b->log_len));
}

enum settle confirm_settle(struct store *s, const unsigned char key[32],
			   const char *key_hex, const struct store_entry *e)
{
	struct store_result old;
	enum settle v;

	if (store_peek(s, key, &old) != 1)
		return SETTLE_STORE;
	if (old.trust == STORE_QUARANTINED) {
		v = SETTLE_QUARANTINED;
	} else if (old.producer < 0 || old.producer == e->producer) {
		v = SETTLE_STORE;       /* its own tenant's again: nothing new */
	} else if (same_bytes(&old, e)) {
		v = old.trust == STORE_CONFIRMED ? SETTLE_CONFIRMED :
		    store_set_trust(s, key, STORE_CONFIRMED) == 0 ? SETTLE_CONFIRMED : SETTLE_STORE;
	} else {
		store_set_trust(s, key, STORE_QUARANTINED);
		log_err("confirmation mismatch for %.16s: the worker of uid %lld and a worker of "
			"uid %lld computed different bytes (%zu vs %zu); the entry is quarantined "
			"and served to uid %lld alone. One of the workers was not computing what "
			"the compiler computes: look for an exploit in that user's inputs",
			key_hex, (long long)old.producer, (long long)e->producer, old.data.len,
			e->data_len, (long long)old.producer);
		v = SETTLE_MISMATCH;
	}
	store_result_free(&old);
	return v;
}
