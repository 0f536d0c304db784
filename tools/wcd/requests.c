/* SPDX-License-Identifier: MIT */
/*
 * The requests a client can make, one function each; serve/conn.c does the
 * framing and calls client_dispatch with one whole, header-checked frame.
 * Every request gets exactly one reply (ATTACH: one frame per 253 pools) or
 * an ERROR; a malformed payload gets an ERROR and the connection closes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "wcd.h"
#include "serve/server.h"
#include "model/versions.h"
#include "life/lifecycle.h"
#include "push/push.h"
#include "handover/handover.h"
#include "metrics/metrics.h"

/* MANIFEST and ATTACH need a successful HELLO; checked after the payload
 * (a malformed frame is malformed in any state). */
static bool need_hello(struct wcd_client *c)
{
	if (c->hello_ok)
		return true;
	reply_error(c, c->h.id, WIRE_E_STATE, false,
		    "%s before a successful HELLO: send HELLO (with a matching identity) first",
		    wire_type_name(c->h.type));
	return false;
}

static void do_hello(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wcd_version *v = wcd_current(d);
	struct wire_hello h;
	struct wire_hello_reply r = { 0 };
	struct wire_mismatch *mm = NULL;
	struct ident *peer = NULL;
	char err[BASE_ERR_LEN];
	struct wire_put w;
	int ret;

	ret = wire_hello_get(p, n, &h, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (!(h.flags & WIRE_HELLO_NO_IDENTITY)) {
		peer = malloc(sizeof(*peer));
		mm = calloc(WIRE_MISMATCH_MAX, sizeof(*mm));
		if (!peer || !mm) {
			reply_error(c, c->h.id, WIRE_E_INTERNAL, true,
				    "out of memory");
			goto out_free;
		}
		ret = ident_decode(peer, h.identity, h.identity_len, err);
		if (ret) {
			reply_error(c, c->h.id, WIRE_E_MALFORMED, true,
				    "HELLO carries an identity that cannot be decoded: %s",
				    err);
			goto out_free;
		}
		r.nmismatch = ident_mismatch(&v->ident, peer, mm,
						WIRE_MISMATCH_MAX);
	}
	r.status = r.nmismatch ? WIRE_HELLO_MISMATCH : WIRE_HELLO_OK;
	memcpy(r.digest, v->digest, sizeof(r.digest));
	r.version = v->number;
	r.tensors = v->plan.ntensors;
	r.bytes = v->plan.total_bytes;
	r.daemon_pid = (uint32_t)getpid();
	r.identity = v->ident_enc;
	r.identity_len = v->ident_len;
	if (r.nmismatch) {
		d->srv->mismatches++;
		d->m.refusals[WIRE_E_MISMATCH]++;
		log_warn("client pid %d (%s): identity mismatch in %u field(s), first: %s (daemon %s, client %s)",
			 (int)c->pid, h.label, r.nmismatch, mm[0].field,
			 mm[0].daemon, mm[0].client);
	} else {
		struct log_fields lf = { .client_pid = c->pid,
					 .version = v->number };

		c->hello_ok = true;
		log_with(LOG_DEBUG, &lf, "client pid %d (%s): hello ok%s",
			 (int)c->pid, h.label,
			 peer ? "" : " (no identity check)");
	}
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HELLO, WIRE_F_REPLY, c->h.id);
	wire_hello_reply_put(&w, &r, mm);
	reply_send(c, &w, NULL, 0);
out_free:
	free(peer);
	free(mm);
}

static void do_manifest(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd_version *v = wcd_current(c->d);
	struct wire_manifest_req q;
	struct wire_manifest m = { 0 };
	struct wire_tensor *t;
	char err[BASE_ERR_LEN];
	struct wire_put w;
	size_t room = WIRE_PAYLOAD_MAX - 64, used = 20;
	size_t hdr_off;
	int ret;

	ret = wire_manifest_req_get(p, n, &q, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (!need_hello(c))
		return;
	if (q.first > v->plan.ntensors) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "MANIFEST from tensor %u, but the model has %u",
			    q.first, v->plan.ntensors);
		return;
	}
	t = malloc(sizeof(*t));
	if (!t) {
		reply_error(c, c->h.id, WIRE_E_INTERNAL, false, "out of memory");
		return;
	}
	m.version = v->number;
	m.total = v->plan.ntensors;
	m.first = q.first;
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_MANIFEST, WIRE_F_REPLY, c->h.id);
	hdr_off = w.len;
	wire_manifest_head_put(&w, &m);
	for (uint32_t i = q.first; i < v->plan.ntensors; i++) {
		const struct plan_tensor *pt = &v->plan.t[i];
		size_t sz;

		if (q.max && m.count >= q.max)
			break;
		memset(t, 0, sizeof(*t));
		snprintf(t->name, sizeof(t->name), "%s", pt->name);
		snprintf(t->dtype, sizeof(t->dtype), "%s",
			 st_dtype_name(pt->dtype));
		t->ndim = pt->ndim;
		memcpy(t->shape, pt->shape, sizeof(uint64_t) * pt->ndim);
		t->pool = pt->pool;
		t->offset = pt->pool_off;
		t->nbytes = pt->size;
		if (v->hashed) {
			memcpy(t->hash, v->hash[i], WIRE_HASH_LEN);
			t->flags = WIRE_T_HASHED;
		}
		if (pt->flags & PLAN_T_VIEW)
			t->flags |= WIRE_T_VIEW;
		if (pt->flags & PLAN_T_ALIAS)
			t->flags |= WIRE_T_ALIAS;
		t->padded_rows = pt->padded_rows;
		sz = wire_tensor_size(t);
		if (used + sz > room)
			break;
		used += sz;
		wire_tensor_put(&w, t);
		m.count++;
	}
	free(t);
	/* rewrite the head with the final count and the MORE flag */
	if (!w.err) {
		size_t end = w.len;

		w.len = hdr_off;
		wire_manifest_head_put(&w, &m);
		w.len = end;
		if (m.first + m.count < m.total) {
			uint32_t fl = WIRE_F_REPLY | WIRE_F_MORE;

			w.buf[8] = (uint8_t)fl;
		}
	}
	reply_send(c, &w, NULL, 0);
}

static void do_attach(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wire_attach_req q;
	struct wire_attach a = { 0 };
	struct wcd_version *v;
	char err[BASE_ERR_LEN];
	struct wire_put w;
	int ret, vi;

	ret = wire_attach_req_get(p, n, &q, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (!need_hello(c))
		return;
	vi = version_find(wcd_model(d), q.version);
	if (vi < 0) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "model version %" PRIu64 " is not resident (the current one is %" PRIu64 "): send HELLO again and attach that",
			    q.version, wcd_current(d)->number);
		return;
	}
	v = &wcd_model(d)->ver[vi];
	if ((q.flags & WIRE_ATTACH_WRITABLE) && v->npools && v->pools[0].sealed) {
		reply_error(c, c->h.id, WIRE_E_READONLY, false,
			    "read-write attach refused: the pools are sealed so that no engine can change a byte another engine reads; attach read-only");
		return;
	}
	if (c->nleases >= WCD_LEASES_PER_CLIENT) {
		reply_error(c, c->h.id, WIRE_E_LIMIT, false,
			    "this connection already holds %u leases (the limit): detach some first",
			    c->nleases);
		return;
	}
	a.lease = version_attach(c, vi);
	a.version = v->number;
	a.total = v->npools;
	do {
		int fds[WIRE_FDS_PER_FRAME];
		unsigned nfds = 0;
		uint32_t fl = WIRE_F_REPLY;

		a.count = a.total - a.first;
		if (a.count > WIRE_FDS_PER_FRAME)
			a.count = WIRE_FDS_PER_FRAME;
		if (a.first + a.count < a.total)
			fl |= WIRE_F_MORE;
		wire_put_init(&w);
		wire_frame_begin(&w, a.first ? WIRE_ATTACH_MORE : WIRE_ATTACH,
				 fl, c->h.id);
		wire_attach_head_put(&w, &a);
		for (uint32_t i = a.first; i < a.first + a.count; i++) {
			const struct gpu_pool *gp = &v->pools[i];
			struct wire_pool pl = {
				.size = gp->size, .alloc_size = gp->alloc_size,
				.export_kind = d->dev.export_kind,
				.flags = gp->sealed ? WIRE_POOL_SEALED : 0,
				.fd_index = WIRE_NO_FD,
			};

			if (gp->fd >= 0) {
				pl.fd_index = nfds;
				fds[nfds++] = gp->fd;
			}
			memcpy(pl.handle, gp->ipc_handle, WIRE_IPC_HANDLE_LEN);
			wire_pool_put(&w, &pl);
		}
		reply_send(c, &w, fds, nfds);
		a.first += a.count;
	} while (a.first < a.total && !c->closing);
	{
		struct log_fields lf = { .client_pid = c->pid,
					 .lease = a.lease,
					 .version = v->number };

		log_with(LOG_DEBUG, &lf,
			 "client pid %d: lease %" PRIu64 " on version %" PRIu64 " (%u pools)",
			 (int)c->pid, a.lease, v->number, v->npools);
	}
}

static void do_detach(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	char err[BASE_ERR_LEN];
	struct wire_put w;
	uint64_t lease;
	int ret;

	ret = wire_detach_get(p, n, &lease, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	for (unsigned i = 0; i < c->nleases; i++) {
		if (c->leases[i].id != lease)
			continue;
		struct log_fields lf = { .client_pid = c->pid, .lease = lease };

		client_lease_drop(c, i);
		log_with(LOG_DEBUG, &lf, "client pid %d: lease %" PRIu64 " detached",
			 (int)c->pid, lease);
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_DETACH, WIRE_F_REPLY, c->h.id);
		reply_send(c, &w, NULL, 0);
		return;
	}
	reply_error(c, c->h.id, WIRE_E_NO_LEASE, false,
		    "lease %" PRIu64 " is not held by this connection", lease);
}

static void do_simple(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	char err[BASE_ERR_LEN];
	struct wire_put w;
	char *json;
	int ret;

	switch (c->h.type) {
	case WIRE_PING:
		ret = wire_ping_get(p, n, err);
		if (ret)
			break;
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_PING, WIRE_F_REPLY, c->h.id);
		wire_put_bytes(&w, p, n);
		reply_send(c, &w, NULL, 0);
		return;
	case WIRE_STATUS:
		ret = wire_empty_get(p, n, "STATUS", err);
		if (ret)
			break;
		json = status_json(d);
		if (!json) {
			reply_error(c, c->h.id, WIRE_E_INTERNAL, false,
				    "cannot build the status");
			return;
		}
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_STATUS, WIRE_F_REPLY, c->h.id);
		wire_status_put(&w, json, strlen(json));
		free(json);
		reply_send(c, &w, NULL, 0);
		return;
	case WIRE_METRICS: {
		/* the text GET /metrics serves, as a STATUS-shaped blob */
		char *text = malloc(METRICS_TEXT_MAX);
		int len;

		ret = wire_empty_get(p, n, "METRICS", err);
		if (ret) {
			free(text);
			break;
		}
		len = text ? metrics_render(d, text, METRICS_TEXT_MAX) : -ENOMEM;
		if (len < 0) {
			free(text);
			reply_error(c, c->h.id, WIRE_E_INTERNAL, false,
				    "cannot build the metrics: %s", strerror(-len));
			return;
		}
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_METRICS, WIRE_F_REPLY, c->h.id);
		wire_status_put(&w, text, (size_t)len);
		free(text);
		reply_send(c, &w, NULL, 0);
		return;
	}
	case WIRE_SHUTDOWN:
		ret = wire_empty_get(p, n, "SHUTDOWN", err);
		if (ret)
			break;
		if (c->uid != geteuid()) {
			reply_error(c, c->h.id, WIRE_E_PERM, false,
				    "SHUTDOWN is only accepted from the daemon's own uid %u (you are uid %u)",
				    (unsigned)geteuid(), (unsigned)c->uid);
			return;
		}
		log_info("client pid %d asked for SHUTDOWN", (int)c->pid);
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_SHUTDOWN, WIRE_F_REPLY, c->h.id);
		reply_send(c, &w, NULL, 0);
		server_stop(d);
		return;
	default:
		reply_error(c, c->h.id, WIRE_E_NOT_IMPLEMENTED, false,
			    "%s is not implemented yet in this wcd",
			    wire_type_name(c->h.type));
		return;
	}
	reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
}

void client_dispatch(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;

	d->srv->requests++;
	c->requests++;
	if (c->h.flags & WIRE_F_REPLY) {
		reply_error(c, c->h.id, WIRE_E_TYPE, true,
			    "a %s frame with the reply flag: clients send requests only",
			    wire_type_name(c->h.type));
		return;
	}
	if (life_refusal(d, c->h.type)) {
		reply_error(c, c->h.id, WIRE_E_SLEEPING, false, "%s",
			    life_refusal(d, c->h.type));
		return;
	}
	if (push_refusal(d, c->h.type)) {
		reply_error(c, c->h.id, WIRE_E_BUSY, false, "%s",
			    push_refusal(d, c->h.type));
		return;
	}
	switch (c->h.type) {
	case WIRE_HELLO:
		do_hello(c, p, n);
		return;
	case WIRE_SLEEP:
	case WIRE_WAKE:
	case WIRE_UPDATE:
		life_request(d, c, c->h.id, c->h.type, p, n);
		return;
	case WIRE_MANIFEST:
		do_manifest(c, p, n);
		return;
	case WIRE_ATTACH: {
		uint64_t t0 = rx_now_ns();

		do_attach(c, p, n);
		metrics_attach(&d->m, rx_now_ns() - t0);
		return;
	}
	case WIRE_DETACH:
		do_detach(c, p, n);
		return;
	case WIRE_HANDOVER:
		handover_request(c, p, n);
		return;
	case WIRE_PUSH_OPEN:
	case WIRE_PUSH_PLAN:
	case WIRE_PUSH_COMMIT:
	case WIRE_PUSH_ABORT:
	case WIRE_PAUSE:
		push_request(c, p, n);
		return;
	case WIRE_NOTICE:
	case WIRE_ERROR:
	case WIRE_ATTACH_MORE:
		reply_error(c, c->h.id, WIRE_E_TYPE, true,
			    "%s is not a request", wire_type_name(c->h.type));
		return;
	default:
		do_simple(c, p, n);
	}
}

