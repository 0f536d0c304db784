/* SPDX-License-Identifier: MIT */
/*
 * Strict safetensors header parsing. See st.h for the rules. Messages start
 * with the file's display name, then the tensor, then what was wrong and the
 * values, then what to do.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "st.h"
#include "json_kind.h"

static const struct {
	const char *name;
	unsigned bits;
} dtypes[ST_DTYPE_COUNT] = {
	[ST_BOOL] = { "BOOL", 8 },
	[ST_F4] = { "F4", 4 },
	[ST_F6_E2M3] = { "F6_E2M3", 6 },
	[ST_F6_E3M2] = { "F6_E3M2", 6 },
	[ST_U8] = { "U8", 8 },
	[ST_I8] = { "I8", 8 },
	[ST_F8_E5M2] = { "F8_E5M2", 8 },
	[ST_F8_E4M3] = { "F8_E4M3", 8 },
	[ST_F8_E8M0] = { "F8_E8M0", 8 },
	[ST_I16] = { "I16", 16 },
	[ST_U16] = { "U16", 16 },
	[ST_F16] = { "F16", 16 },
	[ST_BF16] = { "BF16", 16 },
	[ST_I32] = { "I32", 32 },
	[ST_U32] = { "U32", 32 },
	[ST_F32] = { "F32", 32 },
	[ST_C64] = { "C64", 64 },
	[ST_F64] = { "F64", 64 },
	[ST_I64] = { "I64", 64 },
	[ST_U64] = { "U64", 64 },
};

const char *st_dtype_name(enum st_dtype d)
{
	return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].name : "?";
}

int st_dtype_parse(const char *s, enum st_dtype *d)
{
	for (int i = 0; i < ST_DTYPE_COUNT; i++) {
		if (!strcmp(s, dtypes[i].name)) {
			*d = (enum st_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

unsigned st_dtype_bits(enum st_dtype d)
{
	return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].bits : 0;
}

int st_dtype_bytes(enum st_dtype d, uint64_t nelem, uint64_t *bytes)
{
	uint64_t bits;

	if (__builtin_mul_overflow(nelem, (uint64_t)st_dtype_bits(d), &bits))
		return -EOVERFLOW;
	if (bits % 8)
		return -EINVAL;
	*bytes = bits / 8;
	return 0;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int st_header_len(const void *prefix, size_t len, uint64_t file_size,
		  const char *name, uint64_t *header_len, char *err)
{
	uint64_t n;

	if (file_size < ST_PREFIX_LEN || len < ST_PREFIX_LEN)
		return base_errf(err, EINVAL,
			       "%s: file is %" PRIu64 " bytes, shorter than the 8-byte safetensors header length; the file is truncated or not safetensors",
			       name, file_size);
	n = le64(prefix);
	if (n == 0)
		return base_errf(err, EINVAL,
			       "%s: header length is 0 (a safetensors header is a JSON object of at least 2 bytes); the file is corrupt or not safetensors",
			       name);
	if (n > ST_HEADER_MAX)
		return base_errf(err, EINVAL,
			       "%s: header length %" PRIu64 " is over the %llu-byte limit; the file is corrupt or not safetensors",
			       name, n, ST_HEADER_MAX);
	if (n > file_size - ST_PREFIX_LEN)
		return base_errf(err, EINVAL,
			       "%s: header length %" PRIu64 " runs past the end of the %" PRIu64 "-byte file; the file is truncated or not safetensors",
			       name, n, file_size);
	*header_len = n;
	return 0;
}

/* Offset of the first byte that is not valid UTF-8 (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or -1 when all is valid. */
static long long utf8_bad(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i], need, min, cp;

		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			need = 1, min = 0x80, cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			need = 2, min = 0x800, cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			need = 3, min = 0x10000, cp = c & 0x07;
		} else {
			return (long long)i;
		}
		if (n - i <= need)
			return (long long)i;
		for (unsigned k = 1; k <= need; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return (long long)i;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return (long long)i;
		i += need + 1;
	}
	return -1;
}

/* A non-negative JSON integer, or -1 with *what naming what it is. */
static int json_u64(const json_t *v, uint64_t *out, const char **what)
{
	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if (x < 0) {
			*what = "a negative number";
			return -1;
		}
		*out = (uint64_t)x;
		return 0;
	}
	*what = model__json_kind(v);
	return -1;
}

void st_file_free(struct st_file *f)
{
	for (uint32_t i = 0; i < f->ntensors; i++)
		free(f->tensors[i].name);
	for (uint32_t i = 0; i < f->nmeta; i++) {
		free(f->meta[i].key);
		free(f->meta[i].value);
	}
	free(f->tensors);
	free(f->meta);
	free(f->name);
	memset(f, 0, sizeof(*f));
}

static int parse_meta(struct st_file *f, json_t *obj, char *err)
{
	const char *key;
	json_t *v;
	size_t n;

	if (json_is_null(obj))
		return 0;
	if (!json_is_object(obj))
		return base_errf(err, EINVAL,
			       "%s: __metadata__ is %s, not an object of string to string; the file is corrupt",
			       f->name, model__json_kind(obj));
	n = json_object_size(obj);
	if (n > ST_META_MAX)
		return base_errf(err, EINVAL,
			       "%s: __metadata__ has %zu entries, over the limit of %d; the file is corrupt",
			       f->name, n, ST_META_MAX);
	f->meta = calloc(n ? n : 1, sizeof(*f->meta));
	if (!f->meta)
		return base_errf(err, ENOMEM, "%s: out of memory for %zu metadata entries",
			       f->name, n);
	json_object_foreach(obj, key, v) {
		struct st_meta *m = &f->meta[f->nmeta];

		if (!json_is_string(v))
			return base_errf(err, EINVAL,
				       "%s: __metadata__ value for '%s' is %s, not a string; the file is corrupt",
				       f->name, key, model__json_kind(v));
		m->key = strdup(key);
		m->value = strdup(json_string_value(v));
		f->nmeta++;
		if (!m->key || !m->value)
			return base_errf(err, ENOMEM, "%s: out of memory", f->name);
	}
	return 0;
}

/* Parses one tensor entry into t (name already set). */
static int parse_entry(struct st_file *f, struct st_tensor *t, json_t *obj,
		       uint64_t data_size, char *err)
{
	json_t *dt, *shape, *offs, *v;
	const char *what, *key;
	uint64_t nbytes;
	size_t i;
	int rc;

	if (!json_is_object(obj))
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': entry is %s, not an object with dtype, shape and data_offsets; the file is corrupt",
			       f->name, t->name, model__json_kind(obj));
	json_object_foreach(obj, key, v) {
		if (strcmp(key, "dtype") && strcmp(key, "shape") &&
		    strcmp(key, "data_offsets"))
			return base_errf(err, EINVAL,
				       "%s: tensor '%s': unknown key '%s' (expected only dtype, shape, data_offsets); the file is corrupt or not safetensors",
				       f->name, t->name, key);
	}
	dt = json_object_get(obj, "dtype");
	shape = json_object_get(obj, "shape");
	offs = json_object_get(obj, "data_offsets");
	if (!dt || !shape || !offs)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': missing %s; every entry needs dtype, shape and data_offsets",
			       f->name, t->name,
			       !dt ? "dtype" : !shape ? "shape" : "data_offsets");
	if (!json_is_string(dt))
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': dtype is %s, not a string; the file is corrupt",
			       f->name, t->name, model__json_kind(dt));
	if (st_dtype_parse(json_string_value(dt), &t->dtype))
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': unknown dtype '%s' (known: BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 I16 U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64)",
			       f->name, t->name, json_string_value(dt));
	if (!json_is_array(shape))
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': shape is %s, not an array of non-negative integers; the file is corrupt",
			       f->name, t->name, model__json_kind(shape));
	if (json_array_size(shape) > ST_NDIM_MAX)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': shape has %zu dimensions, over the limit of %d",
			       f->name, t->name, json_array_size(shape), ST_NDIM_MAX);
	t->ndim = (uint32_t)json_array_size(shape);
	t->nelem = 1;
	json_array_foreach(shape, i, v) {
		if (json_u64(v, &t->shape[i], &what))
			return base_errf(err, EINVAL,
				       "%s: tensor '%s': shape[%zu] is %s, not a non-negative integer; the file is corrupt",
				       f->name, t->name, i, what);
		if (__builtin_mul_overflow(t->nelem, t->shape[i], &t->nelem))
			return base_errf(err, EOVERFLOW,
				       "%s: tensor '%s': element count of the shape overflows 64 bits at shape[%zu] = %" PRIu64 "; the file is corrupt",
				       f->name, t->name, i, t->shape[i]);
	}
	if (!json_is_array(offs) || json_array_size(offs) != 2)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': data_offsets is %s%s, not exactly two offsets [begin, end]; the file is corrupt",
			       f->name, t->name, model__json_kind(offs),
			       json_is_array(offs) ?
				       (json_array_size(offs) < 2 ? " of fewer than 2 numbers" : " of more than 2 numbers") : "");
	if (json_u64(json_array_get(offs, 0), &t->begin, &what) ||
	    json_u64(json_array_get(offs, 1), &t->end, &what))
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': a data offset is %s, not a non-negative integer; the file is corrupt",
			       f->name, t->name, what);
	rc = st_dtype_bytes(t->dtype, t->nelem, &nbytes);
	if (rc == -EOVERFLOW)
		return base_errf(err, EOVERFLOW,
			       "%s: tensor '%s': %" PRIu64 " elements of %s overflow 64 bits of size; the file is corrupt",
			       f->name, t->name, t->nelem, st_dtype_name(t->dtype));
	if (rc)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': %" PRIu64 " elements of %u-bit %s are not a whole number of bytes; the file is corrupt",
			       f->name, t->name, t->nelem, st_dtype_bits(t->dtype),
			       st_dtype_name(t->dtype));
	if (t->end < t->begin)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': data_offsets end %" PRIu64 " is before begin %" PRIu64 "; the file is corrupt",
			       f->name, t->name, t->end, t->begin);
	if (t->end > data_size)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the %" PRIu64 "-byte data section; the file is truncated or corrupt",
			       f->name, t->name, t->begin, t->end, data_size);
	t->nbytes = t->end - t->begin;
	if (nbytes != t->nbytes)
		return base_errf(err, EINVAL,
			       "%s: tensor '%s': shape (%" PRIu64 " elements of %s) is %" PRIu64 " bytes but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64 "; the file is corrupt",
			       f->name, t->name, t->nelem, st_dtype_name(t->dtype),
			       nbytes, t->begin, t->end, t->nbytes);
	t->file_off = f->data_off + t->begin;
	return 0;
}

static int cmp_offsets(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The tensors, sorted by offset, must tile [0, data_size) exactly. */
static int check_tiling(struct st_file *f, uint64_t data_size, char *err)
{
	uint64_t at = 0;
	const char *prev = NULL;

	qsort(f->tensors, f->ntensors, sizeof(*f->tensors), cmp_offsets);
	for (uint32_t i = 0; i < f->ntensors; i++) {
		const struct st_tensor *t = &f->tensors[i];

		if (t->begin < at)
			return base_errf(err, EINVAL,
				       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor '%s', which ends at %" PRIu64 "; the file is corrupt",
				       f->name, t->name, t->begin, t->end, prev, at);
		if (t->begin > at)
			return base_errf(err, EINVAL,
				       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] leave a hole of %" PRIu64 " bytes after %s%s%s (at %" PRIu64 "); the file is corrupt",
				       f->name, t->name, t->begin, t->end, t->begin - at,
				       prev ? "tensor '" : "",
				       prev ? prev : "the start of the data section",
				       prev ? "'" : "", at);
		at = t->end;
		prev = t->name;
	}
	if (at != data_size)
		return base_errf(err, EINVAL,
			       "%s: %" PRIu64 " trailing bytes after the last tensor%s%s%s (tensors end at %" PRIu64 ", the data section is %" PRIu64 " bytes); the file is corrupt",
			       f->name, data_size - at, prev ? " '" : "",
			       prev ? prev : "", prev ? "'" : "", at, data_size);
	return 0;
}

static int parse_json(struct st_file *f, const char *hdr, size_t n,
		      uint64_t data_size, char *err)
{
	json_error_t jerr;
	const char *key;
	json_t *root, *v;
	size_t count;
	int rc = 0;

	root = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		enum json_error_code code = json_error_code(&jerr);
		const char *what =
			code == json_error_duplicate_key ?
				"duplicate key (a tensor name or a metadata key): " :
			code == json_error_null_byte_in_key ?
				"tensor name with a NUL byte: " : "";

		return base_errf(err, EINVAL,
			       "%s: header is not valid strict JSON at byte %d (line %d, column %d): %s%s; the file is corrupt or not safetensors",
			       f->name, jerr.position, jerr.line, jerr.column, what,
			       jerr.text);
	}
	if (!json_is_object(root)) {
		rc = base_errf(err, EINVAL,
			     "%s: header is %s, not a JSON object; the file is corrupt or not safetensors",
			     f->name, model__json_kind(root));
		goto out_root;
	}
	count = json_object_size(root);
	if (count > ST_TENSORS_MAX + 1) {
		rc = base_errf(err, EINVAL,
			     "%s: header has %zu entries, over the limit of %d tensors",
			     f->name, count, ST_TENSORS_MAX);
		goto out_root;
	}
	f->tensors = calloc(count ? count : 1, sizeof(*f->tensors));
	if (!f->tensors) {
		rc = base_errf(err, ENOMEM, "%s: out of memory for %zu tensors",
			     f->name, count);
		goto out_root;
	}
	json_object_foreach(root, key, v) {
		struct st_tensor *t;
		size_t len = strlen(key);

		if (!strcmp(key, "__metadata__")) {
			rc = parse_meta(f, v, err);
			if (rc)
				goto out_root;
			continue;
		}
		if (len == 0) {
			rc = base_errf(err, EINVAL,
				     "%s: a tensor has an empty name; the file is corrupt",
				     f->name);
			goto out_root;
		}
		if (len > ST_NAME_MAX) {
			rc = base_errf(err, EINVAL,
				     "%s: tensor '%.64s...': name is %zu bytes, over the limit of %d",
				     f->name, key, len, ST_NAME_MAX);
			goto out_root;
		}
		if (f->ntensors >= ST_TENSORS_MAX) {
			rc = base_errf(err, EINVAL,
				     "%s: more than %d tensors in one file",
				     f->name, ST_TENSORS_MAX);
			goto out_root;
		}
		t = &f->tensors[f->ntensors];
		t->name = strdup(key);
		if (!t->name) {
			rc = base_errf(err, ENOMEM, "%s: out of memory", f->name);
			goto out_root;
		}
		f->ntensors++;
		rc = parse_entry(f, t, v, data_size, err);
		if (rc)
			goto out_root;
	}
	rc = check_tiling(f, data_size, err);
out_root:
	json_decref(root);
	return rc;
}

int st_parse(struct st_file *f, const void *buf, size_t len,
	     uint64_t file_size, const char *name, char *err)
{
	const unsigned char *p = buf;
	uint64_t n;
	long long bad;
	int rc;

	memset(f, 0, sizeof(*f));
	rc = st_header_len(buf, len, file_size, name, &n, err);
	if (rc)
		return rc;
	if (len - ST_PREFIX_LEN < n)
		return base_errf(err, EINVAL,
			       "%s: only %zu of the %" PRIu64 " header bytes were given to the parser",
			       name, len - ST_PREFIX_LEN, n);
	bad = utf8_bad(p + ST_PREFIX_LEN, n);
	if (bad >= 0)
		return base_errf(err, EINVAL,
			       "%s: header is not valid UTF-8 at byte %lld of the header (byte 0x%02x); the file is corrupt or not safetensors",
			       name, bad, p[ST_PREFIX_LEN + bad]);
	f->name = strdup(name);
	if (!f->name)
		return base_errf(err, ENOMEM, "%s: out of memory", name);
	f->file_size = file_size;
	f->header_len = n;
	f->data_off = ST_PREFIX_LEN + n;
	rc = parse_json(f, (const char *)p + ST_PREFIX_LEN, n,
			file_size - f->data_off, err);
	if (rc) {
		st_file_free(f);
		return rc;
	}
	base_hash128(p, ST_PREFIX_LEN + n, f->header_hash);
	return 0;
}

static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = pread(fd, (char *)buf + done, n - done,
				  (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO; /* the file shrank under us */
		done += (size_t)r;
	}
	return 0;
}

int st_read_fd(struct st_file *f, int fd, const char *name, char *err)
{
	unsigned char prefix[ST_PREFIX_LEN];
	struct stat sb;
	uint64_t n;
	size_t plen;
	char *buf;
	int rc;

	memset(f, 0, sizeof(*f));
	if (fstat(fd, &sb))
		return base_errf(err, errno, "%s: fstat failed: %s", name,
			       strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return base_errf(err, EINVAL,
			       "%s: not a regular file (mode %06o): a checkpoint is read from regular files only; replace it with the file itself",
			       name, (unsigned)sb.st_mode);
	plen = (uint64_t)sb.st_size < ST_PREFIX_LEN ? (size_t)sb.st_size :
						      ST_PREFIX_LEN;
	rc = pread_full(fd, prefix, plen, 0);
	if (rc)
		return base_errf(err, rc, "%s: read failed: %s", name, strerror(-rc));
	rc = st_header_len(prefix, plen, (uint64_t)sb.st_size, name, &n, err);
	if (rc)
		return rc;
	buf = malloc(ST_PREFIX_LEN + n);
	if (!buf)
		return base_errf(err, ENOMEM, "%s: out of memory for a %" PRIu64 "-byte header",
			       name, n);
	memcpy(buf, prefix, ST_PREFIX_LEN);
	rc = pread_full(fd, buf + ST_PREFIX_LEN, n, ST_PREFIX_LEN);
	if (rc)
		rc = base_errf(err, rc, "%s: reading the %" PRIu64 "-byte header failed: %s",
			     name, n, strerror(-rc));
	else
		rc = st_parse(f, buf, ST_PREFIX_LEN + n, (uint64_t)sb.st_size,
			      name, err);
	free(buf);
	return rc;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	for (uint32_t i = 0; i < f->ntensors; i++)
		if (!strcmp(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}

const char *st_meta_get(const struct st_file *f, const char *key)
{
	for (uint32_t i = 0; i < f->nmeta; i++)
		if (!strcmp(f->meta[i].key, key))
			return f->meta[i].value;
	return NULL;
}
