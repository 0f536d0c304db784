/* SPDX-License-Identifier: MIT */
/*
 * Engines' pause and resume (push_pause.h): a paused engine has promised
 * not to read its pools until it resumes, so an in-place session may
 * rewrite them (push_open.c counts the engines that have not paused).
 * The promise is the connection's: one that closes no longer counts (it
 * is no client any more). While an in-place session writes, or once one
 * ended without a commit (the served version incomplete), new readers are
 * refused at HELLO, MANIFEST and ATTACH with a sentence, and a resume is
 * refused so that a paused engine does not read bytes half rewritten.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "err.h"
#include "log.h"
#include "wire_life.h"
#include "wire_push.h"
#include "push/push_pause.h"
#include "push/push_session.h"
#include "serve/server.h"

unsigned push_unpaused(struct wcd *d, pid_t *pids, unsigned max)
{
	unsigned n = 0;

	for (struct wcd_client *c = client_first(d); c; c = client_next(c)) {
		if (!c->nleases || c->paused)
			continue;
		if (n < max)
			pids[n] = c->pid;
		n++;
	}
	return n;
}

void push_pause_counts(struct wcd *d, unsigned *paused, unsigned *leased)
{
	*paused = 0;
	*leased = 0;
	for (struct wcd_client *c = client_first(d); c; c = client_next(c)) {
		*paused += c->paused;
		*leased += c->nleases > 0;
	}
}

/* An in-place session is open (from its request to its end). */
static bool writing_in_place(struct wcd *d)
{
	return d->push && d->push->phase != PUSH_IDLE && d->push->in_place;
}

const char *push_refusal(struct wcd *d, unsigned type)
{
	struct wcd_push *p = d->push;

	if (type != WIRE_HELLO && type != WIRE_MANIFEST && type != WIRE_ATTACH)
		return NULL;
	if (writing_in_place(d)) {
		snprintf(p->refusal, sizeof(p->refusal),
			 "an in-place update (session %" PRIu64 " of pid %d) is writing version %" PRIu64 "'s pools: retry after it commits (the version then served is %" PRIu64 ")",
			 p->session, (int)p->pid, p->base, p->base + 1);
		return p->refusal;
	}
	if (push_incomplete(d)) {
		snprintf(p->refusal, sizeof(p->refusal),
			 "%.3800s: attaches are refused until a complete update rewrites it (another in-place session, a beside one, or a disk update: wcctl update)",
			 p->incomplete_why);
		return p->refusal;
	}
	return NULL;
}

/* The reply to PAUSE: the version the served pools hold, and a line. */
static void pause_reply(struct wcd_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void pause_reply(struct wcd_client *c, const char *fmt, ...)
{
	struct wire_life_reply r = { .version = wcd_current(c->d)->number };
	struct wire_put w;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r.msg, sizeof(r.msg), fmt, ap);
	va_end(ap);
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PAUSE, WIRE_F_REPLY, c->h.id);
	wire_life_reply_put(&w, &r);
	reply_send(c, &w, NULL, 0);
}

void push_pause_request(struct wcd_client *c, const uint8_t *pl, uint32_t n)
{
	struct wcd *d = c->d;
	struct wcd_push *p = d->push;
	char err[BASE_ERR_LEN];
	uint64_t cur = wcd_current(d)->number;
	uint32_t op;
	int ret;

	ret = wire_pause_get(pl, n, &op, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (op == WIRE_PAUSE_ON) {
		c->paused = true;
		log_debug("client pid %d paused (it will not read its pools until it resumes)",
			  (int)c->pid);
		pause_reply(c, "paused: version %" PRIu64 " may be rewritten in place until you resume",
			    cur);
		return;
	}
	if (!c->paused) {
		pause_reply(c, "not paused: nothing to resume; version %" PRIu64 " serves",
			    cur);
		return;
	}
	if (writing_in_place(d)) {
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "resume refused: an in-place update (session %" PRIu64 " of pid %d) is writing version %" PRIu64 "'s pools: stay paused until its notice (or retry after it commits)",
			    p->session, (int)p->pid, p->base);
		return;
	}
	if (push_incomplete(d) && c->nleases) {
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "resume refused: %.3800s; stay paused until a complete update (its notice), or detach and attach the next version",
			    p->incomplete_why);
		return;
	}
	c->paused = false;
	log_debug("client pid %d resumed on version %" PRIu64, (int)c->pid,
		  cur);
	pause_reply(c, "resumed: the served pools hold version %" PRIu64,
		    cur);
}
