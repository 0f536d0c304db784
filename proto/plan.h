/* SPDX-License-Identifier: MIT */
/*
 * Layouts and the per-rank plan (prefix plan_): which tensors a rank serves,
 * where each one's bytes come from, and where they lie in the pools.
 *
 * A layout is text (proto/layouts/README.md has the grammar with examples): the
 * presets proto/layouts/<family>.layout and the --rules / --layout files
 * share it. Lines, '#' comments, blank lines allowed:
 *
 *   arch NAME...                 architectures a preset is for
 *   vocab_pad N                  multiple the padded rules pad to (64)
 *   experts KEY[|KEY...]         config key of the expert count
 *   PATTERN SPLIT [ATTR...]      a tensor rule; the first match wins
 *       SPLIT  replicate | dim0 | dim1
 *       ATTR   heads=KEYS        whole heads (count from config), tp | H
 *              kv_heads=KEYS     whole heads, replicated when tp > H
 *              parts=N           dim 0 holds N equal parts, each split
 *              parts=P,P,...     P = heads:KEYS | kv_heads:KEYS | even
 *              pad               pad dim 0 to vocab_pad, then split
 *              expert            the {E} in PATTERN is an expert index
 *   view NAME = PART PART...     a fused tensor: PARTs back to back on dim 0
 *   stack NAME = PART PART...    per local expert, PARTs back to back,
 *                                stacked: [E_local, rows, ...]
 *   group PART PART...           contiguous placement only
 *   alias NAME = TARGET [if KEY] NAME served over TARGET's bytes when the
 *                                checkpoint lacks NAME (and KEY is true)
 *
 * Patterns are fnmatch globs ('*', '?', '[...]', '\'; matched in linear
 * time, glob.h); {L} and {E} in them match a decimal number and bind it,
 * each letter at most once per pattern; in view/stack/group/alias names
 * and parts they are replaced by the bound number (no other wildcards
 * there). A rules file's lines go before the preset's (its rules are tried
 * first). Without heads/parts a split must be even (tp divides the dim).
 *
 * A part named twice in one view, stack or group, a view or stack named
 * like one of its parts, and two views, stacks or aliases of one name are
 * refused when the text is parsed; what only the model shows (a name that
 * is a checkpoint tensor's or another statement's once {L}/{E} are bound,
 * a part reached twice) when the plan is built. Both errors name the
 * statement's file and line.
 *
 * Heads (vLLM's QKVParallelLinear): H heads of size dim/H. heads=: H % tp
 * == 0, rank r holds heads [r*H/tp, (r+1)*H/tp). kv_heads=: the same when
 * H >= tp, else (tp % H == 0) replicas = tp / H and rank r holds head
 * r / replicas. Anything else is refused naming the tensor, H and tp.
 *
 * Padding (vLLM's VocabParallelEmbedding): V rows padded to Vp = V rounded
 * up to vocab_pad (wcd --vocab-pad; 0 turns padding off, then tp must
 * divide V), P = Vp / tp rows per rank, rank r holds real rows
 * [r*P, min((r+1)*P, V)) followed by zero rows up to P in the same
 * allocation: the entry's shape has the real rows, padded_rows = P.
 *
 * Experts: with ep > 1 rank k holds the experts [s, s + n): base = E / ep,
 * rem = E % ep, n = base + (k < rem), s = k * base + min(k, rem) (vLLM's
 * linear expert map), each whole; with ep == 1 every expert, split as its
 * rule says.
 *
 * Block FP8 (quantization_config.weight_block_size [B0, B1]): a tensor
 * NAME_scale_inv whose NAME is in the checkpoint follows NAME's rule in
 * block units: weight rows [a, b) are scale rows [a/B0, ceil(b/B0)), and
 * the same with B1 on dim 1; a slice that does not start on a block (or end
 * on one, short of the end) is refused with the sizes.
 *
 * Splits (row-major): dim 0 keeps rows: one contiguous range per part. Dim
 * 1 keeps, of every row of shape[0], a column range (each column = product
 * of the remaining dims): a 2-D copy. A tensor with fewer dims than its
 * split needs, or of one element, is replicated.
 *
 * Pipeline: layers "model.layers.N." are split into pp contiguous stages,
 * stage s holding [s*L/pp, (s+1)*L/pp). Embeddings (model.embed_tokens.*)
 * go to the first stage; model.norm.* and lm_head.* to the last (with
 * tie_word_embeddings and no lm_head.weight, the last stage also holds
 * model.embed_tokens.weight); other non-layer tensors to every stage.
 *
 * The plan: entries (the manifest: checkpoint names in name order, then
 * the views) and pieces (source ranges, each written at an offset inside
 * its entry). A view owns no bytes: it covers its parts, which plan_pack
 * places back to back; an alias covers its target. No byte is stored
 * twice.
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
#define PLAN_STMTS_MAX 1024
#define PLAN_PATTERN_MAX 256
#define PLAN_KEY_MAX 48                  /* config key bytes */
#define PLAN_ALTS_MAX 3                  /* KEY|KEY|KEY */
#define PLAN_PARTS_MAX 4                 /* parts of a rule or a view */
#define PLAN_ARCHS_MAX 8
#define PLAN_SRCS_MAX 8                  /* texts' names kept for errors */
#define PLAN_SRC_NAME_MAX 256
#define PLAN_RULES_FILE_MAX (1u << 20)   /* bytes */
#define PLAN_TP_MAX 1024
#define PLAN_PP_MAX 1024
#define PLAN_EP_MAX 1024
#define PLAN_VOCAB_PAD_DEFAULT 64
#define PLAN_VOCAB_PAD_MAX (1u << 20)
#define PLAN_POOLS_MAX 64                /* == GPU_POOLS_MAX */
#define PLAN_POOL_ALIGN 256              /* == GPU_POOL_ALIGN */
/* A big layer starts and ends on this (bytes): the CUDA VMM granularity,
 * at which libwcache maps a lease's pools back to back (wc_model_span), so
 * that pools cut between layers keep one layer stride across the span. */
#define PLAN_LAYER_ALIGN (2u << 20)
/* Layers of at least this many bytes are packed whole and aligned: the
 * padding (under PLAN_LAYER_ALIGN a layer) then costs under 1/64 of the
 * bytes; smaller layers (test models, tp 8 of an 8B model) pack as
 * before, tensor by tensor. */
#define PLAN_LAYER_MIN (64ull * PLAN_LAYER_ALIGN)
#define PLAN_VIEWS_MAX 65536             /* views and aliases per rank */

enum plan_split {
	PLAN_REPLICATE,
	PLAN_DIM0,
	PLAN_DIM1,
};

struct plan_keys {                       /* KEY|KEY: the first present */
	uint32_t n;
	char k[PLAN_ALTS_MAX][PLAN_KEY_MAX];
};

enum plan_heads {
	PLAN_HEADS_NONE,                 /* an even split */
	PLAN_HEADS_STRICT,               /* heads=: tp divides H */
	PLAN_HEADS_KV,                   /* kv_heads=: replicated past H */
};

struct plan_part {
	enum plan_heads heads;
	struct plan_keys keys;
};

struct plan_rule {
	char pattern[PLAN_PATTERN_MAX];
	enum plan_split split;
	uint32_t nparts;                 /* 0: one part, even */
	struct plan_part part[PLAN_PARTS_MAX];
	bool pad;
	bool expert;
};

enum plan_stmt_kind {
	PLAN_S_VIEW,
	PLAN_S_STACK,
	PLAN_S_GROUP,
	PLAN_S_ALIAS,
};

struct plan_stmt {
	enum plan_stmt_kind kind;
	char name[PLAN_PATTERN_MAX];     /* "" for a group */
	uint32_t nparts;                 /* alias: 1, the target */
	char part[PLAN_PARTS_MAX][PLAN_PATTERN_MAX];
	char cond[PLAN_KEY_MAX];         /* alias: "" or a config key */
	uint32_t src, line;              /* where: plan_rules.src[src], line */
};

struct plan_rules {
	uint32_t n;
	struct plan_rule *r;
	uint32_t nstmts;
	struct plan_stmt *s;
	int32_t vocab_pad;               /* -1: not set (64) */
	struct plan_keys experts;
	uint32_t narchs;
	char arch[PLAN_ARCHS_MAX][MODEL_ARCH_MAX];
	/* The texts' names (files), for errors that name a statement's line;
	 * past PLAN_SRCS_MAX texts the last slot names them all. */
	uint32_t nsrcs;
	char src[PLAN_SRCS_MAX][PLAN_SRC_NAME_MAX];
	/* XXH3-128 over the canonical form of everything above but arch:
	 * part of the identity (the layout's hash). */
	uint8_t hash[WC_HASH_LEN];
};

/* The layout tuple a plan is built for. */
struct plan_params {
	uint32_t tp_size, tp_rank, pp_size, pp_rank, ep_size, ep_rank;
	int32_t vocab_pad;               /* -1: the layout's (else 64); 0 off */
};

#define PLAN_T_VIEW 0x1u   /* covers other entries' bytes (view or alias) */
#define PLAN_T_ALIAS 0x2u  /* the same bytes as the entry `target` */

/* One served tensor: a manifest entry. */
struct plan_tensor {
	uint32_t model_idx;       /* index into model.tensors; UINT32_MAX: view */
	const char *name;         /* into the model, or owned by the plan */
	enum st_dtype dtype;
	enum plan_split split;    /* as applied (scalars: PLAN_REPLICATE) */
	uint32_t flags;           /* PLAN_T_* */
	uint32_t ndim;
	uint64_t shape[ST_NDIM_MAX]; /* this rank's shape (real rows) */
	uint64_t size;            /* bytes of the shape: what the hash covers */
	uint64_t alloc;           /* bytes allocated: size + zero rows */
	uint64_t padded_rows;     /* pad rules: P (rows incl. zeros); else 0 */
	uint32_t piece0, npieces; /* its pieces (none for a view) */
	uint32_t target;          /* view: first part; alias: the target */
	int32_t group;            /* index into groups, -1 when none */
	/* Destination, set by plan_pack. */
	uint32_t pool;
	uint64_t pool_off;
};

/* Source bytes: height rows of width bytes in shard `shard`, the first at
 * file_off, each src_pitch after the previous one, written contiguously
 * at entry.pool_off + dst. */
struct plan_piece {
	uint32_t entry;
	uint32_t shard;
	uint64_t file_off;
	uint64_t width;
	uint64_t height;
	uint64_t src_pitch;
	uint64_t dst;             /* offset inside the entry */
	uint64_t size;            /* width * height */
};

/* Entries that plan_pack places back to back, in this order. */
struct plan_group {
	uint32_t member0, n;      /* into plan.members */
};

struct plan {
	struct plan_params pp;    /* as given, vocab_pad resolved */
	uint32_t tp_size, tp_rank, pp_size, pp_rank; /* == pp.* */
	uint32_t nlayers;         /* L, 0 when no model.layers.N. */
	uint32_t layer_begin, layer_end; /* this stage: [begin, end) */
	uint32_t expert_begin, expert_end; /* this rank's experts */
	uint32_t ntensors;        /* entries */
	struct plan_tensor *t;
	uint32_t npieces;
	struct plan_piece *pc;
	uint32_t ngroups;
	struct plan_group *g;
	uint32_t *members;
	char **names;             /* the views' names (owned) */
	uint32_t nnames;
	uint64_t total_bytes;     /* stored: sum of alloc over non-views */
	uint64_t read_bytes;      /* sum of piece sizes */
	uint32_t npools;          /* set by plan_pack */
	uint64_t pool_size[PLAN_POOLS_MAX];
};

/* The preset whose `arch` line names arch, from the layout directory
 * (plan_layout_dir); -ENOTSUP naming arch, the directory and the known
 * architectures when none does. path (PATH_MAX) gets the file. */
int plan_rules_preset(struct plan_rules *r, const char *arch, char *err);
/* The directory the presets are read from: $WCACHE_LAYOUT_DIR, else the
 * source tree's proto/layouts (compiled in), else ../share/wcache/layouts
 * next to the running binary, else PREFIX/share/wcache/layouts. */
const char *plan_layout_dir(void);
/* Reads a layout file (at most PLAN_RULES_FILE_MAX bytes) and puts its
 * lines before those already in r. */
int plan_rules_file(struct plan_rules *r, const char *path, char *err);
/* Parses layout text and puts its lines before those already in r (r may
 * be empty: zeroed). Errors name the file, line and text. */
int plan_rules_parse(struct plan_rules *r, const void *buf, size_t len,
		     const char *name, char *err);
void plan_rules_free(struct plan_rules *r);
/* The split for a tensor name (PLAN_REPLICATE when nothing matches). */
enum plan_split plan_rules_match(const struct plan_rules *r, const char *name);
const char *plan_split_name(enum plan_split s);
/* The vocab_pad a plan uses for params p (the knob, else the layout's,
 * else PLAN_VOCAB_PAD_DEFAULT). */
uint32_t plan_vocab_pad(const struct plan_rules *r, int32_t knob);

/* Builds this rank's plan (p zeroed first; nothing to free on error). */
int plan_build2(struct plan *p, const struct model *m,
		const struct plan_rules *r, const struct plan_params *pp,
		char *err);
/* plan_build2 with ep 1 and the layout's vocab_pad. */
int plan_build(struct plan *p, const struct model *m,
	       const struct plan_rules *r, uint32_t tp_size, uint32_t tp_rank,
	       uint32_t pp_size, uint32_t pp_rank, char *err);

/* Packs entries into pools of at most pool_max bytes each, in plan order,
 * at PLAN_POOL_ALIGN; a group's members go back to back (the group at the
 * place of its first member in plan order); views and aliases get their
 * parts' place. An entry or group larger than pool_max gets a pool of its
 * own. A layer (the entries of one "model.layers.N.", consecutive in plan
 * order) of PLAN_LAYER_MIN bytes or more that fits in pool_max once
 * padded is placed whole: it starts on PLAN_LAYER_ALIGN, its end (and so
 * its pool's size, when it ends one) is padded to PLAN_LAYER_ALIGN, and
 * it opens a new pool when it does not fit in the current one; other
 * layers are placed tensor by tensor as above. Equal layers thus lie at
 * one stride S over the pools mapped back to back: layer j of the run at
 * base + j * S, whatever pool it is in (what one strided view per kind of
 * tensor needs, _core.py's tensors("torch")). Where whole layers would
 * need more than PLAN_POOLS_MAX pools (up to twice as many: layers a
 * little over half a pool), every layer is placed tensor by tensor.
 * -E2BIG naming the count and pool_max when more than PLAN_POOLS_MAX
 * pools would be needed even so. */
int plan_pack(struct plan *p, uint64_t pool_max, char *err);
/* plan_pack with every layer placed tensor by tensor: the packing of the
 * builds before layers were packed whole (handover protocol 1), kept for
 * the test that a handover between the two is refused (wcd's
 * WCD_TEST_PACK=flat). */
int plan_pack_flat(struct plan *p, uint64_t pool_max, char *err);

/* The entry named name, or -1 (binary search over the checkpoint entries,
 * then a scan of the views). */
long plan_find(const struct plan *p, const char *name);

void plan_free(struct plan *p);

#endif
