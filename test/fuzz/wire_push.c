/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: hostile bytes through the update session's decoders
 * (proto/wire/wire_push.h). The first byte picks the decoder (OPEN, its
 * reply, PLAN, its reply, COMMIT, ABORT, PAUSE), the rest is the payload.
 * Whatever decodes must encode back to exactly the same bytes (every
 * layout is canonical); no decoder may read past its input (ASan) or
 * accept a count the payload cannot hold. Seeds: test/fuzz/corpus/wire_push
 * (one well-formed payload of each, made by test/fuzz/wire_push_seeds.py).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "wire_life.h"
#include "wire_push.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same(struct wire_put *w, const uint8_t *p, size_t n)
{
	if (wire_frame_end(w, NULL) || w->len != WIRE_HDR_LEN + n ||
	    memcmp(w->buf + WIRE_HDR_LEN, p, n))
		abort();
}

static void opened(struct wire_put *w, const uint8_t *p, size_t n)
{
	static struct wire_pool pl[WIRE_PUSH_POOLS_MAX];
	struct wire_push_opened r, r2;

	if (wire_push_opened_get(p, n, &r, NULL))
		return;
	r2 = r;
	for (uint32_t i = 0; i < r.npools; i++)
		if (wire_push_opened_next(&r, WIRE_FDS_PER_FRAME, &pl[i], NULL))
			return;
	wire_frame_begin(w, WIRE_PUSH_OPEN, WIRE_F_REPLY, 1);
	wire_push_opened_put(w, &r2);
	for (uint32_t i = 0; i < r2.npools; i++)
		wire_pool_put(w, &pl[i]);
	same(w, p, n);
}

static void plan(struct wire_put *w, const uint8_t *p, size_t n)
{
	static struct wire_push_tensor t;
	static struct wire_push_piece pc[WIRE_PUSH_PIECES_MAX];
	struct wire_push_plan m, m2;

	if (wire_push_plan_get(p, n, &m, NULL))
		return;
	m2 = m;
	for (uint32_t i = 0; i < m.count; i++)
		if (wire_push_plan_next(&m, &t, pc, NULL))
			return;
	wire_frame_begin(w, WIRE_PUSH_PLAN, WIRE_F_REPLY, 1);
	wire_push_plan_head_put(w, &m2);
	for (uint32_t i = 0; i < m2.count; i++) {
		if (wire_push_plan_next(&m2, &t, pc, NULL))
			abort();    /* decoded once, must decode again */
		if (wire_push_tensor_size(&t) > WIRE_PAYLOAD_MAX)
			abort();
		wire_push_tensor_put(w, &t);
	}
	same(w, p, n);
}

static void commit(struct wire_put *w, const uint8_t *p, size_t n)
{
	static struct wire_push_run runs[WIRE_PUSH_RUNS_MAX];
	const uint8_t *raw;
	uint64_t session;
	uint32_t nruns, flags;

	if (wire_push_commit_get(p, n, &session, &flags, &raw, &nruns, NULL))
		return;
	for (uint32_t i = 0; i < nruns; i++)
		runs[i] = wire_push_run_at(raw, i);
	wire_frame_begin(w, WIRE_PUSH_COMMIT, 0, 1);
	wire_push_commit_put(w, session, flags, runs, nruns);
	same(w, p, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wire_push_open q;
	struct wire_put w;
	uint32_t a, b;
	uint64_t s;
	const uint8_t *p = data + 1;
	size_t n = size ? size - 1 : 0;

	if (!size)
		return 0;
	wire_put_init(&w);
	switch (data[0] % 7) {
	case 0:
		if (!wire_push_open_get(p, n, &q, NULL)) {
			wire_frame_begin(&w, WIRE_PUSH_OPEN, 0, 1);
			wire_push_open_put(&w, &q);
			same(&w, p, n);
		}
		break;
	case 1:
		opened(&w, p, n);
		break;
	case 2:
		if (!wire_push_plan_req_get(p, n, &a, &b, NULL)) {
			wire_frame_begin(&w, WIRE_PUSH_PLAN, 0, 1);
			wire_push_plan_req_put(&w, a, b);
			same(&w, p, n);
		}
		break;
	case 3:
		plan(&w, p, n);
		break;
	case 4:
		commit(&w, p, n);
		break;
	case 5:
		if (!wire_push_abort_get(p, n, &s, NULL)) {
			wire_frame_begin(&w, WIRE_PUSH_ABORT, 0, 1);
			wire_push_abort_put(&w, s);
			same(&w, p, n);
		}
		break;
	case 6:
		if (!wire_pause_get(p, n, &a, NULL)) {
			wire_frame_begin(&w, WIRE_PAUSE, 0, 1);
			wire_pause_put(&w, a);
			same(&w, p, n);
		}
		break;
	}
	wire_put_free(&w);
	return 0;
}
