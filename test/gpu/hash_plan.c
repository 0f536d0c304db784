/* SPDX-License-Identifier: MIT */
/*
 * gpu/hash_plan.c, the rounds the device hash follows, executed here on the
 * CPU the way the kernels run them (cuda_xxh3.cu: a round's summed segments
 * fill the scratch at flat0, then every chained segment reads it, carrying
 * the accumulators in the tensor's state, finishing at HASH_SEG_FIN), with
 * the scratch poisoned between rounds: every tensor's hash equals
 * libxxhash's. Batches of holders and their parts (at block offsets, at the
 * holder's end, across segment and round edges, aliases of the same bytes),
 * beside tensors that must not be parts (off the block, too short, running
 * past a holder's end, inside a part that is itself misaligned), at small
 * segment and round sizes (many rounds) and at the device's. The device
 * reads each holder's blocks once: the blocks summed equal those of the
 * tensors that are not parts, fewer than all. Refusals: too little room,
 * a segment longer than a round.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "hash_plan.h"
#include "t.h"
#include "xxh3_split.h"

static uint64_t rng = 0x51ed2701f00du;

static uint64_t next(void)
{
	return t_xorshift(&rng);
}

struct tj {
	uint64_t off, len;
	int part;                      /* expected to be a part */
};

/* Runs the plan of the jobs over buf; checks every hash and the blocks
 * summed; returns the number of rounds. */
static uint32_t run(const uint8_t *buf, const struct tj *t, uint32_t n,
		    uint64_t seg, uint64_t round)
{
	struct hash_pjob *pj = calloc(n, sizeof(*pj));
	uint64_t (*state)[8] = calloc(n, sizeof(*state));
	uint8_t (*out)[16] = calloc(n, sizeof(*out));
	uint64_t (*scr)[8] = malloc(sizeof(*scr) * round);
	uint32_t room = 0, nseg = 0, nrd = 0;
	struct hash_seg *segs;
	struct hash_round *rd = NULL;
	uint64_t kw[XS_SECRET_WORDS], summed = 0, own = 0, all = 0;
	uint32_t *fins = calloc(n, sizeof(*fins));

	for (uint32_t k = 0; k < n; k++)
		room += (uint32_t)(xs_nblocks(t[k].len) / seg + 2);
	segs = calloc(room, sizeof(*segs));
	T_ASSERT(pj && state && out && scr && segs && fins);
	xs_secret_words(kw);
	for (uint32_t k = 0; k < n; k++) {
		pj[k] = (struct hash_pjob){
			.base = (uint64_t)(uintptr_t)(buf + t[k].off),
			.len = t[k].len, .state = k, .out = k,
		};
		all += xs_nblocks(t[k].len);
		if (!t[k].part)
			own += xs_nblocks(t[k].len);
	}
	T_EQ_INT(hash_plan_rounds(pj, n, seg, round, segs, room, &nseg, &rd, &nrd), 0);
	for (uint32_t r = 0; r < nrd; r++) {
		const struct hash_round *R = &rd[r];
		uint64_t flat = 0;

		T_ASSERT(R->nseg <= R->nchain && R->nblocks <= round);
		for (uint64_t b = 0; b < round; b++)
			for (unsigned i = 0; i < 8; i++)
				scr[b][i] = next();
		for (uint32_t q = R->first; q < R->first + R->nseg; q++) {
			const struct hash_seg *g = &segs[q];

			T_EQ_U64(g->flat0, flat);
			T_ASSERT(g->nblk <= seg);
			for (uint64_t b = 0; b < g->nblk; b++)
				xs_block_sum(scr[g->flat0 + b],
					     (const uint8_t *)(uintptr_t)g->base +
					     (g->b0 + b) * XS_BLOCK, kw);
			flat += g->nblk;
			summed += g->nblk;
		}
		T_EQ_U64(flat, R->nblocks);
		for (uint32_t q = R->first; q < R->first + R->nchain; q++) {
			const struct hash_seg *g = &segs[q];
			uint64_t *acc = state[g->state];

			T_ASSERT(g->flat0 + g->nblk <= R->nblocks);
			if (g->flags & HASH_SEG_INIT)
				xs_init(acc);
			for (uint64_t b = 0; b < g->nblk; b++)
				for (unsigned i = 0; i < 8; i++)
					acc[i] = xs_scramble1(acc[i],
							      scr[g->flat0 + b][i],
							      kw[16 + i]);
			if (g->flags & HASH_SEG_FIN) {
				xs_finish(acc, (const uint8_t *)(uintptr_t)g->base,
					  g->len, out[g->out]);
				fins[g->out]++;
			}
		}
	}
	for (uint32_t k = 0; k < n; k++) {
		uint8_t want[16];
		char w[BASE_HASH_HEX_LEN], g[BASE_HASH_HEX_LEN];

		base_hash128(buf + t[k].off, t[k].len, want);
		if (fins[k] != 1)
			T_FAIL("job %u (%llu bytes at %llu%s), segments of %llu, rounds of %llu: finished %u times", k, (unsigned long long)t[k].len, (unsigned long long)t[k].off, t[k].part ? ", a part" : "", (unsigned long long)seg, (unsigned long long)round, fins[k]);
		if (memcmp(want, out[k], 16)) {
			base_hash_hex(want, w);
			base_hash_hex(out[k], g);
			T_FAIL("job %u (%llu bytes at %llu%s), segments of %llu, rounds of %llu: %s, xxhash %s",
			       k, (unsigned long long)t[k].len,
			       (unsigned long long)t[k].off,
			       t[k].part ? ", a part" : "",
			       (unsigned long long)seg, (unsigned long long)round,
			       g, w);
		}
	}
	/* each holder's blocks summed once, the parts' never */
	T_EQ_U64(summed, own);
	T_ASSERT(own <= all);
	free(fins);
	free(rd);
	free(segs);
	free(scr);
	free(out);
	free(state);
	free(pj);
	return nrd;
}

/* A fixed batch: a holder with parts at its start, middle and end (one
 * an alias of all of it), tensors off the block or too short inside it,
 * one running past its end, a part of a misaligned tensor, and lone
 * tensors; listed in a shuffled order. */
static uint32_t fixed(struct tj *t)
{
	const uint64_t H = 4096;               /* the holder's first byte */
	const uint64_t HL = 300 * XS_BLOCK + 77;
	uint32_t n = 0;

	t[n++] = (struct tj){ H, HL, 0 };
	t[n++] = (struct tj){ H, 100 * XS_BLOCK, 1 };              /* start */
	t[n++] = (struct tj){ H + 100 * XS_BLOCK, 120 * XS_BLOCK + 5, 1 };
	t[n++] = (struct tj){ H + 220 * XS_BLOCK + 5 - 5, 80 * XS_BLOCK + 77, 1 };
	t[n++] = (struct tj){ H, HL, 1 };                          /* alias */
	t[n++] = (struct tj){ H + 16, 90 * XS_BLOCK, 0 };          /* off the block */
	t[n++] = (struct tj){ H + 10 * XS_BLOCK, 30 * XS_BLOCK, 0 };  /* too short */
	t[n++] = (struct tj){ H + 290 * XS_BLOCK, 100 * XS_BLOCK, 0 }; /* past the end */
	t[n++] = (struct tj){ H + 16 + 64 * XS_BLOCK, 70 * XS_BLOCK, 0 };
	t[n++] = (struct tj){ 600 * XS_BLOCK, 241, 0 };
	t[n++] = (struct tj){ 700 * XS_BLOCK, 1025, 0 };
	t[n++] = (struct tj){ 800 * XS_BLOCK, 77 * XS_BLOCK + 3, 0 };
	/* a second holder whose parts cross every segment edge */
	t[n++] = (struct tj){ 1000 * XS_BLOCK, 500 * XS_BLOCK, 0 };
	for (uint64_t o = 0; o + 64 <= 500; o += 64 + o % 7)
		t[n++] = (struct tj){ (1000 + o) * XS_BLOCK, 64 * XS_BLOCK + o + 1, 1 };
	for (uint32_t k = n; k > 1; k--) {         /* shuffled */
		uint32_t r = (uint32_t)(next() % k);
		struct tj x = t[k - 1];

		t[k - 1] = t[r];
		t[r] = x;
	}
	return n;
}

/* A random batch of holders, each with random parts (half of them at
 * block offsets, long enough to be parts) and aliases. */
static uint32_t random_batch(struct tj *t, uint32_t max, uint64_t cap)
{
	uint32_t n = 0;
	uint64_t off = 0;

	while (n + 8 < max) {
		uint64_t hl = 241 + next() % (600 * XS_BLOCK);
		uint64_t o = off + 16 * (next() % 64);

		if (o + hl > cap)
			break;
		t[n++] = (struct tj){ o, hl, 0 };
		for (unsigned p = next() % 6; p > 0; p--) {
			uint64_t hb = xs_nblocks(hl), at, len;
			int aligned = next() % 2;

			if (hb < HASH_PART_MIN_BLOCKS + 2)
				break;
			at = next() % (hb - HASH_PART_MIN_BLOCKS);
			len = (hb - at) * XS_BLOCK;
			len = HASH_PART_MIN_BLOCKS * XS_BLOCK + 1 +
			      next() % (len - HASH_PART_MIN_BLOCKS * XS_BLOCK);
			if (aligned) {
				t[n++] = (struct tj){ o + at * XS_BLOCK, len, 1 };
			} else if (len > 300 + 16) {
				/* off the block: summed itself */
				t[n++] = (struct tj){ o + at * XS_BLOCK + 16,
						      len - 16, 0 };
			}
		}
		if (next() % 4 == 0)
			t[n++] = (struct tj){ o, hl, xs_nblocks(hl) >= HASH_PART_MIN_BLOCKS };
		off = o + hl + XS_BLOCK * (next() % 4);
	}
	return n;
}

int main(void)
{
	static const uint64_t sizes[][2] = {
		{ 7, 40 }, { 1, 1 }, { 64, 64 }, { 33, 1000 }, { 32768, 1 << 20 },
	};
	uint64_t cap = 4u << 20;
	uint8_t *buf = malloc(cap);
	struct tj t[256];
	struct hash_pjob pj[2];
	struct hash_seg segs[4];
	struct hash_round *rd = NULL;
	uint32_t n, nseg, nrd, rounds = 0;

	T_ASSERT(buf);
	for (uint64_t i = 0; i < cap; i++)
		buf[i] = (uint8_t)next();
	n = fixed(t);
	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		rounds += run(buf, t, n, sizes[s][0], sizes[s][1]);
	for (int r = 0; r < 40; r++) {
		n = random_batch(t, 256, cap);
		for (unsigned s = 0; s < 4; s++)
			rounds += run(buf, t, n, sizes[s][0], sizes[s][1]);
	}
	/* refusals: too little room (nothing planned), a segment longer
	 * than a round or none */
	pj[0] = (struct hash_pjob){ (uint64_t)(uintptr_t)buf, 100 * XS_BLOCK, 0, 0 };
	pj[1] = (struct hash_pjob){ (uint64_t)(uintptr_t)buf + 8192, 100 * XS_BLOCK, 1, 1 };
	T_EQ_INT(hash_plan_rounds(pj, 2, 50, 100, segs, 3, &nseg, &rd, &nrd), 1);
	T_ASSERT(rd == NULL);
	T_EQ_INT(hash_plan_rounds(pj, 2, 101, 100, segs, 4, &nseg, &rd, &nrd), -EINVAL);
	T_EQ_INT(hash_plan_rounds(pj, 2, 0, 100, segs, 4, &nseg, &rd, &nrd), -EINVAL);
	T_OK(hash_plan_rounds(pj, 2, 50, 100, segs, 4, &nseg, &rd, &nrd));
	T_EQ_INT(nseg, 4);
	free(rd);
	free(buf);
	printf("%u rounds of fixed and random batches: every hash equals libxxhash's, each holder's blocks summed once\n",
	       rounds);
	return 0;
}
