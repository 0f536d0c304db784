/* SPDX-License-Identifier: MIT */
/*
 * Tensor hashes on the device (the backend's hash_begin/step/end): tensors
 * of awkward lengths (241, a block and a byte, a stripe short of two
 * blocks, larger than a piece ...) packed in a pool, copied in pieces of
 * random sizes on random copy streams, hashed on several chains with the
 * steps interleaved; every hash equals base_hash128 of the host bytes. Then
 * the refusals (a tensor of 240 bytes, an unaligned offset, a second
 * begin, an end without a begin, a tensor left unfinished), abandoning a
 * run; hash_batch (whole tensors side by side: the same equality, and its
 * refusals), in rounds (tensors longer than a round's segment; in one
 * batch, two, or seven of one hash; tensors over 256 MiB, chained whole
 * beside the rounds); and the
 * kernel's speed on one chain, on eight, in one batch, and one tensor in
 * rounds (printed). Every hash after the first takes the streams,
 * events, scratch and device memory the one before left (growing what
 * is too small: 7 tensors, then 14; the abandoned ones leave nothing),
 * so the sequence checks that reuse too.
 * Skips (77) where the build has no CUDA or no GPU is found.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu.h"
#include "hash.h"
#include "t.h"
#include "t_wait.h"

#define NT_MAX 64
#define POOL_BYTES (96u << 20)

static struct t_count ncopied;     /* the copies done */
static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
	return t_xorshift(&rng);
}

static void on_done(void *arg, int res)
{
	(void)arg;
	if (res == 0)
		t_count_add(&ncopied, 1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct tens {
	uint64_t off, len, pos;
};

/* Copies every tensor in random pieces, lanes interleaved, with a step
 * after each piece; returns the number of copies queued. */
static int copy_and_step(const struct gpu_backend *be, struct gpu_dev *dev,
			 struct gpu_pool *pool, const uint8_t *stage,
			 struct tens *t, unsigned nt, unsigned nlanes)
{
	unsigned lane_t[8], next_t = 0, live = 0, copies = 0;
	char err[BASE_ERR_LEN];

	for (unsigned k = 0; k < nlanes; k++) {
		lane_t[k] = next_t < nt ? next_t++ : UINT32_MAX;
		live += lane_t[k] != UINT32_MAX;
	}
	while (live) {
		unsigned k = (unsigned)(next() % nlanes);
		struct tens *x;
		struct gpu_copy c;
		uint64_t n;
		unsigned cs = (unsigned)(next() % 4);

		if (lane_t[k] == UINT32_MAX)
			continue;
		x = &t[lane_t[k]];
		n = 1 + next() % (3u << 20);
		if (n > x->len - x->pos)
			n = x->len - x->pos;
		c = (struct gpu_copy){ .dst_off = x->off + x->pos,
				       .src = stage + x->off + x->pos,
				       .width = n, .height = 1 };
		T_OK(be->copy_to_pool(dev, pool, &c, cs, on_done, NULL));
		copies++;
		x->pos += n;
		if (be->hash_step(dev, pool, x->off, x->len, lane_t[k], x->pos,
				  cs, k, err))
			T_FAIL("hash_step: %s", err);
		if (x->pos == x->len) {
			lane_t[k] = next_t < nt ? next_t++ : UINT32_MAX;
			live -= lane_t[k] == UINT32_MAX;
		}
	}
	return (int)copies;
}

/* Waits (10 s at most) for n copies' completions. */
static void wait_copies(int n)
{
	t_count_wait(&ncopied, n, 10000);
	T_EQ_INT(t_count_get(&ncopied), n);
}

/* Ends the hash (hash_end into out), waits for the copies, and checks
 * every tensor's device hash against the host's. */
static void end_and_check(const struct gpu_backend *be, struct gpu_dev *dev,
			  const uint8_t *stage, const struct tens *t,
			  unsigned nt, uint8_t (*out)[16], int copies)
{
	char err[BASE_ERR_LEN];

	if (be->hash_end(dev, out, err))
		T_FAIL("hash_end: %s", err);
	wait_copies(copies);
	for (unsigned i = 0; i < nt; i++) {
		uint8_t want[16];
		char w[BASE_HASH_HEX_LEN], g[BASE_HASH_HEX_LEN];

		base_hash128(stage + t[i].off, t[i].len, want);
		if (memcmp(want, out[i], 16)) {
			base_hash_hex(want, w);
			base_hash_hex(out[i], g);
			T_FAIL("tensor %u (%llu bytes at %llu): device %s, host %s",
			       i, (unsigned long long)t[i].len,
			       (unsigned long long)t[i].off, g, w);
		}
	}
}

static void check_all(const struct gpu_backend *be, struct gpu_dev *dev,
		      struct gpu_pool *pool, const uint8_t *stage)
{
	static const uint64_t lens[] = {
		241, 1024, 1025, 1984, 2047, 2049, 4096 + 7, 300000, 1u << 20,
		(1u << 20) + 241, (5u << 20) + 3, (17u << 20) + 13,
	};
	static uint8_t out[NT_MAX][16];
	struct tens t[NT_MAX];
	char err[BASE_ERR_LEN];
	unsigned nt = 0;
	uint64_t off = 0;
	int copies;

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		t[nt++] = (struct tens){ .len = lens[i] };
	while (nt < 48)
		t[nt++] = (struct tens){ .len = 241 + next() % (2u << 20) };
	for (unsigned i = 0; i < nt; i++) {
		t[i].off = off;
		off = gpu_align_up(off + t[i].len, GPU_POOL_ALIGN);
		T_ASSERT(off <= POOL_BYTES);
	}
	memset(out, 0, sizeof(out));
	t_count_set(&ncopied, 0);
	T_OK(be->hash_begin(dev, nt, err));
	copies = copy_and_step(be, dev, pool, stage, t, nt, 5);
	end_and_check(be, dev, stage, t, nt, out, copies);
	printf("%u tensors, %d pieces: the device's hashes equal the host's\n",
	       nt, copies);
}

/* hash_batch: the same awkward tensors copied whole first (on two copy
 * streams), then hashed in two batches, each after its stream's copies,
 * in an order that is not the pool's; every hash equals the host's. */
static void check_batch(const struct gpu_backend *be, struct gpu_dev *dev,
			struct gpu_pool *pool, const uint8_t *stage)
{
	static uint8_t out[NT_MAX][16];
	struct gpu_hash_job jobs[NT_MAX];
	char err[BASE_ERR_LEN];
	unsigned nt = 0, nj[2] = { 0, 0 };
	struct tens t[NT_MAX];
	uint64_t off = 0, len[NT_MAX];
	int copies = 0;

	T_ASSERT(be->hash_batch);
	while (nt < 40) {
		len[nt] = nt < 4 ? (uint64_t[]){ 241, 1024, 1025, 6u << 20 }[nt] :
			  241 + next() % (2u << 20);
		nt++;
	}
	memset(out, 0, sizeof(out));
	t_count_set(&ncopied, 0);
	T_OK(be->hash_begin(dev, nt, err));
	for (unsigned i = 0; i < nt; i++) {
		unsigned cs = i % 2;
		struct gpu_copy c = { .dst_off = off, .src = stage + off,
				      .width = len[i], .height = 1 };

		T_OK(be->copy_to_pool(dev, pool, &c, cs, on_done, NULL));
		copies++;
		/* batch cs holds tensors cs, cs + 2, ..., listed backwards */
		memmove(jobs + cs * NT_MAX / 2 + 1, jobs + cs * NT_MAX / 2,
			sizeof(*jobs) * nj[cs]);
		jobs[cs * NT_MAX / 2] = (struct gpu_hash_job){
			.pool = pool, .off = off, .len = len[i], .i = i };
		nj[cs]++;
		t[i] = (struct tens){ .off = off, .len = len[i] };
		off = gpu_align_up(off + len[i], GPU_POOL_ALIGN);
		T_ASSERT(off <= POOL_BYTES);
	}
	for (unsigned cs = 0; cs < 2; cs++)
		if (be->hash_batch(dev, jobs + cs * NT_MAX / 2, nj[cs], cs, err))
			T_FAIL("hash_batch: %s", err);
	end_and_check(be, dev, stage, t, nt, out, copies);
	printf("%u tensors in 2 batches: the device's hashes equal the host's\n",
	       nt);
	/* refusals: nothing is queued by a refused batch */
	T_OK(be->hash_begin(dev, 4, err));
	jobs[0] = (struct gpu_hash_job){ .pool = pool, .off = 0, .len = 240, .i = 0 };
	T_EQ_INT(be->hash_batch(dev, jobs, 1, 0, err), -EINVAL);
	T_HAS(err, "bad device hash batch job");
	jobs[0] = (struct gpu_hash_job){ .pool = pool, .off = 8, .len = 4096, .i = 0 };
	T_EQ_INT(be->hash_batch(dev, jobs, 1, 0, err), -EINVAL);
	jobs[0] = (struct gpu_hash_job){ .pool = pool, .off = 0, .len = 4096, .i = 4 };
	T_EQ_INT(be->hash_batch(dev, jobs, 1, 0, err), -EINVAL);
	jobs[0] = (struct gpu_hash_job){ .pool = pool, .off = 0, .len = 4096, .i = 1 };
	jobs[1] = jobs[0];
	T_EQ_INT(be->hash_batch(dev, jobs, 2, 0, err), -EINVAL);
	T_HAS(err, "twice in one hash batch");
	T_EQ_INT(be->hash_batch(dev, jobs, 5, 0, err), -EINVAL);
	T_HAS(err, "more than the 4 left");
	/* a tensor stepped before cannot join a batch */
	T_OK(be->hash_step(dev, pool, 0, 8192, 2, 4096, 0, 0, err));
	jobs[0] = (struct gpu_hash_job){ .pool = pool, .off = 0, .len = 8192, .i = 2 };
	T_EQ_INT(be->hash_batch(dev, jobs, 1, 0, err), -EINVAL);
	T_OK(be->hash_end(dev, NULL, err));
	T_EQ_INT(be->hash_batch(dev, jobs, 1, 0, err), -EINVAL);
	T_HAS(err, "no device hash is running");
}

/* Queues len bytes of stage at off into pool at off, in pieces of at
 * most a staging piece (2 MiB), on copy stream 0; how many. */
static int copy_pieces(const struct gpu_backend *be, struct gpu_dev *dev,
		       struct gpu_pool *pool, const uint8_t *stage,
		       uint64_t off, uint64_t len)
{
	int n = 0;

	for (uint64_t o = 0; o < len; o += 2u << 20, n++) {
		struct gpu_copy c = {
			.dst_off = off + o, .src = stage + off + o,
			.width = len - o < (2u << 20) ? len - o : 2u << 20,
			.height = 1 };

		T_OK(be->copy_to_pool(dev, pool, &c, 0, on_done, NULL));
	}
	return n;
}

/* hash_batch in rounds: tensors longer than a round's segment (32 MiB)
 * are chained over several rounds, the accumulators carried between
 * them; lengths at the edges (a segment and a block and a byte, one
 * block and a byte, under a block) beside them. Every
 * hash equals the host's. nbatch > 1: the jobs in that many batches of
 * one hash (gpu.h allows any number between begin and end), each batch's rounds
 * after the last one's, the segment table and the scratch's parity
 * carried across batches. */
static void check_rounds(const struct gpu_backend *be, struct gpu_dev *dev,
			 struct gpu_pool *pool, const uint8_t *stage,
			 unsigned nbatch)
{
	static const uint64_t len[] = {
		(40u << 20) + 3, (32u << 20) + 1025, 1025, 300, 777777,
		(8u << 20) + 1, 4u << 20,
	};
	enum { NR = sizeof(len) / sizeof(len[0]) };
	static uint8_t out[NR][16];
	struct gpu_hash_job jobs[NR];
	char err[BASE_ERR_LEN];
	struct tens t[NR];
	uint64_t off = 0;
	int copies = 0;

	memset(out, 0, sizeof(out));
	t_count_set(&ncopied, 0);
	T_OK(be->hash_begin(dev, NR, err));
	for (unsigned i = 0; i < NR; i++) {
		copies += copy_pieces(be, dev, pool, stage, off, len[i]);
		/* listed shortest first: the batch orders them itself */
		jobs[NR - 1 - i] = (struct gpu_hash_job){
			.pool = pool, .off = off, .len = len[i], .i = i };
		t[i] = (struct tens){ .off = off, .len = len[i] };
		off = gpu_align_up(off + len[i], GPU_POOL_ALIGN);
		T_ASSERT(off <= POOL_BYTES);
	}
	for (unsigned b = 0; b < nbatch; b++) {
		unsigned lo = NR * b / nbatch, hi = NR * (b + 1) / nbatch;

		if (be->hash_batch(dev, jobs + lo, hi - lo, 0, err))
			T_FAIL("hash_batch %u of %u: %s", b, nbatch, err);
	}
	end_and_check(be, dev, stage, t, NR, out, copies);
	printf("%u tensors in rounds (up to 40 MiB: two segments), %u batch(es): the device's hashes equal the host's\n",
	       (unsigned)NR, nbatch);
}

/* Parts (gpu/hash_plan.h): a 90 MiB holder (three round segments) with
 * parts at its start, across its segment edges, at its end and an alias of
 * all of it, and a tensor off the block inside it (summed itself), copied
 * whole and hashed in one batch: every hash equals the host's. Without
 * the host chains every part chains from the holder's round sums; with
 * them the holder, its alias and the two long parts chain on the host
 * from the holder's sums copied there (cuda_hash_host.c), and the short
 * parts are summed on the device themselves. */
static void check_parts(const struct gpu_backend *be, struct gpu_dev *dev,
			struct gpu_pool *pool, const uint8_t *stage,
			bool host_chains)
{
	const uint64_t HL = (90u << 20) + 77;
	static const uint64_t part[][2] = {   /* offset, length */
		{ 0, 30u << 20 }, { (30u << 20), (10u << 20) + 5 },
		{ (31u << 20) + 1024, (40u << 20) + 3 },
		{ (80u << 20), (10u << 20) + 77 }, { 0, (90u << 20) + 77 },
		{ (5u << 20) + 16, (3u << 20) },
	};
	enum { NR = 1 + sizeof(part) / sizeof(part[0]) };
	static uint8_t out[NR][16];
	struct gpu_hash_job jobs[NR];
	char err[BASE_ERR_LEN];
	struct tens t[NR];
	int copies;

	T_ASSERT(HL <= POOL_BYTES);
	memset(out, 0, sizeof(out));
	t_count_set(&ncopied, 0);
	T_ASSERT(!dev->hash_host_chains);
	dev->hash_host_chains = host_chains;
	T_OK(be->hash_begin(dev, NR, err));
	copies = copy_pieces(be, dev, pool, stage, 0, HL);
	t[0] = (struct tens){ .off = 0, .len = HL };
	for (unsigned i = 1; i < NR; i++)
		t[i] = (struct tens){ .off = part[i - 1][0], .len = part[i - 1][1] };
	for (unsigned i = 0; i < NR; i++)
		jobs[NR - 1 - i] = (struct gpu_hash_job){
			.pool = pool, .off = t[i].off, .len = t[i].len, .i = i };
	if (be->hash_batch(dev, jobs, NR, 0, err))
		T_FAIL("hash_batch: %s", err);
	end_and_check(be, dev, stage, t, NR, out, copies);
	dev->hash_host_chains = false;
	printf("a 90 MiB tensor and %u tensors inside it (parts, an alias, one off the block) in one batch, %s: the device's hashes equal the host's\n",
	       (unsigned)NR - 1, host_chains ?
	       "host chains (the holder, its alias and two parts from its sums)" :
	       "device chains");
}

/* Long tensors, two of them at lengths off the block and one a block over
 * 64 MiB, with short and segment-long ones in the same batch, in a pool
 * of their own; then a second batch of the same hash with a long one.
 * host_chains: the first batch's three over 64 MiB are chained on the
 * host (cuda_hash.c's host chains, in 32 MiB pieces), the second batch's
 * 260 MiB one whole on the device (the host chains are the first
 * batch's); else (gpu_dev.hash_host_chains false, as for a load) the
 * first batch's two over
 * 256 MiB are summed at once and chained whole on the device, beside the
 * rounds of the rest, and the second's goes through the rounds. Every
 * hash equals the host's. */
static void check_long(const struct gpu_backend *be, struct gpu_dev *dev,
		       bool host_chains)
{
	static const uint64_t len[] = {
		(300u << 20) + 7, (257u << 20) + 1024, (40u << 20) + 3, 1025,
		300, (3u << 20) + 1, (64u << 20) + 1025, (260u << 20) + 5,
	};
	enum { NR = sizeof(len) / sizeof(len[0]) };
	static uint8_t out[NR][16];
	struct gpu_hash_job jobs[NR];
	char err[BASE_ERR_LEN];
	struct gpu_pool pool;
	struct tens t[NR];
	uint64_t off = 0, cap = 0;
	uint8_t *stage;
	int copies = 0;

	for (unsigned i = 0; i < NR; i++)
		cap = gpu_align_up(cap + len[i], GPU_POOL_ALIGN);
	T_OK(be->pool_create(dev, &pool, cap, err));
	T_OK(be->staging_alloc(dev, cap, (void **)&stage, err));
	for (uint64_t i = 0; i + 8 <= cap; i += 8) {
		uint64_t v = next();

		memcpy(stage + i, &v, 8);
	}
	memset(out, 0, sizeof(out));
	t_count_set(&ncopied, 0);
	dev->hash_host_chains = host_chains;
	T_OK(be->hash_begin(dev, NR, err));
	for (unsigned i = 0; i < NR; i++) {
		copies += copy_pieces(be, dev, &pool, stage, off, len[i]);
		jobs[i] = (struct gpu_hash_job){
			.pool = &pool, .off = off, .len = len[i], .i = i };
		t[i] = (struct tens){ .off = off, .len = len[i] };
		off = gpu_align_up(off + len[i], GPU_POOL_ALIGN);
	}
	if (be->hash_batch(dev, jobs, NR - 1, 0, err))
		T_FAIL("hash_batch: %s", err);
	if (be->hash_batch(dev, jobs + NR - 1, 1, 0, err))
		T_FAIL("hash_batch (the second): %s", err);
	end_and_check(be, dev, stage, t, NR, out, copies);
	dev->hash_host_chains = false;
	printf("%u tensors, three over 256 MiB, two batches, %s: the device's hashes equal the host's\n",
	       (unsigned)NR, host_chains ? "host chains" : "device chains only");
	be->staging_free(dev, stage, cap);
	be->pool_release(dev, &pool);
}

static void check_refusals(const struct gpu_backend *be, struct gpu_dev *dev,
			   struct gpu_pool *pool)
{
	uint8_t out[4][16];
	char err[BASE_ERR_LEN];

	T_EQ_INT(be->hash_end(dev, out, err), -EINVAL);
	T_HAS(err, "no device hash is running");
	T_OK(be->hash_begin(dev, 4, err));
	T_EQ_INT(be->hash_begin(dev, 4, err), -EBUSY);
	T_EQ_INT(be->hash_step(dev, pool, 0, GPU_HASH_MIN_LEN, 0, 240, 0, 0, err), -EINVAL);
	T_HAS(err, "bad device hash step");
	T_EQ_INT(be->hash_step(dev, pool, 8, 4096, 0, 4096, 0, 0, err), -EINVAL);
	T_EQ_INT(be->hash_step(dev, pool, 0, 4096, 4, 4096, 0, 0, err), -EINVAL);
	T_EQ_INT(be->hash_step(dev, pool, POOL_BYTES - 256, 4096, 0, 4096, 0, 0, err), -EINVAL);
	/* tensor 1 started, never finished */
	T_OK(be->hash_step(dev, pool, 0, 8192, 1, 4096, 0, 0, err));
	T_EQ_INT(be->hash_end(dev, out, err), -EIO);
	T_HAS(err, "tensor 1 was never finished");
	/* abandoning, then a fresh run works */
	T_OK(be->hash_begin(dev, 4, err));
	T_OK(be->hash_step(dev, pool, 0, 8192, 1, 4096, 0, 0, err));
	T_OK(be->hash_end(dev, NULL, err));
	T_OK(be->hash_begin(dev, 1, err));
	T_OK(be->hash_step(dev, pool, 0, 8192, 0, 8192, 0, 0, err));
	T_OK(be->hash_end(dev, out, err));
}

/* Informational: one batch of two 1 GiB tensors (llama-8b's embedding
 * and head: their chains bounded a commit's hash), with the host chains
 * and without, alternated, three times each, the results read so that
 * the next hash takes the last one's memory (as a commit's does), the
 * device memory as the driver gives it (the time does not depend on the
 * bytes). */
static void speed_long(const struct gpu_backend *be, struct gpu_dev *dev)
{
	uint8_t out[2][16];
	struct gpu_pool big;
	char err[BASE_ERR_LEN];
	double t0;

	if (be->pool_create(dev, &big, 2ull << 30, err)) {
		printf("no 2 GiB pool for the long chains: %s\n", err);
		return;
	}
	/* alternated: host chains, device chains only, ... */
	for (int round = 0; round < 6; round++) {
		struct gpu_hash_job j[2] = {
			{ .pool = &big, .off = 0, .len = 1ull << 30, .i = 0 },
			{ .pool = &big, .off = 1ull << 30, .len = 1ull << 30,
			  .i = 1 },
		};

		dev->hash_host_chains = !(round % 2);
		T_OK(be->hash_begin(dev, 2, err));
		t0 = now_s();
		T_OK(be->hash_batch(dev, j, 2, 0, err));
		T_OK(be->hash_end(dev, out, err));
		printf("kernel, one batch of two 1 GiB tensors, %s: %.3f ms, %.1f GB/s\n",
		       round % 2 ? "device chains" : "host chains",
		       (now_s() - t0) * 1e3, (2ull << 30) / (now_s() - t0) / 1e9);
	}
	dev->hash_host_chains = false;
	be->pool_release(dev, &big);
}

/* Informational: where a commit's hash of llama-8b goes. Its shapes in
 * one pool (two 1 GiB tensors; 32 layers of q, k, v, o, gate, up, down
 * and the fused qkv and gate_up views over them: 290 tensors, 16 GB and
 * 8.5 GiB of views) hashed in one batch ("all"); the same without the two
 * 1 GiB ones ("layers"); the two alone ("two 1 GiB"); layer 0's gate,
 * up, down and gate_up view (a partial update's, "layer 0's MLP"); each
 * with the host chains and without, alternated, three times each with
 * the sums kernel of four threads a block and of one (WCACHE_CUDA_SUMS,
 * alternated), every digest equal to its set's first; every hash ended
 * with its results read, so the next takes the last one's memory as a
 * commit's does. */
static void speed_mix(const struct gpu_backend *be, struct gpu_dev *dev)
{
	enum { L = 32, NJ = 2 + 9 * L };
	static const uint64_t MiB = 1u << 20;
	static struct gpu_hash_job j[NJ];
	static uint8_t out[NJ][16], ref[4][NJ][16];
	static const char *what[] = { "all", "layers", "two 1 GiB",
				      "layer 0's MLP" };
	static struct gpu_hash_job mlp[4];
	struct gpu_pool big;
	char err[BASE_ERR_LEN];
	uint64_t off = 0, cap = 2 * 1024 * MiB + L * 416 * MiB;
	unsigned n = 0;

	if (be->pool_create(dev, &big, cap, err)) {
		printf("no pool of %llu bytes for the llama-8b mix: %s\n",
		       (unsigned long long)cap, err);
		return;
	}
	for (unsigned k = 0; k < 2; k++, off += 1024 * MiB)
		j[n++] = (struct gpu_hash_job){ .pool = &big, .off = off,
						.len = 1024 * MiB };
	for (unsigned l = 0; l < L; l++) {
		static const uint64_t part[] = { 32, 8, 8, 32, 112, 112, 112 };
		uint64_t at[7];

		for (unsigned p = 0; p < 7; p++) {
			at[p] = off;
			j[n++] = (struct gpu_hash_job){ .pool = &big, .off = off,
							.len = part[p] * MiB };
			off += part[p] * MiB;
		}
		j[n++] = (struct gpu_hash_job){ .pool = &big, .off = at[0],
						.len = 48 * MiB };
		j[n++] = (struct gpu_hash_job){ .pool = &big, .off = at[4],
						.len = 224 * MiB };
	}
	T_ASSERT(n == NJ && off <= cap);
	for (unsigned k = 0; k < NJ; k++)
		j[k].i = k;
	/* a partial update of layer 0's MLP: gate, up, down and the
	 * gate_up view over the first two */
	mlp[0] = j[2 + 4];
	mlp[1] = j[2 + 5];
	mlp[2] = j[2 + 6];
	mlp[3] = j[2 + 8];
	for (int round = 0; round < 6; round++)
		for (unsigned w = 0; w < 4; w++)
			for (int hc = 1; hc >= 0; hc--) {
				const char *sums = round % 2 ? "thread" : "4";
				const struct gpu_hash_job *first =
					w == 1 ? j + 2 : w == 3 ? mlp : j;
				unsigned cnt = w == 0 ? NJ : w == 1 ? NJ - 2 :
					       w == 2 ? 2 : 4;
				double t0, t1;

				/* the sums kernel (cuda_xxh3.cu), alternated */
				setenv("WCACHE_CUDA_SUMS", sums, 1);
				dev->hash_host_chains = hc;
				T_OK(be->hash_begin(dev, NJ, err));
				t0 = now_s();
				T_OK(be->hash_batch(dev, first, cnt, 0, err));
				t1 = now_s();
				T_OK(be->hash_end(dev, out, err));
				/* every digest equals the first hash's of its set
				 * (round 0, host chains): both kernels, both kinds
				 * of chain, over bytes that stay put */
				for (unsigned k = 0; k < cnt; k++) {
					uint8_t *r = ref[w][first[k].i];

					if (!round && hc)
						memcpy(r, out[first[k].i], 16);
					else if (memcmp(r, out[first[k].i], 16))
						T_FAIL("llama-8b mix, %s, %s, sums %s: tensor %u's digest differs from the first hash's",
						       what[w], hc ? "host chains" : "device chains",
						       sums, first[k].i);
				}
				printf("llama-8b mix, %s (%u tensors), %s, sums %s: %.3f ms (queued in %.3f)\n",
				       what[w], cnt,
				       hc ? "host chains" : "device chains", sums,
				       (now_s() - t0) * 1e3, (t1 - t0) * 1e3);
			}
	unsetenv("WCACHE_CUDA_SUMS");
	dev->hash_host_chains = false;
	be->pool_release(dev, &big);
}

/* Informational: GB/s of the kernel, one 64 MiB tensor on one chain, and
 * eight 8 MiB tensors on eight chains (bytes already in the pool). */
static void speed(const struct gpu_backend *be, struct gpu_dev *dev,
		  struct gpu_pool *pool)
{
	static uint8_t out[8][16];
	char err[BASE_ERR_LEN];
	double t0;

	for (int round = 0; round < 2; round++) {
		T_OK(be->hash_begin(dev, 1, err));
		t0 = now_s();
		T_OK(be->hash_step(dev, pool, 0, 64u << 20, 0, 64u << 20, 0, 0, err));
		T_OK(be->hash_end(dev, out, err));
		printf("kernel, one chain: 64 MiB in %.3f ms, %.1f GB/s\n",
		       (now_s() - t0) * 1e3, (64u << 20) / (now_s() - t0) / 1e9);
		T_OK(be->hash_begin(dev, 8, err));
		t0 = now_s();
		for (unsigned i = 0; i < 8; i++)
			T_OK(be->hash_step(dev, pool, (uint64_t)i << 23, 8u << 20,
					   i, 8u << 20, 0, i, err));
		T_OK(be->hash_end(dev, out, err));
		printf("kernel, eight chains: 64 MiB in %.3f ms, %.1f GB/s\n",
		       (now_s() - t0) * 1e3, (64u << 20) / (now_s() - t0) / 1e9);
		{
			struct gpu_hash_job j[24];

			T_OK(be->hash_begin(dev, 24, err));
			for (unsigned i = 0; i < 24; i++)
				j[i] = (struct gpu_hash_job){
					.pool = pool, .off = (uint64_t)i << 22,
					.len = 4u << 20, .i = i };
			t0 = now_s();
			T_OK(be->hash_batch(dev, j, 24, 0, err));
			T_OK(be->hash_end(dev, NULL, err));
			printf("kernel, one batch of 24 x 4 MiB: 96 MiB in %.3f ms, %.1f GB/s\n",
			       (now_s() - t0) * 1e3,
			       (96u << 20) / (now_s() - t0) / 1e9);
			T_OK(be->hash_begin(dev, 1, err));
			j[0] = (struct gpu_hash_job){ .pool = pool, .off = 0,
						      .len = 64u << 20, .i = 0 };
			t0 = now_s();
			T_OK(be->hash_batch(dev, j, 1, 0, err));
			T_OK(be->hash_end(dev, out, err));
			printf("kernel, one batch of one 64 MiB tensor (in rounds): %.3f ms, %.1f GB/s\n",
			       (now_s() - t0) * 1e3,
			       (64u << 20) / (now_s() - t0) / 1e9);
		}
	}
	speed_long(be, dev);
	speed_mix(be, dev);
}

int main(void)
{
	const struct gpu_backend *be = gpu_cuda_backend();
	char err[BASE_ERR_LEN];
	struct gpu_pool pool;
	struct gpu_dev dev;
	uint8_t *stage;
	int ret;

	t_count_init(&ncopied);
	T_SKIP_IF(!be, "built without CUDA");
	ret = be->open(&dev, "0", err);
	T_SKIP_IF(ret == -ENODEV, "%s", err);
	T_OK(ret);
	T_ASSERT(be->hash_begin && be->hash_step && be->hash_end);
	T_ASSERT(!gpu_host_backend.hash_begin);
	T_OK(be->pool_create(&dev, &pool, POOL_BYTES, err));
	T_OK(be->staging_alloc(&dev, POOL_BYTES, (void **)&stage, err));
	for (size_t i = 0; i < POOL_BYTES; i += 8) {
		uint64_t v = next();

		memcpy(stage + i, &v, 8);
	}
	check_all(be, &dev, &pool, stage);
	check_all(be, &dev, &pool, stage);
	check_batch(be, &dev, &pool, stage);
	check_rounds(be, &dev, &pool, stage, 1);
	check_rounds(be, &dev, &pool, stage, 2);
	check_rounds(be, &dev, &pool, stage, 7);
	check_parts(be, &dev, &pool, stage, false);
	check_parts(be, &dev, &pool, stage, true);
	check_long(be, &dev, true);
	check_long(be, &dev, false);
	check_refusals(be, &dev, &pool);
	speed(be, &dev, &pool);
	be->pool_release(&dev, &pool);
	be->staging_free(&dev, stage, POOL_BYTES);
	be->close(&dev);
	return 0;
}
