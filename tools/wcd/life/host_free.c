/* SPDX-License-Identifier: MIT */
/*
 * The host copy a level-1 wake restored from, freed on a thread after the
 * wake's reply: the unpinning of 16 GiB takes 0.26-0.30 s on the H200 and
 * the munmap 0.05 s, no faster from more threads (bench/RESULTS.md, issue
 * 17). One per wake, allocated: d->life.freeing points to it until it is
 * joined (freer_done); it frees itself when its rx_wake has closed, which
 * may be after a later wake made the next one.
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

struct host_freer {
	struct wcd *d;
	void *p[GPU_POOLS_MAX];
	uint64_t len[GPU_POOLS_MAX];
	uint32_t n;
	uint64_t bytes;
	uint64_t t0, ns;              /* ns: the thread's, read after join */
	int stop;                     /* atomic: a sleep takes the rest back */
	pthread_t th;
	bool closing;
	struct rx_wake wake;
	struct rx_wake_node node;
};

/* The tests' hook (WCD_TEST_WAKE_FREE_GATE=PATH): the free waits, up to
 * 60 s, for PATH to exist (and removes it) or for a sleep to stop it, so
 * that a test can act while a free is pending; before the first buffer, or
 * before buffer K with WCD_TEST_WAKE_FREE_GATE_AT=K. */
static void test_free_gate(struct host_freer *F, uint32_t i)
{
	const char *gate = getenv("WCD_TEST_WAKE_FREE_GATE");
	const char *at = getenv("WCD_TEST_WAKE_FREE_GATE_AT");

	if (!gate || !*gate || (at && *at ? strtoul(at, NULL, 10) : 0) != i)
		return;
	for (int k = 0; k < 6000 && access(gate, F_OK) &&
	     !__atomic_load_n(&F->stop, __ATOMIC_ACQUIRE); k++)
		usleep(10000);
	unlink(gate);
}

static void *freer_fn(void *arg)
{
	struct host_freer *F = arg;
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
	/* the last thing this thread does with F: the loop joins it next */
	rx_wake_post(&F->wake, &F->node);
	return NULL;
}

/* Joins the running free: its bytes are gone. */
static void freer_done(struct wcd *d, const char *how)
{
	struct host_freer *F = d->life.freeing;

	pthread_join(F->th, NULL);
	log_info("the host copy of the last wake (%" PRIu64 " bytes in %u buffers) was freed %.3f s after the wake's reply%s",
		 F->bytes, F->n, (double)F->ns / 1e9, how);
	d->life.freeing = NULL;
	d->life.freeing_bytes = 0;
}

static void freer_wake_cb(struct rx_wake *w, struct rx_wake_node *node)
{
	struct host_freer *F = container_of(w, struct host_freer, wake);
	struct wcd *d = F->d;

	if (!node) {
		free(F);
		/* skipped while the free was pending; not in the middle of a
		 * handover (the old daemon exits after it, or resumes with
		 * the context it has) */
		if (!d->pausing)
			life_device_idle(d);
		return;
	}
	if (d->life.freeing == F)
		freer_done(d, "");
	if (!F->closing) {
		F->closing = true;
		rx_wake_close(w);
	}
}

/* A level-1 sleep while the last wake's host copy is being freed (in
 * the request's callback): the free stops at its next buffer (on the H200 it unpins 16 GiB in 0.3 s,
 * and the sleep would pin as much again in 0.37 s) and the buffers it has
 * not freed come back into d->life.host[] for v's pools they fit (those of
 * the version that woke, unless an update came between: then none fit
 * and they are freed here). Returns how many came back, their bytes in
 * *bytes. */
uint32_t life_host_reclaim(struct wcd *d, const struct wcd_version *v,
			   uint64_t *bytes)
{
	struct host_freer *F = d->life.freeing;
	struct wcd_life *L = &d->life;
	uint32_t took = 0, freed = 0;

	*bytes = 0;
	if (!F)
		return 0;
	__atomic_store_n(&F->stop, 1, __ATOMIC_RELEASE);
	pthread_join(F->th, NULL);
	d->life.freeing = NULL;
	d->life.freeing_bytes = 0;
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

void life_host_settle(struct wcd *d)
{
	if (!d->life.freeing)
		return;
	log_info("waiting for the host copy of the last wake (%" PRIu64 " bytes) to be freed",
		 d->life.freeing_bytes);
	freer_done(d, " (waited for)");
}

/* Hands the host copy (L->host[]) to a thread that frees it (CUDA:
 * cudaHostUnregister and munmap), so that the wake's reply, queued
 * before, goes out without waiting for it; the thread posts to the loop
 * when it is done. Where no thread can be had (the tests' hook:
 * WCD_TEST_WAKE_FREE_NO_THREAD), frees it here. */
void life_host_free_later(struct wcd *d)
{
	struct wcd_life *L = &d->life;
	const char *nothread = getenv("WCD_TEST_WAKE_FREE_NO_THREAD");
	struct host_freer *F;
	int ret;

	WC_ASSERT(!L->freeing);
	F = calloc(1, sizeof(*F));
	ret = F ? rx_wake_init(&d->loop, &F->wake, freer_wake_cb) : -ENOMEM;
	if (ret) {
		log_warn("freeing the host copy now, on the loop's thread: %s",
			 strerror(-ret));
		free(F);
		life_host_free(d);
		return;
	}
	F->d = d;
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
	/* the tests' hook: as if no thread could be made */
	ret = nothread && *nothread ? EAGAIN :
	      pthread_create(&F->th, NULL, freer_fn, F);
	if (ret) {
		log_warn("freeing the host copy now, on the loop's thread: no thread for it: %s",
			 strerror(ret));
		freer_fn(F);          /* posts: the callback closes the wake */
		log_info("the host copy (%" PRIu64 " bytes) was freed in %.3f s before the wake's reply went out",
			 F->bytes, (double)F->ns / 1e9);
		return;
	}
	L->freeing = F;
	L->freeing_bytes = F->bytes;
}


void life_host_free(struct wcd *d)
{
	struct wcd_life *L = &d->life;

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
