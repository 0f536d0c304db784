/* SPDX-License-Identifier: MIT */
/*
 * Test helpers: assertions that print both values, file and line, then exit 1.
 * A test exits 0 (pass), 1 (fail) or 77 (skip: a missing kernel feature or
 * no GPU).
 */
#ifndef WC_TEST_T_H
#define WC_TEST_T_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_SKIP 77

#define T_FAIL(...)                                                          \
	do {                                                                 \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);              \
		fprintf(stderr, __VA_ARGS__);                                \
		fprintf(stderr, "\n");                                       \
		exit(1);                                                     \
	} while (0)

#define T_SKIP_IF(cond, ...)                                                 \
	do {                                                                 \
		if (cond) {                                                  \
			printf("skip: ");                                    \
			printf(__VA_ARGS__);                                 \
			printf("\n");                                        \
			exit(T_SKIP);                                        \
		}                                                            \
	} while (0)

#define T_ASSERT(cond)                                                       \
	do {                                                                 \
		if (!(cond))                                                 \
			T_FAIL("assertion failed: %s", #cond);               \
	} while (0)

#define T_EQ_INT(a, b)                                                       \
	do {                                                                 \
		long long _a = (long long)(a), _b = (long long)(b);          \
		if (_a != _b)                                                \
			T_FAIL("%s == %s: %lld != %lld", #a, #b, _a, _b);    \
	} while (0)

#define T_EQ_U64(a, b)                                                       \
	do {                                                                 \
		unsigned long long _a = (a), _b = (b);                       \
		if (_a != _b)                                                \
			T_FAIL("%s == %s: %llu != %llu", #a, #b, _a, _b);    \
	} while (0)

#define T_CMP_INT(a, op, b)                                                  \
	do {                                                                 \
		long long _a = (long long)(a), _b = (long long)(b);          \
		if (!(_a op _b))                                             \
			T_FAIL("%s %s %s: %lld vs %lld", #a, #op, #b, _a, _b); \
	} while (0)

#define T_EQ_STR(a, b)                                                       \
	do {                                                                 \
		const char *_a = (a), *_b = (b);                             \
		if (!_a || !_b || strcmp(_a, _b) != 0)                       \
			T_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b,         \
			       _a ? _a : "(null)", _b ? _b : "(null)");      \
	} while (0)

/* haystack contains needle */
#define T_HAS(hay, needle)                                                   \
	do {                                                                 \
		const char *_h = (hay), *_n = (needle);                      \
		if (!_h || !strstr(_h, _n))                                  \
			T_FAIL("\"%s\" does not contain \"%s\"",             \
			       _h ? _h : "(null)", _n);                      \
	} while (0)

/* 0 or -errno */
#define T_OK(expr)                                                           \
	do {                                                                 \
		long long _r = (long long)(expr);                            \
		if (_r < 0)                                                  \
			T_FAIL("%s: %lld (%s)", #expr, _r, strerror((int)-_r)); \
	} while (0)

/* xorshift64: a repeatable stream of test data from a nonzero seed. */
uint64_t t_xorshift(uint64_t *s);

/* len bytes of the xorshift64 stream from seed (| 1), 8 bytes a step. */
void t_fill(unsigned char *p, size_t len, uint64_t seed);

#endif
