/* SPDX-License-Identifier: MIT */
/*
 * The TP plan for Llama-3-8B shapes at tp 2, 4 and 8 covers every byte of
 * every tensor exactly once across the ranks (replicated tensors: once per
 * rank, whole), each rank's destination size matches its local shape, and
 * pipeline stages at pp 2 and 4 hold every layer exactly once. The model is
 * written by `wcgen llama-8b --headers-only` (sparse files: real headers, no
 * data), so this reads only headers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "plan.h"
#include "plan_check.h"
#include "synth_model.h"
#include "t.h"

/* Every rank's pieces of every tensor tile the tensor: once for a split,
 * tp times for a replicated tensor (llama-8b: 8 KV heads, no replication
 * up to tp 8). */
static void check_tp(const struct model *m, const struct plan_rules *r,
		     uint32_t tp)
{
	struct plan *p = calloc(tp, sizeof(*p));
	char err[BASE_ERR_LEN];
	uint64_t split_tensors = 0;

	T_ASSERT(p);
	for (uint32_t k = 0; k < tp; k++) {
		if (plan_build(&p[k], m, r, tp, k, 1, 0, err))
			T_FAIL("tp %u rank %u: %s", tp, k, err);
		/* checkpoint names, then qkv and gate_up views per layer */
		T_EQ_INT(p[k].ntensors, m->ntensors + 2 * 32);
	}
	for (uint32_t i = 0; i < m->ntensors; i++) {
		bool rep = p[0].t[i].split == PLAN_REPLICATE;

		T_EQ_STR(p[0].t[i].name, m->tensors[i].name);
		pc_check_cover(p, tp, m, i, rep ? tp : 1);
		split_tensors += !rep;
	}
	/* q k v o gate up down per layer, embed and lm_head */
	T_EQ_U64(split_tensors, 32 * 7 + 2);
	for (uint32_t k = 0; k < tp; k++)
		plan_free(&p[k]);
	free(p);
	printf("tp %u: every byte of %u tensors covered exactly once\n", tp,
	       m->ntensors);
}

static void check_pp(const struct model *m, const struct plan_rules *r,
		     uint32_t pp)
{
	uint32_t *seen = calloc(m->ntensors, sizeof(*seen));
	char err[BASE_ERR_LEN];

	for (uint32_t s = 0; s < pp; s++) {
		struct plan p;

		if (plan_build(&p, m, r, 2, 1, pp, s, err))
			T_FAIL("pp %u stage %u: %s", pp, s, err);
		T_EQ_INT(p.layer_begin, s * 32 / pp);
		T_EQ_INT(p.layer_end, (s + 1) * 32 / pp);
		for (uint32_t i = 0; i < p.ntensors; i++) {
			const char *n = p.t[i].name;

			if (p.t[i].model_idx == UINT32_MAX)
				continue;   /* a view */
			seen[p.t[i].model_idx]++;
			if (!strcmp(n, "model.embed_tokens.weight"))
				T_EQ_INT(s, 0);
			if (!strcmp(n, "lm_head.weight") || !strcmp(n, "model.norm.weight"))
				T_EQ_INT(s, pp - 1);
		}
		plan_free(&p);
	}
	for (uint32_t i = 0; i < m->ntensors; i++)
		if (seen[i] != 1)
			T_FAIL("pp %u: tensor %s is in %u stages", pp, m->tensors[i].name,
			       seen[i]);
	free(seen);
	printf("pp %u: every tensor in exactly one stage\n", pp);
}

int main(void)
{
	char dir[] = "/tmp/wct_plan.XXXXXX", path[256], cmd[300];
	char err[BASE_ERR_LEN];
	struct plan_rules r;
	struct model m;

	T_ASSERT(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/llama-8b", dir);
	synth_wcgen_headers("llama-8b", path);
	if (model_open(&m, path, err))
		T_FAIL("%s", err);
	T_EQ_INT(m.ntensors, 291);
	T_EQ_INT(m.nshards, 4);
	T_OK(plan_rules_preset(&r, m.cfg.arch, err));
	check_tp(&m, &r, 2);
	check_tp(&m, &r, 4);
	check_tp(&m, &r, 8);
	check_pp(&m, &r, 2);
	check_pp(&m, &r, 4);
	plan_rules_free(&r);
	model_close(&m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	T_EQ_INT(system(cmd), 0);
	return 0;
}
