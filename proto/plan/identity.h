/* SPDX-License-Identifier: MIT */
/*
 * Identity (prefix ident_): every fact that makes two caches interchangeable.
 * An engine sends its identity in HELLO; any differing field is a MISMATCH
 * naming each field and both values. The canonical encoding is what goes on
 * the wire and what the digest is computed over:
 *
 *   "WCID" u32 format_version, then each field in struct order:
 *   strings as u32 length + bytes (no NUL, bounded), u32 integers, 16-byte
 *   hashes raw. All little-endian. Decoding is strict: exact lengths, bounds,
 *   no embedded NUL, no trailing bytes, the same format version.
 */
#ifndef WC_IDENTITY_H
#define WC_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

#define IDENT_FORMAT_VERSION 2
#define IDENT_PATH_MAX 4096
#define IDENT_STR_MAX 128
/* Largest canonical encoding: magic, version, 5 strings, 11 u32, 3 hashes. */
#define IDENT_ENC_MAX (8 + 4 + IDENT_PATH_MAX + 4 * IDENT_STR_MAX + 5 * 4 + \
		       11 * 4 + 3 * BASE_HASH_LEN)

struct ident {
	uint32_t format_version;           /* IDENT_FORMAT_VERSION */
	char model_path[IDENT_PATH_MAX];   /* realpath of the model */
	char arch[IDENT_STR_MAX];          /* architectures[0] */
	char dtype[IDENT_STR_MAX];         /* torch_dtype */
	char quant_method[IDENT_STR_MAX];  /* "" when unquantized */
	uint8_t quant_hash[BASE_HASH_LEN];   /* of canonical quantization_config */
	uint32_t tp_size, tp_rank, pp_size, pp_rank;
	uint8_t rules_hash[BASE_HASH_LEN];   /* plan_rules.hash: the layout's */
	uint32_t ep_size, ep_rank;         /* expert parallelism (1, 0) */
	uint32_t vocab_pad;                /* the padding multiple used */
	uint8_t ckpt_digest[BASE_HASH_LEN];  /* model.digest */
	char device_uuid[IDENT_STR_MAX];   /* gpu_dev.uuid */
	uint32_t cc_major, cc_minor;       /* 0 for the host backend */
	uint32_t reserved0, reserved1;     /* 0; encoded, keeps room */
};

struct model;
struct plan_rules;

/* Zeroes id and sets format_version. */
void ident_init(struct ident *id);

/* Fills the model fields (path, arch, dtype, quant, digest) and the rules
 * hash from an opened model and rules; -ENAMETOOLONG when a string does not
 * fit (message names it). */
int ident_set_model(struct ident *id, const struct model *m,
		    const struct plan_rules *rules, char *err);

/* Canonical encoding into buf (cap bytes); *len gets the size. -ENOSPC
 * when cap is too small, -EINVAL when a string is not NUL-terminated in its
 * field. */
int ident_encode(const struct ident *id, void *buf, size_t cap, size_t *len);

/* Strict decode of exactly len bytes. */
int ident_decode(struct ident *id, const void *buf, size_t len, char *err);

/* XXH3-128 of the canonical encoding. */
int ident_digest(const struct ident *id, uint8_t out[BASE_HASH_LEN]);

/* Comparison. Both functions walk the field table in identity.c, in its
 * order, and list only the fields it marks compared (the reserved ones are
 * not): that table is the one place deciding which difference refuses an
 * engine. format_version comes first when it differs. */

/* Lists every differing field as "field: A_NAME=value B_NAME=value" joined
 * by "; " into out (cap bytes, truncated with "..."), and returns the number
 * of differing fields (0: interchangeable). */
int ident_compare(const struct ident *a, const char *a_name,
		  const struct ident *b, const char *b_name,
		  char *out, size_t cap);

struct wire_mismatch;
/* Fills mm[] (at most max) with every differing field, a's value as the
 * daemon's and b's as the client's (strings as they are, numbers decimal,
 * hashes hex; each truncated to the wire's value size); returns how many
 * were filled (0: interchangeable). This is HELLO's MISMATCH reply. */
unsigned ident_mismatch(const struct ident *a, const struct ident *b,
			struct wire_mismatch *mm, unsigned max);

#endif
