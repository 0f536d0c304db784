/* SPDX-License-Identifier: MIT */
/*
 * XXH3-128 compiled for AVX2, picked at run time by hash.c on CPUs that have
 * it. Same hashes as the SSE2 build; on the GPU machine's CPU it hashes
 * cached data about 1.4x faster per thread (bench/RESULTS.md, "Hashing"), and
 * the loader hashes staging slots that the reads have just written.
 */
#include "hash_impl.h"

BASE_AVX2_BEGIN

/* xxhash.h includes the intrinsics only where __AVX2__ is predefined, which
 * clang does not do for a target pragma. */
#include <immintrin.h>

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

void base__xxh3_128_avx2(const void *p, size_t n, uint64_t *lo, uint64_t *hi)
{
	XXH128_hash_t v = XXH3_128bits(p, n);

	*lo = v.low64;
	*hi = v.high64;
}

void base__xxh3_128_update_avx2(void *state, const void *p, size_t n)
{
	XXH3_128bits_update((XXH3_state_t *)state, p, n);
}

BASE_AVX2_END
