/* SPDX-License-Identifier: MIT */
/*
 * Strict safetensors header parsing (prefix st_). A file is:
 *   8 bytes   little-endian u64 N, the header length
 *   N bytes   UTF-8 JSON object: "name": {"dtype", "shape", "data_offsets"},
 *             and optionally "__metadata__": {string: string}
 *   the data  tensors' bytes, [begin, end) relative to the data section
 * Everything is checked: header length bounds, UTF-8, duplicate keys, types,
 * dtypes, shape * dtype size == end - begin without overflow, offsets that
 * tile the data section exactly (no overlap, hole or trailing bytes), names.
 * Stricter than the reference library: an entry with a key other than
 * dtype, shape and data_offsets is rejected (it ignores them), and padding
 * after the JSON must be whitespace (the reference writer pads with spaces).
 * Every rejection is one sentence naming the file, the tensor, what was wrong
 * and the values. No I/O except st_read_fd (small blocking preads).
 */
#ifndef WC_ST_H
#define WC_ST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define ST_PREFIX_LEN 8
#define ST_HEADER_MAX 100000000ull  /* bytes; as the reference library */
#define ST_NDIM_MAX 8               /* dims per tensor (safetensors has no
				       limit; real checkpoints use <= 5) */
#define ST_NAME_MAX 1024            /* bytes per tensor name, without NUL */
#define ST_TENSORS_MAX 65536        /* tensors per file */
#define ST_META_MAX 4096            /* __metadata__ entries per file */

/* Every dtype the safetensors format defines (huggingface/safetensors
 * Dtype), in its order. Sizes are in bits: F4 and F6 are sub-byte. */
enum st_dtype {
	ST_BOOL,
	ST_F4,        /* 4 bits, E2M1 */
	ST_F6_E2M3,   /* 6 bits */
	ST_F6_E3M2,   /* 6 bits */
	ST_U8,
	ST_I8,
	ST_F8_E5M2,
	ST_F8_E4M3,
	ST_F8_E8M0,
	ST_I16,
	ST_U16,
	ST_F16,
	ST_BF16,
	ST_I32,
	ST_U32,
	ST_F32,
	ST_C64,
	ST_F64,
	ST_I64,
	ST_U64,
	ST_DTYPE_COUNT
};

struct st_tensor {
	char *name;               /* NUL-terminated, no embedded NUL */
	enum st_dtype dtype;
	uint32_t ndim;            /* 0 for a scalar */
	uint64_t shape[ST_NDIM_MAX];
	uint64_t nelem;           /* product of shape (1 for a scalar) */
	uint64_t begin, end;      /* relative to the data section */
	uint64_t nbytes;          /* end - begin */
	uint64_t file_off;        /* absolute: data_off + begin */
};

struct st_meta {
	char *key;
	char *value;
};

struct st_file {
	char *name;               /* display name given to st_parse */
	uint64_t file_size;
	uint64_t header_len;      /* N */
	uint64_t data_off;        /* 8 + N */
	uint32_t ntensors;
	struct st_tensor *tensors; /* sorted by begin (file order) */
	uint32_t nmeta;
	struct st_meta *meta;     /* in header order */
	uint8_t header_hash[BASE_HASH_LEN]; /* XXH3-128 of bytes [0, 8 + N) */
};

/* Validates the 8-byte prefix against the file size and returns N. Rejects a
 * file under 8 bytes, N == 0, N > ST_HEADER_MAX, 8 + N past the end. */
int st_header_len(const void *prefix, size_t len, uint64_t file_size,
		  const char *name, uint64_t *header_len, char *err);

/* Parses buf = the first 8 + N bytes of a file of file_size bytes into f
 * (zeroed first; on error f holds nothing to free). name is only used in
 * messages and copied into f->name. */
int st_parse(struct st_file *f, const void *buf, size_t len,
	     uint64_t file_size, const char *name, char *err);

/* fstat + pread of the prefix and header, then st_parse. */
int st_read_fd(struct st_file *f, int fd, const char *name, char *err);

void st_file_free(struct st_file *f);

/* O(n) lookup by name; the model layer keeps a sorted index. */
const struct st_tensor *st_find(const struct st_file *f, const char *name);
const char *st_meta_get(const struct st_file *f, const char *key);

const char *st_dtype_name(enum st_dtype d);
/* 0 or -EINVAL when s is not a safetensors dtype name. */
int st_dtype_parse(const char *s, enum st_dtype *d);
unsigned st_dtype_bits(enum st_dtype d);
/* Bytes for nelem elements; -EOVERFLOW on overflow, -EINVAL when a sub-byte
 * dtype's bit count is not a whole number of bytes. */
int st_dtype_bytes(enum st_dtype d, uint64_t nelem, uint64_t *bytes);

#endif
