/* SPDX-License-Identifier: MIT */
/*
 * wcctl inspect DIR --tp-size N [--ep-size N] [--rank R]: the per-rank
 * plan, without loading: every served tensor with its shape, how it was
 * cut and where its bytes come from, and the views over them. The same
 * proto/ code as wcd (preset lookup, plan_build_params, plan_pack), so what it
 * prints is what wcd would serve.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "plan.h"
#include "wcctl.h"

static void shape(const uint64_t *s, uint32_t n)
{
	putchar('[');
	for (uint32_t i = 0; i < n; i++)
		printf("%s%" PRIu64, i ? ", " : "", s[i]);
	putchar(']');
}

/* "rows a..b" or "cols a..b" of the checkpoint tensor, per piece. */
static void source(const struct model *m, const struct plan *p,
		   const struct plan_tensor *t)
{
	const struct st_tensor *st = m->tensors[t->model_idx].t;

	if (t->split == PLAN_REPLICATE || !st->ndim || !st->shape[0]) {
		printf("whole");
		return;
	}
	for (uint32_t k = 0; k < t->npieces; k++) {
		const struct plan_piece *pc = &p->pc[t->piece0 + k];
		int d = t->split == PLAN_DIM1 ? 1 : 0;
		uint64_t unit = d ? pc->src_pitch / st->shape[1] :
				    st->nbytes / st->shape[0];

		if (!unit)
			unit = 1;
		printf("%s%s %" PRIu64 "..%" PRIu64, k ? ", " : "",
		       d ? "cols" : "rows", (pc->file_off - st->file_off) / unit,
		       (pc->file_off - st->file_off + pc->width) / unit);
	}
	if (!t->npieces)
		printf("no rows (all padding)");
}

static void show(const struct model *m, const struct plan *p, uint32_t rank)
{
	uint32_t nviews = 0;

	for (uint32_t i = 0; i < p->ntensors; i++)
		nviews += !!(p->t[i].flags & PLAN_T_VIEW);
	printf("# rank %u: tp %u/%u, ep %u/%u (experts [%u, %u)), pp %u/%u, vocab_pad %d: %u tensors (%u views), %" PRIu64 " bytes in %u pools\n",
	       rank, p->pp.tp_rank, p->pp.tp_size, p->pp.ep_rank, p->pp.ep_size,
	       p->expert_begin, p->expert_end, p->pp.pp_rank, p->pp.pp_size,
	       p->pp.vocab_pad, p->ntensors, nviews, p->total_bytes, p->npools);
	printf("# pool sizes:");
	for (uint32_t k = 0; k < p->npools; k++)
		printf(" %" PRIu64, p->pool_size[k]);
	putchar('\n');
	for (uint32_t i = 0; i < p->ntensors; i++) {
		const struct plan_tensor *t = &p->t[i];

		printf("%s  %s  ", t->name, st_dtype_name(t->dtype));
		shape(t->shape, t->ndim);
		printf("  pool %u +%" PRIu64 "  ", t->pool, t->pool_off);
		if (t->flags & PLAN_T_ALIAS) {
			printf("alias of %s", p->t[t->target].name);
		} else if (t->flags & PLAN_T_VIEW) {
			const struct plan_group *g = &p->g[p->t[t->target].group];

			printf("view of %u: %s", g->n,
			       p->t[p->members[g->member0]].name);
			if (g->n > 1)
				printf(" .. %s", p->t[p->members[g->member0 + g->n - 1]].name);
		} else {
			printf("%s  ", plan_split_name(t->split));
			source(m, p, t);
			if (t->padded_rows)
				printf("  padded_rows %" PRIu64, t->padded_rows);
		}
		putchar('\n');
	}
}

int wcctl_inspect_plan(const struct model *m, const struct wcctl_plan_opts *o)
{
	uint32_t n = o->tp_size > o->ep_size ? o->tp_size : o->ep_size;
	struct plan_rules r;
	char err[BASE_ERR_LEN];
	int ret = 0;

	memset(&r, 0, sizeof(r));
	r.vocab_pad = -1;
	if (o->layout)
		ret = plan_rules_file(&r, o->layout, err);
	else if ((ret = plan_rules_preset(&r, m->cfg.arch, err)) == -ENOTSUP &&
		 ((o->tp_size == 1 && o->ep_size == 1) || o->rules)) {
		plan_rules_free(&r);
		ret = 0;
	}
	if (!ret && o->rules)
		ret = plan_rules_file(&r, o->rules, err);
	if (ret) {
		fprintf(stderr, "wcctl inspect: %s\n", err);
		plan_rules_free(&r);
		return 1;
	}
	for (uint32_t k = 0; k < n && !ret; k++) {
		struct plan p;
		struct plan_params pp = {
			.tp_size = o->tp_size, .tp_rank = k % o->tp_size,
			.pp_size = 1, .ep_size = o->ep_size,
			.ep_rank = k % o->ep_size, .vocab_pad = o->vocab_pad,
		};

		if (o->rank >= 0 && (uint32_t)o->rank != k)
			continue;
		ret = plan_build_params(&p, m, &r, &pp, err);
		if (!ret)
			ret = plan_pack(&p, o->pool_size, err);
		if (ret) {
			fprintf(stderr, "wcctl inspect: rank %u: %s\n", k, err);
			plan_free(&p);
			break;
		}
		show(m, &p, k);
		plan_free(&p);
	}
	plan_rules_free(&r);
	return ret ? 1 : 0;
}
