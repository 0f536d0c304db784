/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash.h"
#include "hash_impl.h"

_Static_assert(sizeof(XXH3_state_t) <= BASE_HASHER_STATE_SIZE,
	       "BASE_HASHER_STATE_SIZE too small for XXH3_state_t");
_Static_assert(_Alignof(XXH3_state_t) <= 64, "XXH3_state_t alignment");

static XXH3_state_t *state_of(struct base_hasher *h)
{
	return (XXH3_state_t *)(void *)h->state;
}

static void canon(XXH128_hash_t v, uint8_t out[BASE_HASH_LEN])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, v);
	memcpy(out, c.digest, BASE_HASH_LEN);
}

/* AVX2 where the CPU has it (asked once; a benign race sets the same value). */
static int avx2_cached = -1;

static bool have_avx2(void)
{
	if (avx2_cached < 0)
		avx2_cached = __builtin_cpu_supports("avx2") ? 1 : 0;
	return avx2_cached;
}

void base__hash_force_generic(bool on)
{
	avx2_cached = on ? 0 : -1;
}

void base_hash128(const void *p, size_t n, uint8_t out[BASE_HASH_LEN])
{
	XXH128_hash_t v;

	if (have_avx2())
		base__xxh3_128_avx2(p, n, &v.low64, &v.high64);
	else
		v = XXH3_128bits(p, n);
	canon(v, out);
}

void base_hasher_init(struct base_hasher *h)
{
	XXH3_INITSTATE(state_of(h));
	XXH3_128bits_reset(state_of(h));
}

void base_hasher_update(struct base_hasher *h, const void *p, size_t n)
{
	if (!n)
		return;
	if (have_avx2())
		base__xxh3_128_update_avx2(state_of(h), p, n);
	else
		XXH3_128bits_update(state_of(h), p, n);
}

void base_hasher_final(const struct base_hasher *h, uint8_t out[BASE_HASH_LEN])
{
	canon(XXH3_128bits_digest((const XXH3_state_t *)(const void *)h->state),
	      out);
}

void base_hash_hex(const uint8_t h[BASE_HASH_LEN], char out[BASE_HASH_HEX_LEN])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < BASE_HASH_LEN; i++) {
		out[2 * i] = digits[h[i] >> 4];
		out[2 * i + 1] = digits[h[i] & 15];
	}
	out[2 * BASE_HASH_LEN] = '\0';
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int base_hash_parse_hex(const char *s, uint8_t out[BASE_HASH_LEN])
{
	uint8_t tmp[BASE_HASH_LEN];

	for (int i = 0; i < BASE_HASH_LEN; i++) {
		int hi = hexval(s[2 * i]), lo;

		if (hi < 0)
			return -EINVAL;
		lo = hexval(s[2 * i + 1]);
		if (lo < 0)
			return -EINVAL;
		tmp[i] = (uint8_t)(hi << 4 | lo);
	}
	if (s[2 * BASE_HASH_LEN])
		return -EINVAL;
	memcpy(out, tmp, BASE_HASH_LEN);
	return 0;
}
