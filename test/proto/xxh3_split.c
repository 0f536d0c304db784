/* SPDX-License-Identifier: MIT */
/*
 * gpu/xxh3_split.h (the arithmetic of the device's XXH3-128 kernel) gives
 * base_hash128's bytes on the CPU: block sums in any order, the chain in
 * segments of any length, at the awkward lengths (241, one block, one block
 * and a byte, a stripe short of two blocks ...), from unaligned starts, and
 * at random lengths up to 3 MiB; and the host chains' way
 * (cuda_hash_host.c): every block's sum first, laid out lane-major in
 * pieces, each pair of lanes chained on its own (xs_chain2) piece by
 * piece, the end from a copy of the tail alone (xs_finish_tail: a buffer
 * of exactly those bytes, so that a read outside it is the sanitizer
 * build's error), for the whole and for a part at a block offset that
 * reads the whole's sums.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "t.h"
#include "xxh3_split.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	return t_xorshift(&rng);
}

/* The split computation: the chain advanced in random segments, each
 * segment's block sums computed last-to-first (order must not matter). */
static void split_hash(const uint8_t *p, uint64_t len, uint8_t out[16])
{
	uint64_t kw[XS_SECRET_WORDS], acc[8];
	uint64_t nb = xs_nblocks(len), b = 0;

	xs_secret_words(kw);
	xs_init(acc);
	while (b < nb) {
		uint64_t n = 1 + next() % 300, sums[300][8];

		if (n > nb - b)
			n = nb - b;
		for (uint64_t j = n; j-- > 0;)
			xs_block_sum(sums[j], p + (b + j) * XS_BLOCK, kw);
		for (uint64_t j = 0; j < n; j++)
			for (unsigned i = 0; i < 8; i++)
				acc[i] = xs_scramble1(acc[i], sums[j][i],
						      kw[16 + i]);
		b += n;
	}
	xs_finish(acc, p, len, out);
}

/* The host chains' computation (gpu/cuda_hash_host.c's hc_run) of the
 * part of the holder p (hn blocks of sums, in pieces of P blocks, each
 * piece lane-major: lane l's sums of piece q at sums + 8 q P + l np, np
 * its blocks) that starts at block at and is len bytes long: each pair
 * of lanes chained on its own, piece by piece (in random chunks inside
 * each), the end from a copy of the part's tail alone. */
static void host_chain_part(const uint8_t *p, const uint64_t *sums,
			    uint64_t P, uint64_t hn, uint64_t at,
			    uint64_t len, uint8_t out[16])
{
	uint64_t kw[XS_SECRET_WORDS], acc[8];
	uint64_t nb = xs_nblocks(len), t0 = xs_tail_off(len);
	uint8_t *tail = malloc(len - t0);

	T_ASSERT(tail);
	T_ASSERT(len - t0 <= XS_BLOCK && len - t0 >= XS_STRIPE);
	T_ASSERT(at + nb <= hn);
	xs_secret_words(kw);
	xs_init(acc);
	for (unsigned l0 = 0; l0 < 8; l0 += 2)
		for (uint64_t b = 0; b < nb;) {
			uint64_t hb = at + b, q = hb / P, o = hb % P;
			uint64_t np = hn - q * P < P ? hn - q * P : P;
			uint64_t n = 1 + next() % (P - o);

			if (n > nb - b)
				n = nb - b;
			xs_chain2(acc, l0, sums + 8 * q * P + l0 * np + o, np,
				  n, kw);
			b += n;
		}
	memcpy(tail, p + at * XS_BLOCK + t0, len - t0);
	xs_finish_tail(acc, tail, len, out);
	free(tail);
}

/* The host chains' way for the tensor p of len bytes (its blocks' sums
 * laid out in pieces of a random length, lane-major in each) and for a
 * random part of it at a block offset, which reads the same sums: both
 * into out (the whole's) and part_out (the part's, with its bytes'
 * libxxhash hash into part_want); *part_len 0 when len has no room. */
static void host_chain_hash(const uint8_t *p, uint64_t len, uint8_t out[16],
			    uint8_t part_out[16], uint8_t part_want[16],
			    uint64_t *part_len)
{
	uint64_t kw[XS_SECRET_WORDS], s8[8];
	uint64_t nb = xs_nblocks(len), P = 1 + next() % 700, at;
	uint64_t *sums = calloc(8 * (nb ? nb : 1), sizeof(uint64_t));

	T_ASSERT(sums);
	xs_secret_words(kw);
	for (uint64_t b = nb; b-- > 0;) {
		uint64_t q = b / P, np = nb - q * P < P ? nb - q * P : P;

		xs_block_sum(s8, p + b * XS_BLOCK, kw);
		for (unsigned l = 0; l < 8; l++)
			sums[8 * q * P + l * np + b % P] = s8[l];
	}
	host_chain_part(p, sums, P, nb, 0, len, out);
	*part_len = 0;
	at = nb ? next() % nb : 0;
	if (len - at * XS_BLOCK > XS_MIN_LEN) {
		*part_len = XS_MIN_LEN + 1 +
			    next() % (len - at * XS_BLOCK - XS_MIN_LEN);
		host_chain_part(p, sums, P, nb, at, *part_len, part_out);
		base_hash128(p + at * XS_BLOCK, *part_len, part_want);
	}
	free(sums);
}

/* Each block's sum made as the device's sums kernel makes it (four
 * threads a block, xs_pair_add over words 2j and 2j + 1 of every stripe)
 * equals xs_block_sum's. */
static void check_pairs(const uint8_t *p, uint64_t len)
{
	uint64_t kw[XS_SECRET_WORDS], want[8];

	xs_secret_words(kw);
	for (uint64_t b = 0; b < xs_nblocks(len); b++) {
		const uint8_t *blk = p + b * XS_BLOCK;

		xs_block_sum(want, blk, kw);
		for (unsigned j = 0; j < 4; j++) {
			uint64_t a0 = 0, a1 = 0;

			for (unsigned s = 0; s < XS_STRIPES_PER_BLOCK; s++)
				xs_pair_add(&a0, &a1,
					    xs_read64(blk + s * XS_STRIPE + 16 * j),
					    xs_read64(blk + s * XS_STRIPE + 16 * j + 8),
					    kw[s + 2 * j], kw[s + 2 * j + 1]);
			if (a0 != want[2 * j] || a1 != want[2 * j + 1])
				T_FAIL("length %llu, block %llu: lanes %u and %u summed four threads a block differ from the whole block's sum",
				       (unsigned long long)len,
				       (unsigned long long)b, 2 * j, 2 * j + 1);
		}
	}
}

static void check(const uint8_t *p, uint64_t len)
{
	uint8_t want[16], got[16], host[16], part[16], part_want[16];
	char w[BASE_HASH_HEX_LEN], g[BASE_HASH_HEX_LEN];
	uint64_t part_len;

	base_hash128(p, len, want);
	check_pairs(p, len);
	split_hash(p, len, got);
	host_chain_hash(p, len, host, part, part_want, &part_len);
	if (part_len && memcmp(part, part_want, 16))
		T_FAIL("length %llu: the host chains' part of %llu bytes from its sums differs from libxxhash's",
		       (unsigned long long)len, (unsigned long long)part_len);
	if (memcmp(want, got, 16) || memcmp(want, host, 16)) {
		base_hash_hex(want, w);
		base_hash_hex(memcmp(want, got, 16) ? got : host, g);
		T_FAIL("length %llu (start %% 64 = %u): %s %s, xxhash %s",
		       (unsigned long long)len, (unsigned)((uintptr_t)p % 64),
		       memcmp(want, got, 16) ? "split" : "host chains", g, w);
	}
}

int main(void)
{
	static const uint64_t lens[] = {
		241, 255, 256, 511, 512, 960, 1023, 1024, 1025, 1087, 1088,
		1089, 1983, 1984, 2047, 2048, 2049, 3072, 4096 + 64,
		16 * 1024 - 1, 16 * 1024, 16 * 1024 + 1, 1 << 20,
		(1 << 20) + 240, 3 * (1 << 20) - 7,
	};
	size_t cap = 3 << 20;
	uint8_t *buf = malloc(cap + 64);
	unsigned n = 0;

	T_ASSERT(buf);
	for (size_t i = 0; i < cap + 64; i++)
		buf[i] = (uint8_t)next();
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		check(buf, lens[i]);
		check(buf + 1 + i % 63, lens[i]);
		n += 2;
	}
	for (int i = 0; i < 200; i++) {
		uint64_t len = XS_MIN_LEN + 1 + next() % (i < 150 ? 20000 : cap - XS_MIN_LEN - 1);

		check(buf + next() % 64, len);
		n++;
	}
	/* all zero and all 0xff inputs: carries in the 64-bit sums */
	memset(buf, 0, cap);
	check(buf, cap);
	memset(buf, 0xff, cap);
	check(buf, cap);
	n += 2;
	free(buf);
	printf("%u lengths: the split XXH3-128 (both ways) equals libxxhash's\n", n);
	return 0;
}
