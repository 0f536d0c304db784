/* SPDX-License-Identifier: MIT */
/*
 * The host copy a level-1 wake restored from is freed after the wake's
 * reply, on a job of the daemon's worker pool (d->work, reactor/work.c):
 * the unpinning of 16 GiB takes 0.26-0.30 s on the H200 and the munmap
 * 0.05 s, no faster from more threads (bench/RESULTS.md, issue 17), and
 * nothing needs that memory back before the next sleep.
 *
 * One struct host_freer per wake, allocated, owned by its job until the
 * job's after function has run on the loop: that function logs the free,
 * frees the struct and lets the device idle (the buffers were registered
 * in the CUDA context). d->model.life.freeing points to it from the queueing
 * until the free is over. Three ends:
 *   - the job runs through: its after function ends it;
 *   - a level-1 sleep comes first (life_host_reclaim, in the request's
 *     callback, which cannot turn the loop): it cancels the job if it has
 *     not started, else stops it at its next buffer and waits on the
 *     struct's own condition for its work function to return; then it
 *     takes the buffers not freed back (still pinned);
 *   - an UPDATE or the exit waits for it (life_host_settle, outside every
 *     callback): it turns the loop until the after function has run.
 *
 * The struct's mutex and condition are destroyed by the after function
 * only: the pool hands the job to the loop after its work function has
 * returned, so no pool thread holds them any more.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "log.h"
#include "life/host_free.h"
#include "life/idle.h"
#include "serve/server.h"
#include "daemon/fault.h"

struct host_freer {
	struct wcd *d;
	struct rx_work w;
	void *p[GPU_POOLS_MAX];       /* NULL once freed or taken back */
	uint64_t len[GPU_POOLS_MAX];
	uint32_t n;
	uint64_t bytes;
	uint64_t t0, ns;              /* ns: the work's, read once returned */
	int stop;                     /* atomic: a sleep takes the rest back */
	const char *how;              /* for the log: "" or " (waited for)" */
	pthread_mutex_t mu;           /* guards returned */
	pthread_cond_t cv;
	bool returned;                /* the work function is done with p[] */
};

/* The tests' hook (WCD_TEST_WAKE_FREE_GATE=PATH, fault_gate): the free
 * waits for PATH or for a sleep to stop it, so that a test can act while a
 * free is pending; before the first buffer, or before buffer K with
 * WCD_TEST_WAKE_FREE_GATE_AT=K. */
static bool freer_stopped(void *arg)
{
	return __atomic_load_n(&((struct host_freer *)arg)->stop,
			       __ATOMIC_ACQUIRE);
}

static void test_free_gate(struct host_freer *F, uint32_t i)
{
	if (fault_num(FAULT_WAKE_FREE_GATE_AT, 0) == i)
		fault_gate(FAULT_WAKE_FREE_GATE, freer_stopped, F);
}

/* On a pool thread (or the loop's, where it could not be queued): frees
 * the buffers in order until a sleep says stop. */
static void freer_work(struct rx_work *w)
{
	struct host_freer *F = w->data;
	struct gpu_dev *dev = &F->d->dev;

	for (uint32_t i = 0; i < F->n; i++) {
		test_free_gate(F, i);
		if (__atomic_load_n(&F->stop, __ATOMIC_ACQUIRE))
			break;
		if (F->p[i])
			dev->be->staging_free(dev, F->p[i], F->len[i]);
		F->p[i] = NULL;
	}
	F->ns = rx_now_ns() - F->t0;
	/* the last touch of F here: p[] is a waiting sleep's from now on */
	pthread_mutex_lock(&F->mu);
	F->returned = true;
	pthread_cond_broadcast(&F->cv);
	pthread_mutex_unlock(&F->mu);
}

/* Waits for the work function to return (the loop's thread, which may be
 * inside a callback: the job runs on its own and ends in bounded time). */
static void freer_wait(struct host_freer *F)
{
	pthread_mutex_lock(&F->mu);
	while (!F->returned)
		pthread_cond_wait(&F->cv, &F->mu);
	pthread_mutex_unlock(&F->mu);
}

/* The free is over: its bytes are gone. */
static void freer_done(struct wcd *d, struct host_freer *F)
{
	log_info("the host copy of the last wake (%" PRIu64 " bytes in %u buffers) was freed %.3f s after the wake's reply%s",
		 F->bytes, F->n, (double)F->ns / 1e9, F->how);
	d->model.life.freeing = NULL;
	d->model.life.freeing_bytes = 0;
}

static void freer_destroy(struct host_freer *F)
{
	pthread_mutex_destroy(&F->mu);
	pthread_cond_destroy(&F->cv);
	free(F);
}

/* On the loop, once the job is the loop's again: status -ECANCELED when it
 * never started (a sleep took every buffer back, or the pool closed: then
 * what is left is freed here). */
static void freer_after(struct rx_work *w, int status)
{
	struct host_freer *F = w->data;
	struct wcd *d = F->d;

	for (uint32_t i = 0; status && i < F->n; i++)
		if (F->p[i])
			d->dev.be->staging_free(&d->dev, F->p[i], F->len[i]);
	if (d->model.life.freeing == F)
		freer_done(d, F);
	freer_destroy(F);
	/* skipped while the free was pending; not in the middle of a
	 * handover (the old daemon exits after it, or resumes with the
	 * context it has) */
	if (!d->srv->pausing)
		life_device_idle(d);
}

/* Stopping the free beats letting it end: on the H200 it unpins 16 GiB in
 * 0.3 s, and the sleep would pin as much again in 0.37 s. The buffers fit
 * v's pools when v is the version that woke, unless an update came
 * between: then none fit and they are freed here. */
uint32_t life_host_reclaim(struct wcd *d, const struct wcd_version *v,
			   uint64_t *bytes)
{
	struct host_freer *F = d->model.life.freeing;
	struct wcd_life *L = &d->model.life;
	uint32_t took = 0, freed = 0;

	*bytes = 0;
	if (!F)
		return 0;
	__atomic_store_n(&F->stop, 1, __ATOMIC_RELEASE);
	/* 0: it had not started and never will; else wait for its work */
	if (rx_cancel_work(&F->w))
		freer_wait(F);
	d->model.life.freeing = NULL;
	d->model.life.freeing_bytes = 0;
	for (uint32_t i = 0; i < F->n; i++) {
		if (!F->p[i]) {
			freed += F->len[i] != 0;
			continue;
		}
		if (F->n == v->npools && F->len[i] == v->pools[i].size &&
		    !L->host[i]) {
			L->host[i] = F->p[i];
			L->host_len[i] = F->len[i];
			*bytes += F->len[i];
			took++;
		} else {
			d->dev.be->staging_free(&d->dev, F->p[i], F->len[i]);
		}
		F->p[i] = NULL;
	}
	if (took)
		L->nhost = v->npools;
	log_info("sleep: %u of the last wake's host buffers (%" PRIu64 " bytes) taken back from their free, still pinned; %u had been freed",
		 took, *bytes, freed);
	return took;
}

/* wcd_turn_until's test: the free's after function has run */
static bool freer_gone(void *arg)
{
	return !((struct wcd *)arg)->model.life.freeing;
}

void life_host_settle(struct wcd *d)
{
	struct host_freer *F = d->model.life.freeing;
	int ret;

	if (!F)
		return;
	WC_ASSERT(!rx_loop_in_callback(&d->loop));
	log_info("waiting for the host copy of the last wake (%" PRIu64 " bytes) to be freed",
		 d->model.life.freeing_bytes);
	F->how = " (waited for)";
	ret = wcd_turn_until(d, freer_gone, d);
	if (ret && d->model.life.freeing == F) {
		/* the loop cannot turn: wait for the work itself; the after
		 * function, whenever it comes, only frees F */
		log_warn("waiting for the host copy's free without the loop: %s",
			 strerror(-ret));
		freer_wait(F);
		freer_done(d, F);
	}
}

void life_host_free_later(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;
	bool noqueue = fault_on(FAULT_WAKE_FREE_NO_THREAD);
	struct host_freer *F;
	int ret;

	WC_ASSERT(!L->freeing);
	F = calloc(1, sizeof(*F));
	if (!F) {
		log_warn("freeing the host copy now, on the loop's thread: %s",
			 strerror(ENOMEM));
		life_host_free(d);
		return;
	}
	pthread_mutex_init(&F->mu, NULL);
	pthread_cond_init(&F->cv, NULL);
	F->d = d;
	F->w.data = F;
	F->how = "";
	F->n = L->nhost;
	for (uint32_t i = 0; i < L->nhost; i++) {
		F->p[i] = L->host[i];
		F->len[i] = L->host_len[i];
		F->bytes += L->host[i] ? L->host_len[i] : 0;
		L->host[i] = NULL;
		L->host_len[i] = 0;
	}
	L->nhost = 0;
	L->host_bytes = 0;
	L->arena_bytes = 0;
	F->t0 = rx_now_ns();
	/* the tests' hook: as if the job could not be queued */
	ret = noqueue ? -EAGAIN :
	      !d->work_open ? -ESHUTDOWN :
	      rx_queue_work(&d->work, &F->w, freer_work, freer_after);
	if (ret) {
		log_warn("freeing the host copy now, on the loop's thread: it cannot be queued on the worker pool: %s",
			 strerror(-ret));
		freer_work(&F->w);
		log_info("the host copy (%" PRIu64 " bytes) was freed in %.3f s before the wake's reply went out",
			 F->bytes, (double)F->ns / 1e9);
		freer_destroy(F);
		return;
	}
	L->freeing = F;
	L->freeing_bytes = F->bytes;
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
