/* SPDX-License-Identifier: MIT */
/*
 * config.json parsing (fields, wrong types, canonical quantization_config)
 * and the quantization gate: what is verified, what is refused and with
 * which message, and the --allow-quant override.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "model.h"
#include "quant.h"
#include "t.h"

static void parse_ok(struct model_config *c, const char *json)
{
	char err[BASE_ERR_LEN];

	if (model_config_parse(c, json, strlen(json), "config.json", err))
		T_FAIL("%s: %s", json, err);
}

static void parse_bad(const char *json, const char *needle)
{
	char err[BASE_ERR_LEN] = "";
	struct model_config c;

	if (!model_config_parse(&c, json, strlen(json), "/m/config.json", err))
		T_FAIL("accepted: %s", json);
	printf("%s\n", err);
	T_HAS(err, "/m/config.json");
	T_HAS(err, needle);
}

static void check_fields(void)
{
	struct model_config c, d;

	parse_ok(&c, "{\"architectures\":[\"Qwen2ForCausalLM\"],\"torch_dtype\":\"bfloat16\","
		     "\"tie_word_embeddings\":true,\"num_hidden_layers\":28,\"other\":[1,{}]}");
	T_EQ_STR(c.arch, "Qwen2ForCausalLM");
	T_EQ_STR(c.dtype, "bfloat16");
	T_ASSERT(c.tie_word_embeddings);
	T_EQ_INT(c.num_hidden_layers, 28);
	T_ASSERT(!c.quant_json);
	model_config_free(&c);
	/* newer transformers write "dtype"; torch_dtype wins when both */
	parse_ok(&c, "{\"dtype\":\"float16\"}");
	T_EQ_STR(c.dtype, "float16");
	T_EQ_STR(c.arch, "");
	T_EQ_INT(c.num_hidden_layers, -1);
	model_config_free(&c);
	parse_ok(&c, "{\"dtype\":\"float16\",\"torch_dtype\":\"bfloat16\",\"torch_dtype_x\":null}");
	T_EQ_STR(c.dtype, "bfloat16");
	model_config_free(&c);

	/* canonical quantization_config: key order and spacing do not matter */
	parse_ok(&c, "{\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128,64],"
		     "\"activation_scheme\":\"dynamic\"}}");
	parse_ok(&d, "{\"quantization_config\": {\"activation_scheme\": \"dynamic\",  "
		     "\"weight_block_size\": [128, 64], \"quant_method\": \"fp8\"}}");
	T_EQ_STR(c.quant_json, "{\"activation_scheme\":\"dynamic\",\"quant_method\":\"fp8\",\"weight_block_size\":[128,64]}");
	T_EQ_STR(c.quant_json, d.quant_json);
	T_ASSERT(!memcmp(c.quant_hash, d.quant_hash, BASE_HASH_LEN));
	T_ASSERT(c.quant_block);
	T_EQ_U64(c.quant_block_size[0], 128);
	T_EQ_U64(c.quant_block_size[1], 64);
	T_EQ_STR(c.quant_method, "fp8");
	model_config_free(&c);
	model_config_free(&d);
}

static void check_errors(void)
{
	parse_bad("{\"architectures\":\"LlamaForCausalLM\"}", "architectures is a string, not a list of strings");
	parse_bad("{\"architectures\":[]}", "architectures is an array whose first element is missing or not a string");
	parse_bad("{\"architectures\":[7]}", "architectures is an array whose first element is missing or not a string");
	parse_bad("{\"torch_dtype\":16}", "torch_dtype is an integer, not a string");
	parse_bad("{\"tie_word_embeddings\":\"yes\"}", "tie_word_embeddings is a string, not true or false");
	parse_bad("{\"num_hidden_layers\":-1}", "num_hidden_layers is an integer, not a non-negative integer");
	parse_bad("{\"quantization_config\":\"fp8\"}", "quantization_config is a string, not an object");
	parse_bad("{\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128]}}",
		  "weight_block_size is an array of the wrong length");
	parse_bad("{\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128,0]}}",
		  "weight_block_size[1] is an integer, not a positive integer");
	parse_bad("{\"quantization_config\":{\"quant_method\":4}}", "quant_method is an integer, not a string");
	parse_bad("{\"a\":1,\"a\":2}", "duplicate object key");
	parse_bad("{\"a\":1} trailing", "end of file expected");
	parse_bad("[1]", "top level is an array, not a JSON object");
	parse_bad("{\"architectures\":[\"" "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"]}",
		  "architectures[0] is 128 bytes or holds a NUL (limit 127 bytes)");
}

static void gate(const char *json, const char *allow, int want_rc,
		 enum quant_verdict want, const char *const *needles)
{
	char err[BASE_ERR_LEN] = "";
	enum quant_verdict v = QUANT_NONE;
	struct model_config c;
	int rc;

	parse_ok(&c, json);
	rc = quant_check(&c, allow, &v, err);
	T_EQ_INT(rc, want_rc);
	if (!rc)
		T_EQ_INT(v, want);
	else
		printf("%s\n", err);
	for (; needles && *needles; needles++)
		T_HAS(err, *needles);
	model_config_free(&c);
}

static void check_gate(void)
{
	static const char *const awq[] = {
		"quantization method 'awq' is refused",
		"repack or re-scale",
		"silently serve wrong numbers",
		"verified for zero-copy sharing: unquantized, fp8 with weight_block_size",
		"per-tensor fp8 is not verified",
		"run the engine without the weight cache",
		"--allow-quant awq",
		NULL,
	};
	static const char *const fp8[] = {
		"quantization method 'fp8' is refused: fp8 without weight_block_size is per-tensor fp8",
		"--allow-quant fp8", NULL,
	};
	static const char *const nomethod[] = {
		"quantization method '(no quant_method)' is refused", "--allow-quant METHOD", NULL,
	};
	static const char *const gptq[] = { "'gptq' is refused", NULL };

	gate("{}", NULL, 0, QUANT_NONE, NULL);
	gate("{\"quantization_config\":null}", NULL, 0, QUANT_NONE, NULL);
	gate("{\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]}}",
	     NULL, 0, QUANT_FP8_BLOCK, NULL);
	gate("{\"quantization_config\":{\"quant_method\":\"fp8\",\"activation_scheme\":\"static\"}}",
	     NULL, -EPERM, 0, fp8);
	gate("{\"quantization_config\":{\"quant_method\":\"awq\",\"bits\":4}}", NULL, -EPERM, 0, awq);
	gate("{\"quantization_config\":{\"quant_method\":\"awq\",\"bits\":4}}", "awq", 0,
	     QUANT_OVERRIDDEN, NULL);
	gate("{\"quantization_config\":{\"quant_method\":\"gptq\"}}", "awq", -EPERM, 0, gptq);
	gate("{\"quantization_config\":{\"bits\":4}}", NULL, -EPERM, 0, nomethod);
	T_HAS(quant_verdict_name(QUANT_OVERRIDDEN), "NOT VERIFIED");
}

int main(void)
{
	check_fields();
	check_errors();
	check_gate();
	return 0;
}
