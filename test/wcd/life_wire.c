/* SPDX-License-Identifier: MIT */
/*
 * The lifecycle reply codec (proto/wire/wire_life.h): a round trip, a message
 * over the cap is cut, and truncated payloads, trailing bytes and a message
 * length past the payload are each refused with -EBADMSG.
 */
#include <errno.h>

#include "err.h"
#include "t.h"
#include "wire_life.h"

static void encode(struct wire_put *w, const struct wire_life_reply *r)
{
	wire_frame_begin(w, WIRE_WAKE, WIRE_F_REPLY, 7);
	wire_life_reply_put(w, r);
	T_OK(wire_frame_end(w, NULL));
}

int main(void)
{
	static struct wire_life_reply r, back;
	struct wire_put w;
	char err[BASE_ERR_LEN];
	const uint8_t *p;
	size_t n;

	wire_put_init(&w);
	r = (struct wire_life_reply){ .version = 3, .level = 1,
				      .bytes = 1ull << 40, .ns = 123456789,
				      .verify_ns = 42 };
	snprintf(r.msg, sizeof(r.msg), "awake: version 3");
	encode(&w, &r);
	p = w.buf + WIRE_HDR_LEN;
	n = w.len - WIRE_HDR_LEN;
	T_EQ_U64(n, WIRE_LIFE_REPLY_MIN + strlen(r.msg));
	T_OK(wire_life_reply_get(p, n, &back, err));
	T_EQ_U64(back.version, 3);
	T_EQ_INT(back.level, 1);
	T_EQ_U64(back.bytes, 1ull << 40);
	T_EQ_U64(back.ns, 123456789);
	T_EQ_U64(back.verify_ns, 42);
	T_EQ_STR(back.msg, "awake: version 3");

	/* every truncation fails, and so does a trailing byte */
	for (size_t k = 0; k < n; k++) {
		T_EQ_INT(wire_life_reply_get(p, k, &back, err), -EBADMSG);
		T_ASSERT(err[0]);
	}
	{
		uint8_t more[256];

		memcpy(more, p, n);
		more[n] = 0;
		T_EQ_INT(wire_life_reply_get(more, n + 1, &back, err), -EBADMSG);
		T_HAS(err, "lifecycle reply");
		/* a message length that points past the payload */
		more[WIRE_LIFE_REPLY_MIN - 4] = 0xff;
		T_EQ_INT(wire_life_reply_get(more, n, &back, err), -EBADMSG);
	}

	/* a message over WIRE_MSG_MAX is cut to the cap */
	memset(r.msg, 'x', sizeof(r.msg) - 1);
	r.msg[sizeof(r.msg) - 1] = '\0';
	encode(&w, &r);
	T_OK(wire_life_reply_get(w.buf + WIRE_HDR_LEN, w.len - WIRE_HDR_LEN,
				 &back, err));
	T_EQ_U64(strlen(back.msg), WIRE_MSG_MAX);
	wire_put_free(&w);
	printf("life_wire: ok\n");
	return 0;
}
