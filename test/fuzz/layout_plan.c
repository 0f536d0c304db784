/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a layout file's text over a small fixed model (issue
 * 26, item 4: layouts that broke the daemon). The first byte picks tp
 * (1..4), ep (1..2) and the vocab_pad knob; the rest is the layout. What
 * parses is planned for every rank and packed; then
 *  - every manifest name is listed once (a view named like a checkpoint
 *    tensor or like another view made every attach fail);
 *  - a view covers exactly its group's bytes, back to back, inside its
 *    pool, and an alias exactly its target's (a part named twice made a
 *    view four times its group: wcd read past the pool);
 *  - every entry lies inside its pool, every piece inside its tensor and
 *    its source range.
 * The model: a llama-like two layers (4 heads, 2 KV heads) with four
 * experts of three matrices each, tied embeddings, BF16. Planning is
 * linear in the layout (the glob matcher is: a rule of many stars ran for
 * minutes before): an input that takes more than INPUT_CPU_S seconds of
 * CPU (ITIMER_PROF, so a loaded machine does not count) aborts, long
 * before libFuzzer's own -timeout (1200 s) would. Seeds:
 * test/fuzz/corpus/layout_plan (the cases, the presets'
 * statements); regress/layout_plan: inputs that broke the old code.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* CPU seconds one input may take: a plan of this model takes about a
 * millisecond (under ASan and UBSan). */
#define INPUT_CPU_S 5

static const char config[] =
	"{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2,"
	" \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
	" \"num_local_experts\": 4, \"hidden_size\": 16, \"vocab_size\": 70,"
	" \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\"}";

static struct model_shard shard;
static struct model m;

/* Appends tensor NAME of shape [d0] or [d0, d1] (BF16) at *off. */
static size_t add(char *h, size_t n, size_t cap, uint64_t *off,
		  const char *name, uint64_t d0, uint64_t d1)
{
	uint64_t bytes = d0 * (d1 ? d1 : 1) * 2;
	char shape[64];

	if (d1)
		snprintf(shape, sizeof(shape), "%llu, %llu",
			 (unsigned long long)d0, (unsigned long long)d1);
	else
		snprintf(shape, sizeof(shape), "%llu", (unsigned long long)d0);
	n += (size_t)snprintf(h + n, cap - n,
			      "%s\"%s\": {\"dtype\": \"BF16\", \"shape\": [%s], \"data_offsets\": [%llu, %llu]}",
			      n > 9 ? ", " : "", name, shape,
			      (unsigned long long)*off,
			      (unsigned long long)(*off + bytes));
	*off += bytes;
	return n;
}

static int cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const struct model_tensor *)a)->name,
		      ((const struct model_tensor *)b)->name);
}

/* The model, made once. */
static void model_make(void)
{
	static const char *const lin[][2] = {
		{ "self_attn.q_proj.weight", "16" }, { "self_attn.k_proj.weight", "8" },
		{ "self_attn.v_proj.weight", "8" }, { "self_attn.o_proj.weight", "16" },
		{ "mlp.gate_proj.weight", "32" }, { "mlp.up_proj.weight", "32" },
	};
	static char h[16384];
	char err[BASE_ERR_LEN], name[128];
	uint64_t off = 0, hlen;
	size_t n = 8;

	n += (size_t)snprintf(h + n, sizeof(h) - n, "{");
	n = add(h, n, sizeof(h), &off, "model.embed_tokens.weight", 70, 16);
	n = add(h, n, sizeof(h), &off, "model.norm.weight", 16, 0);
	for (int l = 0; l < 2; l++) {
		for (size_t k = 0; k < sizeof(lin) / sizeof(lin[0]); k++) {
			snprintf(name, sizeof(name), "model.layers.%d.%s", l, lin[k][0]);
			n = add(h, n, sizeof(h), &off, name,
				(uint64_t)atoi(lin[k][1]), 16);
		}
		snprintf(name, sizeof(name), "model.layers.%d.mlp.down_proj.weight", l);
		n = add(h, n, sizeof(h), &off, name, 16, 32);
		snprintf(name, sizeof(name), "model.layers.%d.input_layernorm.weight", l);
		n = add(h, n, sizeof(h), &off, name, 16, 0);
		for (int e = 0; e < 4; e++) {
			snprintf(name, sizeof(name), "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", l, e);
			n = add(h, n, sizeof(h), &off, name, 8, 16);
			snprintf(name, sizeof(name), "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", l, e);
			n = add(h, n, sizeof(h), &off, name, 16, 8);
			snprintf(name, sizeof(name), "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", l, e);
			n = add(h, n, sizeof(h), &off, name, 8, 16);
		}
	}
	n += (size_t)snprintf(h + n, sizeof(h) - n, "}");
	hlen = n - 8;
	for (int i = 0; i < 8; i++)
		h[i] = (char)(hlen >> (8 * i));
	if (st_parse(&shard.st, h, n, n + off, "fuzz.safetensors", err) ||
	    model_config_parse(&m.cfg, config, strlen(config), "config.json", err)) {
		fprintf(stderr, "layout_plan: the fixed model: %s\n", err);
		abort();
	}
	shard.file = (char *)"fuzz.safetensors";
	m.path = (char *)"/fuzz";
	m.shards = &shard;
	m.nshards = 1;
	m.ntensors = shard.st.ntensors;
	m.tensors = calloc(m.ntensors, sizeof(*m.tensors));
	if (!m.tensors)
		abort();
	for (uint32_t i = 0; i < m.ntensors; i++) {
		m.tensors[i].t = &shard.st.tensors[i];
		m.tensors[i].name = shard.st.tensors[i].name;
	}
	qsort(m.tensors, m.ntensors, sizeof(*m.tensors), cmp_tensor);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every name once in the manifest. */
static void check_names(const struct plan *p)
{
	const char **names = malloc((p->ntensors + 1) * sizeof(*names));

	if (!names)
		abort();
	for (uint32_t i = 0; i < p->ntensors; i++)
		names[i] = p->t[i].name;
	qsort(names, p->ntensors, sizeof(*names), cmp_name);
	for (uint32_t i = 1; i < p->ntensors; i++)
		if (!strcmp(names[i - 1], names[i])) {
			fprintf(stderr, "the manifest lists '%s' twice\n", names[i]);
			abort();
		}
	free(names);
}

/* Views cover their group exactly, aliases their target; every entry is
 * inside its pool; pieces inside their tensor and source. */
static void check_bytes(const struct plan *p)
{
	for (uint32_t i = 0; i < p->ntensors; i++) {
		const struct plan_tensor *t = &p->t[i];

		if (t->pool >= p->npools || t->pool_off + t->alloc > p->pool_size[t->pool] ||
		    t->size > t->alloc)
			abort();
		if (t->flags & PLAN_T_ALIAS) {
			const struct plan_tensor *x = &p->t[t->target];

			if (t->size != x->size || t->pool != x->pool ||
			    t->pool_off != x->pool_off)
				abort();
		} else if (t->flags & PLAN_T_VIEW) {
			const struct plan_tensor *f = &p->t[t->target];
			const struct plan_group *g;
			uint64_t at, sum = 0;

			if (f->group < 0 || (uint32_t)f->group >= p->ngroups)
				abort();
			g = &p->g[f->group];
			at = p->t[p->members[g->member0]].pool_off;
			for (uint32_t k = 0; k < g->n; k++) {
				const struct plan_tensor *x = &p->t[p->members[g->member0 + k]];

				if (x->pool != t->pool || x->pool_off != at + sum)
					abort();
				sum += x->alloc;
			}
			if (t->pool_off != at || t->size != sum) {
				fprintf(stderr, "view '%s' covers %llu bytes, its group %llu\n",
					t->name, (unsigned long long)t->size,
					(unsigned long long)sum);
				abort();
			}
		}
	}
	for (uint32_t i = 0; i < p->npieces; i++) {
		const struct plan_piece *pc = &p->pc[i];
		const struct plan_tensor *t = &p->t[pc->entry];
		const struct st_tensor *s;
		uint64_t last;

		if (t->model_idx >= m.ntensors || pc->width * pc->height != pc->size ||
		    pc->dst + pc->size > t->alloc)
			abort();
		s = m.tensors[t->model_idx].t;
		last = pc->height ? pc->file_off + (pc->height - 1) * pc->src_pitch +
					    pc->width : pc->file_off;
		if (pc->size && (pc->file_off < s->file_off ||
				 last > s->file_off + s->nbytes))
			abort();
	}
}

static void too_slow(int sig)
{
	static const char msg[] = "layout_plan: one input took more than 5 s of CPU: a parse or plan that is not linear\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		abort();
	abort();
}

/* Arms (or with 0 disarms) the CPU-time limit of one input. */
static void cpu_limit(int s)
{
	struct itimerval it = { .it_value = { .tv_sec = s } };

	setitimer(ITIMER_PROF, &it, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int32_t pads[4] = { -1, 0, 64, 7 };
	char err[BASE_ERR_LEN];
	struct plan_rules r = { 0 };
	uint32_t tp, ep;

	if (!m.tensors) {
		model_make();
		signal(SIGPROF, too_slow);
	}
	if (size < 1)
		return 0;
	cpu_limit(INPUT_CPU_S);
	tp = 1 + (data[0] & 3);
	ep = 1 + ((data[0] >> 2) & 1);
	if (plan_rules_parse(&r, data + 1, size - 1, "fuzz.layout", err)) {
		cpu_limit(0);
		return 0;
	}
	for (uint32_t k = 0; k < (tp > ep ? tp : ep); k++) {
		struct plan_params pp = {
			.tp_size = tp, .tp_rank = k % tp, .pp_size = 1,
			.ep_size = ep, .ep_rank = k % ep,
			.vocab_pad = pads[(data[0] >> 3) & 3],
		};
		struct plan p;

		if (plan_build_params(&p, &m, &r, &pp, err))
			break;
		check_names(&p);
		if (!plan_pack(&p, 1u << 12, err))
			check_bytes(&p);
		plan_free(&p);
	}
	plan_rules_free(&r);
	cpu_limit(0);
	return 0;
}
