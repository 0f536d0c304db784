/* SPDX-License-Identifier: MIT */
/*
 * An update session's plan as the trainer needs it: for every checkpoint
 * tensor, its whole shape (what the trainer holds), where its part lies
 * in the pools, and the pieces of the source that make the part (the
 * plan's pieces, their file offsets made relative to the tensor's first
 * byte). The trainer copies each piece; padding rows it never touches
 * stay zero.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "wire_push.h"
#include "push/push_plan.h"
#include "serve/server.h"

uint32_t push_plan_tensors(const struct wcd_version *v)
{
	uint32_t n = 0;

	while (n < v->plan.ntensors && v->plan.t[n].model_idx != UINT32_MAX)
		n++;
	for (uint32_t i = n; i < v->plan.ntensors; i++)
		WC_ASSERT(v->plan.t[i].flags & PLAN_T_VIEW);
	return n;
}

uint64_t push_plan_bytes(const struct wcd_version *v)
{
	uint32_t n = push_plan_tensors(v);
	uint64_t b = 0;

	for (uint32_t i = 0; i < n; i++)
		b += v->plan.t[i].size;
	return b;
}

/* Entry i as the wire carries it; its pieces into pc (room for npieces,
 * bounded by WIRE_PUSH_PIECES_MAX: a plan cuts a tensor in far fewer). */
static void entry(const struct wcd_version *v, uint32_t i,
		  struct wire_push_tensor *t, struct wire_push_piece *pc)
{
	const struct plan_tensor *pt = &v->plan.t[i];
	const struct st_tensor *st = v->model.tensors[pt->model_idx].t;

	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", pt->name);
	snprintf(t->dtype, sizeof(t->dtype), "%s", st_dtype_name(st->dtype));
	t->ndim = st->ndim;
	memcpy(t->shape, st->shape, sizeof(uint64_t) * st->ndim);
	t->pool = pt->pool;
	t->offset = pt->pool_off;
	t->size = pt->size;
	t->npieces = pt->npieces;
	for (uint32_t k = 0; k < pt->npieces; k++) {
		const struct plan_piece *p = &v->plan.pc[pt->piece0 + k];

		WC_ASSERT(p->file_off >= st->file_off);
		pc[k] = (struct wire_push_piece){
			.src = p->file_off - st->file_off, .width = p->width,
			.height = p->height, .pitch = p->src_pitch,
			.dst = p->dst,
		};
	}
	t->pieces = pc;
}

void push_plan_reply(struct wcd_client *c, uint64_t id,
		     const struct wcd_version *v, uint32_t first,
		     uint32_t max)
{
	uint32_t total = push_plan_tensors(v);
	struct wire_push_plan m = { .total = total, .first = first };
	struct wire_push_tensor *t = malloc(sizeof(*t));
	struct wire_push_piece *pc = NULL;
	size_t room = WIRE_PAYLOAD_MAX - 64, used = 12, hdr_off;
	struct wire_put w;

	if (first > total) {
		free(t);
		reply_error(c, id, WIRE_E_STATE, false,
			    "PUSH_PLAN from tensor %u, but the session writes %u",
			    first, total);
		return;
	}
	if (!t) {
		reply_error(c, id, WIRE_E_INTERNAL, false, "out of memory");
		return;
	}
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PUSH_PLAN, WIRE_F_REPLY, id);
	hdr_off = w.len;
	wire_push_plan_head_put(&w, &m);
	for (uint32_t i = first; i < total; i++) {
		const struct plan_tensor *pt = &v->plan.t[i];
		size_t sz;

		if (max && m.count >= max)
			break;
		if (pt->npieces > WIRE_PUSH_PIECES_MAX) {
			w.err = -E2BIG;
			break;
		}
		free(pc);
		pc = malloc(sizeof(*pc) * (pt->npieces ? pt->npieces : 1));
		if (!pc) {
			w.err = -ENOMEM;
			break;
		}
		entry(v, i, t, pc);
		sz = wire_push_tensor_size(t);
		if (used + sz > room)
			break;
		used += sz;
		wire_push_tensor_put(&w, t);
		m.count++;
	}
	free(pc);
	free(t);
	if (!w.err) {
		size_t end = w.len;

		w.len = hdr_off;
		wire_push_plan_head_put(&w, &m);
		w.len = end;
		if (m.first + m.count < m.total)
			w.buf[8] = (uint8_t)(WIRE_F_REPLY | WIRE_F_MORE);
	}
	reply_frame(c, id, &w, NULL, 0);
}
