/* SPDX-License-Identifier: MIT */
/*
 * libwcache: the lifecycle requests SLEEP, WAKE and UPDATE, and an
 * engine's PAUSE and resume (wire_push.h). Each
 * is one request and one reply (proto/wire/wire_life.h); the daemon's refusals
 * come back with its message (EBUSY: leases held, EAGAIN: sleeping).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "err.h"
#include "wire_life.h"
#include "wire_push.h"

/* Sends the frame begun in c->w (type, id) and decodes the reply into r. */
static int life_call(struct wc_conn *c, unsigned type, uint64_t id,
		     struct wc_life_result *r, struct wc_error *err)
{
	struct wire_life_reply *lr;
	struct wc_frame f;
	char e[BASE_ERR_LEN];
	int ret;

	ret = wc__call(c, &c->w, id, type, &f, err);
	if (ret)
		return ret;
	wc__frame_release(&f);
	lr = malloc(sizeof(*lr));
	if (!lr)
		return wc__fail(err, ENOMEM, "out of memory");
	ret = wire_life_reply_get(f.payload, f.h.len, lr, e);
	if (ret) {
		free(lr);
		return wc__fail(err, -ret, "the daemon at %s sent a bad %s reply: %s",
				c->sock, wire_type_name(type), e);
	}
	if (r) {
		r->version = lr->version;
		r->level = lr->level;
		r->bytes = lr->bytes;
		r->seconds = (double)lr->ns / 1e9;
		r->verify_seconds = (double)lr->verify_ns / 1e9;
		wc__strlcpy(r->msg, lr->msg, sizeof(r->msg));
	}
	free(lr);
	wc__ok(err);
	return 0;
}

int wc_sleep(struct wc_conn *c, unsigned level, struct wc_life_result *r,
	     struct wc_error *err)
{
	uint64_t id = c->next_id++;

	wire_frame_begin(&c->w, WIRE_SLEEP, 0, id);
	wire_sleep_put(&c->w, level);
	return life_call(c, WIRE_SLEEP, id, r, err);
}

int wc_wake(struct wc_conn *c, struct wc_life_result *r,
	    struct wc_error *err)
{
	uint64_t id = c->next_id++;

	wire_frame_begin(&c->w, WIRE_WAKE, 0, id);
	return life_call(c, WIRE_WAKE, id, r, err);
}

int wc_update(struct wc_conn *c, const char *model_dir,
	      struct wc_life_result *r, struct wc_error *err)
{
	return wc_update_flags(c, model_dir, 0, r, err);
}

int wc_update_flags(struct wc_conn *c, const char *model_dir,
		    unsigned flags, struct wc_life_result *r,
		    struct wc_error *err)
{
	char *real = NULL;
	uint64_t id;
	int ret;

	if (model_dir && *model_dir) {
		real = realpath(model_dir, NULL);
		if (!real)
			return wc__fail(err, errno,
					"cannot resolve the model directory %s: %s",
					model_dir, strerror(errno));
		if (strlen(real) > WIRE_PATH_MAX) {
			free(real);
			return wc__fail(err, ENAMETOOLONG,
					"the model directory path %s is over %u bytes",
					model_dir, WIRE_PATH_MAX);
		}
	}
	id = c->next_id++;
	wire_frame_begin(&c->w, WIRE_UPDATE, 0, id);
	if (flags & ~WC_UPDATE_ALLOW_LAYOUT_CHANGE) {
		free(real);
		return wc__fail(err, EINVAL, "wc_update_flags: unknown flags 0x%x",
				flags & ~WC_UPDATE_ALLOW_LAYOUT_CHANGE);
	}
	wire_update_put(&c->w, real ? real : "",
			flags & WC_UPDATE_ALLOW_LAYOUT_CHANGE ?
			WIRE_UPDATE_ALLOW_LAYOUT : 0);
	free(real);
	ret = life_call(c, WIRE_UPDATE, id, r, err);
	return ret;
}

static int pause_call(struct wc_conn *c, uint32_t op, struct wc_life_result *r,
		      struct wc_error *err)
{
	uint64_t id = c->next_id++;

	wire_frame_begin(&c->w, WIRE_PAUSE, 0, id);
	wire_pause_put(&c->w, op);
	return life_call(c, WIRE_PAUSE, id, r, err);
}

int wc_pause(struct wc_conn *c, struct wc_life_result *r,
	     struct wc_error *err)
{
	return pause_call(c, WIRE_PAUSE_ON, r, err);
}

/* After the resume, the models an in-place update rewrote take its
 * hashes (one MANIFEST), so that wc_verify checks the new bytes. */
int wc_resume(struct wc_conn *c, struct wc_life_result *r,
	      struct wc_error *err)
{
	int ret = pause_call(c, WIRE_PAUSE_OFF, r, err);

	return ret ? ret : wc__models_refresh(c, err);
}
