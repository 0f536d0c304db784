/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the first byte picks tp (1..8) and pp (1..4) sizes, the
 * rest is a safetensors file. Whatever parses is wrapped as a one-shard
 * model and planned for every rank with the llama preset; each rank's ranges
 * must stay inside their tensor, a replicated tensor is read whole, the
 * ranks' slices of a split tensor add up to its size exactly, and packing
 * keeps tensors inside their pools.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model.h"
#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const struct model_tensor *)a)->name,
		      ((const struct model_tensor *)b)->name);
}

static void check_rank(const struct model *m, const struct plan *p,
		       uint64_t *sum)
{
	char err[BASE_ERR_LEN];
	struct plan q = *p;

	for (uint32_t i = 0; i < p->npieces; i++) {
		const struct plan_piece *pc = &p->pc[i];
		const struct plan_tensor *t = &p->t[pc->entry];
		const struct st_tensor *s = m->tensors[t->model_idx].t;
		uint64_t last;

		if (t->model_idx == UINT32_MAX || pc->width * pc->height != pc->size ||
		    pc->width > pc->src_pitch || pc->dst + pc->size > t->size)
			abort();
		last = pc->height ? pc->file_off + (pc->height - 1) * pc->src_pitch +
					    pc->width : pc->file_off;
		if (pc->size && (pc->file_off < s->file_off ||
				 last > s->file_off + s->nbytes))
			abort();
		if (t->split == PLAN_REPLICATE && pc->size != s->nbytes)
			abort();
		if (t->split != PLAN_REPLICATE)
			sum[t->model_idx] += pc->size;
	}
	q.t = malloc((p->ntensors ? p->ntensors : 1) * sizeof(*q.t));
	if (!q.t)
		return;
	memcpy(q.t, p->t, p->ntensors * sizeof(*q.t));
	if (!plan_pack(&q, 1u << 12, err)) {
		for (uint32_t i = 0; i < q.ntensors; i++)
			if (q.t[i].pool >= q.npools ||
			    (q.t[i].group < 0 && q.t[i].pool_off % PLAN_POOL_ALIGN) ||
			    q.t[i].pool_off + q.t[i].alloc > q.pool_size[q.t[i].pool])
				abort();
	}
	free(q.t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[BASE_ERR_LEN];
	struct model_shard shard = { 0 };
	struct plan_rules r;
	struct model m = { 0 };
	uint32_t tp, pp;
	uint64_t *sum;

	if (size < 1)
		return 0;
	tp = 1 + (data[0] & 7);
	pp = 1 + ((data[0] >> 3) & 3);
	if (st_parse(&shard.st, data + 1, size - 1, size - 1, "fuzz", err))
		return 0;
	shard.file = (char *)"fuzz.safetensors";
	m.path = (char *)"/fuzz";
	m.shards = &shard;
	m.nshards = 1;
	m.ntensors = shard.st.ntensors;
	m.tensors = calloc(m.ntensors ? m.ntensors : 1, sizeof(*m.tensors));
	sum = calloc(m.ntensors ? m.ntensors : 1, sizeof(*sum));
	if (!m.tensors || !sum || plan_rules_preset(&r, "LlamaForCausalLM", err))
		abort();
	for (uint32_t i = 0; i < m.ntensors; i++) {
		m.tensors[i].t = &shard.st.tensors[i];
		m.tensors[i].name = shard.st.tensors[i].name;
	}
	qsort(m.tensors, m.ntensors, sizeof(*m.tensors), cmp_tensor);
	for (uint32_t s = 0; s < pp; s++) {
		memset(sum, 0, m.ntensors * sizeof(*sum));
		for (uint32_t k = 0; k < tp; k++) {
			struct plan p;

			if (plan_build(&p, &m, &r, tp, k, pp, s, err))
				goto out;
			check_rank(&m, &p, sum);
			plan_free(&p);
		}
		/* the ranks' slices of a split tensor add up to it exactly */
		for (uint32_t i = 0; i < m.ntensors; i++)
			if (sum[i] && sum[i] != m.tensors[i].t->nbytes)
				abort();
	}
out:
	plan_rules_free(&r);
	free(sum);
	free(m.tensors);
	st_file_free(&shard.st);
	return 0;
}
