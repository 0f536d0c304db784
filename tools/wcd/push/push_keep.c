/* SPDX-License-Identifier: MIT */
/*
 * What a commit does to N+1's bytes (push_keep.h): a partial update keeps
 * the tensors the trainer did not write from version N (a copy of their
 * bytes, and their hashes: the cost follows what changed, but for the copy
 * itself, on the device: the backend's pool_copy), then N+1 is hashed
 * where it changed (on the device where it can).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "wcreactor.h"
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

static int by_place(const void *x, const void *y, void *arg)
{
	const struct plan_tensor *t = arg;
	const struct plan_tensor *a = &t[*(const uint32_t *)x];
	const struct plan_tensor *b = &t[*(const uint32_t *)y];

	if (a->pool != b->pool)
		return a->pool < b->pool ? -1 : 1;
	return a->pool_off < b->pool_off ? -1 : a->pool_off > b->pool_off;
}

/* Copies the kept entries idx[0..n) (sorted by their place in nv) from
 * cur to nv, one pool_copy per run of entries that lie back to back in
 * both versions: a partial update of a few layers is a few copies (and,
 * on cuda, a few waits), not one per tensor. */
static int keep_runs(struct wcd *d, struct wcd_version *cur,
		     struct wcd_version *nv, const uint32_t *idx, uint32_t n,
		     char *err)
{
	const struct gpu_backend *be = d->dev.be;

	for (uint32_t k = 0; k < n;) {
		const struct plan_tensor *a = &cur->plan.t[idx[k]];
		const struct plan_tensor *b = &nv->plan.t[idx[k]];
		uint64_t len = b->alloc;
		int ret;

		for (k++; k < n; k++) {
			const struct plan_tensor *a2 = &cur->plan.t[idx[k]];
			const struct plan_tensor *b2 = &nv->plan.t[idx[k]];

			if (a2->pool != a->pool || b2->pool != b->pool ||
			    a2->pool_off != a->pool_off + len ||
			    b2->pool_off != b->pool_off + len)
				break;
			len += b2->alloc;
		}
		ret = be->pool_copy(&d->dev, &nv->pools[b->pool], b->pool_off,
				    &cur->pools[a->pool], a->pool_off, len,
				    err);
		if (ret)
			return ret;
	}
	return 0;
}

int push_keep(struct wcd *d, struct wcd_version *nv, uint32_t nck,
	      const uint8_t *written, bool in_place, uint8_t *keep,
	      uint64_t *kept, char *err)
{
	struct wcd_version *cur = wcd_current(d);
	uint32_t *idx, n = 0;
	int ret;

	*kept = 0;
	/* in place the kept bytes are where they are: nothing to copy */
	idx = in_place ? NULL : malloc(sizeof(*idx) * (nck ? nck : 1));
	if (!in_place && !idx)
		return base_errf(err, ENOMEM, "out of memory");
	for (uint32_t i = 0; i < nck; i++) {
		const struct plan_tensor *a = &cur->plan.t[i];
		const struct plan_tensor *b = &nv->plan.t[i];

		if (written[i])
			continue;
		WC_ASSERT(!strcmp(a->name, b->name) && a->alloc == b->alloc);
		WC_ASSERT(!(b->flags & PLAN_T_VIEW));
		if (idx)
			idx[n++] = i;
		*kept += b->size;
		keep[i] = cur->hashed;
	}
	if (idx) {
		qsort_r(idx, n, sizeof(*idx), by_place, nv->plan.t);
		ret = keep_runs(d, cur, nv, idx, n, err);
		free(idx);
		if (ret)
			return ret;
	}
	for (uint32_t i = nck; i < nv->plan.ntensors; i++)
		keep[i] = cur->hashed &&
			  !(nv->plan.t[i].flags & PLAN_T_ALIAS) &&
			  !view_dirty(nv, i, nck, written);
	return 0;
}

/* The hashes on the device (the backend's hash_*, as life/verify.c uses
 * them: every tensor to hash side by side in one batch where the backend
 * can, else one launch per tensor on its own chain; nothing comes back
 * but the hashes), with the kept entries' taken from cur and tensors of
 * at most GPU_HASH_MIN_LEN bytes read back and hashed here. -ENOTSUP
 * (nothing done) when the device cannot. */
static int hash_device(struct wcd *d, struct wcd_version *v,
		       const struct wcd_version *cur, const uint8_t *keep,
		       char *err)
{
	const struct gpu_backend *be = d->dev.be;
	struct gpu_hash_job *jobs;
	char e[BASE_ERR_LEN];
	uint64_t ts[4];
	uint32_t n = 0;
	int ret;

	if (!be->hash_begin || d->o.hash_on == WCD_HASH_CPU ||
	    !v->npools || v->pools[0].host_ptr)
		return -ENOTSUP;
	jobs = malloc(sizeof(*jobs) *
		      (v->plan.ntensors ? v->plan.ntensors : 1));
	if (!jobs)
		return base_errf(err, ENOMEM, "out of memory");
	ts[0] = rx_now_ns();
	ret = be->hash_begin(&d->dev, v->plan.ntensors, e);
	if (ret) {
		free(jobs);
		return ret == -ENOTSUP ? ret : base_errf(err, -ret, "%s", e);
	}
	for (uint32_t i = 0; i < v->plan.ntensors && !ret; i++) {
		const struct plan_tensor *t = &v->plan.t[i];
		uint8_t small[GPU_HASH_MIN_LEN];

		if (t->flags & PLAN_T_ALIAS)
			continue;
		if (keep && keep[i]) {
			if (v != cur)    /* in place: the hash is there */
				memcpy(v->hash[i], cur->hash[i], BASE_HASH_LEN);
		} else if (t->size > GPU_HASH_MIN_LEN) {
			jobs[n++] = (struct gpu_hash_job){
				.pool = &v->pools[t->pool], .off = t->pool_off,
				.len = t->size, .i = i,
			};
		} else {
			ret = be->copy_from_pool(&d->dev, &v->pools[t->pool],
						 t->pool_off, small, t->size);
			if (ret)
				snprintf(e, sizeof(e), "reading tensor %s back to hash it failed: %s",
					 t->name, strerror(-ret));
			else
				base_hash128(small, t->size, v->hash[i]);
		}
	}
	for (uint32_t k = 0; k < n && !ret && !be->hash_batch; k++)
		ret = be->hash_step(&d->dev, jobs[k].pool, jobs[k].off,
				    jobs[k].len, jobs[k].i, jobs[k].len, 0, k,
				    e);
	ts[1] = rx_now_ns();
	/* the commit's reply waits for this hash, and every later commit
	 * reuses the host chains' pinned memory (gpu.h); hash_batch alone
	 * reads the flag */
	if (!ret && n && be->hash_batch) {
		d->dev.hash_host_chains = true;
		ret = be->hash_batch(&d->dev, jobs, n, 0, e);
		d->dev.hash_host_chains = false;
	}
	free(jobs);
	if (ret) {
		be->hash_end(&d->dev, NULL, NULL);
		return base_errf(err, -ret, "%s", e);
	}
	ts[2] = rx_now_ns();
	ret = be->hash_end(&d->dev, v->hash, e);
	ts[3] = rx_now_ns();
	log_debug("device hash of %u tensors: begun (and the short ones read back) in %.3f ms, the batch queued in %.3f ms, its end waited for %.3f ms",
		  n, (double)(ts[1] - ts[0]) / 1e6, (double)(ts[2] - ts[1]) / 1e6,
		  (double)(ts[3] - ts[2]) / 1e6);
	return ret ? base_errf(err, -ret, "%s", e) : 0;
}

/* The hashes on the device where it can (hash_device), else on the CPU,
 * which every backend can (cuda reads back in PUSH_HASH_CHUNK pieces:
 * --hash-on cpu, or a device without the hash kernels). */
#define PUSH_HASH_CHUNK (8u << 20)
int push_hash(struct wcd *d, struct wcd_version *v,
	      const struct wcd_version *cur, const uint8_t *keep, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	uint8_t *bounce = NULL;
	int ret;

	ret = hash_device(d, v, cur, keep, err);
	if (ret != -ENOTSUP)
		goto out_alias;
	ret = 0;
	for (uint32_t i = 0; i < v->plan.ntensors && !ret; i++) {
		const struct plan_tensor *t = &v->plan.t[i];
		struct gpu_pool *pl = &v->pools[t->pool];
		struct base_hasher h;

		if (t->flags & PLAN_T_ALIAS)
			continue;
		if (keep && keep[i]) {
			if (v != cur)    /* in place: the hash is there */
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
out_alias:
	for (uint32_t i = 0; !ret && i < v->plan.ntensors; i++)
		if (v->plan.t[i].flags & PLAN_T_ALIAS)
			memcpy(v->hash[i], v->hash[v->plan.t[i].target],
			       BASE_HASH_LEN);
	return ret;
}

