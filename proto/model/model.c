/* SPDX-License-Identifier: MIT */
/*
 * Model directories: config.json, the index and the shard headers. See
 * model.h. Costs: one open + two small preads per shard, one qsort of the
 * tensor names; the data is never read here.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "model_files.h"
#include "json_kind.h"

#define SUFFIX ".safetensors"

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);

	return n > m && !strcmp(s + n - m, suf);
}

static json_t *load_object(const void *buf, size_t len, const char *name,
			   char *err, int *rc)
{
	json_error_t jerr;
	json_t *root;

	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		*rc = base_errf(err, EINVAL,
			      "%s: not valid strict JSON at byte %d (line %d, column %d): %s; fix or regenerate the file",
			      name, jerr.position, jerr.line, jerr.column, jerr.text);
		return NULL;
	}
	if (!json_is_object(root)) {
		*rc = base_errf(err, EINVAL, "%s: top level is %s, not a JSON object",
			      name, model__json_kind(root));
		json_decref(root);
		return NULL;
	}
	*rc = 0;
	return root;
}

/* Copies string field `key` of obj into out (cap bytes). Absent or null:
 * leaves out alone. */
static int get_str(json_t *obj, const char *key, char *out, size_t cap,
		   const char *name, char *err)
{
	json_t *v = json_object_get(obj, key);
	size_t n;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return base_errf(err, EINVAL, "%s: %s is %s, not a string",
			       name, key, model__json_kind(v));
	n = json_string_length(v);
	if (n >= cap || strlen(json_string_value(v)) != n)
		return base_errf(err, EINVAL,
			       "%s: %s is %zu bytes or holds a NUL (limit %zu bytes)",
			       name, key, n, cap - 1);
	memcpy(out, json_string_value(v), n + 1);
	return 0;
}

void model_config_free(struct model_config *c)
{
	free(c->quant_json);
	free(c->ints);
	memset(c, 0, sizeof(*c));
	c->num_hidden_layers = -1;
}

static int parse_quant(struct model_config *c, json_t *q, const char *name,
		       char *err)
{
	json_t *bs, *v;
	size_t i;
	int rc;

	if (!json_is_object(q))
		return base_errf(err, EINVAL,
			       "%s: quantization_config is %s, not an object",
			       name, model__json_kind(q));
	c->quant_json = json_dumps(q, JSON_SORT_KEYS | JSON_COMPACT |
					      JSON_ENSURE_ASCII);
	if (!c->quant_json)
		return base_errf(err, ENOMEM, "%s: out of memory", name);
	base_hash128(c->quant_json, strlen(c->quant_json), c->quant_hash);
	rc = get_str(q, "quant_method", c->quant_method,
		     sizeof(c->quant_method), name, err);
	if (rc)
		return rc;
	bs = json_object_get(q, "weight_block_size");
	if (!bs || json_is_null(bs))
		return 0;
	if (!json_is_array(bs) || json_array_size(bs) != 2)
		return base_errf(err, EINVAL,
			       "%s: quantization_config.weight_block_size is %s%s, not two positive integers like [128, 128]",
			       name, model__json_kind(bs),
			       json_is_array(bs) ? " of the wrong length" : "");
	json_array_foreach(bs, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) <= 0)
			return base_errf(err, EINVAL,
				       "%s: quantization_config.weight_block_size[%zu] is %s, not a positive integer",
				       name, i, model__json_kind(v));
		c->quant_block_size[i] = (uint64_t)json_integer_value(v);
	}
	c->quant_block = true;
	return 0;
}

bool model_cfg_int(const struct model_config *c, const char *key,
		   int64_t *out)
{
	char alt[MODEL_CFG_KEY_MAX + 16];

	snprintf(alt, sizeof(alt), "text_config.%s", key);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < c->nints; i++)
			if (!strcmp(c->ints[i].key, pass ? alt : key)) {
				*out = c->ints[i].v;
				return true;
			}
	return false;
}

/* Keeps obj's integer and boolean fields (names under MODEL_CFG_KEY_MAX
 * bytes with the prefix; the first MODEL_CFG_INTS_MAX in all). */
static void keep_ints(struct model_config *c, json_t *obj, const char *pre)
{
	const char *k;
	json_t *v;

	json_object_foreach(obj, k, v) {
		struct model_cfg_int *ci;

		if (!json_is_integer(v) && !json_is_boolean(v))
			continue;
		if (c->nints >= MODEL_CFG_INTS_MAX ||
		    strlen(pre) + strlen(k) >= MODEL_CFG_KEY_MAX)
			continue;
		ci = &c->ints[c->nints++];
		snprintf(ci->key, sizeof(ci->key), "%s%s", pre, k);
		ci->v = json_is_integer(v) ? json_integer_value(v) :
					     json_is_true(v);
	}
}

int model_config_parse(struct model_config *c, const void *buf, size_t len,
		       const char *name, char *err)
{
	json_t *root, *v;
	int rc;

	memset(c, 0, sizeof(*c));
	c->num_hidden_layers = -1;
	if (len > MODEL_CONFIG_MAX)
		return base_errf(err, EFBIG, "%s: %zu bytes, over the %u-byte limit for config.json",
			       name, len, MODEL_CONFIG_MAX);
	root = load_object(buf, len, name, err, &rc);
	if (!root)
		return rc;
	v = json_object_get(root, "architectures");
	if (v && !json_is_null(v)) {
		json_t *a0 = json_array_get(v, 0);

		if (!json_is_array(v) || !json_is_string(a0)) {
			rc = base_errf(err, EINVAL,
				     "%s: architectures is %s%s, not a list of strings like [\"LlamaForCausalLM\"]",
				     name, model__json_kind(v),
				     json_is_array(v) ? " whose first element is missing or not a string" : "");
			goto out_root;
		}
		if (json_string_length(a0) >= sizeof(c->arch) ||
		    strlen(json_string_value(a0)) != json_string_length(a0)) {
			rc = base_errf(err, EINVAL,
				     "%s: architectures[0] is %zu bytes or holds a NUL (limit %zu bytes)",
				     name, json_string_length(a0), sizeof(c->arch) - 1);
			goto out_root;
		}
		strcpy(c->arch, json_string_value(a0));
	}
	rc = get_str(root, "dtype", c->dtype, sizeof(c->dtype), name, err);
	if (!rc)
		rc = get_str(root, "torch_dtype", c->dtype, sizeof(c->dtype), name, err);
	if (rc)
		goto out_root;
	v = json_object_get(root, "tie_word_embeddings");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v)) {
			rc = base_errf(err, EINVAL, "%s: tie_word_embeddings is %s, not true or false",
				     name, model__json_kind(v));
			goto out_root;
		}
		c->tie_word_embeddings = json_is_true(v);
	}
	v = json_object_get(root, "num_hidden_layers");
	if (v && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			rc = base_errf(err, EINVAL, "%s: num_hidden_layers is %s, not a non-negative integer",
				     name, model__json_kind(v));
			goto out_root;
		}
		c->num_hidden_layers = json_integer_value(v);
	}
	v = json_object_get(root, "quantization_config");
	if (v && !json_is_null(v))
		rc = parse_quant(c, v, name, err);
	if (rc)
		goto out_root;
	c->ints = calloc(MODEL_CFG_INTS_MAX, sizeof(*c->ints));
	if (!c->ints) {
		rc = base_errf(err, ENOMEM, "%s: out of memory", name);
		goto out_root;
	}
	keep_ints(c, root, "");
	v = json_object_get(root, "text_config");
	if (json_is_object(v))
		keep_ints(c, v, "text_config.");
out_root:
	json_decref(root);
	if (rc)
		model_config_free(c);
	return rc;
}

void model_index_free(struct model_index *ix)
{
	for (uint32_t i = 0; i < ix->n; i++) {
		free(ix->e[i].tensor);
		free(ix->e[i].file);
	}
	free(ix->e);
	memset(ix, 0, sizeof(*ix));
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct model_index_entry *)a)->tensor,
		      ((const struct model_index_entry *)b)->tensor);
}

static bool good_file_name(const char *f)
{
	return has_suffix(f, SUFFIX) && !strchr(f, '/') && f[0] != '.' &&
	       strlen(f) < NAME_MAX;
}

int model_index_parse(struct model_index *ix, const void *buf, size_t len,
		      const char *name, char *err)
{
	json_t *root, *wm, *v;
	const char *key;
	size_t n;
	int rc;

	memset(ix, 0, sizeof(*ix));
	if (len > MODEL_INDEX_MAX)
		return base_errf(err, EFBIG, "%s: %zu bytes, over the %u-byte limit for an index",
			       name, len, MODEL_INDEX_MAX);
	root = load_object(buf, len, name, err, &rc);
	if (!root)
		return rc;
	wm = json_object_get(root, "weight_map");
	if (!wm || !json_is_object(wm)) {
		rc = base_errf(err, EINVAL,
			     "%s: weight_map is %s, not an object of tensor name to shard file",
			     name, wm ? model__json_kind(wm) : "missing");
		goto out_root;
	}
	n = json_object_size(wm);
	if (n > MODEL_TENSORS_MAX) {
		rc = base_errf(err, E2BIG, "%s: weight_map has %zu tensors, over the limit of %d",
			     name, n, MODEL_TENSORS_MAX);
		goto out_root;
	}
	ix->e = calloc(n ? n : 1, sizeof(*ix->e));
	if (!ix->e) {
		rc = base_errf(err, ENOMEM, "%s: out of memory", name);
		goto out_root;
	}
	json_object_foreach(wm, key, v) {
		struct model_index_entry *e = &ix->e[ix->n];
		const char *f;

		if (!key[0] || strlen(key) > ST_NAME_MAX) {
			rc = base_errf(err, EINVAL, "%s: weight_map has a tensor name of %zu bytes (must be 1 to %d)",
				     name, strlen(key), ST_NAME_MAX);
			goto out_root;
		}
		if (!json_is_string(v)) {
			rc = base_errf(err, EINVAL, "%s: weight_map['%s'] is %s, not a shard file name",
				     name, key, model__json_kind(v));
			goto out_root;
		}
		f = json_string_value(v);
		if (!good_file_name(f) || strlen(f) != json_string_length(v)) {
			rc = base_errf(err, EINVAL,
				     "%s: weight_map['%s'] is '%s', not a *.safetensors file name in the model directory (no '/', not hidden)",
				     name, key, f);
			goto out_root;
		}
		e->tensor = strdup(key);
		e->file = strdup(f);
		ix->n++;
		if (!e->tensor || !e->file) {
			rc = base_errf(err, ENOMEM, "%s: out of memory", name);
			goto out_root;
		}
	}
	qsort(ix->e, ix->n, sizeof(*ix->e), cmp_entry);
out_root:
	json_decref(root);
	if (rc)
		model_index_free(ix);
	return rc;
}

/* What a non-regular file is, for a refusal. */
static const char *file_kind(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" :
	       S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : "not a file";
}

/* Reads a whole small file at dirfd/name (at most max bytes) into *buf;
 * its stamp (the fstat before the read) into *st. */
static int read_small(int dirfd, const char *name, const char *shown,
		      size_t max, char **buf, size_t *len,
		      struct model_stamp *st, char *err)
{
	struct stat sb;
	size_t done = 0;
	int fd, rc = 0;

	/* O_NONBLOCK: a FIFO or device under the name must not hang us in
	 * open(); anything but a regular file is refused right after. */
	fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return base_errf(err, errno, "%s: cannot open: %s", shown, strerror(errno));
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		rc = base_errf(err, EINVAL,
			     "%s: not a regular file (%s): a checkpoint is read from regular files only; replace it with the file itself",
			     shown, file_kind(sb.st_mode));
		goto out_close;
	}
	if ((uint64_t)sb.st_size > max) {
		rc = base_errf(err, EFBIG, "%s: %lld bytes, over the %zu-byte limit",
			     shown, (long long)sb.st_size, max);
		goto out_close;
	}
	model__stamp_of(&sb, st);
	*buf = malloc((size_t)sb.st_size + 1);
	if (!*buf) {
		rc = base_errf(err, ENOMEM, "%s: out of memory", shown);
		goto out_close;
	}
	while (done < (size_t)sb.st_size) {
		ssize_t r = pread(fd, *buf + done, (size_t)sb.st_size - done,
				  (off_t)done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = base_errf(err, r < 0 ? errno : EIO, "%s: read failed: %s",
				     shown, r < 0 ? strerror(errno) : "file shrank");
			free(*buf);
			*buf = NULL;
			goto out_close;
		}
		done += (size_t)r;
	}
	*len = done;
out_close:
	close(fd);
	return rc;
}

void model_close(struct model *m)
{
	for (uint32_t i = 0; i < m->nshards; i++) {
		free(m->shards[i].file);
		free(m->shards[i].path);
		st_file_free(&m->shards[i].st);
	}
	free(m->shards);
	free(m->tensors);
	free(m->path);
	model_config_free(&m->cfg);
	memset(m, 0, sizeof(*m));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* The *.safetensors files of a directory (not hidden), sorted. */
static int list_dir(int dirfd, const char *dir, char ***out, uint32_t *n,
		    char *err)
{
	char **names;
	struct dirent *de;
	DIR *d;
	int fd, rc = 0;

	*n = 0;
	names = calloc(MODEL_SHARDS_MAX, sizeof(*names));
	fd = dup(dirfd);
	if (!names || fd < 0) {
		free(names);
		if (fd >= 0)
			close(fd);
		return base_errf(err, ENOMEM, "%s: out of memory or fds", dir);
	}
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		free(names);
		return base_errf(err, errno, "%s: cannot list: %s", dir, strerror(errno));
	}
	while ((de = readdir(d))) {
		if (!good_file_name(de->d_name))
			continue;
		if (*n >= MODEL_SHARDS_MAX) {
			rc = base_errf(err, E2BIG, "%s: more than %d *.safetensors files",
				     dir, MODEL_SHARDS_MAX);
			break;
		}
		names[*n] = strdup(de->d_name);
		if (!names[(*n)++]) {
			rc = base_errf(err, ENOMEM, "%s: out of memory", dir);
			break;
		}
	}
	closedir(d);
	if (rc) {
		free_names(names, *n);
		*n = 0;
		return rc;
	}
	qsort(names, *n, sizeof(*names), cmp_str);
	*out = names;
	return 0;
}

static int open_shard(struct model_shard *s, int dirfd, const char *dir,
		      const char *file, char *err)
{
	struct stat sb;
	int fd, rc;

	s->file = strdup(file);
	if (!s->file || asprintf(&s->path, "%s/%s", dir, file) < 0) {
		s->path = NULL;
		return base_errf(err, ENOMEM, "%s: out of memory", dir);
	}
	fd = openat(dirfd, file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return base_errf(err, errno, "%s: cannot open shard: %s", s->path,
			       strerror(errno));
	/* fstat first: a write after it, even one during the header read,
	 * shows in the times the loader compares after the fill. */
	if (fstat(fd, &sb)) {
		rc = base_errf(err, errno, "%s: fstat: %s", s->path, strerror(errno));
	} else {
		model__stamp_of(&sb, &s->stamp);
		rc = st_read_fd(&s->st, fd, s->path, err);
	}
	close(fd);
	return rc;
}

static int cmp_tensor(const void *a, const void *b)
{
	return strcmp(((const struct model_tensor *)a)->name,
		      ((const struct model_tensor *)b)->name);
}

static int build_tensors(struct model *m, char *err)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < m->nshards; i++)
		n += m->shards[i].st.ntensors;
	if (n > MODEL_TENSORS_MAX)
		return base_errf(err, E2BIG, "%s: %" PRIu64 " tensors, over the limit of %d",
			       m->path, n, MODEL_TENSORS_MAX);
	m->tensors = calloc(n ? n : 1, sizeof(*m->tensors));
	if (!m->tensors)
		return base_errf(err, ENOMEM, "%s: out of memory", m->path);
	for (uint32_t i = 0; i < m->nshards; i++) {
		for (uint32_t k = 0; k < m->shards[i].st.ntensors; k++) {
			struct model_tensor *t = &m->tensors[m->ntensors++];

			t->t = &m->shards[i].st.tensors[k];
			t->name = t->t->name;
			t->shard = i;
			m->total_bytes += t->t->nbytes;
		}
	}
	qsort(m->tensors, m->ntensors, sizeof(*m->tensors), cmp_tensor);
	for (uint32_t i = 1; i < m->ntensors; i++) {
		if (!strcmp(m->tensors[i].name, m->tensors[i - 1].name))
			return base_errf(err, EINVAL,
				       "%s: tensor '%s' is in both %s and %s; a checkpoint holds each tensor once",
				       m->path, m->tensors[i].name,
				       m->shards[m->tensors[i - 1].shard].file,
				       m->shards[m->tensors[i].shard].file);
	}
	return 0;
}

const struct model_tensor *model_find(const struct model *m, const char *name)
{
	struct model_tensor key = { .name = name };

	return bsearch(&key, m->tensors, m->ntensors, sizeof(*m->tensors),
		       cmp_tensor);
}

/* The index and the shards must agree both ways. */
static int check_index(const struct model *m, const struct model_index *ix,
		       const char *ixname, char *err)
{
	for (uint32_t i = 0; i < ix->n; i++) {
		const struct model_tensor *t = model_find(m, ix->e[i].tensor);

		if (!t)
			return base_errf(err, EINVAL,
				       "%s: maps tensor '%s' to %s, but that shard does not contain it; regenerate the index or restore the shard",
				       ixname, ix->e[i].tensor, ix->e[i].file);
		if (strcmp(m->shards[t->shard].file, ix->e[i].file))
			return base_errf(err, EINVAL,
				       "%s: maps tensor '%s' to %s, but it is in %s; regenerate the index",
				       ixname, ix->e[i].tensor, ix->e[i].file,
				       m->shards[t->shard].file);
	}
	for (uint32_t i = 0; i < m->ntensors; i++) {
		struct model_index_entry key = {
			.tensor = (char *)m->tensors[i].name
		};

		if (!bsearch(&key, ix->e, ix->n, sizeof(*ix->e), cmp_entry))
			return base_errf(err, EINVAL,
				       "%s: tensor '%s' of shard %s is not in the weight_map of %s; regenerate the index",
				       m->path, m->tensors[i].name,
				       m->shards[m->tensors[i].shard].file, ixname);
	}
	return 0;
}

/* The shard files an index names, sorted and unique. */
static int index_files(const struct model_index *ix, char ***out, uint32_t *n,
		       const char *ixname, char *err)
{
	char **names = calloc(ix->n ? ix->n : 1, sizeof(*names));
	uint32_t k = 0;

	if (!names)
		return base_errf(err, ENOMEM, "%s: out of memory", ixname);
	for (uint32_t i = 0; i < ix->n; i++)
		names[i] = ix->e[i].file;
	qsort(names, ix->n, sizeof(*names), cmp_str);
	for (uint32_t i = 0; i < ix->n; i++)
		if (!k || strcmp(names[k - 1], names[i]))
			names[k++] = names[i];
	if (k > MODEL_SHARDS_MAX) {
		free(names);
		return base_errf(err, E2BIG, "%s: names %u shard files, over the limit of %d",
			       ixname, k, MODEL_SHARDS_MAX);
	}
	for (uint32_t i = 0; i < k; i++) {
		names[i] = strdup(names[i]);
		if (!names[i]) {
			free_names(names, i);
			return base_errf(err, ENOMEM, "%s: out of memory", ixname);
		}
	}
	*out = names;
	*n = k;
	return 0;
}

static void compute_digest(struct model *m)
{
	struct base_hasher h;

	base_hasher_init(&h);
	for (uint32_t i = 0; i < m->nshards; i++) {
		const struct model_shard *s = &m->shards[i];
		uint8_t num[16];

		base_hasher_update(&h, s->file, strlen(s->file) + 1);
		for (int b = 0; b < 8; b++) {
			num[b] = (uint8_t)(s->stamp.size >> (8 * b));
			num[8 + b] = (uint8_t)((uint64_t)s->stamp.mtime_ns >> (8 * b));
		}
		base_hasher_update(&h, num, sizeof(num));
		base_hasher_update(&h, s->st.header_hash, BASE_HASH_LEN);
	}
	base_hasher_final(&h, m->digest);
}

static int open_config(struct model *m, int dirfd, char *err)
{
	char shown[PATH_MAX + 32];
	size_t len = 0;
	char *buf = NULL;
	int rc;

	if (faccessat(dirfd, "config.json", F_OK, 0))
		return 0;
	snprintf(shown, sizeof(shown), "%s/config.json", m->path);
	rc = read_small(dirfd, "config.json", shown, MODEL_CONFIG_MAX, &buf,
			&len, &m->config_st, err);
	if (rc)
		return rc;
	rc = model_config_parse(&m->cfg, buf, len, shown, err);
	free(buf);
	return rc;
}

static int open_shards(struct model *m, int dirfd, char *err)
{
	char ixname[PATH_MAX + 64];
	struct model_index ix = { 0 };
	char **files = NULL;
	uint32_t nfiles = 0;
	size_t len = 0;
	char *buf = NULL;
	int rc;

	snprintf(ixname, sizeof(ixname), "%s/%s", m->path, MODEL_INDEX_NAME);
	m->has_index = !faccessat(dirfd, MODEL_INDEX_NAME, F_OK, 0);
	if (m->has_index) {
		rc = read_small(dirfd, MODEL_INDEX_NAME, ixname, MODEL_INDEX_MAX,
				&buf, &len, &m->index_st, err);
		if (rc)
			return rc;
		rc = model_index_parse(&ix, buf, len, ixname, err);
		free(buf);
		if (rc)
			return rc;
		rc = index_files(&ix, &files, &nfiles, ixname, err);
	} else {
		rc = list_dir(dirfd, m->path, &files, &nfiles, err);
	}
	if (rc)
		goto out_index;
	if (nfiles == 0) {
		rc = base_errf(err, ENOENT,
			     "%s: no *.safetensors files%s; point at a model directory with safetensors weights",
			     m->path, m->has_index ? " named by the index" : " and no index");
		goto out_files;
	}
	m->shards = calloc(nfiles, sizeof(*m->shards));
	if (!m->shards) {
		rc = base_errf(err, ENOMEM, "%s: out of memory", m->path);
		goto out_files;
	}
	for (uint32_t i = 0; i < nfiles && !rc; i++) {
		m->nshards++;
		rc = open_shard(&m->shards[i], dirfd, m->path, files[i], err);
	}
	if (!rc)
		rc = build_tensors(m, err);
	if (!rc && m->has_index)
		rc = check_index(m, &ix, ixname, err);
out_files:
	free_names(files, nfiles);
out_index:
	model_index_free(&ix);
	return rc;
}

int model_open(struct model *m, const char *path, char *err)
{
	char *slash;
	struct stat sb;
	int dirfd, rc;

	memset(m, 0, sizeof(*m));
	m->cfg.num_hidden_layers = -1;
	m->path = realpath(path, NULL);
	if (!m->path)
		return base_errf(err, errno, "%s: %s; give a model directory or a .safetensors file",
			       path, strerror(errno));
	if (stat(m->path, &sb)) {
		rc = base_errf(err, errno, "%s: %s", m->path, strerror(errno));
		goto out_model;
	}
	if (S_ISREG(sb.st_mode)) {
		/* A single file: one shard, no config. */
		m->is_file = true;
		slash = strrchr(m->path, '/');
		*slash = '\0';
		dirfd = open(slash == m->path ? "/" : m->path,
			     O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		*slash = '/';
		if (dirfd < 0) {
			rc = base_errf(err, errno, "%s: %s", m->path, strerror(errno));
			goto out_model;
		}
		m->shards = calloc(1, sizeof(*m->shards));
		if (!m->shards) {
			rc = base_errf(err, ENOMEM, "%s: out of memory", m->path);
			goto out_dir;
		}
		m->nshards = 1;
		*slash = '\0';
		rc = open_shard(&m->shards[0], dirfd, slash == m->path ? "" : m->path,
				slash + 1, err);
		*slash = '/';
		if (!rc)
			rc = build_tensors(m, err);
	} else if (S_ISDIR(sb.st_mode)) {
		model__stamp_of(&sb, &m->dir_st);
		dirfd = open(m->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dirfd < 0) {
			rc = base_errf(err, errno, "%s: %s", m->path, strerror(errno));
			goto out_model;
		}
		rc = open_config(m, dirfd, err);
		if (!rc)
			rc = open_shards(m, dirfd, err);
	} else {
		rc = base_errf(err, EINVAL, "%s: not a directory or a regular file", m->path);
		goto out_model;
	}
	if (!rc)
		compute_digest(m);
out_dir:
	close(dirfd);
out_model:
	if (rc)
		model_close(m);
	return rc;
}
