/* SPDX-License-Identifier: MIT */
/*
 * push_pause.c: engines' pause and resume, and what an in-place session
 * refuses to everyone else (push.h has the folder's map).
 */
#ifndef WCD_PUSH_PAUSE_H
#define WCD_PUSH_PAUSE_H

#include <stdint.h>
#include <sys/types.h>

#include "daemon/daemon.h"

struct wcd_client;

/* PAUSE: an engine pauses or resumes (wire_push.h). */
void push_pause_request(struct wcd_client *c, const uint8_t *pl, uint32_t n);
/* The clients holding a lease that have not paused: how many, their pids
 * in pids (at most max). An in-place session opens only when it is 0. */
unsigned push_unpaused(struct wcd *d, pid_t *pids, unsigned max);
/* Counts the paused clients and those holding a lease (for STATUS). */
void push_pause_counts(struct wcd *d, unsigned *paused, unsigned *leased);
/* The sentence that refuses request type now (HELLO, MANIFEST and ATTACH
 * while an in-place session writes the served pools or the served
 * version is incomplete), or NULL; valid until the next call. push.h
 * exports it. */
const char *push_refusal(struct wcd *d, unsigned type);

#endif
