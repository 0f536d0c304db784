/* SPDX-License-Identifier: MIT */
/*
 * An update session opened while the daemon sleeps (push_asleep.c).
 */
#ifndef WCD_PUSH_ASLEEP_H
#define WCD_PUSH_ASLEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/daemon.h"

/* PUSH_OPEN while the daemon sleeps or wakes: NULL when a session may
 * open (awake; asleep at level 2 for a whole update), else the refusal
 * in buf (code in *code). */
const char *push_asleep_refusal(const struct wcd *d, uint32_t flags,
				uint32_t *code, char *buf, size_t cap);
/* The session's state from its open to its end: UPDATING awake, WAKING
 * asleep; returns whether asleep (the session keeps it for its ends).
 * Below push_session.c: it takes that flag, never the session. */
bool push_asleep_enter(struct wcd *d);
/* Commit, before N+1 is published: an asleep daemon wakes into it. */
void push_asleep_wake(struct wcd *d, bool asleep);
/* The session's end: the state it held left (READY awake, SLEEPING when
 * an asleep session ended without a commit). */
void push_asleep_leave(struct wcd *d, bool asleep);

#endif
