/* SPDX-License-Identifier: MIT */
/*
 * life/host_copy.c: a level-1 sleep's copy of the pools into host memory
 * (d->model.life.host[]): the buffers mapped ahead on the daemon's worker pool,
 * pinned and their copies queued on the loop's thread, or the kept arena.
 */
#ifndef WCD_LIFE_HOST_COPY_H
#define WCD_LIFE_HOST_COPY_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/daemon.h"

/* Copies every pool of v to host memory from the backend's staging memory
 * (pinned on CUDA, so that WAKE copies at full speed): into the kept arena
 * when there is one that fits (*reused), else into buffers mapped ahead on
 * a job of d->work and pinned here. A sleep right after a wake takes back
 * the buffers of that wake's host copy that its free has not reached yet
 * (*took of them: life_host_reclaim), and maps and pins only the others.
 * Every queued copy is waited for before anything is freed, failure or
 * not. Runs in the request's callback: 0, or -errno with err set. */
int life_sleep_copy(struct wcd *d, struct wcd_version *v, bool *reused,
		    uint32_t *took, char *err);

#endif
