/* SPDX-License-Identifier: MIT */
/*
 * wcd's life/ folder, the lifecycle: SLEEP, WAKE and versioned UPDATE.
 * Its files, top to bottom (each calls only those below it):
 *
 *   lifecycle.c  the requests and their checks, SLEEP, the job queue
 *                (this header: the folder's API for the files above)
 *   host_copy.c  a level-1 sleep's host copy: map (on the worker pool),
 *                pin, copy; or the kept arena (host_copy.h)
 *   wake.c       the WAKE job: restore from the host copy, or reload
 *                (wake.h)
 *   update.c     the UPDATE job, awake or asleep at level 2 (update.h)
 *   verify.c     the hashes re-checked from the pools, on the device
 *                where it can (verify.h)
 *   host_free.c  the host copy's free: now, or after a wake's reply on the
 *                worker pool; taken back by a sleep, waited for by an
 *                update and the exit (host_free.h)
 *   reply.c      the replies to the requester (reply.h)
 *   idle.c       the device's idle: the CUDA context released while only
 *                serving (idle.h)
 *
 * Outside: requests.c hands SLEEP, WAKE, UPDATE to life_request and asks
 * life_refusal before HELLO and ATTACH; main.c runs a pending job between
 * turns of the loop (serve()) and settles the host copy's free before it
 * closes the worker pool; the handover verifies pools and idles the
 * device.
 *
 * The state is d->state (wcd.h: WCD_SLEEPING, WCD_WAKING, WCD_UPDATING),
 * changed with wcd_enter(); the lifecycle's data is d->model.life.
 *
 * A job (WAKE, UPDATE) runs the load pipeline, which drives the reactor
 * itself (wcd_turn_until, daemon/turn.c); the reactor is not re-entrant,
 * so a request's callback only queues the job and stops the loop, and
 * serve() runs it at the top level. Other clients are served meanwhile by
 * the load's own turns of the loop; the requester gets its reply when the
 * job ends.
 *
 * Threads: none of life/'s own. What blocks for long off the loop (a
 * sleep's host mapping, a wake's host free) is a job of the daemon's
 * worker pool (d->work, rx_queue_work), its after function on the loop.
 * SLEEP runs in its request's callback and so cannot wait for an after
 * function: it waits on the job's own condition for the work to return.
 */
#ifndef WCD_LIFECYCLE_H
#define WCD_LIFECYCLE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu.h"
#include "wire.h"

#include "daemon/daemon.h"
#include "life/host_free.h"   /* life_host_settle */
#include "life/idle.h"        /* life_device_idle */
#include "life/verify.h"      /* life_verify_pools */

#define LIFE_PIDS_SHOWN 32            /* pids named in one message */

struct wcd;
struct wcd_client;

/* SLEEP, WAKE, UPDATE (p, n: the payload of request id). */
void life_request(struct wcd *d, struct wcd_client *c, uint64_t id,
		  unsigned type, const uint8_t *p, uint32_t n);
/* Non-NULL (the message to send with WIRE_E_SLEEPING) while a request of
 * this type must be refused because the daemon sleeps or is waking. */
const char *life_refusal(struct wcd *d, unsigned type);
/* Runs a queued job, if any (outside every callback); true when the loop
 * must run again. */
bool life_run_job(struct wcd *d);
/* Frees host copies at exit (after waiting for a wake's free). */
void life_free(struct wcd *d);

#endif
