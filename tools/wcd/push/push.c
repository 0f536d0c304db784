/* SPDX-License-Identifier: MIT */
/*
 * The update session (push.h says what and why): its requests, the open
 * job, the commit, and every way a session ends.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "wire_life.h"
#include "wire_push.h"
#include "push/push.h"
#include "push/push_keep.h"
#include "push/push_plan.h"
#include "serve/server.h"
#include "model/versions.h"
#include "load/load.h"

enum push_phase { PUSH_IDLE, PUSH_OPENING, PUSH_WRITING, PUSH_PREPARED };

/* The deadline's timer, allocated per session: a stopped timer still
 * completes later (-ECANCELED), so it outlives the session that armed it
 * and frees itself in its callback. */
struct push_timer {
	struct rx_timer t;
	struct wcd *d;                /* NULL once its session has ended */
};

struct wcd_push {
	enum push_phase phase;
	bool queued;                  /* OPENING: the job has yet to run */
	struct wcd_client *c;         /* WRITING: the trainer's connection */
	struct wcd_waiter who;        /* OPENING: whom to answer */
	uint64_t session, next_session;
	uint32_t flags, timeout_ms;
	uint64_t base;                /* N */
	int vi;                       /* N+1's slot in d->ver */
	uint32_t ntensors;
	uint64_t bytes;
	uint64_t t0;                  /* the open request */
	uint64_t t_seal;              /* the commit's first half began */
	uint64_t prepared_ns;         /* PREPARED: that half took */
	uint64_t kept;                /* partial: bytes kept from N */
	pid_t pid;
	uid_t uid;
	struct push_timer *timer;
	struct push_info last;        /* the last_* fields and counts */
	/* pools of an aborted session whose open reply (their fd numbers)
	 * may still be unsent to parked_for: released once that connection
	 * is freed (no send in flight then), so that no reused number goes
	 * out in their place */
	struct gpu_pool parked[GPU_POOLS_MAX];
	uint32_t nparked;
	struct wcd_client *parked_for;
};

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static struct wcd_push *push_get(struct wcd *d)
{
	if (!d->push) {
		d->push = calloc(1, sizeof(*d->push));
		if (d->push)
			d->push->next_session = 1;
	}
	return d->push;
}

/* The trainer may push weights: the daemon's own uid or an --allow-uid
 * (root can read the daemon's memory anyway). */
static bool may_push(const struct wcd *d, uid_t uid)
{
	if (uid == 0 || uid == geteuid())
		return true;
	for (unsigned i = 0; i < d->o.nallow_uid; i++)
		if (d->o.allow_uid[i] == uid)
			return true;
	return false;
}

static void timer_disarm(struct wcd_push *p)
{
	if (!p->timer)
		return;
	p->timer->d = NULL;
	rx_timer_stop(&p->timer->t);
	p->timer = NULL;
}

/* Ends the session: records how (ok: published), and leaves UPDATING. */
static void session_end(struct wcd *d, struct wcd_push *p, bool ok,
			const char *msg)
{
	timer_disarm(p);
	p->last.last_ok = ok;
	p->last.last_version = d->ver[p->vi].number ? d->ver[p->vi].number :
			       p->base + 1;
	p->last.last_bytes = p->bytes;
	p->last.last_pid = p->pid;
	p->last.last_uid = p->uid;
	p->last.last_seconds = secs(rx_now_ns() - p->t0);
	snprintf(p->last.last, sizeof(p->last.last), "%s", msg);
	if (ok)
		p->last.committed++;
	else
		p->last.aborted++;
	p->phase = PUSH_IDLE;
	p->c = NULL;
	p->queued = false;
	if (d->state == WCD_UPDATING)
		wcd_enter(d, WCD_READY);
}

static void parked_release(struct wcd *d, struct wcd_push *p)
{
	for (uint32_t i = 0; i < p->nparked; i++)
		d->dev.be->pool_release(&d->dev, &p->parked[i]);
	p->nparked = 0;
	p->parked_for = NULL;
}

/* A reply to the trainer may still be queued or being sent (a deadline
 * while it does not read, an ABORT sent before the OPEN reply was read):
 * it names N+1's pools by fd number, so they outlive the session until
 * that connection is freed, and the connection is closed (it broke the
 * conversation, or it stalled past its deadline). */
static void park_pools(struct wcd *d, struct wcd_push *p)
{
	struct wcd_version *nv = &d->ver[p->vi];
	struct wcd_client *c = p->c;

	if (!c || c->closing || (!c->noq && !rx_op_busy(&c->tx.op)))
		return;
	WC_ASSERT(!p->nparked); /* do_open refuses a session meanwhile */
	memcpy(p->parked, nv->pools, sizeof(nv->pools[0]) * nv->npools);
	p->nparked = nv->npools;
	p->parked_for = c;
	nv->npools = 0;
	log_warn("update session %" PRIu64 ": a reply naming its pools is still being sent to pid %d: closing that connection; the pools are freed with it",
		 p->session, (int)c->pid);
	client_close(c, "its update session ended while a reply naming the session's pools was still being sent");
}

/* Aborts the open session: N+1's pools and plan are freed (a trainer that
 * still maps them keeps its own pages until it unmaps), N serves on. */
static void session_abort(struct wcd *d, struct wcd_push *p, const char *why)
{
	char msg[WIRE_MSG_MAX + 1];
	struct log_fields lf = { .client_pid = p->pid };

	snprintf(msg, sizeof(msg),
		 "update session %" PRIu64 " of pid %d aborted: %s; version %" PRIu64 " serves on, untouched",
		 p->session, (int)p->pid, why, wcd_current(d)->number);
	park_pools(d, p);
	load_version_free(d, &d->ver[p->vi]);
	log_with(LOG_WARN, &lf, "%s", msg);
	session_end(d, p, false, msg);
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
	snprintf(why, sizeof(why),
		 "not committed within %u ms of its open (the session's bound; ask for more with timeout_ms)",
		 d->push->timeout_ms);
	session_abort(d, d->push, why);
}

/* --- open ----------------------------------------------------------------- */

static void do_open(struct wcd_client *c, const uint8_t *pl, uint32_t n)
{
	struct wcd *d = c->d;
	struct wcd_version *cur = wcd_current(d);
	struct wire_push_open q;
	char err[BASE_ERR_LEN];
	struct wcd_push *p;
	int ret;

	ret = wire_push_open_get(pl, n, &q, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (!may_push(d, c->uid)) {
		reply_error(c, c->h.id, WIRE_E_PERM, false,
			    "an update session is only accepted from the daemon's own uid %u or an allowed uid (you are uid %u): run the trainer as uid %u, or start wcd with --allow-uid %u",
			    (unsigned)geteuid(), (unsigned)c->uid,
			    (unsigned)geteuid(), (unsigned)c->uid);
		return;
	}
	p = push_get(d);
	if (!p) {
		reply_error(c, c->h.id, WIRE_E_INTERNAL, false, "out of memory");
		return;
	}
	if (d->state == WCD_SLEEPING || d->state == WCD_WAKING) {
		reply_error(c, c->h.id, WIRE_E_SLEEPING, false,
			    "the daemon is %s (sleep level %u): wake it first (wcctl wake), then open the update session",
			    wcd_state_name(d->state), d->life.level);
		return;
	}
	if (p->nparked) {
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "the last update session's connection (pid %d) is still closing: try again in a moment",
			    (int)p->pid);
		return;
	}
	if (p->phase != PUSH_IDLE) {
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "an update session of pid %d (uid %u) is open since %.1f s: the daemon holds two versions (the served one and the one being written), so one session at a time; wait for it to commit or abort, then open yours",
			    (int)p->pid, (unsigned)p->uid,
			    secs(rx_now_ns() - p->t0));
		return;
	}
	if (d->state == WCD_UPDATING) {
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "an update to version %" PRIu64 " is loading from disk: wait for it to finish (wcctl status shows the state), then open the session",
			    cur->number + 1);
		return;
	}
	if (d->state != WCD_READY) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "the daemon is %s: an update session needs it ready",
			    wcd_state_name(d->state));
		return;
	}
	if (q.base && q.base != cur->number) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "the session would replace version %" PRIu64 ", but version %" PRIu64 " serves now (another update came first): open it against version %" PRIu64 " (or 0: whichever serves)",
			    q.base, cur->number, cur->number);
		return;
	}
	p->vi = version_slot_free(d);
	if (p->vi < 0) {
		pid_t pids[1];
		unsigned np;
		int old = WCD_VERSIONS - 1 - d->cur;

		WC_ASSERT(WCD_VERSIONS == 2);
		np = server_lease_pids(d, old, pids, 1);
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "version %" PRIu64 " is still held by %u engine(s) (first pid %d): the daemon keeps two versions, so the session can open once they detach (they were told to re-attach)",
			    d->ver[old].number, np, np ? (int)pids[0] : -1);
		return;
	}
	p->phase = PUSH_OPENING;
	p->queued = true;
	p->flags = q.flags;
	p->timeout_ms = q.timeout_ms ? q.timeout_ms : PUSH_TIMEOUT_MS_DEFAULT;
	p->base = cur->number;
	p->pid = c->pid;
	p->uid = c->uid;
	p->t0 = rx_now_ns();
	p->bytes = 0;
	p->kept = 0;
	p->prepared_ns = 0;
	p->session = p->next_session++;
	p->last.opened++;
	waiter_hold(&p->who, c, c->h.id);
	wcd_enter(d, WCD_UPDATING);
	/* load_prepare drives the loop: run it from serve() (lifecycle.h) */
	rx_loop_stop(&d->loop);
}

/* The open's refusal after the job began: N+1 freed, the requester told. */
static void open_fail(struct wcd *d, struct wcd_push *p, uint32_t code,
		      const char *msg)
{
	struct wcd_client *c;
	uint64_t id;

	load_version_free(d, &d->ver[p->vi]);
	c = waiter_take(d, &p->who, &id);
	if (c)
		reply_error(c, id, code, false, "%s", msg);
	log_warn("%s", msg);
	session_end(d, p, false, msg);
}

/* N+1's plan (from the served directory's headers), checked against N's,
 * and its pools; 0 or a refusal in msg (code in *code). */
static int open_version(struct wcd *d, struct wcd_push *p,
			struct wcd_version *nv, uint32_t *code, char *msg,
			size_t cap)
{
	struct wcd_version *cur = wcd_current(d);
	char err[BASE_ERR_LEN], diff[2048];
	uint64_t need, have = 0;
	unsigned nd;
	int ret;

	memset(nv, 0, sizeof(*nv));
	ret = load_prepare(d, nv, err);
	if (!ret && wcd_stopping(d))
		ret = base_errf(err, ECANCELED, "the daemon is stopping");
	if (ret) {
		*code = WIRE_E_STATE;
		snprintf(msg, cap, "update session refused: %s; version %" PRIu64 " serves on",
			 err, cur->number);
		return -1;
	}
	nd = push_layout_diff(&cur->plan, &nv->plan, diff, 2048);
	if (nd && !(p->flags & WIRE_PUSH_ALLOW_LAYOUT)) {
		*code = WIRE_E_MISMATCH;
		snprintf(msg, cap,
			 "update session refused: the checkpoint headers in %s no longer give the served layout: %u tensor(s) differ in name, dtype or shape (%s%s); the session writes the layout the engines bound. To push that layout anyway, open with allow_layout_change; version %" PRIu64 " serves on",
			 nv->model.path, nd, diff,
			 nd > PUSH_NAMES_SHOWN ? "; ..." : "", cur->number);
		return -1;
	}
	if (nd && (p->flags & WIRE_PUSH_PARTIAL)) {
		*code = WIRE_E_MISMATCH;
		snprintf(msg, cap,
			 "update session refused: a partial update keeps version %" PRIu64 "'s bytes for the tensors it does not write, so the layout must stay its own, and %u tensor(s) differ (%s%s); push every tensor instead",
			 cur->number, nd, diff,
			 nd > PUSH_NAMES_SHOWN ? "; ..." : "");
		return -1;
	}
	if ((p->flags & WIRE_PUSH_PARTIAL) && d->dev.be != &gpu_host_backend) {
		*code = WIRE_E_NOT_IMPLEMENTED;
		snprintf(msg, cap,
			 "update session refused: partial updates on device %s are not built yet (they need a copy between device pools); push every tensor; version %" PRIu64 " serves on",
			 d->dev.name, cur->number);
		return -1;
	}
	if (nd)
		log_warn("update session: %u tensors change name, dtype or shape (allow_layout_change): %s",
			 nd, diff);
	need = version_plan_need(d, nv);
	if (version_mem_free(d, &have) == 0 && need > have) {
		*code = WIRE_E_LIMIT;
		snprintf(msg, cap,
			 "update session refused before allocating: version %" PRIu64 " needs %" PRIu64 " bytes on device %s beside version %" PRIu64 ", but only %" PRIu64 " are free: free memory, then open again; version %" PRIu64 " serves on",
			 cur->number + 1, need, d->dev.name, cur->number, have,
			 cur->number);
		return -1;
	}
	nv->hash = calloc(nv->plan.ntensors ? nv->plan.ntensors : 1,
			  sizeof(*nv->hash));
	ret = nv->hash ? load_pools_alloc(d, nv, err) :
			 base_errf(err, ENOMEM, "out of memory");
	/* fresh memfds read as zeros; device memory is whatever it was */
	for (uint32_t i = 0; !ret && i < nv->npools; i++)
		if (!nv->pools[i].host_ptr && d->dev.be->pool_fill)
			ret = d->dev.be->pool_fill(&d->dev, &nv->pools[i], 0,
						   nv->pools[i].alloc_size, 0,
						   err);
	if (ret) {
		*code = WIRE_E_LIMIT;
		snprintf(msg, cap, "update session refused: cannot create version %" PRIu64 "'s pools: %s; version %" PRIu64 " serves on",
			 cur->number + 1, err, cur->number);
		return -1;
	}
	return 0;
}

static void open_reply(struct wcd *d, struct wcd_push *p,
		       struct wcd_client *c, uint64_t id)
{
	struct wcd_version *nv = &d->ver[p->vi];
	struct wire_push_opened r = {
		.session = p->session, .version = p->base + 1,
		.base = p->base, .tensors = p->ntensors, .bytes = p->bytes,
		.timeout_ms = p->timeout_ms, .npools = nv->npools,
	};
	int fds[WIRE_PUSH_POOLS_MAX];
	unsigned nfds = 0;
	struct wire_put w;

	WC_ASSERT(nv->npools <= WIRE_PUSH_POOLS_MAX);
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PUSH_OPEN, WIRE_F_REPLY, id);
	wire_push_opened_put(&w, &r);
	for (uint32_t i = 0; i < nv->npools; i++) {
		const struct gpu_pool *gp = &nv->pools[i];
		struct wire_pool pl = {
			.size = gp->size, .alloc_size = gp->alloc_size,
			.export_kind = d->dev.export_kind,
			.fd_index = WIRE_NO_FD,
		};

		if (gp->fd >= 0) {
			pl.fd_index = nfds;
			fds[nfds++] = gp->fd;
		}
		memcpy(pl.handle, gp->ipc_handle, WIRE_IPC_HANDLE_LEN);
		wire_pool_put(&w, &pl);
	}
	reply_frame(c, id, &w, fds, nfds);
}

bool push_run_job(struct wcd *d)
{
	struct wcd_push *p = d->push;
	char msg[WIRE_MSG_MAX + 1];
	struct wcd_version *nv;
	struct wcd_client *c;
	uint32_t code = 0;
	uint64_t id;

	if (!p || p->phase != PUSH_OPENING || !p->queued)
		return false;
	WC_ASSERT(!rx_loop_in_callback(&d->loop));
	p->queued = false;
	nv = &d->ver[p->vi];
	if (wcd_stopping(d)) {
		open_fail(d, p, WIRE_E_STATE,
			  "the daemon is stopping: the update session was not opened");
		return true;
	}
	if (open_version(d, p, nv, &code, msg, sizeof(msg))) {
		open_fail(d, p, code, msg);
		return true;
	}
	p->ntensors = push_plan_tensors(nv);
	p->bytes = push_plan_bytes(nv);
	c = waiter_take(d, &p->who, &id);
	if (!c || c->closing) {
		session_abort(d, p, "the trainer's connection closed while the session was being opened");
		return true;
	}
	p->c = c;
	p->phase = PUSH_WRITING;
	p->timer = calloc(1, sizeof(*p->timer));
	if (!p->timer ||
	    rx_timer_start(&d->loop, &p->timer->t,
			   (uint64_t)p->timeout_ms * 1000000ull, deadline_cb)) {
		free(p->timer);
		p->timer = NULL;
		reply_error(c, id, WIRE_E_INTERNAL, false,
			    "cannot arm the session's deadline");
		session_abort(d, p, "its deadline could not be armed");
		return true;
	}
	p->timer->d = d;
	open_reply(d, p, c, id);
	log_info("update session %" PRIu64 " of pid %d (uid %u) open: version %" PRIu64 " beside %" PRIu64 ", %u tensors, %" PRIu64 " bytes in %u pools, commit within %u ms",
		 p->session, (int)p->pid, (unsigned)p->uid, p->base + 1,
		 p->base, p->ntensors, p->bytes, nv->npools, p->timeout_ms);
	return true;
}

/* --- commit ----------------------------------------------------------------- */

/* Counts into cnt (p->ntensors bytes, zeroed) how often the runs name
 * each checkpoint tensor; every one exactly once (partial: at most once);
 * 0, or -1 with the refusal in msg. */
static int coverage(struct wcd *d, struct wcd_push *p, const uint8_t *runs,
		    uint32_t nruns, uint8_t *cnt, char *msg, size_t cap)
{
	const struct plan *pl = &d->ver[p->vi].plan;
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
	struct wcd_version *nv = &d->ver[p->vi];
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
	if (nv->hashed && push_hash(d, nv, wcd_current(d), keep, err)) {
		snprintf(msg, sizeof(msg), "commit failed: %s", err);
		goto out_abort;
	}
	nv->phases.hash_s = secs(rx_now_ns() - p->t_seal);
	ret = 0;
	goto out_free;
out_abort:
	reply_error(c, c->h.id, WIRE_E_BUSY, false,
		    "%s; the session is aborted, version %" PRIu64 " serves on",
		    msg, wcd_current(d)->number);
	session_abort(d, p, msg);
out_free:
	free(cnt);
	free(keep);
	return ret;
}

/* The second half: N+1 becomes current, as a disk update's does. */
static void commit_publish(struct wcd_client *c, struct wcd_push *p)
{
	struct wcd *d = c->d;
	struct wcd_version *nv = &d->ver[p->vi];
	struct version_published pub;
	struct wire_life_reply *r = calloc(1, sizeof(*r));
	char err[BASE_ERR_LEN];

	if (!r) {
		reply_error(c, c->h.id, WIRE_E_INTERNAL, false, "out of memory");
		session_abort(d, p, "out of memory at commit");
		return;
	}
	timer_disarm(p);
	wcd_enter(d, WCD_READY);
	version_publish(d, p->vi, &pub);
	if (d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r->version = nv->number;
	r->bytes = p->bytes - p->kept;
	r->ns = rx_now_ns() - p->t0;
	r->verify_ns = p->prepared_ns ? p->prepared_ns : rx_now_ns() - p->t_seal;
	snprintf(r->msg, sizeof(r->msg),
		 "updated from memory: version %" PRIu64 " serves, %" PRIu64 " bytes written by pid %d%s in %.3f s (%" PRIu64 " bytes kept from version %" PRIu64 "; seal and hash %.3f s); version %" PRIu64 " %s",
		 nv->number, r->bytes, (int)p->pid,
		 p->flags & WIRE_PUSH_PARTIAL ? " (a partial update)" : "",
		 secs(r->ns), p->kept, pub.old_number, secs(r->verify_ns),
		 pub.old_number,
		 pub.old_freed ? "was freed (no lease held it)" :
				 "stays until its engines detach");
	log_info("%s", r->msg);
	commit_reply(c, r);
	p->bytes = r->bytes;
	session_end(d, p, true, r->msg);
	free(r);
}

/* COMMIT: both halves, or (WIRE_PUSH_COMMIT_PREPARE) the first, the
 * session then waiting, prepared, for a COMMIT without runs that
 * publishes (a trainer committing several ranks together: every rank is
 * prepared before any publishes). */
static void do_commit(struct wcd_client *c, struct wcd_push *p,
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

/* --- dispatch, and the other ends ------------------------------------------ */

/* The session of this connection for PLAN, COMMIT, ABORT; NULL (refusal
 * sent) when it has none. */
static struct wcd_push *session_of(struct wcd_client *c)
{
	struct wcd_push *p = c->d->push;

	if (p && (p->phase == PUSH_WRITING || p->phase == PUSH_PREPARED) &&
	    p->c == c)
		return p;
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
		do_open(c, pl, n);
		return;
	case WIRE_PUSH_PLAN:
		ret = wire_push_plan_req_get(pl, n, &first, &max, err);
		if (ret)
			break;
		p = session_of(c);
		if (p)
			push_plan_reply(c, c->h.id, &c->d->ver[p->vi], first,
					max);
		return;
	case WIRE_PUSH_COMMIT:
		/* the payload is checked first: malformed in any state */
		ret = wire_push_commit_get(pl, n, &session, &max, &runs,
					   &first, err);
		if (ret)
			break;
		p = session_of(c);
		if (p)
			do_commit(c, p, pl, n);
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
		session_abort(c->d, p, "the trainer aborted it");
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
	struct wcd_push *p = d->push;
	char why[128];

	if (p && p->nparked && p->parked_for == c)
		parked_release(d, p);
	if (!p || (p->phase != PUSH_WRITING && p->phase != PUSH_PREPARED) ||
	    p->c != c)
		return;
	snprintf(why, sizeof(why),
		 "the trainer's connection closed before commit (pid %d)",
		 (int)p->pid);
	session_abort(d, p, why);
}

void push_free(struct wcd *d)
{
	struct wcd_push *p = d->push;

	if (!p)
		return;
	/* after the loop closed: no timer to stop, its memory is ours */
	free(p->timer);
	parked_release(d, p);
	if (p->phase != PUSH_IDLE && !d->ver[p->vi].used)
		load_version_free(d, &d->ver[p->vi]);
	free(p);
	d->push = NULL;
}

void push_info(struct wcd *d, struct push_info *out)
{
	struct wcd_push *p = d->push;

	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	*out = p->last;
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
	out->seconds = secs(rx_now_ns() - p->t0);
	out->timeout_ms = p->timeout_ms;
}
