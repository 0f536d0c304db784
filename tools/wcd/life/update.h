/* SPDX-License-Identifier: MIT */
/*
 * life/update.c: the UPDATE job: version N+1 loaded beside N, checked
 * against it (identity, layout, a new checkpoint digest, room on the
 * device) and published in one step; or, asleep at level 2, loaded as the
 * wake.
 */
#ifndef WCD_LIFE_UPDATE_H
#define WCD_LIFE_UPDATE_H

#include "daemon/daemon.h"

/* Runs the queued UPDATE (state UPDATING) outside every callback: N+1
 * serves and the requester is answered, or N serves on, untouched, and
 * the requester is told why. */
void life_run_update(struct wcd *d);
/* UPDATE queued while asleep at level 2 (the state is WAKING): one load
 * of the new checkpoint wakes the daemon as version N+1, with the checks
 * of any update; on a failure the daemon stays asleep with version N. */
void life_run_update_asleep(struct wcd *d);

#endif
