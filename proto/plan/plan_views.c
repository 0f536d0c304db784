/* SPDX-License-Identifier: MIT */
/*
 * The plan's entries and names (plan.h): making entries, finding one by
 * name, which pipeline stage holds a tensor, and the statements (views,
 * stacks, groups and aliases) over the checkpoint entries plan.c made,
 * with the check that every manifest name is listed once. Costs: a view
 * statement matches its first part against every entry and finds the
 * others by binary search; the names are checked once, O(V log V) for V
 * views. Calls nothing in plan.c (plan_impl.h).
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

/* Replaces {X} by caps[X]; -ENAMETOOLONG, or -EINVAL for an unbound X. */
static int subst(const char *tmpl, const long caps[26], char *out, size_t cap)
{
	size_t n = 0;

	for (const char *s = tmpl; *s; s++) {
		if (s[0] == '{' && s[1] >= 'A' && s[1] <= 'Z' && s[2] == '}') {
			long v = caps[s[1] - 'A'];
			int k;

			if (v < 0)
				return -EINVAL;
			k = snprintf(out + n, cap - n, "%ld", v);
			if (k < 0 || (size_t)k >= cap - n)
				return -ENAMETOOLONG;
			n += (size_t)k;
			s += 2;
			continue;
		}
		if (n + 1 >= cap)
			return -ENAMETOOLONG;
		out[n++] = *s;
	}
	out[n] = '\0';
	return 0;
}

/* "model.layers.N." -> N, or -1. */
long plan__layer_of(const char *name)
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

void plan__shape_str(uint32_t ndim, const uint64_t *shape, char *buf,
		      size_t cap)
{
	size_t n = (size_t)snprintf(buf, cap, "[");

	for (uint32_t i = 0; i < ndim && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64,
				      i ? ", " : "", shape[i]);
	if (n < cap)
		snprintf(buf + n, cap - n, "]");
}

/* Does this pipeline stage hold the tensor? */
bool plan__in_stage(const struct plan *p, const struct model *m,
		     const char *name)
{
	long layer = plan__layer_of(name);
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

int plan__grow(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
	uint32_t n = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = realloc(*arr, (size_t)n * elem);
	if (!q)
		return -ENOMEM;
	memset((char *)q + (size_t)*cap * elem, 0, (size_t)(n - *cap) * elem);
	*arr = q;
	*cap = n;
	return 0;
}

int plan__add_name(struct plan *p, struct plan__caps *cp, const char *s,
		    const char **out)
{
	if (plan__grow((void **)&p->names, &cp->names, p->nnames + 1,
		 sizeof(*p->names)))
		return -ENOMEM;
	p->names[p->nnames] = strdup(s);
	if (!p->names[p->nnames])
		return -ENOMEM;
	*out = p->names[p->nnames++];
	return 0;
}

long plan_find(const struct plan *p, const char *name)
{
	uint32_t lo = 0, hi = p->ntensors;

	/* the checkpoint entries come first, in strcmp order */
	while (hi > lo && (p->t[hi - 1].flags & PLAN_T_VIEW))
		hi--;
	for (uint32_t i = hi; i < p->ntensors; i++)
		if (!strcmp(p->t[i].name, name))
			return i;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(p->t[mid].name, name);

		if (!c)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

struct plan_tensor *plan__new_entry(struct plan *p, struct plan__caps *cp)
{
	if (p->ntensors >= MODEL_TENSORS_MAX + PLAN_VIEWS_MAX ||
	    plan__grow((void **)&p->t, &cp->t, p->ntensors + 1, sizeof(*p->t)))
		return NULL;
	memset(&p->t[p->ntensors], 0, sizeof(p->t[0]));
	p->t[p->ntensors].group = -1;
	return &p->t[p->ntensors++];
}

/* The name of the text statement s came from. */
static const char *stmt_src(const struct plan_rules *r, const struct plan_stmt *s)
{
	return s->src < r->nsrcs ? r->src[s->src] : "the layout";
}

/* One instance of a view/stack/group statement: members (entry indices,
 * in order) become a group and, unless a group, a view entry. */
static int add_view(struct plan *p, struct plan__caps *cp, const struct model *m,
		    const struct plan_rules *r, const struct plan_stmt *s,
		    const char *name,
		    const uint32_t *mem, uint32_t n, uint32_t per, char *err)
{
	const struct plan_tensor *f = &p->t[mem[0]];
	struct plan_tensor *v;
	uint64_t rows = 0, size = 0;
	uint32_t g;

	for (uint32_t i = 0; i < n; i++) {
		struct plan_tensor *x = &p->t[mem[i]];
		bool same = x->dtype == f->dtype && x->ndim == f->ndim &&
			    x->ndim >= 1 &&
			    !memcmp(x->shape + 1, f->shape + 1,
				    (x->ndim - 1) * sizeof(uint64_t));

		/* -2 marks a member seen in this instance (set to g below):
		 * a part placed twice made the view cover more bytes than
		 * its group holds, so it read past the pool */
		if (x->group == -2)
			return base_errf(err, EINVAL,
				       "%s: %s:%u: '%s' names the part '%s' twice (once its {L}/{E} are bound); a tensor can be one part of a view, stack or group only once: fix the layout",
				       m->path, stmt_src(r, s), s->line,
				       name[0] ? name : "group", x->name);
		if (x->group >= 0)
			return base_errf(err, EINVAL,
				       "%s: tensor '%s' is a part of two views or groups (the second: '%s'); fix the layout so that each tensor is in one",
				       m->path, x->name, name[0] ? name : s->part[0]);
		if (x->alloc != x->size || (x->flags & PLAN_T_VIEW))
			return base_errf(err, EINVAL,
				       "%s: tensor '%s' cannot be a part of '%s': it is padded or itself a view",
				       m->path, x->name, name);
		if (!same && s->kind != PLAN_S_GROUP) {
			char a[256], b[256];

			plan__shape_str(f->ndim, f->shape, a, sizeof(a));
			plan__shape_str(x->ndim, x->shape, b, sizeof(b));
			return base_errf(err, EINVAL,
				       "%s: the parts of '%s' do not concatenate on dim 0: '%s' is %s %s, '%s' is %s %s",
				       m->path, name, f->name, st_dtype_name(f->dtype), a,
				       x->name, st_dtype_name(x->dtype), b);
		}
		if (i < per)
			rows += x->ndim ? x->shape[0] : 0;
		size += x->size;
		x->group = -2;
	}
	if (plan__grow((void **)&p->g, &cp->g, p->ngroups + 1, sizeof(*p->g)) ||
	    plan__grow((void **)&p->members, &cp->mem,
		 p->g && p->ngroups ? p->g[p->ngroups - 1].member0 +
				      p->g[p->ngroups - 1].n + n : n,
		 sizeof(*p->members)))
		return base_errf(err, ENOMEM, "out of memory");
	g = p->ngroups++;
	p->g[g].member0 = g ? p->g[g - 1].member0 + p->g[g - 1].n : 0;
	p->g[g].n = n;
	for (uint32_t i = 0; i < n; i++) {
		p->members[p->g[g].member0 + i] = mem[i];
		p->t[mem[i]].group = (int32_t)g;
	}
	if (s->kind == PLAN_S_GROUP)
		return 0;
	/* the checkpoint's name is served already (and a later part named
	 * so would find the view) */
	if (model_find(m, name))
		return base_errf(err, EINVAL,
			       "%s: %s:%u: %s '%s' is named like a tensor of the checkpoint, which the manifest lists under that name already; give the %s another name",
			       m->path, stmt_src(r, s), s->line,
			       s->kind == PLAN_S_STACK ? "stack" : "view", name,
			       s->kind == PLAN_S_STACK ? "stack" : "view");
	v = plan__new_entry(p, cp);
	if (!v || plan__add_name(p, cp, name, &v->name))
		return base_errf(err, ENOMEM, "out of memory");
	f = &p->t[mem[0]];
	v->model_idx = UINT32_MAX;
	v->dtype = f->dtype;
	v->split = f->split;
	v->flags = PLAN_T_VIEW;
	v->target = mem[0];
	v->size = v->alloc = size;
	if (s->kind == PLAN_S_STACK) {
		if (f->ndim + 1 > ST_NDIM_MAX)
			return base_errf(err, EINVAL, "%s: stack '%s' would have more than %d dims",
				       m->path, name, ST_NDIM_MAX);
		v->ndim = f->ndim + 1;
		v->shape[0] = n / per;
		v->shape[1] = rows;
		memcpy(v->shape + 2, f->shape + 1,
		       (f->ndim - 1) * sizeof(uint64_t));
	} else {
		v->ndim = f->ndim;
		memcpy(v->shape, f->shape, sizeof(v->shape));
		v->shape[0] = rows;
	}
	return 0;
}

static int build_stmt(struct plan *p, struct plan__caps *cp, const struct model *m,
		      const struct plan_rules *r, const struct plan_stmt *s,
		      uint32_t nck, char *err)
{
	char name[PLAN_PATTERN_MAX], part[PLAN_PATTERN_MAX];
	uint32_t mem[PLAN_PARTS_MAX * 1024];
	long caps[26];
	int ret;

	for (uint32_t i = 0; i < nck; i++) {
		uint32_t n = 0, per = s->nparts, e0, e1;

		if (!plan__match(s->part[0], p->t[i].name, caps))
			continue;
		if (s->kind == PLAN_S_STACK) {
			if (caps['E' - 'A'] != (long)p->expert_begin)
				continue;
			e0 = p->expert_begin;
			e1 = p->expert_end;
			if ((uint64_t)(e1 - e0) * per > sizeof(mem) / sizeof(mem[0]))
				return base_errf(err, E2BIG, "%s: stack '%s' has more than %zu parts",
					       m->path, s->name,
					       sizeof(mem) / sizeof(mem[0]));
			if (e1 <= e0)
				return base_errf(err, EINVAL, "%s: stack '%s' needs the expert count: add an 'experts KEY' line to the layout",
					       m->path, s->name);
		} else {
			e0 = 0;
			e1 = 1;
		}
		if (subst(s->name, caps, name, sizeof(name)))
			return base_errf(err, EINVAL, "%s: '%s' (from '%s'): its name uses a capture its first part does not bind",
				       m->path, s->name, p->t[i].name);
		for (uint32_t e = e0; e < e1; e++) {
			if (s->kind == PLAN_S_STACK)
				caps['E' - 'A'] = e;
			for (uint32_t k = 0; k < s->nparts; k++) {
				long at;

				if (subst(s->part[k], caps, part, sizeof(part)))
					return base_errf(err, EINVAL, "%s: '%s': part '%s' uses a capture the first part does not bind",
						       m->path, s->name, s->part[k]);
				at = plan_find(p, part);
				if (at < 0 || (uint32_t)at >= nck)
					return base_errf(err, EINVAL,
						       "%s: '%s' needs '%s', which this rank does not hold (the checkpoint lacks it%s); fix the layout or the checkpoint",
						       m->path, name[0] ? name : "group", part,
						       s->kind == PLAN_S_STACK ? ", or the expert is on another rank" : "");
				mem[n++] = (uint32_t)at;
			}
		}
		ret = add_view(p, cp, m, r, s, name, mem, n, per, err);
		if (ret)
			return ret;
	}
	return 0;
}

static int build_alias(struct plan *p, struct plan__caps *cp, const struct model *m,
		       const struct plan_stmt *s, uint32_t nck, char *err)
{
	struct plan_tensor *v;
	long at;
	int64_t on;

	if (s->cond[0] && !(model_cfg_int(&m->cfg, s->cond, &on) && on))
		return 0;
	if (model_find(m, s->name) || !plan__in_stage(p, m, s->name))
		return 0;
	at = plan_find(p, s->part[0]);
	if (at < 0 || (uint32_t)at >= nck)
		return 0;
	v = plan__new_entry(p, cp);
	if (!v || plan__add_name(p, cp, s->name, &v->name))
		return base_errf(err, ENOMEM, "out of memory");
	*v = p->t[at];
	v->name = p->names[p->nnames - 1];
	v->model_idx = UINT32_MAX;
	v->flags = PLAN_T_VIEW | PLAN_T_ALIAS;
	v->target = (uint32_t)at;
	v->npieces = 0;
	v->group = -1;
	v->alloc = v->size;
	return 0;
}

struct vname {
	const char *name;
	uint32_t entry;
};

static int vname_cmp(const void *a, const void *b)
{
	const struct vname *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->entry > y->entry) - (x->entry < y->entry);
}

/* The statement that made entry e: first[i] is the first entry of
 * statement i (entries are made in statement order). */
static const struct plan_stmt *stmt_of(const struct plan_rules *r,
				       const uint32_t *first, uint32_t e)
{
	uint32_t lo = 0, hi = r->nstmts;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (first[mid] <= e)
			lo = mid;
		else
			hi = mid;
	}
	return &r->s[lo];
}

/* Every view, stack and alias name once in the manifest (an attach failed
 * on a manifest listing a name twice; add_view refuses a checkpoint
 * tensor's name, build_alias skips it). O(V log V) for V views. */
static int check_names(const struct plan *p, const struct model *m,
		       const struct plan_rules *r, uint32_t nck,
		       const uint32_t *first, char *err)
{
	uint32_t nv = p->ntensors - nck;
	struct vname *v;
	int ret = 0;

	if (!nv)
		return 0;
	v = malloc(nv * sizeof(*v));
	if (!v)
		return base_errf(err, ENOMEM, "out of memory");
	for (uint32_t i = 0; i < nv; i++)
		v[i] = (struct vname){ p->t[nck + i].name, nck + i };
	qsort(v, nv, sizeof(*v), vname_cmp);
	for (uint32_t i = 0; i < nv && !ret; i++) {
		const struct plan_stmt *s, *o;

		if (i + 1 < nv && !strcmp(v[i].name, v[i + 1].name)) {
			o = stmt_of(r, first, v[i].entry);
			s = stmt_of(r, first, v[i + 1].entry);
			ret = base_errf(err, EINVAL,
				      "%s: %s:%u: '%s' is also the name made at %s:%u; give each view, stack and alias a name of its own%s",
				      m->path, stmt_src(r, s), s->line, v[i].name,
				      stmt_src(r, o), o->line,
				      o == s ? " (a name without {L} is made once per layer)" : "");
		}
	}
	free(v);
	return ret;
}

int plan__statements(struct plan *p, struct plan__caps *cp,
		      const struct model *m, const struct plan_rules *r,
		      uint32_t nck, char *err)
{
	uint32_t *first;
	int rc = 0;

	if (!r->nstmts)
		return 0;
	first = malloc(r->nstmts * sizeof(*first));
	if (!first)
		return base_errf(err, ENOMEM, "out of memory");
	for (uint32_t i = 0; i < r->nstmts && !rc; i++) {
		first[i] = p->ntensors;
		if (r->s[i].kind == PLAN_S_ALIAS)
			rc = build_alias(p, cp, m, &r->s[i], nck, err);
		else
			rc = build_stmt(p, cp, m, r, &r->s[i], nck, err);
	}
	if (!rc)
		rc = check_names(p, m, r, nck, first, err);
	free(first);
	return rc;
}
