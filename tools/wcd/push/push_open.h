/* SPDX-License-Identifier: MIT */
/*
 * push_open.c: opening an update session (push.h has the folder's map).
 */
#ifndef WCD_PUSH_OPEN_H
#define WCD_PUSH_OPEN_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/daemon.h"

struct wcd_client;

/* PUSH_OPEN: checked, then queued as a job (the loop stops for it). */
void push_open_request(struct wcd_client *c, const uint8_t *pl, uint32_t n);
/* Runs a queued open; true when one ran. */
bool push_open_job(struct wcd *d);

#endif
