/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the input is config.json text, index json text and a
 * rules file at once (the same bytes through each parser), plus the
 * quantization gate on whatever config parses.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model.h"
#include "plan.h"
#include "quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[BASE_ERR_LEN];
	struct model_config c;
	struct model_index ix;
	struct plan_rules r = { 0 };
	enum quant_verdict v;

	if (!model_config_parse(&c, data, size, "config.json", err)) {
		if (c.quant_json && strlen(c.quant_json) == 0)
			abort();
		quant_check(&c, NULL, &v, err);
		quant_check(&c, c.quant_method, &v, err);
		model_config_free(&c);
	}
	if (!model_index_parse(&ix, data, size, "index.json", err)) {
		for (uint32_t i = 1; i < ix.n; i++)
			if (strcmp(ix.e[i - 1].tensor, ix.e[i].tensor) >= 0)
				abort();
		model_index_free(&ix);
	}
	if (!plan_rules_parse(&r, data, size, "rules", err)) {
		for (uint32_t i = 0; i < r.n; i++)
			plan_rules_match(&r, r.r[i].pattern);
		plan_rules_free(&r);
	}
	return 0;
}
