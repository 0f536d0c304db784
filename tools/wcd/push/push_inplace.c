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
 * mapping can write them, so the trainer writes fresh memfds, as beside,
 * and the commit seals those (proving the trainer let go) and copies them
 * into the served pools. The host's cost: a second copy of the bytes
 * while the session is open, and one memcpy of every byte at commit on
 * the loop thread (about 10 GB/s; the engines are paused meanwhile). The
 * host backend is where CI runs the protocol, not where memory is tight.
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

int push_inplace_prepare(struct wcd *d, struct wcd_push *p,
			 const uint8_t *keep, char *err)
{
	struct wcd_version *cur = wcd_current(d);
	struct wcd_version *nv = &d->model.ver[p->vi];
	char e[BASE_ERR_LEN];
	int ret;

	WC_ASSERT(p->in_place);
	if (p->direct) {
		/* the trainer wrote the served pools: what a partial update
		 * did not write (keep, all zeros otherwise) keeps its hash */
		WC_ASSERT(nv == cur);
		return cur->hashed ? push_hash(d, cur, cur, keep, err) : 0;
	}
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
	for (uint32_t i = 0; i < nv->npools; i++) {
		ret = gpu_host_pool_rewrite(&cur->pools[i], 0,
					    nv->pools[i].host_ptr,
					    nv->pools[i].alloc_size, e);
		if (ret)
			return base_errf(err, -ret,
					 "rewriting pool %u of version %" PRIu64 " failed: %s",
					 i, cur->number, e);
	}
	if (!cur->hashed)
		return 0;
	ret = push_hash(d, nv, cur, keep, err);
	if (!ret)
		memcpy(cur->hash, nv->hash,
		       (size_t)cur->plan.ntensors * sizeof(*cur->hash));
	return ret;
}

void push_inplace_publish(struct wcd *d, struct wcd_push *p,
			  struct wire_life_reply *r)
{
	struct wcd_version *cur = wcd_current(d);
	unsigned told;

	WC_ASSERT(p->in_place && cur->number == p->base);
	push_timer_disarm(p);
	wcd_enter(d, WCD_READY);
	if (!p->direct)
		load_version_free(d, &d->model.ver[p->vi]);
	cur->number = p->base + 1;
	p->incomplete = 0;     /* the ready file: after the reply */
	r->version = cur->number;
	r->bytes = p->bytes - p->kept;
	r->ns = rx_now_ns() - p->t0;
	r->verify_ns = p->prepared_ns ? p->prepared_ns :
		       rx_now_ns() - p->t_seal;
	snprintf(r->msg, sizeof(r->msg),
		 "updated in place from memory: version %" PRIu64 " serves on the same pools, %" PRIu64 " bytes written by pid %d%s in %.3f s (rewrite and hash %.3f s); paused engines may resume",
		 cur->number, r->bytes, (int)p->pid,
		 p->flags & WIRE_PUSH_PARTIAL ? " (a partial update)" : "",
		 push_secs(r->ns), push_secs(r->verify_ns));
	told = push_notify_leased(d, WIRE_NOTICE_IN_PLACE, cur->number,
				  r->msg);
	log_info("%s; %u engine(s) told", r->msg, told);
	p->bytes = r->bytes;
}
