/* SPDX-License-Identifier: MIT */
/*
 * What plan.c (the checkpoint entries' cuts and pieces, packing) calls in
 * plan_views.c (making and finding entries, the pipeline stages, the
 * statements: views, stacks, groups, aliases); internal to proto/ (double
 * underscore). plan_views.c calls nothing in plan.c.
 */
#ifndef WC_PLAN_IMPL_H
#define WC_PLAN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "plan.h"

struct plan__caps {            /* capacities of the plan's arrays */
	uint32_t t, pc, g, mem, names;
};

/* Grows *arr (elem bytes each, *cap of them) to hold need, zeroing the
 * new room; -ENOMEM. */
int plan__grow(void **arr, uint32_t *cap, uint32_t need, size_t elem);
/* A new zeroed entry (group -1), or NULL (memory, or the bound on
 * entries). */
struct plan_tensor *plan__new_entry(struct plan *p, struct plan__caps *cp);
/* A copy of s owned by the plan, in *out; -ENOMEM. */
int plan__add_name(struct plan *p, struct plan__caps *cp, const char *s,
		   const char **out);
void plan__shape_str(uint32_t ndim, const uint64_t *shape, char *buf,
		     size_t cap);
/* "model.layers.N." -> N, or -1. */
long plan__layer_of(const char *name);
/* Does this pipeline stage hold the tensor? */
bool plan__in_stage(const struct plan *p, const struct model *m,
		    const char *name);
/* The statements of r over the nck checkpoint entries (plan_views.c). */
int plan__statements(struct plan *p, struct plan__caps *cp,
		     const struct model *m, const struct plan_rules *r,
		     uint32_t nck, char *err);

#endif
