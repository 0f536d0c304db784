/* SPDX-License-Identifier: MIT */
/*
 * The tensor-parallel / pipeline-parallel plan (prefix plan_): which tensors
 * a rank holds and which bytes of each it reads.
 *
 * Rules: an ordered list of (fnmatch pattern, split); the first match wins.
 * A rules file is lines "PATTERN replicate|dim0|dim1", '#' comments and
 * blank lines allowed; its rules go before the preset's. Presets exist for
 * the llama family (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
 * Qwen3ForCausalLM): q/k/v/gate/up on dim 0, o/down on dim 1, embed_tokens
 * and lm_head on dim 0 (vocabulary), everything else (norms) replicated.
 * A tensor with fewer than 1 (dim0) or 2 (dim1) dims, or of one element, is
 * replicated whatever its rule.
 *
 * Splits (row-major tensors): dim 0 keeps rows [r*R/tp, (r+1)*R/tp): one
 * contiguous byte range. Dim 1 keeps, of every row of shape[0], the columns
 * [r*C/tp, (r+1)*C/tp) (each column = product of the remaining dims): a 2-D
 * copy of height shape[0], width C/tp*inner bytes, source pitch C*inner
 * bytes. A split that is not even (or not whole bytes, for sub-byte dtypes)
 * is an error naming the tensor and the sizes.
 *
 * Pipeline: layers "model.layers.N." (N from 0 to L-1) are split into pp
 * contiguous stages, stage s holding [s*L/pp, (s+1)*L/pp). Embeddings
 * (model.embed_tokens.*) go to the first stage; model.norm.* and lm_head.*
 * to the last (with tie_word_embeddings and no lm_head.weight, the last stage
 * also holds model.embed_tokens.weight); other non-layer tensors to every
 * stage.
 */
#ifndef WC_PLAN_H
#define WC_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "model.h"
#include "st.h"

#define PLAN_RULES_MAX 1024
#define PLAN_PATTERN_MAX 256
#define PLAN_RULES_FILE_MAX (1u << 20)   /* bytes */
#define PLAN_TP_MAX 1024
#define PLAN_PP_MAX 1024
#define PLAN_POOLS_MAX 64                /* == GPU_POOLS_MAX */
#define PLAN_POOL_ALIGN 256              /* == GPU_POOL_ALIGN */

enum plan_split {
	PLAN_REPLICATE,
	PLAN_DIM0,
	PLAN_DIM1,
};

struct plan_rule {
	char pattern[PLAN_PATTERN_MAX];
	enum plan_split split;
};

struct plan_rules {
	uint32_t n;
	struct plan_rule *r;
	/* XXH3-128 over the rules (pattern, NUL, split byte each): part of the
	 * identity. */
	uint8_t hash[WC_HASH_LEN];
};

/* One tensor this rank holds. */
struct plan_tensor {
	uint32_t model_idx;       /* index into model.tensors */
	const char *name;         /* points into the model */
	enum st_dtype dtype;
	enum plan_split split;    /* as applied (scalars: PLAN_REPLICATE) */
	uint32_t shard;           /* index into model.shards */
	uint32_t ndim;
	uint64_t shape[ST_NDIM_MAX]; /* this rank's shape */
	/* Source: height rows of width bytes, the first at file_off, each
	 * src_pitch bytes after the previous one (height 1, src_pitch ==
	 * width for one contiguous range). */
	uint64_t file_off;
	uint64_t width;
	uint64_t height;
	uint64_t src_pitch;
	uint64_t size;            /* destination bytes: width * height */
	/* Destination, set by plan_pack. */
	uint32_t pool;
	uint64_t pool_off;        /* multiple of PLAN_POOL_ALIGN */
};

struct plan {
	uint32_t tp_size, tp_rank, pp_size, pp_rank;
	uint32_t nlayers;         /* L, 0 when no model.layers.N. */
	uint32_t layer_begin, layer_end; /* this stage: [begin, end) */
	uint32_t ntensors;
	struct plan_tensor *t;    /* in model.tensors (name) order */
	uint64_t total_bytes;     /* sum of size */
	uint32_t npools;          /* set by plan_pack */
	uint64_t pool_size[PLAN_POOLS_MAX];
};

/* The preset for config.json's architecture; -ENOTSUP naming arch and the
 * known ones (and suggesting a rules file) when there is none. */
int plan_rules_preset(struct plan_rules *r, const char *arch, char *err);
/* Parses a rules file's text and puts its rules before those already in r
 * (r may be empty: zeroed). Errors name the file, line and text. */
int plan_rules_parse(struct plan_rules *r, const void *buf, size_t len,
		     const char *name, char *err);
void plan_rules_free(struct plan_rules *r);
/* The split for a tensor name (PLAN_REPLICATE when nothing matches). */
enum plan_split plan_rules_match(const struct plan_rules *r, const char *name);
const char *plan_split_name(enum plan_split s);

/* Builds this rank's plan (p zeroed first; nothing to free on error). */
int plan_build(struct plan *p, const struct model *m,
	       const struct plan_rules *r, uint32_t tp_size, uint32_t tp_rank,
	       uint32_t pp_size, uint32_t pp_rank, char *err);

/* Packs tensors into pools of at most pool_max bytes each, in plan order,
 * at PLAN_POOL_ALIGN; a tensor larger than pool_max gets a pool of its own.
 * -E2BIG naming the count and pool_max when more than PLAN_POOLS_MAX pools
 * would be needed. */
int plan_pack(struct plan *p, uint64_t pool_max, char *err);

void plan_free(struct plan *p);

#endif
