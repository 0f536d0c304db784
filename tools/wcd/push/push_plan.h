/* SPDX-License-Identifier: MIT */
/*
 * push_plan.c: what a trainer needs to place its tensors, and the layout
 * check of a session's plan (push.h has the folder's map).
 */
#ifndef WCD_PUSH_PLAN_H
#define WCD_PUSH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/daemon.h"

#define PUSH_NAMES_SHOWN 4              /* tensors named in one refusal */

struct wcd_client;

/* The checkpoint tensors of v's plan: its first entries (plan.h: the
 * checkpoint names in name order, then the views); a session writes these
 * and only these, by their index. */
uint32_t push_plan_tensors(const struct wcd_version *v);
/* Bytes a session writes: the checkpoint tensors' parts on this rank. */
uint64_t push_plan_bytes(const struct wcd_version *v);
/* Replies to PUSH_PLAN request id with v's tensors from first (at most max,
 * 0: as many as fit under WIRE_PAYLOAD_MAX), WIRE_F_MORE when more
 * follow. */
void push_plan_reply(struct wcd_client *c, uint64_t id,
		     const struct wcd_version *v, uint32_t first,
		     uint32_t max);

#endif
