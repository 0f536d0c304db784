/* SPDX-License-Identifier: MIT */
/*
 * libwcache: an attached model's tensor table -- lookup by name (an open
 * addressing index built once at attach), iteration, pool views, and verify
 * (recompute every XXH3-128 from the mapped bytes).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "client.h"
#include "err.h"
#include "hash.h"
#include "wcache.h"

_Static_assert(WC_HASH_LEN == BASE_HASH_LEN && WC_HEX_LEN == BASE_HASH_HEX_LEN,
	       "wcache.h's hash sizes are the base module's");

int wc__fail(struct wc_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (code < 0)
		code = -code;
	if (err)
		err->code = code;
	va_start(ap, fmt);
	base_verrf(err ? err->msg : NULL, sizeof(err->msg), code, fmt, ap);
	va_end(ap);
	return -code;
}

void wc__ok(struct wc_error *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

void wc__strlcpy(char *dst, const char *src, size_t cap)
{
	size_t n = strnlen(src, cap - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

uint64_t wc__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int wc_api_version(void)
{
	return WC_API_VERSION;
}

/* FNV-1a: names are short and this runs once per lookup. */
static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* Builds the index over m->t; a duplicate name is a malformed manifest.
 * O(n) expected; m->ntensors <= WC_TENSORS_MAX bounds the table. */
int wc__index_build(struct wc_model *m, struct wc_error *err)
{
	uint32_t n = 16;

	if (m->ntensors > WC_TENSORS_MAX)
		return wc__fail(err, E2BIG, "the manifest lists %llu tensors, more than the client's limit of %u: upgrade libwcache",
				(unsigned long long)m->ntensors, WC_TENSORS_MAX);
	while (n < 2 * m->ntensors)
		n <<= 1;
	m->buckets = calloc(n, sizeof(*m->buckets));
	if (!m->buckets)
		return wc__fail(err, ENOMEM, "out of memory for a %u-entry tensor index", n);
	m->nbuckets = n;
	for (uint64_t i = 0; i < m->ntensors; i++) {
		uint32_t b = name_hash(m->t[i].name) & (n - 1);

		while (m->buckets[b]) {
			if (!strcmp(m->t[m->buckets[b] - 1].name, m->t[i].name))
				return wc__fail(err, EBADMSG, "the daemon's manifest lists tensor '%s' twice: restart the daemon (wcctl stop; wcctl start)",
						m->t[i].name);
			b = (b + 1) & (n - 1);
		}
		m->buckets[b] = (uint32_t)i + 1;
	}
	return 0;
}

void wc__model_free(struct wc_model *m)
{
	if (!m)
		return;
	free(m->buckets);
	free(m->t);
	free(m->strings);
	free(m);
}

const struct wc_info *wc_model_info(const struct wc_model *m)
{
	return &m->info;
}

uint64_t wc_tensor_count(const struct wc_model *m)
{
	return m->ntensors;
}

const struct wc_tensor *wc_tensor_at(const struct wc_model *m, uint64_t i)
{
	return i < m->ntensors ? &m->t[i] : NULL;
}

const struct wc_tensor *wc_tensor_find(const struct wc_model *m,
				       const char *name)
{
	uint32_t b;

	if (!m || !name || !m->nbuckets)
		return NULL;
	b = name_hash(name) & (m->nbuckets - 1);
	while (m->buckets[b]) {
		const struct wc_tensor *t;

		/* wc__index_build wrote index + 1 of a tensor of m */
		WC_ASSERT(m->buckets[b] <= m->ntensors);
		t = &m->t[m->buckets[b] - 1];

		if (!strcmp(t->name, name))
			return t;
		b = (b + 1) & (m->nbuckets - 1);
	}
	return NULL;
}

int wc_lookup(const struct wc_model *m, const char *name,
	      const struct wc_tensor **out, struct wc_error *err)
{
	const struct wc_tensor *t = wc_tensor_find(m, name);

	*out = t;
	if (!t)
		return wc__fail(err, ENOENT, "tensor '%s' is not in the attached model (%llu tensors, e.g. '%s'): check the name against `wcctl manifest`",
				name ? name : "(null)",
				(unsigned long long)m->ntensors,
				m->ntensors ? m->t[0].name : "none");
	wc__ok(err);
	return 0;
}

uint32_t wc_pool_count(const struct wc_model *m)
{
	return m->npools;
}

int wc_pool_at(const struct wc_model *m, uint32_t i, struct wc_pool_view *out)
{
	if (i >= m->npools)
		return -EINVAL;
	out->ptr = m->maps[i].ptr;
	out->size = m->maps[i].size;
	out->writable = m->maps[i].writable;
	return 0;
}

/* Entry i of m's layout bytes (wc_model_layout). */
static void layout_row(const struct wc_model *m, uint64_t i, struct wc_tensor *t)
{
	memcpy(t, &m->t[i], sizeof(*t));   /* padding too: the table is calloc'd */
	t->name = (const char *)(uintptr_t)(m->t[i].name - m->strings);
	t->dtype = (const char *)(uintptr_t)(m->t[i].dtype - m->strings);
	t->ptr = NULL;
	memset(t->hash, 0, sizeof(t->hash));
}

size_t wc_model_layout(const struct wc_model *m, void *buf, size_t len)
{
	size_t rows = (size_t)m->ntensors * sizeof(struct wc_tensor);
	size_t need = rows + m->strings_len;
	char *out = buf;

	if (!buf || len < need)
		return need;
	for (uint64_t i = 0; i < m->ntensors; i++) {
		struct wc_tensor t;

		layout_row(m, i, &t);
		memcpy(out + i * sizeof(t), &t, sizeof(t));
	}
	if (m->strings_len)
		memcpy(out + rows, m->strings, m->strings_len);
	return need;
}

int wc_model_layout_eq(const struct wc_model *m, const void *buf, size_t len)
{
	size_t rows = (size_t)m->ntensors * sizeof(struct wc_tensor);
	const char *in = buf;

	if (!buf || len != rows + m->strings_len)
		return 0;
	for (uint64_t i = 0; i < m->ntensors; i++) {
		struct wc_tensor t;

		layout_row(m, i, &t);
		if (memcmp(in + i * sizeof(t), &t, sizeof(t)))
			return 0;
	}
	return !m->strings_len || !memcmp(in + rows, m->strings, m->strings_len);
}

int wc_model_span(const struct wc_model *m, struct wc_pool_view *out,
		  uint64_t *pool_off, uint32_t n)
{
	const char *base;

	if (!m->npools)
		return -ENOENT;
	base = m->maps[0].ptr;
	for (uint32_t i = 1; i < m->npools; i++)
		if ((const char *)m->maps[i].ptr !=
		    (const char *)m->maps[i - 1].ptr + m->maps[i - 1].size ||
		    m->maps[i].writable != m->maps[0].writable)
			return -ENOENT;
	out->ptr = base;
	out->size = (uint64_t)((const char *)m->maps[m->npools - 1].ptr - base) +
		    m->maps[m->npools - 1].size;
	out->writable = m->maps[0].writable;
	for (uint32_t i = 0; pool_off && i < n && i < m->npools; i++)
		pool_off[i] = (uint64_t)((const char *)m->maps[i].ptr - base);
	return (int)m->npools;
}

/* Hashes one tensor's bytes. Host memory is hashed in place; device memory
 * is copied through buf (WC_VERIFY_CHUNK bytes) with the backend's
 * read_mapping. */
static int tensor_hash(const struct wc_model *m, const struct wc_tensor *t,
		       void *buf, uint8_t out[BASE_HASH_LEN])
{
	const struct gpu_mapping *map = &m->maps[t->pool];
	struct base_hasher h;

	if (m->info.mem == WC_MEM_HOST) {
		base_hash128(t->ptr, t->bytes, out);
		return 0;
	}
	base_hasher_init(&h);
	for (uint64_t done = 0; done < t->bytes;) {
		size_t len = t->bytes - done < WC_VERIFY_CHUNK ?
			     t->bytes - done : WC_VERIFY_CHUNK;
		int ret = m->conn->dev.be->read_mapping(&m->conn->dev, map,
							t->offset + done,
							buf, len);

		if (ret < 0)
			return ret;
		base_hasher_update(&h, buf, len);
		done += len;
	}
	base_hasher_final(&h, out);
	return 0;
}

/* One verify run shared by its threads: tensors are taken one at a time
 * from `next`; the lowest bad index and the first read error are kept. */
struct verify_job {
	const struct wc_model *m;
	uint64_t to;
	uint64_t next;               /* atomic */
	pthread_mutex_t lock;
	uint64_t nbad;
	uint64_t first_bad;          /* valid when nbad */
	uint8_t first_got[BASE_HASH_LEN];
	int fail_ret;                /* 0 or the first -errno */
	uint64_t fail_idx;
};

static void *verify_worker(void *arg)
{
	struct verify_job *j = arg;
	const struct wc_model *m = j->m;
	struct gpu_dev *dev = &m->conn->dev;
	char e[BASE_ERR_LEN];
	uint8_t got[BASE_HASH_LEN];
	bool pinned = false;
	void *buf = NULL;

	/* device memory comes back through a page-locked buffer when the
	 * backend has one (several times faster than pageable memory) */
	if (m->info.mem != WC_MEM_HOST && dev->be->staging_alloc &&
	    !dev->be->staging_alloc(dev, WC_VERIFY_CHUNK, &buf, e))
		pinned = true;
	if (m->info.mem != WC_MEM_HOST && !buf)
		buf = malloc(WC_VERIFY_CHUNK);
	if (m->info.mem != WC_MEM_HOST && !buf) {
		pthread_mutex_lock(&j->lock);
		if (!j->fail_ret) {
			j->fail_ret = -ENOMEM;
			j->fail_idx = j->next;
		}
		pthread_mutex_unlock(&j->lock);
		return NULL;
	}
	for (;;) {
		uint64_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		int ret;

		if (i >= j->to)
			break;
		ret = tensor_hash(m, &m->t[i], buf, got);
		if (!ret && !memcmp(got, m->t[i].hash, BASE_HASH_LEN))
			continue;
		pthread_mutex_lock(&j->lock);
		if (ret && (!j->fail_ret || i < j->fail_idx)) {
			j->fail_ret = ret;
			j->fail_idx = i;
		} else if (!ret) {
			if (!j->nbad++ || i < j->first_bad) {
				j->first_bad = i;
				memcpy(j->first_got, got, BASE_HASH_LEN);
			}
		}
		pthread_mutex_unlock(&j->lock);
	}
	if (pinned)
		dev->be->staging_free(dev, buf, WC_VERIFY_CHUNK);
	else
		free(buf);
	return NULL;
}

/* Threads for a verify of `bytes`: one below WC_VERIFY_PARALLEL_MIN, else
 * one per CPU up to WC_VERIFY_THREADS_MAX (hashing runs at a few GB/s per
 * core; device copies overlap with the other threads' hashing). */
static unsigned verify_threads(uint64_t bytes, uint64_t tensors)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t n = cpus > 0 ? (uint64_t)cpus : 1;

	if (bytes < WC_VERIFY_PARALLEL_MIN)
		return 1;
	if (n > WC_VERIFY_THREADS_MAX)
		n = WC_VERIFY_THREADS_MAX;
	return (unsigned)(n < tensors ? n : tensors);
}

static int verify_range(const struct wc_model *m, uint64_t from, uint64_t to,
			uint64_t *bad, struct wc_error *err)
{
	struct verify_job j = { .m = m, .to = to, .next = from };
	pthread_t tid[WC_VERIFY_THREADS_MAX];
	char want_hex[WC_HEX_LEN], got_hex[WC_HEX_LEN];
	unsigned nthreads, started = 0;
	uint64_t bytes = 0;

	for (uint64_t i = from; i < to; i++) {
		if (!(m->t[i].flags & WC_TENSOR_HASHED))
			return wc__fail(err, ENODATA, "tensor '%s' has no hash to verify against: the daemon was started with --no-hash; restart it without that flag",
					m->t[i].name);
		bytes += m->t[i].bytes;
	}
	pthread_mutex_init(&j.lock, NULL);
	nthreads = verify_threads(bytes, to - from);
	/* the caller is one of the workers; fewer threads if creation fails */
	while (started + 1 < nthreads &&
	       !pthread_create(&tid[started], NULL, verify_worker, &j))
		started++;
	verify_worker(&j);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&j.lock);
	if (bad)
		*bad = j.nbad;
	if (j.fail_ret)
		return wc__fail(err, -j.fail_ret, "could not read tensor '%s' back from the device to verify it: %s",
				m->t[j.fail_idx < to ? j.fail_idx : from].name,
				strerror(-j.fail_ret));
	if (j.nbad) {
		base_hash_hex(m->t[j.first_bad].hash, want_hex);
		base_hash_hex(j.first_got, got_hex);
		return wc__fail(err, EILSEQ, "%llu of %llu tensors do not match their hash; the first is '%s' (manifest %s, mapped bytes %s): the served memory is corrupt, restart the daemon",
				(unsigned long long)j.nbad,
				(unsigned long long)(to - from),
				m->t[j.first_bad].name, want_hex, got_hex);
	}
	wc__ok(err);
	return 0;
}

int wc_verify(const struct wc_model *m, uint64_t *bad, struct wc_error *err)
{
	return verify_range(m, 0, m->ntensors, bad, err);
}

int wc_verify_tensor(const struct wc_model *m, const struct wc_tensor *t,
		     struct wc_error *err)
{
	if (!t || t < m->t || t >= m->t + m->ntensors)
		return wc__fail(err, EINVAL, "wc_verify_tensor: the tensor is not one of this model's (use wc_tensor_find on the same model)");
	return verify_range(m, (uint64_t)(t - m->t),
			    (uint64_t)(t - m->t) + 1, NULL, err);
}

/* wcache.h's wc_hash_hex (exported): the base module's hex under the
 * client's name. */
void wc_hash_hex(const uint8_t hash[WC_HASH_LEN], char out[WC_HEX_LEN])
{
	base_hash_hex(hash, out);
}
