/* SPDX-License-Identifier: MIT */
/*
 * Model directories: a wcgen checkpoint opens (sharded with an index, and a
 * single file without); the index and the shards must agree both ways; a
 * tensor in two shards, an empty directory, a missing shard and a broken
 * shard header are rejected with messages naming the files and tensors; the
 * checkpoint digest is stable and follows mtimes.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "synth_model.h"
#include "t.h"

static char top[64];

static void sh(const char *fmt, const char *a, const char *b)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd), fmt, a, b);
	T_EQ_INT(system(cmd), 0);
}

/* Rewrites dir's index: map tensor to file (NULL: delete the entry). */
static void edit_index(const char *dir, const char *tensor, const char *file)
{
	char path[512];
	json_t *ix, *wm;

	snprintf(path, sizeof(path), "%s/%s", dir, MODEL_INDEX_NAME);
	ix = json_load_file(path, 0, NULL);
	T_ASSERT(ix);
	wm = json_object_get(ix, "weight_map");
	if (file)
		json_object_set_new(wm, tensor, json_string(file));
	else
		T_EQ_INT(json_object_del(wm, tensor), 0);
	T_EQ_INT(json_dump_file(ix, path, JSON_INDENT(1)), 0);
	json_decref(ix);
}

static void expect_fail(const char *dir, const char *n1, const char *n2)
{
	char err[BASE_ERR_LEN] = "";
	struct model m;

	if (model_open(&m, dir, err) == 0)
		T_FAIL("%s opened; expected an error with '%s'", dir, n1);
	printf("%s\n", err);
	T_HAS(err, n1);
	if (n2)
		T_HAS(err, n2);
}

static void check_good(const char *dir)
{
	char err[BASE_ERR_LEN];
	uint8_t d1[BASE_HASH_LEN];
	struct model m;

	if (model_open(&m, dir, err))
		T_FAIL("%s", err);
	T_ASSERT(m.has_index);
	T_ASSERT(!m.is_file);
	T_EQ_INT(m.nshards, 3);
	T_EQ_INT(m.ntensors, 39);
	T_EQ_STR(m.cfg.arch, "LlamaForCausalLM");
	T_EQ_STR(m.cfg.dtype, "bfloat16");
	T_EQ_INT(m.cfg.num_hidden_layers, 4);
	T_ASSERT(!m.cfg.tie_word_embeddings);
	T_ASSERT(!m.cfg.quant_json);
	T_EQ_U64(m.total_bytes, 9998848);
	for (uint32_t i = 1; i < m.ntensors; i++)
		T_ASSERT(strcmp(m.tensors[i - 1].name, m.tensors[i].name) < 0);
	T_ASSERT(model_find(&m, "lm_head.weight"));
	T_EQ_STR(m.shards[model_find(&m, "lm_head.weight")->shard].file,
		 "model-00003-of-00003.safetensors");
	T_ASSERT(!model_find(&m, "lm_head"));
	memcpy(d1, m.digest, BASE_HASH_LEN);
	model_close(&m);
	T_OK(model_open(&m, dir, err));
	T_ASSERT(!memcmp(d1, m.digest, BASE_HASH_LEN));
	model_close(&m);
	sh("touch -d '2001-01-01' '%s/model-00002-of-00003.safetensors'%s", dir, "");
	T_OK(model_open(&m, dir, err));
	T_ASSERT(memcmp(d1, m.digest, BASE_HASH_LEN));
	model_close(&m);
	/* A file the index does not name is ignored. */
	sh("cp '%s/model-00003-of-00003.safetensors' '%s/consolidated.safetensors'", dir, dir);
	T_OK(model_open(&m, dir, err));
	T_EQ_INT(m.nshards, 3);
	model_close(&m);
}

int main(void)
{
	char dir[300], one[300], a[1024], b[1024];
	char err[BASE_ERR_LEN];
	struct model m;

	snprintf(top, sizeof(top), "/tmp/wct_model.XXXXXX");
	T_ASSERT(mkdtemp(top));
	snprintf(dir, sizeof(dir), "%s/m", top);
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	check_good(dir);

	/* Single file, no index: and the file itself. */
	snprintf(one, sizeof(one), "%s/one", top);
	synth_wcgen("tiny", one, "");
	T_OK(model_open(&m, one, err));
	T_ASSERT(!m.has_index);
	T_EQ_INT(m.nshards, 1);
	model_close(&m);
	snprintf(a, sizeof(a), "%s/model.safetensors", one);
	T_OK(model_open(&m, a, err));
	T_ASSERT(m.is_file);
	T_EQ_INT(m.ntensors, 39);
	T_EQ_STR(m.cfg.arch, "");
	model_close(&m);

	/* Without an index, the same tensor in two files. */
	snprintf(b, sizeof(b), "%s/copy.safetensors", one);
	sh("cp '%s' '%s'", a, b);
	expect_fail(one, "tensor 'lm_head.weight' is in both copy.safetensors and model.safetensors", NULL);
	unlink(b);

	/* Index maps a tensor to the wrong shard. */
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	edit_index(dir, "model.norm.weight", "model-00001-of-00003.safetensors");
	expect_fail(dir, "maps tensor 'model.norm.weight' to model-00001-of-00003.safetensors, but it is in model-00002-of-00003.safetensors",
		    MODEL_INDEX_NAME);
	/* Index names a tensor no shard has. */
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	edit_index(dir, "model.ghost.weight", "model-00002-of-00003.safetensors");
	expect_fail(dir, "maps tensor 'model.ghost.weight' to model-00002-of-00003.safetensors, but that shard does not contain it", NULL);
	/* A shard tensor the index does not map. */
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	edit_index(dir, "model.norm.weight", NULL);
	expect_fail(dir, "tensor 'model.norm.weight' of shard model-00002-of-00003.safetensors is not in the weight_map", NULL);
	/* Index names a shard that is not there. */
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	snprintf(a, sizeof(a), "%s/model-00003-of-00003.safetensors", dir);
	T_EQ_INT(unlink(a), 0);
	expect_fail(dir, "model-00003-of-00003.safetensors: cannot open shard: No such file", NULL);
	/* Index values that are not shard names. */
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	edit_index(dir, "lm_head.weight", "../x.safetensors");
	expect_fail(dir, "weight_map['lm_head.weight'] is '../x.safetensors', not a *.safetensors file name", NULL);
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	edit_index(dir, "lm_head.weight", "model.bin");
	expect_fail(dir, "weight_map['lm_head.weight'] is 'model.bin'", NULL);
	snprintf(a, sizeof(a), "%s/%s", dir, MODEL_INDEX_NAME);
	sh("printf '{\"weight_map\": [1]}' > '%s'%s", a, "");
	expect_fail(dir, "weight_map is an array, not an object", NULL);
	sh("printf '{\"weight_map\": {\"a\": 1}}' > '%s'%s", a, "");
	expect_fail(dir, "weight_map['a'] is an integer, not a shard file name", NULL);
	sh("printf '{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"y.safetensors\"}}' > '%s'%s", a, "");
	expect_fail(dir, "duplicate object key", MODEL_INDEX_NAME);
	sh("printf '{\"metadata\": {}}' > '%s'%s", a, "");
	expect_fail(dir, "weight_map is missing", NULL);

	/* A broken shard header names the shard. */
	synth_wcgen("tiny", dir, "--shard-size 4MB");
	snprintf(a, sizeof(a), "%s/model-00002-of-00003.safetensors", dir);
	sh("printf '\\377\\377' | dd of='%s' bs=1 seek=5 conv=notrunc 2>/dev/null%s", a, "");
	expect_fail(dir, "model-00002-of-00003.safetensors: header length", "is over the 100000000-byte limit");

	/* An empty directory. */
	snprintf(a, sizeof(a), "%s/empty", top);
	T_EQ_INT(mkdir(a, 0755), 0);
	expect_fail(a, "no *.safetensors files and no index", NULL);
	snprintf(a, sizeof(a), "%s/nope", top);
	expect_fail(a, "No such file or directory", NULL);

	sh("rm -rf '%s'%s", top, "");
	return 0;
}
