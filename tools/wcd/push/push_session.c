/* SPDX-License-Identifier: MIT */
/*
 * An update session's state and its ends (push_session.h): abort frees
 * N+1 (N serves on), a deadline aborts, the trainer's connection ending
 * aborts; a session whose OPEN reply is still unsent parks its pools.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "push/push_asleep.h"
#include "wire_push.h"
#include "push/push_session.h"
#include "serve/server.h"
#include "model/versions.h"
#include "load/load.h"

double push_secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

struct wcd_push *push_get(struct wcd *d)
{
	if (!d->push) {
		d->push = calloc(1, sizeof(*d->push));
		if (d->push)
			d->push->next_session = 1;
	}
	return d->push;
}

void push_timer_disarm(struct wcd_push *p)
{
	if (!p->timer)
		return;
	p->timer->d = NULL;
	rx_timer_stop(&p->timer->t);
	p->timer = NULL;
}

/* Ends the session: records how (ok: published), and leaves UPDATING. */
void push_session_end(struct wcd *d, struct wcd_push *p, bool ok,
		      const char *msg)
{
	push_timer_disarm(p);
	p->last.last_ok = ok;
	p->last.last_version = d->model.ver[p->vi].number ?
			       d->model.ver[p->vi].number : p->base + 1;
	p->last.last_bytes = p->bytes;
	p->last.last_pid = p->pid;
	p->last.last_uid = p->uid;
	p->last.last_seconds = push_secs(rx_now_ns() - p->t0);
	snprintf(p->last.last, sizeof(p->last.last), "%s", msg);
	if (ok)
		p->last.committed++;
	else
		p->last.aborted++;
	metrics_life(&d->m, METRICS_PUSH, ok, rx_now_ns() - p->t0, p->bytes);
	p->phase = PUSH_IDLE;
	p->c = NULL;
	p->queued = false;
	p->in_place = false;
	p->direct = false;
	push_asleep_leave(d, p->asleep);
	p->asleep = false;
}

static void parked_release(struct wcd *d, struct wcd_push *p)
{
	for (uint32_t i = 0; i < p->nparked; i++)
		d->dev.be->pool_release(&d->dev, &p->parked[i]);
	p->nparked = 0;
	p->parked_for = NULL;
}

/* The OPEN reply may still be queued or being sent (a deadline while the
 * trainer does not read, an ABORT sent before the OPEN reply was read):
 * it names N+1's pools by fd number, so they outlive the session until
 * that connection is freed, and the connection is closed (it broke the
 * conversation, or it stalled past its deadline). Other replies in
 * flight (a STATUS the trainer polls) name no pool: nothing to park. */
static void park_pools(struct wcd *d, struct wcd_push *p)
{
	struct wcd_version *nv = &d->model.ver[p->vi];
	struct wcd_client *c = p->c;
	bool named = false;

	if (!c || c->closing)
		return;
	for (uint32_t i = 0; i < nv->npools && !named; i++)
		named = nv->pools[i].fd >= 0 &&
			client_sends_fd(c, nv->pools[i].fd);
	if (!named)
		return;
	WC_ASSERT(!p->nparked); /* do_open refuses a session meanwhile */
	memcpy(p->parked, nv->pools, sizeof(nv->pools[0]) * nv->npools);
	p->nparked = nv->npools;
	p->parked_for = c;
	nv->npools = 0;
	log_warn("update session %" PRIu64 ": a reply naming its pools is still being sent to pid %d: closing that connection; the pools are freed with it",
		 p->session, (int)c->pid);
	p->c = NULL;    /* its end (push_session_gone) is no second abort */
	client_close(c, "its update session ended while a reply naming the session's pools was still being sent");
}

bool push_incomplete(struct wcd *d)
{
	return d->push && d->push->incomplete &&
	       d->push->incomplete == wcd_current(d)->number;
}

unsigned push_notify_leased(struct wcd *d, uint32_t kind, uint64_t version,
			    const char *msg)
{
	struct wire_notice *nt = calloc(1, sizeof(*nt));
	unsigned n;

	if (!nt)
		return 0;
	nt->kind = kind;
	nt->version = version;
	snprintf(nt->msg, sizeof(nt->msg), "%s", msg);
	n = server_notify(d, nt, SERVER_NOTIFY_LEASED);
	free(nt);
	return n;
}

/* An in-place session that ends without a commit: its bytes may be half
 * written (a device session writes the served pools themselves; the host
 * backend's copy at commit is the daemon's and cannot be cut short, but
 * the contract is the device's, so that engines and CI meet one), so the
 * served version is incomplete until a complete update replaces it. */
static void mark_incomplete(struct wcd *d, struct wcd_push *p,
			    const char *why)
{
	struct wcd_version *cur = wcd_current(d);
	struct log_fields lf = { .client_pid = p->pid,
				 .version = cur->number };
	unsigned n;

	p->incomplete = cur->number;
	snprintf(p->incomplete_why, sizeof(p->incomplete_why),
		 "version %" PRIu64 " is incomplete: the in-place update session %" PRIu64 " of pid %d that was rewriting its pools ended before its commit (%s)",
		 cur->number, p->session, (int)p->pid, why);
	n = push_notify_leased(d, WIRE_NOTICE_INCOMPLETE, cur->number,
			       p->incomplete_why);
	log_with(LOG_ERROR, &lf,
		 "%s; new attaches are refused until a complete in-place update or a disk update (wcctl update); %u engine(s) holding a lease were told",
		 p->incomplete_why, n);
}

/* Aborts the open session: N+1's pools and plan are freed (a trainer that
 * still maps them keeps its own pages until it unmaps), N serves on; in
 * place, N is marked incomplete (a device session's pools are N's own,
 * so nothing is freed). */
void push_session_abort(struct wcd *d, struct wcd_push *p, const char *why)
{
	char msg[WIRE_MSG_MAX + 1];
	struct log_fields lf = { .client_pid = p->pid };

	if (p->in_place)
		snprintf(msg, sizeof(msg),
			 "in-place update session %" PRIu64 " of pid %d aborted: %s; version %" PRIu64 " is marked incomplete",
			 p->session, (int)p->pid, why,
			 wcd_current(d)->number);
	else
		snprintf(msg, sizeof(msg),
			 "update session %" PRIu64 " of pid %d aborted: %s; %s %" PRIu64 "%s",
			 p->session, (int)p->pid, why,
			 p->asleep ? "the daemon sleeps on at level 2 with version" :
				     "version", wcd_current(d)->number,
			 p->asleep ? "" : " serves on, untouched");
	if (!p->direct) {
		struct wcd_version *nv = &d->model.ver[p->vi];

		park_pools(d, p);
		if (p->let_go && p->phase != PUSH_OPENING &&
		    (p->spare || (p->flags & WIRE_PUSH_KEEP_SPARE))) {
			nv->number = p->base + 1;
			nv->keep_spare = true;
			version_retire(d, nv);
		} else {
			load_version_free(d, nv);
		}
	}
	log_with(LOG_WARN, &lf, "%s", msg);
	if (p->in_place && p->phase != PUSH_OPENING)
		mark_incomplete(d, p, why);
	push_session_end(d, p, false, msg);
}

static void deadline_cb(struct rx_timer *t, int res)
{
	struct push_timer *pt = (struct push_timer *)t;
	struct wcd *d = pt->d;
	char why[128];

	if (!d || res) {
		free(pt);
		return;
	}
	d->push->timer = NULL;
	free(pt);
	if (d->push->phase == PUSH_HASHING) {
		d->push->expired = true;   /* the job's end aborts */
		return;
	}
	snprintf(why, sizeof(why),
		 "not committed within %u ms of its open (the session's bound; ask for more with timeout_ms)",
		 d->push->timeout_ms);
	push_session_abort(d, d->push, why);
}

void push_session_gone(struct wcd *d, struct wcd_client *c)
{
	struct wcd_push *p = d->push;
	char why[128];

	if (p && p->nparked && p->parked_for == c)
		parked_release(d, p);
	if (p && p->phase == PUSH_HASHING && p->c == c) {
		p->c = NULL;               /* the job's end aborts */
		return;
	}
	if (!p || (p->phase != PUSH_WRITING && p->phase != PUSH_PREPARED) ||
	    p->c != c)
		return;
	snprintf(why, sizeof(why),
		 "the trainer's connection closed before commit (pid %d)",
		 (int)p->pid);
	push_session_abort(d, p, why);
}

void push_session_free(struct wcd *d)
{
	struct wcd_push *p = d->push;

	if (!p)
		return;
	/* after the loop closed: no timer to stop, its memory is ours (and
	 * a commit job's, whose end never came: one allocation) */
	free(p->timer);
	free(p->job);
	parked_release(d, p);
	if (p->phase != PUSH_IDLE && !p->direct && !d->model.ver[p->vi].used)
		load_version_free(d, &d->model.ver[p->vi]);
	free(p);
	d->push = NULL;
}

int push_deadline_arm(struct wcd *d, struct wcd_push *p)
{
	int ret;

	p->timer = calloc(1, sizeof(*p->timer));
	if (!p->timer)
		return -ENOMEM;
	ret = rx_timer_start(&d->loop, &p->timer->t,
			     (uint64_t)p->timeout_ms * 1000000ull, deadline_cb);
	if (ret) {
		free(p->timer);
		p->timer = NULL;
		return ret;
	}
	p->timer->d = d;
	return 0;
}
