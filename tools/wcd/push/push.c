/* SPDX-License-Identifier: MIT */
/*
 * The update session's requests (push.h says what and why): the dispatch
 * to push_open.c and push_commit.c, PLAN and ABORT, and the folder's API.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "wire_push.h"
#include "push/push.h"
#include "push/push_commit.h"
#include "push/push_open.h"
#include "push/push_pause.h"
#include "push/push_plan.h"
#include "push/push_session.h"
#include "serve/server.h"

/* The session of this connection for PLAN, COMMIT, ABORT; NULL (refusal
 * sent) when it has none. */
static struct wcd_push *session_of(struct wcd_client *c)
{
	struct wcd_push *p = c->d->push;

	if (p && (p->phase == PUSH_WRITING || p->phase == PUSH_PREPARED) &&
	    p->c == c)
		return p;
	if (p && p->phase == PUSH_HASHING && p->c == c) {
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "update session %" PRIu64 " is committing (its hashes are being taken): wait for the COMMIT reply",
			    p->session);
		return NULL;
	}
	reply_error(c, c->h.id, WIRE_E_STATE, false,
		    "%s without an open update session on this connection: send PUSH_OPEN first (and wait for its reply)",
		    wire_type_name(c->h.type));
	return NULL;
}

void push_request(struct wcd_client *c, const uint8_t *pl, uint32_t n)
{
	char err[BASE_ERR_LEN];
	const uint8_t *runs;
	struct wcd_push *p;
	uint32_t first, max;
	uint64_t session;
	struct wire_put w;
	int ret;

	switch (c->h.type) {
	case WIRE_PUSH_OPEN:
		push_open_request(c, pl, n);
		return;
	case WIRE_PAUSE:
		push_pause_request(c, pl, n);
		return;
	case WIRE_PUSH_PLAN:
		ret = wire_push_plan_req_get(pl, n, &first, &max, err);
		if (ret)
			break;
		p = session_of(c);
		if (p)
			push_plan_reply(c, c->h.id, &c->d->model.ver[p->vi],
					first, max);
		return;
	case WIRE_PUSH_COMMIT:
		/* the payload is checked first: malformed in any state */
		ret = wire_push_commit_get(pl, n, &session, &max, &runs,
					   &first, err);
		if (ret)
			break;
		p = session_of(c);
		if (p)
			push_commit_request(c, p, pl, n);
		return;
	case WIRE_PUSH_ABORT:
		ret = wire_push_abort_get(pl, n, &session, err);
		if (ret)
			break;
		p = session_of(c);
		if (!p)
			return;
		if (session != p->session) {
			reply_error(c, c->h.id, WIRE_E_STATE, false,
				    "abort of session %" PRIu64 ", but this connection's session is %" PRIu64,
				    session, p->session);
			return;
		}
		/* its client unmapped the pools first (wc_push_abort does) */
		p->let_go = true;
		push_session_abort(c->d, p, "the trainer aborted it");
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_PUSH_ABORT, WIRE_F_REPLY, c->h.id);
		reply_send(c, &w, NULL, 0);
		return;
	default:
		WC_ASSERT(0);
		return;
	}
	reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
}

void push_client_gone(struct wcd *d, struct wcd_client *c)
{
	push_session_gone(d, c);
}

void push_free(struct wcd *d)
{
	push_session_free(d);
}

bool push_run_job(struct wcd *d)
{
	return push_open_job(d);
}

void push_info(struct wcd *d, struct push_info *out)
{
	struct wcd_push *p = d->push;

	memset(out, 0, sizeof(*out));
	if (p)
		*out = p->last;
	push_pause_counts(d, &out->paused, &out->leased);
	if (!p)
		return;
	out->in_place = p->in_place && p->phase != PUSH_IDLE;
	if (push_incomplete(d)) {
		out->incomplete = p->incomplete;
		snprintf(out->incomplete_why, sizeof(out->incomplete_why),
			 "%s", p->incomplete_why);
	}
	out->open = p->phase != PUSH_IDLE;
	out->writing = p->phase == PUSH_WRITING;
	out->prepared = p->phase == PUSH_PREPARED;
	if (!out->open)
		return;
	out->session = p->session;
	out->version = p->base + 1;
	out->bytes = p->bytes;
	out->pid = p->pid;
	out->uid = p->uid;
	out->seconds = push_secs(rx_now_ns() - p->t0);
	out->timeout_ms = p->timeout_ms;
}
