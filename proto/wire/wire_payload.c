/* SPDX-License-Identifier: MIT */
/*
 * The wire payloads (see wire.h for each layout): encoders append to a frame
 * begun with wire_frame_begin, decoders read through a bounds-checked
 * cursor. Split from wire.c (frames and cursors) along that seam.
 */
#include <errno.h>
#include <string.h>

#include "err.h"
#include "wire.h"

/* --- HELLO ----------------------------------------------------------------- */

void wire_hello_put(struct wire_put *w, const struct wire_hello *h)
{
	wire_put_u16(w, h->proto_version);
	wire_put_u16(w, h->flags);
	wire_put_blob(w, h->identity, h->identity_len, WIRE_IDENTITY_MAX);
	wire_put_str(w, h->label, WIRE_LABEL_MAX);
}

int wire_hello_get(const void *p, size_t n, struct wire_hello *h, char *err)
{
	struct wire_get g;
	int ret;

	memset(h, 0, sizeof(*h));
	wire_get_init(&g, p, n);
	h->proto_version = wire_get_u16(&g);
	h->flags = wire_get_u16(&g);
	wire_get_blob(&g, &h->identity, &h->identity_len, WIRE_IDENTITY_MAX);
	wire_get_str(&g, h->label, WIRE_LABEL_MAX);
	ret = wire_get_end(&g, "HELLO", true, err);
	if (ret)
		return ret;
	if (h->proto_version != WIRE_VERSION)
		return base_errf(err, EPROTONOSUPPORT,
			       "HELLO asks for protocol version %u but this daemon speaks version %u; use a libwcache and wcd of the same release",
			       h->proto_version, WIRE_VERSION);
	return 0;
}

void wire_hello_reply_put(struct wire_put *w, const struct wire_hello_reply *r,
			  const struct wire_mismatch *mm)
{
	if (r->nmismatch > WIRE_MISMATCH_MAX) {
		w->err = w->err ? w->err : -E2BIG;
		return;
	}
	wire_put_u32(w, r->status);
	wire_put_bytes(w, r->digest, WIRE_HASH_LEN);
	wire_put_u64(w, r->version);
	wire_put_u64(w, r->tensors);
	wire_put_u64(w, r->bytes);
	wire_put_u32(w, r->daemon_pid);
	wire_put_blob(w, r->identity, r->identity_len, WIRE_IDENTITY_MAX);
	wire_put_u32(w, r->nmismatch);
	for (uint32_t i = 0; i < r->nmismatch; i++) {
		wire_put_str(w, mm[i].field, WIRE_FIELD_MAX);
		wire_put_str(w, mm[i].daemon, WIRE_VALUE_MAX);
		wire_put_str(w, mm[i].client, WIRE_VALUE_MAX);
	}
}

int wire_hello_reply_get(const void *p, size_t n, struct wire_hello_reply *r,
			 char *err)
{
	struct wire_get *g = &r->cur;
	int ret;

	memset(r, 0, sizeof(*r));
	wire_get_init(g, p, n);
	r->status = wire_get_u32(g);
	wire_get_bytes(g, r->digest, WIRE_HASH_LEN);
	r->version = wire_get_u64(g);
	r->tensors = wire_get_u64(g);
	r->bytes = wire_get_u64(g);
	r->daemon_pid = wire_get_u32(g);
	wire_get_blob(g, &r->identity, &r->identity_len, WIRE_IDENTITY_MAX);
	r->nmismatch = wire_get_count(g, WIRE_MISMATCH_MAX, 12);
	ret = wire_get_end(g, "HELLO reply", r->nmismatch == 0, err);
	if (ret)
		return ret;
	if (r->status != WIRE_HELLO_OK && r->status != WIRE_HELLO_MISMATCH)
		return base_errf(err, EBADMSG,
			       "malformed HELLO reply payload: unknown status %u",
			       r->status);
	if ((r->status == WIRE_HELLO_OK) != (r->nmismatch == 0))
		return base_errf(err, EBADMSG,
			       "malformed HELLO reply payload: status %u with %u mismatches",
			       r->status, r->nmismatch);
	return 0;
}

int wire_hello_reply_next(struct wire_hello_reply *r, struct wire_mismatch *m,
			  char *err)
{
	struct wire_get *g = &r->cur;

	wire_get_str(g, m->field, WIRE_FIELD_MAX);
	wire_get_str(g, m->daemon, WIRE_VALUE_MAX);
	wire_get_str(g, m->client, WIRE_VALUE_MAX);
	/* The last mismatch ends the payload: nothing may trail. */
	return wire_get_end(g, "HELLO reply", ++r->seen >= r->nmismatch, err);
}

/* --- MANIFEST -------------------------------------------------------------- */

void wire_manifest_req_put(struct wire_put *w, const struct wire_manifest_req *q)
{
	wire_put_u32(w, q->first);
	wire_put_u32(w, q->max);
}

int wire_manifest_req_get(const void *p, size_t n, struct wire_manifest_req *q,
			  char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	q->first = wire_get_u32(&g);
	q->max = wire_get_u32(&g);
	return wire_get_end(&g, "MANIFEST", true, err);
}

void wire_manifest_head_put(struct wire_put *w, const struct wire_manifest *m)
{
	wire_put_u64(w, m->version);
	wire_put_u32(w, m->total);
	wire_put_u32(w, m->first);
	wire_put_u32(w, m->count);
}

size_t wire_tensor_size(const struct wire_tensor *t)
{
	return WIRE_TENSOR_MIN + strlen(t->name) + strlen(t->dtype) +
	       8 * (size_t)t->ndim;
}

void wire_tensor_put(struct wire_put *w, const struct wire_tensor *t)
{
	if (t->ndim > WIRE_NDIM_MAX) {
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
	wire_put_u64(w, t->nbytes);
	wire_put_bytes(w, t->hash, WIRE_HASH_LEN);
	wire_put_u32(w, t->flags);
	wire_put_u64(w, t->padded_rows);
}

int wire_manifest_get(const void *p, size_t n, struct wire_manifest *m,
		      char *err)
{
	struct wire_get *g = &m->cur;
	int ret;

	memset(m, 0, sizeof(*m));
	wire_get_init(g, p, n);
	m->version = wire_get_u64(g);
	m->total = wire_get_u32(g);
	m->first = wire_get_u32(g);
	m->count = wire_get_count(g, UINT32_MAX, WIRE_TENSOR_MIN);
	ret = wire_get_end(g, "MANIFEST reply", m->count == 0, err);
	if (ret)
		return ret;
	if ((uint64_t)m->first + m->count > m->total)
		return base_errf(err, EBADMSG,
			       "malformed MANIFEST reply payload: tensors %u..%u past the total of %u",
			       m->first, m->first + m->count, m->total);
	return 0;
}

int wire_manifest_next(struct wire_manifest *m, struct wire_tensor *t,
		       char *err)
{
	struct wire_get *g = &m->cur;

	memset(t, 0, sizeof(*t));
	wire_get_str(g, t->name, WIRE_NAME_MAX);
	wire_get_str(g, t->dtype, WIRE_DTYPE_MAX);
	t->ndim = wire_get_u8(g);
	if (!g->err && t->ndim > WIRE_NDIM_MAX) {
		g->off -= 1;
		g->err = -EBADMSG;
		g->why = "a tensor has more dims than WIRE_NDIM_MAX";
		g->why_off = g->off;
	}
	for (uint32_t i = 0; i < t->ndim && !g->err; i++)
		t->shape[i] = wire_get_u64(g);
	t->pool = wire_get_u32(g);
	t->offset = wire_get_u64(g);
	t->nbytes = wire_get_u64(g);
	wire_get_bytes(g, t->hash, WIRE_HASH_LEN);
	t->flags = wire_get_u32(g);
	t->padded_rows = wire_get_u64(g);
	if (!g->err && !t->name[0]) {
		g->err = -EBADMSG;
		g->why = "a tensor has an empty name";
		g->why_off = g->off;
	}
	return wire_get_end(g, "MANIFEST reply", ++m->seen >= m->count, err);
}

/* --- ATTACH ---------------------------------------------------------------- */

void wire_attach_req_put(struct wire_put *w, const struct wire_attach_req *q)
{
	wire_put_u32(w, q->flags);
	wire_put_u64(w, q->version);
}

int wire_attach_req_get(const void *p, size_t n, struct wire_attach_req *q,
			char *err)
{
	struct wire_get g;
	int ret;

	wire_get_init(&g, p, n);
	q->flags = wire_get_u32(&g);
	q->version = wire_get_u64(&g);
	ret = wire_get_end(&g, "ATTACH", true, err);
	if (ret)
		return ret;
	if (q->flags & ~WIRE_ATTACH_WRITABLE)
		return base_errf(err, EBADMSG,
			       "malformed ATTACH payload: unknown flags 0x%x",
			       q->flags & ~WIRE_ATTACH_WRITABLE);
	return 0;
}

void wire_attach_head_put(struct wire_put *w, const struct wire_attach *a)
{
	if (a->count > WIRE_FDS_PER_FRAME || a->total > WIRE_POOLS_MAX) {
		w->err = w->err ? w->err : -E2BIG;
		return;
	}
	wire_put_u64(w, a->lease);
	wire_put_u64(w, a->version);
	wire_put_u32(w, a->total);
	wire_put_u32(w, a->first);
	wire_put_u32(w, a->count);
}

void wire_pool_put(struct wire_put *w, const struct wire_pool *pl)
{
	wire_put_u64(w, pl->size);
	wire_put_u64(w, pl->alloc_size);
	wire_put_u32(w, pl->export_kind);
	wire_put_u32(w, pl->flags);
	wire_put_u32(w, pl->fd_index);
	wire_put_bytes(w, pl->handle, WIRE_IPC_HANDLE_LEN);
}

int wire_attach_get(const void *p, size_t n, struct wire_attach *a, char *err)
{
	struct wire_get *g = &a->cur;
	int ret;

	memset(a, 0, sizeof(*a));
	wire_get_init(g, p, n);
	a->lease = wire_get_u64(g);
	a->version = wire_get_u64(g);
	a->total = wire_get_u32(g);
	a->first = wire_get_u32(g);
	a->count = wire_get_count(g, WIRE_FDS_PER_FRAME, WIRE_POOL_LEN);
	ret = wire_get_end(g, "ATTACH reply", a->count == 0, err);
	if (ret)
		return ret;
	if (a->total > WIRE_POOLS_MAX ||
	    (uint64_t)a->first + a->count > a->total)
		return base_errf(err, EBADMSG,
			       "malformed ATTACH reply payload: pools %u..%u of a total of %u (at most %u)",
			       a->first, a->first + a->count, a->total,
			       WIRE_POOLS_MAX);
	return 0;
}

int wire_attach_next(struct wire_attach *a, unsigned nfds,
		     struct wire_pool *pl, char *err)
{
	struct wire_get *g = &a->cur;
	int ret;

	pl->size = wire_get_u64(g);
	pl->alloc_size = wire_get_u64(g);
	pl->export_kind = wire_get_u32(g);
	pl->flags = wire_get_u32(g);
	pl->fd_index = wire_get_u32(g);
	wire_get_bytes(g, pl->handle, WIRE_IPC_HANDLE_LEN);
	ret = wire_get_end(g, "ATTACH reply", ++a->seen >= a->count, err);
	if (ret)
		return ret;
	if (pl->fd_index != WIRE_NO_FD && pl->fd_index >= nfds)
		return base_errf(err, EBADMSG,
			       "malformed ATTACH reply payload: pool names descriptor %u but %u arrived",
			       pl->fd_index, nfds);
	if (pl->alloc_size < pl->size)
		return base_errf(err, EBADMSG,
			       "malformed ATTACH reply payload: pool size %llu over its allocation %llu",
			       (unsigned long long)pl->size,
			       (unsigned long long)pl->alloc_size);
	return 0;
}

/* --- small payloads -------------------------------------------------------- */

void wire_detach_put(struct wire_put *w, uint64_t lease)
{
	wire_put_u64(w, lease);
}

int wire_detach_get(const void *p, size_t n, uint64_t *lease, char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	*lease = wire_get_u64(&g);
	return wire_get_end(&g, "DETACH", true, err);
}

int wire_empty_get(const void *p, size_t n, const char *what, char *err)
{
	(void)p;
	if (n)
		return base_errf(err, EBADMSG,
			       "malformed %s payload: %zu bytes where none are expected",
			       what, n);
	return 0;
}

int wire_ping_get(const void *p, size_t n, char *err)
{
	(void)p;
	if (n > WIRE_PING_MAX)
		return base_errf(err, EBADMSG,
			       "malformed PING payload: %zu bytes, at most %d",
			       n, WIRE_PING_MAX);
	return 0;
}

void wire_status_put(struct wire_put *w, const char *json, size_t n)
{
	wire_put_blob(w, json, n, WIRE_PAYLOAD_MAX - 4);
}

int wire_status_get(const void *p, size_t n, const char **json, size_t *jn,
		    char *err)
{
	struct wire_get g;
	const void *b;

	wire_get_init(&g, p, n);
	wire_get_blob(&g, &b, jn, WIRE_PAYLOAD_MAX - 4);
	*json = b;
	return wire_get_end(&g, "STATUS reply", true, err);
}

void wire_error_put(struct wire_put *w, uint32_t code, const char *msg)
{
	size_t n = msg ? strnlen(msg, WIRE_MSG_MAX) : 0;

	wire_put_u32(w, code);
	wire_put_blob(w, msg, n, WIRE_MSG_MAX);
}

int wire_error_get(const void *p, size_t n, struct wire_error *e, char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	e->code = wire_get_u32(&g);
	wire_get_str(&g, e->msg, WIRE_MSG_MAX);
	return wire_get_end(&g, "ERROR", true, err);
}

int wire_error_frame(struct wire_put *w, uint64_t id, uint32_t code,
		     const char *msg, char *err)
{
	wire_frame_begin(w, WIRE_ERROR, WIRE_F_REPLY, id);
	wire_error_put(w, code, msg);
	return wire_frame_end(w, err);
}

void wire_notice_put(struct wire_put *w, const struct wire_notice *nt)
{
	wire_put_u32(w, nt->kind);
	wire_put_u64(w, nt->version);
	wire_put_blob(w, nt->msg, strnlen(nt->msg, WIRE_MSG_MAX), WIRE_MSG_MAX);
	if (nt->kind == WIRE_NOTICE_HANDOVER)
		wire_put_u32(w, nt->pid);
}

int wire_notice_get(const void *p, size_t n, struct wire_notice *nt,
		    char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	nt->kind = wire_get_u32(&g);
	nt->version = wire_get_u64(&g);
	wire_get_str(&g, nt->msg, WIRE_MSG_MAX);
	nt->pid = nt->kind == WIRE_NOTICE_HANDOVER ? wire_get_u32(&g) : 0;
	return wire_get_end(&g, "NOTICE", true, err);
}

void wire_sleep_put(struct wire_put *w, uint32_t level)
{
	wire_put_u32(w, level);
}

int wire_sleep_get(const void *p, size_t n, uint32_t *level, char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	*level = wire_get_u32(&g);
	return wire_get_end(&g, "SLEEP", true, err);
}

void wire_update_put(struct wire_put *w, const char *model, uint32_t flags)
{
	wire_put_str(w, model, WIRE_PATH_MAX);
	wire_put_u32(w, flags);
}

int wire_update_get(const void *p, size_t n, char *model, uint32_t *flags,
		    char *err)
{
	struct wire_get g;

	wire_get_init(&g, p, n);
	wire_get_str(&g, model, WIRE_PATH_MAX);
	*flags = wire_get_u32(&g);
	if (!g.err && (*flags & ~WIRE_UPDATE_KNOWN))
		return base_errf(err, EBADMSG,
			       "malformed UPDATE payload: unknown flags 0x%x",
			       *flags & ~WIRE_UPDATE_KNOWN);
	return wire_get_end(&g, "UPDATE", true, err);
}
