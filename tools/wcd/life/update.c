/* SPDX-License-Identifier: MIT */
/*
 * The UPDATE job (update.h), run by serve() between turns of the loop
 * (lifecycle.h says why); the load drives the reactor while it waits, so
 * other clients keep being served.
 *
 * load_prepare of the new directory into the free version slot; the
 * identity may differ only in the checkpoint digest and the directory
 * (else a MISMATCH naming every other field), the layout the engines bound
 * not at all unless --allow-layout-change; free device memory is checked
 * before any pool exists; load_run; then version N+1 becomes current in
 * one step (new HELLO/ATTACH get it; the ready file is rewritten
 * atomically), lease holders get a NOTICE, and version N is freed at once
 * if it has no lease, else when its last lease ends (version_publish). Any
 * failure frees N+1's partial pools and leaves N serving, untouched. While
 * asleep at level 2 the same load wakes the daemon as N+1.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "life/update.h"
#include "life/reply.h"
#include "model/versions.h"
#include "load/load.h"
#include "wire_life.h"

/* Lists the identity fields in which nv differs from the served version,
 * other than the checkpoint digest and the directory; returns how many. */
static unsigned update_diff(struct wcd *d, const struct wcd_version *nv,
			    char *out, size_t cap)
{
	struct wire_mismatch *mm = calloc(WIRE_MISMATCH_MAX, sizeof(*mm));
	unsigned n, k = 0;
	size_t off = 0;

	out[0] = '\0';
	if (!mm)
		return 0;
	n = ident_mismatch(&wcd_current(d)->ident, &nv->ident, mm,
			      WIRE_MISMATCH_MAX);
	for (unsigned i = 0; i < n; i++) {
		if (!strcmp(mm[i].field, "ckpt_digest") ||
		    !strcmp(mm[i].field, "model_path"))
			continue;
		if (off < cap)
			off += (size_t)snprintf(out + off, cap - off,
						"%s%s (served %s, new %s)",
						k ? "; " : "", mm[i].field,
						mm[i].daemon, mm[i].client);
		k++;
	}
	free(mm);
	return k;
}

/* Checks nv before anything is allocated; 0 or a refusal sent. */
static int update_check(struct wcd *d, struct wcd_version *nv,
			const char *dir)
{
	struct wcd_version *cur = wcd_current(d);
	char diff[WIRE_MSG_MAX + 1];
	uint64_t need, have = 0, held = version_resident_bytes(d);
	unsigned n;

	if (update_diff(d, nv, diff, sizeof(diff))) {
		life_fail(d, WIRE_E_MISMATCH,
			  "update refused: the checkpoint in %s is not a new version of the served model; it differs in %s. An update may change only the weights (the checkpoint digest); start a separate wcd for another model. Version %" PRIu64 " keeps serving",
			  dir, diff, cur->number);
		return -1;
	}
	n = version_layout_diff(&cur->plan, &nv->plan, diff, sizeof(diff));
	if (n && !(d->model.life.update_flags & WIRE_UPDATE_ALLOW_LAYOUT)) {
		life_fail(d, WIRE_E_MISMATCH,
			  "update refused: the checkpoint in %s changes the layout the engines bound: %u tensor(s) differ in name, dtype or shape (%" PRIu32 " served, %" PRIu32 " new: %s%s); an update may change only the weights. To publish it anyway: wcctl update --allow-layout-change (engines following updates then get tensors they did not bind). Version %" PRIu64 " keeps serving",
			  dir, n, cur->plan.ntensors, nv->plan.ntensors, diff,
			  n > VERSION_DIFFS_SHOWN ? "; ..." : "", cur->number);
		return -1;
	}
	if (n)
		log_warn("update: %u tensors change name, dtype or shape (--allow-layout-change): %s",
			 n, diff);
	if (!memcmp(cur->ident.ckpt_digest, nv->ident.ckpt_digest,
		    BASE_HASH_LEN)) {
		life_fail(d, WIRE_E_STATE,
			  "update refused: the checkpoint in %s is the one version %" PRIu64 " already serves (same checkpoint digest): write the new weights first, or give --model NEWDIR",
			  dir, cur->number);
		return -1;
	}
	need = version_plan_need(d, nv);
	if (version_mem_free(d, &have) == 0 && need > have) {
		life_fail(d, WIRE_E_LIMIT,
			  "update refused before loading anything: version %" PRIu64 " needs %" PRIu64 " bytes on device %s beside the %" PRIu64 " bytes of version %" PRIu64 ", but only %" PRIu64 " bytes are free%s: free memory (or run the update where the device has room for two versions), then update again; version %" PRIu64 " keeps serving",
			  cur->number + 1, need, d->dev.name, held,
			  cur->number, have,
			  d->dev.be == &gpu_host_backend ? " (MemAvailable)" : "",
			  cur->number);
		return -1;
	}
	return 0;
}

/* The steps both UPDATE paths share (awake and asleep at level 2): read
 * version n + 1's checkpoint into nv (the model the request names, else the
 * one served), check it against version n (update_check), then load it. On
 * a failure nv is freed, the client has its error, which ends with
 * "; <tail>" (what goes on serving), and -1 is returned. */
static int update_load(struct wcd *d, struct wcd_version *nv, uint64_t n,
		       const char *tail, char *err)
{
	struct wcd_life *L = &d->model.life;
	const char *served = d->o.model;
	int ret;

	memset(nv, 0, sizeof(*nv));
	/* a disk update allocates its own pools: the spare goes first */
	version_spare_free(d, "a disk update loads the next version");
	if (L->model[0])
		d->o.model = L->model;
	ret = load_prepare(d, nv, err);
	d->o.model = served;
	if (ret) {
		load_version_free(d, nv);
		life_fail(d, ret == -ENOTSUP ? WIRE_E_PERM : WIRE_E_STATE,
			  "update refused: %s; %s", err, tail);
		return -1;
	}
	if (update_check(d, nv, nv->model.path)) {
		load_version_free(d, nv);
		return -1;
	}
	ret = load_run(d, nv, err);
	if (!ret && wcd_stopping(d))
		ret = base_errf(err, ECANCELED, "stopped while loading");
	if (ret) {
		load_version_free(d, nv);
		life_fail(d, WIRE_E_INTERNAL,
			  "update to version %" PRIu64 " failed: %s; %s",
			  n + 1, err, tail);
		return -1;
	}
	return 0;
}

/* Publishes the loaded slot ni: one step, between two turns of the loop
 * (the served path follows it; READY; version_publish; the ready file);
 * r gets the version, its bytes and the time since t0. */
static void update_publish(struct wcd *d, int ni, struct version_published *pub,
			   struct wire_life_reply *r, uint64_t t0)
{
	struct wcd_version *nv = &d->model.ver[ni];
	char err[BASE_ERR_LEN];

	snprintf(d->model.path, sizeof(d->model.path), "%s",
		 nv->model.path);
	d->o.model = d->model.path;
	wcd_enter(d, WCD_READY);
	version_publish(d, ni, pub);
	if (d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r->version = nv->number;
	r->bytes = nv->plan.total_bytes;
	r->ns = rx_now_ns() - t0;
}

void life_run_update(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;
	struct wcd_version *cur = wcd_current(d), *nv;
	struct wire_life_reply r = { 0 };
	struct version_published pub;
	char err[BASE_ERR_LEN] = "", tail[96];
	uint64_t t0 = rx_now_ns();
	int ni = version_slot_free(d);

	WC_ASSERT(d->state == WCD_UPDATING);
	if (ni < 0) {
		life_fail(d, WIRE_E_BUSY, "update refused: no free version slot");
		goto out_state;
	}
	nv = &d->model.ver[ni];
	snprintf(tail, sizeof(tail),
		 "version %" PRIu64 " keeps serving, untouched", cur->number);
	if (update_load(d, nv, cur->number, tail, err))
		goto out_state;

	update_publish(d, ni, &pub, &r, t0);
	snprintf(r.msg, sizeof(r.msg),
		 "updated: version %" PRIu64 " (%s) serves, %" PRIu64 " bytes loaded in %.3f s; version %" PRIu64 " %s",
		 nv->number, nv->model.path, r.bytes, (double)r.ns / 1e9,
		 pub.old_number,
		 pub.old_freed ? "was freed (no lease held it)" :
				 "stays until its engines detach");
	L->updates++;
	log_info("%s", r.msg);
	life_reply(d, WIRE_UPDATE, &r);
	return;
out_state:
	wcd_enter(d, WCD_READY);
}

/* UPDATE while asleep at level 2: nothing of version N is kept (its pools
 * were released, no engine holds a lease: sleep needs none), so the daemon
 * wakes straight from the new checkpoint: one load, not a reload of N
 * followed by the load of N+1. The checks are update_check's (identity,
 * layout, a new checkpoint digest, room on the device), against N's
 * manifest; N is retired when N+1 is published. */
void life_run_update_asleep(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;
	struct wcd_version *cur = wcd_current(d), *nv;
	struct wire_life_reply r = { .level = 2 };
	struct version_published pub;
	char err[BASE_ERR_LEN] = "", tail[96];
	uint64_t t0 = rx_now_ns(), n = cur->number;
	int ni = version_slot_free(d);

	WC_ASSERT(d->state == WCD_WAKING && L->level == 2 && !cur->leases);
	if (ni < 0) {
		life_fail(d, WIRE_E_BUSY,
			  "update refused: no free version slot; the daemon stays asleep (level 2)");
		goto out_asleep;
	}
	nv = &d->model.ver[ni];
	snprintf(tail, sizeof(tail),
		 "the daemon stays asleep (level 2) with version %" PRIu64, n);
	if (update_load(d, nv, n, tail, err))
		goto out_asleep;
	L->level = 0;
	update_publish(d, ni, &pub, &r, t0);
	r.verify_ns = (uint64_t)(nv->phases.hash_s * 1e9);
	snprintf(r.msg, sizeof(r.msg),
		 "awake and updated: version %" PRIu64 " (%s) loaded straight from its checkpoint while asleep at level 2, %" PRIu64 " bytes in %.3f s (one load); version %" PRIu64 " was freed",
		 nv->number, nv->model.path, r.bytes, (double)r.ns / 1e9,
		 pub.old_number);
	L->updates++;
	L->wakes++;
	log_info("%s", r.msg);
	life_reply(d, WIRE_UPDATE, &r);
	return;
out_asleep:
	wcd_enter(d, WCD_SLEEPING);
}
