/* SPDX-License-Identifier: MIT */
/*
 * The replies of the lifecycle (reply.h): an OK frame built from a
 * struct wire_life_reply (proto/wire/wire_life.c) or an ERROR, sent to the
 * client that is waiting for it (d->model.life.who: a struct wcd_waiter, so a
 * requester that left in the meantime is simply not answered).
 */
#include <stdarg.h>
#include <stdio.h>

#include "log.h"
#include "life/reply.h"
#include "serve/server.h"
#include "wire_life.h"

void life_reply_frame(struct wcd_client *c, unsigned type, uint64_t id,
		      const struct wire_life_reply *r)
{
	struct wire_put w;

	wire_put_init(&w);
	wire_frame_begin(&w, type, WIRE_F_REPLY, id);
	wire_life_reply_put(&w, r);
	reply_frame(c, id, &w, NULL, 0);
}

void life_reply(struct wcd *d, unsigned type, const struct wire_life_reply *r)
{
	struct wcd_life *L = &d->model.life;
	struct wcd_client *c;
	uint64_t id;

	snprintf(L->last, sizeof(L->last), "%s", r->msg);
	metrics_life(&d->m, type == WIRE_WAKE ? METRICS_WAKE : METRICS_UPDATE,
		     true, r->ns + r->verify_ns, r->bytes);
	c = waiter_take(d, &L->who, &id);
	if (c)
		life_reply_frame(c, type, id, r);
}

void life_fail(struct wcd *d, uint32_t code, const char *fmt, ...)
{
	struct wcd_life *L = &d->model.life;
	struct wcd_client *c;
	uint64_t id;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(L->last, sizeof(L->last), fmt, ap);
	va_end(ap);
	L->failures++;
	metrics_life(&d->m, L->who.type == WIRE_UPDATE ? METRICS_UPDATE :
		     METRICS_WAKE, false, 0, 0);
	log_warn("%s", L->last);
	c = waiter_take(d, &L->who, &id);
	if (c)
		reply_error(c, id, code, false, "%s", L->last);
}
