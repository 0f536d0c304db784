/* SPDX-License-Identifier: MIT */
/*
 * An in-place session's commit (push_inplace.h). In place rewrites the
 * version the engines map, for colocated RL where two copies of the
 * weights do not fit: push_open.c opens it only while every engine
 * holding a lease has paused (push_pause.c), and HELLO, MANIFEST, ATTACH
 * and resumes are refused until it ends.
 *
 * Where the trainer writes: on a device (direct) the served pools
 * themselves, mapped read-write by the trainer while the engines keep
 * their read-only mappings; on the host backend the served memfds are
 * sealed (F_SEAL_FUTURE_WRITE: gpu/host.c) so that only the daemon's own
 * mapping can write them, so the trainer writes fresh memfds, as beside
 * (but a partial update's are never filled with the kept bytes), and the
 * commit seals those (proving the trainer let go) and copies what was
 * written into the served pools. The host's cost: a second copy of the
 * written bytes while the session is open, and one memcpy of them at
 * commit on a worker (the engines are paused meanwhile): a partial
 * update's follows what changed, not the model's size. The host backend
 * is where CI runs the protocol, not where memory is tight.
 *
 * Hashes are recomputed from the session's bytes (a partial update keeps
 * the others'), and the served version's number goes to N+1: engines
 * resume on the same mappings, HELLO and MANIFEST show N+1.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "wire_life.h"
#include "wire_push.h"
#include "push/push_inplace.h"
#include "push/push_keep.h"
#include "push/push_session.h"
#include "load/load.h"
#include "model/versions.h"

/* Host: the checkpoint entries written (each whole, its padding too)
 * from the session's pools into the served ones. */
static int rewrite_written(struct wcd_push *p, struct wcd_version *cur,
			   const struct wcd_version *nv,
			   const uint8_t *written, char *err)
{
	char e[BASE_ERR_LEN];
	int ret;

	p->copied = 0;
	for (uint32_t i = 0; i < p->ntensors; i++) {
		const struct plan_tensor *t = &nv->plan.t[i];

		if (!written[i])
			continue;
		WC_ASSERT(!(t->flags & PLAN_T_VIEW) &&
			  t->pool == cur->plan.t[i].pool &&
			  t->pool_off == cur->plan.t[i].pool_off);
		ret = gpu_host_pool_rewrite(&cur->pools[t->pool], t->pool_off,
					    (const uint8_t *)nv->pools[t->pool].host_ptr +
					    t->pool_off, t->alloc, e);
		if (ret)
			return base_errf(err, -ret,
					 "rewriting tensor %s of version %" PRIu64 " failed: %s",
					 t->name, cur->number, e);
		p->copied += t->alloc;
	}
	return 0;
}

int push_inplace_prepare(struct wcd *d, struct wcd_push *p,
			 const uint8_t *written, const uint8_t *keep,
			 char *err)
{
	struct wcd_version *cur = wcd_current(d);
	struct wcd_version *nv = &d->model.ver[p->vi];
	int ret;

	WC_ASSERT(p->in_place);
	/* direct: the trainer wrote the served pools */
	WC_ASSERT(!p->direct || nv == cur);
	if (p->direct)
		goto hash;
	if (nv->npools != cur->npools ||
	    nv->plan.ntensors != cur->plan.ntensors)
		return base_errf(err, EINVAL,
				 "the session's %u pools and %u entries are not the served version's %u and %u",
				 nv->npools, nv->plan.ntensors, cur->npools,
				 cur->plan.ntensors);
	for (uint32_t i = 0; i < nv->npools; i++) {
		if (nv->pools[i].alloc_size != cur->pools[i].alloc_size)
			return base_errf(err, EINVAL,
					 "the session's pool %u holds %" PRIu64 " bytes, the served one %" PRIu64,
					 i, nv->pools[i].alloc_size,
					 cur->pools[i].alloc_size);
	}
	ret = rewrite_written(p, cur, nv, written, err);
	if (ret)
		return ret;
hash:
	/* what a partial update did not write (keep, all zeros otherwise)
	 * keeps its hash */
	return cur->hashed ? push_hash(d, cur, cur, keep, err) : 0;
}

void push_inplace_publish(struct wcd *d, struct wcd_push *p,
			  struct wire_life_reply *r)
{
	struct wcd_version *cur = wcd_current(d);
	char copied[64] = "";
	unsigned told;

	WC_ASSERT(p->in_place && cur->number == p->base);
	if (!p->direct)      /* host: the bytes written, whole entries */
		snprintf(copied, sizeof(copied),
			 "%" PRIu64 " bytes copied into them, and",
			 p->copied);
	push_timer_disarm(p);
	wcd_enter(d, WCD_READY);
	/* host: the session's pools go, their plan is kept for the next
	 * open (the planned: a 45k-tensor rank re-planned in 310 ms each
	 * session else) */
	if (!p->direct)
		version_retire(d, &d->model.ver[p->vi]);
	cur->number = p->base + 1;
	p->incomplete = 0;     /* the ready file: after the reply */
	r->version = cur->number;
	r->bytes = p->bytes - p->kept;
	r->ns = rx_now_ns() - p->t0;
	r->verify_ns = p->prepared_ns ? p->prepared_ns :
		       rx_now_ns() - p->t_seal;
	snprintf(r->msg, sizeof(r->msg),
		 "updated in place from memory: version %" PRIu64 " serves on the same pools, %" PRIu64 " bytes written by pid %d%s in %.3f s (%s hashes %.3f s); paused engines may resume",
		 cur->number, r->bytes, (int)p->pid,
		 p->flags & WIRE_PUSH_PARTIAL ? " (a partial update)" : "",
		 push_secs(r->ns), copied, push_secs(r->verify_ns));
	told = push_notify_leased(d, WIRE_NOTICE_IN_PLACE, cur->number,
				  r->msg);
	log_info("%s; %u engine(s) told", r->msg, told);
	p->bytes = r->bytes;
}
