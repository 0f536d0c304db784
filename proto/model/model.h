/* SPDX-License-Identifier: MIT */
/*
 * Model directories (prefix model_): config.json, then either
 * model.safetensors.index.json (its weight_map names every tensor's shard) or
 * every *.safetensors file in the directory. With an index, the index and
 * the shards must agree both ways: every mapped tensor is in its shard, every
 * shard tensor is mapped to that shard, every listed file exists. Other
 * *.safetensors files the index does not name are ignored (Mistral
 * repositories ship a consolidated.safetensors beside the shards). Without
 * an index, a tensor in two files is an error. Each shard header is read
 * with a small blocking pread and strictly validated (st.h); the daemon
 * reads the data itself.
 *
 * A plain .safetensors file is accepted too (one shard, empty config), so
 * tools can treat a file and a directory alike.
 */
#ifndef WC_MODEL_H
#define WC_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "st.h"

#define MODEL_SHARDS_MAX 4096            /* shard files per model */
#define MODEL_TENSORS_MAX 65536          /* tensors per model, all shards */
#define MODEL_CONFIG_MAX (16u << 20)     /* bytes of config.json */
#define MODEL_INDEX_MAX (64u << 20)      /* bytes of the index json */
#define MODEL_ARCH_MAX 128
#define MODEL_DTYPE_MAX 32
#define MODEL_QUANT_METHOD_MAX 64
#define MODEL_INDEX_NAME "model.safetensors.index.json"
#define MODEL_CFG_INTS_MAX 256           /* integer/boolean config fields kept */
#define MODEL_CFG_KEY_MAX 64             /* bytes of such a field's name */

/* An integer or boolean (1/0) field of config.json, top level or inside
 * text_config (kept as "text_config.KEY"), for the layouts (plan.h). */
struct model_cfg_int {
	char key[MODEL_CFG_KEY_MAX];
	int64_t v;
};

struct model_config {
	char arch[MODEL_ARCH_MAX];       /* architectures[0]; "" if absent */
	char dtype[MODEL_DTYPE_MAX];     /* torch_dtype, else dtype; "" */
	bool tie_word_embeddings;        /* false if absent */
	int64_t num_hidden_layers;       /* -1 if absent */
	/* quantization_config, NULL if absent: its canonical JSON (sorted keys,
	 * compact), its quant_method ("" if missing) and whether it has a
	 * weight_block_size array. */
	char *quant_json;
	char quant_method[MODEL_QUANT_METHOD_MAX];
	bool quant_block;
	uint64_t quant_block_size[2];    /* weight_block_size when quant_block */
	uint8_t quant_hash[BASE_HASH_LEN]; /* of quant_json; zeros when NULL */
	uint32_t nints;                  /* the first MODEL_CFG_INTS_MAX */
	struct model_cfg_int *ints;      /* in config order */
};

/* The value of an integer/boolean config field ("text_config.KEY" as
 * well: a key absent at the top level is looked up there too); false
 * when absent. */
bool model_cfg_int(const struct model_config *c, const char *key,
		   int64_t *out);

/* One weight_map entry. */
struct model_index_entry {
	char *tensor;
	char *file;
};

struct model_index {
	uint32_t n;
	struct model_index_entry *e;     /* sorted by tensor name */
};

/* A file as it was when the model was read (its fstat), so that a few
 * stat calls later tell whether reading it again would give the same
 * model: present is false for an optional file that was absent
 * (config.json, the index). */
struct model_stamp {
	bool present;
	uint64_t dev, ino, size;
	int64_t mtime_ns, ctime_ns;
};

/* stamp is the file's fstat taken just before its header was read: the
 * loader compares it (and the header bytes) with the file again after the
 * fill, so that a shard written while it was loaded fails the load
 * instead of being served torn. */
struct model_shard {
	char *file;                      /* base name, as in the index */
	char *path;                      /* dir/file (real dir) */
	struct model_stamp stamp;
	struct st_file st;               /* st.header_hash is the header hash */
};

struct model_tensor {
	const char *name;                /* points into the shard's st_file */
	uint32_t shard;
	const struct st_tensor *t;
};

struct model {
	char *path;                      /* realpath of the directory/file */
	bool is_file;                    /* opened a single .safetensors */
	bool has_index;
	struct model_config cfg;
	uint32_t nshards;
	struct model_shard *shards;      /* sorted by file name */
	uint32_t ntensors;
	struct model_tensor *tensors;    /* sorted by name (strcmp) */
	uint64_t total_bytes;            /* sum of tensor bytes */
	/* XXH3-128 over every shard in order: name, size, mtime_ns, header
	 * hash (see model.c for the exact bytes). */
	uint8_t digest[BASE_HASH_LEN];
	/* the other files read (the shards have their own fields): the
	 * directory, listed where there is no index */
	struct model_stamp config_st, index_st, dir_st;
};

/* The files a model was read from, with their stamps then: a copy of
 * the paths that outlives the model (a thread checks it while the model
 * may go), for model_files_same. */
struct model_files {
	uint32_t n;
	char **path;
	struct model_stamp *st;
};

/* Opens a directory (or a single .safetensors file) into m (zeroed first;
 * nothing to free on error). */
int model_open(struct model *m, const char *path, char *err);
void model_close(struct model *m);

/* The files m was read from (config.json, the index or, without one, the
 * directory listed, every shard) and their stamps then; 0 or -ENOMEM. */
int model_files_of(const struct model *m, struct model_files *out);
/* Whether every file of f still has its stamp (a stat each, links
 * followed as the read followed them): then reading the model again would
 * give the one read then, up to a writer that restores both times, which
 * the load's own check after a fill does not see either. false with the
 * first difference in what (cap bytes), naming the file. */
bool model_files_same(const struct model_files *f, char *what, size_t cap);
void model_files_free(struct model_files *f);

/* Binary search by name; NULL when absent. */
const struct model_tensor *model_find(const struct model *m, const char *name);

/* Parses config.json text (name for messages) into c. A missing field is
 * not an error; a field of the wrong type is. */
int model_config_parse(struct model_config *c, const void *buf, size_t len,
		       const char *name, char *err);
void model_config_free(struct model_config *c);

/* Parses model.safetensors.index.json text: weight_map must be an object of
 * string -> string (a base name ending in .safetensors, no '/'), no duplicate
 * keys, at most MODEL_TENSORS_MAX entries. */
int model_index_parse(struct model_index *ix, const void *buf, size_t len,
		      const char *name, char *err);
void model_index_free(struct model_index *ix);

#endif
