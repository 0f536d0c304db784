/* SPDX-License-Identifier: MIT */
/*
 * The daemon's socket: connections, framing, requests and leases, all in
 * the one loop.
 *
 * Each client has one receive in flight (a header of WIRE_HDR_LEN bytes,
 * then exactly its payload), a bounded queue of outgoing frames (at most
 * WCD_OUTQ_MAX; receiving pauses while it is half full, so a client that
 * pipelines without reading cannot make the daemon buffer without bound),
 * and a pidfd watch on its process. A lease ends when the client detaches,
 * disconnects or dies. A malformed frame gets an ERROR reply, then that
 * connection is closed; no other client notices.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "wcd.h"

#define container_of(p, type, member) \
	((type *)(void *)((char *)(p) - offsetof(type, member)))
#define STOP_FLUSH_NS 1000000000ull   /* notices get 1 s to leave */

struct out_msg {
	struct out_msg *next;
	struct wire_put w;
	struct iovec iov;
	int fds[WIRE_FDS_PER_FRAME];
	unsigned nfds;
	bool close_after;
};

struct lease {
	uint64_t id;
	int ver;                      /* index into d->ver */
};

struct wcd_client {
	struct wcd *d;
	struct wcd_client *next, *prev;
	int fd;
	pid_t pid;
	uid_t uid;
	struct rx_recv rx;
	uint8_t hdr[WIRE_HDR_LEN];
	struct wire_hdr h;
	uint8_t *payload;
	size_t pcap;
	bool recv_paused;
	struct rx_send tx;
	struct out_msg *oq_head, *oq_tail;
	unsigned noq;
	struct rx_child watch;
	bool watching;
	bool hello_ok;
	bool closing;
	unsigned nleases;
	struct lease leases[WCD_LEASES_PER_CLIENT];
	uint64_t requests;
};

static void client_recv_hdr(struct wcd_client *c);
static void client_close(struct wcd_client *c, const char *why);
static void server_maybe_done(struct wcd *d);

/* --- leases ---------------------------------------------------------------- */

static void lease_drop(struct wcd_client *c, unsigned i)
{
	struct wcd_version *v = &c->d->ver[c->leases[i].ver];

	if (v->leases)
		v->leases--;
	c->leases[i] = c->leases[--c->nleases];
}

static void leases_end(struct wcd_client *c, const char *why)
{
	if (c->nleases)
		log_info("client pid %d: %u lease(s) ended (%s)", (int)c->pid,
			 c->nleases, why);
	while (c->nleases)
		lease_drop(c, c->nleases - 1);
}

/* --- lifetime ---------------------------------------------------------------- */

static bool client_busy(const struct wcd_client *c)
{
	return rx_op_busy(&c->rx.op) || rx_op_busy(&c->tx.op) ||
	       (c->watching && rx_op_busy(&c->watch.op));
}

static void client_free_if_idle(struct wcd_client *c)
{
	struct wcd *d = c->d;

	if (!c->closing || client_busy(c))
		return;
	while (c->oq_head) {
		struct out_msg *m = c->oq_head;

		c->oq_head = m->next;
		wire_put_free(&m->w);
		free(m);
	}
	if (c->watching)
		rx_child_close(&c->watch);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		d->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	d->nclients--;
	free(c->payload);
	free(c);
	server_maybe_done(d);
}

static void client_close(struct wcd_client *c, const char *why)
{
	if (c->closing)
		return;
	c->closing = true;
	log_debug("client pid %d: closing (%s)", (int)c->pid, why);
	leases_end(c, why);
	shutdown(c->fd, SHUT_RDWR);
	if (rx_op_busy(&c->rx.op))
		rx_cancel(&c->rx.op);
	if (rx_op_busy(&c->tx.op))
		rx_cancel(&c->tx.op);
	if (c->watching && rx_op_busy(&c->watch.op))
		rx_cancel(&c->watch.op);
	client_free_if_idle(c);
}

/* --- sending ------------------------------------------------------------- */

static void client_send_next(struct wcd_client *c);

static void client_sent(struct rx_send *s, int res)
{
	struct wcd_client *c = container_of(s, struct wcd_client, tx);
	struct out_msg *m = c->oq_head;
	bool close_after = m && m->close_after;

	if (m) {
		c->oq_head = m->next;
		if (!c->oq_head)
			c->oq_tail = NULL;
		c->noq--;
		wire_put_free(&m->w);
		free(m);
	}
	if (c->closing) {
		client_free_if_idle(c);
		return;
	}
	if (res < 0) {
		client_close(c, "send failed: the peer went away");
		return;
	}
	if (close_after) {
		client_close(c, "closed after an error");
		return;
	}
	client_send_next(c);
	if (c->recv_paused && c->noq < WCD_OUTQ_MAX / 2) {
		c->recv_paused = false;
		client_recv_hdr(c);
	}
}

static void client_send_next(struct wcd_client *c)
{
	struct out_msg *m = c->oq_head;
	int ret;

	if (!m || rx_op_busy(&c->tx.op) || c->closing)
		return;
	m->iov.iov_base = m->w.buf;
	m->iov.iov_len = m->w.len;
	ret = rx_send_start(&c->d->loop, &c->tx, c->fd, &m->iov, 1,
			    m->nfds ? m->fds : NULL, m->nfds, client_sent);
	if (ret)
		client_close(c, "cannot start a send");
}

/* Queues the frame built in w (taken over: w is reset). */
static void client_queue(struct wcd_client *c, struct wire_put *w,
			 const int *fds, unsigned nfds, bool close_after)
{
	struct out_msg *m;

	if (c->closing) {
		wire_put_free(w);
		return;
	}
	m = calloc(1, sizeof(*m));
	if (!m || c->noq >= WCD_OUTQ_MAX) {
		free(m);
		wire_put_free(w);
		client_close(c, m ? "output queue full" : "out of memory");
		return;
	}
	m->w = *w;
	wire_put_init(w);
	if (nfds)
		memcpy(m->fds, fds, nfds * sizeof(int));
	m->nfds = nfds;
	m->close_after = close_after;
	if (c->oq_tail)
		c->oq_tail->next = m;
	else
		c->oq_head = m;
	c->oq_tail = m;
	c->noq++;
	client_send_next(c);
}

static void reply_error(struct wcd_client *c, uint64_t id, uint32_t code,
			bool close_after, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void reply_error(struct wcd_client *c, uint64_t id, uint32_t code,
			bool close_after, const char *fmt, ...)
{
	struct wire_put w;
	char msg[WIRE_MSG_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_info("client pid %d: %s error: %s%s", (int)c->pid,
		 wire_errcode_name(code), msg,
		 close_after ? " (closing the connection)" : "");
	wire_put_init(&w);
	if (wire_error_frame(&w, id, code, msg, NULL)) {
		wire_put_free(&w);
		client_close(c, "cannot build an error");
		return;
	}
	client_queue(c, &w, NULL, 0, close_after);
}

/* Ends a reply begun in w and queues it. */
static void reply_send(struct wcd_client *c, struct wire_put *w,
		       const int *fds, unsigned nfds)
{
	char err[WC_ERR_LEN];

	if (wire_frame_end(w, err)) {
		wire_put_free(w);
		reply_error(c, c->h.id, WIRE_E_INTERNAL, false,
			    "cannot build the reply: %s", err);
		return;
	}
	client_queue(c, w, fds, nfds, false);
}

/* --- requests --------------------------------------------------------------- */

static void do_hello(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wcd_version *v = wcd_current(d);
	struct wire_hello h;
	struct wire_hello_reply r = { 0 };
	struct wire_mismatch *mm = NULL;
	struct ident *peer = NULL;
	char err[WC_ERR_LEN];
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
		r.nmismatch = status_ident_diff(&v->ident, peer, mm,
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
		d->mismatches++;
		log_warn("client pid %d (%s): identity mismatch in %u field(s), first: %s (daemon %s, client %s)",
			 (int)c->pid, h.label, r.nmismatch, mm[0].field,
			 mm[0].daemon, mm[0].client);
	} else {
		c->hello_ok = true;
		log_info("client pid %d (%s): hello ok%s", (int)c->pid,
			 h.label, peer ? "" : " (no identity check)");
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
	char err[WC_ERR_LEN];
	struct wire_put w;
	size_t room = WIRE_PAYLOAD_MAX - 64, used = 20;
	size_t hdr_off;
	int ret;

	ret = wire_manifest_req_get(p, n, &q, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
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

/* Finds the resident version a client asks for (0: the current one). */
static int version_index(struct wcd *d, uint64_t number)
{
	if (number == 0)
		return d->cur;
	for (int i = 0; i < WCD_VERSIONS; i++)
		if (d->ver[i].used && d->ver[i].number == number)
			return i;
	return -1;
}

static void do_attach(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wire_attach_req q;
	struct wire_attach a = { 0 };
	struct wcd_version *v;
	char err[WC_ERR_LEN];
	struct wire_put w;
	int ret, vi;

	ret = wire_attach_req_get(p, n, &q, err);
	if (ret) {
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	vi = version_index(d, q.version);
	if (vi < 0) {
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "model version %" PRIu64 " is not resident (the current one is %" PRIu64 "): send HELLO again and attach that",
			    q.version, wcd_current(d)->number);
		return;
	}
	v = &d->ver[vi];
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
	c->leases[c->nleases].id = ++d->next_lease;
	c->leases[c->nleases].ver = vi;
	c->nleases++;
	v->leases++;
	a.lease = d->next_lease;
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
	log_info("client pid %d: lease %" PRIu64 " on version %" PRIu64 " (%u pools)",
		 (int)c->pid, a.lease, v->number, v->npools);
}

static void do_detach(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	char err[WC_ERR_LEN];
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
		lease_drop(c, i);
		log_info("client pid %d: lease %" PRIu64 " detached",
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
	char err[WC_ERR_LEN];
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

static void client_dispatch(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;

	d->requests++;
	c->requests++;
	if (c->h.flags & WIRE_F_REPLY) {
		reply_error(c, c->h.id, WIRE_E_TYPE, true,
			    "a %s frame with the reply flag: clients send requests only",
			    wire_type_name(c->h.type));
		return;
	}
	switch (c->h.type) {
	case WIRE_HELLO:
		do_hello(c, p, n);
		return;
	case WIRE_MANIFEST:
	case WIRE_ATTACH:
		if (!c->hello_ok) {
			reply_error(c, c->h.id, WIRE_E_STATE, false,
				    "%s before a successful HELLO: send HELLO (with a matching identity) first",
				    wire_type_name(c->h.type));
			return;
		}
		if (c->h.type == WIRE_MANIFEST)
			do_manifest(c, p, n);
		else
			do_attach(c, p, n);
		return;
	case WIRE_DETACH:
		do_detach(c, p, n);
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

/* --- receiving ------------------------------------------------------------- */

/* Starts the next receive, unless the output queue is backing up. */
static void client_recv_next(struct wcd_client *c)
{
	if (c->closing)
		return;
	if (c->noq >= WCD_OUTQ_MAX / 2) {
		c->recv_paused = true;
		return;
	}
	client_recv_hdr(c);
}

static void client_payload_cb(struct rx_recv *r, int res)
{
	struct wcd_client *c = container_of(r, struct wcd_client, rx);

	if (c->closing) {
		client_free_if_idle(c);
		return;
	}
	if (res == -ECONNRESET) {
		/* half-closed mid-payload: it can still read our answer */
		c->d->requests++;
		reply_error(c, c->h.id, WIRE_E_MALFORMED, true,
			    "truncated %s frame: %zu of %u payload bytes arrived before the peer closed",
			    wire_type_name(c->h.type), r->done, c->h.len);
		return;
	}
	if (res <= 0 || (uint32_t)res < c->h.len) {
		client_close(c, "receive failed");
		return;
	}
	client_dispatch(c, c->payload, c->h.len);
	client_recv_next(c);
}

static void client_hdr_cb(struct rx_recv *r, int res)
{
	struct wcd_client *c = container_of(r, struct wcd_client, rx);
	char err[WC_ERR_LEN];
	int ret;

	if (c->closing) {
		client_free_if_idle(c);
		return;
	}
	if (res == 0) {
		client_close(c, "disconnected");
		return;
	}
	if (res == -ECONNRESET) {
		c->d->requests++;
		reply_error(c, 0, WIRE_E_MALFORMED, true,
			    "truncated frame header: %zu of %d bytes arrived before the peer closed",
			    r->done, WIRE_HDR_LEN);
		return;
	}
	if (res < 0 || res < WIRE_HDR_LEN) {
		client_close(c, "receive failed");
		return;
	}
	ret = wire_hdr_decode(c->hdr, WIRE_HDR_LEN, &c->h, err);
	if (ret) {
		c->d->requests++;
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (c->h.len > WCD_REQ_MAX) {
		c->d->requests++;
		reply_error(c, c->h.id, WIRE_E_TOO_LARGE, true,
			    "a %s request of %u bytes is over this daemon's request limit of %u bytes",
			    wire_type_name(c->h.type), c->h.len, WCD_REQ_MAX);
		return;
	}
	if (c->h.len == 0) {
		client_dispatch(c, NULL, 0);
		client_recv_next(c);
		return;
	}
	if (c->pcap < c->h.len) {
		uint8_t *p = realloc(c->payload, c->h.len);

		if (!p) {
			client_close(c, "out of memory");
			return;
		}
		c->payload = p;
		c->pcap = c->h.len;
	}
	ret = rx_recv_start(&c->d->loop, &c->rx, c->fd, c->payload, c->h.len,
			    c->h.len, 0, client_payload_cb);
	if (ret)
		client_close(c, "cannot start a receive");
}

static void client_recv_hdr(struct wcd_client *c)
{
	int ret = rx_recv_start(&c->d->loop, &c->rx, c->fd, c->hdr,
				WIRE_HDR_LEN, WIRE_HDR_LEN, 0, client_hdr_cb);

	if (ret)
		client_close(c, "cannot start a receive");
}

/* --- accepting -------------------------------------------------------------- */

static void client_died(struct rx_child *ch, int res)
{
	struct wcd_client *c = container_of(ch, struct wcd_client, watch);

	if (res == 0 && !c->closing)
		log_info("client pid %d exited (%s %d)", (int)c->pid,
			 ch->term_signal > 0 ? "signal" : "code",
			 ch->term_signal > 0 ? ch->term_signal : ch->exit_code);
	if (res == 0)
		client_close(c, "the client process died");
	else
		client_free_if_idle(c);
}

static bool uid_allowed(const struct wcd *d, uid_t uid)
{
	if (uid == geteuid())
		return true;
	for (unsigned i = 0; i < d->o.nallow_uid; i++)
		if (d->o.allow_uid[i] == uid)
			return true;
	return false;
}

static void accept_cb(struct rx_accept *a, int fd, bool final)
{
	struct wcd *d = container_of(a, struct wcd, accept);
	struct wcd_client *c;
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (fd < 0) {
		if (final && !d->stopping)
			log_error("accept stopped: %s", strerror(-fd));
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->d = d;
	c->fd = fd;
	c->pid = -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
		c->pid = cred.pid;
		c->uid = cred.uid;
	}
	c->next = d->clients;
	if (d->clients)
		d->clients->prev = c;
	d->clients = c;
	d->nclients++;
	if (d->stopping) {
		client_close(c, "shutting down");
		return;
	}
	if (c->pid <= 0 || !uid_allowed(d, c->uid)) {
		reply_error(c, 0, WIRE_E_PERM, true,
			    "uid %u may not use this daemon (it runs as uid %u): start wcd with --allow-uid %u to allow it",
			    (unsigned)c->uid, (unsigned)geteuid(),
			    (unsigned)c->uid);
		return;
	}
	if (d->nclients > WCD_CLIENTS_MAX) {
		reply_error(c, 0, WIRE_E_LIMIT, true,
			    "this daemon already serves %d connections (the limit)",
			    WCD_CLIENTS_MAX);
		return;
	}
	if (rx_child_watch_pid(&d->loop, &c->watch, c->pid, client_died) == 0)
		c->watching = true;
	else
		log_warn("client pid %d: cannot watch it with a pidfd; its lease ends when it disconnects",
			 (int)c->pid);
	log_debug("client pid %d uid %u connected", (int)c->pid,
		  (unsigned)c->uid);
	client_recv_hdr(c);
}

/* --- listen, stop ------------------------------------------------------------ */

int server_listen(struct wcd *d, char *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int fd, ret;

	if (strlen(d->paths.sock) >= sizeof(sa.sun_path))
		return wc_errf(err, ENAMETOOLONG, "socket path too long: %s",
			       d->paths.sock);
	strcpy(sa.sun_path, d->paths.sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wc_errf(err, errno, "socket: %s", strerror(errno));
	unlink(d->paths.sock);
	old = umask(0177);   /* the socket is born 0600 */
	ret = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (ret || chmod(d->paths.sock, 0600) || listen(fd, 512)) {
		ret = wc_errf(err, errno, "cannot listen on %s: %s",
			      d->paths.sock, strerror(errno));
		close(fd);
		return ret;
	}
	d->listen_fd = fd;
	return 0;
}

void server_start(struct wcd *d)
{
	int ret = rx_accept_start(&d->loop, &d->accept, d->listen_fd,
				  accept_cb);

	if (ret)
		die("cannot accept on %s: %s", d->paths.sock, strerror(-ret));
}

static void server_maybe_done(struct wcd *d)
{
	if (d->stopping && !d->nclients)
		rx_loop_stop(&d->loop);
}

static void stop_timer_cb(struct rx_timer *t, int res)
{
	struct wcd *d = container_of(t, struct wcd, stop_timer);

	if (res == -ECANCELED)
		return;
	for (struct wcd_client *c = d->clients, *n; c; c = n) {
		n = c->next;
		client_close(c, "shutting down");
	}
	rx_loop_stop(&d->loop);
}

/* Stops accepting, unpublishes, tells every client, and lets the loop end
 * once they are gone (or after STOP_FLUSH_NS). */
void server_stop(struct wcd *d)
{
	struct wire_notice nt = { .kind = WIRE_NOTICE_SHUTDOWN };

	if (d->stopping)
		return;
	d->stopping = true;
	d->state = "stopping";
	log_info("stopping: no new connections; telling %u client(s)",
		 d->nclients);
	if (d->listen_fd >= 0) {
		rx_accept_stop(&d->accept);
		close(d->listen_fd);
		d->listen_fd = -1;
	}
	own_remove_published(d);
	nt.version = wcd_current(d)->number;
	snprintf(nt.msg, sizeof(nt.msg),
		 "wcd pid %d is shutting down; with the host backend your mappings stay valid",
		 (int)getpid());
	for (struct wcd_client *c = d->clients, *n; c; c = n) {
		struct wire_put w;

		n = c->next;
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
		wire_notice_put(&w, &nt);
		if (wire_frame_end(&w, NULL) == 0)
			client_queue(c, &w, NULL, 0, true);
		else
			wire_put_free(&w);
	}
	if (rx_timer_start(&d->loop, &d->stop_timer, STOP_FLUSH_NS,
			   stop_timer_cb))
		rx_loop_stop(&d->loop);
	server_maybe_done(d);
}

unsigned server_clients(struct wcd *d, pid_t *pids, unsigned *leases,
			unsigned max)
{
	unsigned n = 0;

	for (struct wcd_client *c = d->clients; c && n < max; c = c->next) {
		if (c->closing)
			continue;
		pids[n] = c->pid;
		leases[n] = c->nleases;
		n++;
	}
	return n;
}
