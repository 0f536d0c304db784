/* SPDX-License-Identifier: MIT */
/*
 * life/host_free.c: the end of a level-1 host copy (d->model.life.host[]): freed
 * at once, or, after a wake, later on the daemon's worker pool, so that the
 * wake's reply does not wait for the unpinning; a sleep takes back what
 * that free has not reached yet, an update and the exit wait for it.
 */
#ifndef WCD_LIFE_HOST_FREE_H
#define WCD_LIFE_HOST_FREE_H

#include <stdint.h>

#include "daemon/daemon.h"

/* Frees the host copy now, on the calling thread (the loop's). */
void life_host_free(struct wcd *d);
/* Hands the host copy to a job of d->work that frees it (CUDA:
 * cudaHostUnregister and munmap), so that the wake's reply, queued
 * before, goes out without waiting for it; d->model.life.freeing and
 * .freeing_bytes say it runs. Where the job cannot be queued (the tests'
 * hook: WCD_TEST_WAKE_FREE_NO_THREAD), frees it here. */
void life_host_free_later(struct wcd *d);
/* A level-1 sleep of v (in the request's callback) while that free runs:
 * stops it at its next buffer and takes the buffers it has not freed back
 * into d->model.life.host[] where they fit v's pools (the others are freed).
 * Returns how many came back, their bytes in *bytes. */
uint32_t life_host_reclaim(struct wcd *d, const struct wcd_version *v,
			   uint64_t *bytes);
/* Waits for that free, if one runs, turning the loop until its after
 * function has run (outside every callback): UPDATE and exit call it
 * before they count host memory or leave; exit closes the pool after it. */
void life_host_settle(struct wcd *d);

#endif
