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

struct wcd_push;

/* PUSH_OPEN while the daemon sleeps or wakes: NULL when a session may
 * open (awake; asleep at level 2 for a whole update), else the refusal
 * in buf (code in *code). */
const char *push_asleep_refusal(const struct wcd *d, uint32_t flags,
				uint32_t *code, char *buf, size_t cap);
/* The session's state from its open to its end: UPDATING awake, WAKING
 * asleep (p->asleep set for the ends). */
void push_asleep_enter(struct wcd *d, struct wcd_push *p);
/* Commit, before N+1 is published: an asleep daemon wakes into it. */
void push_asleep_wake(struct wcd *d, struct wcd_push *p);
/* The session's end: the state it held left (READY awake, SLEEPING when
 * an asleep session ended without a commit). */
void push_asleep_leave(struct wcd *d, struct wcd_push *p);

#endif
