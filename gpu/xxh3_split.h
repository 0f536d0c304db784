/* SPDX-License-Identifier: MIT */
/*
 * XXH3-128 (seed 0, default secret) of a long input, split so that the
 * device can compute it: the per-tensor hash of the manifest, computed
 * over bytes already in a pool, in any number of steps.
 *
 * XXH3 walks 1024-byte blocks (16 stripes of 64 bytes). Inside a block
 * every stripe only ADDS to the eight 64-bit accumulators, so the block's
 * contribution is a sum that any number of threads can compute in any
 * order (xs_block_sum). Between blocks the accumulators are scrambled
 * (xs_scramble), which is not linear: that chain is the one sequential
 * part, 8 independent lanes of a few integer operations per kilobyte.
 * The last block (full or not) is never scrambled: xs_finish adds its
 * stripes and the final "last stripe" (the input's last 64 bytes) and
 * merges the accumulators, as XXH3_hashLong_128b_internal does.
 *
 * Inputs of at most XS_MIN_LEN (240) bytes use XXH3's short paths, which
 * this header does not have: the caller hashes those on the CPU.
 *
 * Written for both compilers: nvcc builds gpu/cuda_xxh3.cu from it, and
 * test/proto/xxh3_split.c checks the same code on the CPU against libxxhash, so
 * CI (no GPU) tests the arithmetic the kernel runs.
 */
#ifndef WC_XXH3_SPLIT_H
#define WC_XXH3_SPLIT_H

#include <stdint.h>

#ifdef __CUDACC__
#define XS_FN static __host__ __device__ __forceinline__
#define XS_SECRET_QUAL static __constant__
#else
#define XS_FN static inline
#define XS_SECRET_QUAL static const
#endif

#define XS_STRIPE 64u
#define XS_BLOCK 1024u         /* 16 stripes: one scramble per block */
#define XS_STRIPES_PER_BLOCK 16u
#define XS_SECRET_SIZE 192u
#define XS_MIN_LEN 240u        /* longer inputs take the long path */

#define XS_P32_1 0x9E3779B1u
#define XS_P32_2 0x85EBCA77u
#define XS_P32_3 0xC2B2AE3Du
#define XS_P64_1 0x9E3779B185EBCA87ull
#define XS_P64_2 0xC2B2AE3D27D4EB4Full
#define XS_P64_3 0x165667B19E3779F9ull
#define XS_P64_4 0x85EBCA77C2B2AE63ull
#define XS_P64_5 0x27D4EB2F165667C5ull

/* XXH3_kSecret. The hot loops use it as 24 aligned little-endian words
 * (xs_secret_words); the few unaligned reads go through xs_secret64. */
XS_SECRET_QUAL uint8_t xs_secret[XS_SECRET_SIZE] = {
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

/* Little-endian 64-bit read of any alignment (both hosts are little-endian). */
XS_FN uint64_t xs_read64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

XS_FN uint64_t xs_secret64(unsigned off)
{
	return xs_read64(xs_secret + off);
}

#define XS_SECRET_WORDS 24u

XS_FN void xs_secret_words(uint64_t kw[XS_SECRET_WORDS])
{
	for (unsigned i = 0; i < XS_SECRET_WORDS; i++)
		kw[i] = xs_secret64(8 * i);
}

/* Accumulator i's starting value (XXH3_INIT_ACC). */
XS_FN uint64_t xs_init1(unsigned i)
{
	switch (i) {
	case 0: return XS_P32_3;
	case 1: return XS_P64_1;
	case 2: return XS_P64_2;
	case 3: return XS_P64_3;
	case 4: return XS_P64_4;
	case 5: return XS_P32_2;
	case 6: return XS_P64_5;
	default: return XS_P32_1;
	}
}

XS_FN void xs_init(uint64_t acc[8])
{
	for (unsigned i = 0; i < 8; i++)
		acc[i] = xs_init1(i);
}

/* What one stripe (8 words v, 8 secret words k) adds to the accumulators:
 * XXH3_accumulate_512's data_val to the swapped lane, and the 32x32 product
 * of data_key's halves to its own. */
XS_FN void xs_stripe_add(uint64_t sum[8], const uint64_t v[8],
			 const uint64_t k[8])
{
	for (unsigned i = 0; i < 8; i++) {
		uint64_t key = v[i] ^ k[i];

		sum[i ^ 1] += v[i];
		sum[i] += (uint64_t)(uint32_t)key * (key >> 32);
	}
}

/* Stripe s's words 2j and 2j + 1 (w0, w1; k0, k1: kw[s + 2j] and
 * kw[s + 2j + 1]) added to lanes 2j (*a0) and 2j + 1 (*a1) of a block's
 * sum, as xs_stripe_add adds them: summed over the 16 stripes, one of the
 * four threads the device gives a block (xr_sums4) makes those two lanes
 * of xs_block_sum's, no other word of the block touching them. */
XS_FN void xs_pair_add(uint64_t *a0, uint64_t *a1, uint64_t w0, uint64_t w1,
		       uint64_t k0, uint64_t k1)
{
	uint64_t key0 = w0 ^ k0, key1 = w1 ^ k1;

	*a1 += w0;
	*a0 += (uint64_t)(uint32_t)key0 * (key0 >> 32);
	*a0 += w1;
	*a1 += (uint64_t)(uint32_t)key1 * (key1 >> 32);
}

/* The sum of a whole block's 16 stripes (the device reads them its own,
 * vectorized way and calls xs_stripe_add). kw from xs_secret_words. */
XS_FN void xs_block_sum(uint64_t sum[8], const uint8_t *p,
			const uint64_t kw[XS_SECRET_WORDS])
{
	for (unsigned i = 0; i < 8; i++)
		sum[i] = 0;
	for (unsigned s = 0; s < XS_STRIPES_PER_BLOCK; s++) {
		uint64_t v[8];

		for (unsigned i = 0; i < 8; i++)
			v[i] = xs_read64(p + s * XS_STRIPE + 8 * i);
		xs_stripe_add(sum, v, kw + s);
	}
}

/* One lane of the chain: add the block's sum, then XXH3_scrambleAcc;
 * key is kw[16 + lane]. */
XS_FN uint64_t xs_scramble1(uint64_t acc, uint64_t sum, uint64_t key)
{
	acc += sum;
	acc ^= acc >> 47;
	acc ^= key;
	return acc * XS_P32_1;
}

/* The number of blocks that are scrambled: every block but the last. */
XS_FN uint64_t xs_nblocks(uint64_t len)
{
	return (len - 1) / XS_BLOCK;
}

XS_FN uint64_t xs_mul128_fold64(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
	return a * b ^ __umul64hi(a, b);
#else
	unsigned __int128 r = (unsigned __int128)a * b;

	return (uint64_t)r ^ (uint64_t)(r >> 64);
#endif
}

XS_FN uint64_t xs_merge(const uint64_t acc[8], unsigned soff, uint64_t start)
{
	uint64_t h = start;

	for (unsigned i = 0; i < 4; i++)
		h += xs_mul128_fold64(acc[2 * i] ^ xs_secret64(soff + 16 * i),
				      acc[2 * i + 1] ^ xs_secret64(soff + 16 * i + 8));
	h ^= h >> 37;
	h *= 0x165667919E3779F9ull;
	return h ^ (h >> 32);
}

/* Two lanes of the chain, l0 and l0 + 1, over n blocks' sums laid out
 * lane-major (lane l0's at s[0 .. n), lane l0 + 1's at s[stride ..
 * stride + n): the host's way to run a long chain (cuda_hash_host.c's
 * host chains: a piece's sums as the device writes them for the host,
 * gpu_cuda_xxh3_sums). Each lane is its own dependent chain (the
 * accumulate's pairing of lanes is inside the sums), so a task streams
 * only its own lanes' words, and two lanes in registers interleave their
 * dependent operations. kw from xs_secret_words; acc holds all eight. */
XS_FN void xs_chain2(uint64_t acc[8], unsigned l0, const uint64_t *s,
		     uint64_t stride, uint64_t n,
		     const uint64_t kw[XS_SECRET_WORDS])
{
	uint64_t a0 = acc[l0], a1 = acc[l0 + 1];
	uint64_t k0 = kw[16 + l0], k1 = kw[17 + l0];
	const uint64_t *s1 = s + stride;

	for (uint64_t j = 0; j < n; j++) {
		a0 = xs_scramble1(a0, s[j], k0);
		a1 = xs_scramble1(a1, s1[j], k1);
	}
	acc[l0] = a0;
	acc[l0 + 1] = a1;
}

/* The first byte xs_finish reads: the last block's, or the input's last
 * 64 when that block is shorter (at most XS_BLOCK bytes from it to the
 * end). */
XS_FN uint64_t xs_tail_off(uint64_t len)
{
	uint64_t b = xs_nblocks(len) * XS_BLOCK;

	return b < len - XS_STRIPE ? b : len - XS_STRIPE;
}

/* The end of the long path, once every block before the last has been
 * chained into acc: the last block's whole stripes, the input's last 64
 * bytes, the merge. tail holds the input's bytes from xs_tail_off(len)
 * to its end, len > XS_MIN_LEN. out gets the canonical (big-endian high,
 * then low) bytes that base_hash128 writes. */
XS_FN void xs_finish_tail(uint64_t acc[8], const uint8_t *tail, uint64_t len,
			  uint8_t out[16])
{
	uint64_t nb = xs_nblocks(len), t0 = xs_tail_off(len);
	uint64_t nstripes = ((len - 1) - XS_BLOCK * nb) / XS_STRIPE;
	const uint8_t *last = tail + (nb * XS_BLOCK - t0);
	uint64_t v[8], k[8], lo, hi;

	for (uint64_t s = 0; s < nstripes; s++) {
		for (unsigned i = 0; i < 8; i++) {
			v[i] = xs_read64(last + s * XS_STRIPE + 8 * i);
			k[i] = xs_secret64(8 * ((unsigned)s + i));
		}
		xs_stripe_add(acc, v, k);
	}
	for (unsigned i = 0; i < 8; i++) {
		v[i] = xs_read64(tail + (len - XS_STRIPE - t0) + 8 * i);
		k[i] = xs_secret64(XS_SECRET_SIZE - XS_STRIPE - 7 + 8 * i);
	}
	xs_stripe_add(acc, v, k);
	lo = xs_merge(acc, 11, len * XS_P64_1);
	hi = xs_merge(acc, XS_SECRET_SIZE - XS_STRIPE - 11, ~(len * XS_P64_2));
	for (unsigned i = 0; i < 8; i++) {
		out[i] = (uint8_t)(hi >> (56 - 8 * i));
		out[8 + i] = (uint8_t)(lo >> (56 - 8 * i));
	}
}

/* xs_finish_tail with the whole input at p. */
XS_FN void xs_finish(uint64_t acc[8], const uint8_t *p, uint64_t len,
		     uint8_t out[16])
{
	xs_finish_tail(acc, p + xs_tail_off(len), len, out);
}

#endif
