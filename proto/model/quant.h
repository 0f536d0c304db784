/* SPDX-License-Identifier: MIT */
/*
 * The quantization gate. Zero-copy sharing is verified only for unquantized
 * checkpoints and for FP8 with block-wise scales (weight_block_size set):
 * there the bytes on disk are the bytes an engine uses. Other methods
 * (AWQ, GPTQ, bitsandbytes, per-tensor FP8, ...) may be repacked or re-scaled
 * after loading, so an attached engine could silently compute with wrong
 * numbers; they are refused before anything is loaded.
 */
#ifndef WC_QUANT_H
#define WC_QUANT_H

#include "model.h"

enum quant_verdict {
	QUANT_NONE,          /* unquantized: verified */
	QUANT_FP8_BLOCK,     /* fp8 with weight_block_size: verified */
	QUANT_OVERRIDDEN,    /* not verified, allowed by --allow-quant METHOD:
				the caller must log this loudly */
};

#define QUANT_VERIFIED_LIST "unquantized, fp8 with weight_block_size (block-wise)"

/* Decides for config c. allow_quant: the method named by --allow-quant, or
 * NULL; it only overrides a refusal of that exact method. 0 with *v set, or
 * -EPERM with a message naming the method, why, the verified list, that
 * per-tensor FP8 is not verified, and how to run without the cache. */
int quant_check(const struct model_config *c, const char *allow_quant,
		enum quant_verdict *v, char *err);

const char *quant_verdict_name(enum quant_verdict v);

#endif
