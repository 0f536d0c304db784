/* SPDX-License-Identifier: MIT */
/*
 * The TP/PP plan. See plan.h for the rules. Costs: one fnmatch per rule per
 * tensor (first match wins), O(tensors) otherwise.
 */
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "plan.h"

static const char *const llama_archs[] = {
	"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
	"Qwen3ForCausalLM",
};

#define NARCHS (sizeof(llama_archs) / sizeof(llama_archs[0]))

static const struct plan_rule llama_rules[] = {
	{ "*.self_attn.q_proj.*", PLAN_DIM0 },
	{ "*.self_attn.k_proj.*", PLAN_DIM0 },
	{ "*.self_attn.v_proj.*", PLAN_DIM0 },
	{ "*.mlp.gate_proj.*", PLAN_DIM0 },
	{ "*.mlp.up_proj.*", PLAN_DIM0 },
	{ "*.self_attn.o_proj.weight*", PLAN_DIM1 },
	{ "*.mlp.down_proj.weight*", PLAN_DIM1 },
	{ "model.embed_tokens.weight", PLAN_DIM0 },
	{ "lm_head.weight", PLAN_DIM0 },
	{ "*", PLAN_REPLICATE },
};

const char *plan_split_name(enum plan_split s)
{
	switch (s) {
	case PLAN_REPLICATE: return "replicate";
	case PLAN_DIM0: return "dim0";
	case PLAN_DIM1: return "dim1";
	}
	return "?";
}

static void rules_rehash(struct plan_rules *r)
{
	struct wc_hasher h;

	wc_hasher_init(&h);
	for (uint32_t i = 0; i < r->n; i++) {
		uint8_t split = (uint8_t)r->r[i].split;
		const char *pat = r->r[i].pattern;

		wc_hasher_update(&h, pat, strlen(pat) + 1);
		wc_hasher_update(&h, &split, 1);
	}
	wc_hasher_final(&h, r->hash);
}

void plan_rules_free(struct plan_rules *r)
{
	free(r->r);
	memset(r, 0, sizeof(*r));
}

int plan_rules_preset(struct plan_rules *r, const char *arch, char *err)
{
	size_t n = sizeof(llama_rules) / sizeof(llama_rules[0]);
	bool known = false;

	memset(r, 0, sizeof(*r));
	for (size_t i = 0; i < NARCHS; i++)
		known |= !strcmp(arch, llama_archs[i]);
	if (!known)
		return wc_errf(err, ENOTSUP,
			       "no sharding preset for architecture '%s' (presets: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM); give a rules file (lines 'PATTERN replicate|dim0|dim1')",
			       arch);
	r->r = malloc(sizeof(llama_rules));
	if (!r->r)
		return wc_errf(err, ENOMEM, "out of memory");
	memcpy(r->r, llama_rules, sizeof(llama_rules));
	r->n = (uint32_t)n;
	rules_rehash(r);
	return 0;
}

static int parse_split(const char *s, enum plan_split *out)
{
	for (int i = PLAN_REPLICATE; i <= PLAN_DIM1; i++) {
		if (!strcmp(s, plan_split_name((enum plan_split)i))) {
			*out = (enum plan_split)i;
			return 0;
		}
	}
	return -EINVAL;
}

int plan_rules_parse(struct plan_rules *r, const void *buf, size_t len,
		     const char *name, char *err)
{
	const char *p = buf, *end = p + len;
	struct plan_rule *out;
	uint32_t n = 0;
	int line = 0;

	if (len > PLAN_RULES_FILE_MAX)
		return wc_errf(err, EFBIG, "%s: %zu bytes, over the %u-byte limit for a rules file",
			       name, len, PLAN_RULES_FILE_MAX);
	out = calloc(PLAN_RULES_MAX, sizeof(*out));
	if (!out)
		return wc_errf(err, ENOMEM, "%s: out of memory", name);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char text[PLAN_PATTERN_MAX + 64], pat[PLAN_PATTERN_MAX + 1],
			split[32], extra[2];
		int k;

		line++;
		if (ll >= sizeof(text) || memchr(p, '\0', ll)) {
			free(out);
			return wc_errf(err, EINVAL, "%s:%d: line is %zu bytes or holds a NUL (limit %zu)",
				       name, line, ll, sizeof(text) - 1);
		}
		memcpy(text, p, ll);
		text[ll] = '\0';
		p += ll + (nl ? 1 : 0);
		if (strchr(text, '#'))
			*strchr(text, '#') = '\0';
		k = sscanf(text, "%256s %31s %1s", pat, split, extra);
		if (k <= 0)
			continue;
		if (k != 2 || strlen(pat) >= PLAN_PATTERN_MAX ||
		    parse_split(split, &out[n].split)) {
			free(out);
			return wc_errf(err, EINVAL,
				       "%s:%d: '%s' is not 'PATTERN replicate|dim0|dim1' (pattern under %d bytes)",
				       name, line, text, PLAN_PATTERN_MAX);
		}
		if (n + r->n >= PLAN_RULES_MAX) {
			free(out);
			return wc_errf(err, E2BIG, "%s:%d: more than %d rules",
				       name, line, PLAN_RULES_MAX);
		}
		strcpy(out[n].pattern, pat);
		n++;
	}
	if (r->n)
		memcpy(out + n, r->r, r->n * sizeof(*out));
	free(r->r);
	r->r = out;
	r->n += n;
	rules_rehash(r);
	return 0;
}

enum plan_split plan_rules_match(const struct plan_rules *r, const char *name)
{
	for (uint32_t i = 0; i < r->n; i++)
		if (!fnmatch(r->r[i].pattern, name, 0))
			return r->r[i].split;
	return PLAN_REPLICATE;
}

void plan_free(struct plan *p)
{
	free(p->t);
	memset(p, 0, sizeof(*p));
}

/* "model.layers.N." -> N, or -1. */
static long layer_of(const char *name)
{
	static const char pre[] = "model.layers.";
	char *end;
	long n;

	if (strncmp(name, pre, sizeof(pre) - 1))
		return -1;
	name += sizeof(pre) - 1;
	if (*name < '0' || *name > '9')
		return -1;
	n = strtol(name, &end, 10);
	return *end == '.' && n < 1000000 ? n : -1;
}

static bool starts(const char *s, const char *pre)
{
	return !strncmp(s, pre, strlen(pre));
}

static void shape_str(const struct st_tensor *t, char *buf, size_t cap)
{
	size_t n = (size_t)snprintf(buf, cap, "[");

	for (uint32_t i = 0; i < t->ndim && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64,
				      i ? ", " : "", t->shape[i]);
	if (n < cap)
		snprintf(buf + n, cap - n, "]");
}

/* Does this pipeline stage hold the tensor? */
static bool in_stage(const struct plan *p, const struct model *m,
		     const char *name)
{
	long layer = layer_of(name);
	bool first = p->pp_rank == 0, last = p->pp_rank == p->pp_size - 1;

	if (layer >= 0)
		return layer >= p->layer_begin && layer < p->layer_end;
	if (starts(name, "model.embed_tokens."))
		return first ||
		       (last && m->cfg.tie_word_embeddings &&
			!strcmp(name, "model.embed_tokens.weight") &&
			!model_find(m, "lm_head.weight"));
	if (starts(name, "model.norm.") || starts(name, "lm_head."))
		return last;
	return true;
}

static int split_tensor(struct plan_tensor *pt, const struct st_tensor *t,
			enum plan_split split, const struct plan *p,
			const char *path, char *err)
{
	uint64_t tp = p->tp_size, r = p->tp_rank, dim, per, inner = 1,
		 width, pitch;
	char shape[256];
	int d = split == PLAN_DIM0 ? 0 : 1;

	if (t->nelem <= 1 || t->ndim < (uint32_t)d + 1 || tp == 1)
		split = PLAN_REPLICATE;
	pt->split = split;
	pt->ndim = t->ndim;
	memcpy(pt->shape, t->shape, sizeof(pt->shape));
	if (split == PLAN_REPLICATE) {
		pt->file_off = t->file_off;
		pt->width = pt->src_pitch = pt->size = t->nbytes;
		pt->height = 1;
		return 0;
	}
	shape_str(t, shape, sizeof(shape));
	dim = t->shape[d];
	if (dim % tp)
		return wc_errf(err, EINVAL,
			       "%s: tensor '%s' (shape %s): dim %d of size %" PRIu64 " does not split evenly over tp size %" PRIu64 "; use a tp size that divides it, or a rules file that replicates it",
			       path, t->name, shape, d, dim, tp);
	per = dim / tp;
	for (uint32_t i = (uint32_t)d + 1; i < t->ndim; i++)
		inner *= t->shape[i];
	if (st_dtype_bytes(t->dtype, per * inner, &width) ||
	    st_dtype_bytes(t->dtype, dim * inner, &pitch))
		return wc_errf(err, EINVAL,
			       "%s: tensor '%s' (shape %s, %s): a 1/%" PRIu64 " slice of dim %d is not a whole number of bytes; use another tp size or replicate it",
			       path, t->name, shape, st_dtype_name(t->dtype), tp, d);
	pt->shape[d] = per;
	if (split == PLAN_DIM0) {
		/* rows [r*per, (r+1)*per): one range */
		pt->file_off = t->file_off + r * width;
		pt->width = pt->src_pitch = width;
		pt->height = 1;
	} else {
		pt->file_off = t->file_off + r * width;
		pt->width = width;
		pt->src_pitch = pitch;
		pt->height = t->shape[0];
	}
	pt->size = pt->width * pt->height;
	return 0;
}

int plan_build(struct plan *p, const struct model *m,
	       const struct plan_rules *r, uint32_t tp_size, uint32_t tp_rank,
	       uint32_t pp_size, uint32_t pp_rank, char *err)
{
	long nlayers = 0;
	int rc = 0;

	memset(p, 0, sizeof(*p));
	if (tp_size < 1 || tp_size > PLAN_TP_MAX || tp_rank >= tp_size)
		return wc_errf(err, EINVAL, "tp rank %u of size %u is invalid (size 1..%d, rank below size)",
			       tp_rank, tp_size, PLAN_TP_MAX);
	if (pp_size < 1 || pp_size > PLAN_PP_MAX || pp_rank >= pp_size)
		return wc_errf(err, EINVAL, "pp rank %u of size %u is invalid (size 1..%d, rank below size)",
			       pp_rank, pp_size, PLAN_PP_MAX);
	for (uint32_t i = 0; i < m->ntensors; i++) {
		long l = layer_of(m->tensors[i].name);

		if (l + 1 > nlayers)
			nlayers = l + 1;
	}
	if (pp_size > 1 && (uint64_t)nlayers < pp_size)
		return wc_errf(err, EINVAL,
			       "%s: pp size %u is more than the %ld layers (model.layers.N.*); use a pp size of at most %ld",
			       m->path, pp_size, nlayers, nlayers);
	p->tp_size = tp_size, p->tp_rank = tp_rank;
	p->pp_size = pp_size, p->pp_rank = pp_rank;
	p->nlayers = (uint32_t)nlayers;
	p->layer_begin = (uint32_t)((uint64_t)pp_rank * nlayers / pp_size);
	p->layer_end = (uint32_t)((uint64_t)(pp_rank + 1) * nlayers / pp_size);
	p->t = calloc(m->ntensors ? m->ntensors : 1, sizeof(*p->t));
	if (!p->t)
		return wc_errf(err, ENOMEM, "out of memory for a plan of %u tensors",
			       m->ntensors);
	for (uint32_t i = 0; i < m->ntensors && !rc; i++) {
		const struct model_tensor *mt = &m->tensors[i];
		struct plan_tensor *pt;

		if (!in_stage(p, m, mt->name))
			continue;
		pt = &p->t[p->ntensors++];
		pt->model_idx = i;
		pt->name = mt->name;
		pt->dtype = mt->t->dtype;
		pt->shard = mt->shard;
		rc = split_tensor(pt, mt->t, plan_rules_match(r, mt->name), p,
				  m->path, err);
		p->total_bytes += pt->size;
	}
	if (rc)
		plan_free(p);
	return rc;
}

int plan_pack(struct plan *p, uint64_t pool_max, char *err)
{
	uint64_t off = 0;
	int pool = -1;

	if (pool_max < PLAN_POOL_ALIGN)
		return wc_errf(err, EINVAL, "pool size %" PRIu64 " is below the %d-byte alignment; give a larger pool size",
			       pool_max, PLAN_POOL_ALIGN);
	p->npools = 0;
	memset(p->pool_size, 0, sizeof(p->pool_size));
	for (uint32_t i = 0; i < p->ntensors; i++) {
		struct plan_tensor *t = &p->t[i];
		uint64_t at = (off + PLAN_POOL_ALIGN - 1) &
			      ~(uint64_t)(PLAN_POOL_ALIGN - 1);
		bool full = at > 0 && (at > pool_max || t->size > pool_max - at);

		if (pool < 0 || full) {
			if (pool + 1 >= PLAN_POOLS_MAX)
				return wc_errf(err, E2BIG,
					       "the plan needs more than %d pools of at most %" PRIu64 " bytes for %" PRIu64 " bytes of tensors; give a larger pool size",
					       PLAN_POOLS_MAX, pool_max, p->total_bytes);
			pool++;
			at = 0;
		}
		t->pool = (uint32_t)pool;
		t->pool_off = at;
		off = at + t->size;
		p->pool_size[pool] = off;
	}
	p->npools = (uint32_t)(pool + 1);
	return 0;
}
