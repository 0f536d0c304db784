/* SPDX-License-Identifier: MIT */
/*
 * wcgen: writes a valid synthetic llama-family checkpoint directory
 * (config.json, *.safetensors shards, model.safetensors.index.json when
 * there is more than one shard) with deterministic data from a seed.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "cli.h"
#include "log.h"
#include "model.h"
#include "wcgen.h"
#include "clock.h"

enum family {
	F_LLAMA,        /* q/k/v/o, gate/up/down (Llama, Mistral) */
	F_QWEN2,        /* + q/k/v biases */
	F_QWEN3,        /* + q_norm/k_norm */
	F_MIXTRAL,      /* block_sparse_moe.experts.N.w1/w2/w3 + router */
	F_QWEN3_MOE,    /* q/k norms, mlp.experts.N.gate/up/down + router */
	F_DEEPSEEK_V3,  /* MLA, dense then MoE layers, shared experts */
	F_GEMMA2,       /* four norms a layer, tied */
	F_GEMMA3,       /* + q_norm/k_norm */
	F_PHI3,         /* fused qkv_proj and gate_up_proj on disk */
};

struct preset {
	const char *name;
	enum family fam;
	const char *arch, *model_type;
	uint64_t hidden, inter, layers, heads, kv_heads, head_dim, vocab;
	bool tie;
	double rope_theta;
	/* MoE: experts, per-expert intermediate, top-k, shared experts, dense
	 * layers first (DeepSeek's first_k_dense_replace) */
	uint64_t experts, moe_inter, topk, shared, dense;
	/* MLA */
	uint64_t q_lora, kv_lora, nope, rope, vdim;
	const char *quant;       /* default --quant ("fp8:128"), or NULL */
	const char *help;
};

/* The tiny presets exercise the engines' layout rules: 8 query heads and 2
 * KV heads (replicated at tp 4 and 8), vocabularies that tp does not divide
 * (1000 pads to 1024: tp 8 leaves 104 real rows on the last rank; 515 pads
 * to 576), head_dim unlike hidden/heads (Gemma), 5 and 6 experts (ep 4
 * leaves a remainder), block FP8 in 128-blocks (DeepSeek-V3: tp 8 cuts
 * o_proj's 512 columns into 64, off the blocks, and is refused). */
static const struct preset presets[] = {
	{ "tiny", F_LLAMA, "LlamaForCausalLM", "llama", 256, 688, 4, 4, 2, 64, 4096, false, 10000.0,
	  .help = "4 layers, hidden 256, about 10 MB" },
	{ "llama-1b", F_LLAMA, "LlamaForCausalLM", "llama", 2048, 8192, 16, 32, 8, 64, 128256, true, 500000.0,
	  .help = "Llama-3.2-1B shapes (146 tensors, tied embeddings, ~2.5 GB bf16)" },
	{ "llama-8b", F_LLAMA, "LlamaForCausalLM", "llama", 4096, 14336, 32, 32, 8, 128, 128256, false, 500000.0,
	  .help = "Llama-3-8B shapes (291 tensors, ~16 GB bf16)" },
	{ "llama-gqa", F_LLAMA, "LlamaForCausalLM", "llama", 128, 192, 2, 8, 2, 16, 1000, false, 10000.0,
	  .help = "GQA Llama: 8 heads, 2 KV heads, vocab 1000" },
	{ "qwen2-tiny", F_QWEN2, "Qwen2ForCausalLM", "qwen2", 128, 192, 2, 8, 2, 16, 515, false, 1000000.0,
	  .help = "Qwen2: q/k/v biases, vocab 515" },
	{ "qwen3-tiny", F_QWEN3, "Qwen3ForCausalLM", "qwen3", 128, 192, 2, 8, 2, 16, 1000, true, 1000000.0,
	  .help = "Qwen3: q/k norms, tied embeddings" },
	{ "mixtral-tiny", F_MIXTRAL, "MixtralForCausalLM", "mixtral", 128, 128, 2, 8, 2, 16, 1000, false, 1000000.0,
	  4, 128, 2, .help = "Mixtral: 4 experts of 128, top 2" },
	{ "qwen3-moe-tiny", F_QWEN3_MOE, "Qwen3MoeForCausalLM", "qwen3_moe", 128, 256, 2, 8, 2, 16, 1000, false, 1000000.0,
	  6, 64, 2, .help = "Qwen3-MoE: 6 experts of 64, q/k norms" },
	{ "deepseek-v3-tiny", F_DEEPSEEK_V3, "DeepseekV3ForCausalLM", "deepseek_v3", 256, 1024, 2, 8, 8, 0, 1000, false, 10000.0,
	  5, 512, 2, 1, 1, 128, 128, 64, 64, 64, "fp8:128",
	  "DeepSeek-V3: MLA, 1 dense + 1 MoE layer, 5 experts + 1 shared, block FP8" },
	/* the real model's names and counts, tiny dimensions: 45,395 tensors
	 * (45,633 served with the layout's views), a few MB; what the Python
	 * package's lazy Model is measured on (bench/py/py_lazy.py) */
	{ "deepseek-v3-shape", F_DEEPSEEK_V3, "DeepseekV3ForCausalLM", "deepseek_v3", 64, 128, 61, 8, 8, 0, 1024, false, 10000.0,
	  256, 16, 8, 1, 3, 32, 16, 8, 8, 8, NULL,
	  "DeepSeek-V3's names and counts with tiny dimensions: 61 layers (3 dense), 256 experts + 1 shared, MLA; 45,395 tensors, bf16" },
	{ "gemma2-tiny", F_GEMMA2, "Gemma2ForCausalLM", "gemma2", 128, 192, 2, 8, 4, 32, 1000, true, 10000.0,
	  .help = "Gemma 2: head_dim 32 (not hidden/heads), four norms a layer, tied" },
	{ "gemma3-tiny", F_GEMMA3, "Gemma3ForCausalLM", "gemma3_text", 128, 192, 2, 8, 4, 32, 1000, true, 1000000.0,
	  .help = "Gemma 3 (text): + q/k norms" },
	{ "phi3-tiny", F_PHI3, "Phi3ForCausalLM", "phi3", 128, 192, 2, 8, 2, 16, 1000, false, 10000.0,
	  .help = "Phi-3: qkv_proj and gate_up_proj fused on disk" },
};

#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

struct opts {
	const struct preset *p;
	const char *out;
	uint64_t shard_size;
	bool shard_size_set;
	enum st_dtype dtype;
	const char *quant;        /* NULL, "fp8", or another method */
	uint64_t block[2];        /* fp8 weight_block_size, 0 for per-tensor */
	uint64_t seed;
	bool headers_only, verify, verify_only, force, quant_set;
};

static struct gen_tensor *tensors;
static uint32_t ntensors;
static struct gen_shard shards[GEN_SHARDS_MAX];
static uint32_t nshards;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: wcgen PRESET --out DIR [options]\n\n"
		"Writes a synthetic safetensors checkpoint directory with deterministic data.\n\n"
		"presets:\n");
	for (size_t i = 0; i < NPRESETS; i++)
		fprintf(f, "  %-17s %s\n", presets[i].name, presets[i].help);
	fprintf(f,
		"\noptions:\n"
		"  --out DIR          directory to write (created; must not hold a model unless --force)\n"
		"  --shard-size SIZE  largest shard, e.g. 5GB (default), 500MB, 2GiB, 3000000\n"
		"  --dtype D          bf16 (default), f16, f32\n"
		"  --quant METHOD[:B] write a quantization_config: fp8:128 (block-wise, B x B\n"
		"                     weight_block_size, F8_E4M3 weights + weight_scale_inv),\n"
		"                     fp8 (per-tensor: weight_scale scalars), or any other method\n"
		"                     name (awq, gptq, ...: config only, tensors stay in --dtype);\n"
		"                     none: unquantized (deepseek-v3-tiny is fp8:128 by default)\n"
		"  --seed N           data seed (default 0)\n"
		"  --headers-only     write headers and leave the data as sparse holes (fast)\n"
		"  --verify           after writing, re-read every byte and compare\n"
		"  --verify-only      do not write; check an existing directory against the layout\n"
		"  --force            overwrite a directory that already holds a model\n"
		"  -h, --help         this text; --version the release\n"
		"\n"
		"Examples:\n"
		"  wcgen tiny --out /tmp/tiny\n"
		"  wcgen llama-1b --out /data/llama-1b --shard-size 1GB --verify\n"
		"  wcgen tiny --out /tmp/awq --quant awq --headers-only\n"
		"\n"
		"Exit status: 0 written (and verified), 1 a write or --verify failed,\n"
		"2 usage (an unknown preset or option, a bad value).\n");
}

/* A usage error: the sentence, then exit 2 (die() is for failures: 1). */
static void __attribute__((format(printf, 1, 2), noreturn))
usage_die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("wcgen: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("; run 'wcgen --help' for the options\n", stderr);
	exit(2);
}

static int parse_size(const char *s, uint64_t *out)
{
	static const struct {
		const char *suf;
		uint64_t mul;
	} units[] = {
		{ "", 1 }, { "B", 1 }, { "K", 1000 }, { "KB", 1000 },
		{ "M", 1000000 }, { "MB", 1000000 }, { "G", 1000000000 },
		{ "GB", 1000000000 }, { "KiB", 1024 }, { "MiB", 1 << 20 },
		{ "GiB", 1 << 30 },
	};
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (!strcmp(end, units[i].suf)) {
			if (__builtin_mul_overflow(v, units[i].mul, out) || !*out)
				return -EINVAL;
			return 0;
		}
	}
	return -EINVAL;
}

static void add(const char *name, enum st_dtype dt, uint32_t ndim,
		uint64_t d0, uint64_t d1)
{
	struct gen_tensor *t;
	uint64_t nelem = ndim == 0 ? 1 : ndim == 1 ? d0 : d0 * d1;

	if (ntensors >= GEN_TENSORS_MAX)
		die("more than %d tensors", GEN_TENSORS_MAX);
	t = &tensors[ntensors];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->dtype = dt;
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = d1;
	if (st_dtype_bytes(dt, nelem, &t->nbytes))
		die("tensor %s: size overflows", name);
	t->index = ntensors++;
}

static void add_linear(const struct opts *o, const char *name, uint64_t out,
		       uint64_t in)
{
	char n[GEN_NAME_MAX + 32];
	bool fp8 = o->quant && !strcmp(o->quant, "fp8");

	if (strlen(name) + sizeof(".weight_scale_inv") > GEN_NAME_MAX)
		die("tensor name %s is longer than %d bytes", name, GEN_NAME_MAX);
	snprintf(n, sizeof(n), "%s.weight", name);
	add(n, fp8 ? ST_F8_E4M3 : o->dtype, 2, out, in);
	if (fp8 && o->block[0]) {
		snprintf(n, sizeof(n), "%s.weight_scale_inv", name);
		add(n, ST_F32, 2, (out + o->block[0] - 1) / o->block[0],
		    (in + o->block[1] - 1) / o->block[1]);
	} else if (fp8) {
		snprintf(n, sizeof(n), "%s.weight_scale", name);
		add(n, ST_F32, 0, 0, 0);
	}
}

static void addf(enum st_dtype dt, uint32_t ndim, uint64_t d0, uint64_t d1,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void addf(enum st_dtype dt, uint32_t ndim, uint64_t d0, uint64_t d1,
		 const char *fmt, ...)
{
	char n[GEN_NAME_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(n, sizeof(n), fmt, ap);
	va_end(ap);
	add(n, dt, ndim, d0, d1);
}

static void linf(const struct opts *o, uint64_t out, uint64_t in,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void linf(const struct opts *o, uint64_t out, uint64_t in,
		 const char *fmt, ...)
{
	char n[GEN_NAME_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(n, sizeof(n), fmt, ap);
	va_end(ap);
	add_linear(o, n, out, in);
}

/* One layer's attention, in the checkpoint names of the preset's family. */
static void layout_attention(const struct opts *o, uint64_t l)
{
	const struct preset *p = o->p;
	const char *pre = "model.layers";
	uint64_t q = p->heads * p->head_dim, kv = p->kv_heads * p->head_dim;

	if (p->fam == F_DEEPSEEK_V3) {
		linf(o, p->q_lora, p->hidden, "%s.%" PRIu64 ".self_attn.q_a_proj", pre, l);
		addf(o->dtype, 1, p->q_lora, 0, "%s.%" PRIu64 ".self_attn.q_a_layernorm.weight", pre, l);
		linf(o, p->heads * (p->nope + p->rope), p->q_lora,
		     "%s.%" PRIu64 ".self_attn.q_b_proj", pre, l);
		linf(o, p->kv_lora + p->rope, p->hidden,
		     "%s.%" PRIu64 ".self_attn.kv_a_proj_with_mqa", pre, l);
		addf(o->dtype, 1, p->kv_lora, 0, "%s.%" PRIu64 ".self_attn.kv_a_layernorm.weight", pre, l);
		linf(o, p->heads * (p->nope + p->vdim), p->kv_lora,
		     "%s.%" PRIu64 ".self_attn.kv_b_proj", pre, l);
		linf(o, p->hidden, p->heads * p->vdim, "%s.%" PRIu64 ".self_attn.o_proj", pre, l);
		return;
	}
	if (p->fam == F_PHI3) {
		linf(o, q + 2 * kv, p->hidden, "%s.%" PRIu64 ".self_attn.qkv_proj", pre, l);
	} else {
		linf(o, q, p->hidden, "%s.%" PRIu64 ".self_attn.q_proj", pre, l);
		linf(o, kv, p->hidden, "%s.%" PRIu64 ".self_attn.k_proj", pre, l);
		linf(o, kv, p->hidden, "%s.%" PRIu64 ".self_attn.v_proj", pre, l);
	}
	if (p->fam == F_QWEN2) {
		addf(o->dtype, 1, q, 0, "%s.%" PRIu64 ".self_attn.q_proj.bias", pre, l);
		addf(o->dtype, 1, kv, 0, "%s.%" PRIu64 ".self_attn.k_proj.bias", pre, l);
		addf(o->dtype, 1, kv, 0, "%s.%" PRIu64 ".self_attn.v_proj.bias", pre, l);
	}
	if (p->fam == F_QWEN3 || p->fam == F_QWEN3_MOE || p->fam == F_GEMMA3) {
		addf(o->dtype, 1, p->head_dim, 0, "%s.%" PRIu64 ".self_attn.q_norm.weight", pre, l);
		addf(o->dtype, 1, p->head_dim, 0, "%s.%" PRIu64 ".self_attn.k_norm.weight", pre, l);
	}
	linf(o, p->hidden, q, "%s.%" PRIu64 ".self_attn.o_proj", pre, l);
}

/* A gated MLP: gate/up/down under prefix (Phi-3: gate_up fused). */
static void layout_mlp(const struct opts *o, const char *prefix, uint64_t inter)
{
	const struct preset *p = o->p;

	if (p->fam == F_PHI3) {
		linf(o, 2 * inter, p->hidden, "%s.gate_up_proj", prefix);
	} else {
		linf(o, inter, p->hidden, "%s.gate_proj", prefix);
		linf(o, inter, p->hidden, "%s.up_proj", prefix);
	}
	linf(o, p->hidden, inter, "%s.down_proj", prefix);
}

static void layout_moe(const struct opts *o, uint64_t l)
{
	const struct preset *p = o->p;
	char pre[GEN_NAME_MAX];

	if (p->fam == F_MIXTRAL) {
		addf(o->dtype, 2, p->experts, p->hidden,
		     "model.layers.%" PRIu64 ".block_sparse_moe.gate.weight", l);
		for (uint64_t e = 0; e < p->experts; e++) {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".block_sparse_moe.experts.%" PRIu64, l, e);
			linf(o, p->moe_inter, p->hidden, "%s.w1", pre);
			linf(o, p->hidden, p->moe_inter, "%s.w2", pre);
			linf(o, p->moe_inter, p->hidden, "%s.w3", pre);
		}
		return;
	}
	addf(o->dtype, 2, p->experts, p->hidden, "model.layers.%" PRIu64 ".mlp.gate.weight", l);
	if (p->fam == F_DEEPSEEK_V3)
		addf(ST_F32, 1, p->experts, 0,
		     "model.layers.%" PRIu64 ".mlp.gate.e_score_correction_bias", l);
	for (uint64_t e = 0; e < p->experts; e++) {
		snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp.experts.%" PRIu64, l, e);
		layout_mlp(o, pre, p->moe_inter);
	}
	if (p->shared) {
		snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp.shared_experts", l);
		layout_mlp(o, pre, p->moe_inter * p->shared);
	}
}

static void layout_tensors(const struct opts *o)
{
	const struct preset *p = o->p;
	bool gemma = p->fam == F_GEMMA2 || p->fam == F_GEMMA3;
	char pre[GEN_NAME_MAX];

	tensors = calloc(GEN_TENSORS_MAX, sizeof(*tensors));
	if (!tensors)
		die("out of memory");
	add("model.embed_tokens.weight", o->dtype, 2, p->vocab, p->hidden);
	for (uint64_t l = 0; l < p->layers; l++) {
		bool moe = p->experts && l >= p->dense;

		addf(o->dtype, 1, p->hidden, 0, "model.layers.%" PRIu64 ".input_layernorm.weight", l);
		layout_attention(o, l);
		addf(o->dtype, 1, p->hidden, 0,
		     "model.layers.%" PRIu64 ".post_attention_layernorm.weight", l);
		if (gemma) {
			addf(o->dtype, 1, p->hidden, 0,
			     "model.layers.%" PRIu64 ".pre_feedforward_layernorm.weight", l);
			addf(o->dtype, 1, p->hidden, 0,
			     "model.layers.%" PRIu64 ".post_feedforward_layernorm.weight", l);
		}
		if (moe) {
			layout_moe(o, l);
		} else {
			snprintf(pre, sizeof(pre), "model.layers.%" PRIu64 ".mlp", l);
			layout_mlp(o, pre, p->inter);
		}
	}
	add("model.norm.weight", o->dtype, 1, p->hidden, 0);
	if (!p->tie)
		add("lm_head.weight", o->dtype, 2, p->vocab, p->hidden);
}

static void layout_shards(const struct opts *o)
{
	uint64_t cur = 0;

	for (uint32_t i = 0; i < ntensors; i++) {
		struct gen_shard *s = &shards[nshards ? nshards - 1 : 0];

		if (!nshards || (s->count && cur + tensors[i].nbytes > o->shard_size)) {
			if (nshards >= GEN_SHARDS_MAX)
				usage_die("more than %d shards: give a larger --shard-size", GEN_SHARDS_MAX);
			s = &shards[nshards++];
			s->first = i;
			cur = 0;
		}
		tensors[i].shard = nshards - 1;
		tensors[i].begin = cur;
		cur += tensors[i].nbytes;
		s->count++;
		s->data_bytes = cur;
	}
	for (uint32_t k = 0; k < nshards; k++) {
		if (nshards == 1)
			snprintf(shards[k].file, sizeof(shards[k].file), "model.safetensors");
		else
			snprintf(shards[k].file, sizeof(shards[k].file),
				 "model-%05u-of-%05u.safetensors", k + 1, nshards);
	}
}

/* Compact JSON in offset order, padded with spaces to a multiple of 8 as
 * the reference library does. */
static void build_header(struct gen_shard *s)
{
	size_t cap = 256 + (size_t)s->count * (GEN_NAME_MAX + 128), n = 0;
	char *h = malloc(cap);

	if (!h)
		die("out of memory");
	n += (size_t)snprintf(h + n, cap - n, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (uint32_t i = s->first; i < s->first + s->count; i++) {
		const struct gen_tensor *t = &tensors[i];

		n += (size_t)snprintf(h + n, cap - n, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
				      t->name, st_dtype_name(t->dtype));
		for (uint32_t d = 0; d < t->ndim; d++)
			n += (size_t)snprintf(h + n, cap - n, "%s%" PRIu64, d ? "," : "",
					      t->shape[d]);
		n += (size_t)snprintf(h + n, cap - n, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
				      t->begin, t->begin + t->nbytes);
	}
	n += (size_t)snprintf(h + n, cap - n, "}");
	while (n % 8)
		h[n++] = ' ';
	h[n] = '\0';
	s->header = h;
	s->header_len = n;
}

static const char *torch_dtype(enum st_dtype d)
{
	return d == ST_BF16 ? "bfloat16" : d == ST_F16 ? "float16" : "float32";
}

static void write_json(const char *dir, const char *file, json_t *j)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (json_dump_file(j, path, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10)))
		die("%s: cannot write", path);
	json_decref(j);
}

static void set_int(json_t *c, const char *k, uint64_t v)
{
	json_object_set_new(c, k, json_integer((json_int_t)v));
}

/* config.json with the fields transformers writes for the family (those
 * the engines read to lay the model out). */
static void write_config(const struct opts *o)
{
	const struct preset *p = o->p;
	json_t *c = json_pack("{s:[s], s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:b, s:f, s:f, s:I, s:I, s:I}",
			      "architectures", p->arch, "model_type", p->model_type,
			      "hidden_size", (json_int_t)p->hidden,
			      "intermediate_size", (json_int_t)p->inter,
			      "num_hidden_layers", (json_int_t)p->layers,
			      "num_attention_heads", (json_int_t)p->heads,
			      "num_key_value_heads", (json_int_t)p->kv_heads,
			      "head_dim", (json_int_t)p->head_dim,
			      "vocab_size", (json_int_t)p->vocab,
			      "torch_dtype", torch_dtype(o->dtype),
			      "tie_word_embeddings", p->tie,
			      "rms_norm_eps", 1e-5, "rope_theta", p->rope_theta,
			      "max_position_embeddings", (json_int_t)8192,
			      "bos_token_id", (json_int_t)1, "eos_token_id", (json_int_t)2);

	if (!c)
		die("json_pack failed");
	switch (p->fam) {
	case F_MIXTRAL:
		set_int(c, "num_local_experts", p->experts);
		set_int(c, "num_experts_per_tok", p->topk);
		/* Mixtral's experts are intermediate_size wide */
		set_int(c, "intermediate_size", p->moe_inter);
		break;
	case F_QWEN3_MOE:
		set_int(c, "num_experts", p->experts);
		set_int(c, "num_experts_per_tok", p->topk);
		set_int(c, "moe_intermediate_size", p->moe_inter);
		set_int(c, "decoder_sparse_step", 1);
		json_object_set_new(c, "mlp_only_layers", json_array());
		json_object_set_new(c, "norm_topk_prob", json_true());
		break;
	case F_DEEPSEEK_V3:
		json_object_del(c, "head_dim");
		set_int(c, "n_routed_experts", p->experts);
		set_int(c, "num_experts_per_tok", p->topk);
		set_int(c, "moe_intermediate_size", p->moe_inter);
		set_int(c, "n_shared_experts", p->shared);
		set_int(c, "first_k_dense_replace", p->dense);
		set_int(c, "moe_layer_freq", 1);
		set_int(c, "n_group", 1);
		set_int(c, "topk_group", 1);
		set_int(c, "q_lora_rank", p->q_lora);
		set_int(c, "kv_lora_rank", p->kv_lora);
		set_int(c, "qk_nope_head_dim", p->nope);
		set_int(c, "qk_rope_head_dim", p->rope);
		set_int(c, "v_head_dim", p->vdim);
		json_object_set_new(c, "scoring_func", json_string("sigmoid"));
		json_object_set_new(c, "topk_method", json_string("noaux_tc"));
		json_object_set_new(c, "norm_topk_prob", json_true());
		json_object_set_new(c, "routed_scaling_factor", json_real(2.5));
		break;
	case F_GEMMA2:
	case F_GEMMA3:
		set_int(c, "query_pre_attn_scalar", p->head_dim);
		set_int(c, "sliding_window", 512);
		json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
		break;
	case F_PHI3:
		/* Phi3Config's default pad_token_id (32000) is past a tiny
		 * vocabulary, and transformers then refuses to build the
		 * embedding ("Padding_idx must be within num_embeddings") */
		set_int(c, "pad_token_id", 0);
		break;
	default:
		break;
	}
	if (o->quant) {
		json_t *q = json_pack("{s:s}", "quant_method", o->quant);

		if (!strcmp(o->quant, "fp8")) {
			json_object_set_new(q, "activation_scheme",
					    json_string(o->block[0] ? "dynamic" : "static"));
			json_object_set_new(q, "fmt", json_string("e4m3"));
			if (o->block[0])
				json_object_set_new(q, "weight_block_size",
						    json_pack("[I,I]", (json_int_t)o->block[0],
							      (json_int_t)o->block[1]));
		} else {
			json_object_set_new(q, "bits", json_integer(4));
			json_object_set_new(q, "group_size", json_integer(128));
		}
		json_object_set_new(c, "quantization_config", q);
	}
	write_json(o->out, "config.json", c);
}

static void write_index(const struct opts *o)
{
	json_t *wm = json_object(), *ix;
	uint64_t total = 0;

	for (uint32_t i = 0; i < ntensors; i++) {
		json_object_set_new(wm, tensors[i].name,
				    json_string(shards[tensors[i].shard].file));
		total += tensors[i].nbytes;
	}
	ix = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
		       "weight_map", wm);
	write_json(o->out, MODEL_INDEX_NAME, ix);
}

/* Opens the result with the strict parser and checks it is our layout. */
static void check_model(const struct opts *o)
{
	char err[BASE_ERR_LEN];
	struct model m;

	if (model_open(&m, o->out, err))
		die("written model does not parse: %s", err);
	if (m.ntensors != ntensors || m.nshards != nshards)
		die("%s: parsed %u tensors in %u shards, wrote %u in %u", o->out,
		    m.ntensors, m.nshards, ntensors, nshards);
	for (uint32_t i = 0; i < ntensors; i++) {
		const struct model_tensor *t = model_find(&m, tensors[i].name);

		if (!t || t->t->begin != tensors[i].begin ||
		    t->t->nbytes != tensors[i].nbytes || t->shard != tensors[i].shard)
			die("%s: tensor %s parsed differently from what was written",
			    o->out, tensors[i].name);
	}
	model_close(&m);
}

/* Creates the directory; one that already holds a model (config.json, an
 * index or *.safetensors) is refused, or emptied of those with --force, so
 * that shards of an earlier, differently-sharded run cannot confuse readers. */
static void prepare_dir(const struct opts *o)
{
	struct dirent *de;
	DIR *d;

	if (mkdir(o->out, 0755) && errno != EEXIST)
		die("%s: cannot create: %s", o->out, strerror(errno));
	d = opendir(o->out);
	if (!d)
		die("%s: cannot list: %s", o->out, strerror(errno));
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		bool ours = !strcmp(de->d_name, "config.json") ||
			    !strcmp(de->d_name, MODEL_INDEX_NAME) ||
			    (n > 12 && !strcmp(de->d_name + n - 12, ".safetensors"));

		if (!ours)
			continue;
		if (!o->force)
			die("%s already holds a model (%s); pass --force to overwrite it",
			    o->out, de->d_name);
		if (unlinkat(dirfd(d), de->d_name, 0))
			die("%s/%s: cannot remove: %s", o->out, de->d_name, strerror(errno));
	}
	closedir(d);
}

static void parse_quant(struct opts *o, const char *arg)
{
	static char quant[64];
	char *colon;

	snprintf(quant, sizeof(quant), "%s", arg);
	o->block[0] = o->block[1] = 0;
	colon = strchr(quant, ':');
	if (colon) {
		*colon = '\0';
		if (strcmp(quant, "fp8") || parse_size(colon + 1, &o->block[0]) ||
		    o->block[0] > 65536)
			usage_die("--quant '%s': a block size is only for fp8, as fp8:128", arg);
		o->block[1] = o->block[0];
	}
	if (!quant[0] || !strcmp(quant, "none"))
		o->quant = NULL;
	else
		o->quant = quant;
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "out", required_argument, 0, 'o' },
		{ "shard-size", required_argument, 0, 's' },
		{ "dtype", required_argument, 0, 'd' },
		{ "quant", required_argument, 0, 'q' },
		{ "seed", required_argument, 0, 'S' },
		{ "headers-only", no_argument, 0, 'H' },
		{ "verify", no_argument, 0, 'v' },
		{ "verify-only", no_argument, 0, 'V' },
		{ "force", no_argument, 0, 'f' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;

	memset(o, 0, sizeof(*o));
	o->shard_size = 5000000000ull;
	o->dtype = ST_BF16;
	while ((c = cli_getopt(argc, argv, "h", lo, "wcgen")) != -1) {
		switch (c) {
		case 'o': o->out = optarg; break;
		case 's':
			if (parse_size(optarg, &o->shard_size))
				usage_die("--shard-size '%s' is not a size like 5GB, 500MB, 2GiB or a byte count", optarg);
			o->shard_size_set = true;
			break;
		case 'd':
			if (!strcmp(optarg, "bf16"))
				o->dtype = ST_BF16;
			else if (!strcmp(optarg, "f16"))
				o->dtype = ST_F16;
			else if (!strcmp(optarg, "f32"))
				o->dtype = ST_F32;
			else
				usage_die("--dtype '%s' is not bf16, f16 or f32", optarg);
			break;
		case 'q':
			parse_quant(o, optarg);
			o->quant_set = true;
			break;
		case 'S': {
			char *end;

			errno = 0;
			o->seed = strtoull(optarg, &end, 0);
			if (errno || *end || end == optarg)
				usage_die("--seed '%s' is not a number", optarg);
			break;
		}
		case 'H': o->headers_only = true; break;
		case 'v': o->verify = true; break;
		case 'V': o->verify_only = true; break;
		case 'f': o->force = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		exit(2);
	}
	for (size_t i = 0; i < NPRESETS; i++)
		if (!strcmp(argv[optind], presets[i].name))
			o->p = &presets[i];
	if (!o->p) {
		char names[1024];
		size_t n = 0;

		for (size_t i = 0; i < NPRESETS; i++)
			n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s",
					      i ? ", " : "", presets[i].name);
		usage_die("unknown preset '%s'; presets: %s", argv[optind], names);
	}
	if (!o->quant_set && o->p->quant)
		parse_quant(o, o->p->quant);
	if (!o->out)
		usage_die("--out DIR is required");
	if (o->headers_only && (o->verify || o->verify_only))
		usage_die("--verify needs data: drop --headers-only");
}

int main(int argc, char **argv)
{
	uint64_t bytes = 0;
	uint32_t bad = 0;
	struct opts o;
	double t0;

	if (cli_version(argc, argv, "wcgen"))
		return 0;
	log_init("wcgen", LOG_INFO);
	parse_args(argc, argv, &o);
	layout_tensors(&o);
	layout_shards(&o);
	for (uint32_t k = 0; k < nshards; k++)
		build_header(&shards[k]);
	t0 = clock_secs();
	if (!o.verify_only) {
		prepare_dir(&o);
		for (uint32_t k = 0; k < nshards; k++)
			bytes += gen_write_shard(o.out, &shards[k], tensors, o.seed,
						 o.headers_only);
		write_config(&o);
		if (nshards > 1)
			write_index(&o);
		printf("wrote %s: %s, %u tensors, %u shard%s, %" PRIu64 " bytes%s in %.2f s (%.0f MB/s)\n",
		       o.out, o.p->name, ntensors, nshards, nshards > 1 ? "s" : "",
		       bytes, o.headers_only ? " (headers only, data sparse)" : "",
		       clock_secs() - t0, bytes / 1e6 / (clock_secs() - t0 + 1e-9));
	}
	check_model(&o);
	if (o.verify || o.verify_only) {
		t0 = clock_secs();
		for (uint32_t k = 0; k < nshards; k++)
			bad += gen_verify_shard(o.out, &shards[k], tensors, o.seed);
		if (bad)
			die("%s: %u tensors differ from preset %s seed %" PRIu64,
			    o.out, bad, o.p->name, o.seed);
		printf("verified %s: %u tensors match seed %" PRIu64 " in %.2f s\n",
		       o.out, ntensors, o.seed, clock_secs() - t0);
	}
	for (uint32_t k = 0; k < nshards; k++)
		free(shards[k].header);
	free(tensors);
	return 0;
}
