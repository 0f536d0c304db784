/* SPDX-License-Identifier: MIT */
/*
 * wcd's life/ folder, the lifecycle: SLEEP, WAKE and versioned UPDATE.
 *
 *   lifecycle.c  the requests and their checks, the job queue, device idle
 *                (this header)
 *   life_job.c   the jobs (WAKE, UPDATE) and the replies to their requester
 *                (life_job.h)
 *   requests.c   hands SLEEP, WAKE, UPDATE to life_request and asks
 *                life_refusal before HELLO and ATTACH
 *   main.c       runs a pending job between turns of the loop (serve())
 *
 * The state is d->state (wcd.h: WCD_SLEEPING, WCD_WAKING, WCD_UPDATING),
 * changed with wcd_enter(); the lifecycle's data is d->model.life.
 *
 * A job (WAKE, UPDATE) runs the load pipeline, which drives the reactor
 * itself (wcd_turn_until, daemon/turn.c); the reactor is not re-entrant,
 * so a request's callback only queues the job and stops the loop, and serve() runs it at
 * the top level. Other clients are served meanwhile by the load's own turns
 * of the loop; the requester gets its reply when the job ends.
 */
#ifndef WCD_LIFECYCLE_H
#define WCD_LIFECYCLE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu.h"
#include "wire.h"

#include "daemon/daemon.h"

#define LIFE_PIDS_SHOWN 32            /* pids named in one message */

struct wcd;
struct wcd_client;
struct wire_life_reply;
struct wcd_version;

/* --- lifecycle.c ----------------------------------------------------------- */

/* SLEEP, WAKE, UPDATE (p, n: the payload of request id). */
void life_request(struct wcd *d, struct wcd_client *c, uint64_t id,
		  unsigned type, const uint8_t *p, uint32_t n);
/* Non-NULL (the message to send with WIRE_E_SLEEPING) while a request of
 * this type must be refused because the daemon sleeps or is waking. */
const char *life_refusal(struct wcd *d, unsigned type);
/* Runs a queued job, if any; true when the loop must run again. */
bool life_run_job(struct wcd *d);
/* Releases the CUDA context while the daemon only serves (READY): the
 * pools live on through their exported fds (gpu.h idle) and the next job
 * maps them again. A no-op on the host backend, with --ipc legacy or
 * --keep-context. */
void life_device_idle(struct wcd *d);
/* Waits for the thread freeing the host copy of the last level-1 wake, if
 * one runs (a wake hands its host copy to one once its reply is queued):
 * SLEEP, UPDATE and exit call it before they count host memory or leave. */
void life_host_settle(struct wcd *d);
/* Frees host copies at exit. */
void life_free(struct wcd *d);


#endif
