/* SPDX-License-Identifier: MIT */
/* The lifecycle replies of the wire protocol: see wire_life.h. */
#include <string.h>

#include "wire_life.h"

void wire_life_reply_put(struct wire_put *w, const struct wire_life_reply *r)
{
	wire_put_u64(w, r->version);
	wire_put_u32(w, r->level);
	wire_put_u64(w, r->bytes);
	wire_put_u64(w, r->ns);
	wire_put_u64(w, r->verify_ns);
	wire_put_blob(w, r->msg, strnlen(r->msg, WIRE_MSG_MAX), WIRE_MSG_MAX);
}

int wire_life_reply_get(const void *p, size_t n, struct wire_life_reply *r,
			char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	r->version = wire_get_u64(&g);
	r->level = wire_get_u32(&g);
	r->bytes = wire_get_u64(&g);
	r->ns = wire_get_u64(&g);
	r->verify_ns = wire_get_u64(&g);
	wire_get_str(&g, r->msg, WIRE_MSG_MAX);
	return wire_get_end(&g, "lifecycle reply", true, err);
}
