/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the input is a whole safetensors file (prefix, header,
 * data). Parsing must never crash, leak or read out of bounds, and what it
 * accepts must satisfy the invariants the daemon relies on.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[BASE_ERR_LEN];
	struct st_file f;
	uint64_t at = 0;

	if (st_parse(&f, data, size, size, "fuzz.safetensors", err))
		return 0;
	if (f.data_off > size)
		abort();
	for (uint32_t i = 0; i < f.ntensors; i++) {
		const struct st_tensor *t = &f.tensors[i];
		uint64_t bytes;

		/* offset order, exact tiling, sizes consistent with shapes */
		if (t->begin != at || t->end < t->begin ||
		    t->file_off + t->nbytes > size || !t->name[0] ||
		    st_dtype_bytes(t->dtype, t->nelem, &bytes) || bytes != t->nbytes ||
		    st_find(&f, t->name) == NULL)
			abort();
		at = t->end;
	}
	if (at != size - f.data_off)
		abort();
	for (uint32_t i = 0; i < f.nmeta; i++)
		if (!st_meta_get(&f, f.meta[i].key))
			abort();
	st_file_free(&f);
	return 0;
}
