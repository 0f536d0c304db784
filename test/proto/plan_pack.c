/* SPDX-License-Identifier: MIT */
/*
 * plan_pack's layer packing (plan.h): a model whose layers are big
 * (PLAN_LAYER_MIN bytes or more: Llama-3-8B at tp 1 and 2) has every layer
 * whole in one pool, starting on PLAN_LAYER_ALIGN, pools cut only between
 * layers, and one layer stride over the span (the pools back to back, each
 * at an offset rounded up to PLAN_LAYER_ALIGN, as libwcache maps them):
 * what lets tensors("torch") make one view per kind of tensor. A layer
 * larger than the pool size, and every model with small layers (the models
 * in test/data, wcgen's tiny and llama-1b, llama-8b at tp 4 and 8), are
 * packed tensor by tensor exactly as before: the same pools, offsets and
 * pool sizes as ref_pack below, the packing of before the layer packing.
 * The big models are written by `wcgen --headers-only` (sparse files: real
 * headers, no data), so this reads only headers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "plan.h"
#include "synth_model.h"
#include "t.h"

static char err[BASE_ERR_LEN];

static long layer(const char *name)
{
	static const char pre[] = "model.layers.";
	char *end;
	long n;

	if (strncmp(name, pre, sizeof(pre) - 1) || name[sizeof(pre) - 1] < '0' ||
	    name[sizeof(pre) - 1] > '9')
		return -1;
	n = strtol(name + sizeof(pre) - 1, &end, 10);
	return *end == '.' ? n : -1;
}

static uint64_t up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* The packing before layers were packed whole (plan_pack until then),
 * kept here as the reference for models with small layers: every entry
 * (a group: all its members, at its first member) at the next 256-byte
 * offset, a new pool when it does not fit. */
static void ref_pack(const struct plan *p, uint64_t max, uint32_t *pool,
		     uint64_t *off, uint64_t *size, uint32_t *npools)
{
	bool placed[4096] = { false };
	uint64_t o = 0;
	int k = -1;

	T_ASSERT(p->ngroups <= 4096);
	memset(size, 0, PLAN_POOLS_MAX * sizeof(*size));
	for (uint32_t i = 0; i < p->ntensors; i++) {
		const struct plan_tensor *t = &p->t[i];
		uint64_t bytes = 0, at;
		const struct plan_group *g;

		if (t->flags & PLAN_T_VIEW)
			continue;
		if (t->group >= 0 && placed[t->group])
			continue;
		g = t->group >= 0 ? &p->g[t->group] : NULL;
		if (g) {
			placed[t->group] = true;
			for (uint32_t j = 0; j < g->n; j++)
				bytes += p->t[p->members[g->member0 + j]].alloc;
		} else {
			bytes = t->alloc;
		}
		at = up(o, PLAN_POOL_ALIGN);
		if (k < 0 || (at > 0 && (at > max || bytes > max - at))) {
			k++;
			T_ASSERT(k < PLAN_POOLS_MAX);
			at = 0;
		}
		o = at + bytes;
		size[k] = o;
		for (uint32_t j = 0; j < (g ? g->n : 1); j++) {
			uint32_t e = g ? p->members[g->member0 + j] : i;

			pool[e] = (uint32_t)k;
			off[e] = at;
			at += p->t[e].alloc;
		}
	}
	*npools = (uint32_t)(k + 1);
}

/* plan_pack(p, max) (or plan_pack_flat) is ref_pack(p, max), entry for
 * entry. */
static void check_flat_as(struct plan *p, uint64_t max, const char *what,
			  int (*pack)(struct plan *, uint64_t, char *))
{
	static uint32_t pool[1u << 16];
	static uint64_t off[1u << 16];
	uint64_t size[PLAN_POOLS_MAX];
	uint32_t n;

	T_ASSERT(p->ntensors <= 1u << 16);
	T_OK(pack(p, max, err));
	ref_pack(p, max, pool, off, size, &n);
	if (p->npools != n)
		T_FAIL("%s, pool size %" PRIu64 ": %u pools, before %u", what,
		       max, p->npools, n);
	for (uint32_t k = 0; k < n; k++)
		if (p->pool_size[k] != size[k])
			T_FAIL("%s, pool size %" PRIu64 ": pool %u is %" PRIu64 " bytes, before %" PRIu64,
			       what, max, k, p->pool_size[k], size[k]);
	for (uint32_t i = 0; i < p->ntensors; i++) {
		const struct plan_tensor *t = &p->t[i];

		if (t->flags & PLAN_T_VIEW)
			continue;
		if (t->pool != pool[i] || t->pool_off != off[i])
			T_FAIL("%s, pool size %" PRIu64 ": %s at pool %u +%" PRIu64 ", before %u +%" PRIu64,
			       what, max, t->name, t->pool, t->pool_off, pool[i],
			       off[i]);
	}
}

static void check_flat(struct plan *p, uint64_t max, const char *what)
{
	check_flat_as(p, max, what, plan_pack);
}

/* Every entry inside its pool and the pool size, no two overlapping, a
 * view at its first part's place. O(n^2) over one pool's entries. */
static void check_sound(const struct plan *p, uint64_t max)
{
	for (uint32_t i = 0; i < p->ntensors; i++) {
		const struct plan_tensor *t = &p->t[i];

		T_ASSERT(t->pool < p->npools);
		if (t->flags & PLAN_T_VIEW) {
			T_EQ_INT(t->pool, p->t[t->target].pool);
			T_EQ_U64(t->pool_off, p->t[t->target].pool_off);
			continue;
		}
		T_ASSERT(t->pool_off + t->alloc <= p->pool_size[t->pool]);
		T_ASSERT(p->pool_size[t->pool] <= max || t->pool_off == 0);
		for (uint32_t j = 0; j < i; j++) {
			const struct plan_tensor *u = &p->t[j];

			if ((u->flags & PLAN_T_VIEW) || u->pool != t->pool)
				continue;
			if (!(u->pool_off + u->alloc <= t->pool_off ||
			      t->pool_off + t->alloc <= u->pool_off))
				T_FAIL("%s and %s overlap in pool %u", u->name,
				       t->name, t->pool);
		}
	}
}

/* The big-layer invariants; returns the layer stride S. span[k]: pool k's
 * offset with the pools back to back at PLAN_LAYER_ALIGN. */
static uint64_t check_layers(const struct plan *p, uint64_t max,
			     uint32_t nlayers)
{
	uint64_t span[PLAN_POOLS_MAX], at = 0, start[256], end[256], S = 0;
	uint32_t lpool[256], order[256], n = 0;
	long prev = -2;

	T_ASSERT(nlayers <= 256);
	for (uint32_t k = 0; k < p->npools; k++) {
		span[k] = at;
		at += up(p->pool_size[k], PLAN_LAYER_ALIGN);
	}
	for (uint32_t i = 0; i < p->ntensors; i++) {
		const struct plan_tensor *t = &p->t[i];
		long l;

		if (t->flags & PLAN_T_VIEW)
			continue;
		l = layer(t->name);
		if (l != prev && l >= 0) {   /* a layer begins */
			T_ASSERT(n < 256);
			order[n] = (uint32_t)l;
			lpool[n] = t->pool;
			start[n] = t->pool_off;
			end[n] = 0;
			n++;
		}
		if (i && !(p->t[i - 1].flags & PLAN_T_VIEW) &&
		    p->t[i - 1].pool != t->pool && l >= 0 && l == prev)
			T_FAIL("pool %u begins inside layer %ld (at %s)", t->pool,
			       l, t->name);
		if (l >= 0) {
			if (t->pool != lpool[n - 1])
				T_FAIL("layer %ld is cut between pools %u and %u (at %s)",
				       l, lpool[n - 1], t->pool, t->name);
			if (t->pool_off < start[n - 1])
				start[n - 1] = t->pool_off;
			if (t->pool_off + t->alloc > end[n - 1])
				end[n - 1] = t->pool_off + t->alloc;
		}
		prev = l;
	}
	T_EQ_INT(n, nlayers);
	for (uint32_t j = 0; j < n; j++) {
		if (start[j] % PLAN_LAYER_ALIGN)
			T_FAIL("layer %u starts at pool %u +%" PRIu64 ", not a multiple of %u",
			       order[j], lpool[j], start[j], PLAN_LAYER_ALIGN);
		/* a pool cut after a layer ends with it, padded */
		if (j + 1 < n && lpool[j + 1] != lpool[j] &&
		    p->pool_size[lpool[j]] != up(end[j], PLAN_LAYER_ALIGN))
			T_FAIL("pool %u ends at %" PRIu64 ", its last layer %u at %" PRIu64 " (not padded to %u)",
			       lpool[j], p->pool_size[lpool[j]], order[j], end[j],
			       PLAN_LAYER_ALIGN);
		T_ASSERT(up(end[j], PLAN_LAYER_ALIGN) <= max);
		if (j) {
			uint64_t s = span[lpool[j]] + start[j] -
				     (span[lpool[j - 1]] + start[j - 1]);

			if (j == 1)
				S = s;
			else if (s != S)
				T_FAIL("layer %u is %" PRIu64 " bytes after layer %u in the span, the stride before was %" PRIu64,
				       order[j], s, order[j - 1], S);
		}
	}
	T_EQ_U64(S % PLAN_LAYER_ALIGN, 0);
	return S;
}

static void open_model(struct model *m, struct plan_rules *r, const char *dir)
{
	if (model_open(m, dir, err))
		T_FAIL("%s", err);
	memset(r, 0, sizeof(*r));
	r->vocab_pad = -1;
	if (plan_rules_preset(r, m->cfg.arch, err))
		T_FAIL("%s", err);
}

static void build(struct plan *p, const struct model *m,
		  const struct plan_rules *r, uint32_t tp, uint32_t pp,
		  uint32_t stage)
{
	if (plan_build(p, m, r, tp, 0, pp, stage, err))
		T_FAIL("%s: %s", m->path, err);
}

static uint64_t sum_pools(const struct plan *p)
{
	uint64_t s = 0;

	for (uint32_t k = 0; k < p->npools; k++)
		s += up(p->pool_size[k], PLAN_LAYER_ALIGN);
	return s;
}

static void big(const char *dir)
{
	static const struct {
		uint32_t tp, pp, stage, npools, nlayers;
		uint64_t max;
	} c[] = {
		{ 1, 1, 0, 9, 32, 2ull << 30 },   /* wcd's default pool size */
		{ 1, 1, 0, 18, 32, 1ull << 30 },  /* lm_head, embed, two layers a pool */
		{ 1, 1, 0, 0, 32, 1000000000 },   /* not a multiple of 2 MiB */
		{ 2, 1, 0, 0, 32, 2ull << 30 },
		{ 1, 2, 1, 0, 16, 2ull << 30 },   /* the last stage */
	};
	struct plan_rules r;
	struct model m;
	struct plan p;

	open_model(&m, &r, dir);
	for (unsigned i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint32_t pool[1u << 10];
		uint64_t off[1u << 10], size[PLAN_POOLS_MAX], S, was = 0;
		uint32_t n;

		build(&p, &m, &r, c[i].tp, c[i].pp, c[i].stage);
		T_OK(plan_pack(&p, c[i].max, err));
		check_sound(&p, c[i].max);
		if (c[i].npools)
			T_EQ_INT(p.npools, c[i].npools);
		S = check_layers(&p, c[i].max, c[i].nlayers);
		ref_pack(&p, c[i].max, pool, off, size, &n);
		for (uint32_t k = 0; k < n; k++)
			was += up(size[k], PLAN_LAYER_ALIGN);
		printf("llama-8b tp %u pp %u/%u, pools of %" PRIu64 ": %u pools (before %u), layer stride %" PRIu64 ", %" PRIu64 " bytes mapped at 2 MiB (before %" PRIu64 ", +%" PRIu64 ")\n",
		       c[i].tp, c[i].stage, c[i].pp, c[i].max, p.npools, n, S,
		       sum_pools(&p), was, sum_pools(&p) - was);
		/* under one PLAN_LAYER_ALIGN a layer, and a pool */
		T_ASSERT(sum_pools(&p) - was <
			 (uint64_t)(c[i].nlayers + p.npools) * PLAN_LAYER_ALIGN);
		plan_free(&p);
	}
	/* a layer (418 MiB) larger than the pool (400 MiB): tensor by tensor */
	build(&p, &m, &r, 1, 1, 0);
	check_flat(&p, 400ull << 20, "llama-8b tp 1");
	check_sound(&p, 400ull << 20);
	plan_free(&p);
	/* plan_pack_flat (wcd's WCD_TEST_PACK=flat) packs as before */
	build(&p, &m, &r, 1, 1, 0);
	check_flat_as(&p, 2ull << 30, "llama-8b tp 1, flat", plan_pack_flat);
	T_EQ_INT(p.npools, 8);
	plan_free(&p);
	/* tp 4 and 8: 104 and 52 MiB layers, under PLAN_LAYER_MIN */
	for (uint32_t tp = 4; tp <= 8; tp *= 2) {
		build(&p, &m, &r, tp, 1, 0);
		check_flat(&p, 2ull << 30, "llama-8b tp 4/8");
		plan_free(&p);
	}
	plan_rules_free(&r);
	model_close(&m);
}

/* Small layers: the same packing as before, whatever the pool size. */
static void small(const char *dir)
{
	static const uint64_t max[] = { 2ull << 30, 64u << 20, 3u << 20, 1u << 20 };
	struct plan_rules r;
	struct model m;
	struct plan p;

	open_model(&m, &r, dir);
	for (uint32_t tp = 1; tp <= 2; tp++) {
		for (unsigned i = 0; i < sizeof(max) / sizeof(max[0]); i++) {
			build(&p, &m, &r, tp, 1, 0);
			if (p.total_bytes / max[i] > PLAN_POOLS_MAX / 2) {
				plan_free(&p);   /* too many pools */
				continue;
			}
			check_flat(&p, max[i], dir);
			check_sound(&p, max[i]);
			plan_free(&p);
		}
	}
	printf("%s: packed as before\n", dir);
	plan_rules_free(&r);
	model_close(&m);
}

/* 70 layers of two 65 MiB tensors (headers only): in pools of 200 MiB
 * whole layers would take 70 pools, over PLAN_POOLS_MAX, so every layer is
 * placed tensor by tensor (3 tensors a pool: 47 pools); in pools of 270
 * MiB two whole layers go in each (35 pools, one stride). */
static void many(const char *dir)
{
	static struct synth syn;
	struct plan_rules r;
	struct model m;
	struct plan p;

	syn.n = 0;
	synth_add(&syn, "BF16", 2, 2, 64, 64, 0, "model.embed_tokens.weight");
	for (int l = 0; l < 70; l++) {
		synth_add(&syn, "BF16", 2, 2, 65, 1u << 19, 0, "model.layers.%d.mlp.down_proj.weight", l);
		synth_add(&syn, "BF16", 2, 2, 65, 1u << 19, 0, "model.layers.%d.mlp.up_proj.weight", l);
	}
	synth_write_as(&syn, dir,
		       "{\"architectures\": [\"WcTestForCausalLM\"], \"num_hidden_layers\": 70}",
		       true);
	if (model_open(&m, dir, err))
		T_FAIL("%s", err);
	memset(&r, 0, sizeof(r));
	r.vocab_pad = -1;
	build(&p, &m, &r, 1, 1, 0);
	check_flat(&p, 200ull << 20, "70 layers of 130 MiB");
	T_EQ_INT(p.npools, 47);
	plan_free(&p);
	build(&p, &m, &r, 1, 1, 0);
	T_OK(plan_pack(&p, 270ull << 20, err));
	check_sound(&p, 270ull << 20);
	T_EQ_INT(p.npools, 35);
	check_layers(&p, 270ull << 20, 70);
	plan_free(&p);
	printf("70 layers of 130 MiB: tensor by tensor in pools of 200 MiB (whole layers would need 70 pools), whole in pools of 270 MiB\n");
	model_close(&m);
}

int main(void)
{
	static const char *data[] = {
		"layouts/deepseek_v3", "layouts/gemma2", "layouts/gemma3",
		"layouts/llama", "layouts/mixtral", "layouts/phi3",
		"layouts/qwen2", "layouts/qwen3", "layouts/qwen3_moe",
		"reference/llama",
	};
	char dir[] = "/tmp/wct_pack.XXXXXX", path[512], cmd[600];
	const char *top = getenv("WC_TOP");

	T_ASSERT(mkdtemp(dir));
	for (unsigned i = 0; i < sizeof(data) / sizeof(data[0]); i++) {
		snprintf(path, sizeof(path), "%s/test/data/%s", top ? top : ".",
			 data[i]);
		small(path);
	}
	snprintf(path, sizeof(path), "%s/tiny", dir);
	synth_wcgen_headers("tiny", path);
	small(path);
	snprintf(path, sizeof(path), "%s/llama-1b", dir);   /* 116 MiB layers */
	synth_wcgen_headers("llama-1b", path);
	small(path);
	snprintf(path, sizeof(path), "%s/llama-8b", dir);
	synth_wcgen_headers("llama-8b", path);
	big(path);
	{
		char mdir[128];

		snprintf(mdir, sizeof(mdir), "%s/many", dir);
		many(mdir);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	T_EQ_INT(system(cmd), 0);
	return 0;
}
