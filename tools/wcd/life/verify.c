/* SPDX-License-Identifier: MIT */
/*
 * The re-check of a version's tensor hashes (verify.h). On the device the
 * backend's hash_* calls hash every tensor side by side in one batch where
 * it has hash_batch, else one launch per tensor spread over its chains;
 * only the hashes are copied back, and tensors of at most GPU_HASH_MIN_LEN
 * bytes (below what a launch pays for) are read back and hashed here.
 * Without device hashes (the host backend, --hash-on cpu) each tensor is
 * hashed from the pool's mapping or through a bounce buffer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "life/verify.h"

/* Queues the device hash of every tensor of pool p (every pool: p ==
 * UINT32_MAX) longer than GPU_HASH_MIN_LEN, after what copy stream
 * `stream` has queued so far: in one batch where the backend has
 * hash_batch (the tensors side by side on the device), else one
 * hash_step per tensor on chain i. */
int life_hash_pool_steps(struct wcd *d, struct wcd_version *v, uint32_t p,
			 unsigned stream, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	struct gpu_hash_job *jobs = NULL;
	char e[BASE_ERR_LEN];
	uint32_t n = 0;
	int ret = 0;

	if (be->hash_batch) {
		jobs = malloc(sizeof(*jobs) *
			      (v->plan.ntensors ? v->plan.ntensors : 1));
		if (!jobs)
			return base_errf(err, ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < v->plan.ntensors; i++) {
		const struct plan_tensor *t = &v->plan.t[i];

		if ((p != UINT32_MAX && t->pool != p) ||
		    t->size <= GPU_HASH_MIN_LEN)
			continue;
		if (jobs) {
			jobs[n++] = (struct gpu_hash_job){
				.pool = &v->pools[t->pool], .off = t->pool_off,
				.len = t->size, .i = i,
			};
			continue;
		}
		ret = be->hash_step(&d->dev, &v->pools[t->pool], t->pool_off,
				    t->size, i, t->size, stream, i, e);
		if (ret)
			break;
	}
	if (jobs && !ret)
		ret = be->hash_batch(&d->dev, jobs, n, stream, e);
	free(jobs);
	return ret ? base_errf(err, -ret, "%s", e) : 0;
}

/* Ends a device hash begun over v's tensors: those of at most
 * GPU_HASH_MIN_LEN bytes are read back and hashed here, the others' hashes
 * come from hash_end; all into out. On a failure the hash is abandoned. */
static int hash_finish(struct wcd *d, struct wcd_version *v,
		       uint8_t (*out)[BASE_HASH_LEN], char *err)
{
	const struct gpu_backend *be = d->dev.be;
	char e[BASE_ERR_LEN];
	int ret;

	for (uint32_t i = 0; i < v->plan.ntensors; i++) {
		const struct plan_tensor *t = &v->plan.t[i];
		uint8_t small[GPU_HASH_MIN_LEN];

		if (t->size > GPU_HASH_MIN_LEN)
			continue;
		ret = be->copy_from_pool(&d->dev, &v->pools[t->pool],
					 t->pool_off, small, t->size);
		if (ret) {
			be->hash_end(&d->dev, NULL, NULL);
			return base_errf(err, -ret,
				       "reading tensor %s back failed: %s",
				       t->name, strerror(-ret));
		}
		base_hash128(small, t->size, out[i]);
	}
	ret = be->hash_end(&d->dev, out, e);
	return ret ? base_errf(err, -ret, "%s", e) : 0;
}

/* The hashes of v's tensors computed on the device (the backend's hash_*:
 * every tensor side by side in one batch where the backend can, else one
 * launch per tensor spread over its chains; nothing copied back but the
 * hashes; tensors of at most GPU_HASH_MIN_LEN bytes are read back and
 * hashed here) into out. -ENOTSUP when the backend cannot. */
static int device_hashes(struct wcd *d, struct wcd_version *v,
			 uint8_t (*out)[BASE_HASH_LEN], char *err)
{
	const struct gpu_backend *be = d->dev.be;
	char e[BASE_ERR_LEN];
	int ret;

	if (!be->hash_begin || d->o.hash_on == WCD_HASH_CPU)
		return -ENOTSUP;
	ret = be->hash_begin(&d->dev, v->plan.ntensors, e);
	if (ret)
		return ret == -ENOTSUP ? ret : base_errf(err, -ret, "%s", e);
	ret = life_hash_pool_steps(d, v, UINT32_MAX, 0, err);
	if (ret) {
		be->hash_end(&d->dev, NULL, NULL);
		return ret;
	}
	return hash_finish(d, v, out, err);
}

/* How many of the hashes in dh differ from v's manifest (the first named
 * in err). */
static int hashes_differ(const struct wcd_version *v,
			 uint8_t (*dh)[BASE_HASH_LEN], char *err)
{
	int bad = 0;

	for (uint32_t i = 0; i < v->plan.ntensors; i++)
		if (memcmp(dh[i], v->hash[i], BASE_HASH_LEN) && !bad++)
			snprintf(err, BASE_ERR_LEN, "%s", v->plan.t[i].name);
	return bad;
}

/* The device's hashes where it has them (device_hashes), else each
 * tensor read back (the host backend: its sealed mapping; CUDA: through a
 * LIFE_VERIFY_CHUNK bounce buffer). */
int life_verify_pools(struct wcd *d, struct wcd_version *v, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	uint8_t *bounce = NULL, (*dh)[BASE_HASH_LEN];
	int bad = 0, ret = 0;

	err[0] = '\0';
	dh = calloc(v->plan.ntensors ? v->plan.ntensors : 1, sizeof(*dh));
	if (!dh)
		return base_errf(err, ENOMEM, "out of memory");
	ret = -ENOTSUP;
	if (v->npools && !v->pools[0].host_ptr)
		ret = device_hashes(d, v, dh, err);
	if (ret != -ENOTSUP) {
		if (!ret)
			bad = hashes_differ(v, dh, err);
		free(dh);
		return ret ? ret : bad;
	}
	free(dh);
	ret = 0;
	for (uint32_t i = 0; i < v->plan.ntensors; i++) {
		const struct plan_tensor *t = &v->plan.t[i];
		struct gpu_pool *pl = &v->pools[t->pool];
		uint8_t h[BASE_HASH_LEN];

		if (pl->host_ptr) {
			const uint8_t *hp = pl->host_ptr;

			base_hash128(hp + t->pool_off, t->size, h);
		} else {
			struct base_hasher hs;

			if (!bounce) {
				ret = be->staging_alloc(&d->dev,
							LIFE_VERIFY_CHUNK,
							(void **)&bounce, err);
				if (ret)
					return ret;
			}
			base_hasher_init(&hs);
			for (uint64_t o = 0; o < t->size;
			     o += LIFE_VERIFY_CHUNK) {
				size_t n = t->size - o < LIFE_VERIFY_CHUNK ?
					   (size_t)(t->size - o) :
					   LIFE_VERIFY_CHUNK;

				ret = be->copy_from_pool(&d->dev, pl,
							 t->pool_off + o,
							 bounce, n);
				if (ret) {
					base_errf(err, -ret,
						"reading tensor %s back from the device failed: %s",
						t->name, strerror(-ret));
					goto out_free;
				}
				base_hasher_update(&hs, bounce, n);
			}
			base_hasher_final(&hs, h);
		}
		if (memcmp(h, v->hash[i], BASE_HASH_LEN)) {
			if (!bad++)
				snprintf(err, BASE_ERR_LEN, "%s", t->name);
		}
	}
	ret = bad;
out_free:
	if (bounce)
		be->staging_free(&d->dev, bounce, LIFE_VERIFY_CHUNK);
	return ret;
}

/* The end of a wake's overlapped device hash (wake.c, restore_pools). */
int life_verify_end(struct wcd *d, struct wcd_version *v, char *err)
{
	uint8_t (*dh)[BASE_HASH_LEN];
	int ret;

	err[0] = '\0';
	dh = calloc(v->plan.ntensors ? v->plan.ntensors : 1, sizeof(*dh));
	if (!dh) {
		d->dev.be->hash_end(&d->dev, NULL, NULL);
		return base_errf(err, ENOMEM, "out of memory");
	}
	ret = hash_finish(d, v, dh, err);
	if (!ret)
		ret = hashes_differ(v, dh, err);
	free(dh);
	return ret;
}
