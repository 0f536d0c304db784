/* SPDX-License-Identifier: MIT */
/*
 * The per-rank plan. See plan.h for the rules. Costs: one match per rule
 * per tensor (first match wins, each linear: glob.c); O(tensors)
 * otherwise. The statements (views, stacks, groups, aliases) and the
 * entries' helpers are in plan_views.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "glob.h"
#include "plan.h"
#include "plan_impl.h"

#define RANGES_MAX (PLAN_PARTS_MAX)

struct range {
	uint64_t a, b;            /* [a, b) on the split dim */
};

/* What the split of one tensor came to. */
struct cut {
	enum plan_split split;
	uint32_t n;
	struct range r[RANGES_MAX];
	uint64_t pad_rows;        /* pad rules: P; else 0 */
	bool heads_err;           /* the error was heads that do not split */
};

void plan_free(struct plan *p)
{
	for (uint32_t i = 0; i < p->nnames; i++)
		free(p->names[i]);
	free(p->names);
	free(p->t);
	free(p->pc);
	free(p->g);
	free(p->members);
	memset(p, 0, sizeof(*p));
}

static const struct plan_rule *rule_for(const struct plan_rules *r,
					const char *name, long caps[26])
{
	for (uint32_t i = 0; r && i < r->n; i++)
		if (plan__match(r->r[i].pattern, name, caps))
			return &r->r[i];
	return NULL;
}

static bool cfg_keys(const struct model *m, const struct plan_keys *k,
		     int64_t *v, const char **which)
{
	for (uint32_t i = 0; i < k->n; i++)
		if (model_cfg_int(&m->cfg, k->k[i], v)) {
			*which = k->k[i];
			return true;
		}
	return false;
}

static void keys_str(const struct plan_keys *k, char *buf, size_t cap)
{
	size_t n = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < k->n && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "|" : "",
				      k->k[i]);
}

/* Ranges of dim (size D) this rank keeps under rule u. */
static int cut_dim(struct cut *c, const struct plan_rule *u, uint64_t D,
		   const struct model *m, const struct plan *p,
		   const char *tname, const char *shape, char *err)
{
	uint64_t tp = p->tp_size, r = p->tp_rank, H[PLAN_PARTS_MAX],
		 sumH = 0, unit, at = 0;
	uint32_t np = u->nparts ? u->nparts : 1;
	const char *key[PLAN_PARTS_MAX];

	for (uint32_t k = 0; k < np; k++) {
		const struct plan_part *pt = &u->part[k];
		int64_t v;

		H[k] = 1;
		key[k] = NULL;
		if (u->nparts && pt->heads != PLAN_HEADS_NONE) {
			char ks[200];

			if (!cfg_keys(m, &pt->keys, &v, &key[k]) || v <= 0) {
				keys_str(&pt->keys, ks, sizeof(ks));
				return base_errf(err, EINVAL,
					       "%s: tensor '%s' is split by heads, but config.json has no positive %s; add it to config.json or give a layout without heads for it",
					       m->path, tname, ks);
			}
			H[k] = (uint64_t)v;
		}
		sumH += H[k];
	}
	if (D % sumH)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s' (shape %s): dim %d of size %" PRIu64 " is not %" PRIu64 " equal heads/parts; check the config's head counts or the layout",
			       m->path, tname, shape, c->split == PLAN_DIM0 ? 0 : 1,
			       D, sumH);
	unit = D / sumH;          /* one head (or one part when even) */
	c->n = 0;
	for (uint32_t k = 0; k < np; k++) {
		const struct plan_part *pt = &u->part[k];
		enum plan_heads hm = u->nparts ? pt->heads : PLAN_HEADS_NONE;
		uint64_t S = H[k] * unit, a, b;

		if (hm == PLAN_HEADS_NONE) {
			if (S % tp)
				return base_errf(err, EINVAL,
					       "%s: tensor '%s' (shape %s): dim %d of size %" PRIu64 "%s does not split evenly over tp size %" PRIu64 "; use a tp size that divides it, or a layout that replicates it",
					       m->path, tname, shape,
					       c->split == PLAN_DIM0 ? 0 : 1, S,
					       np > 1 ? " (one part)" : "", tp);
			a = r * (S / tp);
			b = a + S / tp;
		} else if (H[k] % tp == 0) {
			a = r * (H[k] / tp) * unit;
			b = a + (H[k] / tp) * unit;
		} else if (hm == PLAN_HEADS_KV && tp % H[k] == 0) {
			uint64_t head = r / (tp / H[k]);

			a = head * unit;
			b = a + unit;
		} else {
			c->heads_err = true;
			return base_errf(err, EINVAL,
				       "%s: tensor '%s' (shape %s): %" PRIu64 " heads (%s) do not split over tp size %" PRIu64 "%s; use a tp size that %s",
				       m->path, tname, shape, H[k], key[k], tp,
				       hm == PLAN_HEADS_KV ? " (KV heads are replicated only when tp is a multiple of them)" : "",
				       hm == PLAN_HEADS_KV ? "divides them or is a multiple of them" : "divides them");
		}
		c->r[c->n].a = at + a;
		c->r[c->n].b = at + b;
		c->n++;
		at += S;
	}
	return 0;
}

/* The split of tensor t (named tname, shape as t) under rule u. */
static int cut_tensor(struct cut *c, const struct plan_rule *u,
		      const struct st_tensor *t, const char *tname,
		      const struct model *m, const struct plan *p, bool whole,
		      char *err)
{
	enum plan_split split = u ? u->split : PLAN_REPLICATE;
	int d = split == PLAN_DIM1 ? 1 : 0;
	char shape[256];

	memset(c, 0, sizeof(*c));
	plan__shape_str(t->ndim, t->shape, shape, sizeof(shape));
	if (whole || t->nelem <= 1 || t->ndim < (uint32_t)d + 1 ||
	    (p->tp_size == 1 && !(u && u->pad)))
		split = PLAN_REPLICATE;
	c->split = split;
	if (split == PLAN_REPLICATE) {
		c->n = 1;
		c->r[0].a = 0;
		c->r[0].b = t->ndim ? t->shape[0] : 1;
		return 0;
	}
	if (u->pad) {
		uint64_t V = t->shape[0], mult = p->pp.vocab_pad, Vp, P, a, b;

		if (!mult) {
			if (V % p->tp_size)
				return base_errf(err, EINVAL,
					       "%s: tensor '%s' (shape %s): %" PRIu64 " vocabulary rows do not split over tp size %" PRIu64 " and padding is off (vocab_pad 0); turn padding on (wcd --vocab-pad 64, as vLLM and SGLang pad) or use a tp size that divides %" PRIu64,
					       m->path, tname, shape, V,
					       (uint64_t)p->tp_size, V);
			Vp = V;
		} else {
			Vp = (V + mult - 1) / mult * mult;
		}
		if (Vp % p->tp_size)
			return base_errf(err, EINVAL,
				       "%s: tensor '%s' (shape %s): %" PRIu64 " rows padded to %" PRIu64 " (a multiple of %" PRIu64 ") do not split over tp size %u; use a tp size that divides %" PRIu64 " or another --vocab-pad",
				       m->path, tname, shape, V, Vp, mult,
				       p->tp_size, Vp);
		P = Vp / p->tp_size;
		a = (uint64_t)p->tp_rank * P;
		b = a + P < V ? a + P : V;
		if (a > V)
			a = V;
		c->n = 1;
		c->r[0].a = a;
		c->r[0].b = b;
		c->pad_rows = P;
		return 0;
	}
	return cut_dim(c, u, t->shape[d], m, p, tname, shape, err);
}

/* A block-FP8 scale's cut from its weight's: ranges in block units. */
static int cut_scale(struct cut *c, const struct cut *w,
		     const struct st_tensor *wt, const struct st_tensor *st,
		     const struct model *m, const char *sname, char *err)
{
	int d = w->split == PLAN_DIM1 ? 1 : 0;
	uint64_t B = m->cfg.quant_block_size[d], D = wt->shape[d];

	*c = *w;
	c->pad_rows = 0;
	if (w->split == PLAN_REPLICATE) {
		c->r[0].a = 0;
		c->r[0].b = st->ndim ? st->shape[0] : 1;
		c->n = 1;
		return 0;
	}
	if (w->pad_rows)
		return base_errf(err, EINVAL, "%s: tensor '%s' is the block scale of a padded tensor, which no engine does; give a layout that replicates it",
			       m->path, sname);
	if ((uint32_t)d >= st->ndim || st->shape[d] != (D + B - 1) / B)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s' has %" PRIu64 " blocks on dim %d, but its weight's %" PRIu64 " in blocks of %" PRIu64 " make %" PRIu64,
			       m->path, sname,
			       (uint32_t)d < st->ndim ? st->shape[d] : 0, d, D,
			       B, (D + B - 1) / B);
	for (uint32_t k = 0; k < w->n; k++) {
		uint64_t a = w->r[k].a, b = w->r[k].b;

		if (a % B || (b % B && b != D))
			return base_errf(err, EINVAL,
				       "%s: tensor '%s': its weight's slice [%" PRIu64 ", %" PRIu64 ") of dim %d (size %" PRIu64 ") is not aligned to the FP8 block of %" PRIu64 "; use a tp size whose slices are whole blocks",
				       m->path, sname, a, b, d, D, B);
		c->r[k].a = a / B;
		c->r[k].b = (b + B - 1) / B;
	}
	return 0;
}

/* Emits the pieces of entry e (tensor t under cut c). */
static int emit(struct plan *p, struct plan__caps *cp, uint32_t e,
		const struct st_tensor *t, uint32_t shard, const struct cut *c,
		const char *path, char *err)
{
	struct plan_tensor *pt = &p->t[e];
	uint64_t inner = 1, rowb, rows = 1, dst = 0, total = 0;
	int d = c->split == PLAN_DIM1 ? 1 : 0;

	pt->split = c->split;
	pt->ndim = t->ndim;
	memcpy(pt->shape, t->shape, sizeof(pt->shape));
	pt->piece0 = p->npieces;
	if (c->split == PLAN_REPLICATE) {
		if (plan__grow((void **)&p->pc, &cp->pc, p->npieces + 1, sizeof(*p->pc)))
			return base_errf(err, ENOMEM, "out of memory");
		p->pc[p->npieces++] = (struct plan_piece){
			.entry = e, .shard = shard, .file_off = t->file_off,
			.width = t->nbytes, .height = 1, .src_pitch = t->nbytes,
			.dst = 0, .size = t->nbytes,
		};
		pt->npieces = 1;
		pt->size = pt->alloc = t->nbytes;
		return 0;
	}
	for (uint32_t i = (uint32_t)d + 1; i < t->ndim; i++)
		inner *= t->shape[i];
	for (int i = 0; i < d; i++)
		rows *= t->shape[i];
	if (st_dtype_bytes(t->dtype, inner, &rowb))
		return base_errf(err, EINVAL,
			       "%s: tensor '%s' (%s): a slice of dim %d is not a whole number of bytes; use another tp size or replicate it",
			       path, t->name, st_dtype_name(t->dtype), d);
	pt->shape[d] = 0;
	for (uint32_t k = 0; k < c->n; k++) {
		uint64_t len = c->r[k].b - c->r[k].a;

		pt->shape[d] += len;
		if (!len)
			continue;
		if (plan__grow((void **)&p->pc, &cp->pc, p->npieces + 1, sizeof(*p->pc)))
			return base_errf(err, ENOMEM, "out of memory");
		if (d == 0)
			p->pc[p->npieces++] = (struct plan_piece){
				.entry = e, .shard = shard,
				.file_off = t->file_off + c->r[k].a * rowb,
				.width = len * rowb, .height = 1,
				.src_pitch = len * rowb, .dst = dst,
				.size = len * rowb,
			};
		else
			p->pc[p->npieces++] = (struct plan_piece){
				.entry = e, .shard = shard,
				.file_off = t->file_off + c->r[k].a * rowb,
				.width = len * rowb, .height = rows,
				.src_pitch = t->shape[d] * rowb, .dst = dst,
				.size = len * rowb * rows,
			};
		dst += p->pc[p->npieces - 1].size;
		total += p->pc[p->npieces - 1].size;
	}
	pt->npieces = p->npieces - pt->piece0;
	pt->size = total;
	pt->alloc = total;
	if (c->pad_rows) {
		pt->padded_rows = c->pad_rows;
		pt->alloc = c->pad_rows * rowb;
	}
	return 0;
}

static int experts_range(struct plan *p, const struct model *m,
			 const struct plan_rules *r, char *err)
{
	uint64_t ep = p->pp.ep_size, k = p->pp.ep_rank, E, base, rem, n, s;
	const char *which;
	int64_t v;
	char ks[200];

	p->expert_begin = 0;
	p->expert_end = 0;
	if (!r || !r->experts.n || !cfg_keys(m, &r->experts, &v, &which) ||
	    v <= 0) {
		if (ep > 1) {
			if (r)
				keys_str(&r->experts, ks, sizeof(ks));
			return base_errf(err, EINVAL,
				       "%s: ep size %" PRIu64 " but %s; expert parallelism needs an MoE model and its preset",
				       m->path, ep,
				       r && r->experts.n ? "config.json has none of the expert counts the layout names" :
				       "the layout names no expert count (an 'experts KEY' line)");
		}
		return 0;
	}
	E = (uint64_t)v;
	if (E > UINT32_MAX / 2)
		return base_errf(err, EINVAL, "%s: %s is %" PRIu64 ", too many experts", m->path, which, E);
	if (ep > E)
		return base_errf(err, EINVAL,
			       "%s: ep size %" PRIu64 " is more than the %" PRIu64 " experts (%s): some ranks would hold none; use an ep size of at most %" PRIu64,
			       m->path, ep, E, which, E);
	base = E / ep;
	rem = E % ep;
	n = base + (k < rem);
	s = k * base + (k < rem ? k : rem);
	p->expert_begin = (uint32_t)s;
	p->expert_end = (uint32_t)(s + n);
	return 0;
}

int plan_build_params(struct plan *p, const struct model *m,
		const struct plan_rules *r, const struct plan_params *pp,
		char *err)
{
	struct plan__caps cp = { 0 };
	char first_err[BASE_ERR_LEN] = "";
	uint32_t nck;
	long nlayers = 0;
	int rc = 0;

	memset(p, 0, sizeof(*p));
	if (pp->tp_size < 1 || pp->tp_size > PLAN_TP_MAX || pp->tp_rank >= pp->tp_size)
		return base_errf(err, EINVAL, "tp rank %u of size %u is invalid (size 1..%d, rank below size)",
			       pp->tp_rank, pp->tp_size, PLAN_TP_MAX);
	if (pp->pp_size < 1 || pp->pp_size > PLAN_PP_MAX || pp->pp_rank >= pp->pp_size)
		return base_errf(err, EINVAL, "pp rank %u of size %u is invalid (size 1..%d, rank below size)",
			       pp->pp_rank, pp->pp_size, PLAN_PP_MAX);
	if (pp->ep_size < 1 || pp->ep_size > PLAN_EP_MAX || pp->ep_rank >= pp->ep_size)
		return base_errf(err, EINVAL, "ep rank %u of size %u is invalid (size 1..%d, rank below size)",
			       pp->ep_rank, pp->ep_size, PLAN_EP_MAX);
	if (pp->vocab_pad > (int32_t)PLAN_VOCAB_PAD_MAX)
		return base_errf(err, EINVAL, "vocab pad %d is over %u", pp->vocab_pad,
			       PLAN_VOCAB_PAD_MAX);
	for (uint32_t i = 0; i < m->ntensors; i++) {
		long l = plan__layer_of(m->tensors[i].name);

		if (l + 1 > nlayers)
			nlayers = l + 1;
	}
	if (pp->pp_size > 1 && (uint64_t)nlayers < pp->pp_size)
		return base_errf(err, EINVAL,
			       "%s: pp size %u is more than the %ld layers (model.layers.N.*); use a pp size of at most %ld",
			       m->path, pp->pp_size, nlayers, nlayers);
	p->pp = *pp;
	p->pp.vocab_pad = (int32_t)plan_vocab_pad(r, pp->vocab_pad);
	p->tp_size = pp->tp_size, p->tp_rank = pp->tp_rank;
	p->pp_size = pp->pp_size, p->pp_rank = pp->pp_rank;
	p->nlayers = (uint32_t)nlayers;
	p->layer_begin = (uint32_t)((uint64_t)pp->pp_rank * nlayers / pp->pp_size);
	p->layer_end = (uint32_t)((uint64_t)(pp->pp_rank + 1) * nlayers / pp->pp_size);
	rc = experts_range(p, m, r, err);
	for (uint32_t i = 0; i < m->ntensors && !rc; i++) {
		const struct model_tensor *mt = &m->tensors[i];
		const struct st_tensor *wt = mt->t;
		const struct plan_rule *u;
		const char *rname = mt->name;
		char base[ST_NAME_MAX + 1];
		struct plan_tensor *pt;
		bool scale = false, whole = false;
		struct cut c;
		long caps[26];
		size_t nl = strlen(mt->name);

		if (!plan__in_stage(p, m, mt->name))
			continue;
		/* block FP8: NAME_scale_inv follows NAME */
		if (m->cfg.quant_block && nl > 10 &&
		    !strcmp(mt->name + nl - 10, "_scale_inv")) {
			const struct model_tensor *w;

			memcpy(base, mt->name, nl - 10);
			base[nl - 10] = '\0';
			w = model_find(m, base);
			if (w) {
				scale = true;
				rname = base;
				wt = w->t;
			}
		}
		u = rule_for(r, rname, caps);
		if (u && u->expert) {
			long e = caps['E' - 'A'];

			if (pp->ep_size > 1) {
				if (e < (long)p->expert_begin || e >= (long)p->expert_end)
					continue;
				whole = true;
			}
		}
		pt = plan__new_entry(p, &cp);
		if (!pt) {
			rc = base_errf(err, ENOMEM, "out of memory for a plan of %u tensors",
				     m->ntensors);
			break;
		}
		pt->model_idx = i;
		pt->name = mt->name;
		pt->dtype = mt->t->dtype;
		rc = cut_tensor(&c, u, wt, rname, m, p, whole, err);
		/* heads that do not split are said first: a tp size must
		 * divide them before anything else (lm_head's vocabulary,
		 * an MLP's width) matters, and lm_head sorts first; another
		 * cut that fails is said when no heads failed */
		if (rc == -EINVAL && !c.heads_err) {
			if (!first_err[0])
				snprintf(first_err, sizeof(first_err), "%s", err);
			rc = 0;
			continue;
		}
		if (!rc && scale) {
			struct cut w = c;

			rc = cut_scale(&c, &w, wt, mt->t, m, mt->name, err);
		}
		if (!rc)
			rc = emit(p, &cp, p->ntensors - 1, mt->t, mt->shard, &c,
				  m->path, err);
	}
	if (!rc && first_err[0])
		rc = base_errf(err, EINVAL, "%s", first_err);
	nck = p->ntensors;
	if (!rc && r)
		rc = plan__statements(p, &cp, m, r, nck, err);
	for (uint32_t i = 0; i < p->ntensors && !rc; i++) {
		if (!(p->t[i].flags & PLAN_T_VIEW))
			p->total_bytes += p->t[i].alloc;
	}
	for (uint32_t i = 0; i < p->npieces; i++)
		p->read_bytes += p->pc[i].size;
	if (rc)
		plan_free(p);
	return rc;
}

int plan_build(struct plan *p, const struct model *m,
	       const struct plan_rules *r, uint32_t tp_size, uint32_t tp_rank,
	       uint32_t pp_size, uint32_t pp_rank, char *err)
{
	struct plan_params pp = {
		.tp_size = tp_size, .tp_rank = tp_rank, .pp_size = pp_size,
		.pp_rank = pp_rank, .ep_size = 1, .ep_rank = 0,
		.vocab_pad = -1,
	};

	return plan_build_params(p, m, r, &pp, err);
}

/* Places bytes at the next aligned offset, opening a new pool when they
 * do not fit; false past PLAN_POOLS_MAX. */
static bool place(struct plan *p, int *pool, uint64_t *off, uint64_t bytes,
		  uint64_t pool_max, uint64_t *at_out)
{
	uint64_t at = (*off + PLAN_POOL_ALIGN - 1) &
		      ~(uint64_t)(PLAN_POOL_ALIGN - 1);
	bool full = at > 0 && (at > pool_max || bytes > pool_max - at);

	if (*pool < 0 || full) {
		if (*pool + 1 >= PLAN_POOLS_MAX)
			return false;
		(*pool)++;
		at = 0;
	}
	*at_out = at;
	*off = at + bytes;
	p->pool_size[*pool] = *off;
	return true;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* Bytes of a group's members. */
static uint64_t group_bytes(const struct plan *p, const struct plan_group *g)
{
	uint64_t bytes = 0;

	for (uint32_t k = 0; k < g->n; k++)
		bytes += p->t[p->members[g->member0 + k]].alloc;
	return bytes;
}

/* The end of layer block [i, e) of the plan's entries (non-views of one
 * layer, consecutive) and, in *bytes, what it takes placed from offset 0
 * as place() would place it: each entry and each group not placed yet
 * (seen marks the groups counted here) at PLAN_POOL_ALIGN. O(block). */
static uint32_t layer_block(const struct plan *p, uint32_t i, const bool *placed,
			    uint32_t *seen, uint64_t *bytes)
{
	long layer = plan__layer_of(p->t[i].name);
	uint64_t off = 0;
	uint32_t e;

	for (e = i; e < p->ntensors; e++) {
		const struct plan_tensor *t = &p->t[e];
		uint64_t b = t->alloc;

		if ((t->flags & PLAN_T_VIEW) || plan__layer_of(t->name) != layer)
			break;
		if (t->group >= 0) {
			if (placed[t->group] || seen[t->group] == i + 1)
				continue;
			seen[t->group] = i + 1;
			b = group_bytes(p, &p->g[t->group]);
		}
		off = align_up(off, PLAN_POOL_ALIGN) + b;
	}
	*bytes = off;
	return e;
}

static int pack(struct plan *p, uint64_t pool_max, bool layers, char *err)
{
	uint64_t off = 0, at, block_end = 0;
	uint32_t *seen, end = 0;
	bool *placed, whole = false;
	int pool = -1;

	if (pool_max < PLAN_POOL_ALIGN)
		return base_errf(err, EINVAL, "pool size %" PRIu64 " is below the %d-byte alignment; give a larger pool size",
			       pool_max, PLAN_POOL_ALIGN);
	placed = calloc(p->ngroups ? p->ngroups : 1, sizeof(*placed));
	seen = calloc(p->ngroups ? p->ngroups : 1, sizeof(*seen));
	if (!placed || !seen) {
		free(placed);
		free(seen);
		return base_errf(err, ENOMEM, "out of memory");
	}
	p->npools = 0;
	memset(p->pool_size, 0, sizeof(p->pool_size));
	for (uint32_t i = 0; i < p->ntensors; i++) {
		struct plan_tensor *t = &p->t[i];
		const struct plan_group *g;
		uint64_t bytes;

		if (whole && i >= end) {
			/* a whole layer ends: pad it (and its pool) */
			off = block_end;
			p->pool_size[pool] = off;
			whole = false;
		}
		if (t->flags & PLAN_T_VIEW)
			continue;
		if (layers && i >= end && plan__layer_of(t->name) >= 0) {
			uint64_t padded;

			end = layer_block(p, i, placed, seen, &bytes);
			padded = align_up(bytes, PLAN_LAYER_ALIGN);
			whole = bytes >= PLAN_LAYER_MIN && padded <= pool_max;
			if (whole) {
				at = align_up(off, PLAN_LAYER_ALIGN);
				if (pool < 0 || at > pool_max ||
				    padded > pool_max - at) {
					if (pool + 1 >= PLAN_POOLS_MAX)
						goto out_e2big;
					pool++;
					at = 0;
				}
				off = at;
				block_end = at + padded;
			}
		}
		if (t->group < 0) {
			if (!place(p, &pool, &off, t->alloc, pool_max, &at))
				goto out_e2big;
			t->pool = (uint32_t)pool;
			t->pool_off = at;
			continue;
		}
		if (placed[t->group])
			continue;
		placed[t->group] = true;
		g = &p->g[t->group];
		if (!place(p, &pool, &off, group_bytes(p, g), pool_max, &at))
			goto out_e2big;
		for (uint32_t k = 0; k < g->n; k++) {
			struct plan_tensor *x = &p->t[p->members[g->member0 + k]];

			x->pool = (uint32_t)pool;
			x->pool_off = at;
			at += x->alloc;
		}
	}
	if (whole)
		p->pool_size[pool] = block_end;
	for (uint32_t i = 0; i < p->ntensors; i++) {
		struct plan_tensor *t = &p->t[i];

		if (t->flags & PLAN_T_VIEW) {
			t->pool = p->t[t->target].pool;
			t->pool_off = p->t[t->target].pool_off;
		}
	}
	free(placed);
	free(seen);
	p->npools = (uint32_t)(pool + 1);
	return 0;
out_e2big:
	free(placed);
	free(seen);
	return base_errf(err, E2BIG,
		       "the plan needs more than %d pools of at most %" PRIu64 " bytes for %" PRIu64 " bytes of tensors; give a larger pool size",
		       PLAN_POOLS_MAX, pool_max, p->total_bytes);
}

int plan_pack(struct plan *p, uint64_t pool_max, char *err)
{
	/* whole layers can take up to twice the pools (layers a little over
	 * half a pool): past PLAN_POOLS_MAX, tensor by tensor */
	int ret = pack(p, pool_max, true, err);

	return ret == -E2BIG ? pack(p, pool_max, false, err) : ret;
}

int plan_pack_flat(struct plan *p, uint64_t pool_max, char *err)
{
	return pack(p, pool_max, false, err);
}
