/* SPDX-License-Identifier: MIT */
/*
 * Plan details on the tiny preset (hidden 256, kv 128, inter 688, vocab
 * 4096, 4 layers): the preset's splits and 2-D copy geometry, an uneven
 * split's error, rules files (override, syntax errors), unknown
 * architectures, bad ranks, tied embeddings under pp, pool packing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "plan.h"
#include "synth_model.h"
#include "t.h"

static const struct plan_tensor *find(const struct plan *p, const char *name)
{
	for (uint32_t i = 0; i < p->ntensors; i++)
		if (!strcmp(p->t[i].name, name))
			return &p->t[i];
	return NULL;
}

static void check_geometry(const struct model *m, const struct plan_rules *r)
{
	const struct model_tensor *o = model_find(m, "model.layers.1.self_attn.o_proj.weight");
	const struct model_tensor *k = model_find(m, "model.layers.1.self_attn.k_proj.weight");
	const struct plan_tensor *pt;
	const struct plan_piece *pc;
	char err[BASE_ERR_LEN];
	struct plan p;

	if (plan_build(&p, m, r, 4, 3, 1, 0, err))
		T_FAIL("%s", err);
	/* o_proj [256, 256] bf16, dim 1 by 4 heads, rank 3 of 4: columns
	 * 192..255 (head 3) */
	pt = find(&p, o->name);
	pc = &p.pc[pt->piece0];
	T_EQ_INT(pt->split, PLAN_DIM1);
	T_EQ_INT(pt->npieces, 1);
	T_EQ_U64(pc->width, 64 * 2);
	T_EQ_U64(pc->height, 256);
	T_EQ_U64(pc->src_pitch, 256 * 2);
	T_EQ_U64(pc->file_off, o->t->file_off + 3 * 64 * 2);
	T_EQ_U64(pt->shape[0], 256);
	T_EQ_U64(pt->shape[1], 64);
	/* k_proj [128, 256]: 2 KV heads of 64 rows at tp 4: replicated
	 * twice, rank 3 holds head 3 / 2 = 1, rows 64..127, one range */
	pt = find(&p, k->name);
	pc = &p.pc[pt->piece0];
	T_EQ_INT(pt->split, PLAN_DIM0);
	T_EQ_U64(pc->height, 1);
	T_EQ_U64(pc->width, 64 * 256 * 2);
	T_EQ_U64(pc->file_off, k->t->file_off + 64 * 256 * 2);
	T_EQ_U64(pt->shape[0], 64);
	/* the fused view: [q_3; k_1; v_1] rows, 64 + 64 + 64 */
	pt = find(&p, "model.layers.1.self_attn.qkv_proj.weight");
	T_ASSERT(pt);
	T_EQ_INT(pt->flags, PLAN_T_VIEW);
	T_EQ_U64(pt->shape[0], 192);
	T_EQ_U64(pt->shape[1], 256);
	T_EQ_U64(pt->size, 192 * 256 * 2);
	pt = find(&p, "model.layers.0.input_layernorm.weight");
	T_EQ_INT(pt->split, PLAN_REPLICATE);
	T_EQ_U64(pt->size, 512);
	T_EQ_INT(find(&p, "lm_head.weight")->split, PLAN_DIM0);
	T_EQ_INT(find(&p, "model.embed_tokens.weight")->split, PLAN_DIM0);
	T_EQ_INT(find(&p, "model.layers.0.mlp.down_proj.weight")->split, PLAN_DIM1);
	T_EQ_INT(find(&p, "model.layers.0.mlp.up_proj.weight")->split, PLAN_DIM0);
	plan_free(&p);
}

static void check_errors(const struct model *m, struct plan_rules *r)
{
	static const char rules[] =
		"# replicate the vocabulary tensors\n"
		"lm_head.weight replicate\n"
		"\n"
		"model.embed_tokens.weight   replicate  # trailing comment\n";
	char err[BASE_ERR_LEN];
	struct plan p;
	uint8_t before[BASE_HASH_LEN];

	/* tp 3 splits neither the heads nor lm_head [4096, 256], which
	 * comes first by name: the heads are named */
	T_EQ_INT(plan_build(&p, m, r, 3, 0, 1, 0, err), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "tensor 'model.layers.0.self_attn.k_proj.weight' (shape [128, 256]): 2 heads (num_key_value_heads) do not split over tp size 3");
	T_HAS(err, m->path);
	/* A rules file that replicates lm_head: the heads are still named. */
	memcpy(before, r->hash, BASE_HASH_LEN);
	T_OK(plan_rules_parse(r, rules, strlen(rules), "rules.txt", err));
	T_ASSERT(memcmp(before, r->hash, BASE_HASH_LEN) != 0);
	T_EQ_INT(plan_rules_match(r, "lm_head.weight"), PLAN_REPLICATE);
	T_EQ_INT(plan_build(&p, m, r, 3, 0, 1, 0, err), -EINVAL);
	printf("%s\n", err);
	/* ... where the heads are still named before down_proj's 688 */
	T_HAS(err, "tensor 'model.layers.0.self_attn.k_proj.weight' (shape [128, 256]): 2 heads (num_key_value_heads) do not split over tp size 3");
	/* tp 2 works with the override: lm_head whole on each rank */
	T_OK(plan_build(&p, m, r, 2, 1, 1, 0, err));
	T_EQ_U64(find(&p, "lm_head.weight")->size, 4096 * 256 * 2);
	plan_free(&p);

	T_EQ_INT(plan_rules_parse(r, "x dim2\n", 7, "bad.rules", err), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "bad.rules:1: 'x dim2': not 'PATTERN replicate|dim0|dim1");
	T_EQ_INT(plan_rules_parse(r, "# c\n* dim0 extra\n", 17, "bad.rules", err), -EINVAL);
	T_HAS(err, "bad.rules:2: '* dim0 extra'");
	T_EQ_INT(plan_rules_parse(r, "onlypattern\n", 12, "bad.rules", err), -EINVAL);
	T_HAS(err, "bad.rules:1:");

	T_EQ_INT(plan_build(&p, m, r, 2, 2, 1, 0, err), -EINVAL);
	T_HAS(err, "tp rank 2 of size 2 is invalid");
	T_EQ_INT(plan_build(&p, m, r, 1, 0, 5, 0, err), -EINVAL);
	printf("%s\n", err);
	T_HAS(err, "pp size 5 is more than the 4 layers");
	T_EQ_INT(plan_build(&p, m, r, 1, 0, 0, 0, err), -EINVAL);
	T_HAS(err, "pp rank 0 of size 0 is invalid");
}

static void check_pack(const struct model *m, const struct plan_rules *r)
{
	char err[BASE_ERR_LEN];
	struct plan p;
	uint64_t max = 3u << 20;

	T_OK(plan_build(&p, m, r, 1, 0, 1, 0, err));
	T_OK(plan_pack(&p, max, err));
	T_CMP_INT(p.npools, >=, 4);
	for (uint32_t i = 0; i < p.ntensors; i++) {
		const struct plan_tensor *t = &p.t[i];

		T_ASSERT(t->pool < p.npools);
		T_ASSERT(t->pool_off + t->alloc <= p.pool_size[t->pool]);
		T_ASSERT(t->pool_off + t->alloc <= max || t->pool_off == 0);
		if (t->group < 0 && !(t->flags & PLAN_T_VIEW))
			T_EQ_U64(t->pool_off % PLAN_POOL_ALIGN, 0);
		if (t->flags & PLAN_T_VIEW)
			continue;
		/* no two stored entries overlap */
		for (uint32_t j = 0; j < i; j++) {
			const struct plan_tensor *u = &p.t[j];

			if ((u->flags & PLAN_T_VIEW) || u->pool != t->pool)
				continue;
			T_ASSERT(u->pool_off + u->alloc <= t->pool_off ||
				 t->pool_off + t->alloc <= u->pool_off);
		}
	}
	/* a view's parts lie back to back in its order: [q; k; v] */
	{
		const struct plan_tensor *q = find(&p, "model.layers.2.self_attn.q_proj.weight"),
			*k = find(&p, "model.layers.2.self_attn.k_proj.weight"),
			*v = find(&p, "model.layers.2.self_attn.v_proj.weight"),
			*f = find(&p, "model.layers.2.self_attn.qkv_proj.weight");

		T_EQ_INT(f->pool, q->pool);
		T_EQ_U64(f->pool_off, q->pool_off);
		T_EQ_U64(f->pool_off % PLAN_POOL_ALIGN, 0);
		T_EQ_U64(k->pool_off, q->pool_off + q->size);
		T_EQ_U64(v->pool_off, k->pool_off + k->size);
		T_EQ_U64(f->size, q->size + k->size + v->size);
	}
	/* A tensor over pool_max (embed: 2 MiB) gets a pool of its own. */
	T_OK(plan_pack(&p, 1u << 20, err));
	T_EQ_U64(find(&p, "model.embed_tokens.weight")->pool_off, 0);
	T_EQ_INT(plan_pack(&p, 100, err), -EINVAL);
	T_HAS(err, "pool size 100 is below the 256-byte alignment");
	plan_free(&p);
}

static void check_tied(const char *dir)
{
	char err[BASE_ERR_LEN];
	struct plan_rules r;
	struct plan p;
	struct model m;

	if (model_open(&m, dir, err))
		T_FAIL("%s", err);
	T_ASSERT(m.cfg.tie_word_embeddings);
	T_ASSERT(!model_find(&m, "lm_head.weight"));
	T_OK(plan_rules_preset(&r, m.cfg.arch, err));
	T_OK(plan_build(&p, &m, &r, 2, 0, 2, 1, err));
	T_ASSERT(find(&p, "model.embed_tokens.weight"));
	/* tied: lm_head is served as an alias of the embedding (last stage) */
	T_ASSERT(find(&p, "lm_head.weight"));
	T_EQ_INT(find(&p, "lm_head.weight")->flags, PLAN_T_VIEW | PLAN_T_ALIAS);
	T_EQ_INT(find(&p, "lm_head.weight")->npieces, 0);
	T_EQ_U64(find(&p, "lm_head.weight")->size,
		 find(&p, "model.embed_tokens.weight")->size);
	T_ASSERT(find(&p, "model.norm.weight"));
	T_ASSERT(!find(&p, "model.layers.7.mlp.up_proj.weight"));
	T_ASSERT(find(&p, "model.layers.8.mlp.up_proj.weight"));
	plan_free(&p);
	T_OK(plan_build(&p, &m, &r, 2, 0, 2, 0, err));
	T_ASSERT(find(&p, "model.embed_tokens.weight"));
	T_ASSERT(!find(&p, "model.norm.weight"));
	T_ASSERT(!find(&p, "lm_head.weight"));
	/* 16 layers of 6 placements (qkv and gate_up as one each), all over
	 * 4096 bytes: more than 64 pools */
	plan_free(&p);
	T_OK(plan_build(&p, &m, &r, 2, 0, 1, 0, err));
	T_EQ_INT(plan_pack(&p, 4096, err), -E2BIG);
	printf("%s\n", err);
	T_HAS(err, "more than 64 pools of at most 4096 bytes");
	plan_free(&p);
	plan_rules_free(&r);
	model_close(&m);
}

/*
 * The limits of one text and of texts merged (plan_rules_parse sizes its
 * arrays by the text's lines plus what r holds, not by the limits):
 * PLAN_RULES_MAX rules, PLAN_STMTS_MAX statements, without and with a
 * last newline, onto an r that holds some already (this text's first);
 * one more of either is refused. ASan checks every write.
 */
static char *lines_of(const char *fmt, unsigned from, unsigned n, bool last_nl)
{
	size_t cap = (size_t)n * 160 + 1, len = 0;
	char *buf = malloc(cap);

	T_ASSERT(buf);
	buf[0] = '\0';
	for (unsigned i = from; i < from + n; i++)
		len += (size_t)snprintf(buf + len, cap - len, fmt, i, i, i);
	if (!last_nl && len)
		buf[--len] = '\0';
	return buf;
}

static void check_limits(void)
{
	const char *rule = "a%u.b%u.w%u dim0\n";
	const char *stmt = "view v%u.x = p%u.a p%u.b\n";
	char err[BASE_ERR_LEN], *t;
	struct plan_rules r;

	for (int nl = 0; nl < 2; nl++) {
		memset(&r, 0, sizeof(r));
		t = lines_of(rule, 0, PLAN_RULES_MAX, nl);
		T_OK(plan_rules_parse(&r, t, strlen(t), "max.rules", err));
		T_EQ_INT(r.n, PLAN_RULES_MAX);
		T_EQ_INT(plan_rules_match(&r, "a1023.b1023.w1023"), PLAN_DIM0);
		free(t);
		T_EQ_INT(plan_rules_parse(&r, "x dim1\n", 7, "one.rules", err), -E2BIG);
		T_HAS(err, "more than 1024 rules");
		plan_rules_free(&r);
	}
	/* merged: 1000 then 24 more, the new text's first */
	memset(&r, 0, sizeof(r));
	t = lines_of(rule, 0, 1000, true);
	T_OK(plan_rules_parse(&r, t, strlen(t), "a.rules", err));
	free(t);
	t = lines_of(rule, 1000, 24, false);
	T_OK(plan_rules_parse(&r, t, strlen(t), "b.rules", err));
	free(t);
	T_EQ_INT(r.n, PLAN_RULES_MAX);
	T_HAS(r.r[0].pattern, "a1000.b1000.w1000");
	T_HAS(r.r[PLAN_RULES_MAX - 1].pattern, "a999.b999.w999");
	plan_rules_free(&r);
	/* statements: 1024 over two texts, then one more refused */
	memset(&r, 0, sizeof(r));
	t = lines_of(stmt, 0, 1000, false);
	T_OK(plan_rules_parse(&r, t, strlen(t), "a.layout", err));
	free(t);
	t = lines_of(stmt, 1000, 24, true);
	T_OK(plan_rules_parse(&r, t, strlen(t), "b.layout", err));
	free(t);
	T_EQ_INT(r.nstmts, PLAN_STMTS_MAX);
	T_HAS(r.s[0].name, "v1000.x");
	T_HAS(r.s[PLAN_STMTS_MAX - 1].name, "v999.x");
	T_EQ_INT(plan_rules_parse(&r, "view z = a b\n", 13, "c.layout", err), -EINVAL);
	T_HAS(err, "more than 1024 statements");
	plan_rules_free(&r);
}

int main(void)
{
	char dir[] = "/tmp/wct_plr.XXXXXX", tiny[256], l1b[256], cmd[300];
	char err[BASE_ERR_LEN];
	struct plan_rules r;
	struct model m;

	T_ASSERT(mkdtemp(dir));
	snprintf(tiny, sizeof(tiny), "%s/tiny", dir);
	snprintf(l1b, sizeof(l1b), "%s/l1b", dir);
	synth_wcgen_headers("tiny", tiny);
	synth_wcgen_headers("llama-1b", l1b);
	if (model_open(&m, tiny, err))
		T_FAIL("%s", err);

	T_EQ_INT(plan_rules_preset(&r, "GPT2LMHeadModel", err), -ENOTSUP);
	printf("%s\n", err);
	T_HAS(err, "no sharding preset for architecture 'GPT2LMHeadModel'");
	T_HAS(err, "give a layout file");
	for (const char *a = "MistralForCausalLM"; a; a = NULL) {
		T_OK(plan_rules_preset(&r, a, err));
		plan_rules_free(&r);
	}
	T_OK(plan_rules_preset(&r, "Qwen3ForCausalLM", err));
	plan_rules_free(&r);
	/* a rules file alone, no preset (found by fuzzing: empty list) */
	memset(&r, 0, sizeof(r));
	T_OK(plan_rules_parse(&r, "*.w dim1\n", 8, "only.rules", err));
	T_EQ_INT(r.n, 1);
	T_EQ_INT(plan_rules_match(&r, "a.w"), PLAN_DIM1);
	T_EQ_INT(plan_rules_match(&r, "a.b"), PLAN_REPLICATE);
	plan_rules_free(&r);
	T_OK(plan_rules_preset(&r, m.cfg.arch, err));
	check_geometry(&m, &r);
	check_pack(&m, &r);
	check_errors(&m, &r);
	plan_rules_free(&r);
	model_close(&m);
	check_tied(l1b);
	check_limits();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	T_EQ_INT(system(cmd), 0);
	return 0;
}
