/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): the test data stream of t.h. */
#include "t.h"

uint64_t t_xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

void t_fill(unsigned char *p, size_t len, uint64_t seed)
{
	uint64_t x = seed | 1;

	for (size_t i = 0; i < len; i++) {
		if ((i & 7) == 0)
			t_xorshift(&x);
		p[i] = (unsigned char)(x >> ((i & 7) * 8));
	}
}
