/* SPDX-License-Identifier: MIT */
/*
 * wcd's lifecycle jobs, run by serve() between turns of the loop
 * (lifecycle.h says why), and the replies to the request that queued them. Both drive the reactor while they wait, so other
 * clients keep being served.
 *
 * WAKE level 1: new pools, one backend copy_to_pool per pool from the host
 * copy (pinned staging memory on CUDA, so it runs at the host-to-device
 * rate) on COPY_STREAMS streams, completions handed back through an
 * rx_wake; seal; then every tensor's hash is computed again from the pools
 * (host: the sealed mapping; CUDA: copied back through a bounce buffer) and
 * compared with the manifest. A mismatch releases the new pools and leaves
 * the daemon asleep with its host copy. Once the reply is queued, a thread
 * frees the host copy (lifecycle.c, host_free_later) and the device idles
 * after it.
 *
 * WAKE level 2: the normal load pipeline (load_prepare + load_run) into a
 * scratch version, whose layout and hashes must equal the manifest's; its
 * pools then replace the sleeping version's. Files that changed on disk
 * leave the daemon asleep and say so.
 *
 * UPDATE: load_prepare of the new directory into the free version slot;
 * the identity may differ only in the checkpoint digest and the directory
 * (else a MISMATCH naming every other field); free device memory is checked
 * before any pool exists; load_run; then version N+1 becomes current in one
 * step (new HELLO/ATTACH get it; the ready file is rewritten atomically),
 * lease holders get a NOTICE, and version N is freed at once if it has no
 * lease, else when its last lease ends (version_publish). Any failure
 * frees N+1's partial pools and leaves N serving, untouched.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "life/life_job.h"
#include "serve/server.h"
#include "model/versions.h"
#include "load/load.h"
#include "wire_life.h"
#include "daemon/fault.h"

#define COPY_STREAMS 4

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

/* --- the requester's reply ----------------------------------------------- */

void life_reply_frame(struct wcd_client *c, unsigned type, uint64_t id,
		      const struct wire_life_reply *r)
{
	struct wire_put w;

	wire_put_init(&w);
	wire_frame_begin(&w, type, WIRE_F_REPLY, id);
	wire_life_reply_put(&w, r);
	reply_frame(c, id, &w, NULL, 0);
}

void life_reply(struct wcd *d, unsigned type, const struct wire_life_reply *r)
{
	struct wcd_life *L = &d->model.life;
	struct wcd_client *c;
	uint64_t id;

	snprintf(L->last, sizeof(L->last), "%s", r->msg);
	metrics_life(&d->m, type == WIRE_WAKE ? METRICS_WAKE : METRICS_UPDATE,
		     true, r->ns + r->verify_ns, r->bytes);
	c = waiter_take(d, &L->who, &id);
	if (c)
		life_reply_frame(c, type, id, r);
}

void life_fail(struct wcd *d, uint32_t code, const char *fmt, ...)
{
	struct wcd_life *L = &d->model.life;
	struct wcd_client *c;
	uint64_t id;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(L->last, sizeof(L->last), fmt, ap);
	va_end(ap);
	L->failures++;
	metrics_life(&d->m, L->who.type == WIRE_UPDATE ? METRICS_UPDATE :
		     METRICS_WAKE, false, 0, 0);
	log_warn("%s", L->last);
	c = waiter_take(d, &L->who, &id);
	if (c)
		reply_error(c, id, code, false, "%s", L->last);
}

void life_host_free(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;

	for (uint32_t i = 0; i < L->nhost; i++) {
		if (L->host[i])
			d->dev.be->staging_free(&d->dev, L->host[i],
						L->host_len[i]);
		L->host[i] = NULL;
		L->host_len[i] = 0;
	}
	L->nhost = 0;
	L->host_bytes = 0;
	L->arena_bytes = 0;
}

/* --- wake level 1: restore from the host copy --------------------------- */

static int hash_pool_steps(struct wcd *d, struct wcd_version *v, uint32_t p,
			   unsigned stream, char *err);

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
			   hash_pool_steps(d, v, i, i % COPY_STREAMS, herr)) {
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

/* Queues the device hash of every tensor of pool p (every pool: p ==
 * UINT32_MAX) longer than GPU_HASH_MIN_LEN, after what copy stream
 * `stream` has queued so far: in one batch where the backend has
 * hash_batch (the tensors side by side on the device), else one
 * hash_step per tensor on chain i. */
static int hash_pool_steps(struct wcd *d, struct wcd_version *v, uint32_t p,
			   unsigned stream, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	struct gpu_hash_job *jobs = NULL;
	char e[BASE_ERR_LEN];
	uint32_t n = 0;
	int ret = 0;

	if (be->hash_batch) {
		jobs = malloc(sizeof(*jobs) * (v->plan.ntensors ? v->plan.ntensors : 1));
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
	ret = hash_pool_steps(d, v, UINT32_MAX, 0, err);
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

/* Hashes every tensor from v's pools (on the device where the backend
 * can) and compares with v->hash; returns the number that differ (first one
 * named in err), or -errno. */
int life_verify_pools(struct wcd *d, struct wcd_version *v, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	uint8_t *bounce = NULL, (*dh)[BASE_HASH_LEN];
	int bad = 0, ret = 0;

	err[0] = '\0';
	dh = calloc(v->plan.ntensors ? v->plan.ntensors : 1, sizeof(*dh));
	if (!dh)
		return base_errf(err, ENOMEM, "out of memory");
	ret = v->npools && !v->pools[0].host_ptr ? device_hashes(d, v, dh, err) :
						   -ENOTSUP;
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
			base_hash128((const uint8_t *)pl->host_ptr + t->pool_off,
				   t->size, h);
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

/* The end of a wake's overlapped device hash (restore_pools): the number
 * of tensors that differ from the manifest (the first named in err), or
 * -errno. */
static int wake_hash_end(struct wcd *d, struct wcd_version *v, char *err)
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
		ret = wake_hash_end(d, v, err);
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
	L->wake_copy_s = secs(copy_ns);
	L->wake_copy_gbps = copy_ns ?
			    (double)L->host_bytes / (double)copy_ns : 0;
	L->wake_verify_s = secs(r->verify_ns);
	if (d->o.sleep_arena_keep) {
		L->arena_bytes = 0;
		for (uint32_t i = 0; i < L->nhost; i++)
			L->arena_bytes += L->host_len[i];
		L->host_bytes = 0;
	}
	/* else the host copy is freed after the reply (life_run_job) */
	snprintf(r->msg, sizeof(r->msg),
		 "awake: version %" PRIu64 " restored from host memory, %" PRIu64 " bytes in %.3f s (%.2f GB/s); %u tensor hashes %s in %.3f s%s",
		 v->number, r->bytes, secs(copy_ns), L->wake_copy_gbps,
		 v->plan.ntensors, v->hashed ? "re-checked" :
		 "not re-checked (wcd --no-hash)", secs(r->verify_ns),
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
	L->wake_copy_s = secs(r->ns);
	L->wake_copy_gbps = r->ns ? (double)r->bytes / (double)r->ns : 0;
	L->wake_verify_s = v->phases.hash_s;
	snprintf(r->msg, sizeof(r->msg),
		 "awake: version %" PRIu64 " reloaded from %s, %" PRIu64 " bytes in %.3f s (%.2f GB/s); %u tensor hashes %s",
		 v->number, d->o.model, r->bytes, secs(r->ns),
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

/* --- update ------------------------------------------------------------- */

/* Lists the identity fields in which nv differs from the served version,
 * other than the checkpoint digest and the directory; returns how many. */
static unsigned update_diff(struct wcd *d, const struct wcd_version *nv,
			    char *out, size_t cap)
{
	struct wire_mismatch *mm = calloc(WIRE_MISMATCH_MAX, sizeof(*mm));
	unsigned n, k = 0;
	size_t off = 0;

	out[0] = '\0';
	if (!mm)
		return 0;
	n = ident_mismatch(&wcd_current(d)->ident, &nv->ident, mm,
			      WIRE_MISMATCH_MAX);
	for (unsigned i = 0; i < n; i++) {
		if (!strcmp(mm[i].field, "ckpt_digest") ||
		    !strcmp(mm[i].field, "model_path"))
			continue;
		if (off < cap)
			off += (size_t)snprintf(out + off, cap - off,
						"%s%s (served %s, new %s)",
						k ? "; " : "", mm[i].field,
						mm[i].daemon, mm[i].client);
		k++;
	}
	free(mm);
	return k;
}

static void shape_str(const struct plan_tensor *t, char *out, size_t cap)
{
	size_t off = (size_t)snprintf(out, cap, "%s[", st_dtype_name(t->dtype));

	for (uint32_t i = 0; i < t->ndim && off < cap; i++)
		off += (size_t)snprintf(out + off, cap - off, "%s%" PRIu64,
					i ? "," : "", t->shape[i]);
	if (off < cap)
		snprintf(out + off, cap - off, "]");
}

/* Lists the first LAYOUT_DIFFS_SHOWN tensors whose name, dtype or shape
 * differ between the served plan and nv's (both sorted by name: one merge
 * walk, O(n)); returns how many differ in all. */
#define LAYOUT_DIFFS_SHOWN 4
static unsigned layout_diff(const struct plan *a, const struct plan *b,
			    char *out, size_t cap)
{
	uint32_t i = 0, j = 0;
	unsigned n = 0;
	size_t off = 0;
	char sa[96], sb[96];

	out[0] = '\0';
	while (i < a->ntensors || j < b->ntensors) {
		const struct plan_tensor *x = i < a->ntensors ? &a->t[i] : NULL;
		const struct plan_tensor *y = j < b->ntensors ? &b->t[j] : NULL;
		int c = !x ? 1 : !y ? -1 : strcmp(x->name, y->name);
		bool same = false;

		if (c == 0) {
			same = x->dtype == y->dtype && x->ndim == y->ndim &&
			       !memcmp(x->shape, y->shape,
				       x->ndim * sizeof(x->shape[0]));
			if (!same) {
				shape_str(x, sa, sizeof(sa));
				shape_str(y, sb, sizeof(sb));
			}
		}
		if (!same && n < LAYOUT_DIFFS_SHOWN && off < cap)
			off += (size_t)(c < 0 ?
				snprintf(out + off, cap - off, "%s%s is gone",
					 n ? "; " : "", x->name) :
				c > 0 ?
				snprintf(out + off, cap - off, "%s%s is new",
					 n ? "; " : "", y->name) :
				snprintf(out + off, cap - off, "%s%s: %s -> %s",
					 n ? "; " : "", x->name, sa, sb));
		n += !same;
		i += c <= 0;
		j += c >= 0;
	}
	return n;
}

/* Checks nv before anything is allocated; 0 or a refusal sent. */
static int update_check(struct wcd *d, struct wcd_version *nv,
			const char *dir)
{
	struct wcd_version *cur = wcd_current(d);
	char diff[WIRE_MSG_MAX + 1];
	uint64_t need, have = 0, held = version_resident_bytes(d);
	unsigned n;

	if (update_diff(d, nv, diff, sizeof(diff))) {
		life_fail(d, WIRE_E_MISMATCH,
			  "update refused: the checkpoint in %s is not a new version of the served model; it differs in %s. An update may change only the weights (the checkpoint digest); start a separate wcd for another model. Version %" PRIu64 " keeps serving",
			  dir, diff, cur->number);
		return -1;
	}
	n = layout_diff(&cur->plan, &nv->plan, diff, sizeof(diff));
	if (n && !(d->model.life.update_flags & WIRE_UPDATE_ALLOW_LAYOUT)) {
		life_fail(d, WIRE_E_MISMATCH,
			  "update refused: the checkpoint in %s changes the layout the engines bound: %u tensor(s) differ in name, dtype or shape (%" PRIu32 " served, %" PRIu32 " new: %s%s); an update may change only the weights. To publish it anyway: wcctl update --allow-layout-change (engines following updates then get tensors they did not bind). Version %" PRIu64 " keeps serving",
			  dir, n, cur->plan.ntensors, nv->plan.ntensors, diff,
			  n > LAYOUT_DIFFS_SHOWN ? "; ..." : "", cur->number);
		return -1;
	}
	if (n)
		log_warn("update: %u tensors change name, dtype or shape (--allow-layout-change): %s",
			 n, diff);
	if (!memcmp(cur->ident.ckpt_digest, nv->ident.ckpt_digest,
		    BASE_HASH_LEN)) {
		life_fail(d, WIRE_E_STATE,
			  "update refused: the checkpoint in %s is the one version %" PRIu64 " already serves (same checkpoint digest): write the new weights first, or give --model NEWDIR",
			  dir, cur->number);
		return -1;
	}
	need = version_plan_need(d, nv);
	if (version_mem_free(d, &have) == 0 && need > have) {
		life_fail(d, WIRE_E_LIMIT,
			  "update refused before loading anything: version %" PRIu64 " needs %" PRIu64 " bytes on device %s beside the %" PRIu64 " bytes of version %" PRIu64 ", but only %" PRIu64 " bytes are free%s: free memory (or run the update where the device has room for two versions), then update again; version %" PRIu64 " keeps serving",
			  cur->number + 1, need, d->dev.name, held,
			  cur->number, have,
			  d->dev.be == &gpu_host_backend ? " (MemAvailable)" : "",
			  cur->number);
		return -1;
	}
	return 0;
}

/* The steps both UPDATE paths share (awake and asleep at level 2): read
 * version n + 1's checkpoint into nv (the model the request names, else the
 * one served), check it against version n (update_check), then load it. On
 * a failure nv is freed, the client has its error, which ends with
 * "; <tail>" (what goes on serving), and -1 is returned. */
static int update_load(struct wcd *d, struct wcd_version *nv, uint64_t n,
		       const char *tail, char *err)
{
	struct wcd_life *L = &d->model.life;
	const char *served = d->o.model;
	int ret;

	memset(nv, 0, sizeof(*nv));
	if (L->model[0])
		d->o.model = L->model;
	ret = load_prepare(d, nv, err);
	d->o.model = served;
	if (ret) {
		load_version_free(d, nv);
		life_fail(d, ret == -ENOTSUP ? WIRE_E_PERM : WIRE_E_STATE,
			  "update refused: %s; %s", err, tail);
		return -1;
	}
	if (update_check(d, nv, nv->model.path)) {
		load_version_free(d, nv);
		return -1;
	}
	ret = load_run(d, nv, err);
	if (!ret && wcd_stopping(d))
		ret = base_errf(err, ECANCELED, "stopped while loading");
	if (ret) {
		load_version_free(d, nv);
		life_fail(d, WIRE_E_INTERNAL,
			  "update to version %" PRIu64 " failed: %s; %s",
			  n + 1, err, tail);
		return -1;
	}
	return 0;
}

void life_run_update(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;
	struct wcd_version *cur = wcd_current(d), *nv;
	struct wire_life_reply r = { 0 };
	struct version_published pub;
	char err[BASE_ERR_LEN] = "", tail[96];
	uint64_t t0 = rx_now_ns();
	int ni = version_slot_free(d);

	WC_ASSERT(d->state == WCD_UPDATING);
	if (ni < 0) {
		life_fail(d, WIRE_E_BUSY, "update refused: no free version slot");
		goto out_state;
	}
	nv = &d->model.ver[ni];
	snprintf(tail, sizeof(tail),
		 "version %" PRIu64 " keeps serving, untouched", cur->number);
	if (update_load(d, nv, cur->number, tail, err))
		goto out_state;

	/* publish: one step, between two turns of the loop */
	snprintf(d->model.path, sizeof(d->model.path), "%s",
		 nv->model.path);
	d->o.model = d->model.path;
	wcd_enter(d, WCD_READY);
	version_publish(d, ni, &pub);
	if (d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r.version = nv->number;
	r.bytes = nv->plan.total_bytes;
	r.ns = rx_now_ns() - t0;
	snprintf(r.msg, sizeof(r.msg),
		 "updated: version %" PRIu64 " (%s) serves, %" PRIu64 " bytes loaded in %.3f s; version %" PRIu64 " %s",
		 nv->number, nv->model.path, r.bytes, secs(r.ns), pub.old_number,
		 pub.old_freed ? "was freed (no lease held it)" :
				 "stays until its engines detach");
	L->updates++;
	log_info("%s", r.msg);
	life_reply(d, WIRE_UPDATE, &r);
	return;
out_state:
	wcd_enter(d, WCD_READY);
}

/* UPDATE while asleep at level 2: nothing of version N is kept (its pools
 * were released, no engine holds a lease: sleep needs none), so the daemon
 * wakes straight from the new checkpoint: one load, not a reload of N
 * followed by the load of N+1. The checks are update_check's (identity,
 * layout, a new checkpoint digest, room on the device), against N's
 * manifest; N is retired when N+1 is published. */
void life_run_update_asleep(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;
	struct wcd_version *cur = wcd_current(d), *nv;
	struct wire_life_reply r = { .level = 2 };
	struct version_published pub;
	char err[BASE_ERR_LEN] = "", tail[96];
	uint64_t t0 = rx_now_ns(), n = cur->number;
	int ni = version_slot_free(d);

	WC_ASSERT(d->state == WCD_WAKING && L->level == 2 && !cur->leases);
	if (ni < 0) {
		life_fail(d, WIRE_E_BUSY,
			  "update refused: no free version slot; the daemon stays asleep (level 2)");
		goto out_asleep;
	}
	nv = &d->model.ver[ni];
	snprintf(tail, sizeof(tail),
		 "the daemon stays asleep (level 2) with version %" PRIu64, n);
	if (update_load(d, nv, n, tail, err))
		goto out_asleep;
	snprintf(d->model.path, sizeof(d->model.path), "%s",
		 nv->model.path);
	d->o.model = d->model.path;
	L->level = 0;
	wcd_enter(d, WCD_READY);
	version_publish(d, ni, &pub);
	if (d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r.version = nv->number;
	r.bytes = nv->plan.total_bytes;
	r.ns = rx_now_ns() - t0;
	r.verify_ns = (uint64_t)(nv->phases.hash_s * 1e9);
	snprintf(r.msg, sizeof(r.msg),
		 "awake and updated: version %" PRIu64 " (%s) loaded straight from its checkpoint while asleep at level 2, %" PRIu64 " bytes in %.3f s (one load); version %" PRIu64 " was freed",
		 nv->number, nv->model.path, r.bytes, secs(r.ns), pub.old_number);
	L->updates++;
	L->wakes++;
	log_info("%s", r.msg);
	life_reply(d, WIRE_UPDATE, &r);
	return;
out_asleep:
	wcd_enter(d, WCD_SLEEPING);
}
