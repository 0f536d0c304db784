/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: hostile bytes through every wire decoder. The first
 * byte picks the decoder, the rest is the payload (or, for 0, a frame
 * header). Whatever decodes must encode back to exactly the same bytes
 * (every layout is canonical), and no decoder may read past its input
 * (ASan) or accept a count that the payload cannot hold.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Ends the frame in w and checks its payload equals p[0..n). */
static void same(struct wire_put *w, const uint8_t *p, size_t n)
{
	if (wire_frame_end(w, NULL) || w->len != WIRE_HDR_LEN + n ||
	    memcmp(w->buf + WIRE_HDR_LEN, p, n))
		abort();
}

static void hello_reply(struct wire_put *w, const uint8_t *p, size_t n)
{
	static struct wire_mismatch mm[WIRE_MISMATCH_MAX];
	struct wire_hello_reply r;

	if (wire_hello_reply_get(p, n, &r, NULL))
		return;
	for (uint32_t i = 0; i < r.nmismatch; i++)
		if (wire_hello_reply_next(&r, &mm[i], NULL))
			return;
	wire_frame_begin(w, WIRE_HELLO, WIRE_F_REPLY, 1);
	wire_hello_reply_put(w, &r, mm);
	same(w, p, n);
}

static void manifest(struct wire_put *w, const uint8_t *p, size_t n)
{
	static struct wire_tensor t;
	struct wire_manifest m, m2;

	if (wire_manifest_get(p, n, &m, NULL))
		return;
	m2 = m;
	for (uint32_t i = 0; i < m.count; i++)
		if (wire_manifest_next(&m, &t, NULL))
			return;
	wire_frame_begin(w, WIRE_MANIFEST, WIRE_F_REPLY, 1);
	wire_manifest_head_put(w, &m2);
	for (uint32_t i = 0; i < m2.count; i++) {
		if (wire_manifest_next(&m2, &t, NULL))
			abort();    /* decoded once, must decode again */
		wire_tensor_put(w, &t);
	}
	same(w, p, n);
}

static void attach(struct wire_put *w, const uint8_t *p, size_t n)
{
	struct wire_attach a, a2;
	struct wire_pool pl;

	if (wire_attach_get(p, n, &a, NULL))
		return;
	a2 = a;
	for (uint32_t i = 0; i < a.count; i++)
		if (wire_attach_next(&a, WIRE_FDS_PER_FRAME, &pl, NULL))
			return;
	wire_frame_begin(w, WIRE_ATTACH, WIRE_F_REPLY, 1);
	wire_attach_head_put(w, &a2);
	for (uint32_t i = 0; i < a2.count; i++) {
		if (wire_attach_next(&a2, WIRE_FDS_PER_FRAME, &pl, NULL))
			abort();
		wire_pool_put(w, &pl);
	}
	same(w, p, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char model[WIRE_PATH_MAX + 1];
	struct wire_put w;
	struct wire_hdr h;
	struct wire_hello hl;
	struct wire_error e;
	struct wire_notice nt;
	struct wire_manifest_req mq;
	struct wire_attach_req aq;
	const uint8_t *p = data + 1;
	size_t n = size ? size - 1 : 0;
	const char *js;
	size_t jn;
	uint64_t u64;
	uint32_t u32;

	if (!size)
		return 0;
	wire_put_init(&w);
	switch (data[0] % 12) {
	case 0:
		if (wire_hdr_decode(p, n, &h, NULL) == 0) {
			uint8_t b[WIRE_HDR_LEN];

			if (h.len > WIRE_PAYLOAD_MAX || !h.type ||
			    h.type > WIRE_TYPE_MAX)
				abort();
			wire_hdr_encode(&h, b);
			if (memcmp(b, p, WIRE_HDR_LEN))
				abort();
		}
		break;
	case 1:
		if (wire_hello_get(p, n, &hl, NULL) == 0) {
			wire_frame_begin(&w, WIRE_HELLO, 0, 1);
			wire_hello_put(&w, &hl);
			same(&w, p, n);
		}
		break;
	case 2:
		hello_reply(&w, p, n);
		break;
	case 3:
		if (wire_manifest_req_get(p, n, &mq, NULL) == 0) {
			wire_frame_begin(&w, WIRE_MANIFEST, 0, 1);
			wire_manifest_req_put(&w, &mq);
			same(&w, p, n);
		}
		break;
	case 4:
		manifest(&w, p, n);
		break;
	case 5:
		if (wire_attach_req_get(p, n, &aq, NULL) == 0) {
			wire_frame_begin(&w, WIRE_ATTACH, 0, 1);
			wire_attach_req_put(&w, &aq);
			same(&w, p, n);
		}
		break;
	case 6:
		attach(&w, p, n);
		break;
	case 7:
		if (wire_detach_get(p, n, &u64, NULL) == 0) {
			wire_frame_begin(&w, WIRE_DETACH, 0, 1);
			wire_detach_put(&w, u64);
			same(&w, p, n);
		}
		break;
	case 8:
		if (wire_error_get(p, n, &e, NULL) == 0) {
			wire_frame_begin(&w, WIRE_ERROR, WIRE_F_REPLY, 1);
			wire_error_put(&w, e.code, e.msg);
			same(&w, p, n);
		}
		break;
	case 9:
		if (wire_notice_get(p, n, &nt, NULL) == 0) {
			wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
			wire_notice_put(&w, &nt);
			same(&w, p, n);
		}
		break;
	case 10:
		if (wire_status_get(p, n, &js, &jn, NULL) == 0 &&
		    (js + jn > (const char *)p + n))
			abort();
		if (wire_sleep_get(p, n, &u32, NULL) == 0 && n != 4)
			abort();
		break;
	case 11:
		if (wire_update_get(p, n, model, &u32, NULL) == 0) {
			wire_frame_begin(&w, WIRE_UPDATE, 0, 1);
			wire_update_put(&w, model, u32);
			same(&w, p, n);
		}
		break;
	}
	wire_put_free(&w);
	return 0;
}
