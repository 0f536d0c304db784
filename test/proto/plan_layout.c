/* SPDX-License-Identifier: MIT */
/*
 * The layouts on synthetic checkpoints (test/lib/synth_model.h): head-aware
 * attention with KV replication, vocabulary padding, fused views and tied
 * aliases (llama family, Qwen2 biases); Phi-3's fused checkpoint; block FP8
 * scales; MoE experts by tp and by ep (Qwen3-MoE, Mixtral), MLA
 * (DeepSeek-V3). For every tp the ranks serve each checkpoint byte exactly
 * as often as the rules say (test/lib/plan_check.h), and every refusal names
 * the tensor and the sizes.
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

static char top[] = "/tmp/wct_plo.XXXXXX";
static char err[BASE_ERR_LEN];

static const struct plan_tensor *find(const struct plan *p, const char *name)
{
	long i = plan_find(p, name);

	return i < 0 ? NULL : &p->t[i];
}

static void open_model(struct model *m, struct plan_rules *r, const char *dir)
{
	if (model_open(m, dir, err))
		T_FAIL("%s", err);
	if (plan_rules_preset(r, m->cfg.arch, err))
		T_FAIL("%s", err);
}

static int build(struct plan *p, const struct model *m,
		 const struct plan_rules *r, uint32_t tp, uint32_t rank,
		 uint32_t ep, uint32_t ep_rank, int32_t vpad)
{
	struct plan_params pp = {
		.tp_size = tp, .tp_rank = rank, .pp_size = 1, .pp_rank = 0,
		.ep_size = ep, .ep_rank = ep_rank, .vocab_pad = vpad,
	};
	int ret = plan_build_params(p, m, r, &pp, err);

	if (!ret)
		T_OK(plan_pack(p, 1u << 20, err));
	return ret;
}

/* Llama-style: 4 heads, 2 KV heads, head_dim 32, hidden 128, vocab 515. */
static void write_llama(const char *dir, const char *arch, bool bias,
			bool tied)
{
	static struct synth s;
	char cfg[1024];

	s.n = 0;
	synth_add(&s, "BF16", 2, 2, 515, 128, 0, "model.embed_tokens.weight");
	if (!tied)
		synth_add(&s, "BF16", 2, 2, 515, 128, 0, "lm_head.weight");
	synth_add(&s, "BF16", 2, 1, 128, 0, 0, "model.norm.weight");
	for (int l = 0; l < 2; l++) {
		synth_add(&s, "BF16", 2, 2, 128, 128, 0, "model.layers.%d.self_attn.q_proj.weight", l);
		synth_add(&s, "BF16", 2, 2, 64, 128, 0, "model.layers.%d.self_attn.k_proj.weight", l);
		synth_add(&s, "BF16", 2, 2, 64, 128, 0, "model.layers.%d.self_attn.v_proj.weight", l);
		if (bias) {
			synth_add(&s, "BF16", 2, 1, 128, 0, 0, "model.layers.%d.self_attn.q_proj.bias", l);
			synth_add(&s, "BF16", 2, 1, 64, 0, 0, "model.layers.%d.self_attn.k_proj.bias", l);
			synth_add(&s, "BF16", 2, 1, 64, 0, 0, "model.layers.%d.self_attn.v_proj.bias", l);
		}
		synth_add(&s, "BF16", 2, 2, 128, 128, 0, "model.layers.%d.self_attn.o_proj.weight", l);
		synth_add(&s, "BF16", 2, 2, 384, 128, 0, "model.layers.%d.mlp.gate_proj.weight", l);
		synth_add(&s, "BF16", 2, 2, 384, 128, 0, "model.layers.%d.mlp.up_proj.weight", l);
		synth_add(&s, "BF16", 2, 2, 128, 384, 0, "model.layers.%d.mlp.down_proj.weight", l);
		synth_add(&s, "BF16", 2, 1, 128, 0, 0, "model.layers.%d.input_layernorm.weight", l);
	}
	snprintf(cfg, sizeof(cfg),
		 "{\"architectures\": [\"%s\"], \"torch_dtype\": \"bfloat16\", \"hidden_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 515, \"tie_word_embeddings\": %s}",
		 arch, tied ? "true" : "false");
	synth_write(&s, dir, cfg);
}

/* How often a tensor's bytes are served across tp ranks. */
static uint64_t mult_of(const struct plan *p0, uint32_t i, const char *name,
			uint32_t tp)
{
	if (p0->t[i].split == PLAN_REPLICATE)
		return tp;
	if (tp > 2 && (strstr(name, "k_proj") || strstr(name, "v_proj")))
		return tp / 2;  /* 2 KV heads */
	return 1;
}

static void check_llama(void)
{
	char dir[300];
	struct plan p[8];
	struct plan_rules r;
	struct model m;

	snprintf(dir, sizeof(dir), "%s/qwen2", top);
	write_llama(dir, "Qwen2ForCausalLM", true, false);
	open_model(&m, &r, dir);
	for (uint32_t tp = 1; tp <= 4; tp *= 2) {
		uint64_t P = 576 / tp;

		for (uint32_t k = 0; k < tp; k++) {
			uint64_t a = k * P < 515 ? k * P : 515;
			uint64_t b = (k + 1) * P < 515 ? (k + 1) * P : 515;
			const struct plan_tensor *e, *q, *kk, *v, *f;

			if (build(&p[k], &m, &r, tp, k, 1, 0, -1))
				T_FAIL("tp %u rank %u: %s", tp, k, err);
			/* checkpoint names, then per layer qkv weight and bias
			 * and gate_up */
			T_EQ_INT(p[k].ntensors, m.ntensors + 2 * 3);
			/* vocabulary padded to 576, P rows per rank */
			e = find(&p[k], "lm_head.weight");
			T_EQ_U64(e->shape[0], b - a);
			T_EQ_U64(e->padded_rows, P);
			T_EQ_U64(e->alloc, P * 128 * 2);
			T_EQ_U64(e->size, (b - a) * 128 * 2);
			T_EQ_U64(find(&p[k], "model.embed_tokens.weight")->padded_rows, P);
			/* qkv_proj = [q_r; k_r; v_r] back to back */
			q = find(&p[k], "model.layers.1.self_attn.q_proj.weight");
			kk = find(&p[k], "model.layers.1.self_attn.k_proj.weight");
			v = find(&p[k], "model.layers.1.self_attn.v_proj.weight");
			f = find(&p[k], "model.layers.1.self_attn.qkv_proj.weight");
			T_EQ_U64(q->shape[0], 128 / tp);
			T_EQ_U64(kk->shape[0], tp <= 2 ? 64 / tp : 32);
			T_EQ_U64(f->shape[0], q->shape[0] + 2 * kk->shape[0]);
			T_EQ_U64(f->shape[1], 128);
			T_EQ_INT(f->flags, PLAN_T_VIEW);
			T_EQ_U64(f->pool_off, q->pool_off);
			T_EQ_U64(kk->pool_off, q->pool_off + q->size);
			T_EQ_U64(v->pool_off, kk->pool_off + kk->size);
			/* KV head of rank k at tp 4: k / 2 */
			if (tp == 4)
				T_EQ_U64(p[k].pc[kk->piece0].file_off,
					 m.tensors[kk->model_idx].t->file_off +
					 (k / 2) * 32 * 128 * 2);
			f = find(&p[k], "model.layers.0.self_attn.qkv_proj.bias");
			T_ASSERT(f);
			T_EQ_U64(f->shape[0], 128 / tp + 2 * (tp <= 2 ? 64 / tp : 32));
			f = find(&p[k], "model.layers.0.mlp.gate_up_proj.weight");
			T_EQ_U64(f->shape[0], 2 * 384 / tp);
			T_ASSERT(!find(&p[k], "model.layers.0.self_attn.qkv_proj.weight_scale_inv"));
		}
		for (uint32_t i = 0; i < m.ntensors; i++)
			pc_check_cover(p, tp, &m, i,
				       mult_of(&p[0], i, m.tensors[i].name, tp));
		for (uint32_t k = 0; k < tp; k++)
			plan_free(&p[k]);
		printf("qwen2-like tp %u: every byte where the rules put it\n", tp);
	}
	/* tp 3: the 2 KV heads neither divide nor are divided by it */
	T_EQ_INT(build(&p[0], &m, &r, 3, 0, 1, 0, -1), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "tensor 'model.layers.0.self_attn.k_proj.bias' (shape [64]): 2 heads (num_key_value_heads) do not split over tp size 3 (KV heads are replicated only when tp is a multiple of them)");
	/* tp 8: 4 query heads cannot be split 8 ways (engines refuse it) */
	T_EQ_INT(build(&p[0], &m, &r, 8, 0, 1, 0, -1), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "tensor 'model.layers.0.self_attn.o_proj.weight' (shape [128, 128]): 4 heads (num_attention_heads) do not split over tp size 8; use a tp size that divides them");
	/* padding off: 515 rows do not split over 2 */
	T_EQ_INT(build(&p[0], &m, &r, 2, 0, 1, 0, 0), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "tensor 'lm_head.weight' (shape [515, 128]): 515 vocabulary rows do not split over tp size 2 and padding is off (vocab_pad 0); turn padding on (wcd --vocab-pad 64");
	/* another multiple: 515 -> 520 at tp 2, 260 rows per rank */
	T_OK(build(&p[0], &m, &r, 2, 1, 1, 0, 8));
	T_EQ_U64(find(&p[0], "lm_head.weight")->padded_rows, 260);
	T_EQ_U64(find(&p[0], "lm_head.weight")->shape[0], 255);
	plan_free(&p[0]);
	plan_rules_free(&r);
	model_close(&m);
}

static void check_tied(void)
{
	const struct plan_tensor *e, *l;
	char dir[300];
	struct plan_rules r;
	struct plan p;
	struct model m;

	snprintf(dir, sizeof(dir), "%s/tied", top);
	write_llama(dir, "LlamaForCausalLM", false, true);
	open_model(&m, &r, dir);
	for (uint32_t tp = 1; tp <= 2; tp++) {
		T_OK(build(&p, &m, &r, tp, tp - 1, 1, 0, -1));
		e = find(&p, "model.embed_tokens.weight");
		l = find(&p, "lm_head.weight");
		T_ASSERT(l);
		T_EQ_INT(l->flags, PLAN_T_VIEW | PLAN_T_ALIAS);
		T_EQ_INT(l->npieces, 0);
		T_EQ_INT(l->pool, e->pool);
		T_EQ_U64(l->pool_off, e->pool_off);
		T_EQ_U64(l->size, e->size);
		T_EQ_U64(l->padded_rows, e->padded_rows);
		/* stored once: the alias adds no bytes */
		T_EQ_U64(p.total_bytes, p.read_bytes + (e->alloc - e->size));
		plan_free(&p);
	}
	plan_rules_free(&r);
	model_close(&m);
}

/* Phi-3: fused checkpoint tensors, split per part, fused again. */
static void check_phi3(void)
{
	static struct synth s;
	const struct plan_tensor *t;
	char dir[300];
	struct plan p[4];
	struct plan_rules r;
	struct model m;

	s.n = 0;
	synth_add(&s, "BF16", 2, 2, 128, 64, 0, "model.embed_tokens.weight");
	synth_add(&s, "BF16", 2, 2, 128, 64, 0, "lm_head.weight");
	/* 4 q heads + 2 + 2 KV heads of 16 */
	synth_add(&s, "BF16", 2, 2, 128, 64, 0, "model.layers.0.self_attn.qkv_proj.weight");
	synth_add(&s, "BF16", 2, 2, 64, 64, 0, "model.layers.0.self_attn.o_proj.weight");
	synth_add(&s, "BF16", 2, 2, 256, 64, 0, "model.layers.0.mlp.gate_up_proj.weight");
	synth_add(&s, "BF16", 2, 2, 64, 128, 0, "model.layers.0.mlp.down_proj.weight");
	snprintf(dir, sizeof(dir), "%s/phi3", top);
	synth_write(&s, dir, "{\"architectures\": [\"Phi3ForCausalLM\"], \"num_attention_heads\": 4, \"num_key_value_heads\": 2}");
	open_model(&m, &r, dir);
	for (uint32_t tp = 1; tp <= 4; tp *= 2) {
		for (uint32_t k = 0; k < tp; k++) {
			T_OK(build(&p[k], &m, &r, tp, k, 1, 0, -1));
			t = find(&p[k], "model.layers.0.self_attn.qkv_proj.weight");
			/* [q_r; k_r; v_r]: one piece each (tp 1: one) */
			T_EQ_INT(t->npieces, tp == 1 ? 1 : 3);
			T_EQ_U64(t->shape[0], 64 / tp + 2 * (tp <= 2 ? 32 / tp : 16));
			if (tp == 4) {
				/* q head k, KV head k / 2 (rows 64 + 16 (k/2)) */
				T_EQ_U64(p[k].pc[t->piece0].file_off,
					 m.tensors[t->model_idx].t->file_off + k * 16 * 128);
				T_EQ_U64(p[k].pc[t->piece0 + 1].file_off,
					 m.tensors[t->model_idx].t->file_off +
					 (64 + k / 2 * 16) * 128);
				T_EQ_U64(p[k].pc[t->piece0 + 2].file_off,
					 m.tensors[t->model_idx].t->file_off +
					 (96 + k / 2 * 16) * 128);
			}
			t = find(&p[k], "model.layers.0.mlp.gate_up_proj.weight");
			T_EQ_INT(t->npieces, tp == 1 ? 1 : 2);
			T_EQ_U64(t->shape[0], 256 / tp);
		}
		for (uint32_t i = 0; i < m.ntensors; i++) {
			const char *n = m.tensors[i].name;
			uint64_t mult = p[0].t[i].split == PLAN_REPLICATE ? tp : 1;

			if (strstr(n, "qkv_proj"))
				continue;  /* q once, KV twice at tp 4: below */
			pc_check_cover(p, tp, &m, i, mult);
		}
		for (uint32_t k = 0; k < tp; k++)
			plan_free(&p[k]);
	}
	plan_rules_free(&r);
	model_close(&m);
	printf("phi3: fused checkpoint tensors split per part\n");
}

static void check_fp8(void)
{
	static struct synth s;
	static const char layout[] = "a.w dim0\nb.c dim1\n* replicate\n";
	char dir[300];
	struct plan p[2];
	struct plan_rules r = { 0 };
	struct model m;
	const struct plan_tensor *t;

	s.n = 0;
	synth_add(&s, "F8_E4M3", 1, 2, 512, 256, 0, "a.w");
	synth_add(&s, "F32", 4, 2, 4, 2, 0, "a.w_scale_inv");
	synth_add(&s, "F8_E4M3", 1, 2, 256, 512, 0, "b.c");
	synth_add(&s, "F32", 4, 2, 2, 4, 0, "b.c_scale_inv");
	snprintf(dir, sizeof(dir), "%s/fp8", top);
	synth_write(&s, dir, "{\"architectures\": [\"X\"], \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}");
	if (model_open(&m, dir, err))
		T_FAIL("%s", err);
	T_OK(plan_rules_parse(&r, layout, strlen(layout), "fp8.layout", err));
	for (uint32_t k = 0; k < 2; k++) {
		T_OK(build(&p[k], &m, &r, 2, k, 1, 0, -1));
		t = find(&p[k], "a.w_scale_inv");
		T_EQ_INT(t->split, PLAN_DIM0);
		T_EQ_U64(t->shape[0], 2);
		T_EQ_U64(p[k].pc[t->piece0].file_off,
			 m.tensors[t->model_idx].t->file_off + k * 2 * 2 * 4);
		t = find(&p[k], "b.c_scale_inv");
		T_EQ_INT(t->split, PLAN_DIM1);
		T_EQ_U64(t->shape[0], 2);
		T_EQ_U64(t->shape[1], 2);
	}
	for (uint32_t i = 0; i < m.ntensors; i++)
		pc_check_cover(p, 2, &m, i, 1);
	plan_free(&p[0]);
	plan_free(&p[1]);
	/* tp 8: 64 rows per rank, half a block */
	T_EQ_INT(build(&p[0], &m, &r, 8, 1, 1, 0, -1), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "tensor 'a.w_scale_inv': its weight's slice [64, 128) of dim 0 (size 512) is not aligned to the FP8 block of 128");
	plan_rules_free(&r);
	model_close(&m);
}

/* Qwen3-MoE: 8 experts of intermediate 64, hidden 32. */
static void check_moe(void)
{
	static struct synth s;
	const struct plan_tensor *t;
	char dir[300];
	struct plan p[4];
	struct plan_rules r;
	struct model m;

	s.n = 0;
	synth_add(&s, "BF16", 2, 2, 64, 32, 0, "model.embed_tokens.weight");
	synth_add(&s, "BF16", 2, 2, 64, 32, 0, "lm_head.weight");
	synth_add(&s, "BF16", 2, 2, 32, 32, 0, "model.layers.0.self_attn.q_proj.weight");
	synth_add(&s, "BF16", 2, 2, 16, 32, 0, "model.layers.0.self_attn.k_proj.weight");
	synth_add(&s, "BF16", 2, 2, 16, 32, 0, "model.layers.0.self_attn.v_proj.weight");
	synth_add(&s, "BF16", 2, 2, 32, 32, 0, "model.layers.0.self_attn.o_proj.weight");
	synth_add(&s, "BF16", 2, 1, 8, 0, 0, "model.layers.0.self_attn.q_norm.weight");
	synth_add(&s, "BF16", 2, 2, 8, 32, 0, "model.layers.0.mlp.gate.weight");
	for (int e = 0; e < 8; e++) {
		synth_add(&s, "BF16", 2, 2, 64, 32, 0, "model.layers.0.mlp.experts.%d.gate_proj.weight", e);
		synth_add(&s, "BF16", 2, 2, 64, 32, 0, "model.layers.0.mlp.experts.%d.up_proj.weight", e);
		synth_add(&s, "BF16", 2, 2, 32, 64, 0, "model.layers.0.mlp.experts.%d.down_proj.weight", e);
	}
	snprintf(dir, sizeof(dir), "%s/qwen3moe", top);
	synth_write(&s, dir, "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_experts\": 8}");
	open_model(&m, &r, dir);
	/* tp: every expert, its intermediate split */
	for (uint32_t tp = 1; tp <= 4; tp *= 2) {
		for (uint32_t k = 0; k < tp; k++) {
			T_OK(build(&p[k], &m, &r, tp, k, 1, 0, -1));
			t = find(&p[k], "model.layers.0.mlp.experts.w13_weight");
			T_ASSERT(t);
			T_EQ_INT(t->ndim, 3);
			T_EQ_U64(t->shape[0], 8);
			T_EQ_U64(t->shape[1], 2 * 64 / tp);
			T_EQ_U64(t->shape[2], 32);
			/* per expert [w1_r; w3_r]: expert 1's gate follows
			 * expert 0's up */
			T_EQ_U64(find(&p[k], "model.layers.0.mlp.experts.1.gate_proj.weight")->pool_off,
				 find(&p[k], "model.layers.0.mlp.experts.0.up_proj.weight")->pool_off +
				 64 / tp * 32 * 2);
			T_EQ_U64(t->pool_off, find(&p[k], "model.layers.0.mlp.experts.0.gate_proj.weight")->pool_off);
			t = find(&p[k], "model.layers.0.mlp.experts.w2_weight");
			T_EQ_U64(t->shape[0], 8);
			T_EQ_U64(t->shape[1], 32);
			T_EQ_U64(t->shape[2], 64 / tp);
			T_EQ_INT(find(&p[k], "model.layers.0.mlp.gate.weight")->split, PLAN_REPLICATE);
		}
		for (uint32_t i = 0; i < m.ntensors; i++)
			pc_check_cover(p, tp, &m, i,
				       mult_of(&p[0], i, m.tensors[i].name, tp));
		for (uint32_t k = 0; k < tp; k++)
			plan_free(&p[k]);
	}
	/* ep 3 of 8 experts: 3, 3, 2 (vLLM's linear map), each whole */
	for (uint32_t k = 0; k < 3; k++) {
		static const uint32_t first[] = { 0, 3, 6 }, n[] = { 3, 3, 2 };
		char name[128];

		T_OK(build(&p[k], &m, &r, 1, 0, 3, k, -1));
		T_EQ_INT(p[k].expert_begin, first[k]);
		T_EQ_INT(p[k].expert_end, first[k] + n[k]);
		t = find(&p[k], "model.layers.0.mlp.experts.w13_weight");
		T_EQ_U64(t->shape[0], n[k]);
		T_EQ_U64(t->shape[1], 128);
		for (uint32_t e = 0; e < 8; e++) {
			snprintf(name, sizeof(name), "model.layers.0.mlp.experts.%u.down_proj.weight", e);
			T_EQ_INT(find(&p[k], name) != NULL,
				 e >= first[k] && e < first[k] + n[k]);
		}
	}
	for (uint32_t i = 0; i < m.ntensors; i++)
		pc_check_cover(p, 3, &m, i,
			       strstr(m.tensors[i].name, "experts.") ? 1 : 3);
	for (uint32_t k = 0; k < 3; k++)
		plan_free(&p[k]);
	/* more ep ranks than experts */
	T_EQ_INT(build(&p[0], &m, &r, 1, 0, 16, 3, -1), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "ep size 16 is more than the 8 experts (num_experts)");
	plan_rules_free(&r);
	model_close(&m);
	printf("qwen3-moe: experts by tp 1, 2, 4 and by ep 3\n");
}

static void check_refusals(void)
{
	static struct synth s;
	static const char bad_heads[] = "x.w dim0 heads=num_attention_heads\n";
	char dir[300];
	struct plan_rules r = { 0 };
	struct plan p;
	struct model m;

	s.n = 0;
	synth_add(&s, "BF16", 2, 2, 130, 8, 0, "x.w");
	snprintf(dir, sizeof(dir), "%s/refuse", top);
	synth_write(&s, dir, "{\"architectures\": [\"GPT2LMHeadModel\"], \"num_attention_heads\": 4}");
	if (model_open(&m, dir, err))
		T_FAIL("%s", err);
	T_EQ_INT(plan_rules_preset(&r, m.cfg.arch, err), -ENOTSUP);
	T_HAS(err, "no sharding preset for architecture 'GPT2LMHeadModel'");
	T_HAS(err, "LlamaForCausalLM");
	T_OK(plan_rules_parse(&r, bad_heads, strlen(bad_heads), "h.layout", err));
	T_EQ_INT(build(&p, &m, &r, 2, 0, 1, 0, -1), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "tensor 'x.w' (shape [130, 8]): dim 0 of size 130 is not 4 equal heads/parts");
	T_EQ_INT(build(&p, &m, &r, 1, 0, 2, 0, -1), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "ep size 2 but the layout names no expert count");
	plan_rules_free(&r);
	/* a layout's syntax errors name file, line and text */
	T_EQ_INT(plan_rules_parse(&r, "a dim0 heads=\n", 14, "s.layout", err), -EINVAL);
	T_HAS(err, "s.layout:1:");
	T_EQ_INT(plan_rules_parse(&r, "a dim1 pad\n", 11, "s.layout", err), -EINVAL);
	T_HAS(err, "dim1 takes heads= or kv_heads= but no parts or pad");
	T_EQ_INT(plan_rules_parse(&r, "view x = a*.w\n", 14, "s.layout", err), -EINVAL);
	T_HAS(err, "take {L}/{E} captures, not wildcards");
	T_EQ_INT(plan_rules_parse(&r, "stack x = a.w\n", 14, "s.layout", err), -EINVAL);
	T_HAS(err, "has no {E}");
	T_EQ_INT(plan_rules_parse(&r, "a.{E} dim0 expert\nb dim0 expert\n", 31, "s.layout", err), -EINVAL);
	T_HAS(err, "s.layout:2:");
	T_HAS(err, "expert needs {E}");
	plan_rules_free(&r);
	/* no heads in config */
	model_close(&m);
	synth_write(&s, dir, "{\"architectures\": [\"GPT2LMHeadModel\"]}");
	if (model_open(&m, dir, err))
		T_FAIL("%s", err);
	T_OK(plan_rules_parse(&r, bad_heads, strlen(bad_heads), "h.layout", err));
	T_EQ_INT(build(&p, &m, &r, 2, 0, 1, 0, -1), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "tensor 'x.w' is split by heads, but config.json has no positive num_attention_heads");
	plan_rules_free(&r);
	model_close(&m);
}

/* Every preset parses, and the hash tells them apart. */
static void check_presets(void)
{
	static const char *const archs[] = {
		"LlamaForCausalLM", "Qwen3ForCausalLM", "Gemma2ForCausalLM",
		"Gemma3ForCausalLM", "Phi3ForCausalLM", "MixtralForCausalLM",
		"Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM",
	};
	uint8_t h[8][BASE_HASH_LEN];

	for (size_t i = 0; i < 8; i++) {
		struct plan_rules r;

		if (plan_rules_preset(&r, archs[i], err))
			T_FAIL("%s: %s", archs[i], err);
		memcpy(h[i], r.hash, BASE_HASH_LEN);
		plan_rules_free(&r);
	}
	T_ASSERT(!memcmp(h[0], h[1], BASE_HASH_LEN));     /* one file */
	T_ASSERT(memcmp(h[0], h[2], BASE_HASH_LEN));
	T_ASSERT(memcmp(h[5], h[6], BASE_HASH_LEN));
}

int main(void)
{
	char cmd[300];

	T_ASSERT(mkdtemp(top));
	check_presets();
	check_llama();
	check_tied();
	check_phi3();
	check_fp8();
	check_moe();
	check_refusals();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	T_EQ_INT(system(cmd), 0);
	return 0;
}
