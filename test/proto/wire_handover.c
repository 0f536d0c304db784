/* SPDX-License-Identifier: MIT */
/*
 * The hot handover codec (proto/wire/wire_handover.h): every part round-trips;
 * every truncation and a trailing byte are refused; counts past the
 * payload, fd indexes past the frame's descriptors, shared indexes, an
 * unknown or unexpected part, and over-bound inputs to the encoders are
 * each refused with a sentence.
 */
#include <errno.h>

#include "err.h"
#include "t.h"
#include "wire_handover.h"

static struct wire_put w;

static const uint8_t *frame(size_t *n)
{
	T_OK(wire_frame_end(&w, NULL));
	*n = w.len - WIRE_HDR_LEN;
	return w.buf + WIRE_HDR_LEN;
}

/* Every proper prefix of p[0..n) and p plus one byte fail with EBADMSG. */
#define T_TRUNCATIONS(call_p, call_n, expr)                                  \
	do {                                                                 \
		static uint8_t more_[1 << 16];                               \
		for (size_t k_ = 0; k_ < (call_n); k_++) {                   \
			const uint8_t *P = (call_p);                         \
			size_t N = k_;                                       \
			T_EQ_INT((expr), -EBADMSG);                          \
			T_ASSERT(err[0]);                                    \
		}                                                            \
		T_ASSERT((call_n) < sizeof(more_));                          \
		memcpy(more_, (call_p), (call_n));                           \
		more_[(call_n)] = 0;                                         \
		{                                                            \
			const uint8_t *P = more_;                            \
			size_t N = (call_n) + 1;                             \
			T_EQ_INT((expr), -EBADMSG);                          \
		}                                                            \
	} while (0)

static void test_ask(void)
{
	struct wire_ho_ask a = { .ho_min = 1, .ho_max = 3, .pid = 4242 }, b;
	char err[BASE_ERR_LEN];
	const uint8_t *p;
	uint32_t part;
	size_t n;

	wire_frame_begin(&w, WIRE_HANDOVER, 0, 9);
	wire_ho_ask_put(&w, &a);
	p = frame(&n);
	T_OK(wire_ho_part_get(p, n, &part, err));
	T_EQ_INT(part, WIRE_HO_ASK);
	T_EQ_STR(wire_ho_part_name(part), "ASK");
	T_OK(wire_ho_ask_get(p, n, &b, err));
	T_EQ_INT(b.ho_min, 1);
	T_EQ_INT(b.ho_max, 3);
	T_EQ_INT(b.pid, 4242);
	T_TRUNCATIONS(p, n, wire_ho_ask_get(P, N, &b, err));

	/* a part this build does not know, and the wrong part */
	{
		uint8_t raw[12];

		memcpy(raw, p, n);
		raw[0] = WIRE_HO_PART_MAX + 1;
		T_EQ_INT(wire_ho_part_get(raw, n, &part, err), -EBADMSG);
		T_HAS(err, "part 9 is unknown");
		raw[0] = WIRE_HO_COMMIT;
		T_EQ_INT(wire_ho_ask_get(raw, n, &b, err), -EBADMSG);
		T_HAS(err, "expected part ASK, got COMMIT");
		/* an empty range of versions */
		memcpy(raw, p, n);
		raw[4] = 5;
		T_EQ_INT(wire_ho_ask_get(raw, n, &b, err), -EBADMSG);
		T_HAS(err, "versions 5 to 3");
	}
}

static void test_begin(void)
{
	static struct wire_ho_begin b, back;
	char err[BASE_ERR_LEN];
	const uint8_t *p;
	size_t n;

	b = (struct wire_ho_begin){
		.ho_version = WIRE_HO_PROTO, .pid = 77, .nversions = 2,
		.cur = 1, .nclients = 300, .next_lease = 1ull << 40,
		.requests = 123456, .mismatches = 3, .lock_fd = 0,
		.listen_fd = 1, .hash = 1, .pool_size = 3ull << 30,
		.nallow_uid = 2,
		.allow_uid = { 1000, 1001 },
		.nallow_gid = 3,
		.allow_gid = { 10, 44, 999 },
	};
	snprintf(b.rules, sizeof(b.rules), "/etc/rules.txt");
	snprintf(b.allow_quant, sizeof(b.allow_quant), "gptq");
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_begin_put(&w, &b);
	p = frame(&n);
	T_OK(wire_ho_begin_get(p, n, 2, &back, err));
	T_EQ_INT(back.ho_version, WIRE_HO_PROTO);
	T_EQ_INT(back.pid, 77);
	T_EQ_INT(back.nversions, 2);
	T_EQ_INT(back.cur, 1);
	T_EQ_INT(back.nclients, 300);
	T_EQ_U64(back.next_lease, 1ull << 40);
	T_EQ_U64(back.requests, 123456);
	T_EQ_U64(back.mismatches, 3);
	T_EQ_INT(back.listen_fd, 1);
	T_EQ_INT(back.hash, 1);
	T_EQ_U64(back.pool_size, 3ull << 30);
	T_EQ_STR(back.rules, "/etc/rules.txt");
	T_EQ_STR(back.allow_quant, "gptq");
	T_EQ_INT(back.nallow_uid, 2);
	T_EQ_INT(back.allow_uid[1], 1001);
	T_EQ_INT(back.nallow_gid, 3);
	T_EQ_INT(back.allow_gid[0], 10);
	T_EQ_INT(back.allow_gid[2], 999);
	T_TRUNCATIONS(p, n, wire_ho_begin_get(P, N, 2, &back, err));

	/* the descriptors must have come with the frame */
	T_EQ_INT(wire_ho_begin_get(p, n, 1, &back, err), -EBADMSG);
	T_HAS(err, "descriptor index 1, but 1 descriptor(s)");

	/* the lock and the socket in one descriptor */
	b.listen_fd = 0;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, 9);
	wire_ho_begin_put(&w, &b);
	p = frame(&n);
	T_EQ_INT(wire_ho_begin_get(p, n, 2, &back, err), -EBADMSG);
	T_HAS(err, "share descriptor index 0");
	b.listen_fd = 1;

	/* no version, or more than a daemon holds */
	b.nversions = 3;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, 9);
	wire_ho_begin_put(&w, &b);
	p = frame(&n);
	T_EQ_INT(wire_ho_begin_get(p, n, 2, &back, err), -EBADMSG);
	T_HAS(err, "3 version(s)");
	b.nversions = 1;

	/* encoder bounds */
	b.nallow_uid = WIRE_HO_UIDS_MAX + 1;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, 9);
	wire_ho_begin_put(&w, &b);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
	b.nallow_uid = 0;
	b.nallow_gid = WIRE_HO_GIDS_MAX + 1;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, 9);
	wire_ho_begin_put(&w, &b);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
}

static void test_version(void)
{
	static struct wire_ho_version v, back;
	static uint8_t hashes[1025][WIRE_HASH_LEN];
	static const uint8_t ident[5] = { 1, 2, 3, 4, 5 };
	char err[BASE_ERR_LEN];
	const uint8_t *p;
	size_t n;

	for (int i = 0; i < 1025; i++)
		for (int k = 0; k < WIRE_HASH_LEN; k++)
			hashes[i][k] = (uint8_t)(i * 31 + k);
	v = (struct wire_ho_version){
		.slot = 1, .number = 7, .tp_size = 2, .tp_rank = 1,
		.pp_size = 1, .identity = ident, .identity_len = sizeof(ident),
		.flags = WIRE_HO_V_HASHED | WIRE_HO_V_CURRENT,
		.ntensors = 1025, .hashes = &hashes[0][0], .npools = 3,
	};
	snprintf(v.model, sizeof(v.model), "/models/llama");
	memset(v.digest, 0xab, sizeof(v.digest));
	for (uint32_t i = 0; i < 3; i++)
		v.pools[i] = (struct wire_ho_pool){
			.size = (1ull << 31) - i, .alloc_size = 1ull << 31,
			.flags = WIRE_POOL_SEALED, .fd_index = 2 - i,
		};
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_version_put(&w, &v);
	p = frame(&n);
	T_OK(wire_ho_version_get(p, n, 3, &back, err));
	T_EQ_INT(back.slot, 1);
	T_EQ_U64(back.number, 7);
	T_EQ_STR(back.model, "/models/llama");
	T_EQ_INT(back.tp_size, 2);
	T_EQ_INT(back.tp_rank, 1);
	T_EQ_U64(back.identity_len, 5);
	T_ASSERT(!memcmp(back.identity, ident, 5));
	T_EQ_INT(back.digest[15], 0xab);
	T_EQ_INT(back.ntensors, 1025);
	T_ASSERT(back.hashes && !memcmp(back.hashes, hashes, sizeof(hashes)));
	T_EQ_INT(back.npools, 3);
	T_EQ_U64(back.pools[1].size, (1ull << 31) - 1);
	T_EQ_INT(back.pools[2].fd_index, 0);
	T_EQ_INT(back.pools[0].flags, WIRE_POOL_SEALED);
	T_TRUNCATIONS(p, n, wire_ho_version_get(P, N, 3, &back, err));
	T_EQ_INT(wire_ho_version_get(p, n, 2, &back, err), -EBADMSG);
	T_HAS(err, "descriptor index 2, but 2 descriptor(s)");

	/* a hash count past the payload is refused before use */
	{
		static uint8_t raw[1 << 15];
		size_t at = 4 + 4 + 8 + 4 + strlen(v.model) + 16 + 4 + 5 + 16 + 4;

		memcpy(raw, p, n);
		raw[at] = 0xff; raw[at + 1] = 0xff; raw[at + 2] = 0x0f;
		T_EQ_INT(wire_ho_version_get(raw, n, 3, &back, err), -EBADMSG);
		T_HAS(err, "count runs past the end");
	}

	/* without hashes; two pools on one descriptor */
	v.flags = 0;
	v.hashes = NULL;
	v.pools[1].fd_index = 2;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_version_put(&w, &v);
	p = frame(&n);
	T_EQ_INT(wire_ho_version_get(p, n, 3, &back, err), -EBADMSG);
	T_HAS(err, "pools 0 and 1 share descriptor index 2");
	v.pools[1].fd_index = 1;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_version_put(&w, &v);
	p = frame(&n);
	T_OK(wire_ho_version_get(p, n, 3, &back, err));
	T_ASSERT(!back.hashes);
	T_EQ_INT(back.ntensors, 1025);

	/* a pool bigger than its allocation */
	v.pools[0].size = v.pools[0].alloc_size + 1;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_version_put(&w, &v);
	p = frame(&n);
	T_EQ_INT(wire_ho_version_get(p, n, 3, &back, err), -EBADMSG);
	T_HAS(err, "in an allocation of");
	v.pools[0].size = 1;

	/* encoder bounds: too many pools, hashes promised but absent */
	v.npools = WIRE_HO_POOLS_MAX + 1;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, 9);
	wire_ho_version_put(&w, &v);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
	v.npools = 1;
	v.flags = WIRE_HO_V_HASHED;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, 9);
	wire_ho_version_put(&w, &v);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
}

static void test_clients(void)
{
	static struct wire_ho_client c[WIRE_HO_CLIENTS_PER_FRAME + 1];
	static struct wire_ho_client back[WIRE_HO_CLIENTS_PER_FRAME];
	char err[BASE_ERR_LEN];
	const uint8_t *p;
	uint32_t count;
	size_t n;

	for (uint32_t i = 0; i < WIRE_HO_CLIENTS_PER_FRAME + 1; i++) {
		c[i] = (struct wire_ho_client){
			.fd_index = i, .pid = 1000 + i, .uid = 7,
			.flags = i % 2 ? WIRE_HO_C_HELLO : 0,
			.requests = 5ull * i, .nleases = i % (WIRE_HO_LEASES_MAX + 1),
		};
		for (uint32_t k = 0; k < c[i].nleases; k++)
			c[i].leases[k] = (struct wire_ho_lease){ i * 100 + k,
								 1 + k % 2 };
	}
	/* all 253 (one frame's worth of descriptors) */
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_clients_put(&w, c, WIRE_HO_CLIENTS_PER_FRAME);
	p = frame(&n);
	T_OK(wire_ho_clients_get(p, n, WIRE_HO_CLIENTS_PER_FRAME, back,
				 WIRE_HO_CLIENTS_PER_FRAME, &count, err));
	T_EQ_INT(count, WIRE_HO_CLIENTS_PER_FRAME);
	T_EQ_INT(back[252].pid, 1252);
	T_EQ_INT(back[64].nleases, 64);
	T_EQ_U64(back[64].leases[63].id, 6463);
	T_EQ_U64(back[64].leases[63].version, 2);
	T_EQ_INT(back[3].flags, WIRE_HO_C_HELLO);
	T_EQ_U64(back[3].requests, 15);
	/* fewer descriptors than connections, or less room than sent */
	T_EQ_INT(wire_ho_clients_get(p, n, 252, back, WIRE_HO_CLIENTS_PER_FRAME,
				     &count, err), -EBADMSG);
	T_HAS(err, "descriptor index 252");
	T_EQ_INT(wire_ho_clients_get(p, n, 253, back, 10, &count, err),
		 -EBADMSG);
	T_HAS(err, "count is over its bound");

	/* a few, for the truncations */
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_clients_put(&w, c, 3);
	p = frame(&n);
	T_TRUNCATIONS(p, n, wire_ho_clients_get(P, N, 3, back, 3, &count, err));
	/* zero clients is a valid frame */
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_clients_put(&w, c, 0);
	p = frame(&n);
	T_OK(wire_ho_clients_get(p, n, 0, back, 3, &count, err));
	T_EQ_INT(count, 0);
	/* two connections on one descriptor */
	c[1].fd_index = 0;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, 9);
	wire_ho_clients_put(&w, c, 2);
	p = frame(&n);
	T_EQ_INT(wire_ho_clients_get(p, n, 2, back, 3, &count, err), -EBADMSG);
	T_HAS(err, "connections 0 and 1 share descriptor index 0");
	c[1].fd_index = 1;

	/* encoder bounds: 254 clients; 65 leases */
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, 9);
	wire_ho_clients_put(&w, c, WIRE_HO_CLIENTS_PER_FRAME + 1);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
	c[0].nleases = WIRE_HO_LEASES_MAX + 1;
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, 9);
	wire_ho_clients_put(&w, c, 1);
	T_EQ_INT(wire_frame_end(&w, err), -E2BIG);
}

static void test_small(void)
{
	char err[BASE_ERR_LEN], why[WIRE_MSG_MAX + 1];
	const uint8_t *p;
	size_t n;

	wire_frame_begin(&w, WIRE_HANDOVER, 0, 10);
	wire_ho_empty_put(&w, WIRE_HO_COMMIT);
	p = frame(&n);
	T_EQ_U64(n, 4);
	T_OK(wire_ho_empty_get(p, n, WIRE_HO_COMMIT, err));
	T_EQ_INT(wire_ho_empty_get(p, n, WIRE_HO_DONE, err), -EBADMSG);
	T_HAS(err, "expected part DONE, got COMMIT");
	T_TRUNCATIONS(p, n, wire_ho_empty_get(P, N, WIRE_HO_COMMIT, err));

	wire_frame_begin(&w, WIRE_HANDOVER, 0, 10);
	wire_ho_abort_put(&w, "pool 3 is 4096 bytes, the plan says 8192");
	p = frame(&n);
	T_OK(wire_ho_abort_get(p, n, why, err));
	T_EQ_STR(why, "pool 3 is 4096 bytes, the plan says 8192");
	T_TRUNCATIONS(p, n, wire_ho_abort_get(P, N, why, err));
}

/* The NOTICE that tells a handed-over client its new daemon's pid; other
 * kinds carry no pid (and a pid on them is trailing bytes). */
static void test_notice(void)
{
	struct wire_notice nt = { .kind = WIRE_NOTICE_HANDOVER, .version = 3,
				  .pid = 31337 }, back;
	char err[BASE_ERR_LEN];
	const uint8_t *p;
	size_t n;

	snprintf(nt.msg, sizeof(nt.msg), "handed over");
	wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
	wire_notice_put(&w, &nt);
	p = frame(&n);
	T_OK(wire_notice_get(p, n, &back, err));
	T_EQ_INT(back.kind, WIRE_NOTICE_HANDOVER);
	T_EQ_INT(back.pid, 31337);
	T_EQ_U64(back.version, 3);
	T_EQ_STR(back.msg, "handed over");
	T_TRUNCATIONS(p, n, wire_notice_get(P, N, &back, err));
	nt.kind = WIRE_NOTICE_SHUTDOWN;
	wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
	wire_notice_put(&w, &nt);
	p = frame(&n);
	T_OK(wire_notice_get(p, n, &back, err));
	T_EQ_INT(back.pid, 0);
	T_TRUNCATIONS(p, n, wire_notice_get(P, N, &back, err));
}

int main(void)
{
	wire_put_init(&w);
	test_ask();
	test_begin();
	test_version();
	test_clients();
	test_small();
	test_notice();
	wire_put_free(&w);
	T_EQ_STR(wire_type_name(WIRE_HANDOVER), "HANDOVER");
	T_EQ_STR(wire_ho_part_name(0), "?");
	printf("ok\n");
	return 0;
}
