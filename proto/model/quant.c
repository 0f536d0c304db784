/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "err.h"
#include "quant.h"

const char *quant_verdict_name(enum quant_verdict v)
{
	switch (v) {
	case QUANT_NONE: return "unquantized (verified)";
	case QUANT_FP8_BLOCK: return "fp8 block-wise (verified)";
	case QUANT_OVERRIDDEN: return "NOT VERIFIED, allowed by --allow-quant";
	}
	return "?";
}

int quant_check(const struct model_config *c, const char *allow_quant,
		enum quant_verdict *v, char *err)
{
	const char *method = c->quant_method[0] ? c->quant_method : "(no quant_method)";
	const char *why;

	if (!c->quant_json) {
		*v = QUANT_NONE;
		return 0;
	}
	if (!strcmp(c->quant_method, "fp8") && c->quant_block) {
		*v = QUANT_FP8_BLOCK;
		return 0;
	}
	if (allow_quant && !strcmp(allow_quant, c->quant_method)) {
		*v = QUANT_OVERRIDDEN;
		return 0;
	}
	why = !strcmp(c->quant_method, "fp8") ?
		      "fp8 without weight_block_size is per-tensor fp8, and " : "";
	return base_errf(err, EPERM,
		       "quantization method '%s' is refused: %sengines may repack or re-scale its weights after loading into a layout an attached engine cannot reproduce, which would silently serve wrong numbers; verified for zero-copy sharing: %s (per-tensor fp8 is not verified); run the engine without the weight cache, or pass --allow-quant %s to override at your own risk",
		       method, why, QUANT_VERIFIED_LIST,
		       c->quant_method[0] ? c->quant_method : "METHOD");
}
