/* SPDX-License-Identifier: MIT */
/*
 * The WAKE job (wake.h), run by serve() between turns of the loop
 * (lifecycle.h says why); it drives the reactor while it waits, so other
 * clients keep being served.
 *
 * Level 1: new pools, one backend copy_to_pool per pool from the host
 * copy (pinned staging memory on CUDA, so it runs at the host-to-device
 * rate) on COPY_STREAMS streams, completions handed back through an
 * rx_wake; seal; then every tensor's hash is computed again from the pools
 * (verify.c: on the device, queued behind each pool's copy where the
 * backend can, else after the copies) and compared with the manifest. A
 * mismatch releases the new pools and leaves the daemon asleep with its
 * host copy. Once the reply is queued, the host copy is freed on the
 * worker pool (host_free.c) and the device idles after it.
 *
 * Level 2: the normal load pipeline (load_prepare + load_run) into a
 * scratch version, whose layout and hashes must equal the manifest's; its
 * pools then replace the sleeping version's. Files that changed on disk
 * leave the daemon asleep and say so.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "clock.h"
#include "err.h"
#include "log.h"
#include "life/wake.h"
#include "life/reply.h"
#include "life/verify.h"
#include "model/versions.h"
#include "load/load.h"
#include "wire_life.h"
#include "daemon/fault.h"

#define COPY_STREAMS 4

struct restore;

/* What a copy's done callback gets: the restore and the pool index. */
struct restore_arg {
	struct restore *R;
	unsigned i;
};

struct restore {
	struct rx_wake wake;
	bool wake_open;
	struct rx_wake_node node[GPU_POOLS_MAX];
	struct restore_arg arg[GPU_POOLS_MAX];
	int res[GPU_POOLS_MAX];
	unsigned pending;
	int err;
};

/* On a backend thread (CUDA host function): only hand the pool back. */
static void restore_copy_done(void *arg, int res)
{
	struct restore_arg *a = arg;

	a->R->res[a->i] = res;
	rx_wake_post(&a->R->wake, &a->R->node[a->i]);
}

static void restore_wake_cb(struct rx_wake *w, struct rx_wake_node *node)
{
	struct restore *R = container_of(w, struct restore, wake);
	unsigned i;

	if (!node) {
		R->wake_open = false;
		return;
	}
	i = (unsigned)(node - R->node);
	if (R->res[i] < 0 && !R->err)
		R->err = R->res[i];
	R->pending--;
}

/* wcd_turn_until's tests: every copy back, the wake closed */
static bool restore_done(void *arg)
{
	return !((struct restore *)arg)->pending;
}

static bool restore_closed(void *arg)
{
	return !((struct restore *)arg)->wake_open;
}

/* Whether the wake hashes on the device as the copies land: each pool's
 * tensors are queued on the hash chains right after the pool's copy
 * (hash_step waits for that copy on the device, not here), so the hashes
 * run while the next pools copy and only the last pool's are left after
 * the copies (on the H200 the re-hash of 16 GB alone took 0.24 s, the
 * copy 0.31 s). */
static bool wake_hash_begin(struct wcd *d, struct wcd_version *v)
{
	const struct gpu_backend *be = d->dev.be;
	char e[BASE_ERR_LEN];
	int ret;

	if (!v->hashed || !be->hash_begin || d->o.hash_on == WCD_HASH_CPU ||
	    !v->npools || v->pools[0].host_ptr)
		return false;
	ret = be->hash_begin(&d->dev, v->plan.ntensors, e);
	if (ret)
		log_debug("wake: hashing after the copies, not during: %s", e);
	return !ret;
}

/* Creates v's pools and copies the host copy into them; *copy_ns gets the
 * copy time (first copy issued to the last one done, sealing included).
 * *hashing: the device hashes were queued with the copies (wake_hash_begin;
 * hash_finish collects them), else they are still to be computed. */
static int restore_pools(struct wcd *d, struct wcd_version *v,
			 uint64_t *copy_ns, bool *hashing, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	struct wcd_life *L = &d->model.life;
	struct restore *R;
	uint64_t t0;
	uint64_t need = version_plan_need(d, v), have;
	char herr[BASE_ERR_LEN];
	int ret;

	*hashing = false;

	if (version_mem_free(d, &have) == 0 && need > have)
		return base_errf(err, ENOMEM,
			       "the pools need %" PRIu64 " bytes on device %s but only %" PRIu64 " are free (another process took memory while the daemon slept?)",
			       need, d->dev.name, have);
	ret = load_pools_alloc(d, v, err);
	if (ret)
		return ret;
	if (L->nhost != v->npools)
		return base_errf(err, EIO,
			       "the host copy holds %u pools but the model has %u",
			       L->nhost, v->npools);
	WC_ASSERT(!rx_loop_in_callback(&d->loop));  /* it drives the loop */
	R = calloc(1, sizeof(*R));
	if (!R)
		return base_errf(err, ENOMEM, "out of memory");
	ret = rx_wake_init(&d->loop, &R->wake, restore_wake_cb);
	if (ret) {
		free(R);
		return base_errf(err, -ret, "rx_wake_init: %s", strerror(-ret));
	}
	R->wake_open = true;
	*hashing = wake_hash_begin(d, v);
	t0 = rx_now_ns();
	for (uint32_t i = 0; i < v->npools && !R->err; i++) {
		struct gpu_copy c = {
			.dst_off = 0, .src = L->host[i],
			.width = L->host_len[i], .height = 1,
			.src_pitch = L->host_len[i],
			.dst_pitch = L->host_len[i],
		};

		if (!c.width)
			continue;
		R->arg[i] = (struct restore_arg){ R, i };
		R->pending++;
		ret = be->copy_to_pool(&d->dev, &v->pools[i], &c,
				       i % COPY_STREAMS, restore_copy_done,
				       &R->arg[i]);
		if (ret) {
			R->pending--;
			R->err = ret;
		} else if (*hashing &&
			   life_hash_pool_steps(d, v, i, i % COPY_STREAMS,
						 herr)) {
			log_warn("wake: hashing after the copies, not during: %s",
				 herr);
			be->hash_end(&d->dev, NULL, NULL);
			*hashing = false;
		}
	}
	wcd_turn_until(d, restore_done, R);
	for (uint32_t i = 0; !R->err && i < v->npools; i++) {
		ret = be->pool_seal(&d->dev, &v->pools[i], err);
		if (ret)
			R->err = ret;
	}
	*copy_ns = rx_now_ns() - t0;
	ret = R->err;
	rx_wake_close(&R->wake);
	wcd_turn_until(d, restore_closed, R);
	free(R);
	if (ret && *hashing) {
		be->hash_end(&d->dev, NULL, NULL);
		*hashing = false;
	}
	if (ret && !err[0])
		base_errf(err, -ret, "copy to the device failed: %s",
			strerror(-ret));
	return ret;
}

static void release_pools(struct wcd *d, struct wcd_version *v)
{
	for (uint32_t i = 0; i < v->npools; i++)
		d->dev.be->pool_release(&d->dev, &v->pools[i]);
	v->npools = 0;
}

/* The tests' hook (WCD_TEST_WAKE_CORRUPT=1): for the next wake only, one
 * byte in the middle of the largest tensor's host copy is flipped; the
 * caller flips it back once the copies are done, so the wake after
 * succeeds. */
static uint8_t *test_corrupt(struct wcd *d, struct wcd_version *v)
{
	bool on = fault_on(FAULT_WAKE_CORRUPT);
	const struct plan_tensor *big = NULL;
	uint8_t *b;

	if (!on)
		return NULL;
	fault_clear(FAULT_WAKE_CORRUPT);
	for (uint32_t i = 0; i < v->plan.ntensors; i++)
		if (!big || v->plan.t[i].size > big->size)
			big = &v->plan.t[i];
	if (!big || !big->size || big->pool >= d->model.life.nhost ||
	    !d->model.life.host[big->pool])
		return NULL;
	b = (uint8_t *)d->model.life.host[big->pool] + big->pool_off + big->size / 2;
	*b ^= 0x5a;
	log_info("WCD_TEST_WAKE_CORRUPT: a byte of tensor %s's host copy flipped for this wake",
		 big->name);
	return b;
}

static void wake_level1(struct wcd *d, struct wire_life_reply *r, char *err)
{
	struct wcd_version *v = wcd_current(d);
	struct wcd_life *L = &d->model.life;
	uint8_t *corrupt = test_corrupt(d, v);
	uint64_t copy_ns = 0, t0;
	bool hashing = false;
	int ret;

	ret = restore_pools(d, v, &copy_ns, &hashing, err);
	if (corrupt)              /* the pools have their copy now */
		*corrupt ^= 0x5a;
	if (ret) {
		release_pools(d, v);
		life_fail(d, WIRE_E_INTERNAL,
			  "wake failed: %s; the daemon stays asleep (level 1) and keeps its host copy: free device memory and wake again",
			  err);
		return;
	}
	t0 = rx_now_ns();
	if (hashing)
		ret = life_verify_end(d, v, err);
	else
		ret = v->hashed ? life_verify_pools(d, v, err) : 0;
	r->verify_ns = rx_now_ns() - t0;
	if (ret) {
		release_pools(d, v);
		if (ret < 0)
			life_fail(d, WIRE_E_INTERNAL,
				  "wake failed while re-checking the hashes: %s; the daemon stays asleep (level 1)",
				  err);
		else
			life_fail(d, WIRE_E_INTERNAL,
				  "wake failed: %d of %u tensors (first: %s) do not match their manifest hash after the restore from host memory; the daemon stays asleep (level 1): wake again, or restart wcd to load from disk",
				  ret, v->plan.ntensors, err);
		return;
	}
	r->bytes = L->host_bytes;
	r->ns = copy_ns;
	L->wake_copy_s = clock_ns_secs(copy_ns);
	L->wake_copy_gbps = copy_ns ?
			    (double)L->host_bytes / (double)copy_ns : 0;
	L->wake_verify_s = clock_ns_secs(r->verify_ns);
	if (d->o.sleep_arena_keep) {
		L->arena_bytes = 0;
		for (uint32_t i = 0; i < L->nhost; i++)
			L->arena_bytes += L->host_len[i];
		L->host_bytes = 0;
	}
	/* else the host copy is freed after the reply (life_run_job:
	 * life_host_free_later) */
	snprintf(r->msg, sizeof(r->msg),
		 "awake: version %" PRIu64 " restored from host memory, %" PRIu64 " bytes in %.3f s (%.2f GB/s); %u tensor hashes %s in %.3f s%s",
		 v->number, r->bytes, clock_ns_secs(copy_ns),
		 L->wake_copy_gbps, v->plan.ntensors,
		 v->hashed ? "re-checked" : "not re-checked (wcd --no-hash)",
		 clock_ns_secs(r->verify_ns),
		 L->arena_bytes ? "; the host arena is kept for the next sleep (--sleep-arena keep)" : "");
}

/* Whether a fresh load t of the served model matches v's manifest; names
 * the first difference in err. */
static bool same_as_manifest(const struct wcd_version *v,
			     const struct wcd_version *t, char *err)
{
	unsigned bad = 0;
	uint32_t first = 0;

	if (t->plan.ntensors != v->plan.ntensors ||
	    t->plan.npools != v->plan.npools) {
		snprintf(err, BASE_ERR_LEN,
			 "it now has %u tensors in %u pools, the manifest %u in %u",
			 t->plan.ntensors, t->plan.npools, v->plan.ntensors,
			 v->plan.npools);
		return false;
	}
	for (uint32_t i = 0; i < v->plan.ntensors; i++) {
		const struct plan_tensor *a = &v->plan.t[i], *b = &t->plan.t[i];

		if (strcmp(a->name, b->name) || a->size != b->size ||
		    a->pool != b->pool || a->pool_off != b->pool_off) {
			snprintf(err, BASE_ERR_LEN,
				 "tensor %u is now %s (%" PRIu64 " bytes), the manifest says %s (%" PRIu64 " bytes)",
				 i, b->name, b->size, a->name, a->size);
			return false;
		}
		if (v->hashed && t->hashed &&
		    memcmp(v->hash[i], t->hash[i], BASE_HASH_LEN) && !bad++)
			first = i;
	}
	if (bad) {
		snprintf(err, BASE_ERR_LEN,
			 "%u of %u tensors (first: %s) do not match their manifest hash",
			 bad, v->plan.ntensors, v->plan.t[first].name);
		return false;
	}
	return true;
}

static void wake_level2(struct wcd *d, struct wire_life_reply *r, char *err)
{
	struct wcd_version *v = wcd_current(d), *t;
	struct wcd_life *L = &d->model.life;
	uint64_t t0 = rx_now_ns();
	int ret;

	t = calloc(1, sizeof(*t));
	if (!t) {
		life_fail(d, WIRE_E_INTERNAL, "wake failed: out of memory; the daemon stays asleep (level 2)");
		return;
	}
	ret = load_prepare(d, t, err);
	if (!ret)
		ret = load_run(d, t, err);
	if (ret) {
		load_version_free(d, t);
		free(t);
		life_fail(d, WIRE_E_INTERNAL,
			  "wake failed: reloading %s: %s; the daemon stays asleep (level 2): fix the files and wake again",
			  d->o.model, err);
		return;
	}
	if (!same_as_manifest(v, t, err)) {
		load_version_free(d, t);
		free(t);
		life_fail(d, WIRE_E_INTERNAL,
			  "wake failed: the checkpoint in %s changed while the daemon slept: %s; the daemon stays asleep (level 2): restore the files and wake again, or restart wcd on the new files",
			  d->o.model, err);
		return;
	}
	/* Adopt the reload whole: the same bytes, but the files' identity as
	 * it is now (a rewrite with equal bytes changes the mtimes, hence the
	 * checkpoint digest engines compute). v holds no pools while asleep. */
	{
		struct wcd_version keep = *v;

		*v = *t;
		v->used = keep.used;
		v->number = keep.number;
		v->leases = keep.leases;
		*t = keep;
	}
	r->bytes = v->plan.total_bytes;
	r->ns = rx_now_ns() - t0;
	r->verify_ns = (uint64_t)(v->phases.hash_s * 1e9);
	L->wake_copy_s = clock_ns_secs(r->ns);
	L->wake_copy_gbps = r->ns ? (double)r->bytes / (double)r->ns : 0;
	L->wake_verify_s = v->phases.hash_s;
	snprintf(r->msg, sizeof(r->msg),
		 "awake: version %" PRIu64 " reloaded from %s, %" PRIu64 " bytes in %.3f s (%.2f GB/s); %u tensor hashes %s",
		 v->number, d->o.model, r->bytes, clock_ns_secs(r->ns),
		 L->wake_copy_gbps, v->plan.ntensors,
		 v->hashed ? "re-checked against the manifest" :
		 "not re-checked (wcd --no-hash)");
	load_version_free(d, t);
	free(t);
}

void life_run_wake(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;
	struct wire_life_reply r = { .level = L->level };
	char err[BASE_ERR_LEN] = "";

	r.version = wcd_current(d)->number;
	if (L->level == 1)
		wake_level1(d, &r, err);
	else
		wake_level2(d, &r, err);
	if (!r.msg[0]) {            /* failed: still asleep */
		wcd_enter(d, WCD_SLEEPING);
		return;
	}
	L->level = 0;
	L->wakes++;
	if (wcd_enter(d, WCD_READY) && d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	log_info("%s", r.msg);
	life_reply(d, WIRE_WAKE, &r);
}
