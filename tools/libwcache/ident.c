/* SPDX-License-Identifier: MIT */
/*
 * libwcache: the engine's identity, built from the model directory exactly
 * as the daemon builds its own (proto/model, the plan rules,
 * proto/plan/identity, the device), and what was read to build it (the shards
 * seen: what identcache.c checks a cached identity against). Calls no
 * other file of libwcache but table.c's helpers; identcache.c caches it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "err.h"
#include "identity.h"
#include "model.h"
#include "plan.h"

void wc__shards_note(struct wc__shard_seen *s, const struct model *m)
{
	s->single_file = m->is_file;
	s->n = 0;
	s->path = calloc(m->nshards ? m->nshards : 1, sizeof(*s->path));
	s->size = calloc(m->nshards ? m->nshards : 1, sizeof(*s->size));
	s->mtime_ns = calloc(m->nshards ? m->nshards : 1, sizeof(*s->mtime_ns));
	if (!s->path || !s->size || !s->mtime_ns)
		return;
	for (uint32_t i = 0; i < m->nshards; i++) {
		s->path[i] = strdup(m->shards[i].path);
		if (!s->path[i])
			return;
		s->size[i] = m->shards[i].stamp.size;
		s->mtime_ns[i] = m->shards[i].stamp.mtime_ns;
		s->n = i + 1;
	}
	s->complete = true;
}

/* The engine's identity for expect on device dev. Costs one read and one
 * strict parse of every shard header of the model (about 0.7 ms for the
 * 146 tensors of llama-1b: identcache.c keeps the result). When shards is
 * not NULL it gets what was read of each shard (see client.h). */
int wc__ident_build(struct ident *id, const struct wc_expect *x,
		    const struct gpu_dev *dev, struct wc__shard_seen *shards,
		    struct wc_error *err)
{
	struct plan_rules rules = { 0 };
	struct model m;
	char e[BASE_ERR_LEN];
	int ret;

	if (!x->model_dir)
		return wc__fail(err, EINVAL, "wc_hello: the expected identity has no model_dir: set it to the engine's model directory (or pass NULL to accept any model)");
	if (x->tp_size < 0 || x->tp_rank < 0 || x->pp_size < 0 || x->pp_rank < 0 ||
	    x->ep_size < 0 || x->ep_rank < 0 ||
	    (x->tp_size ? x->tp_rank >= x->tp_size : x->tp_rank > 0) ||
	    (x->pp_size ? x->pp_rank >= x->pp_size : x->pp_rank > 0) ||
	    (x->ep_size ? x->ep_rank >= x->ep_size : x->ep_rank > 0))
		return wc__fail(err, EINVAL, "wc_hello: tp %d/%d, pp %d/%d, ep %d/%d is not a valid rank (rank must be below size)",
				x->tp_rank, x->tp_size, x->pp_rank, x->pp_size,
				x->ep_rank, x->ep_size);
	if (x->vocab_pad < -1 || x->vocab_pad > (int)PLAN_VOCAB_PAD_MAX)
		return wc__fail(err, EINVAL, "wc_hello: vocab_pad %d is not -1 (off), 0 (the layout's) or 1..%u",
				x->vocab_pad, PLAN_VOCAB_PAD_MAX);
	ret = model_open(&m, x->model_dir, e);
	if (ret)
		return wc__fail(err, -ret, "cannot compute the engine's identity: %s", e);
	/* as wcd: a layout file instead of the preset; no preset is fine at
	 * tp 1 (everything replicated) or with a rules file */
	if (x->layout_file) {
		plan_rules_free(&rules);
		ret = plan_rules_file(&rules, x->layout_file, e);
	} else {
		ret = plan_rules_preset(&rules, m.cfg.arch, e);
		if (ret == -ENOTSUP && x->tp_size <= 1 && x->ep_size <= 1)
			ret = 0;
		else if (ret == -ENOTSUP && x->rules_file)
			ret = 0;
		if (!ret && !rules.n && !rules.nstmts)
			plan_rules_free(&rules);
	}
	if (!ret && x->rules_file)
		ret = plan_rules_file(&rules, x->rules_file, e);
	if (ret) {
		ret = wc__fail(err, -ret, "cannot compute the engine's identity: %s", e);
		goto out_close;
	}
	ident_init(id);
	ret = ident_set_model(id, &m, &rules, e);
	if (ret) {
		ret = wc__fail(err, -ret, "cannot compute the engine's identity: %s", e);
		goto out_rules;
	}
	id->tp_size = x->tp_size ? (uint32_t)x->tp_size : 1;
	id->tp_rank = (uint32_t)x->tp_rank;
	id->pp_size = x->pp_size ? (uint32_t)x->pp_size : 1;
	id->pp_rank = (uint32_t)x->pp_rank;
	id->ep_size = x->ep_size ? (uint32_t)x->ep_size : 1;
	id->ep_rank = (uint32_t)x->ep_rank;
	id->vocab_pad = plan_vocab_pad(&rules, x->vocab_pad == 0 ? -1 :
					       x->vocab_pad < 0 ? 0 :
					       x->vocab_pad);	wc__strlcpy(id->device_uuid, dev->uuid, sizeof(id->device_uuid));
	id->cc_major = (uint32_t)dev->cc_major;
	id->cc_minor = (uint32_t)dev->cc_minor;
	if (shards)
		wc__shards_note(shards, &m);
out_rules:
	plan_rules_free(&rules);
out_close:
	model_close(&m);
	return ret;
}
