/* SPDX-License-Identifier: MIT */
/*
 * Identity: canonical encoding, digest, comparison. See identity.h. The
 * field table below is the single description of the identity: its order is
 * the encoding's and the order in which differences are listed, and its
 * `compared` flag is the one place that decides whether a difference in a
 * field refuses an engine (encode, decode, ident_compare and ident_mismatch
 * all walk it).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "identity.h"
#include "model.h"
#include "plan.h"
#include "wire.h"

enum kind { K_STR, K_U32, K_HASH };

static const struct field {
	const char *name;
	enum kind kind;
	size_t off;
	size_t cap;     /* K_STR: array size including the NUL */
	bool compared;  /* a difference refuses the engine (a MISMATCH) */
} fields[] = {
#define S(f, c) { #f, K_STR, offsetof(struct ident, f), sizeof(((struct ident *)0)->f), c }
#define U(f, c) { #f, K_U32, offsetof(struct ident, f), 4, c }
#define H(f, c) { #f, K_HASH, offsetof(struct ident, f), BASE_HASH_LEN, c }
	/* the path is shown, not compared: a bind mount or a copy with the
	 * same checkpoint digest is the same cache (wc_expect.same_path) */
	S(model_path, false), S(arch, true), S(dtype, true),
	S(quant_method, true), H(quant_hash, true),
	U(tp_size, true), U(tp_rank, true), U(pp_size, true), U(pp_rank, true),
	H(rules_hash, true),
	U(ep_size, true), U(ep_rank, true), U(vocab_pad, true),
	H(ckpt_digest, true), S(device_uuid, true),
	U(cc_major, true), U(cc_minor, true),
	/* encoded (room for later fields), never compared */
	U(reserved0, false), U(reserved1, false),
#undef S
#undef U
#undef H
};

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))
static const unsigned char magic[4] = { 'W', 'C', 'I', 'D' };

void ident_init(struct ident *id)
{
	memset(id, 0, sizeof(*id));
	id->format_version = IDENT_FORMAT_VERSION;
}

static int set_str(char *dst, size_t cap, const char *src, const char *what,
		   char *err)
{
	size_t n = strlen(src);

	if (n >= cap)
		return base_errf(err, ENAMETOOLONG,
			       "identity field %s is %zu bytes, over the limit of %zu: '%.64s...'",
			       what, n, cap - 1, src);
	memcpy(dst, src, n + 1);
	return 0;
}

int ident_set_model(struct ident *id, const struct model *m,
		    const struct plan_rules *rules, char *err)
{
	int rc;

	rc = set_str(id->model_path, sizeof(id->model_path), m->path,
		     "model_path", err);
	if (!rc)
		rc = set_str(id->arch, sizeof(id->arch), m->cfg.arch, "arch", err);
	if (!rc)
		rc = set_str(id->dtype, sizeof(id->dtype), m->cfg.dtype, "dtype", err);
	if (!rc)
		rc = set_str(id->quant_method, sizeof(id->quant_method),
			     m->cfg.quant_json ? (m->cfg.quant_method[0] ?
						  m->cfg.quant_method : "unknown") : "",
			     "quant_method", err);
	if (rc)
		return rc;
	memcpy(id->quant_hash, m->cfg.quant_hash, BASE_HASH_LEN);
	memcpy(id->ckpt_digest, m->digest, BASE_HASH_LEN);
	if (rules)
		memcpy(id->rules_hash, rules->hash, BASE_HASH_LEN);
	return 0;
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

int ident_encode(const struct ident *id, void *buf, size_t cap, size_t *len)
{
	unsigned char *out = buf;
	size_t n = 0;

	if (cap < 8)
		return -ENOSPC;
	memcpy(out, magic, 4);
	put32(out + 4, id->format_version);
	n = 8;
	for (size_t i = 0; i < NFIELDS; i++) {
		const struct field *f = &fields[i];
		const char *p = (const char *)id + f->off;

		if (f->kind == K_STR) {
			size_t sl = strnlen(p, f->cap);

			if (sl == f->cap)
				return -EINVAL;
			if (cap - n < 4 + sl)
				return -ENOSPC;
			put32(out + n, (uint32_t)sl);
			memcpy(out + n + 4, p, sl);
			n += 4 + sl;
		} else if (f->kind == K_U32) {
			uint32_t v;

			if (cap - n < 4)
				return -ENOSPC;
			memcpy(&v, p, 4);
			put32(out + n, v);
			n += 4;
		} else {
			if (cap - n < BASE_HASH_LEN)
				return -ENOSPC;
			memcpy(out + n, p, BASE_HASH_LEN);
			n += BASE_HASH_LEN;
		}
	}
	*len = n;
	return 0;
}

int ident_decode(struct ident *id, const void *buf, size_t len, char *err)
{
	const unsigned char *in = buf;
	size_t n = 8;
	uint32_t ver;

	ident_init(id);
	if (len < 8 || memcmp(in, magic, 4))
		return base_errf(err, EPROTO,
			       "identity is %zu bytes without the WCID magic; the peer is not a wcache of a compatible version",
			       len);
	ver = get32(in + 4);
	if (ver != IDENT_FORMAT_VERSION)
		return base_errf(err, EPROTO,
			       "identity format version %u, this side speaks %d; use the same wcache version on both sides",
			       ver, IDENT_FORMAT_VERSION);
	for (size_t i = 0; i < NFIELDS; i++) {
		const struct field *f = &fields[i];
		char *p = (char *)id + f->off;

		if (f->kind == K_STR) {
			uint32_t sl;

			if (len - n < 4)
				goto out_short;
			sl = get32(in + n);
			n += 4;
			if (sl >= f->cap)
				return base_errf(err, EPROTO,
					       "identity field %s is %u bytes, over the limit of %zu",
					       f->name, sl, f->cap - 1);
			if (len - n < sl)
				goto out_short;
			if (memchr(in + n, '\0', sl))
				return base_errf(err, EPROTO,
					       "identity field %s holds a NUL byte", f->name);
			memcpy(p, in + n, sl);
			p[sl] = '\0';
			n += sl;
		} else if (f->kind == K_U32) {
			uint32_t v;

			if (len - n < 4)
				goto out_short;
			v = get32(in + n);
			memcpy(p, &v, 4);
			n += 4;
		} else {
			if (len - n < BASE_HASH_LEN)
				goto out_short;
			memcpy(p, in + n, BASE_HASH_LEN);
			n += BASE_HASH_LEN;
		}
		continue;
out_short:
		return base_errf(err, EPROTO,
			       "identity ends inside field %s (%zu bytes); the message is truncated",
			       f->name, len);
	}
	if (n != len)
		return base_errf(err, EPROTO,
			       "identity has %zu trailing bytes after its last field",
			       len - n);
	return 0;
}

int ident_digest(const struct ident *id, uint8_t out[BASE_HASH_LEN])
{
	unsigned char buf[IDENT_ENC_MAX];
	size_t len;
	int rc;

	rc = ident_encode(id, buf, sizeof(buf), &len);
	if (rc)
		return rc;
	base_hash128(buf, len, out);
	return 0;
}

static void append(char *out, size_t cap, size_t *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void append(char *out, size_t cap, size_t *n, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (!cap || *n >= cap)
		return;
	va_start(ap, fmt);
	k = vsnprintf(out + *n, cap - *n, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	if ((size_t)k >= cap - *n) {
		*n = cap;
		if (cap > 4)
			memcpy(out + cap - 4, "...", 4);
		return;
	}
	*n += (size_t)k;
}

/* Field f's value in id: strings as they are ('quoted' when quote),
 * numbers in decimal, hashes in hex. */
static void value_str(const struct field *f, const struct ident *id,
		      bool quote, char *buf, size_t cap)
{
	const char *p = (const char *)id + f->off;

	if (f->kind == K_STR) {
		snprintf(buf, cap, quote ? "'%.*s'" : "%.*s",
			 (int)strnlen(p, f->cap), p);
	} else if (f->kind == K_U32) {
		uint32_t v;

		memcpy(&v, p, 4);
		snprintf(buf, cap, "%" PRIu32, v);
	} else {
		char hex[BASE_HASH_HEX_LEN];

		base_hash_hex((const uint8_t *)p, hex);
		snprintf(buf, cap, "%s", hex);
	}
}

/* Whether a and b differ in field f in a way that refuses an engine. */
static bool differs(const struct field *f, const struct ident *a,
		    const struct ident *b)
{
	const char *pa = (const char *)a + f->off;
	const char *pb = (const char *)b + f->off;

	if (!f->compared)
		return false;
	return f->kind == K_STR ? strncmp(pa, pb, f->cap) != 0 :
				  memcmp(pa, pb, f->cap) != 0;
}

int ident_compare(const struct ident *a, const char *a_name,
		  const struct ident *b, const char *b_name,
		  char *out, size_t cap)
{
	char va[IDENT_PATH_MAX + 8], vb[IDENT_PATH_MAX + 8];
	size_t n = 0;
	int diff = 0;

	if (cap)
		out[0] = '\0';
	if (a->format_version != b->format_version) {
		append(out, cap, &n, "format_version: %s=%u %s=%u", a_name,
		       a->format_version, b_name, b->format_version);
		diff++;
	}
	for (size_t i = 0; i < NFIELDS; i++) {
		const struct field *f = &fields[i];

		if (!differs(f, a, b))
			continue;
		value_str(f, a, true, va, sizeof(va));
		value_str(f, b, true, vb, sizeof(vb));
		append(out, cap, &n, "%s%s: %s=%s %s=%s", diff ? "; " : "",
		       f->name, a_name, va, b_name, vb);
		diff++;
	}
	return diff;
}

unsigned ident_mismatch(const struct ident *a, const struct ident *b,
			struct wire_mismatch *mm, unsigned max)
{
	unsigned n = 0;

	if (a->format_version != b->format_version && n < max) {
		struct wire_mismatch *m = &mm[n++];

		snprintf(m->field, sizeof(m->field), "format_version");
		snprintf(m->daemon, sizeof(m->daemon), "%" PRIu32,
			 a->format_version);
		snprintf(m->client, sizeof(m->client), "%" PRIu32,
			 b->format_version);
	}
	for (size_t i = 0; i < NFIELDS && n < max; i++) {
		const struct field *f = &fields[i];
		struct wire_mismatch *m;

		if (!differs(f, a, b))
			continue;
		m = &mm[n++];
		snprintf(m->field, sizeof(m->field), "%s", f->name);
		value_str(f, a, false, m->daemon, sizeof(m->daemon));
		value_str(f, b, false, m->client, sizeof(m->client));
	}
	return n;
}
