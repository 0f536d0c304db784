/* SPDX-License-Identifier: MIT */
/*
 * Layouts (prefix plan_rules_ and plan_, as the plan they feed): the text
 * that says how each tensor of a family is cut, parsed into struct
 * plan_rules (layout.c; the matcher is glob.c). plan.h says what the cuts
 * mean and builds the plan from them; this header knows nothing of plans.
 *
 * A layout is text (README "Layouts" has the grammar with examples): the
 * presets proto/plan/layouts/<family>.layout and the --rules / --layout files
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
 */
#ifndef WC_LAYOUT_H
#define WC_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "model.h"

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
#define PLAN_VOCAB_PAD_DEFAULT 64
#define PLAN_VOCAB_PAD_MAX (1u << 20)

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
	uint8_t hash[BASE_HASH_LEN];
};

/* The preset whose `arch` line names arch, from the layout directory
 * (plan_layout_dir); -ENOTSUP naming arch, the directory and the known
 * architectures when none does. path (PATH_MAX) gets the file. */
int plan_rules_preset(struct plan_rules *r, const char *arch, char *err);
/* The directory the presets are read from: $WCACHE_LAYOUT_DIR, else the
 * source tree's proto/plan/layouts (compiled in), else ../share/wcache/layouts
 * next to the running binary, else PREFIX/share/wcache/layouts. */
const char *plan_layout_dir(void);
/* Those two directories, set by the Makefile for layout.c (the fuzz build
 * sets the first alone); these are the defaults of another build. */
#ifndef WC_LAYOUT_SRC_DIR
#define WC_LAYOUT_SRC_DIR ""
#endif
#ifndef WC_LAYOUT_INSTALL_DIR
#define WC_LAYOUT_INSTALL_DIR "/usr/local/share/wcache/layouts"
#endif
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

#endif
