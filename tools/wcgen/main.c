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

struct preset {
	const char *name;
	uint64_t hidden, inter, layers, heads, kv_heads, vocab;
	bool tie;
	double rope_theta;
};

static const struct preset presets[] = {
	{ "tiny", 256, 688, 4, 4, 2, 4096, false, 10000.0 },
	{ "llama-1b", 2048, 8192, 16, 32, 8, 128256, true, 500000.0 },
	{ "llama-8b", 4096, 14336, 32, 32, 8, 128256, false, 500000.0 },
};

struct opts {
	const struct preset *p;
	const char *out;
	uint64_t shard_size;
	bool shard_size_set;
	enum st_dtype dtype;
	const char *quant;        /* NULL, "fp8", or another method */
	uint64_t block[2];        /* fp8 weight_block_size, 0 for per-tensor */
	uint64_t seed;
	bool headers_only, verify, verify_only, force;
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
		"presets:\n"
		"  tiny       4 layers, hidden 256, about 10 MB\n"
		"  llama-1b   Llama-3.2-1B shapes (146 tensors, tied embeddings, ~2.5 GB bf16)\n"
		"  llama-8b   Llama-3-8B shapes (291 tensors, ~16 GB bf16)\n\n"
		"options:\n"
		"  --out DIR          directory to write (created; must not hold a model unless --force)\n"
		"  --shard-size SIZE  largest shard, e.g. 5GB (default), 500MB, 2GiB, 3000000\n"
		"  --dtype D          bf16 (default), f16, f32\n"
		"  --quant METHOD[:B] write a quantization_config: fp8:128 (block-wise, B x B\n"
		"                     weight_block_size, F8_E4M3 weights + weight_scale_inv),\n"
		"                     fp8 (per-tensor: weight_scale scalars), or any other method\n"
		"                     name (awq, gptq, ...: config only, tensors stay in --dtype)\n"
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
	char n[GEN_NAME_MAX];
	bool fp8 = o->quant && !strcmp(o->quant, "fp8");

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

static void layout_tensors(const struct opts *o)
{
	const struct preset *p = o->p;
	uint64_t hd = p->hidden / p->heads, kv = p->kv_heads * hd;
	char n[GEN_NAME_MAX];

	tensors = calloc(GEN_TENSORS_MAX, sizeof(*tensors));
	if (!tensors)
		die("out of memory");
	add("model.embed_tokens.weight", o->dtype, 2, p->vocab, p->hidden);
	for (uint64_t l = 0; l < p->layers; l++) {
		snprintf(n, sizeof(n), "model.layers.%" PRIu64 ".input_layernorm.weight", l);
		add(n, o->dtype, 1, p->hidden, 0);
#define LIN(part, out, in)                                                        \
	do {                                                                      \
		snprintf(n, sizeof(n), "model.layers.%" PRIu64 "." part, l);      \
		add_linear(o, n, out, in);                                        \
	} while (0)
		LIN("self_attn.q_proj", p->hidden, p->hidden);
		LIN("self_attn.k_proj", kv, p->hidden);
		LIN("self_attn.v_proj", kv, p->hidden);
		LIN("self_attn.o_proj", p->hidden, p->hidden);
		snprintf(n, sizeof(n), "model.layers.%" PRIu64 ".post_attention_layernorm.weight", l);
		add(n, o->dtype, 1, p->hidden, 0);
		LIN("mlp.gate_proj", p->inter, p->hidden);
		LIN("mlp.up_proj", p->inter, p->hidden);
		LIN("mlp.down_proj", p->hidden, p->inter);
#undef LIN
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

static void write_config(const struct opts *o)
{
	const struct preset *p = o->p;
	json_t *c = json_pack("{s:[s], s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:b, s:f, s:f, s:I, s:I, s:I}",
			      "architectures", "LlamaForCausalLM", "model_type", "llama",
			      "hidden_size", (json_int_t)p->hidden,
			      "intermediate_size", (json_int_t)p->inter,
			      "num_hidden_layers", (json_int_t)p->layers,
			      "num_attention_heads", (json_int_t)p->heads,
			      "num_key_value_heads", (json_int_t)p->kv_heads,
			      "head_dim", (json_int_t)(p->hidden / p->heads),
			      "vocab_size", (json_int_t)p->vocab,
			      "torch_dtype", torch_dtype(o->dtype),
			      "tie_word_embeddings", p->tie,
			      "rms_norm_eps", 1e-5, "rope_theta", p->rope_theta,
			      "max_position_embeddings", (json_int_t)8192,
			      "bos_token_id", (json_int_t)1, "eos_token_id", (json_int_t)2);

	if (!c)
		die("json_pack failed");
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
	char err[WC_ERR_LEN];
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

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
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
	static char quant[64];
	int c;

	memset(o, 0, sizeof(*o));
	o->shard_size = 5000000000ull;
	o->dtype = ST_BF16;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
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
		case 'q': {
			char *colon;

			snprintf(quant, sizeof(quant), "%s", optarg);
			colon = strchr(quant, ':');
			if (colon) {
				*colon = '\0';
				if (strcmp(quant, "fp8") || parse_size(colon + 1, &o->block[0]) ||
				    o->block[0] > 65536)
					usage_die("--quant '%s': a block size is only for fp8, as fp8:128", optarg);
				o->block[1] = o->block[0];
			}
			if (!quant[0] || !strcmp(quant, "none"))
				o->quant = NULL;
			else
				o->quant = quant;
			break;
		}
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
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (!strcmp(argv[optind], presets[i].name))
			o->p = &presets[i];
	if (!o->p)
		usage_die("unknown preset '%s'; presets: tiny, llama-1b, llama-8b", argv[optind]);
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
	t0 = now_s();
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
		       now_s() - t0, bytes / 1e6 / (now_s() - t0 + 1e-9));
	}
	check_model(&o);
	if (o.verify || o.verify_only) {
		t0 = now_s();
		for (uint32_t k = 0; k < nshards; k++)
			bad += gen_verify_shard(o.out, &shards[k], tensors, o.seed);
		if (bad)
			die("%s: %u tensors differ from preset %s seed %" PRIu64,
			    o.out, bad, o.p->name, o.seed);
		printf("verified %s: %u tensors match seed %" PRIu64 " in %.2f s\n",
		       o.out, ntensors, o.seed, now_s() - t0);
	}
	for (uint32_t k = 0; k < nshards; k++)
		free(shards[k].header);
	free(tensors);
	return 0;
}
