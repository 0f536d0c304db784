/* SPDX-License-Identifier: MIT */
/*
 * libwcache: an update session (wc_push_*), a trainer writing version N+1
 * from its own memory (proto/wire/wire_push.h). Open receives N+1's pools
 * (writable, this connection's alone), each mapped at the first write
 * into it; PUSH_PLAN pages say
 * where each checkpoint tensor's pieces go; each write copies one whole
 * tensor's pieces into the mappings (host: memcpy row by row; cuda: one
 * 2-D copy per piece, the backend's copy_to_mapping, queued on the
 * caller's stream from device, peer or host memory); commit waits for
 * every stream a write used, unmaps every pool (the daemon seals them,
 * which a writable mapping would prevent) and tells the daemon which
 * tensors were written, as runs of their indices.
 *
 * Costs: the plan is decoded once per session (a few hundred bytes per
 * tensor); a write is a copy of its bytes and a binary search of its name.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "client.h"
#include "err.h"
#include "st.h"
#include "wire_life.h"
#include "wire_push.h"

struct push_tensor {
	char *name;
	char dtype[WIRE_DTYPE_MAX + 1];
	uint32_t ndim;
	uint64_t shape[WIRE_NDIM_MAX];
	uint64_t src_bytes;          /* the whole checkpoint tensor */
	uint32_t pool;
	uint64_t offset, size;
	uint32_t npieces;
	struct wire_push_piece *pc;
	unsigned written;
};

#define PUSH_STREAMS_MAX 16          /* streams held unsynced at once */

struct wc_push {
	struct wc_conn *c;
	uint64_t session, version, base, bytes;
	uint32_t timeout_ms;
	uint32_t npools;
	struct wire_pool pools[WIRE_PUSH_POOLS_MAX];
	/* a pool is mapped at the first write into it (pool_map): fd[i]
	 * its descriptor until then (-1: none, or mapped); unmapped once the
	 * commit or the abort let go of every mapping */
	int fd[WIRE_PUSH_POOLS_MAX];
	struct gpu_mapping maps[WIRE_PUSH_POOLS_MAX];
	bool mapped[WIRE_PUSH_POOLS_MAX];
	bool unmapped;
	uint32_t ntensors;
	struct push_tensor *t;
	uint32_t *by_name;           /* indices sorted by name */
	bool prepared;               /* wc_push_prepare succeeded */
	/* the streams cuda writes queued copies on, not yet waited for */
	struct { void *s; int dev; } streams[PUSH_STREAMS_MAX];
	uint32_t nstreams;
};

/* Waits for every stream a write queued copies on (the pools must not be
 * unmapped, nor the daemon hash them, before the copies land). */
static int streams_sync(struct wc_push *p, struct wc_error *err)
{
	const struct gpu_backend *be = p->c->dev.be;
	char e[BASE_ERR_LEN];
	int ret = 0;

	for (uint32_t i = 0; i < p->nstreams; i++) {
		int r = be->stream_sync(&p->c->dev, p->streams[i].s,
					p->streams[i].dev, e);

		if (r && !ret)
			ret = wc__fail(err, -r, "%s", e);
	}
	p->nstreams = 0;
	return ret;
}

/* Remembers stream (NULL: src_dev's default stream; src_dev matters for
 * NULL only) for streams_sync; when PUSH_STREAMS_MAX are held, those are
 * waited for first (a trainer with that many streams pays a wait). */
static int stream_note(struct wc_push *p, void *stream, int src_dev,
		       struct wc_error *err)
{
	int ret;

	if (stream)
		src_dev = -1;
	for (uint32_t i = 0; i < p->nstreams; i++)
		if (p->streams[i].s == stream && p->streams[i].dev == src_dev)
			return 0;
	if (p->nstreams == PUSH_STREAMS_MAX) {
		ret = streams_sync(p, err);
		if (ret)
			return ret;
	}
	p->streams[p->nstreams].s = stream;
	p->streams[p->nstreams++].dev = src_dev;
	return 0;
}

static void push_unmap(struct wc_push *p)
{
	streams_sync(p, NULL);
	for (uint32_t i = 0; i < p->npools; i++) {
		if (p->mapped[i])
			p->c->dev.be->unimport(&p->c->dev, &p->maps[i]);
		p->mapped[i] = false;
		if (p->fd[i] >= 0)
			close(p->fd[i]);
		p->fd[i] = -1;
	}
	p->unmapped = true;
}

/* push_unmap, its time added to the connection's push_times */
static void timed_unmap(struct wc_push *p)
{
	uint64_t t0 = wc__now_ns();

	push_unmap(p);
	p->c->push_times.unmap_ns += wc__now_ns() - t0;
}

static void push_free(struct wc_push *p)
{
	if (!p)
		return;
	push_unmap(p);
	for (uint32_t i = 0; p->t && i < p->ntensors; i++) {
		free(p->t[i].name);
		free(p->t[i].pc);
	}
	free(p->t);
	free(p->by_name);
	free(p);
}

/* a + b and a * b without wrapping, into *out; false when they would */
static bool add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

static bool mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

/* Checks t against the source it reads and the pool it writes: every piece
 * inside both, so that a broken daemon cannot make a write stray. */
static int tensor_check(struct wc_push *p, struct push_tensor *t,
			struct wc_error *err)
{
	enum st_dtype dt;
	uint64_t nel = 1, end;

	if (st_dtype_parse(t->dtype, &dt))
		return wc__fail(err, EBADMSG, "the daemon's plan gives tensor '%s' the dtype '%s', which this library does not know: upgrade libwcache",
				t->name, t->dtype);
	for (uint32_t i = 0; i < t->ndim; i++)
		if (!mul_ok(nel, t->shape[i], &nel))
			nel = UINT64_MAX;
	if (nel == UINT64_MAX || st_dtype_bytes(dt, nel, &t->src_bytes))
		return wc__fail(err, EBADMSG, "the daemon's plan gives tensor '%s' a shape of no whole number of bytes: the daemon is broken; restart it",
				t->name);
	if (t->pool >= p->npools || !add_ok(t->offset, t->size, &end) ||
	    end > p->pools[t->pool].size)
		goto bad;
	for (uint32_t k = 0; k < t->npieces; k++) {
		const struct wire_push_piece *pc = &t->pc[k];
		uint64_t last, rows, src_end, dst_end;

		if (!pc->height || !pc->width)
			continue;
		if (!mul_ok(pc->height - 1, pc->pitch, &last) ||
		    !add_ok(pc->src, last, &src_end) ||
		    !add_ok(src_end, pc->width, &src_end) ||
		    src_end > t->src_bytes ||
		    !mul_ok(pc->width, pc->height, &rows) ||
		    !add_ok(pc->dst, rows, &dst_end) || dst_end > t->size)
			goto bad;
	}
	return 0;
bad:
	return wc__fail(err, EBADMSG, "the daemon's plan puts tensor '%s' (pool %u, offset %llu, %llu bytes) outside its pools or its source: the daemon is broken; restart it",
			t->name, t->pool, (unsigned long long)t->offset,
			(unsigned long long)t->size);
}

/* One PUSH_PLAN page from first; *next is where the next one starts. */
static int plan_page(struct wc_push *p, uint32_t first, uint32_t *next,
		     struct wc_error *err)
{
	struct wc_conn *c = p->c;
	struct wire_push_plan m;
	struct wire_push_tensor *wt = NULL;
	struct wire_push_piece *pc = NULL;
	char e[BASE_ERR_LEN];
	struct wc_frame f;
	uint64_t id = c->next_id++;
	int ret;

	wire_frame_begin(&c->w, WIRE_PUSH_PLAN, 0, id);
	wire_push_plan_req_put(&c->w, first, 0);
	ret = wc__call(c, &c->w, id, WIRE_PUSH_PLAN, &f, err);
	if (ret)
		return ret;
	wc__frame_release(&f);
	ret = wire_push_plan_get(f.payload, f.h.len, &m, e);
	if (ret)
		return wc__fail(err, -ret, "the daemon at %s sent a bad PUSH_PLAN reply: %s",
				c->sock, e);
	if (m.total != p->ntensors || m.first != first ||
	    (!m.count && first < m.total))
		return wc__fail(err, EBADMSG, "the daemon's PUSH_PLAN pages disagree (total %u of %u, first %u asked %u): the daemon is broken; restart it",
				m.total, p->ntensors, m.first, first);
	wt = malloc(sizeof(*wt));
	pc = malloc(sizeof(*pc) * WIRE_PUSH_PIECES_MAX);
	if (!wt || !pc) {
		ret = wc__fail(err, ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < m.count; i++) {
		struct push_tensor *t = &p->t[first + i];

		ret = wire_push_plan_next(&m, wt, pc, e);
		if (ret) {
			ret = wc__fail(err, -ret, "the daemon at %s sent a bad PUSH_PLAN reply: %s",
				       c->sock, e);
			goto out;
		}
		t->name = strdup(wt->name);
		t->pc = malloc(sizeof(*pc) * (wt->npieces ? wt->npieces : 1));
		if (!t->name || !t->pc) {
			ret = wc__fail(err, ENOMEM, "out of memory");
			goto out;
		}
		memcpy(t->pc, pc, sizeof(*pc) * wt->npieces);
		wc__strlcpy(t->dtype, wt->dtype, sizeof(t->dtype));
		t->ndim = wt->ndim;
		memcpy(t->shape, wt->shape, sizeof(t->shape));
		t->pool = wt->pool;
		t->offset = wt->offset;
		t->size = wt->size;
		t->npieces = wt->npieces;
		ret = tensor_check(p, t, err);
		if (ret)
			goto out;
	}
	*next = first + m.count;
out:
	free(wt);
	free(pc);
	return ret;
}

static int by_name_cmp(const void *a, const void *b, void *arg)
{
	const struct wc_push *p = arg;

	return strcmp(p->t[*(const uint32_t *)a].name,
		      p->t[*(const uint32_t *)b].name);
}

/* The pools of the PUSH_OPEN reply in f: checked, their descriptors
 * taken from the frame, none mapped yet (pool_map). */
static int pools_take(struct wc_push *p, struct wire_push_opened *r,
		      struct wc_frame *f, struct wc_error *err)
{
	struct wc_conn *c = p->c;
	char e[BASE_ERR_LEN];
	int ret;

	for (uint32_t i = 0; i < r->npools; i++) {
		struct wire_pool *pl = &p->pools[i];
		int fd;

		ret = wire_push_opened_next(r, f->nfds, pl, e);
		if (ret)
			return wc__fail(err, -ret, "the daemon at %s sent a bad PUSH_OPEN reply: %s",
					c->sock, e);
		fd = pl->fd_index == WIRE_NO_FD ? -1 : f->fds[pl->fd_index];
		if ((pl->export_kind == GPU_EXPORT_FD) != (fd >= 0))
			return wc__fail(err, EBADMSG, "pool %u of the daemon at %s has export kind %u but %s descriptor",
					i, c->sock, pl->export_kind,
					fd >= 0 ? "a" : "no");
		/* ours now, not the frame's (a second pool naming the same
		 * descriptor finds none, refused above) */
		if (fd >= 0) {
			p->fd[i] = fd;
			f->fds[pl->fd_index] = -1;
		}
	}
	return 0;
}

/* Pool i, imported writable at the first write into it: a session that
 * writes a few tensors (a partial update) maps the pools they lie in,
 * not the whole model (each a few hundred microseconds to map and to
 * unmap on CUDA). */
static int pool_map(struct wc_push *p, uint32_t i,
		    const struct gpu_mapping **out, struct wc_error *err)
{
	const struct wire_pool *pl = &p->pools[i];
	struct wc_conn *c = p->c;
	char e[BASE_ERR_LEN];
	uint64_t t0;
	int ret;

	*out = &p->maps[i];
	if (p->mapped[i])
		return 0;
	t0 = wc__now_ns();
	ret = c->dev.be->import(&c->dev, p->fd[i],
				p->fd[i] >= 0 ? NULL : pl->handle,
				pl->alloc_size, true, NULL, &p->maps[i], e);
	if (ret)
		return wc__fail(err, -ret, "mapping pool %u (%llu bytes) of the update session writable failed: %s",
				i, (unsigned long long)pl->alloc_size, e);
	p->mapped[i] = true;
	c->push_times.map_ns += wc__now_ns() - t0;
	c->push_times.maps++;
	if (p->fd[i] >= 0)
		close(p->fd[i]);
	p->fd[i] = -1;
	return 0;
}

int wc_push_open(struct wc_conn *c, unsigned flags, uint64_t base_version,
		 unsigned timeout_ms, struct wc_push **out,
		 struct wc_error *err)
{
	struct wire_push_open q = { .base = base_version,
				    .timeout_ms = timeout_ms };
	struct wire_push_opened r;
	struct wc_push *p;
	struct wc_push_times *pt = &c->push_times;
	struct wc_frame f;
	char e[BASE_ERR_LEN];
	uint32_t next = 0;
	uint64_t id, t0;
	int ret;

	*out = NULL;
	if (flags & ~(WC_PUSH_ALLOW_LAYOUT_CHANGE | WC_PUSH_PARTIAL |
		      WC_PUSH_IN_PLACE | WC_PUSH_KEEP_SPARE))
		return wc__fail(err, EINVAL, "wc_push_open: unknown flags 0x%x",
				flags & ~(WC_PUSH_ALLOW_LAYOUT_CHANGE |
					  WC_PUSH_PARTIAL | WC_PUSH_IN_PLACE |
					  WC_PUSH_KEEP_SPARE));
	if (timeout_ms > WIRE_PUSH_TIMEOUT_MAX_MS)
		return wc__fail(err, EINVAL, "wc_push_open: a timeout of %u ms is over the hour a session may stay open (%u ms)",
				timeout_ms, WIRE_PUSH_TIMEOUT_MAX_MS);
	q.flags = (flags & WC_PUSH_ALLOW_LAYOUT_CHANGE ?
		   WIRE_PUSH_ALLOW_LAYOUT : 0) |
		  (flags & WC_PUSH_PARTIAL ? WIRE_PUSH_PARTIAL : 0) |
		  (flags & WC_PUSH_IN_PLACE ? WIRE_PUSH_IN_PLACE : 0) |
		  (flags & WC_PUSH_KEEP_SPARE ? WIRE_PUSH_KEEP_SPARE : 0);
	ret = wc__dev_ensure(c, err);
	if (ret)
		return ret;
	memset(pt, 0, sizeof(*pt));
	t0 = wc__now_ns();
	p = calloc(1, sizeof(*p));
	if (!p)
		return wc__fail(err, ENOMEM, "out of memory");
	p->c = c;
	for (uint32_t i = 0; i < WIRE_PUSH_POOLS_MAX; i++)
		p->fd[i] = -1;
	id = c->next_id++;
	wire_frame_begin(&c->w, WIRE_PUSH_OPEN, 0, id);
	wire_push_open_put(&c->w, &q);
	ret = wc__call(c, &c->w, id, WIRE_PUSH_OPEN, &f, err);
	if (ret) {
		free(p);
		return ret;
	}
	ret = wire_push_opened_get(f.payload, f.h.len, &r, e);
	if (ret) {
		wc__frame_release(&f);
		free(p);
		return wc__fail(err, -ret, "the daemon at %s sent a bad PUSH_OPEN reply: %s",
				c->sock, e);
	}
	/* from here the daemon holds a session: an error aborts it */
	p->session = r.session;
	p->version = r.version;
	p->base = r.base;
	p->bytes = r.bytes;
	p->timeout_ms = r.timeout_ms;
	p->npools = r.npools;
	p->ntensors = r.tensors;
	ret = pools_take(p, &r, &f, err);
	wc__frame_release(&f);
	pt->open_ns = wc__now_ns() - t0;
	t0 += pt->open_ns;
	if (ret)
		goto out_abort;
	p->t = calloc(p->ntensors ? p->ntensors : 1, sizeof(*p->t));
	p->by_name = calloc(p->ntensors ? p->ntensors : 1, sizeof(uint32_t));
	if (!p->t || !p->by_name) {
		ret = wc__fail(err, ENOMEM, "out of memory for %u tensors",
			       p->ntensors);
		goto out_abort;
	}
	while (next < p->ntensors && !ret)
		ret = plan_page(p, next, &next, err);
	if (ret)
		goto out_abort;
	for (uint32_t i = 0; i < p->ntensors; i++)
		p->by_name[i] = i;
	qsort_r(p->by_name, p->ntensors, sizeof(uint32_t), by_name_cmp, p);
	pt->plan_ns = wc__now_ns() - t0;
	*out = p;
	wc__ok(err);
	return 0;
out_abort:
	wc_push_abort(p, NULL);
	return ret;
}

uint64_t wc_push_version(const struct wc_push *p)
{
	return p->version;
}

uint64_t wc_push_tensor_count(const struct wc_push *p)
{
	return p->ntensors;
}

int wc_push_tensor_at(const struct wc_push *p, uint64_t i,
		      struct wc_push_tensor *out)
{
	const struct push_tensor *t;

	if (i >= p->ntensors)
		return -ERANGE;
	t = &p->t[i];
	memset(out, 0, sizeof(*out));
	out->name = t->name;
	out->dtype = t->dtype;
	out->ndim = t->ndim;
	memcpy(out->shape, t->shape, sizeof(uint64_t) * t->ndim);
	out->bytes = t->src_bytes;
	out->written = (int)t->written;
	return 0;
}

static long find(const struct wc_push *p, const char *name)
{
	size_t lo = 0, hi = p->ntensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, p->t[p->by_name[mid]].name);

		if (!c)
			return p->by_name[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

static void shape_str(uint32_t ndim, const uint64_t *shape, char *out,
		      size_t cap)
{
	size_t off = (size_t)snprintf(out, cap, "[");

	for (uint32_t i = 0; i < ndim && off < cap; i++)
		off += (size_t)snprintf(out + off, cap - off, "%s%llu",
					i ? ", " : "",
					(unsigned long long)shape[i]);
	if (off < cap)
		snprintf(out + off, cap - off, "]");
}

/* Copies the pieces of t from src into its pool: host pools a memcpy per
 * row; cuda one 2-D copy per piece queued on stream (src device or host
 * memory). */
static int tensor_copy(struct wc_push *p, const struct push_tensor *t,
		       const uint8_t *src, int src_dev, void *stream,
		       struct wc_error *err)
{
	const struct gpu_backend *be = p->c->dev.be;
	struct wc_push_times *pt = &p->c->push_times;
	const struct gpu_mapping *m;
	bool host = be == &gpu_host_backend;
	uint64_t t0;
	int ret;

	if (!host && (!be->copy_to_mapping || !be->stream_sync))
		return wc__fail(err, ENOTSUP, "the %s backend cannot write into the session's pools here: push to a host or CUDA device",
				be->name);
	ret = pool_map(p, t->pool, &m, err);
	if (ret)
		return ret;
	if (!host) {
		ret = stream_note(p, stream, src_dev, err);
		if (ret)
			return ret;
	}
	t0 = wc__now_ns();
	for (uint32_t k = 0; k < t->npieces; k++) {
		const struct wire_push_piece *pc = &t->pc[k];
		uint64_t dst = t->offset + pc->dst;

		if (!pc->height || !pc->width)
			continue;
		pt->copies++;
		for (uint64_t r = 0; host && r < pc->height; r++)
			memcpy((uint8_t *)m->ptr + dst + r * pc->width,
			       src + pc->src + r * pc->pitch, pc->width);
		if (host)
			continue;
		ret = be->copy_to_mapping(&p->c->dev, m, dst, src + pc->src,
					  src_dev, pc->width, pc->height,
					  pc->height > 1 ? pc->pitch :
							   pc->width,
					  stream);
		if (ret)
			break;
	}
	pt->copy_ns += wc__now_ns() - t0;
	if (ret)
		return wc__fail(err, -ret, "writing tensor '%s' into the session's pool %u failed: %s",
				t->name, t->pool, strerror(-ret));
	return 0;
}

int wc_push_write(struct wc_push *p, const char *name, const char *dtype,
		  uint32_t ndim, const uint64_t *shape, const void *src,
		  uint64_t bytes, struct wc_error *err)
{
	return wc_push_write_dev(p, name, dtype, ndim, shape, src, bytes, -1,
				 NULL, err);
}

int wc_push_write_dev(struct wc_push *p, const char *name, const char *dtype,
		      uint32_t ndim, const uint64_t *shape, const void *src,
		      uint64_t bytes, int src_device, void *stream,
		      struct wc_error *err)
{
	struct push_tensor *t;
	char want[160], got[160];
	bool same_shape;
	long i;
	int ret;

	if (!p || !name || !dtype || (ndim && !shape) || ndim > WC_DIMS_MAX)
		return wc__fail(err, EINVAL, "wc_push_write: a session, a name, a dtype and ndim (at most %u) shape entries are needed",
				WC_DIMS_MAX);
	if (src_device < -1)
		return wc__fail(err, EINVAL, "wc_push_write_dev: source device %d is neither a CUDA ordinal (0 and up) nor -1 (host memory)",
				src_device);
	if (src_device >= 0 && p->c->dev.be == &gpu_host_backend)
		return wc__fail(err, ENOTSUP, "tensor '%s' is on CUDA device %d, but the daemon serves host memory (%s): copy it to the CPU first (tensor.cpu())",
				name, src_device, p->c->dev.name);
	if (src_device < 0 && stream && p->c->dev.be == &gpu_host_backend)
		return wc__fail(err, EINVAL, "wc_push_write_dev: a stream was given for a copy from host memory into a host daemon's pools, which has none: pass NULL");
	i = find(p, name);
	if (i < 0)
		return wc__fail(err, ENOENT, "tensor '%s' is not a checkpoint tensor of the served layout (version %llu has %u): write the checkpoint's own names (a state_dict's keys, mapped with name_map when they differ)",
				name, (unsigned long long)p->base,
				p->ntensors);
	t = &p->t[i];
	if (strcmp(dtype, t->dtype))
		return wc__fail(err, EINVAL, "tensor '%s' is %s in the served layout, and %s was given: convert it first (for example tensor.to(torch.bfloat16)) or pass cast=True to update_from; nothing is cast silently",
				name, t->dtype, dtype);
	same_shape = ndim == t->ndim &&
		     !memcmp(shape, t->shape, sizeof(uint64_t) * ndim);
	/* the shapes are formatted for a refusal only (a write is the
	 * trainer's loop: a few microseconds a tensor count) */
	if (!same_shape || bytes != t->src_bytes) {
		shape_str(t->ndim, t->shape, want, sizeof(want));
		shape_str(ndim, shape, got, sizeof(got));
	}
	if (!same_shape)
		return wc__fail(err, EINVAL, "tensor '%s' has the shape %s in the served layout, and %s was given: write the whole checkpoint tensor (every rank's part; gather it first under FSDP)",
				name, want, got);
	if (bytes != t->src_bytes)
		return wc__fail(err, EINVAL, "tensor '%s' (%s %s) takes %llu bytes, and %llu were given: pass a contiguous tensor",
				name, t->dtype, want,
				(unsigned long long)t->src_bytes,
				(unsigned long long)bytes);
	if (t->written)
		return wc__fail(err, EEXIST, "tensor '%s' was already written in this session: write each tensor once (abort and open a new session to start over)",
				name);
	if (p->unmapped)
		return wc__fail(err, EINVAL, "the session's pools are no longer mapped (after a failed commit): abort it and open another");
	if (!src && bytes)
		return wc__fail(err, EINVAL, "wc_push_write: tensor '%s' has %llu bytes but no source address",
				name, (unsigned long long)bytes);
	ret = tensor_copy(p, t, src, src_device, stream, err);
	if (ret)
		return ret;
	t->written++;
	wc__ok(err);
	return 0;
}

/* Sends COMMIT (flags: WIRE_PUSH_COMMIT_*) with the runs of what was
 * written (none once prepared) and decodes the reply into r (may be
 * NULL). p stays the caller's. */
static int commit_call(struct wc_push *p, uint32_t flags,
		       struct wc_life_result *r, struct wc_error *err)
{
	struct wc_conn *c = p->c;
	struct wire_push_run *runs;
	struct wire_life_reply *lr = NULL;
	uint32_t nruns = 0;
	char e[BASE_ERR_LEN];
	struct wc_push_times *pt = &c->push_times;
	struct wc_frame f;
	uint64_t id, t0;
	bool host;
	int ret;

	runs = malloc(sizeof(*runs) * WIRE_PUSH_RUNS_MAX);
	lr = malloc(sizeof(*lr));
	if (!runs || !lr) {
		ret = wc__fail(err, ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; !p->prepared && i < p->ntensors; i++) {
		struct wire_push_run *last = nruns ? &runs[nruns - 1] : NULL;

		if (!p->t[i].written)
			continue;
		if (last && last->first + last->count == i) {
			last->count++;
			continue;
		}
		if (nruns == WIRE_PUSH_RUNS_MAX)
			break;           /* the daemon names what is missing */
		runs[nruns++] = (struct wire_push_run){ .first = i,
							.count = 1 };
	}
	/* the copies land before the daemon hashes */
	t0 = wc__now_ns();
	ret = streams_sync(p, err);
	pt->sync_ns += wc__now_ns() - t0;
	if (ret)
		goto out;
	/* host pools are sealed against writing, which no writable mapping
	 * may survive: unmapped first; CUDA's seal is the copies' end, so
	 * the unmap (a few hundred microseconds) runs beside the daemon's
	 * hash, the request already sent */
	host = c->dev.be == &gpu_host_backend;
	if (host)
		timed_unmap(p);
	id = c->next_id++;
	wire_frame_begin(&c->w, WIRE_PUSH_COMMIT, 0, id);
	wire_push_commit_put(&c->w, p->session, flags, runs, nruns);
	t0 = wc__now_ns();
	ret = wc__send(c, &c->w, err);
	if (!host)
		timed_unmap(p);
	if (!ret)
		ret = wc__reply(c, id, WIRE_PUSH_COMMIT, &f, err);
	pt->commit_ns += wc__now_ns() - t0;
	if (ret)
		goto out;
	wc__frame_release(&f);
	ret = wire_life_reply_get(f.payload, f.h.len, lr, e);
	if (ret) {
		ret = wc__fail(err, -ret, "the daemon at %s sent a bad PUSH_COMMIT reply: %s",
			       c->sock, e);
		goto out;
	}
	if (r) {
		r->version = lr->version;
		r->level = 0;
		r->bytes = lr->bytes;
		r->seconds = (double)lr->ns / 1e9;
		r->verify_seconds = (double)lr->verify_ns / 1e9;
		wc__strlcpy(r->msg, lr->msg, sizeof(r->msg));
	}
	wc__ok(err);
out:
	free(runs);
	free(lr);
	return ret;
}

int wc_push_prepare(struct wc_push *p, struct wc_life_result *r,
		    struct wc_error *err)
{
	int ret;

	if (p->prepared)
		return wc__fail(err, EINVAL, "the update session is prepared already: commit or abort it");
	ret = commit_call(p, WIRE_PUSH_COMMIT_PREPARE, r, err);
	if (!ret)
		p->prepared = true;
	return ret;
}

int wc_push_commit(struct wc_push *p, struct wc_life_result *r,
		   struct wc_error *err)
{
	int ret = commit_call(p, 0, r, err);

	/* a refused commit leaves the session open: end it, keep the error */
	if (ret && !p->c->eof)
		wc_push_abort(p, NULL);
	else
		push_free(p);
	return ret;
}

int wc_push_abort(struct wc_push *p, struct wc_error *err)
{
	struct wc_conn *c;
	struct wc_frame f;
	uint64_t id;
	int ret;

	if (!p)
		return 0;
	c = p->c;
	timed_unmap(p);
	id = c->next_id++;
	wire_frame_begin(&c->w, WIRE_PUSH_ABORT, 0, id);
	wire_push_abort_put(&c->w, p->session);
	ret = wc__call(c, &c->w, id, WIRE_PUSH_ABORT, &f, err);
	if (!ret) {
		wc__frame_release(&f);
		wc__ok(err);
	}
	push_free(p);
	return ret;
}

void wc_push_times(const struct wc_conn *c, struct wc_push_times *out)
{
	*out = c->push_times;
}
