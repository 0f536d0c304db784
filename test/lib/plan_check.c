/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): the plan tests' checks (plan_check.h). */
#include "plan_check.h"

/* a piece row starts (+1) or ends (-1) at file offset at */
struct pc_event {
	uint64_t at;
	int d;
};

static int pc_event_cmp(const void *a, const void *b)
{
	const struct pc_event *x = a, *y = b;

	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return x->d - y->d;
}

void pc_check_entry(const struct plan *p, uint32_t e)
{
	const struct plan_tensor *t = &p->t[e];
	uint64_t nelem = 1, bytes, at = 0;

	for (uint32_t d = 0; d < t->ndim; d++)
		nelem *= t->shape[d];
	T_OK(st_dtype_bytes(t->dtype, nelem, &bytes));
	if (bytes != t->size)
		T_FAIL("%s: %llu bytes for its shape, size %llu", t->name,
		       (unsigned long long)bytes, (unsigned long long)t->size);
	for (uint32_t k = 0; k < t->npieces; k++) {
		const struct plan_piece *pc = &p->pc[t->piece0 + k];

		T_EQ_INT(pc->entry, e);
		T_EQ_U64(pc->dst, at);
		T_EQ_U64(pc->width * pc->height, pc->size);
		at += pc->size;
	}
	T_EQ_U64(at, t->size);
	if (t->padded_rows && t->shape[0]) {
		T_EQ_U64(t->alloc, t->size / t->shape[0] * t->padded_rows);
	} else if (!t->padded_rows) {
		T_EQ_U64(t->alloc, t->size);
	}
}

void pc_check_cover(const struct plan *p, uint32_t n,
		    const struct model *m, uint32_t model_idx,
		    uint64_t mult)
{
	const struct st_tensor *t = m->tensors[model_idx].t;
	size_t cap = 1024, ne = 0;
	struct pc_event *ev = malloc(cap * sizeof(*ev));
	uint64_t at = t->file_off;
	long depth = 0;

	T_ASSERT(ev);
	for (uint32_t k = 0; k < n; k++) {
		for (uint32_t i = 0; i < p[k].ntensors; i++) {
			const struct plan_tensor *e = &p[k].t[i];

			if (e->model_idx != model_idx)
				continue;
			pc_check_entry(&p[k], i);
			for (uint32_t j = 0; j < e->npieces; j++) {
				const struct plan_piece *pc = &p[k].pc[e->piece0 + j];

				T_EQ_INT(pc->shard, m->tensors[model_idx].shard);
				for (uint64_t h = 0; h < pc->height; h++) {
					if (ne + 2 > cap) {
						cap *= 2;
						ev = realloc(ev, cap * sizeof(*ev));
						T_ASSERT(ev);
					}
					ev[ne++] = (struct pc_event){
						pc->file_off + h * pc->src_pitch, +1 };
					ev[ne++] = (struct pc_event){
						pc->file_off + h * pc->src_pitch +
						pc->width, -1 };
				}
			}
		}
	}
	qsort(ev, ne, sizeof(*ev), pc_event_cmp);
	for (size_t k = 0; k < ne; k++) {
		if (ev[k].at > at && (uint64_t)depth != mult && at <
		    t->file_off + t->nbytes)
			T_FAIL("%s: bytes [%llu, %llu) served %ld times, want %llu",
			       t->name, (unsigned long long)(at - t->file_off),
			       (unsigned long long)(ev[k].at - t->file_off), depth,
			       (unsigned long long)mult);
		if (ev[k].at < t->file_off || ev[k].at > t->file_off + t->nbytes)
			T_FAIL("%s: a piece reaches outside the tensor", t->name);
		at = ev[k].at;
		depth += ev[k].d;
	}
	if (t->nbytes && (ne == 0 || at != t->file_off + t->nbytes ||
			  ev[0].at != t->file_off))
		T_FAIL("%s: not covered from its first to its last byte", t->name);
	free(ev);
}
