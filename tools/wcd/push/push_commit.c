/* SPDX-License-Identifier: MIT */
/*
 * PUSH_COMMIT (push_commit.h): the coverage of what was written, then the
 * two halves: prepare (a partial update's kept bytes, seal, hashes) and
 * publish (as a disk update publishes).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "wire_life.h"
#include "wire_push.h"
#include "push/push_commit.h"
#include "push/push_inplace.h"
#include "push/push_keep.h"
#include "push/push_plan.h"
#include "push/push_session.h"
#include "serve/server.h"
#include "model/versions.h"

/* Counts into cnt (p->ntensors bytes, zeroed) how often the runs name
 * each checkpoint tensor; every one exactly once (partial: at most once);
 * 0, or -1 with the refusal in msg. */
static int coverage(struct wcd *d, struct wcd_push *p, const uint8_t *runs,
		    uint32_t nruns, uint8_t *cnt, char *msg, size_t cap)
{
	const struct plan *pl = &d->model.ver[p->vi].plan;
	bool partial = p->flags & WIRE_PUSH_PARTIAL;
	char miss[1024] = "", dup[1024] = "";
	size_t mo = 0, dof = 0;
	unsigned nmiss = 0, ndup = 0;

	for (uint32_t r = 0; r < nruns; r++) {
		struct wire_push_run run = wire_push_run_at(runs, r);

		if (run.first > p->ntensors ||
		    run.count > p->ntensors - run.first) {
			snprintf(msg, cap,
				 "commit refused: it names tensors %u..%u, but the session writes %u (0..%u)",
				 run.first, run.first + run.count, p->ntensors,
				 p->ntensors ? p->ntensors - 1 : 0);
			return -1;
		}
		for (uint32_t i = run.first; i < run.first + run.count; i++)
			if (cnt[i] < 2)
				cnt[i]++;
	}
	for (uint32_t i = 0; i < p->ntensors; i++) {
		if (cnt[i] == 1 || (!cnt[i] && partial))
			continue;
		if (!cnt[i] && nmiss++ < PUSH_NAMES_SHOWN && mo < sizeof(miss))
			mo += (size_t)snprintf(miss + mo, sizeof(miss) - mo,
					       "%s%s", nmiss > 1 ? ", " : "",
					       pl->t[i].name);
		if (cnt[i] > 1 && ndup++ < PUSH_NAMES_SHOWN &&
		    dof < sizeof(dup))
			dof += (size_t)snprintf(dup + dof, sizeof(dup) - dof,
						"%s%s", ndup > 1 ? ", " : "",
						pl->t[i].name);
	}
	if (!nmiss && !ndup)
		return 0;
	snprintf(msg, cap,
		 "commit refused: %u tensor(s) not written%s%s%s and %u written more than once%s%s%s: write every checkpoint tensor exactly once (or open the session as a partial update, which keeps the others' bytes from the served version), then commit; the session stays open until its deadline",
		 nmiss, nmiss ? " (" : "", miss,
		 nmiss > PUSH_NAMES_SHOWN ? ", ...)" : nmiss ? ")" : "",
		 ndup, ndup ? " (" : "", dup,
		 ndup > PUSH_NAMES_SHOWN ? ", ...)" : ndup ? ")" : "");
	return -1;
}

/* A reply to COMMIT with r (the lifecycle reply's layout). */
static void commit_reply(struct wcd_client *c, const struct wire_life_reply *r)
{
	struct wire_put w;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PUSH_COMMIT, WIRE_F_REPLY, c->h.id);
	wire_life_reply_put(&w, r);
	reply_send(c, &w, NULL, 0);
}

/* The first half of a commit: coverage, a partial update's kept tensors,
 * the seal, the hashes. 0, or -1 with the refusal sent (a refused
 * coverage leaves the session open; a failed seal or hash aborts it). */
static int commit_prepare(struct wcd_client *c, struct wcd_push *p,
			  const uint8_t *runs, uint32_t nruns)
{
	struct wcd *d = c->d;
	struct wcd_version *nv = &d->model.ver[p->vi];
	char err[BASE_ERR_LEN], msg[WIRE_MSG_MAX + 1];
	uint8_t *cnt, *keep;
	int ret = -1;

	cnt = calloc(p->ntensors ? p->ntensors : 1, 1);
	keep = calloc(nv->plan.ntensors ? nv->plan.ntensors : 1, 1);
	if (!cnt || !keep) {
		reply_error(c, c->h.id, WIRE_E_INTERNAL, false, "out of memory");
		goto out_free;
	}
	if (coverage(d, p, runs, nruns, cnt, msg, sizeof(msg))) {
		reply_error(c, c->h.id, WIRE_E_STATE, false, "%s", msg);
		goto out_free;
	}
	p->t_seal = rx_now_ns();
	/* partial: what was not written keeps N's bytes (and hashes) */
	p->kept = p->flags & WIRE_PUSH_PARTIAL ?
		  push_keep(wcd_current(d), nv, p->ntensors, cnt, keep) : 0;
	for (uint32_t i = 0; i < nv->npools; i++) {
		if (d->dev.be->pool_seal(&d->dev, &nv->pools[i], err)) {
			snprintf(msg, sizeof(msg),
				 "commit refused: pool %u cannot be sealed (%s): the trainer must unmap the session's pools before it commits (wc_push_commit does)",
				 i, err);
			goto out_abort;
		}
	}
	nv->hashed = d->o.hash;
	if (p->in_place && push_inplace_prepare(d, p, keep, err)) {
		snprintf(msg, sizeof(msg), "commit failed: %s", err);
		goto out_abort;
	}
	if (!p->in_place && nv->hashed &&
	    push_hash(d, nv, wcd_current(d), keep, err)) {
		snprintf(msg, sizeof(msg), "commit failed: %s", err);
		goto out_abort;
	}
	nv->phases.hash_s = push_secs(rx_now_ns() - p->t_seal);
	ret = 0;
	goto out_free;
out_abort:
	reply_error(c, c->h.id, WIRE_E_BUSY, false,
		    "%s; the session is aborted, version %" PRIu64 " serves on",
		    msg, wcd_current(d)->number);
	push_session_abort(d, p, msg);
out_free:
	free(cnt);
	free(keep);
	return ret;
}

/* The second half: N+1 becomes current, as a disk update's does. */
static void commit_publish(struct wcd_client *c, struct wcd_push *p)
{
	struct wcd *d = c->d;
	struct wcd_version *nv = &d->model.ver[p->vi];
	struct version_published pub;
	struct wire_life_reply *r = calloc(1, sizeof(*r));
	char err[BASE_ERR_LEN];

	if (!r) {
		reply_error(c, c->h.id, WIRE_E_INTERNAL, false, "out of memory");
		push_session_abort(d, p, "out of memory at commit");
		return;
	}
	if (p->in_place) {
		push_inplace_publish(d, p, r);
		commit_reply(c, r);
		push_session_end(d, p, true, r->msg);
		free(r);
		return;
	}
	push_timer_disarm(p);
	wcd_enter(d, WCD_READY);
	version_publish(d, p->vi, &pub);
	if (d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r->version = nv->number;
	r->bytes = p->bytes - p->kept;
	r->ns = rx_now_ns() - p->t0;
	r->verify_ns = p->prepared_ns ? p->prepared_ns :
		       rx_now_ns() - p->t_seal;
	snprintf(r->msg, sizeof(r->msg),
		 "updated from memory: version %" PRIu64 " serves, %" PRIu64 " bytes written by pid %d%s in %.3f s (%" PRIu64 " bytes kept from version %" PRIu64 "; seal and hash %.3f s); version %" PRIu64 " %s",
		 nv->number, r->bytes, (int)p->pid,
		 p->flags & WIRE_PUSH_PARTIAL ? " (a partial update)" : "",
		 push_secs(r->ns), p->kept, pub.old_number,
		 push_secs(r->verify_ns),
		 pub.old_number,
		 pub.old_freed ? "was freed (no lease held it)" :
				 "stays until its engines detach");
	log_info("%s", r->msg);
	commit_reply(c, r);
	p->bytes = r->bytes;
	push_session_end(d, p, true, r->msg);
	free(r);
}

/* COMMIT: both halves, or (WIRE_PUSH_COMMIT_PREPARE) the first, the
 * session then waiting, prepared, for a COMMIT without runs that
 * publishes (a trainer committing several ranks together: every rank is
 * prepared before any publishes). */
void push_commit_request(struct wcd_client *c, struct wcd_push *p,
			 const uint8_t *pl, uint32_t n)
{
	struct wire_life_reply r = { 0 };
	char err[BASE_ERR_LEN];
	const uint8_t *runs;
	uint32_t nruns, flags;
	uint64_t session;
	int ret;

	ret = wire_push_commit_get(pl, n, &session, &flags, &runs, &nruns,
				   err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (session != p->session) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "commit of session %" PRIu64 ", but this connection's session is %" PRIu64,
			    session, p->session);
		return;
	}
	if (p->phase == PUSH_PREPARED) {
		if ((flags & WIRE_PUSH_COMMIT_PREPARE) || nruns) {
			reply_error(c, c->h.id, WIRE_E_STATE, false,
				    "session %" PRIu64 " is prepared already: send COMMIT without runs or flags to publish it, or ABORT",
				    p->session);
			return;
		}
		commit_publish(c, p);
		return;
	}
	if (commit_prepare(c, p, runs, nruns))
		return;
	if (!(flags & WIRE_PUSH_COMMIT_PREPARE)) {
		commit_publish(c, p);
		return;
	}
	p->phase = PUSH_PREPARED;
	p->prepared_ns = rx_now_ns() - p->t_seal;
	r.version = p->base + 1;
	r.bytes = p->bytes - p->kept;
	r.ns = rx_now_ns() - p->t0;
	r.verify_ns = p->prepared_ns;
	snprintf(r.msg, sizeof(r.msg),
		 "prepared: version %" PRIu64 " is sealed and hashed; send COMMIT again to publish it (or ABORT) within the session's %u ms",
		 p->base + 1, p->timeout_ms);
	log_info("update session %" PRIu64 ": %s", p->session, r.msg);
	commit_reply(c, &r);
}
