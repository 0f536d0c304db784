/* SPDX-License-Identifier: MIT */
/*
 * gpu/xxh3_split.h (the arithmetic of the device's XXH3-128 kernel) gives
 * base_hash128's bytes on the CPU: block sums in any order, the chain in
 * segments of any length, at the awkward lengths (241, one block, one block
 * and a byte, a stripe short of two blocks ...), from unaligned starts, and
 * at random lengths up to 3 MiB; and the host chains' way (cuda_hash.c):
 * every block's sum first, each half of the lanes chained on its own
 * (xs_chain4) in pieces of its own, the end from a copy of the tail alone
 * (xs_finish_tail: a buffer of exactly those bytes, so that a read outside
 * it is the sanitizer build's error).
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

/* The host chains' computation: sums of every block, lanes 0..3 and
 * 4..7 each chained in random pieces, the end from the tail alone. */
static void host_chain_hash(const uint8_t *p, uint64_t len, uint8_t out[16])
{
	uint64_t kw[XS_SECRET_WORDS], acc[8];
	uint64_t nb = xs_nblocks(len), t0 = xs_tail_off(len);
	uint64_t *sums = malloc(sizeof(uint64_t) * 8 * (nb ? nb : 1));
	uint8_t *tail = malloc(len - t0);

	T_ASSERT(sums && tail);
	T_ASSERT(len - t0 <= XS_BLOCK && len - t0 >= XS_STRIPE);
	xs_secret_words(kw);
	xs_init(acc);
	for (uint64_t b = nb; b-- > 0;)
		xs_block_sum(sums + 8 * b, p + b * XS_BLOCK, kw);
	for (unsigned l0 = 0; l0 < 8; l0 += 4)
		for (uint64_t b = 0, n; b < nb; b += n) {
			n = 1 + next() % 700;
			if (n > nb - b)
				n = nb - b;
			xs_chain4(acc, l0, sums + 8 * b, n, kw);
		}
	memcpy(tail, p + t0, len - t0);
	xs_finish_tail(acc, tail, len, out);
	free(tail);
	free(sums);
}

static void check(const uint8_t *p, uint64_t len)
{
	uint8_t want[16], got[16], host[16];
	char w[BASE_HASH_HEX_LEN], g[BASE_HASH_HEX_LEN];

	base_hash128(p, len, want);
	split_hash(p, len, got);
	host_chain_hash(p, len, host);
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
