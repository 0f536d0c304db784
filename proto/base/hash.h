/* SPDX-License-Identifier: MIT */
/*
 * XXH3-128 helpers for tensor and header hashes (prefix base_, proto/base). A hash is 16 bytes in the
 * canonical (big-endian) form of XXH128_canonicalFromHash, so its hex is
 * exactly what `xxhsum -H2 FILE` prints. xxHash is inlined into hash.c only.
 */
#ifndef WC_HASH_H
#define WC_HASH_H

#include <stddef.h>
#include <stdint.h>

#define BASE_HASH_LEN 16
#define BASE_HASH_HEX_LEN 33          /* 32 hex digits + NUL */
#define BASE_HASHER_STATE_SIZE 1024   /* >= sizeof(XXH3_state_t), checked */

/* A streaming hasher; caller-allocated (stack is fine), no heap. */
struct base_hasher {
	_Alignas(64) unsigned char state[BASE_HASHER_STATE_SIZE];
};

/* One-shot XXH3-128 (seed 0) of p[0..n), canonical bytes into out. */
void base_hash128(const void *p, size_t n, uint8_t out[BASE_HASH_LEN]);

void base_hasher_init(struct base_hasher *h);
void base_hasher_update(struct base_hasher *h, const void *p, size_t n);
/* May be called more than once; does not change the state. */
void base_hasher_final(const struct base_hasher *h, uint8_t out[BASE_HASH_LEN]);

/* Lower-case hex, as `xxhsum -H2` prints it. */
void base_hash_hex(const uint8_t h[BASE_HASH_LEN], char out[BASE_HASH_HEX_LEN]);
/* Parses 32 hex digits (either case, nothing else); 0 or -EINVAL. */
int base_hash_parse_hex(const char *s, uint8_t out[BASE_HASH_LEN]);

#endif
