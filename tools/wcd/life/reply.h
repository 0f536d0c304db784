/* SPDX-License-Identifier: MIT */
/*
 * life/reply.c: the answer to the client whose request started a
 * lifecycle operation: SLEEP's at once (lifecycle.c), WAKE's and UPDATE's
 * when their job ends (wake.c, update.c), with the metrics and the
 * STATUS line each outcome updates. The design is in lifecycle.h.
 */
#ifndef WCD_LIFE_REPLY_H
#define WCD_LIFE_REPLY_H

#include <stdint.h>

#include "daemon/daemon.h"

struct wire_life_reply;

/* The OK reply of a lifecycle request: r in a reply frame of type to
 * request id of c (one builder for SLEEP's and the jobs'). */
void life_reply_frame(struct wcd_client *c, unsigned type, uint64_t id,
		      const struct wire_life_reply *r);
/* Answers the queued job's requester (if still there) with r. */
void life_reply(struct wcd *d, unsigned type, const struct wire_life_reply *r);
/* Ends the queued job with an error: the message (also the STATUS line and
 * a warning in the log) to its requester, as an ERROR of code. */
void life_fail(struct wcd *d, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
