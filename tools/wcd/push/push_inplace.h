/* SPDX-License-Identifier: MIT */
/*
 * push_inplace.c: an in-place session's commit (push.h has the folder's
 * map; the session's ends are push_session.c's, as for every session).
 */
#ifndef WCD_PUSH_INPLACE_H
#define WCD_PUSH_INPLACE_H

#include <stdint.h>

#include "daemon/daemon.h"

struct wcd_push;
struct wire_life_reply;

/* The commit's first half after the seal of the session's pools: the
 * served version's bytes become what the trainer wrote (host: the
 * checkpoint entries written, written[i] != 0, copied from the session's
 * sealed pools through the daemon's writable mapping; direct: written
 * already) and its hashes are recomputed where it changed (keep: a
 * partial update's kept entries, as push_hash). 0, or -errno with err
 * set. */
int push_inplace_prepare(struct wcd *d, struct wcd_push *p,
			 const uint8_t *written, const uint8_t *keep,
			 char *err);
/* The second half: the served version takes the number N+1 (the same
 * pools), the session's own pools go (host), every client holding a
 * lease gets WIRE_NOTICE_IN_PLACE; fills r (the caller rewrites the ready
 * file once the reply is out). */
void push_inplace_publish(struct wcd *d, struct wcd_push *p,
			  struct wire_life_reply *r);

#endif
