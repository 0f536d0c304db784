/* SPDX-License-Identifier: MIT */
/*
 * Update sessions while the daemon sleeps (push_asleep.h), as disk
 * updates while asleep do (life/update.c, life_run_update_asleep).
 *
 * Asleep at level 2 nothing of version N is resident (its pools were
 * released; sleep needs no lease, so no engine holds one): a session fills
 * N+1's fresh pools as it does awake, and its commit publishes N+1 and
 * wakes the daemon into it, one load from the trainer's memory instead of
 * a reload of N from disk followed by the update. Meanwhile the daemon is
 * WAKING, as during a disk update asleep: engines' HELLO and ATTACH are
 * told it is waking (life_refusal, since the sleep level stays until the
 * commit), and SLEEP, WAKE and UPDATE are refused as busy. An abort (the
 * trainer's end, the deadline) puts it back to sleep at level 2, N+1 freed.
 *
 * A partial update keeps N's bytes for what it does not write, and an
 * in-place one rewrites N's pools; N has neither at level 2: both refused,
 * as are sessions at level 1, whose host copy
 * of N is what the daemon wakes from (waking first is one copy).
 */
#include <inttypes.h>
#include <stdio.h>

#include "base.h"
#include "wire_push.h"
#include "push/push_asleep.h"

const char *push_asleep_refusal(const struct wcd *d, uint32_t flags,
				uint32_t *code, char *buf, size_t cap)
{
	const struct wcd_life *L = &d->model.life;
	uint64_t n = d->model.ver[d->model.cur].number;

	*code = WIRE_E_SLEEPING;
	if (d->state == WCD_WAKING) {
		*code = WIRE_E_BUSY;
		snprintf(buf, cap,
			 "the daemon is waking up from sleep level %u (or a session or an update fills its next version while asleep): wait for it to finish (wcctl status shows the state), then open the update session",
			 L->level);
		return buf;
	}
	if (d->state != WCD_SLEEPING)
		return NULL;
	if (L->level == 1) {
		snprintf(buf, cap,
			 "the daemon sleeps at level 1 (it keeps version %" PRIu64 "'s host copy to wake from): wake it first (wcctl wake), then open the update session; asleep at level 2 (wcctl sleep --level 2) a session fills version %" PRIu64 " and wakes the daemon into it",
			 n, n + 1);
		return buf;
	}
	if (flags & WIRE_PUSH_PARTIAL) {
		snprintf(buf, cap,
			 "the daemon sleeps at level 2, so version %" PRIu64 "'s bytes are not resident and a partial update has none to keep for the tensors it does not write: push every tensor (the commit wakes the daemon into version %" PRIu64 "), or wake it first (wcctl wake)",
			 n, n + 1);
		return buf;
	}
	if (flags & WIRE_PUSH_IN_PLACE) {
		snprintf(buf, cap,
			 "the daemon sleeps at level 2, so version %" PRIu64 "'s pools are released and an in-place update has none to rewrite: update beside (the commit wakes the daemon into version %" PRIu64 "), or wake it first (wcctl wake)",
			 n, n + 1);
		return buf;
	}
	return NULL;
}

bool push_asleep_enter(struct wcd *d)
{
	bool asleep = d->state == WCD_SLEEPING;

	wcd_enter(d, asleep ? WCD_WAKING : WCD_UPDATING);
	return asleep;
}

void push_asleep_wake(struct wcd *d, bool asleep)
{
	struct wcd_life *L = &d->model.life;

	if (!asleep)
		return;
	WC_ASSERT(d->state == WCD_WAKING && L->level == 2);
	L->level = 0;
	L->wakes++;
}

void push_asleep_leave(struct wcd *d, bool asleep)
{
	if (d->state == WCD_UPDATING)
		wcd_enter(d, WCD_READY);
	else if (d->state == WCD_WAKING && asleep)
		wcd_enter(d, WCD_SLEEPING);
}
