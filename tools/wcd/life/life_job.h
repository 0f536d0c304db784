/* SPDX-License-Identifier: MIT */
/* life/life_job.c: the WAKE and UPDATE jobs and their replies (the design
 * in lifecycle.h). */
#ifndef WCD_LIFE_JOB_H
#define WCD_LIFE_JOB_H

#include <stdint.h>

#include "daemon/daemon.h"

struct wire_life_reply;

#define LIFE_VERIFY_CHUNK (8u << 20)  /* bounce buffer for device hashes */

/* The OK reply of a lifecycle request: r in a reply frame of type to
 * request id of c (SLEEP answers at once, WAKE and UPDATE when the job
 * ends: one builder for both). */
void life_reply_frame(struct wcd_client *c, unsigned type, uint64_t id,
		      const struct wire_life_reply *r);
/* Answers the queued job's requester (if still there). */
void life_reply(struct wcd *d, unsigned type, const struct wire_life_reply *r);
void life_fail(struct wcd *d, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Hashes every tensor from v's pools (on the device where the backend
 * can: 16 hash chains, nothing copied back but the hashes) and compares
 * with v->hash; the number that differ (the first named in err), or
 * -errno. Wake uses it, and a handover's --takeover-verify hash. */
int life_verify_pools(struct wcd *d, struct wcd_version *v, char *err);
void life_host_free(struct wcd *d);
void life_run_wake(struct wcd *d);
void life_run_update(struct wcd *d);
/* UPDATE queued while asleep at level 2 (the state is WAKING): one load
 * of the new checkpoint wakes the daemon as version N+1, with the checks
 * of any update; on a failure the daemon stays asleep with version N. */
void life_run_update_asleep(struct wcd *d);
#endif
