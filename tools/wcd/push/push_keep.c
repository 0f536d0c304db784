/* SPDX-License-Identifier: MIT */
/*
 * What a commit does to N+1's bytes (push_keep.h): a partial update keeps
 * the tensors the trainer did not write from version N (a copy of their
 * bytes, and their hashes: the cost follows what changed, but for the copy
 * itself), then N+1 is hashed where it changed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "push/push_keep.h"

/* Whether entry v (a view) covers bytes of a written checkpoint entry:
 * O(nck) per view. */
static bool view_dirty(const struct wcd_version *nv, uint32_t v, uint32_t nck,
		       const uint8_t *written)
{
	const struct plan_tensor *t = &nv->plan.t[v];

	for (uint32_t i = 0; i < nck; i++) {
		const struct plan_tensor *e = &nv->plan.t[i];

		if (written[i] && e->pool == t->pool &&
		    e->pool_off < t->pool_off + t->alloc &&
		    t->pool_off < e->pool_off + e->alloc)
			return true;
	}
	return false;
}

uint64_t push_keep(const struct wcd_version *cur, struct wcd_version *nv,
		   uint32_t nck, const uint8_t *written, uint8_t *keep)
{
	uint64_t kept = 0;

	for (uint32_t i = 0; i < nck; i++) {
		const struct plan_tensor *a = &cur->plan.t[i];
		const struct plan_tensor *b = &nv->plan.t[i];
		const uint8_t *src = cur->pools[a->pool].host_ptr;
		uint8_t *dst = nv->pools[b->pool].host_ptr;

		if (written[i])
			continue;
		WC_ASSERT(!strcmp(a->name, b->name) && a->alloc == b->alloc);
		WC_ASSERT(src && dst);
		memcpy(dst + b->pool_off, src + a->pool_off, b->alloc);
		kept += b->size;
		keep[i] = cur->hashed;
	}
	for (uint32_t i = nck; i < nv->plan.ntensors; i++)
		keep[i] = cur->hashed &&
			  !(nv->plan.t[i].flags & PLAN_T_ALIAS) &&
			  !view_dirty(nv, i, nck, written);
	return kept;
}

/* The hashes on the CPU, which every backend can (cuda reads back in
 * PUSH_HASH_CHUNK pieces; the device hash of a wake, life_job.c's, is the
 * faster way there, not built for sessions yet). */
#define PUSH_HASH_CHUNK (8u << 20)
int push_hash(struct wcd *d, struct wcd_version *v,
	      const struct wcd_version *cur, const uint8_t *keep, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	uint8_t *bounce = NULL;
	int ret = 0;

	for (uint32_t i = 0; i < v->plan.ntensors && !ret; i++) {
		const struct plan_tensor *t = &v->plan.t[i];
		struct gpu_pool *pl = &v->pools[t->pool];
		struct base_hasher h;

		if (t->flags & PLAN_T_ALIAS)
			continue;
		if (keep && keep[i]) {
			memcpy(v->hash[i], cur->hash[i], BASE_HASH_LEN);
			continue;
		}
		if (pl->host_ptr) {
			base_hash128((const uint8_t *)pl->host_ptr +
				     t->pool_off, t->size, v->hash[i]);
			continue;
		}
		if (!bounce) {
			ret = be->staging_alloc(&d->dev, PUSH_HASH_CHUNK,
						(void **)&bounce, err);
			if (ret)
				break;
		}
		base_hasher_init(&h);
		for (uint64_t o = 0; o < t->size && !ret;
		     o += PUSH_HASH_CHUNK) {
			size_t n = t->size - o < PUSH_HASH_CHUNK ?
				   (size_t)(t->size - o) : PUSH_HASH_CHUNK;

			ret = be->copy_from_pool(&d->dev, pl, t->pool_off + o,
						 bounce, n);
			if (ret)
				base_errf(err, -ret, "reading tensor %s back to hash it failed: %s",
					  t->name, strerror(-ret));
			else
				base_hasher_update(&h, bounce, n);
		}
		base_hasher_final(&h, v->hash[i]);
	}
	if (bounce)
		be->staging_free(&d->dev, bounce, PUSH_HASH_CHUNK);
	for (uint32_t i = 0; !ret && i < v->plan.ntensors; i++)
		if (v->plan.t[i].flags & PLAN_T_ALIAS)
			memcpy(v->hash[i], v->hash[v->plan.t[i].target],
			       BASE_HASH_LEN);
	return ret;
}

