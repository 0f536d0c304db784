/* SPDX-License-Identifier: MIT */
/*
 * PUSH_OPEN (push_open.h): the checks at the request, then the job that
 * plans N+1 from the served directory's headers (load_prepare, which
 * drives the loop: run from serve(), as a lifecycle job), creates its
 * pools and sends them writable to the trainer.
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
#include "wire_push.h"
#include "push/push_keep.h"
#include "push/push_asleep.h"
#include "push/push_open.h"
#include "push/push_pause.h"
#include "push/push_plan.h"
#include "push/push_session.h"
#include "serve/server.h"
#include "model/versions.h"
#include "load/load.h"

/* The trainer may push weights: the daemon's own uid or an
 * --allow-updater (root can write the daemon's memory anyway). An
 * --allow-uid may attach, not push: an engine's uid that replaced the
 * weights would change what every other engine serves. */
static bool may_push(const struct wcd *d, uid_t uid)
{
	if (uid == 0 || uid == geteuid())
		return true;
	for (unsigned i = 0; i < d->o.nallow_updater; i++)
		if (d->o.allow_updater[i] == uid)
			return true;
	return false;
}

/* An in-place open's own checks (the session would rewrite what engines
 * map): the same layout, every engine holding a lease paused, and (host)
 * pools the daemon can still write. true: refused, the reply sent. */
static bool in_place_refused(struct wcd_client *c,
			     const struct wire_push_open *q,
			     const struct wcd_version *cur)
{
	struct wcd *d = c->d;
	char pids[128] = "";
	pid_t pid[8];
	unsigned np, shown;
	size_t o = 0;

	if (q->flags & WIRE_PUSH_ALLOW_LAYOUT) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "an in-place update keeps the served layout (the engines keep their mappings of it), so it cannot allow a layout change: update beside for that");
		return true;
	}
	np = push_unpaused(d, pid, 8);
	if (np) {
		shown = np < 8 ? np : 8;
		for (unsigned i = 0; i < shown && o < sizeof(pids); i++)
			o += (size_t)snprintf(pids + o, sizeof(pids) - o,
					      "%s%d", i ? ", " : "",
					      (int)pid[i]);
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "an in-place update rewrites the pools the engines map, and %u engine(s) holding a lease have not paused (pids %s%s): have each pause first (conn.pause(), wc_pause), or update beside",
			    np, pids, np > shown ? ", ..." : "");
		return true;
	}
	for (uint32_t i = 0; d->dev.be == &gpu_host_backend &&
			     i < cur->npools; i++) {
		if (gpu_host_pool_rewritable(&cur->pools[i]))
			continue;
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "version %" PRIu64 "'s pool %u was sealed for good (it was written by a beside update session, or came through a handover), so the host backend cannot rewrite it in place: update beside, or from disk (wcctl update) once, then in place",
			    cur->number, i);
		return true;
	}
	return false;
}

void push_open_request(struct wcd_client *c, const uint8_t *pl, uint32_t n)
{
	struct wcd *d = c->d;
	struct wcd_version *cur = wcd_current(d);
	struct wire_push_open q;
	char err[BASE_ERR_LEN];
	struct wcd_push *p;
	uint32_t code;
	int ret;

	ret = wire_push_open_get(pl, n, &q, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (!may_push(d, c->uid)) {
		reply_error(c, c->h.id, WIRE_E_PERM, false,
			    "an update session is only accepted from the daemon's own uid %u or an allowed updater (you are uid %u): run the trainer as uid %u, or start wcd with --allow-updater %u (--allow-uid lets a uid attach, not update)",
			    (unsigned)geteuid(), (unsigned)c->uid,
			    (unsigned)geteuid(), (unsigned)c->uid);
		return;
	}
	p = push_get(d);
	if (!p) {
		reply_error(c, c->h.id, WIRE_E_INTERNAL, false, "out of memory");
		return;
	}
	if (push_asleep_refusal(d, q.flags, &code, err, sizeof(err))) {
		reply_error(c, c->h.id, code, false, "%s", err);
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
			    push_secs(rx_now_ns() - p->t0));
		return;
	}
	if (d->state == WCD_UPDATING) {
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "an update to version %" PRIu64 " is loading from disk: wait for it to finish (wcctl status shows the state), then open the session",
			    cur->number + 1);
		return;
	}
	if (d->state != WCD_READY && d->state != WCD_SLEEPING) {
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
	if (push_incomplete(d) && (q.flags & WIRE_PUSH_PARTIAL)) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "a partial update keeps the served version's bytes for the tensors it does not write, but %s: push every tensor",
			    p->incomplete_why);
		return;
	}
	if ((q.flags & WIRE_PUSH_IN_PLACE) && (q.flags & WIRE_PUSH_KEEP_SPARE)) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "keep_spare keeps the pools of the version a beside update replaces, and an in-place update replaces none (it rewrites the served pools): drop one of the two");
		return;
	}
	if ((q.flags & WIRE_PUSH_IN_PLACE) && in_place_refused(c, &q, cur))
		return;
	p->direct = (q.flags & WIRE_PUSH_IN_PLACE) &&
		    d->dev.be != &gpu_host_backend;
	p->vi = p->direct ? d->model.cur : version_slot_free(d);
	if (p->vi < 0) {
		pid_t pids[1];
		unsigned np;
		int old = WCD_VERSIONS - 1 - d->model.cur;

		WC_ASSERT(WCD_VERSIONS == 2);
		np = server_lease_pids(d, old, pids, 1);
		reply_error(c, c->h.id, WIRE_E_BUSY, false,
			    "version %" PRIu64 " is still held by %u engine(s) (first pid %d): the daemon keeps two versions, so the session can open once they detach (they were told to re-attach)",
			    d->model.ver[old].number, np,
			    np ? (int)pids[0] : -1);
		return;
	}
	p->phase = PUSH_OPENING;
	p->queued = true;
	p->flags = q.flags;
	p->in_place = q.flags & WIRE_PUSH_IN_PLACE;
	p->timeout_ms = q.timeout_ms ? q.timeout_ms : PUSH_TIMEOUT_MS_DEFAULT;
	p->base = cur->number;
	p->pid = c->pid;
	p->uid = c->uid;
	p->t0 = rx_now_ns();
	p->bytes = 0;
	p->kept = 0;
	p->spare = false;
	p->plan_kept = false;
	p->let_go = false;
	p->prepared_ns = 0;
	p->session = p->next_session++;
	p->last.opened++;
	waiter_hold(&p->who, c, c->h.id);
	p->asleep = push_asleep_enter(d);
	/* load_prepare drives the loop: run it from serve() (lifecycle.h) */
	rx_loop_stop(&d->loop);
}

/* The open's refusal after the job began: N+1 freed, the requester told. */
static void open_fail(struct wcd *d, struct wcd_push *p, uint32_t code,
		      const char *msg)
{
	struct wcd_client *c;
	uint64_t id;

	if (!p->direct)
		load_version_free(d, &d->model.ver[p->vi]);
	c = waiter_take(d, &p->who, &id);
	if (c)
		reply_error(c, id, code, false, "%s", msg);
	log_warn("%s", msg);
	push_session_end(d, p, false, msg);
}

/* N+1's plan (from the served directory's headers), checked against N's,
 * and its pools; 0 or a refusal in msg (code in *code). ns[0], ns[1]: the
 * plan's and the pools' nanoseconds, for the open's log line. */
static int open_version(struct wcd *d, struct wcd_push *p,
			struct wcd_version *nv, uint64_t ns[2],
			uint32_t *code, char *msg, size_t cap)
{
	struct wcd_version *cur = wcd_current(d);
	char err[BASE_ERR_LEN], diff[2048];
	uint64_t need, have = 0, t;
	unsigned nd;
	int ret;

	memset(nv, 0, sizeof(*nv));
	t = rx_now_ns();
	ret = load_prepare_again(d, nv, version_planned(d), &p->plan_kept, err);
	if (!ret && wcd_stopping(d))
		ret = base_errf(err, ECANCELED, "the daemon is stopping");
	if (ret) {
		*code = WIRE_E_STATE;
		snprintf(msg, cap, "update session refused: %s; version %" PRIu64 " serves on",
			 err, cur->number);
		return -1;
	}
	nd = version_layout_diff(&cur->plan, &nv->plan, diff, 2048);
	if (nd && !(p->flags & WIRE_PUSH_ALLOW_LAYOUT)) {
		*code = WIRE_E_MISMATCH;
		snprintf(msg, cap,
			 "update session refused: the checkpoint headers in %s no longer give the served layout: %u tensor(s) differ in name, dtype or shape (%s%s); the session writes the layout the engines bound. To push that layout anyway, open with allow_layout_change; version %" PRIu64 " serves on",
			 nv->model.path, nd, diff,
			 nd > VERSION_DIFFS_SHOWN ? "; ..." : "", cur->number);
		return -1;
	}
	if (nd && (p->flags & WIRE_PUSH_PARTIAL)) {
		*code = WIRE_E_MISMATCH;
		snprintf(msg, cap,
			 "update session refused: a partial update keeps version %" PRIu64 "'s bytes for the tensors it does not write, so the layout must stay its own, and %u tensor(s) differ (%s%s); push every tensor instead",
			 cur->number, nd, diff,
			 nd > VERSION_DIFFS_SHOWN ? "; ..." : "");
		return -1;
	}
	if ((p->flags & WIRE_PUSH_PARTIAL) && !d->dev.be->pool_copy) {
		*code = WIRE_E_NOT_IMPLEMENTED;
		snprintf(msg, cap,
			 "update session refused: the %s backend of device %s has no copy between pools, which a partial update needs; push every tensor; version %" PRIu64 " serves on",
			 d->dev.be->name, d->dev.name, cur->number);
		return -1;
	}
	if (nd)
		log_warn("update session: %u tensors change name, dtype or shape (allow_layout_change): %s",
			 nd, diff);
	ns[0] = rx_now_ns() - t;
	t = rx_now_ns();
	nv->hash = calloc(nv->plan.ntensors ? nv->plan.ntensors : 1,
			  sizeof(*nv->hash));
	if (!nv->hash) {
		*code = WIRE_E_INTERNAL;
		snprintf(msg, cap, "update session refused: out of memory; version %" PRIu64 " serves on",
			 cur->number);
		return -1;
	}
	p->spare = version_spare_take(d, nv);
	need = version_plan_need(d, nv);
	if (!p->spare && version_mem_free(d, &have) == 0 && need > have) {
		*code = WIRE_E_LIMIT;
		snprintf(msg, cap,
			 "update session refused before allocating: version %" PRIu64 " needs %" PRIu64 " bytes on device %s beside version %" PRIu64 ", but only %" PRIu64 " are free: free memory, then open again; version %" PRIu64 " serves on",
			 cur->number + 1, need, d->dev.name, cur->number, have,
			 cur->number);
		return -1;
	}
	ret = p->spare ? 0 : load_pools_alloc(d, nv, err);
	/* fresh memfds read as zeros; device memory (and the spare) is
	 * whatever it was */
	if (!ret)
		ret = load_zero_padding(d, nv, err);
	ns[1] = rx_now_ns() - t;
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
	struct wcd_version *nv = &d->model.ver[p->vi];
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
		struct gpu_pool *gp = &nv->pools[i];
		struct wire_pool pl = {
			.size = gp->size, .alloc_size = gp->alloc_size,
			.export_kind = d->dev.export_kind,
			.fd_index = WIRE_NO_FD,
		};

		if (gp->fd >= 0) {
			pl.fd_index = nfds;
			fds[nfds++] = gp->fd;
		}
		/* its seal must prove the trainer let go (gpu/host.c) */
		gp->lent_writable = !p->direct;
		memcpy(pl.handle, gp->ipc_handle, WIRE_IPC_HANDLE_LEN);
		wire_pool_put(&w, &pl);
	}
	reply_frame(c, id, &w, fds, nfds);
}

bool push_open_job(struct wcd *d)
{
	struct wcd_push *p = d->push;
	char msg[WIRE_MSG_MAX + 1];
	struct wcd_version *nv;
	struct wcd_client *c;
	uint32_t code = 0;
	uint64_t id, ns[2] = { 0, 0 };   /* in place on a device: no plan */

	if (!p || p->phase != PUSH_OPENING || !p->queued)
		return false;
	WC_ASSERT(!rx_loop_in_callback(&d->loop));
	p->queued = false;
	nv = &d->model.ver[p->vi];
	if (wcd_stopping(d)) {
		open_fail(d, p, WIRE_E_STATE,
			  "the daemon is stopping: the update session was not opened");
		return true;
	}
	if (!p->direct && open_version(d, p, nv, ns, &code, msg, sizeof(msg))) {
		open_fail(d, p, code, msg);
		return true;
	}
	p->ntensors = push_plan_tensors(nv);
	p->bytes = push_plan_bytes(nv);
	c = waiter_take(d, &p->who, &id);
	if (!c || c->closing) {
		push_session_abort(d, p, "the trainer's connection closed while the session was being opened");
		return true;
	}
	p->c = c;
	p->phase = PUSH_WRITING;
	if (push_deadline_arm(d, p)) {
		reply_error(c, id, WIRE_E_INTERNAL, false,
			    "cannot arm the session's deadline");
		push_session_abort(d, p, "its deadline could not be armed");
		return true;
	}
	open_reply(d, p, c, id);
	log_info("update session %" PRIu64 " of pid %d (uid %u) open: version %" PRIu64 " %s %" PRIu64 ", %u tensors, %" PRIu64 " bytes in %u pools%s, commit within %u ms; opened in %.3f ms (plan %.3f ms%s, pools %.3f ms)",
		 p->session, (int)p->pid, (unsigned)p->uid, p->base + 1,
		 p->in_place ? "in place of" : "beside", p->base,
		 p->ntensors, p->bytes, nv->npools,
		 p->spare ? " (the spare's)" : "", p->timeout_ms,
		 (double)(rx_now_ns() - p->t0) / 1e6,
		 (double)ns[0] / 1e6, p->plan_kept ? ", kept" : "",
		 (double)ns[1] / 1e6);
	return true;
}
