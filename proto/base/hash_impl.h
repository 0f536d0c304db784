/* SPDX-License-Identifier: MIT */
/* Internal to hash.c and hash_avx2.c: the AVX2 build of XXH3-128. The state
 * is hash.c's XXH3_state_t (the layout does not depend on the vector unit). */
#ifndef WC_HASH_IMPL_H
#define WC_HASH_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What hash_avx2.c compiles between these two is built for AVX2 (hash.c
 * calls it only on a CPU that has it); whole files are not, because the
 * fuzz build compiles proto/ in one command. GCC and clang spell it
 * differently. */
#if defined(__clang__)
#define BASE_AVX2_BEGIN \
	_Pragma("clang attribute push(__attribute__((target(\"avx2\"))), apply_to = function)")
#define BASE_AVX2_END _Pragma("clang attribute pop")
#else
#define BASE_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2\")")
#define BASE_AVX2_END _Pragma("GCC pop_options")
#endif

void base__xxh3_128_avx2(const void *p, size_t n, uint64_t *lo, uint64_t *hi);
void base__xxh3_128_update_avx2(void *state, const void *p, size_t n);
/* For tests: true makes hash.c use the generic (SSE2) build even where the
 * CPU has AVX2, so both builds are checked on one machine. */
void base__hash_force_generic(bool on);

#endif
