/* SPDX-License-Identifier: MIT */
/* wcgen: synthetic checkpoint generator. main.c lays the model out;
 * data.c writes (and verifies) the bytes. */
#ifndef WCGEN_H
#define WCGEN_H

#include <stdbool.h>
#include <stdint.h>

#include "st.h"

#define GEN_NAME_MAX 128
#define GEN_TENSORS_MAX 65536     /* MODEL_TENSORS_MAX */
#define GEN_SHARDS_MAX 1024

struct gen_tensor {
	char name[GEN_NAME_MAX];
	enum st_dtype dtype;
	uint32_t ndim;
	uint64_t shape[2];
	uint64_t nbytes;
	uint32_t index;          /* position in the model: seeds its data */
	uint32_t shard;
	uint64_t begin;          /* in the shard's data section */
};

struct gen_shard {
	char file[64];
	uint32_t first, count;   /* tensors [first, first + count) */
	uint64_t data_bytes;
	char *header;            /* padded JSON text */
	uint64_t header_len;
};

/* The bytes of tensor `index` at byte offset `off`, n bytes, for `seed`:
 * 8-byte words splitmix64(seed, index, word number), little-endian. */
void gen_fill(uint64_t seed, uint32_t index, uint64_t off, void *buf,
	      uint64_t n);

/* Writes one shard file (header + data, or header + a sparse hole when
 * headers_only). Dies on error. Returns bytes written. */
uint64_t gen_write_shard(const char *dir, const struct gen_shard *s,
			 const struct gen_tensor *t, uint64_t seed,
			 bool headers_only);

/* Re-reads every tensor of a shard and compares with gen_fill; returns the
 * number of mismatching tensors (each logged). */
uint32_t gen_verify_shard(const char *dir, const struct gen_shard *s,
			  const struct gen_tensor *t, uint64_t seed);

#endif
