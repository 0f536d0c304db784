/* SPDX-License-Identifier: MIT */
/*
 * The wire codec, frames and cursors (see wire.h; the payloads are in
 * wire_payload.c). Pure: it reads and writes buffers; the only allocation
 * is the put buffer's growth, bounded by WIRE_HDR_LEN + WIRE_PAYLOAD_MAX.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "wire.h"

#define WIRE_FRAME_MAX ((size_t)WIRE_HDR_LEN + WIRE_PAYLOAD_MAX)

static const char *const type_names[] = {
	[WIRE_HELLO] = "HELLO",
	[WIRE_MANIFEST] = "MANIFEST",
	[WIRE_ATTACH] = "ATTACH",
	[WIRE_DETACH] = "DETACH",
	[WIRE_PING] = "PING",
	[WIRE_STATUS] = "STATUS",
	[WIRE_SHUTDOWN] = "SHUTDOWN",
	[WIRE_NOTICE] = "NOTICE",
	[WIRE_ERROR] = "ERROR",
	[WIRE_ATTACH_MORE] = "ATTACH_MORE",
	[WIRE_SLEEP] = "SLEEP",
	[WIRE_WAKE] = "WAKE",
	[WIRE_UPDATE] = "UPDATE",
	[WIRE_METRICS] = "METRICS",
	[WIRE_HANDOVER] = "HANDOVER",
	[WIRE_PUSH_OPEN] = "PUSH_OPEN",
	[WIRE_PUSH_PLAN] = "PUSH_PLAN",
	[WIRE_PUSH_COMMIT] = "PUSH_COMMIT",
	[WIRE_PUSH_ABORT] = "PUSH_ABORT",
	[WIRE_PAUSE] = "PAUSE",
};

static const char *const errcode_names[] = {
	[WIRE_E_MALFORMED] = "MALFORMED",
	[WIRE_E_VERSION] = "VERSION",
	[WIRE_E_TOO_LARGE] = "TOO_LARGE",
	[WIRE_E_TYPE] = "TYPE",
	[WIRE_E_PERM] = "PERM",
	[WIRE_E_STATE] = "STATE",
	[WIRE_E_MISMATCH] = "MISMATCH",
	[WIRE_E_NOT_IMPLEMENTED] = "NOT_IMPLEMENTED",
	[WIRE_E_NO_LEASE] = "NO_LEASE",
	[WIRE_E_LIMIT] = "LIMIT",
	[WIRE_E_INTERNAL] = "INTERNAL",
	[WIRE_E_SLEEPING] = "SLEEPING",
	[WIRE_E_BUSY] = "BUSY",
	[WIRE_E_READONLY] = "READONLY",
};

const char *wire_type_name(unsigned type)
{
	if (type == 0 || type > WIRE_TYPE_MAX)
		return "?";
	return type_names[type];
}

const char *wire_errcode_name(unsigned code)
{
	if (code == 0 || code > WIRE_E_MAX)
		return "?";
	return errcode_names[code];
}

enum wire_errcode wire_errcode(int rc)
{
	switch (rc) {
	case -EPROTONOSUPPORT:
		return WIRE_E_VERSION;
	case -EMSGSIZE:
		return WIRE_E_TOO_LARGE;
	case -EOPNOTSUPP:
		return WIRE_E_TYPE;
	case -EBADMSG:
	case -E2BIG:
		return WIRE_E_MALFORMED;
	default:
		return WIRE_E_INTERNAL;
	}
}

/* --- little-endian primitives ------------------------------------------- */

static void le16(uint8_t *p, uint16_t v)
{
	p[0] = v;
	p[1] = v >> 8;
}

static void le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}

static void le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* --- header --------------------------------------------------------------- */

void wire_hdr_encode(const struct wire_hdr *h, void *buf)
{
	uint8_t *p = buf;

	le32(p, h->magic);
	le16(p + 4, h->version);
	le16(p + 6, h->type);
	le32(p + 8, h->flags);
	le32(p + 12, h->len);
	le64(p + 16, h->id);
}

int wire_hdr_decode(const void *buf, size_t len, struct wire_hdr *h,
		    char *err)
{
	const uint8_t *p = buf;

	memset(h, 0, sizeof(*h));
	if (len < WIRE_HDR_LEN)
		return base_errf(err, EBADMSG,
			       "truncated frame header: %zu of %d bytes; the peer is not speaking the wcache protocol",
			       len, WIRE_HDR_LEN);
	h->magic = rd32(p);
	h->version = rd16(p + 4);
	h->type = rd16(p + 6);
	h->flags = rd32(p + 8);
	h->len = rd32(p + 12);
	h->id = rd64(p + 16);
	if (h->magic != WIRE_MAGIC)
		return base_errf(err, EBADMSG,
			       "bad frame magic 0x%08x (want 0x%08x): the peer is not a wcache client or daemon",
			       h->magic, WIRE_MAGIC);
	if (h->version != WIRE_VERSION)
		return base_errf(err, EPROTONOSUPPORT,
			       "protocol version %u is not supported: this side speaks version %u; use a libwcache and wcd of the same release",
			       h->version, WIRE_VERSION);
	if (h->len > WIRE_PAYLOAD_MAX)
		return base_errf(err, EMSGSIZE,
			       "frame payload of %u bytes is over the limit of %u bytes",
			       h->len, WIRE_PAYLOAD_MAX);
	if (h->type == 0 || h->type > WIRE_TYPE_MAX)
		return base_errf(err, EOPNOTSUPP,
			       "unknown frame type %u (known: 1..%u)",
			       h->type, WIRE_TYPE_MAX);
	if (h->flags & ~WIRE_F_KNOWN)
		return base_errf(err, EBADMSG,
			       "unknown frame flags 0x%x in a %s frame",
			       h->flags & ~WIRE_F_KNOWN,
			       wire_type_name(h->type));
	return 0;
}

/* --- put cursor ------------------------------------------------------------ */

void wire_put_init(struct wire_put *w)
{
	memset(w, 0, sizeof(*w));
}

void wire_put_free(struct wire_put *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}

/* Makes room for n more bytes, doubling up to the frame cap. */
static uint8_t *put_room(struct wire_put *w, size_t n)
{
	size_t cap;
	uint8_t *nb;

	if (w->err)
		return NULL;
	if (n > WIRE_FRAME_MAX - w->len) {
		w->err = -EMSGSIZE;
		return NULL;
	}
	if (w->len + n > w->cap) {
		cap = w->cap ? w->cap : 256;
		while (cap < w->len + n)
			cap *= 2;
		if (cap > WIRE_FRAME_MAX)
			cap = WIRE_FRAME_MAX;
		nb = realloc(w->buf, cap);
		if (!nb) {
			w->err = -ENOMEM;
			return NULL;
		}
		w->buf = nb;
		w->cap = cap;
	}
	nb = w->buf + w->len;
	w->len += n;
	return nb;
}

void wire_frame_begin(struct wire_put *w, unsigned type, uint32_t flags,
		      uint64_t id)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC, .version = WIRE_VERSION,
		.type = (uint16_t)type, .flags = flags, .id = id,
	};
	uint8_t *p;

	w->len = 0;
	w->err = 0;
	p = put_room(w, WIRE_HDR_LEN);
	if (p)
		wire_hdr_encode(&h, p);
}

int wire_frame_end(struct wire_put *w, char *err)
{
	if (w->err == -EMSGSIZE)
		return base_errf(err, EMSGSIZE,
			       "message payload over the limit of %u bytes",
			       WIRE_PAYLOAD_MAX);
	if (w->err == -E2BIG)
		return base_errf(err, E2BIG,
			       "a field of the message is over its bound (see wire.h)");
	if (w->err)
		return base_errf(err, -w->err, "cannot build a message: %s",
			       strerror(-w->err));
	if (w->len < WIRE_HDR_LEN)
		return base_errf(err, EINVAL, "wire_frame_begin was not called");
	le32(w->buf + 12, (uint32_t)(w->len - WIRE_HDR_LEN));
	return 0;
}

void wire_put_u8(struct wire_put *w, uint8_t v)
{
	uint8_t *p = put_room(w, 1);

	if (p)
		*p = v;
}

void wire_put_u16(struct wire_put *w, uint16_t v)
{
	uint8_t *p = put_room(w, 2);

	if (p)
		le16(p, v);
}

void wire_put_u32(struct wire_put *w, uint32_t v)
{
	uint8_t *p = put_room(w, 4);

	if (p)
		le32(p, v);
}

void wire_put_u64(struct wire_put *w, uint64_t v)
{
	uint8_t *p = put_room(w, 8);

	if (p)
		le64(p, v);
}

void wire_put_bytes(struct wire_put *w, const void *src, size_t n)
{
	uint8_t *p = put_room(w, n);

	if (p && n)
		memcpy(p, src, n);
}

void wire_put_blob(struct wire_put *w, const void *src, size_t n, size_t max)
{
	if (w->err)
		return;
	if (n > max || n > UINT32_MAX) {
		w->err = -E2BIG;
		return;
	}
	wire_put_u32(w, (uint32_t)n);
	wire_put_bytes(w, src, n);
}

void wire_put_str(struct wire_put *w, const char *s, size_t max)
{
	wire_put_blob(w, s, s ? strlen(s) : 0, max);
}

/* --- get cursor ------------------------------------------------------------ */

void wire_get_init(struct wire_get *g, const void *p, size_t len)
{
	memset(g, 0, sizeof(*g));
	g->p = p;
	g->len = len;
}

static void get_fail(struct wire_get *g, const char *why)
{
	if (g->err)
		return;
	g->err = -EBADMSG;
	g->why = why;
	g->why_off = g->off;
}

/* Returns a pointer to the next n bytes, or NULL (sticky) past the end. */
static const uint8_t *get_take(struct wire_get *g, size_t n)
{
	const uint8_t *p;

	if (g->err)
		return NULL;
	if (n > g->len - g->off) {
		get_fail(g, "truncated: a field runs past the end of the payload");
		return NULL;
	}
	p = g->p + g->off;
	g->off += n;
	return p;
}

uint8_t wire_get_u8(struct wire_get *g)
{
	const uint8_t *p = get_take(g, 1);

	return p ? *p : 0;
}

uint16_t wire_get_u16(struct wire_get *g)
{
	const uint8_t *p = get_take(g, 2);

	return p ? rd16(p) : 0;
}

uint32_t wire_get_u32(struct wire_get *g)
{
	const uint8_t *p = get_take(g, 4);

	return p ? rd32(p) : 0;
}

uint64_t wire_get_u64(struct wire_get *g)
{
	const uint8_t *p = get_take(g, 8);

	return p ? rd64(p) : 0;
}

void wire_get_bytes(struct wire_get *g, void *dst, size_t n)
{
	const uint8_t *p = get_take(g, n);

	if (p)
		memcpy(dst, p, n);
	else
		memset(dst, 0, n);
}

void wire_get_blob(struct wire_get *g, const void **out, size_t *n, size_t max)
{
	uint32_t len = wire_get_u32(g);
	const uint8_t *p;

	*out = NULL;
	*n = 0;
	if (g->err)
		return;
	if (len > max) {
		g->off -= 4;
		get_fail(g, "a length is over its bound");
		return;
	}
	if (len > g->len - g->off) {
		g->off -= 4;
		get_fail(g, "a length runs past the end of the payload");
		return;
	}
	p = get_take(g, len);
	*out = p;
	*n = len;
}

void wire_get_str(struct wire_get *g, char *dst, size_t max)
{
	const void *p;
	size_t n;

	wire_get_blob(g, &p, &n, max);
	dst[0] = '\0';
	if (g->err)
		return;
	if (n && memchr(p, '\0', n)) {
		get_fail(g, "a string contains a NUL byte");
		return;
	}
	if (n)
		memcpy(dst, p, n);
	dst[n] = '\0';
}

uint32_t wire_get_count(struct wire_get *g, uint32_t max, size_t elem_min)
{
	uint32_t c = wire_get_u32(g);

	if (g->err)
		return 0;
	if (c > max) {
		g->off -= 4;
		get_fail(g, "a count is over its bound");
		return 0;
	}
	if (elem_min && (uint64_t)c * elem_min > g->len - g->off) {
		g->off -= 4;
		get_fail(g, "a count runs past the end of the payload");
		return 0;
	}
	return c;
}

int wire_get_end(struct wire_get *g, const char *what, bool all, char *err)
{
	if (!g->err && all && g->off != g->len) {
		g->err = -EBADMSG;
		g->why = "trailing bytes after the last field";
		g->why_off = g->off;
	}
	if (g->err)
		return base_errf(err, EBADMSG,
			       "malformed %s payload: %s (at byte %zu of %zu)",
			       what, g->why, g->why_off, g->len);
	return 0;
}
