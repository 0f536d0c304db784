/* SPDX-License-Identifier: MIT */
/*
 * The wire codec: round trips of every payload, and every malformed-frame
 * rejection at the codec level (bad magic, over the cap, truncated, unknown
 * type, counts past the payload, wrong version, trailing bytes).
 */
#include <errno.h>
#include <string.h>

#include "err.h"
#include "t.h"
#include "wire.h"

static char err[BASE_ERR_LEN];

/* Decodes the header of w's frame and returns the payload. */
static const uint8_t *payload(const struct wire_put *w, struct wire_hdr *h)
{
	T_OK(wire_hdr_decode(w->buf, w->len, h, err));
	T_EQ_U64(h->len + WIRE_HDR_LEN, w->len);
	return w->buf + WIRE_HDR_LEN;
}

static void test_header(void)
{
	struct wire_put w;
	struct wire_hdr h;
	uint8_t raw[WIRE_HDR_LEN];

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PING, 0, 0x1122334455667788ull);
	wire_put_bytes(&w, "abc", 3);
	T_OK(wire_frame_end(&w, err));
	T_EQ_INT(w.len, WIRE_HDR_LEN + 3);
	/* little-endian on the wire, magic spelled "WCAC" */
	T_ASSERT(!memcmp(w.buf, "WCAC", 4));
	T_EQ_INT(w.buf[16], 0x88);
	T_EQ_INT(w.buf[12], 3);
	payload(&w, &h);
	T_EQ_INT(h.type, WIRE_PING);
	T_EQ_U64(h.id, 0x1122334455667788ull);
	T_EQ_INT(h.version, WIRE_VERSION);

	/* truncated header */
	T_EQ_INT(wire_hdr_decode(w.buf, WIRE_HDR_LEN - 1, &h, err), -EBADMSG);
	T_HAS(err, "truncated");

	/* bad magic */
	memcpy(raw, w.buf, WIRE_HDR_LEN);
	raw[0] = 'X';
	T_EQ_INT(wire_hdr_decode(raw, sizeof(raw), &h, err), -EBADMSG);
	T_HAS(err, "magic");
	T_EQ_INT(wire_errcode(-EBADMSG), WIRE_E_MALFORMED);

	/* another version: both versions named, id still decoded */
	memcpy(raw, w.buf, WIRE_HDR_LEN);
	raw[4] = 7;
	T_EQ_INT(wire_hdr_decode(raw, sizeof(raw), &h, err), -EPROTONOSUPPORT);
	T_HAS(err, "protocol version 7");
	T_HAS(err, "version 2");
	T_EQ_U64(h.id, 0x1122334455667788ull);
	T_EQ_INT(wire_errcode(-EPROTONOSUPPORT), WIRE_E_VERSION);

	/* over the cap: checked before anything is allocated */
	memcpy(raw, w.buf, WIRE_HDR_LEN);
	raw[12] = 1; raw[13] = 0; raw[14] = 0; raw[15] = 0x10; /* 256 MiB + 1 */
	T_EQ_INT(wire_hdr_decode(raw, sizeof(raw), &h, err), -EMSGSIZE);
	T_HAS(err, "268435457");
	raw[12] = 0;      /* exactly the cap is fine */
	T_OK(wire_hdr_decode(raw, sizeof(raw), &h, err));
	T_EQ_U64(h.len, WIRE_PAYLOAD_MAX);
	T_EQ_INT(wire_errcode(-EMSGSIZE), WIRE_E_TOO_LARGE);

	/* unknown type (0 and past the last) */
	memcpy(raw, w.buf, WIRE_HDR_LEN);
	raw[6] = WIRE_TYPE_MAX + 1;
	T_EQ_INT(wire_hdr_decode(raw, sizeof(raw), &h, err), -EOPNOTSUPP);
	T_HAS(err, "unknown frame type 21 (known: 1..20)");
	raw[6] = 0;
	T_EQ_INT(wire_hdr_decode(raw, sizeof(raw), &h, err), -EOPNOTSUPP);
	T_EQ_INT(wire_errcode(-EOPNOTSUPP), WIRE_E_TYPE);

	/* unknown flags */
	memcpy(raw, w.buf, WIRE_HDR_LEN);
	raw[8] = 0x80;
	T_EQ_INT(wire_hdr_decode(raw, sizeof(raw), &h, err), -EBADMSG);
	T_HAS(err, "flags");

	T_EQ_STR(wire_type_name(WIRE_ATTACH_MORE), "ATTACH_MORE");
	T_EQ_STR(wire_type_name(99), "?");
	T_EQ_STR(wire_errcode_name(WIRE_E_READONLY), "READONLY");
	wire_put_free(&w);
}

static void test_hello(void)
{
	static const uint8_t ident[] = { 1, 2, 3, 4, 5, 0, 7 };
	struct wire_hello h = {
		.proto_version = WIRE_VERSION, .flags = 0,
		.identity = ident, .identity_len = sizeof(ident),
	};
	struct wire_hello d;
	struct wire_put w;
	struct wire_hdr hd;
	const uint8_t *p;

	strcpy(h.label, "engine rank 0");
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HELLO, 0, 1);
	wire_hello_put(&w, &h);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_OK(wire_hello_get(p, hd.len, &d, err));
	T_EQ_INT(d.proto_version, WIRE_VERSION);
	T_EQ_U64(d.identity_len, sizeof(ident));
	T_ASSERT(!memcmp(d.identity, ident, sizeof(ident)));
	T_EQ_STR(d.label, "engine rank 0");

	/* truncated payload: every strict prefix fails */
	for (size_t n = 0; n < hd.len; n++)
		T_EQ_INT(wire_hello_get(p, n, &d, err), -EBADMSG);
	T_HAS(err, "malformed HELLO payload");

	/* an identity length past the payload */
	{
		uint8_t bad[64];

		memcpy(bad, p, hd.len);
		bad[4] = 200;   /* identity length 200, 7 bytes follow */
		T_EQ_INT(wire_hello_get(bad, hd.len, &d, err), -EBADMSG);
		T_HAS(err, "past the end");
	}

	/* HELLO of another protocol version names both */
	h.proto_version = 3;
	wire_frame_begin(&w, WIRE_HELLO, 0, 1);
	wire_hello_put(&w, &h);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_EQ_INT(wire_hello_get(p, hd.len, &d, err), -EPROTONOSUPPORT);
	T_HAS(err, "version 3");
	T_HAS(err, "version 2");

	/* trailing bytes */
	h.proto_version = WIRE_VERSION;
	wire_frame_begin(&w, WIRE_HELLO, 0, 1);
	wire_hello_put(&w, &h);
	wire_put_u8(&w, 0);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_EQ_INT(wire_hello_get(p, hd.len, &d, err), -EBADMSG);
	T_HAS(err, "trailing");

	/* an identity over its bound cannot be encoded */
	h.identity_len = WIRE_IDENTITY_MAX + 1;
	wire_frame_begin(&w, WIRE_HELLO, 0, 1);
	wire_hello_put(&w, &h);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
	wire_put_free(&w);
}

static void test_hello_reply(void)
{
	struct wire_mismatch mm[2], m;
	struct wire_hello_reply r = {
		.status = WIRE_HELLO_MISMATCH, .version = 3, .tensors = 291,
		.bytes = 1ull << 34, .daemon_pid = 4242, .nmismatch = 2,
	}, d;
	struct wire_put w;
	struct wire_hdr hd;
	const uint8_t *p;

	memset(mm, 0, sizeof(mm));
	memset(r.digest, 0xab, sizeof(r.digest));
	strcpy(mm[0].field, "tp_size");
	strcpy(mm[0].daemon, "2");
	strcpy(mm[0].client, "4");
	strcpy(mm[1].field, "dtype");
	strcpy(mm[1].daemon, "bfloat16");
	strcpy(mm[1].client, "float16");
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HELLO, WIRE_F_REPLY, 9);
	wire_hello_reply_put(&w, &r, mm);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_EQ_INT(hd.flags, WIRE_F_REPLY);
	T_OK(wire_hello_reply_get(p, hd.len, &d, err));
	T_EQ_INT(d.status, WIRE_HELLO_MISMATCH);
	T_EQ_U64(d.bytes, 1ull << 34);
	T_EQ_INT(d.daemon_pid, 4242);
	T_EQ_INT(d.digest[15], 0xab);
	T_EQ_INT(d.nmismatch, 2);
	T_OK(wire_hello_reply_next(&d, &m, err));
	T_EQ_STR(m.field, "tp_size");
	T_EQ_STR(m.client, "4");
	T_OK(wire_hello_reply_next(&d, &m, err));
	T_EQ_STR(m.daemon, "bfloat16");

	/* a count past the payload is refused before any element */
	{
		uint8_t bad[512];
		size_t cnt_off = 4 + 16 + 8 + 8 + 8 + 4 + 4;

		memcpy(bad, p, hd.len);
		bad[cnt_off] = 60;  /* 60 mismatches do not fit */
		T_EQ_INT(wire_hello_reply_get(bad, hd.len, &d, err), -EBADMSG);
		T_HAS(err, "count runs past the end");
		bad[cnt_off] = 200; /* over WIRE_MISMATCH_MAX */
		T_EQ_INT(wire_hello_reply_get(bad, hd.len, &d, err), -EBADMSG);
		T_HAS(err, "over its bound");
		/* a NUL inside a string */
		bad[cnt_off] = 2;
		bad[cnt_off + 4 + 4 + 1] = 0;
		T_OK(wire_hello_reply_get(bad, hd.len, &d, err));
		T_EQ_INT(wire_hello_reply_next(&d, &m, err), -EBADMSG);
		T_HAS(err, "NUL");
		/* trailing bytes after the last mismatch */
		memcpy(bad, p, hd.len);
		memset(bad + hd.len, 0, 16);
		T_OK(wire_hello_reply_get(bad, hd.len + 16, &d, err));
		T_OK(wire_hello_reply_next(&d, &m, err));
		T_EQ_INT(wire_hello_reply_next(&d, &m, err), -EBADMSG);
		T_HAS(err, "trailing");
	}

	/* OK carries no mismatches */
	r.status = WIRE_HELLO_OK;
	r.nmismatch = 0;
	wire_frame_begin(&w, WIRE_HELLO, WIRE_F_REPLY, 9);
	wire_hello_reply_put(&w, &r, NULL);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_OK(wire_hello_reply_get(p, hd.len, &d, err));
	T_EQ_INT(d.status, WIRE_HELLO_OK);
	wire_put_free(&w);
}

/* The manifest payload p (len bytes, its first tensor named name0)
 * damaged in one field at a time is refused, naming the field. */
static void manifest_damaged(const uint8_t *p, size_t len,
			     const char *name0)
{
	struct wire_manifest d;
	struct wire_tensor o;
	uint8_t *bad = malloc(len);

	T_ASSERT(bad);
	/* count past the payload */
	memcpy(bad, p, len);
	bad[16] = 0xff; bad[17] = 0xff; bad[18] = 0xff; bad[19] = 0x0f;
	T_EQ_INT(wire_manifest_get(bad, len, &d, err), -EBADMSG);
	T_HAS(err, "count runs past the end");
	/* first + count past the total */
	memcpy(bad, p, len);
	bad[8] = 2;
	T_EQ_INT(wire_manifest_get(bad, len, &d, err), -EBADMSG);
	T_HAS(err, "past the total");
	/* too many dims in tensor 0 */
	memcpy(bad, p, len);
	{
		size_t ndim_off = 20 + 4 + strlen(name0) + 4 + 4;

		T_EQ_INT(bad[ndim_off], 0);
		bad[ndim_off] = WIRE_NDIM_MAX + 1;
	}
	T_OK(wire_manifest_get(bad, len, &d, err));
	T_EQ_INT(wire_manifest_next(&d, &o, err), -EBADMSG);
	T_HAS(err, "dims");
	/* a name length over the bound */
	memcpy(bad, p, len);
	bad[20] = 0x01; bad[21] = 0x04; /* 1025 */
	T_OK(wire_manifest_get(bad, len, &d, err));
	T_EQ_INT(wire_manifest_next(&d, &o, err), -EBADMSG);
	T_HAS(err, "over its bound");
	free(bad);
}

static void test_manifest(void)
{
	struct wire_manifest m = { .version = 1, .total = 3, .first = 0,
				   .count = 3 }, d;
	struct wire_tensor t[3], o;
	struct wire_put w;
	struct wire_hdr hd;
	const uint8_t *p;
	size_t sz = 0;

	memset(t, 0, sizeof(t));
	for (int i = 0; i < 3; i++) {
		snprintf(t[i].name, sizeof(t[i].name),
			 "model.layers.%d.mlp.down_proj.weight", i);
		strcpy(t[i].dtype, "BF16");
		t[i].ndim = (uint32_t)i;  /* a scalar, a vector, a matrix */
		for (int k = 0; k < i; k++)
			t[i].shape[k] = 4096 + (uint64_t)k;
		t[i].pool = (uint32_t)i;
		t[i].offset = 256ull * (uint64_t)i;
		t[i].nbytes = 1ull << 33;
		memset(t[i].hash, i + 1, sizeof(t[i].hash));
		t[i].flags = WIRE_T_HASHED;
		sz += wire_tensor_size(&t[i]);
	}
	/* a name of exactly the bound */
	memset(t[2].name, 'n', WIRE_NAME_MAX);
	t[2].name[WIRE_NAME_MAX] = '\0';
	sz = wire_tensor_size(&t[0]) + wire_tensor_size(&t[1]) +
	     wire_tensor_size(&t[2]);

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_MANIFEST, WIRE_F_REPLY, 2);
	wire_manifest_head_put(&w, &m);
	for (int i = 0; i < 3; i++)
		wire_tensor_put(&w, &t[i]);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_EQ_U64(hd.len, 20 + sz);
	T_OK(wire_manifest_get(p, hd.len, &d, err));
	T_EQ_INT(d.count, 3);
	for (int i = 0; i < 3; i++) {
		T_OK(wire_manifest_next(&d, &o, err));
		T_EQ_STR(o.name, t[i].name);
		T_EQ_STR(o.dtype, "BF16");
		T_EQ_INT(o.ndim, i);
		T_ASSERT(!memcmp(o.shape, t[i].shape, sizeof(o.shape)));
		T_EQ_U64(o.offset, t[i].offset);
		T_EQ_U64(o.nbytes, t[i].nbytes);
		T_ASSERT(!memcmp(o.hash, t[i].hash, sizeof(o.hash)));
		T_EQ_INT(o.flags, WIRE_T_HASHED);
	}

	/* truncated at every length */
	for (size_t n = 0; n < hd.len; n++) {
		int ret = wire_manifest_get(p, n, &d, err);

		for (uint32_t i = 0; !ret && i < d.count; i++)
			ret = wire_manifest_next(&d, &o, err);
		T_EQ_INT(ret, -EBADMSG);
	}

	manifest_damaged(p, hd.len, t[0].name);

	/* a name over the bound cannot be encoded */
	{
		struct wire_tensor *big = calloc(1, sizeof(*big) + 8);
		char *longname = (char *)big->name;

		*big = t[0];
		memset(longname, 'x', WIRE_NAME_MAX);
		longname[WIRE_NAME_MAX] = '\0';
		big->ndim = WIRE_NDIM_MAX + 1;
		wire_frame_begin(&w, WIRE_MANIFEST, WIRE_F_REPLY, 2);
		wire_manifest_head_put(&w, &m);
		wire_tensor_put(&w, big);
		T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
		free(big);
	}

	/* request */
	{
		struct wire_manifest_req q = { 5, 100 }, dq;

		wire_frame_begin(&w, WIRE_MANIFEST, 0, 3);
		wire_manifest_req_put(&w, &q);
		T_OK(wire_frame_end(&w, err));
		p = payload(&w, &hd);
		T_OK(wire_manifest_req_get(p, hd.len, &dq, err));
		T_EQ_INT(dq.first, 5);
		T_EQ_INT(dq.max, 100);
		T_EQ_INT(wire_manifest_req_get(p, 7, &dq, err), -EBADMSG);
	}
	wire_put_free(&w);
}

static void test_attach(void)
{
	struct wire_attach_req q = { WIRE_ATTACH_WRITABLE, 2 }, dq;
	struct wire_attach a = { .lease = 77, .version = 2, .total = 300,
				 .first = 253, .count = 2 }, d;
	struct wire_pool pl = { .size = 1000, .alloc_size = 4096,
				.export_kind = 1, .flags = WIRE_POOL_SEALED,
				.fd_index = 1 }, o;
	struct wire_put w;
	struct wire_hdr hd;
	const uint8_t *p;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_ATTACH, 0, 4);
	wire_attach_req_put(&w, &q);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_OK(wire_attach_req_get(p, hd.len, &dq, err));
	T_EQ_INT(dq.flags, WIRE_ATTACH_WRITABLE);
	T_EQ_U64(dq.version, 2);
	{
		uint8_t bad[12];

		memcpy(bad, p, 12);
		bad[0] = 0x4;  /* unknown attach flag */
		T_EQ_INT(wire_attach_req_get(bad, 12, &dq, err), -EBADMSG);
		T_HAS(err, "flags");
	}

	memset(pl.handle, 0x5a, sizeof(pl.handle));
	wire_frame_begin(&w, WIRE_ATTACH_MORE, WIRE_F_REPLY | WIRE_F_MORE, 4);
	wire_attach_head_put(&w, &a);
	wire_pool_put(&w, &pl);
	pl.fd_index = WIRE_NO_FD;
	wire_pool_put(&w, &pl);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_EQ_U64(hd.len, 28 + 2 * WIRE_POOL_LEN);
	T_OK(wire_attach_get(p, hd.len, &d, err));
	T_EQ_U64(d.lease, 77);
	T_EQ_INT(d.total, 300);
	T_EQ_INT(d.first, 253);
	T_OK(wire_attach_next(&d, 2, &o, err));
	T_EQ_U64(o.alloc_size, 4096);
	T_EQ_INT(o.fd_index, 1);
	T_EQ_INT(o.handle[63], 0x5a);
	T_OK(wire_attach_next(&d, 2, &o, err));
	T_EQ_INT(o.fd_index, WIRE_NO_FD);

	/* a pool naming a descriptor that did not arrive */
	T_OK(wire_attach_get(p, hd.len, &d, err));
	T_EQ_INT(wire_attach_next(&d, 1, &o, err), -EBADMSG);
	T_HAS(err, "descriptor 1");
	{
		uint8_t bad[512];

		/* a count over the fds-per-frame bound */
		memcpy(bad, p, hd.len);
		bad[24] = 0xfe;
		T_EQ_INT(wire_attach_get(bad, hd.len, &d, err), -EBADMSG);
		/* a count past the payload */
		bad[24] = 3;
		T_EQ_INT(wire_attach_get(bad, hd.len, &d, err), -EBADMSG);
		T_HAS(err, "count runs past the end");
		/* pools past the total */
		memcpy(bad, p, hd.len);
		bad[16] = 0x2c; bad[17] = 0x00; /* total 44 < first 253 */
		T_EQ_INT(wire_attach_get(bad, hd.len, &d, err), -EBADMSG);
		T_HAS(err, "total");
	}
	/* more pools in one frame than SCM_RIGHTS can carry */
	a.count = WIRE_FDS_PER_FRAME + 1;
	wire_frame_begin(&w, WIRE_ATTACH, WIRE_F_REPLY, 4);
	wire_attach_head_put(&w, &a);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
	wire_put_free(&w);
}

static void test_small(void)
{
	uint32_t uflags = 0;
	struct wire_put w;
	struct wire_hdr hd;
	const uint8_t *p;
	uint64_t lease;
	struct wire_error e;
	struct wire_notice nt = { WIRE_NOTICE_SHUTDOWN, 4, "daemon stopping", 0 },
			   dn;
	const char *json;
	size_t jn;
	uint32_t level;
	char model[WIRE_PATH_MAX + 1];
	char longmsg[WIRE_MSG_MAX + 100];

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_DETACH, 0, 5);
	wire_detach_put(&w, 123456789);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_OK(wire_detach_get(p, hd.len, &lease, err));
	T_EQ_U64(lease, 123456789);
	T_EQ_INT(wire_detach_get(p, 4, &lease, err), -EBADMSG);

	T_OK(wire_empty_get(NULL, 0, "STATUS", err));
	T_EQ_INT(wire_empty_get(p, 1, "STATUS", err), -EBADMSG);
	T_HAS(err, "STATUS");
	T_OK(wire_ping_get(p, WIRE_PING_MAX, err));
	T_EQ_INT(wire_ping_get(p, WIRE_PING_MAX + 1, err), -EBADMSG);

	wire_frame_begin(&w, WIRE_STATUS, WIRE_F_REPLY, 6);
	wire_status_put(&w, "{\"state\":\"ready\"}", 17);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_OK(wire_status_get(p, hd.len, &json, &jn, err));
	T_EQ_INT(jn, 17);
	T_ASSERT(!memcmp(json, "{\"state\":\"ready\"}", 17));

	/* ERROR messages over the bound are cut, not refused */
	memset(longmsg, 'e', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	T_OK(wire_error_frame(&w, 7, WIRE_E_VERSION, longmsg, err));
	p = payload(&w, &hd);
	T_EQ_INT(hd.type, WIRE_ERROR);
	T_EQ_U64(hd.id, 7);
	T_OK(wire_error_get(p, hd.len, &e, err));
	T_EQ_INT(e.code, WIRE_E_VERSION);
	T_EQ_INT(strlen(e.msg), WIRE_MSG_MAX);
	T_EQ_INT(wire_error_get(p, hd.len - 1, &e, err), -EBADMSG);

	wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
	wire_notice_put(&w, &nt);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_OK(wire_notice_get(p, hd.len, &dn, err));
	T_EQ_INT(dn.kind, WIRE_NOTICE_SHUTDOWN);
	T_EQ_U64(dn.version, 4);
	T_EQ_STR(dn.msg, "daemon stopping");

	wire_frame_begin(&w, WIRE_SLEEP, 0, 8);
	wire_sleep_put(&w, 2);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_OK(wire_sleep_get(p, hd.len, &level, err));
	T_EQ_INT(level, 2);

	wire_frame_begin(&w, WIRE_UPDATE, 0, 8);
	wire_update_put(&w, "/models/next", WIRE_UPDATE_ALLOW_LAYOUT);
	T_OK(wire_frame_end(&w, err));
	p = payload(&w, &hd);
	T_OK(wire_update_get(p, hd.len, model, &uflags, err));
	T_EQ_INT(uflags, WIRE_UPDATE_ALLOW_LAYOUT);
	T_EQ_STR(model, "/models/next");
	wire_put_free(&w);
}

/* A payload larger than the cap cannot be built: the put buffer stops
 * growing at the cap instead of allocating past it. */
static void test_cap(void)
{
	struct wire_put w;
	static uint8_t chunk[1 << 20];

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_STATUS, WIRE_F_REPLY, 1);
	for (int i = 0; i < 257 && !w.err; i++)
		wire_put_bytes(&w, chunk, sizeof(chunk));
	T_EQ_INT(wire_frame_end(&w, err), -EMSGSIZE);
	T_HAS(err, "over the limit");
	T_CMP_INT(w.cap, <=, (size_t)WIRE_HDR_LEN + WIRE_PAYLOAD_MAX);
	wire_put_free(&w);
}

int main(void)
{
	test_header();
	test_hello();
	test_hello_reply();
	test_manifest();
	test_attach();
	test_small();
	test_cap();
	printf("wire codec: ok\n");
	return 0;
}
