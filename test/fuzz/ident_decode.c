/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: identity bytes from the wire. What decodes must encode
 * back to the same bytes (the encoding is canonical) and compare equal.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "identity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char buf[IDENT_ENC_MAX];
	char err[BASE_ERR_LEN], diff[256];
	struct ident a, b;
	size_t len;

	if (ident_decode(&a, data, size, err))
		return 0;
	if (ident_encode(&a, buf, sizeof(buf), &len) || len != size ||
	    memcmp(buf, data, size))
		abort();
	if (ident_decode(&b, buf, len, err) ||
	    ident_compare(&a, "a", &b, "b", diff, sizeof(diff)) != 0)
		abort();
	return 0;
}
