/* SPDX-License-Identifier: MIT */
/*
 * push_commit.c: committing an update session (push.h has the folder's
 * map).
 */
#ifndef WCD_PUSH_COMMIT_H
#define WCD_PUSH_COMMIT_H

#include <stdint.h>

#include "daemon/daemon.h"

struct wcd_client;
struct wcd_push;

/* PUSH_COMMIT of c's session p (pl, n: the payload). */
void push_commit_request(struct wcd_client *c, struct wcd_push *p,
			 const uint8_t *pl, uint32_t n);

#endif
