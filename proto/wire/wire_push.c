/* SPDX-License-Identifier: MIT */
/* The update session's payloads: see wire_push.h. */
#include <errno.h>
#include <string.h>

#include "err.h"
#include "wire_push.h"

/* A sticky decode failure at the current offset, as wire.c's own. */
static void get_bad(struct wire_get *g, const char *why)
{
	if (g->err)
		return;
	g->err = -EBADMSG;
	g->why = why;
	g->why_off = g->off;
}

void wire_push_open_put(struct wire_put *w, const struct wire_push_open *q)
{
	wire_put_u32(w, q->flags);
	wire_put_u64(w, q->base);
	wire_put_u32(w, q->timeout_ms);
}

int wire_push_open_get(const void *p, size_t n, struct wire_push_open *q,
		       char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	q->flags = wire_get_u32(&g);
	q->base = wire_get_u64(&g);
	q->timeout_ms = wire_get_u32(&g);
	if (q->flags & ~WIRE_PUSH_KNOWN)
		get_bad(&g, "unknown PUSH_OPEN flags");
	if (q->timeout_ms > WIRE_PUSH_TIMEOUT_MAX_MS)
		get_bad(&g, "a PUSH_OPEN timeout over an hour");
	return wire_get_end(&g, "PUSH_OPEN", true, err);
}

void wire_push_opened_put(struct wire_put *w, const struct wire_push_opened *r)
{
	wire_put_u64(w, r->session);
	wire_put_u64(w, r->version);
	wire_put_u64(w, r->base);
	wire_put_u32(w, r->tensors);
	wire_put_u64(w, r->bytes);
	wire_put_u32(w, r->timeout_ms);
	if (r->npools > WIRE_PUSH_POOLS_MAX) {
		w->err = w->err ? w->err : -E2BIG;
		return;
	}
	wire_put_u32(w, r->npools);
}

int wire_push_opened_get(const void *p, size_t n, struct wire_push_opened *r,
			 char *err)
{
	struct wire_get *g = &r->cur;

	memset(r, 0, sizeof(*r));
	wire_get_init(g, p, n);
	r->session = wire_get_u64(g);
	r->version = wire_get_u64(g);
	r->base = wire_get_u64(g);
	r->tensors = wire_get_u32(g);
	r->bytes = wire_get_u64(g);
	r->timeout_ms = wire_get_u32(g);
	r->npools = wire_get_count(g, WIRE_PUSH_POOLS_MAX, WIRE_POOL_LEN);
	if (r->tensors > WIRE_PUSH_TENSORS_MAX)
		get_bad(g, "a PUSH_OPEN reply with more tensors than WIRE_PUSH_TENSORS_MAX");
	return wire_get_end(g, "PUSH_OPEN reply", r->npools == 0, err);
}

int wire_push_opened_next(struct wire_push_opened *r, unsigned nfds,
			  struct wire_pool *pl, char *err)
{
	struct wire_get *g = &r->cur;
	int ret;

	pl->size = wire_get_u64(g);
	pl->alloc_size = wire_get_u64(g);
	pl->export_kind = wire_get_u32(g);
	pl->flags = wire_get_u32(g);
	pl->fd_index = wire_get_u32(g);
	wire_get_bytes(g, pl->handle, WIRE_IPC_HANDLE_LEN);
	if (pl->fd_index != WIRE_NO_FD && pl->fd_index >= nfds)
		get_bad(g, "a pool names a descriptor that did not arrive");
	if (pl->alloc_size < pl->size)
		get_bad(g, "a pool's size is over its allocation");
	ret = wire_get_end(g, "PUSH_OPEN reply", ++r->seen >= r->npools, err);
	return ret;
}

void wire_push_plan_req_put(struct wire_put *w, uint32_t first, uint32_t max)
{
	wire_put_u32(w, first);
	wire_put_u32(w, max);
}

int wire_push_plan_req_get(const void *p, size_t n, uint32_t *first,
			   uint32_t *max, char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	*first = wire_get_u32(&g);
	*max = wire_get_u32(&g);
	return wire_get_end(&g, "PUSH_PLAN", true, err);
}

void wire_push_plan_head_put(struct wire_put *w, const struct wire_push_plan *m)
{
	wire_put_u32(w, m->total);
	wire_put_u32(w, m->first);
	wire_put_u32(w, m->count);
}

size_t wire_push_tensor_size(const struct wire_push_tensor *t)
{
	return WIRE_PUSH_TENSOR_MIN + strlen(t->name) + strlen(t->dtype) +
	       8 * (size_t)t->ndim + WIRE_PUSH_PIECE_LEN * (size_t)t->npieces;
}

void wire_push_tensor_put(struct wire_put *w, const struct wire_push_tensor *t)
{
	if (t->ndim > WIRE_NDIM_MAX || t->npieces > WIRE_PUSH_PIECES_MAX) {
		w->err = w->err ? w->err : -E2BIG;
		return;
	}
	wire_put_str(w, t->name, WIRE_NAME_MAX);
	wire_put_str(w, t->dtype, WIRE_DTYPE_MAX);
	wire_put_u8(w, (uint8_t)t->ndim);
	for (uint32_t i = 0; i < t->ndim; i++)
		wire_put_u64(w, t->shape[i]);
	wire_put_u32(w, t->pool);
	wire_put_u64(w, t->offset);
	wire_put_u64(w, t->size);
	wire_put_u32(w, t->npieces);
	for (uint32_t i = 0; i < t->npieces; i++) {
		const struct wire_push_piece *pc = &t->pieces[i];

		wire_put_u64(w, pc->src);
		wire_put_u64(w, pc->width);
		wire_put_u64(w, pc->height);
		wire_put_u64(w, pc->pitch);
		wire_put_u64(w, pc->dst);
	}
}

int wire_push_plan_get(const void *p, size_t n, struct wire_push_plan *m,
		       char *err)
{
	struct wire_get *g = &m->cur;
	int ret;

	memset(m, 0, sizeof(*m));
	wire_get_init(g, p, n);
	m->total = wire_get_u32(g);
	m->first = wire_get_u32(g);
	m->count = wire_get_count(g, WIRE_PUSH_TENSORS_MAX,
				  WIRE_PUSH_TENSOR_MIN);
	if (m->total > WIRE_PUSH_TENSORS_MAX ||
	    (uint64_t)m->first + m->count > m->total)
		get_bad(g, "PUSH_PLAN reply tensors past its total");
	ret = wire_get_end(g, "PUSH_PLAN reply", m->count == 0, err);
	return ret;
}

int wire_push_plan_next(struct wire_push_plan *m, struct wire_push_tensor *t,
			struct wire_push_piece *pc, char *err)
{
	struct wire_get *g = &m->cur;

	memset(t, 0, sizeof(*t));
	t->pieces = pc;
	wire_get_str(g, t->name, WIRE_NAME_MAX);
	wire_get_str(g, t->dtype, WIRE_DTYPE_MAX);
	t->ndim = wire_get_u8(g);
	if (t->ndim > WIRE_NDIM_MAX)
		get_bad(g, "a tensor has more dims than WIRE_NDIM_MAX");
	for (uint32_t i = 0; i < t->ndim && !g->err; i++)
		t->shape[i] = wire_get_u64(g);
	t->pool = wire_get_u32(g);
	t->offset = wire_get_u64(g);
	t->size = wire_get_u64(g);
	t->npieces = wire_get_count(g, WIRE_PUSH_PIECES_MAX,
				    WIRE_PUSH_PIECE_LEN);
	for (uint32_t i = 0; i < t->npieces && !g->err; i++) {
		pc[i].src = wire_get_u64(g);
		pc[i].width = wire_get_u64(g);
		pc[i].height = wire_get_u64(g);
		pc[i].pitch = wire_get_u64(g);
		pc[i].dst = wire_get_u64(g);
	}
	if (!t->name[0])
		get_bad(g, "a tensor has an empty name");
	return wire_get_end(g, "PUSH_PLAN reply", ++m->seen >= m->count, err);
}

void wire_push_commit_put(struct wire_put *w, uint64_t session,
			  uint32_t flags, const struct wire_push_run *runs,
			  uint32_t nruns)
{
	if (nruns > WIRE_PUSH_RUNS_MAX) {
		w->err = w->err ? w->err : -E2BIG;
		return;
	}
	wire_put_u64(w, session);
	wire_put_u32(w, flags);
	wire_put_u32(w, nruns);
	for (uint32_t i = 0; i < nruns; i++) {
		wire_put_u32(w, runs[i].first);
		wire_put_u32(w, runs[i].count);
	}
}

int wire_push_commit_get(const void *p, size_t n, uint64_t *session,
			 uint32_t *flags, const uint8_t **runs,
			 uint32_t *nruns, char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	*session = wire_get_u64(&g);
	*flags = wire_get_u32(&g);
	if (*flags & ~WIRE_PUSH_COMMIT_KNOWN)
		get_bad(&g, "unknown PUSH_COMMIT flags");
	*nruns = wire_get_count(&g, WIRE_PUSH_RUNS_MAX, 8);
	*runs = g.err ? NULL : g.p + g.off;
	if (!g.err)
		g.off += (size_t)*nruns * 8;
	return wire_get_end(&g, "PUSH_COMMIT", true, err);
}

struct wire_push_run wire_push_run_at(const uint8_t *runs, uint32_t i)
{
	const uint8_t *b = runs + (size_t)i * 8;
	struct wire_push_run r;

	r.first = (uint32_t)b[0] | (uint32_t)b[1] << 8 |
		  (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	r.count = (uint32_t)b[4] | (uint32_t)b[5] << 8 |
		  (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
	return r;
}

void wire_push_abort_put(struct wire_put *w, uint64_t session)
{
	wire_put_u64(w, session);
}

int wire_push_abort_get(const void *p, size_t n, uint64_t *session,
			char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	*session = wire_get_u64(&g);
	return wire_get_end(&g, "PUSH_ABORT", true, err);
}

void wire_pause_put(struct wire_put *w, uint32_t op)
{
	wire_put_u32(w, op);
}

int wire_pause_get(const void *p, size_t n, uint32_t *op, char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	*op = wire_get_u32(&g);
	if (*op != WIRE_PAUSE_OFF && *op != WIRE_PAUSE_ON)
		get_bad(&g, "a PAUSE op other than 0 (resume) or 1 (pause)");
	return wire_get_end(&g, "PAUSE", true, err);
}
