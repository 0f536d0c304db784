/* SPDX-License-Identifier: MIT */
/*
 * A level-1 sleep's host buffers come in three stages that overlap (issue
 * 17; bench/RESULTS.md measured each on the H200, per 16 GiB): a mapper
 * job on the daemon's worker pool (d->work) maps and first-touches every
 * pool's buffer in order (host_map: faulting fresh memory in, 0.3 s with
 * 16 threads, no device call); the loop's thread pins each one
 * (staging_pin: cudaHostRegister, 0.37 s, serialised by the driver
 * whatever the threads) and queues its copy (copy_from_pool_async, 0.31 s
 * at the D2H rate) right after, so that a copy is never called while a
 * register holds the driver (a cudaMemcpy then waits for it) and the
 * device copies pool i while pool i+1 is pinned. The mapper runs ahead
 * freely: every buffer is needed anyway.
 *
 * The sleep runs in the request's callback, which cannot turn the loop,
 * so it waits for the mapper on the mapper's own condition, not for the
 * job's after function: that comes once the callback has returned and
 * only frees the struct (the pool hands the job back after its work has
 * returned, so the mutex is destroyed when no pool thread holds it). A
 * sleep runs while no load does, so the pool has a thread for the mapper
 * (WCD_WORK_THREADS_MAX); where the job cannot be queued at all the
 * mapping runs on the loop's thread before the first pin.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "life/host_copy.h"
#include "life/host_free.h"
#include "model/versions.h"
#include "daemon/fault.h"

struct host_mapper {
	struct gpu_dev *dev;
	const struct wcd_version *v;
	struct rx_work w;
	bool queued;              /* on the pool (else ran when started) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t done;            /* pools [0, done) are mapped, or failed */
	bool stop;                /* the sleep failed: map no more */
	bool returned;            /* the work function is over */
	void *p[GPU_POOLS_MAX];   /* until the sleep takes it */
	bool have[GPU_POOLS_MAX]; /* held already (taken back): not mapped */
	int ret[GPU_POOLS_MAX];
	uint64_t ns[GPU_POOLS_MAX];
	char err[BASE_ERR_LEN];   /* of the failed pool */
};

/* On a pool thread: maps each pool's buffer in order until one fails or
 * the sleep says stop. */
static void host_mapper_work(struct rx_work *w)
{
	struct host_mapper *M = w->data;
	const struct wcd_version *v = M->v;
	char err[BASE_ERR_LEN];

	for (uint32_t i = 0; i < v->npools; i++) {
		uint64_t t = rx_now_ns(), len = v->pools[i].size;
		void *p = NULL;
		bool stop;
		int ret = 0;

		pthread_mutex_lock(&M->mu);
		stop = M->stop;
		pthread_mutex_unlock(&M->mu);
		if (stop)
			break;
		/* the tests' hook: the host buffer of pool N cannot be had */
		if (len && fault_num(FAULT_SLEEP_ALLOC_FAIL, -1) == i)
			ret = base_errf(err, ENOMEM,
				      "WCD_TEST_SLEEP_ALLOC_FAIL: no host buffer for pool %u",
				      i);
		else if (len && !M->have[i])
			ret = M->dev->be->host_map(M->dev, len, &p, err);
		pthread_mutex_lock(&M->mu);
		M->p[i] = p;
		M->ret[i] = ret;
		M->ns[i] = rx_now_ns() - t;
		if (ret)
			snprintf(M->err, sizeof(M->err), "%s", err);
		M->done = i + 1;
		pthread_cond_broadcast(&M->cv);
		pthread_mutex_unlock(&M->mu);
		if (ret)
			break;
	}
	/* the last touch of M here: what is mapped is the sleep's */
	pthread_mutex_lock(&M->mu);
	M->returned = true;
	pthread_cond_broadcast(&M->cv);
	pthread_mutex_unlock(&M->mu);
}

static void host_mapper_destroy(struct host_mapper *M)
{
	pthread_mutex_destroy(&M->mu);
	pthread_cond_destroy(&M->cv);
	free(M);
}

/* On the loop, after the sleep that queued the mapper has ended it
 * (host_mapper_end): only the struct is left. */
static void host_mapper_after(struct rx_work *w, int status)
{
	(void)status;
	host_mapper_destroy(w->data);
}

/* Starts mapping v's pools but those held already (have[i]); NULL when
 * out of memory. */
static struct host_mapper *host_mapper_start(struct wcd *d,
					     const struct wcd_version *v,
					     void *const *have)
{
	struct host_mapper *M = calloc(1, sizeof(*M));
	int ret;

	if (!M)
		return NULL;
	M->dev = &d->dev;
	M->v = v;
	M->w.data = M;
	for (uint32_t i = 0; i < v->npools; i++)
		M->have[i] = have[i] != NULL;
	pthread_mutex_init(&M->mu, NULL);
	pthread_cond_init(&M->cv, NULL);
	ret = !d->work_open ? -ESHUTDOWN :
	      rx_queue_work(&d->work, &M->w, host_mapper_work,
			    host_mapper_after);
	M->queued = !ret;
	if (ret) {
		log_warn("sleep: mapping the host buffers on the loop's thread, before the first pin: the mapper cannot be queued on the worker pool: %s",
			 strerror(-ret));
		host_mapper_work(&M->w);
	}
	return M;
}

/* Waits for pool i's buffer: 0 and *p (now the caller's), or the mapping's
 * error (in err). */
static int host_mapper_take(struct host_mapper *M, uint32_t i, void **p,
			    uint64_t *ns, char *err)
{
	int ret;

	pthread_mutex_lock(&M->mu);
	while (M->done <= i)
		pthread_cond_wait(&M->cv, &M->mu);
	ret = M->ret[i];
	*p = M->p[i];
	*ns = M->ns[i];
	M->p[i] = NULL;
	if (ret)
		snprintf(err, BASE_ERR_LEN, "%s", M->err);
	pthread_mutex_unlock(&M->mu);
	return ret;
}

/* The tests' hook: pinning pool N fails (WCD_TEST_SLEEP_PIN_FAIL=N), once
 * the mapper has mapped every pool, so that buffers mapped ahead of the
 * failure are there for the drain (host_mapper_end) to free. */
static int test_pin_fail(struct host_mapper *M, uint32_t i, char *err)
{
	if (fault_num(FAULT_SLEEP_PIN_FAIL, -1) != i)
		return 0;
	pthread_mutex_lock(&M->mu);
	while (M->done < M->v->npools && !M->ret[M->done - 1])
		pthread_cond_wait(&M->cv, &M->mu);
	pthread_mutex_unlock(&M->mu);
	return base_errf(err, ENOMEM,
		       "WCD_TEST_SLEEP_PIN_FAIL: pool %u cannot be pinned", i);
}

/* Stops the mapper, waits for its work to return (or cancels it if it has
 * not started) and unmaps what it mapped that the sleep did not take. The
 * struct goes with the job's after function, or here if it ran inline. */
static void host_mapper_end(struct host_mapper *M)
{
	pthread_mutex_lock(&M->mu);
	M->stop = true;
	pthread_mutex_unlock(&M->mu);
	/* 0: it had not started and never will; else wait for its work */
	if (M->queued && rx_cancel_work(&M->w)) {
		pthread_mutex_lock(&M->mu);
		while (!M->returned)
			pthread_cond_wait(&M->cv, &M->mu);
		pthread_mutex_unlock(&M->mu);
	}
	for (uint32_t i = 0; i < M->done; i++)
		if (M->p[i])
			M->dev->be->host_unmap(M->dev, M->p[i],
					       M->v->pools[i].size);
	if (!M->queued)
		host_mapper_destroy(M);
}

/* Whether the kept arena (--sleep-arena keep) fits v's pools as they are. */
static bool arena_fits(const struct wcd_life *L, const struct wcd_version *v)
{
	if (!L->arena_bytes || L->nhost != v->npools)
		return false;
	for (uint32_t i = 0; i < v->npools; i++)
		if (L->host_len[i] != v->pools[i].size ||
		    (v->pools[i].size && !L->host[i]))
			return false;
	return true;
}

int life_sleep_copy(struct wcd *d, struct wcd_version *v, bool *reused,
		    uint32_t *took, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	struct wcd_life *L = &d->model.life;
	struct host_mapper *M = NULL;
	uint64_t need = 0, have, t0 = rx_now_ns(), pin_ns = 0, wait_ns = 0;
	uint64_t tw, tp;
	char werr[BASE_ERR_LEN];
	bool queued = false;
	uint64_t back = 0;
	int ret = 0, wret;

	/* the last wake's copy: what is not freed yet comes back */
	*took = life_host_reclaim(d, v, &back);
	*reused = arena_fits(L, v);
	if (!*reused && !*took)
		life_host_free(d);
	L->arena_bytes = 0;
	L->host_bytes = 0;
	for (uint32_t i = 0; i < v->npools; i++)
		need += v->pools[i].size;
	need -= back;
	if (!*reused && version_host_available(&have) == 0 && need > have)
		return base_errf(err, ENOMEM,
			       "the host copy needs %" PRIu64 " bytes but only %" PRIu64 " bytes of host memory are available (MemAvailable)",
			       need, have);
	L->nhost = v->npools;
	if (!*reused) {
		M = host_mapper_start(d, v, L->host);
		if (!M)
			return base_errf(err, ENOMEM,
				       "out of memory for the host copy's mapper");
	}
	for (uint32_t i = 0; i < v->npools; i++) {
		uint64_t len = v->pools[i].size, map_ns = 0;
		void *p;

		if (!len)
			continue;
		tw = tp = rx_now_ns();
		if (M && !L->host[i]) {
			ret = host_mapper_take(M, i, &p, &map_ns, err);
			if (ret)
				break;
			tp = rx_now_ns();
			ret = test_pin_fail(M, i, err);
			if (!ret)
				ret = be->staging_pin(&d->dev, p, len, err);
			if (ret) {
				be->host_unmap(&d->dev, p, len);
				break;
			}
			L->host[i] = p;
			L->host_len[i] = len;
			pin_ns += rx_now_ns() - tp;
			wait_ns += tp - tw;
		}
		ret = be->copy_from_pool_async(&d->dev, &v->pools[i], 0,
					       L->host[i], len);
		log_debug("sleep: pool %u (%" PRIu64 " bytes): host buffer mapped in %.3f s (%.3f s of it waited for), pinned and its copy queued in %.3f s",
			  i, len, (double)map_ns / 1e9, (double)(tp - tw) / 1e9,
			  (double)(rx_now_ns() - tp) / 1e9);
		if (ret) {
			base_errf(err, -ret,
				"copying pool %u (%" PRIu64 " bytes) to host memory failed: %s",
				i, len, strerror(-ret));
			break;
		}
		queued = true;
		L->host_bytes += len;
	}
	tw = rx_now_ns();
	wret = queued ? be->copy_wait(&d->dev, werr) : 0;
	if (wret && !ret) {
		ret = wret;
		snprintf(err, BASE_ERR_LEN, "%s", werr);
	}
	if (M)
		host_mapper_end(M);
	log_debug("sleep: %" PRIu64 " bytes in %.3f s: mappings waited for %.3f s, pinning %.3f s, the last copies %.3f s",
		  L->host_bytes, (double)(rx_now_ns() - t0) / 1e9,
		  (double)wait_ns / 1e9, (double)pin_ns / 1e9,
		  (double)(rx_now_ns() - tw) / 1e9);
	return ret;
}
