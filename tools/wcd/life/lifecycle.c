/* SPDX-License-Identifier: MIT */
/*
 * wcd's lifecycle requests: SLEEP, WAKE, UPDATE, and what HELLO and ATTACH
 * see of them: their checks, SLEEP itself, and the queue of the jobs
 * (WAKE: wake.c, UPDATE: update.c) that serve() runs (life_run_job).
 *
 * States (d->state, wcd.h; its name in STATUS and the ready file):
 *   ready     serving one version, or two while an old one still has
 *             leases after an update
 *   sleeping  level 1: every pool copied to host memory (the backend's
 *             staging memory: pinned on CUDA), then released; level 2:
 *             released, WAKE reloads from disk. HELLO and ATTACH are
 *             refused ("wake it first"), so is a second SLEEP; UPDATE at
 *             level 1 too (the host copy is version N), while at level 2
 *             it wakes the daemon straight from the new checkpoint (one
 *             load: life_run_update_asleep)
 *   waking    a WAKE job (or such an UPDATE) runs; HELLO/ATTACH refused,
 *             SLEEP/UPDATE busy
 *   updating  an UPDATE job loads version N+1 beside N; N keeps serving
 *
 * Rules: SLEEP is refused while any engine holds a lease (freeing shared
 * weights would corrupt every attached engine); an old version is freed
 * when its last lease ends; SLEEP, WAKE and UPDATE are accepted from the
 * daemon's own uid only (as SHUTDOWN).
 *
 * Known costs: SLEEP level 1 runs on the loop's thread (it pins the host
 * buffers a worker-pool job maps, queues each pool's copy, and waits for
 * the last: host_copy.c), so other clients wait for it (bench/RESULTS.md,
 * issue 17, has the figures); the jobs do not block the loop.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "clock.h"
#include "err.h"
#include "log.h"
#include "life/lifecycle.h"
#include "life/host_copy.h"
#include "life/reply.h"
#include "life/update.h"
#include "life/wake.h"
#include "serve/server.h"
#include "model/versions.h"
#include "wire_life.h"

/* Why the daemon cannot start another lifecycle request now, or NULL. */
static const char *life_busy(struct wcd *d, char *buf, size_t cap)
{
	if (d->state == WCD_UPDATING)
		snprintf(buf, cap,
			 "an update to version %" PRIu64 " is loading: wait for it to finish (wcctl status shows the state), then try again",
			 wcd_current(d)->number + 1);
	else if (d->state == WCD_WAKING)
		snprintf(buf, cap,
			 "the daemon is waking up from sleep level %u: wait for it to finish (wcctl status shows the state), then try again",
			 d->model.life.level);
	else
		return NULL;
	return buf;
}

/* Lists up to LIFE_PIDS_SHOWN pids "1, 2, 3" (", and N more" past that). */
static void pids_list(char *buf, size_t cap, const pid_t *pids, unsigned n)
{
	size_t off = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < n && i < LIFE_PIDS_SHOWN && off < cap; i++)
		off += (size_t)snprintf(buf + off, cap - off, "%s%d",
					i ? ", " : "", (int)pids[i]);
	if (n > LIFE_PIDS_SHOWN && off < cap)
		snprintf(buf + off, cap - off, ", and %u more",
			 n - LIFE_PIDS_SHOWN);
}

static void do_sleep(struct wcd *d, struct wcd_client *c, uint64_t id,
		     uint32_t level)
{
	struct wcd_version *v = wcd_current(d);
	struct wcd_life *L = &d->model.life;
	struct wire_life_reply r = { .level = level };
	char err[BASE_ERR_LEN], busy[WIRE_MSG_MAX + 1], list[512], how[160];
	uint64_t released = 0, t0 = rx_now_ns();
	bool reused = false;
	uint32_t took = 0, npools = v->npools;
	pid_t *pids;
	unsigned n;
	int ret;

	if (life_busy(d, busy, sizeof(busy))) {
		reply_error(c, id, WIRE_E_BUSY, false, "%s", busy);
		return;
	}
	if (d->state == WCD_SLEEPING) {
		snprintf(busy, sizeof(busy),
			 "the daemon is already sleeping (level %u): wake it first (wcctl wake)",
			 L->level);
		reply_error(c, id, WIRE_E_STATE, false, "%s", busy);
		return;
	}
	if (level != 1 && level != 2) {
		snprintf(busy, sizeof(busy),
			 "sleep level %u does not exist: use --level 1 (keep a host copy, wake at copy speed) or --level 2 (drop the weights, wake reloads from disk)",
			 level);
		reply_error(c, id, WIRE_E_STATE, false, "%s", busy);
		return;
	}
	pids = malloc(WCD_CLIENTS_MAX * sizeof(*pids));
	n = pids ? server_lease_pids(d, -1, pids, WCD_CLIENTS_MAX) : 0;
	if (n) {
		pids_list(list, sizeof(list), pids, n);
		snprintf(busy, sizeof(busy),
			 "sleep of model weights is not supported while %u engine(s) are attached (pids: %s): the weights are shared zero-copy, so freeing them would corrupt every attached engine. Detach them first.",
			 n, list);
		free(pids);
		reply_error(c, id, WIRE_E_BUSY, false, "%s", busy);
		return;
	}
	if (!pids) {
		reply_error(c, id, WIRE_E_INTERNAL, false, "out of memory");
		return;
	}
	free(pids);
	if (level == 1) {
		ret = life_sleep_copy(d, v, &reused, &took, err);
		if (ret) {
			life_host_free(d);
			snprintf(busy, sizeof(busy),
				 "cannot sleep at level 1: %s; the daemon keeps serving (try --level 2, which needs no host memory)",
				 err);
			L->failures++;
			metrics_life(&d->m, METRICS_SLEEP, false, 0, 0);
			reply_error(c, id, ret == -ENOMEM ? WIRE_E_LIMIT :
				    WIRE_E_INTERNAL, false, "%s", busy);
			return;
		}
		L->sleep_copy_s = clock_ns_secs(rx_now_ns() - t0);
	}
	released = version_spare_bytes(d);
	version_spare_free(d, "the daemon sleeps");
	for (uint32_t i = 0; i < v->npools; i++) {
		released += v->pools[i].alloc_size;
		d->dev.be->pool_release(&d->dev, &v->pools[i]);
	}
	v->npools = 0;
	L->level = level;
	L->sleeps++;
	wcd_enter(d, WCD_SLEEPING);
	if (d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r.version = v->number;
	r.bytes = level == 1 ? L->host_bytes : released;
	r.ns = rx_now_ns() - t0;
	metrics_life(&d->m, METRICS_SLEEP, true, r.ns, r.bytes);
	if (reused)
		snprintf(how, sizeof(how), "into the arena kept since the last sleep");
	else if (took)
		snprintf(how, sizeof(how),
			 "%u of %u buffers into the last wake's host memory, taken back from its free",
			 took, npools);
	else
		snprintf(how, sizeof(how), "into host memory allocated for it");
	if (level == 1)
		snprintf(r.msg, sizeof(r.msg),
			 "sleeping (level 1): %" PRIu64 " bytes copied to host memory in %.3f s (%s), %" PRIu64 " bytes of device %s released; wake with wcctl wake",
			 L->host_bytes, (double)r.ns / 1e9, how,
			 released, d->dev.name);
	else
		snprintf(r.msg, sizeof(r.msg),
			 "sleeping (level 2): %" PRIu64 " bytes of device %s released; wcctl wake reloads version %" PRIu64 " from %s",
			 released, d->dev.name, v->number, d->o.model);
	log_info("%s", r.msg);
	snprintf(L->last, sizeof(L->last), "%s", r.msg);
	life_reply_frame(c, WIRE_SLEEP, id, &r);
}

/* Queues a job (WIRE_WAKE or WIRE_UPDATE) and stops the loop so that
 * serve() runs it. */
static void queue_job(struct wcd *d, struct wcd_client *c, uint64_t id,
		      unsigned job)
{
	struct wcd_life *L = &d->model.life;

	WC_ASSERT(!L->job && !L->who.held);
	L->job = job;
	waiter_hold(&L->who, c, id);
	/* an UPDATE while asleep (level 2) wakes the daemon from the new
	 * checkpoint: it is a wake as far as the state goes */
	wcd_enter(d, job == WIRE_WAKE || d->state == WCD_SLEEPING ?
		  WCD_WAKING : WCD_UPDATING);
	rx_loop_stop(&d->loop);
}

static void do_wake(struct wcd *d, struct wcd_client *c, uint64_t id)
{
	char msg[WIRE_MSG_MAX + 1];

	if (life_busy(d, msg, sizeof(msg))) {
		reply_error(c, id, WIRE_E_BUSY, false, "%s", msg);
		return;
	}
	if (d->state != WCD_SLEEPING) {
		snprintf(msg, sizeof(msg),
			 "the daemon is not sleeping (state %s): there is nothing to wake",
			 wcd_state_name(d->state));
		reply_error(c, id, WIRE_E_STATE, false, "%s", msg);
		return;
	}
	queue_job(d, c, id, WIRE_WAKE);
}

static void do_update(struct wcd *d, struct wcd_client *c, uint64_t id,
		      const char *model, uint32_t flags)
{
	struct wcd_life *L = &d->model.life;
	char msg[WIRE_MSG_MAX + 1], list[512];
	pid_t pids[LIFE_PIDS_SHOWN];
	int free_slot;

	if (d->state == WCD_SLEEPING && L->level == 1) {
		/* the host copy is version N: waking restores it; an update
		 * would load N+1 beside it. Level 2 keeps nothing, so there
		 * an update wakes straight from the new checkpoint. */
		snprintf(msg, sizeof(msg),
			 "Cannot update weights while the daemon sleeps at level 1: it keeps version %" PRIu64 "'s host copy to wake from. Run 'wcctl wake --device %s', then 'wcctl update --device %s%s%s'; to update a sleeping daemon in one load, sleep at level 2 ('wcctl sleep --level 2': an update then wakes it from the new checkpoint)",
			 wcd_current(d)->number, d->dev.name, d->dev.name,
			 model[0] ? " --model " : "", model);
		reply_error(c, id, WIRE_E_SLEEPING, false, "%s", msg);
		return;
	}
	if (life_busy(d, msg, sizeof(msg))) {
		reply_error(c, id, WIRE_E_BUSY, false, "%s", msg);
		return;
	}
	if (model[0] && model[0] != '/') {
		snprintf(msg, sizeof(msg),
			 "UPDATE needs an absolute model directory, got '%s' (wcctl update resolves it for you)",
			 model);
		reply_error(c, id, WIRE_E_STATE, false, "%s", msg);
		return;
	}
	free_slot = version_slot_free(d);
	if (free_slot < 0) {
		int old = d->model.cur == 0 ? 1 : 0;
		unsigned n = server_lease_pids(d, old, pids, LIFE_PIDS_SHOWN);

		pids_list(list, sizeof(list), pids, n);
		snprintf(msg, sizeof(msg),
			 "versions %" PRIu64 " and %" PRIu64 " are both resident (version %" PRIu64 " is still attached by pids %s) and a daemon holds at most %d: those engines were told to re-attach; once they detach, update again",
			 d->model.ver[old].number, wcd_current(d)->number,
			 d->model.ver[old].number, list, WCD_VERSIONS);
		reply_error(c, id, WIRE_E_BUSY, false, "%s", msg);
		return;
	}
	snprintf(L->model, sizeof(L->model), "%s", model);
	L->update_flags = flags;
	queue_job(d, c, id, WIRE_UPDATE);
}

void life_request(struct wcd *d, struct wcd_client *c, uint64_t id,
		  unsigned type, const uint8_t *p, uint32_t n)
{
	char err[BASE_ERR_LEN], msg[WIRE_MSG_MAX + 1];
	char *model = NULL;
	uint32_t level = 0, uflags = 0;
	int ret;

	switch (type) {
	case WIRE_SLEEP:
		ret = wire_sleep_get(p, n, &level, err);
		break;
	case WIRE_WAKE:
		ret = wire_empty_get(p, n, "WAKE", err);
		break;
	default:
		model = malloc(WIRE_PATH_MAX + 1);
		ret = model ? wire_update_get(p, n, model, &uflags, err) :
			      -ENOMEM;
		if (!model)
			snprintf(err, sizeof(err), "out of memory");
		break;
	}
	if (ret) {
		free(model);
		reply_error(c, id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (c->uid != geteuid()) {
		snprintf(msg, sizeof(msg),
			 "%s is only accepted from the daemon's own uid %u (you are uid %u)",
			 wire_type_name(type), (unsigned)geteuid(),
			 (unsigned)c->uid);
		reply_error(c, id, WIRE_E_PERM, false, "%s", msg);
	} else if (wcd_stopping(d)) {
		reply_error(c, id, WIRE_E_STATE, false,
				   "the daemon is stopping");
	} else if (type == WIRE_SLEEP) {
		do_sleep(d, c, id, level);
	} else if (type == WIRE_WAKE) {
		do_wake(d, c, id);
	} else {
		do_update(d, c, id, model, uflags);
	}
	free(model);
}

const char *life_refusal(struct wcd *d, unsigned type)
{
	static char msg[160];
	const struct wcd_life *L = &d->model.life;

	if (!L->level || (type != WIRE_HELLO && type != WIRE_ATTACH))
		return NULL;
	if (d->state != WCD_WAKING)
		return "the daemon is sleeping: wake it first (wcctl wake)";
	snprintf(msg, sizeof(msg),
		 "the daemon is waking up from sleep level %u: try again in a moment (wcctl status shows the state)",
		 L->level);
	return msg;
}

bool life_run_job(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;
	unsigned job = L->job;

	if (!job)
		return false;
	/* a job drives the loop (the load's own turns): serve() runs it
	 * between turns, never a callback */
	WC_ASSERT(!rx_loop_in_callback(&d->loop));
	L->job = 0;
	if (wcd_stopping(d)) {            /* SIGTERM or SHUTDOWN came first */
		life_fail(d, WIRE_E_STATE, "the daemon is stopping: %s not run",
			  job == WIRE_WAKE ? "WAKE" : "UPDATE");
		return true;
	}
	if (job == WIRE_WAKE) {
		life_run_wake(d);
		/* the reply is queued: the host copy is freed after it */
		if (d->state == WCD_READY && L->nhost && !L->arena_bytes)
			life_host_free_later(d);
	} else if (d->state == WCD_WAKING) {
		life_run_update_asleep(d);
	} else {
		life_host_settle(d); /* its host memory checks count it freed */
		life_run_update(d);
	}
	return true;
}

void life_free(struct wcd *d)
{
	life_host_settle(d);
	life_host_free(d);
}
