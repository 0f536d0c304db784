/* SPDX-License-Identifier: MIT */
/*
 * The update session's codec (wire_push.h): round trips of every message,
 * and the refusals of the bounds: unknown flags, a timeout over an hour,
 * pools and pieces over their maximum, counts past the payload, a pool
 * naming a descriptor that did not come, trailing bytes; and the fuzz
 * target's seeds decode (test/fuzz/corpus/wire_push).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "t.h"
#include "wire_push.h"

static char err[BASE_ERR_LEN];

static const uint8_t *payload(struct wire_put *w, size_t *n)
{
	struct wire_hdr h;

	T_OK(wire_frame_end(w, err));
	T_OK(wire_hdr_decode(w->buf, w->len, &h, err));
	*n = h.len;
	return w->buf + WIRE_HDR_LEN;
}

static void test_open(void)
{
	struct wire_push_open q = { .flags = WIRE_PUSH_ALLOW_LAYOUT, .base = 3,
				    .timeout_ms = 5000 }, g;
	struct wire_put w;
	const uint8_t *p;
	size_t n;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PUSH_OPEN, 0, 1);
	wire_push_open_put(&w, &q);
	p = payload(&w, &n);
	T_EQ_INT(n, 16);
	T_OK(wire_push_open_get(p, n, &g, err));
	T_EQ_U64(g.base, 3);
	T_EQ_INT(g.flags, WIRE_PUSH_ALLOW_LAYOUT);
	T_EQ_INT(g.timeout_ms, 5000);
	T_EQ_INT(wire_push_open_get(p, n - 1, &g, err), -EBADMSG);
	q.flags = 0x10;
	wire_frame_begin(&w, WIRE_PUSH_OPEN, 0, 1);
	wire_push_open_put(&w, &q);
	p = payload(&w, &n);
	T_EQ_INT(wire_push_open_get(p, n, &g, err), -EBADMSG);
	T_HAS(err, "unknown PUSH_OPEN flags");
	q.flags = 0;
	q.timeout_ms = WIRE_PUSH_TIMEOUT_MAX_MS + 1;
	wire_frame_begin(&w, WIRE_PUSH_OPEN, 0, 1);
	wire_push_open_put(&w, &q);
	p = payload(&w, &n);
	T_EQ_INT(wire_push_open_get(p, n, &g, err), -EBADMSG);
	T_HAS(err, "over an hour");
	q.timeout_ms = 0;
	q.flags = WIRE_PUSH_IN_PLACE | WIRE_PUSH_PARTIAL | WIRE_PUSH_KEEP_SPARE;
	wire_frame_begin(&w, WIRE_PUSH_OPEN, 0, 1);
	wire_push_open_put(&w, &q);
	p = payload(&w, &n);
	T_OK(wire_push_open_get(p, n, &g, err));
	T_EQ_INT(g.flags, WIRE_PUSH_IN_PLACE | WIRE_PUSH_PARTIAL |
			  WIRE_PUSH_KEEP_SPARE);
	wire_put_free(&w);
}

static void test_opened(void)
{
	struct wire_push_opened r = { .session = 7, .version = 4, .base = 3,
				      .tensors = 2, .bytes = 4096,
				      .timeout_ms = 60000, .npools = 2 }, g;
	struct wire_pool pl = { .size = 100, .alloc_size = 4096,
				.export_kind = 1, .fd_index = 0 }, got;
	struct wire_put w;
	const uint8_t *p;
	size_t n;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PUSH_OPEN, WIRE_F_REPLY, 1);
	wire_push_opened_put(&w, &r);
	wire_pool_put(&w, &pl);
	pl.fd_index = 1;
	wire_pool_put(&w, &pl);
	p = payload(&w, &n);
	T_OK(wire_push_opened_get(p, n, &g, err));
	T_EQ_U64(g.session, 7);
	T_EQ_U64(g.version, 4);
	T_EQ_INT(g.npools, 2);
	T_OK(wire_push_opened_next(&g, 2, &got, err));
	T_EQ_U64(got.alloc_size, 4096);
	/* the second pool names fd 1, but only one arrived */
	T_EQ_INT(wire_push_opened_next(&g, 1, &got, err), -EBADMSG);
	T_HAS(err, "a descriptor that did not arrive");
	/* a count past the payload is refused before any pool */
	T_EQ_INT(wire_push_opened_get(p, n - 92, &g, err), -EBADMSG);
	T_HAS(err, "past the end");
	r.npools = WIRE_PUSH_POOLS_MAX + 1;
	wire_frame_begin(&w, WIRE_PUSH_OPEN, WIRE_F_REPLY, 1);
	wire_push_opened_put(&w, &r);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
	wire_put_free(&w);
}

static void test_plan(void)
{
	struct wire_push_piece pc[2] = { { 0, 64, 4, 128, 0 },
					 { 64, 64, 4, 128, 256 } }, gp[WIRE_PUSH_PIECES_MAX];
	struct wire_push_tensor t = { .name = "model.layers.0.mlp.down_proj.weight",
				      .dtype = "BF16", .ndim = 2,
				      .shape = { 4, 64 }, .pool = 1,
				      .offset = 512, .size = 512,
				      .npieces = 2, .pieces = pc }, g;
	struct wire_push_plan m = { .total = 3, .first = 1, .count = 1 }, gm;
	struct wire_put w;
	const uint8_t *p;
	size_t n;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PUSH_PLAN, WIRE_F_REPLY, 1);
	wire_push_plan_head_put(&w, &m);
	wire_push_tensor_put(&w, &t);
	p = payload(&w, &n);
	T_EQ_INT(n, 12 + wire_push_tensor_size(&t));
	T_OK(wire_push_plan_get(p, n, &gm, err));
	T_OK(wire_push_plan_next(&gm, &g, gp, err));
	T_EQ_STR(g.name, t.name);
	T_EQ_INT(g.npieces, 2);
	T_EQ_U64(g.pieces[1].dst, 256);
	T_EQ_U64(g.pieces[1].pitch, 128);
	/* trailing bytes */
	T_OK(wire_push_plan_get(p, n, &gm, err));
	{
		uint8_t buf[1024];

		memcpy(buf, p, n);
		buf[n] = 0;
		T_OK(wire_push_plan_get(buf, n + 1, &gm, err));
		T_EQ_INT(wire_push_plan_next(&gm, &g, gp, err), -EBADMSG);
		T_HAS(err, "trailing");
	}
	/* tensors past the total */
	m.first = 3;
	wire_frame_begin(&w, WIRE_PUSH_PLAN, WIRE_F_REPLY, 1);
	wire_push_plan_head_put(&w, &m);
	wire_push_tensor_put(&w, &t);
	p = payload(&w, &n);
	T_EQ_INT(wire_push_plan_get(p, n, &gm, err), -EBADMSG);
	T_HAS(err, "past its total");
	/* too many pieces: refused by the encoder */
	t.npieces = WIRE_PUSH_PIECES_MAX + 1;
	wire_frame_begin(&w, WIRE_PUSH_PLAN, WIRE_F_REPLY, 1);
	wire_push_tensor_put(&w, &t);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
	wire_put_free(&w);
}

static void test_commit_abort(void)
{
	struct wire_push_run runs[2] = { { 0, 3 }, { 3, 1 } };
	const uint8_t *raw;
	struct wire_put w;
	const uint8_t *p;
	uint64_t s;
	uint32_t nr, fl;
	size_t n;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PUSH_COMMIT, 0, 1);
	wire_push_commit_put(&w, 9, WIRE_PUSH_COMMIT_PREPARE, runs, 2);
	p = payload(&w, &n);
	T_OK(wire_push_commit_get(p, n, &s, &fl, &raw, &nr, err));
	T_EQ_INT(fl, WIRE_PUSH_COMMIT_PREPARE);
	T_EQ_U64(s, 9);
	T_EQ_INT(nr, 2);
	T_EQ_INT(wire_push_run_at(raw, 1).first, 3);
	T_EQ_INT(wire_push_run_at(raw, 0).count, 3);
	T_EQ_INT(wire_push_commit_get(p, n - 1, &s, &fl, &raw, &nr, err), -EBADMSG);
	wire_frame_begin(&w, WIRE_PUSH_COMMIT, 0, 1);
	wire_push_commit_put(&w, 9, 0x4, runs, 2);
	p = payload(&w, &n);
	T_EQ_INT(wire_push_commit_get(p, n, &s, &fl, &raw, &nr, err), -EBADMSG);
	T_HAS(err, "unknown PUSH_COMMIT flags");
	wire_frame_begin(&w, WIRE_PUSH_COMMIT, 0, 1);
	wire_push_commit_put(&w, 9, 0, runs, WIRE_PUSH_RUNS_MAX + 1);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
	wire_frame_begin(&w, WIRE_PUSH_ABORT, 0, 1);
	wire_push_abort_put(&w, 9);
	p = payload(&w, &n);
	T_OK(wire_push_abort_get(p, n, &s, err));
	T_EQ_U64(s, 9);
	wire_put_free(&w);
}

/* PAUSE: 0 resumes, 1 pauses, anything else (or a short or long
 * payload) is malformed. */
static void test_pause(void)
{
	struct wire_put w;
	const uint8_t *p;
	uint32_t op;
	size_t n;

	wire_put_init(&w);
	for (uint32_t o = 0; o < 3; o++) {
		wire_frame_begin(&w, WIRE_PAUSE, 0, 1);
		wire_pause_put(&w, o);
		p = payload(&w, &n);
		T_EQ_INT(n, 4);
		if (o == 2) {
			T_EQ_INT(wire_pause_get(p, n, &op, err), -EBADMSG);
			T_HAS(err, "a PAUSE op other than 0");
			continue;
		}
		T_OK(wire_pause_get(p, n, &op, err));
		T_EQ_INT(op, o);
		T_EQ_INT(wire_pause_get(p, n - 1, &op, err), -EBADMSG);
	}
	wire_frame_begin(&w, WIRE_PAUSE, 0, 1);
	wire_pause_put(&w, WIRE_PAUSE_ON);
	wire_put_u32(&w, 0);
	p = payload(&w, &n);
	T_EQ_INT(wire_pause_get(p, n, &op, err), -EBADMSG);
	T_EQ_INT(strcmp(wire_type_name(WIRE_PAUSE), "PAUSE"), 0);
	wire_put_free(&w);
}

/* Every seed of the fuzz target decodes (so that the fuzzer starts from
 * messages that get past the first check). */
static void test_seeds(void)
{
	static const char *names[] = { "open", "opened", "plan_req", "plan",
				       "commit", "abort", "pause" };
	static struct wire_push_piece pc[WIRE_PUSH_PIECES_MAX];

	for (unsigned i = 0; i < 7; i++) {
		char path[512];
		uint8_t buf[4096];
		size_t n;
		FILE *f;

		snprintf(path, sizeof(path), "%s/test/fuzz/corpus/wire_push/%s",
			 getenv("WC_TOP") ? getenv("WC_TOP") : ".", names[i]);
		f = fopen(path, "rb");
		T_ASSERT(f);
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		T_EQ_INT(buf[0], i);
		switch (i) {
		case 0: {
			struct wire_push_open q;

			T_OK(wire_push_open_get(buf + 1, n - 1, &q, err));
			break;
		}
		case 1: {
			struct wire_push_opened r;
			struct wire_pool pl;

			T_OK(wire_push_opened_get(buf + 1, n - 1, &r, err));
			for (uint32_t k = 0; k < r.npools; k++)
				T_OK(wire_push_opened_next(&r, 2, &pl, err));
			break;
		}
		case 2: {
			uint32_t a, b;

			T_OK(wire_push_plan_req_get(buf + 1, n - 1, &a, &b, err));
			break;
		}
		case 3: {
			struct wire_push_plan m;
			struct wire_push_tensor t;

			T_OK(wire_push_plan_get(buf + 1, n - 1, &m, err));
			for (uint32_t k = 0; k < m.count; k++)
				T_OK(wire_push_plan_next(&m, &t, pc, err));
			break;
		}
		case 4: {
			const uint8_t *raw;
			uint64_t s;
			uint32_t nr, fl;

			T_OK(wire_push_commit_get(buf + 1, n - 1, &s, &fl, &raw, &nr, err));
			break;
		}
		case 5: {
			uint64_t s;

			T_OK(wire_push_abort_get(buf + 1, n - 1, &s, err));
			break;
		}
		case 6: {
			uint32_t op;

			T_OK(wire_pause_get(buf + 1, n - 1, &op, err));
			break;
		}
		}
	}
}

int main(void)
{
	test_open();
	test_opened();
	test_plan();
	test_commit_abort();
	test_pause();
	test_seeds();
	return 0;
}
