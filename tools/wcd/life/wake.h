/* SPDX-License-Identifier: MIT */
/*
 * life/wake.c: the WAKE job. Level 1 restores the pools from the host
 * copy and re-checks every hash; level 2 reloads the checkpoint and
 * compares it with the manifest. On a failure the daemon stays asleep.
 */
#ifndef WCD_LIFE_WAKE_H
#define WCD_LIFE_WAKE_H

#include "daemon/daemon.h"

/* Runs the queued WAKE (state WAKING) outside every callback: READY and
 * the requester answered, or SLEEPING again and the requester told why.
 * The host copy of a level-1 wake is the caller's to free afterwards
 * (life_run_job: after the reply, on the worker pool). */
void life_run_wake(struct wcd *d);

#endif
