/* SPDX-License-Identifier: MIT */
/*
 * PUSH_COMMIT (push_commit.h): the coverage of what was written, then the
 * two halves: prepare (a partial update's kept bytes, seal, hashes: on
 * the daemon's worker pool for host pools, the session HASHING
 * meanwhile) and publish (as a disk update publishes).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "daemon/fault.h"
#include "wire_life.h"
#include "wire_push.h"
#include "push/push_asleep.h"
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

/* A reply to COMMIT id with r (the lifecycle reply's layout). */
static void commit_reply(struct wcd_client *c, uint64_t id,
			 const struct wire_life_reply *r)
{
	struct wire_put w;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PUSH_COMMIT, WIRE_F_REPLY, id);
	wire_life_reply_put(&w, r);
	reply_frame(c, id, &w, NULL, 0);
}

/* A commit that cannot go on: the session aborted, then the trainer (c,
 * when still there) told so with the abort's own sentence (what serves
 * now: N untouched, N marked incomplete in place, or the daemon asleep).
 * An error reply names no pool, so it parks none (push_session.c). */
static void commit_abort(struct wcd *d, struct wcd_push *p,
			 struct wcd_client *c, uint64_t id, uint32_t code,
			 const char *why)
{
	push_session_abort(d, p, why);
	if (c)
		reply_error(c, id, code, false, "commit failed: %s",
			    p->last.last);
}

/* The first half's bytes, after the coverage: a partial update's kept
 * tensors, the seal, the hashes. Any thread (the loop's, or a worker's
 * for host pools: it touches N+1, which nothing else does meanwhile, and
 * reads N). 0, or -1 with why in msg (the session must abort). */
static int prepare_bytes(struct wcd *d, struct wcd_push *p,
			 const uint8_t *cnt, uint8_t *keep, char *msg,
			 size_t cap)
{
	struct wcd_version *nv = &d->model.ver[p->vi];
	char err[BASE_ERR_LEN];
	uint64_t t_keep, t_sealed;

	/* partial: what was not written keeps N's bytes (and hashes) */
	p->kept = 0;
	if ((p->flags & WIRE_PUSH_PARTIAL) &&
	    push_keep(d, nv, p->ntensors, cnt, p->in_place, keep, &p->kept,
		      err)) {
		snprintf(msg, cap,
			 "commit failed: the tensors not written cannot keep version %" PRIu64 "'s bytes: %s",
			 wcd_current(d)->number, err);
		return -1;
	}
	t_keep = rx_now_ns();
	for (uint32_t i = 0; i < nv->npools; i++) {
		if (d->dev.be->pool_seal(&d->dev, &nv->pools[i], err)) {
			snprintf(msg, cap,
				 "commit refused: pool %u cannot be sealed (%s): the trainer must unmap the session's pools before it commits (wc_push_commit does)",
				 i, err);
			return -1;
		}
	}
	t_sealed = rx_now_ns();
	nv->hashed = d->o.hash;
	/* in place: the served version's bytes rewritten and hashed
	 * (push_inplace.c); beside: N+1's hashed */
	if (p->in_place ? push_inplace_prepare(d, p, cnt, keep, err) :
	    nv->hashed && push_hash(d, nv, wcd_current(d), keep, err)) {
		snprintf(msg, cap, "commit failed: %s", err);
		return -1;
	}
	nv->phases.hash_s = push_secs(rx_now_ns() - p->t_seal);
	log_debug("commit of session %" PRIu64 ": kept bytes %.3f ms, seal of %u pools %.3f ms, hashes %.3f ms",
		  p->session, (double)(t_keep - p->t_seal) / 1e6, nv->npools,
		  (double)(t_sealed - t_keep) / 1e6,
		  (double)(rx_now_ns() - t_sealed) / 1e6);
	return 0;
}

/* Host pools: the first half's bytes on the daemon's worker pool, since
 * the kept bytes' copy and the CPU hash of a 16 GB rank are seconds the
 * loop would not serve (CUDA's copies and hashes run on the device: the
 * loop only waits milliseconds for them). One allocation, cnt and keep
 * after it, so that push_session_free can free a job whose end never
 * came. */
struct push_commit_job {
	struct rx_work w;
	struct wcd *d;
	uint64_t id;                  /* the COMMIT's request id */
	uint32_t flags;               /* the COMMIT's */
	int ret;
	char msg[WIRE_MSG_MAX + 1];
	uint8_t *cnt, *keep;
	uint8_t bytes[];
};

static void commit_work(struct rx_work *w)
{
	struct push_commit_job *J = w->data;

	/* the tests' hook: a commit held while it hashes (fault.h) */
	fault_gate(FAULT_PUSH_HASH_GATE, NULL, NULL);
	J->ret = prepare_bytes(J->d, J->d->push, J->cnt, J->keep, J->msg,
			       sizeof(J->msg));
}

static void commit_finish(struct wcd_client *c, uint64_t id,
			  struct wcd_push *p, uint32_t flags);

/* The job's end, on the loop: what happened meanwhile (the trainer's
 * connection closed, the deadline passed, the daemon began to stop)
 * aborts the session now; else the commit goes on as it would have. */
static void commit_after(struct rx_work *w, int status)
{
	struct push_commit_job *J = w->data;
	struct wcd *d = J->d;
	struct wcd_push *p = d->push;
	struct wcd_client *c = p->c;
	char why[WIRE_MSG_MAX + 1];

	WC_ASSERT(p->phase == PUSH_HASHING && p->job == J);
	p->phase = PUSH_WRITING;
	p->job = NULL;
	why[0] = '\0';
	if (status)
		snprintf(why, sizeof(why), "the daemon stopped before the commit's hashes were taken");
	else if (J->ret)
		snprintf(why, sizeof(why), "%s", J->msg);
	else if (!c)
		snprintf(why, sizeof(why),
			 "the trainer's connection closed during its commit (pid %d)",
			 (int)p->pid);
	else if (p->expired)
		snprintf(why, sizeof(why),
			 "not committed within %u ms of its open (the session's bound; ask for more with timeout_ms)",
			 p->timeout_ms);
	else if (wcd_stopping(d))
		snprintf(why, sizeof(why), "the daemon is stopping");
	if (why[0]) {
		commit_abort(d, p, c, J->id, WIRE_E_BUSY, why);
	} else {
		commit_finish(c, J->id, p, J->flags);
	}
	free(J);
}

/* Queues the first half's bytes (host pools); true when queued, the
 * session HASHING until commit_after. False: run them here. */
static bool prepare_queue(struct wcd_client *c, struct wcd_push *p,
			  uint32_t flags, const uint8_t *cnt, uint32_t nkeep)
{
	struct wcd *d = c->d;
	struct wcd_version *nv = &d->model.ver[p->vi];
	struct push_commit_job *J;

	if (!d->work_open || !nv->npools || !nv->pools[0].host_ptr)
		return false;
	J = calloc(1, sizeof(*J) + p->ntensors + nkeep + 2);
	if (!J)
		return false;
	J->w.data = J;
	J->d = d;
	J->id = c->h.id;
	J->flags = flags;
	J->cnt = J->bytes;
	J->keep = J->bytes + p->ntensors + 1;
	memcpy(J->cnt, cnt, p->ntensors);     /* J->keep: zeroed by calloc */
	if (rx_queue_work(&d->work, &J->w, commit_work, commit_after)) {
		free(J);
		return false;
	}
	p->job = J;
	p->expired = false;
	p->phase = PUSH_HASHING;
	return true;
}

/* The first half of a commit: coverage, a partial update's kept tensors,
 * the seal, the hashes. 0, 1 when queued (commit_after goes on), or -1
 * with the refusal sent (a refused coverage leaves the session open; a
 * failed seal or hash aborts it). */
static int commit_prepare(struct wcd_client *c, struct wcd_push *p,
			  const uint8_t *runs, uint32_t nruns, uint32_t flags)
{
	struct wcd *d = c->d;
	struct wcd_version *nv = &d->model.ver[p->vi];
	char msg[WIRE_MSG_MAX + 1];
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
	if (prepare_queue(c, p, flags, cnt, nv->plan.ntensors)) {
		ret = 1;
		goto out_free;
	}
	if (prepare_bytes(d, p, cnt, keep, msg, sizeof(msg))) {
		commit_abort(d, p, c, c->h.id, WIRE_E_BUSY, msg);
		goto out_free;
	}
	ret = 0;
out_free:
	free(cnt);
	free(keep);
	return ret;
}

/* After a commit's reply is queued: the reply leaves first (a refused
 * submit leaves it for the loop's next turn), then the ready file is
 * rewritten (0.35-0.5 ms on an H100 host's /tmp, which the trainer need
 * not wait for), before the loop reads another request: whoever asks the
 * daemon anything after the reply finds the file current. */
static void ready_after_reply(struct wcd *d, const struct wcd_push *p)
{
	char err[BASE_ERR_LEN];
	uint64_t t0;

	rx_loop_submit(&d->loop);
	t0 = rx_now_ns();
	if (d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	log_debug("commit of session %" PRIu64 ": the ready file rewritten after the reply, in %.3f ms",
		  p->session, (double)(rx_now_ns() - t0) / 1e6);
}

/* The second half: N+1 becomes current, as a disk update's does. */
static void commit_publish(struct wcd_client *c, uint64_t id,
			   struct wcd_push *p)
{
	struct wcd *d = c->d;
	struct wcd_version *nv = &d->model.ver[p->vi];
	struct version_published pub;
	struct wire_life_reply *r = calloc(1, sizeof(*r));
	uint64_t t_pub;
	const char *fate, *after = "";
	bool spare;

	if (!r) {
		commit_abort(d, p, c, id, WIRE_E_INTERNAL, "out of memory at commit");
		return;
	}
	if (p->in_place) {
		push_inplace_publish(d, p, r);
		commit_reply(c, id, r);
		ready_after_reply(d, p);
		push_session_end(d, p, true, r->msg);
		free(r);
		return;
	}
	push_timer_disarm(p);
	push_asleep_wake(d, p->asleep); /* asleep at level 2: wakes into N+1 */
	wcd_enter(d, WCD_READY);
	t_pub = rx_now_ns();
	/* keep_spare: N's pools, once retired, are the next session's */
	spare = (p->flags & WIRE_PUSH_KEEP_SPARE) && version_can_spare(d);
	wcd_current(d)->keep_spare = spare;
	/* N, when no lease holds it, is freed after the reply is out */
	version_publish_defer(d, p->vi, &pub);
	log_debug("commit of session %" PRIu64 ": published in %.3f ms",
		  p->session, (double)(rx_now_ns() - t_pub) / 1e6);
	/* what becomes of N, for the reply's last words */
	if (pub.old_freed)
		fate = spare ? "is kept as the spare for the next session (no lease held it)" :
			       "is freed (no lease held it)";
	else
		fate = "stays until its engines detach";
	if (spare && !pub.old_freed)
		after = ", then is kept as the spare for the next session";
	else if ((p->flags & WIRE_PUSH_KEEP_SPARE) && !spare)
		after = " (keep_spare: the host backend keeps no spare, its pools cannot be written again)";
	r->version = nv->number;
	r->bytes = p->bytes - p->kept;
	r->ns = rx_now_ns() - p->t0;
	r->verify_ns = p->prepared_ns ? p->prepared_ns :
		       rx_now_ns() - p->t_seal;
	snprintf(r->msg, sizeof(r->msg),
		 "updated from memory: version %" PRIu64 " serves%s, %" PRIu64 " bytes written by pid %d%s%s in %.3f s (%" PRIu64 " bytes kept from version %" PRIu64 "; seal and hash %.3f s); version %" PRIu64 " %s%s",
		 nv->number,
		 p->asleep ? " (the daemon, asleep at level 2, woke into it)" : "",
		 r->bytes, (int)p->pid,
		 p->flags & WIRE_PUSH_PARTIAL ? " (a partial update)" : "",
		 p->spare ? " into the spare's pools" : "",
		 push_secs(r->ns), p->kept, pub.old_number,
		 push_secs(r->verify_ns),
		 pub.old_number, fate, after);
	log_info("%s", r->msg);
	commit_reply(c, id, r);
	ready_after_reply(d, p);
	if (pub.retire) {
		uint64_t t_free = rx_now_ns();

		version_retire(d, pub.retire);
		log_debug("commit of session %" PRIu64 ": version %" PRIu64 " %s after the reply, in %.3f ms",
			  p->session, pub.old_number,
			  spare ? "kept as the spare" : "freed",
			  (double)(rx_now_ns() - t_free) / 1e6);
	}
	p->bytes = r->bytes;
	push_session_end(d, p, true, r->msg);
	free(r);
}

/* After the first half: publish, or (WIRE_PUSH_COMMIT_PREPARE) wait,
 * prepared, for the COMMIT that publishes. */
static void commit_finish(struct wcd_client *c, uint64_t id,
			  struct wcd_push *p, uint32_t flags)
{
	struct wire_life_reply r = { 0 };

	if (!(flags & WIRE_PUSH_COMMIT_PREPARE)) {
		commit_publish(c, id, p);
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
	commit_reply(c, id, &r);
}

/* COMMIT: both halves, or (WIRE_PUSH_COMMIT_PREPARE) the first, the
 * session then waiting, prepared, for a COMMIT without runs that
 * publishes (a trainer committing several ranks together: every rank is
 * prepared before any publishes). */
void push_commit_request(struct wcd_client *c, struct wcd_push *p,
			 const uint8_t *pl, uint32_t n)
{
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
		commit_publish(c, c->h.id, p);
		return;
	}
	if (commit_prepare(c, p, runs, nruns, flags) == 0)
		commit_finish(c, c->h.id, p, flags);
}
