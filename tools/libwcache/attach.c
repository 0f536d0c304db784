/* SPDX-License-Identifier: MIT */
/*
 * libwcache: attach and detach -- MANIFEST (paged), ATTACH (pools and their
 * descriptors over one or more frames), import of every pool through the
 * gpu backend, and the checks that tie the two together (every tensor
 * inside its pool) before the engine sees a pointer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "client.h"
#include "err.h"

/* Room for the names and dtypes of a manifest; grows by doubling, bounded
 * by what the daemon can send (every page <= WIRE_PAYLOAD_MAX). */
struct arena {
	char *buf;
	size_t len, cap;
};

static int arena_add(struct arena *a, const char *s, size_t *off)
{
	size_t n = strlen(s) + 1;

	if (a->len + n > a->cap) {
		size_t cap = a->cap ? a->cap : 4096;
		char *p;

		while (cap < a->len + n)
			cap *= 2;
		p = realloc(a->buf, cap);
		if (!p)
			return -ENOMEM;
		a->buf = p;
		a->cap = cap;
	}
	memcpy(a->buf + a->len, s, n);
	*off = a->len;
	a->len += n;
	return 0;
}

/* Decodes one MANIFEST page into m->t[first ..]; name and dtype offsets go
 * into the pointer fields until fix-up. */
static int manifest_page(struct wc_conn *c, struct wc_model *m,
			 struct arena *ar, uint32_t first, uint32_t *next,
			 bool *more, struct wc_error *err)
{
	struct wire_manifest_req q = { .first = first, .max = 0 };
	struct wire_manifest wm;
	struct wire_tensor *wt;
	struct wc_frame f;
	char e[BASE_ERR_LEN];
	uint64_t id = c->next_id++;
	int ret;

	wire_frame_begin(&c->w, WIRE_MANIFEST, 0, id);
	wire_manifest_req_put(&c->w, &q);
	ret = wc__call(c, &c->w, id, WIRE_MANIFEST, &f, err);
	if (ret)
		return ret;
	wc__frame_release(&f);
	ret = wire_manifest_get(f.payload, f.h.len, &wm, e);
	if (ret)
		return wc__fail(err, -ret, "the daemon at %s sent a bad MANIFEST reply: %s", c->sock, e);
	if (!m->t) {
		if (wm.total > WC_TENSORS_MAX)
			return wc__fail(err, E2BIG, "the daemon serves %u tensors, more than this library's limit of %u: upgrade libwcache",
					wm.total, WC_TENSORS_MAX);
		m->ntensors = wm.total;
		m->info.version = wm.version;
		m->t = calloc(wm.total ? wm.total : 1, sizeof(*m->t));
		if (!m->t)
			return wc__fail(err, ENOMEM, "out of memory for %u tensors", wm.total);
	}
	if (wm.total != m->ntensors || wm.first != first ||
	    wm.version != m->info.version || (!wm.count && first < wm.total))
		return wc__fail(err, EBADMSG, "the daemon's MANIFEST pages disagree (total %u then %llu, first %u asked %u, version %llu then %llu): it changed while attaching; try again",
				wm.total, (unsigned long long)m->ntensors,
				wm.first, first,
				(unsigned long long)wm.version,
				(unsigned long long)m->info.version);
	wt = malloc(sizeof(*wt));
	if (!wt)
		return wc__fail(err, ENOMEM, "out of memory for a tensor");
	for (uint32_t i = 0; i < wm.count; i++) {
		struct wc_tensor *t = &m->t[first + i];
		size_t noff = 0, doff = 0;

		ret = wire_manifest_next(&wm, wt, e);
		if (ret) {
			ret = wc__fail(err, -ret, "the daemon at %s sent a bad MANIFEST reply: %s", c->sock, e);
			break;
		}
		if (arena_add(ar, wt->name, &noff) || arena_add(ar, wt->dtype, &doff)) {
			ret = wc__fail(err, ENOMEM, "out of memory for tensor names");
			break;
		}
		t->name = (const char *)(uintptr_t)noff;
		t->dtype = (const char *)(uintptr_t)doff;
		t->ndim = wt->ndim;
		memcpy(t->shape, wt->shape, sizeof(t->shape));
		t->bytes = wt->nbytes;
		t->pool = wt->pool;
		t->offset = wt->offset;
		memcpy(t->hash, wt->hash, WC_HASH_LEN);
		t->flags = ((wt->flags & WIRE_T_HASHED) ? WC_TENSOR_HASHED : 0) |
			   ((wt->flags & WIRE_T_VIEW) ? WC_TENSOR_VIEW : 0) |
			   ((wt->flags & WIRE_T_ALIAS) ? WC_TENSOR_ALIAS : 0);
		t->padded_rows = wt->padded_rows;
	}
	free(wt);
	*next = first + wm.count;
	*more = *next < wm.total;
	return ret;
}

static int manifest_fetch(struct wc_conn *c, struct wc_model *m,
			  struct wc_error *err)
{
	struct arena ar = { 0 };
	uint32_t first = 0;
	bool more = true;
	int ret = 0;

	while (more && !ret)
		ret = manifest_page(c, m, &ar, first, &first, &more, err);
	if (ret) {
		free(ar.buf);
		return ret;
	}
	m->strings = ar.buf;
	m->strings_len = ar.len;
	for (uint64_t i = 0; i < m->ntensors; i++) {
		m->t[i].name = ar.buf + (uintptr_t)m->t[i].name;
		m->t[i].dtype = ar.buf + (uintptr_t)m->t[i].dtype;
	}
	return wc__index_build(m, err);
}

/* Opens the backend that imports the pools: the device given to
 * wc_connect, else the one the daemon names ("GPU-..." or a host device). */
int wc__dev_ensure(struct wc_conn *c, struct wc_error *err)
{
	char spec[WC_DEVICE_LEN + 8], e[BASE_ERR_LEN];
	int ret;

	if (c->dev_open)
		return 0;
	if (c->device[0])
		wc__strlcpy(spec, c->device, sizeof(spec));
	else if (c->info.mem == WC_MEM_CUDA)
		wc__strlcpy(spec, c->info.device, sizeof(spec));
	else if (!strncmp(c->info.device, "host-", 5))
		snprintf(spec, sizeof(spec), "host:%s", c->info.device + 5);
	else
		wc__strlcpy(spec, "host", sizeof(spec));
	ret = wc__dev_open(c, spec, e);
	if (ret)
		return wc__fail(err, -ret, "cannot open device '%s' to map the daemon's pools: %s",
				spec, e);
	return 0;
}

struct pools {
	uint32_t n;
	struct wire_pool p[WC_POOLS_MAX];
	int fd[WC_POOLS_MAX];
};

static void pools_close(struct pools *ps)
{
	for (uint32_t i = 0; i < ps->n; i++)
		if (ps->fd[i] >= 0)
			close(ps->fd[i]);
	ps->n = 0;
}

/* Sends ATTACH and collects every pool with its descriptor (ATTACH, then
 * ATTACH_MORE frames while WIRE_F_MORE is set). */
static int attach_request(struct wc_conn *c, struct wc_model *m,
			  struct pools *ps, uint64_t *lease,
			  struct wc_error *err)
{
	struct wire_attach_req q = { .version = m->info.version };
	struct wire_attach wa;
	struct wc_frame f;
	char e[BASE_ERR_LEN];
	uint64_t id = c->next_id++;
	uint32_t total = 0;
	unsigned type = WIRE_ATTACH;
	int ret;

	if (m->flags & WC_ATTACH_WRITABLE)
		q.flags |= WIRE_ATTACH_WRITABLE;
	wire_frame_begin(&c->w, WIRE_ATTACH, 0, id);
	wire_attach_req_put(&c->w, &q);
	ret = wc__send(c, &c->w, err);
	if (ret)
		return ret;
	for (;;) {
		ret = wc__reply(c, id, type, &f, err);
		if (ret)
			return ret;
		ret = wire_attach_get(f.payload, f.h.len, &wa, e);
		if (!ret && type == WIRE_ATTACH) {
			total = wa.total;
			*lease = wa.lease;
			if (total > WC_POOLS_MAX)
				ret = base_errf(e, E2BIG, "%u pools, more than this library's limit of %u",
					      total, WC_POOLS_MAX);
			else if (wa.version != m->info.version)
				ret = base_errf(e, EBADMSG, "pools of version %llu for a manifest of version %llu",
					      (unsigned long long)wa.version,
					      (unsigned long long)m->info.version);
		}
		if (!ret && (wa.total != total || wa.first != ps->n ||
			     wa.lease != *lease))
			ret = base_errf(e, EBADMSG, "pool frames out of order (first %u, expected %u; total %u then %u)",
				      wa.first, ps->n, total, wa.total);
		for (uint32_t i = 0; !ret && i < wa.count; i++) {
			struct wire_pool *pl = &ps->p[ps->n];

			ret = wire_attach_next(&wa, f.nfds, pl, e);
			if (ret)
				break;
			ps->fd[ps->n] = -1;
			if (pl->fd_index != WIRE_NO_FD) {
				ps->fd[ps->n] = f.fds[pl->fd_index];
				f.fds[pl->fd_index] = -1;
			}
			ps->n++;
		}
		/* descriptors no pool named are closed here */
		wc__frame_release(&f);
		if (ret)
			return wc__fail(err, -ret, "the daemon at %s sent a bad ATTACH reply: %s",
					c->sock, e);
		if (!(f.h.flags & WIRE_F_MORE))
			break;
		type = WIRE_ATTACH_MORE;
	}
	if (ps->n != total)
		return wc__fail(err, EBADMSG, "the daemon at %s sent %u of %u pools and then stopped: restart it",
				c->sock, ps->n, total);
	return 0;
}

/* A test hook (WCACHE_TEST_SPREAD=1): the pools are mapped wherever the
 * backend puts them, as where no stretch of address space fits them all. */
static bool getenv_flag(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0");
}

/* Imports every pool, then checks that each tensor lies inside its pool
 * and sets its pointer. */
static int pools_map(struct wc_conn *c, struct wc_model *m, struct pools *ps,
		     struct wc_error *err)
{
	bool writable = m->flags & WC_ATTACH_WRITABLE;
	char e[BASE_ERR_LEN];
	char *at = NULL;
	uint64_t total = 0;
	int ret;

	WC_ASSERT(ps->n <= WC_POOLS_MAX);   /* pools_recv refused more */

	/* back to back in one reserved range where the backend can
	 * (wc_model_span), else wherever each import lands */
	for (uint32_t i = 0; i < ps->n; i++) {
		total += gpu_align_up(ps->p[i].alloc_size, c->dev.granularity);
		if (ps->fd[i] < 0)
			total = 0;   /* legacy handles map where CUDA puts them */
		if (!total)
			break;
	}
	if (c->dev.be->reserve && ps->n > 1 && total &&
	    !getenv_flag("WCACHE_TEST_SPREAD") &&
	    !c->dev.be->reserve(&c->dev, total, &m->va, e)) {
		m->va_size = total;
		at = m->va;
	}
	for (uint32_t i = 0; i < ps->n; i++) {
		const struct wire_pool *pl = &ps->p[i];

		if ((pl->export_kind == GPU_EXPORT_FD) != (ps->fd[i] >= 0))
			return wc__fail(err, EBADMSG, "pool %u of the daemon at %s has export kind %u but %s descriptor",
					i, c->sock, pl->export_kind,
					ps->fd[i] >= 0 ? "a" : "no");
		ret = c->dev.be->import(&c->dev, ps->fd[i],
					ps->fd[i] >= 0 ? NULL : pl->handle,
					pl->alloc_size, writable, at, &m->maps[i], e);
		if (ret)
			return wc__fail(err, -ret, "mapping pool %u (%llu bytes) from the daemon at %s failed: %s",
					i, (unsigned long long)pl->alloc_size,
					c->sock, e);
		m->npools = i + 1;
		if (at)
			at += gpu_align_up(pl->alloc_size, c->dev.granularity);
		if (ps->fd[i] >= 0) {
			close(ps->fd[i]);
			ps->fd[i] = -1;
		}
	}
	for (uint64_t i = 0; i < m->ntensors; i++) {
		struct wc_tensor *t = &m->t[i];

		if (t->pool >= m->npools || t->offset > ps->p[t->pool].size ||
		    t->bytes > ps->p[t->pool].size - t->offset)
			return wc__fail(err, EBADMSG, "tensor '%s' (pool %u, offset %llu, %llu bytes) lies outside the daemon's %u pools: the daemon is broken; restart it",
					t->name, t->pool,
					(unsigned long long)t->offset,
					(unsigned long long)t->bytes, m->npools);
		/* a padded tensor's zero rows follow in the same pool */
		if (t->padded_rows && t->ndim && t->shape[0] &&
		    (t->padded_rows < t->shape[0] ||
		     t->bytes / t->shape[0] > (ps->p[t->pool].size - t->offset) /
					      t->padded_rows))
			return wc__fail(err, EBADMSG, "tensor '%s' (pool %u, offset %llu) announces %llu padded rows of %llu bytes, past its pool: the daemon is broken; restart it",
					t->name, t->pool,
					(unsigned long long)t->offset,
					(unsigned long long)t->padded_rows,
					(unsigned long long)(t->bytes / t->shape[0]));
		t->ptr = (const char *)m->maps[t->pool].ptr + t->offset;
	}
	return 0;
}

static void maps_release(struct wc_conn *c, struct wc_model *m)
{
	WC_ASSERT(m->npools <= WC_POOLS_MAX);
	for (uint32_t i = 0; i < m->npools; i++)
		c->dev.be->unimport(&c->dev, &m->maps[i]);
	m->npools = 0;
	if (m->va)
		c->dev.be->unreserve(&c->dev, m->va, m->va_size);
	m->va = NULL;
	m->va_size = 0;
}

int wc_attach(struct wc_conn *c, unsigned flags, struct wc_model **out,
	      struct wc_attach_times *times, struct wc_error *err)
{
	struct wc_model *m;
	struct pools *ps;
	uint64_t lease = 0, t0, t1, t2, dev0;
	int ret;

	*out = NULL;
	if (!c->hello_ok)
		return wc__fail(err, EINVAL, "wc_attach before a successful wc_hello: say hello (with the engine's identity) first");
	if (flags & ~(unsigned)WC_ATTACH_WRITABLE)
		return wc__fail(err, EINVAL, "wc_attach: unknown flags 0x%x", flags);
	m = calloc(1, sizeof(*m));
	ps = calloc(1, sizeof(*ps));
	if (!m || !ps) {
		free(m);
		free(ps);
		return wc__fail(err, ENOMEM, "out of memory for a model");
	}
	m->conn = c;
	m->flags = flags;
	m->info = c->info;
	t0 = wc__now_ns();
	ret = manifest_fetch(c, m, err);
	if (ret)
		goto out_free;
	t1 = wc__now_ns();
	dev0 = c->times.device_ns;
	ret = wc__dev_ensure(c, err);
	if (!ret)
		ret = attach_request(c, m, ps, &lease, err);
	if (ret)
		goto out_pools;
	t2 = wc__now_ns();
	ret = pools_map(c, m, ps, err);
	if (ret)
		goto out_unmap;
	m->lease = lease;
	m->info.tensors = m->ntensors;
	c->times.manifest_ns = t1 - t0;
	c->times.attach_ns = t2 - t1 - (c->times.device_ns - dev0);
	c->times.map_ns = wc__now_ns() - t2;
	if (times)
		*times = c->times;
	m->next = c->models;
	c->models = m;
	pools_close(ps);
	free(ps);
	*out = m;
	wc__ok(err);
	return 0;
out_unmap:
	maps_release(c, m);
	/* the daemon holds a lease for us: give it back */
	if (!c->eof) {
		struct wc_frame f;
		uint64_t id = c->next_id++;

		wire_frame_begin(&c->w, WIRE_DETACH, 0, id);
		wire_detach_put(&c->w, lease);
		if (!wc__call(c, &c->w, id, WIRE_DETACH, &f, NULL))
			wc__frame_release(&f);
	}
out_pools:
	pools_close(ps);
out_free:
	free(ps);
	wc__model_free(m);
	return ret;
}

/* Copies fresh's hashes into m, entry by entry, once every entry is where
 * m has it (an in-place update keeps the layout: anything else is the
 * daemon's error). */
static int hashes_take(struct wc_model *m, const struct wc_model *fresh,
		       struct wc_error *err)
{
	if (fresh->info.version != m->info.version ||
	    fresh->ntensors != m->ntensors)
		return wc__fail(err, ESTALE, "after an in-place update the daemon serves version %llu of %llu tensors, where the mappings hold version %llu of %llu: detach and attach again",
				(unsigned long long)fresh->info.version,
				(unsigned long long)fresh->ntensors,
				(unsigned long long)m->info.version,
				(unsigned long long)m->ntensors);
	for (uint64_t i = 0; i < m->ntensors; i++) {
		const struct wc_tensor *f = &fresh->t[i];
		const struct wc_tensor *t = &m->t[i];

		if (strcmp(f->name, t->name) || f->pool != t->pool ||
		    f->offset != t->offset || f->bytes != t->bytes)
			return wc__fail(err, ESTALE, "after an in-place update tensor %s is no longer where the mappings hold it: detach and attach again",
					t->name);
	}
	for (uint64_t i = 0; i < m->ntensors; i++) {
		memcpy(m->t[i].hash, fresh->t[i].hash, WC_HASH_LEN);
		m->t[i].flags = fresh->t[i].flags;
	}
	m->hashes_stale = false;
	return 0;
}

int wc__models_refresh(struct wc_conn *c, struct wc_error *err)
{
	struct wc_model *fresh = NULL;
	int ret = 0;

	for (struct wc_model *m = c->models; m && !ret; m = m->next) {
		if (!m->hashes_stale)
			continue;
		if (!fresh) {
			fresh = calloc(1, sizeof(*fresh));
			if (!fresh)
				return wc__fail(err, ENOMEM, "out of memory for a model");
			fresh->conn = c;
			fresh->manifest_only = true;
			ret = manifest_fetch(c, fresh, err);
			if (ret)
				break;
		}
		ret = hashes_take(m, fresh, err);
	}
	if (fresh)
		wc__model_free(fresh);
	return ret;
}

int wc_manifest(struct wc_conn *c, struct wc_model **out,
		struct wc_error *err)
{
	struct wc_model *m;
	uint64_t t0 = wc__now_ns();
	int ret;

	*out = NULL;
	if (!c->hello_ok)
		return wc__fail(err, EINVAL, "wc_manifest before a successful wc_hello: say hello first");
	m = calloc(1, sizeof(*m));
	if (!m)
		return wc__fail(err, ENOMEM, "out of memory for a model");
	m->conn = c;
	m->info = c->info;
	m->manifest_only = true;
	ret = manifest_fetch(c, m, err);
	if (ret) {
		wc__model_free(m);
		return ret;
	}
	m->info.tensors = m->ntensors;
	c->times.manifest_ns = wc__now_ns() - t0;
	m->next = c->models;
	c->models = m;
	*out = m;
	wc__ok(err);
	return 0;
}

int wc_detach(struct wc_model *m, struct wc_error *err)
{
	struct wc_conn *c;
	struct wc_model **pp;
	int ret = 0;

	if (!m) {
		wc__ok(err);
		return 0;
	}
	c = m->conn;
	for (pp = &c->models; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	maps_release(c, m);
	/* A daemon that is gone holds no lease; that is not an error. */
	if (!c->eof && !m->manifest_only) {
		struct wc_frame f;
		uint64_t id = c->next_id++;

		wire_frame_begin(&c->w, WIRE_DETACH, 0, id);
		wire_detach_put(&c->w, m->lease);
		ret = wc__call(c, &c->w, id, WIRE_DETACH, &f, err);
		if (!ret)
			wc__frame_release(&f);
		else if (ret == -EPIPE)
			ret = 0;
	}
	wc__model_free(m);
	if (!ret)
		wc__ok(err);
	return ret;
}

int wc_hello_attach(struct wc_conn *c, const struct wc_expect *expect,
		    struct wc_info *info, unsigned flags, struct wc_model **out,
		    struct wc_attach_times *times, struct wc_error *err)
{
	int ret = wc_hello(c, expect, info, err);

	return ret ? ret : wc_attach(c, flags, out, times, err);
}
