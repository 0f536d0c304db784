/* SPDX-License-Identifier: MIT */
/*
 * wcctl inspect PATH [--hashes] [--json]: summarises a .safetensors file or a
 * model directory after strict validation (tensors, dtypes, bytes, shards,
 * architecture, quantization verdict), or prints the rejection and exits 1;
 * a checkpoint that parses but that wcd would refuse (its quantization)
 * prints the summary with the verdict REFUSED and exits 1 too.
 * --hashes reads every tensor and prints its XXH3-128 as `xxhsum -H2` would
 * (one pread stream per shard, 8 MiB at a time: runs at disk speed).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "hash.h"
#include "model.h"
#include "quant.h"
#include "wcctl.h"

#define READ_CHUNK (8u << 20)

static void inspect_usage(FILE *f)
{
	fprintf(f,
		"usage: wcctl inspect PATH [--hashes] [--json]\n"
		"       wcctl inspect DIR --tp-size N [--ep-size N] [--rank R] [--layout FILE]\n"
		"                     [--rules FILE] [--vocab-pad N]\n\n"
		"Validates a .safetensors file or a model directory (config.json, index,\n"
		"every shard header) and prints a summary, or the rejection (exit 1).\n"
		"With --tp-size or --ep-size: prints each rank's layout instead (every\n"
		"served tensor, its shape, its source rows or columns, the fused views),\n"
		"as wcd would serve it, without loading anything (proto/plan/layouts/README.md).\n\n"
		"  --hashes   read every tensor and print its XXH3-128 (as xxhsum -H2 prints it)\n"
		"  --json     one JSON object instead of text\n"
		"  --rank R   only rank R (tp rank R %% tp, ep rank R %% ep)\n"
		"\n"
		"Examples:\n"
		"  wcctl inspect /models/llama\n"
		"  wcctl inspect /models/llama/model-00001-of-00004.safetensors --hashes\n"
		"  wcctl inspect /models/llama --json | jq .quantization\n"
		"\n"
		"Exit status: 0 valid and servable, 1 invalid or its verdict is REFUSED\n"
		"(wcd would not serve it), a directory without config.json, or a layout\n"
		"that cannot be cut; 2 usage.\n");
}

/* Whether the model directory dir holds a config.json. */
static bool have_config(const char *dir)
{
	char p[PATH_MAX];

	return (size_t)snprintf(p, sizeof(p), "%s/config.json", dir) < sizeof(p) &&
	       access(p, F_OK) == 0;
}

/* XXH3-128 of one tensor's bytes, read READ_CHUNK at a time. */
static int hash_one(int fd, const char *path, const struct st_tensor *t,
		    unsigned char *buf, uint8_t out[BASE_HASH_LEN], char *err)
{
	struct base_hasher h;
	uint64_t off = 0;

	base_hasher_init(&h);
	while (off < t->nbytes) {
		uint64_t left = t->nbytes - off;
		size_t n = left < READ_CHUNK ? (size_t)left : READ_CHUNK;
		ssize_t r = pread(fd, buf, n, (off_t)(t->file_off + off));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return base_errf(err, r < 0 ? errno : EIO,
				       "%s: reading tensor '%s' at %" PRIu64 ": %s",
				       path, t->name, t->file_off + off,
				       r < 0 ? strerror(errno) : "file shrank");
		base_hasher_update(&h, buf, (size_t)r);
		off += (uint64_t)r;
	}
	base_hasher_final(&h, out);
	return 0;
}

/* Hashes every tensor, shard by shard; hashes[i] for m->tensors[i]. Costs
 * O(shards * tensors) comparisons, nothing next to the reads. */
static int hash_tensors(const struct model *m, uint8_t (*hashes)[BASE_HASH_LEN],
			char *err)
{
	unsigned char *buf = malloc(READ_CHUNK);
	int rc = 0;

	if (!buf)
		return base_errf(err, ENOMEM, "out of memory");
	for (uint32_t s = 0; s < m->nshards && !rc; s++) {
		const char *path = m->shards[s].path;
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			rc = base_errf(err, errno, "%s: %s", path, strerror(errno));
			break;
		}
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		for (uint32_t i = 0; i < m->ntensors && !rc; i++)
			if (m->tensors[i].shard == s)
				rc = hash_one(fd, path, m->tensors[i].t, buf,
					      hashes[i], err);
		close(fd);
	}
	free(buf);
	return rc;
}

static void dtype_totals(const struct model *m, uint32_t *count, uint64_t *bytes)
{
	memset(count, 0, ST_DTYPE_COUNT * sizeof(*count));
	memset(bytes, 0, ST_DTYPE_COUNT * sizeof(*bytes));
	for (uint32_t i = 0; i < m->ntensors; i++) {
		count[m->tensors[i].t->dtype]++;
		bytes[m->tensors[i].t->dtype] += m->tensors[i].t->nbytes;
	}
}

static void print_text(const struct model *m, uint8_t (*hashes)[BASE_HASH_LEN],
		       int qrc, enum quant_verdict v, const char *qerr)
{
	uint32_t count[ST_DTYPE_COUNT];
	uint64_t bytes[ST_DTYPE_COUNT];
	char hex[BASE_HASH_HEX_LEN];

	if (hashes) {
		for (uint32_t i = 0; i < m->ntensors; i++) {
			base_hash_hex(hashes[i], hex);
			printf("%s  %s\n", hex, m->tensors[i].name);
		}
		return;
	}
	printf("path:          %s (%s%s)\n", m->path, m->is_file ? "file" : "directory",
	       m->is_file ? "" : m->has_index ? ", index" : ", no index");
	if (!m->is_file) {
		printf("architecture:  %s\n", m->cfg.arch[0] ? m->cfg.arch : "(none in config.json)");
		printf("dtype:         %s\n", m->cfg.dtype[0] ? m->cfg.dtype : "(none in config.json)");
		printf("tied embeddings: %s\n", m->cfg.tie_word_embeddings ? "yes" : "no");
	}
	printf("quantization:  %s\n", m->cfg.quant_json ? m->cfg.quant_json : "none");
	if (qrc)
		printf("verdict:       REFUSED: %s\n", qerr);
	else
		printf("verdict:       %s\n", quant_verdict_name(v));
	printf("tensors:       %u\n", m->ntensors);
	printf("bytes:         %" PRIu64 "\n", m->total_bytes);
	dtype_totals(m, count, bytes);
	for (int d = 0; d < ST_DTYPE_COUNT; d++)
		if (count[d])
			printf("  %-8s     %u tensors, %" PRIu64 " bytes\n",
			       st_dtype_name((enum st_dtype)d), count[d], bytes[d]);
	printf("shards:        %u\n", m->nshards);
	for (uint32_t s = 0; s < m->nshards; s++) {
		base_hash_hex(m->shards[s].st.header_hash, hex);
		printf("  %s  %" PRIu64 " bytes, %u tensors, header %s\n",
		       m->shards[s].file, m->shards[s].stamp.size, m->shards[s].st.ntensors, hex);
	}
	base_hash_hex(m->digest, hex);
	printf("digest:        %s\n", hex);
}

static void print_json(const struct model *m, uint8_t (*hashes)[BASE_HASH_LEN],
		       int qrc, enum quant_verdict v, const char *qerr)
{
	json_t *o = json_object(), *shards = json_array(), *tensors = json_array(),
	       *q = json_object();
	char hex[BASE_HASH_HEX_LEN];

	json_object_set_new(o, "path", json_string(m->path));
	json_object_set_new(o, "is_file", json_boolean(m->is_file));
	json_object_set_new(o, "has_index", json_boolean(m->has_index));
	json_object_set_new(o, "architecture", json_string(m->cfg.arch));
	json_object_set_new(o, "dtype", json_string(m->cfg.dtype));
	json_object_set_new(o, "tie_word_embeddings", json_boolean(m->cfg.tie_word_embeddings));
	json_object_set_new(q, "method", json_string(m->cfg.quant_method));
	json_object_set_new(q, "config", m->cfg.quant_json ?
				 json_loads(m->cfg.quant_json, 0, NULL) : json_null());
	json_object_set_new(q, "verified", json_boolean(!qrc && v != QUANT_OVERRIDDEN));
	json_object_set_new(q, "verdict", json_string(qrc ? qerr : quant_verdict_name(v)));
	json_object_set_new(o, "quantization", q);
	json_object_set_new(o, "tensor_count", json_integer(m->ntensors));
	json_object_set_new(o, "total_bytes", json_integer((json_int_t)m->total_bytes));
	base_hash_hex(m->digest, hex);
	json_object_set_new(o, "digest", json_string(hex));
	for (uint32_t s = 0; s < m->nshards; s++) {
		base_hash_hex(m->shards[s].st.header_hash, hex);
		json_array_append_new(shards, json_pack("{s:s, s:I, s:I, s:i, s:s}",
			"file", m->shards[s].file, "size", (json_int_t)m->shards[s].stamp.size,
			"mtime_ns", (json_int_t)m->shards[s].stamp.mtime_ns,
			"tensors", (int)m->shards[s].st.ntensors, "header_hash", hex));
	}
	json_object_set_new(o, "shards", shards);
	for (uint32_t i = 0; i < m->ntensors; i++) {
		const struct st_tensor *t = m->tensors[i].t;
		json_t *shape = json_array();
		json_t *e;

		for (uint32_t d = 0; d < t->ndim; d++)
			json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
		e = json_pack("{s:s, s:s, s:o, s:i, s:I, s:I}", "name", t->name,
			      "dtype", st_dtype_name(t->dtype), "shape", shape,
			      "shard", (int)m->tensors[i].shard,
			      "offset", (json_int_t)t->file_off, "bytes", (json_int_t)t->nbytes);
		if (hashes) {
			base_hash_hex(hashes[i], hex);
			json_object_set_new(e, "xxh3_128", json_string(hex));
		}
		json_array_append_new(tensors, e);
	}
	json_object_set_new(o, "tensors", tensors);
	json_dumpf(o, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
	putchar('\n');
	json_decref(o);
}

int wcctl_inspect(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "hashes", no_argument, 0, 'H' },
		{ "json", no_argument, 0, 'j' },
		{ "tp-size", required_argument, 0, 't' },
		{ "ep-size", required_argument, 0, 'e' },
		{ "rank", required_argument, 0, 'r' },
		{ "layout", required_argument, 0, 'L' },
		{ "rules", required_argument, 0, 'R' },
		{ "vocab-pad", required_argument, 0, 'v' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	char err[BASE_ERR_LEN], qerr[BASE_ERR_LEN] = "";
	uint8_t (*hashes)[BASE_HASH_LEN] = NULL;
	bool want_hashes = false, json = false;
	enum quant_verdict v = QUANT_NONE;
	struct wcctl_plan_opts po = {
		.tp_size = 1, .ep_size = 1, .rank = -1, .vocab_pad = -1,
		.pool_size = 2ull << 30,
	};
	bool plan = false;
	struct model m;
	int c, qrc;
	long lv;
	char *end;

	optind = 1;
	while ((c = cli_getopt(argc, argv, "h", lo, "wcctl inspect")) != -1) {
		switch (c) {
		case 'H': want_hashes = true; break;
		case 'j': json = true; break;
		case 't': case 'e': case 'r': case 'v':
			lv = strtol(optarg, &end, 10);
			if (*end || !*optarg || lv < (c == 't' || c == 'e') ||
			    lv > (c == 'v' ? 1048576 : 1024)) {
				fprintf(stderr, "wcctl inspect: bad --%s '%s'\n",
					c == 't' ? "tp-size" : c == 'e' ? "ep-size" :
					c == 'r' ? "rank" : "vocab-pad", optarg);
				return 2;
			}
			if (c == 't')
				po.tp_size = (uint32_t)lv;
			else if (c == 'e')
				po.ep_size = (uint32_t)lv;
			else if (c == 'r')
				po.rank = (int)lv;
			else
				po.vocab_pad = (int32_t)lv;
			plan |= c != 'v';
			break;
		case 'L': po.layout = optarg; break;
		case 'R': po.rules = optarg; break;
		case 'h': inspect_usage(stdout); return 0;
		default: inspect_usage(stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		inspect_usage(stderr);
		return 2;
	}
	if (model_open(&m, argv[optind], err)) {
		fprintf(stderr, "wcctl inspect: %s\n", err);
		return 1;
	}
	if (!m.is_file && !have_config(m.path)) {
		fprintf(stderr, "wcctl inspect: %s has no config.json, so its architecture, dtype and quantization cannot be told (a quantized checkpoint would pass as unquantized); put the model's config.json beside its shards, or inspect one .safetensors file\n",
			m.path);
		model_close(&m);
		return 1;
	}
	if (plan) {
		c = wcctl_inspect_plan(&m, &po);
		model_close(&m);
		return c;
	}
	qrc = quant_check(&m.cfg, NULL, &v, qerr);
	if (want_hashes) {
		hashes = calloc(m.ntensors ? m.ntensors : 1, sizeof(*hashes));
		if (!hashes || hash_tensors(&m, hashes, err)) {
			fprintf(stderr, "wcctl inspect: %s\n", hashes ? err : "out of memory");
			free(hashes);
			model_close(&m);
			return 1;
		}
	}
	if (json)
		print_json(&m, hashes, qrc, v, qerr);
	else
		print_text(&m, hashes, qrc, v, qerr);
	free(hashes);
	model_close(&m);
	if (fflush(stdout))
		return 1;
	return qrc ? 1 : 0;
}
