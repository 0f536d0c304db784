/* SPDX-License-Identifier: MIT */
/*
 * The loader: model directory -> plan -> pools, through the reactor.
 *
 * load_prepare parses (config, index, every shard header), applies the
 * quantization gate before anything is loaded, builds this rank's plan and
 * packs it into pools (those on a thread of their own: prep.c), and
 * computes the identity.
 *
 * load_run fills the pools along one of two paths behind the backend
 * interface:
 *
 *   direct  (host backend default: the pool has a CPU mapping, host_ptr)
 *           --direct-fill splice (the default): worker threads splice
 *           each piece from the shard's page cache into the pool's memfd
 *           and hash each tensor as soon as it has landed (fill.c: why).
 *           --direct-fill read: io_uring reads straight from the shard
 *           files into the pool mapping (through io-wq: RX_READ_ASYNC),
 *           WCD_READ_CHUNK bytes per read, WCD_READ_DEPTH in flight; a
 *           dim-1 split is read one row at a time. Then every tensor not
 *           hashed yet (all of them after read; views and aliases after
 *           splice) is hashed in the pool by --hash-threads threads (the
 *           hash phase).
 *
 *   staged  (the CUDA backend; --load-path staged runs it on the host)
 *           staging slots, copy_to_pool, hashing while the copy runs: see
 *           staged.c. Shards go O_DIRECT when the file system takes it
 *           (probed by opening with O_DIRECT) and they are not already in
 *           the page cache (mincore over the file: at least half resident
 *           means buffered reads, which then run at memory speed);
 *           --direct-io on|off overrides.
 *
 * Whichever path filled them, ld_check_shards (ld.c) then checks that no
 * shard changed since its header was read (a write during the load would
 * be served torn) and fails the load naming the one that did.
 *
 * Known costs: a dim-1 split reads whole rows (tp x its bytes) in the staged
 * path and one read per row in the direct path; the page-cache probe maps
 * each shard once (mincore: one byte per page).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "err.h"
#include "load/load.h"
#include "load/ld.h"
#include "load/prep.h"
#include "load/fill.h"
#include "load/staged.h"
#include "log.h"
#include "daemon/fault.h"

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;   /* bytes/ns = GB/s */
}

/* Start-up timeline at debug level: what took how long since *t. */
static void step_done(const char *what, uint64_t *t)
{
	uint64_t n = rx_now_ns();

	log_debug("load step: %s in %.3f s", what, secs(n - *t));
	*t = n;
}

/* --- prepare ---------------------------------------------------------------- */

int load_prepare(struct wcd *d, struct wcd_version *v, char *err)
{
	uint64_t t0 = rx_now_ns();
	int ret;

	/* headers, the quantization gate (before anything is planned or
	 * loaded), the layout and the packed plan, off the loop (prep.c) */
	ret = ld_prepare_bounded(d, v, err);
	if (ret)
		return ret;
	if (v->plan.npools > GPU_POOLS_MAX)
		return base_errf(err, E2BIG, "the plan needs %u pools, over %d",
			       v->plan.npools, GPU_POOLS_MAX);

	ident_init(&v->ident);
	ret = ident_set_model(&v->ident, &v->model, &v->rules, err);
	if (ret)
		return ret;
	v->ident.tp_size = d->o.tp_size;
	v->ident.tp_rank = d->o.tp_rank;
	v->ident.pp_size = d->o.pp_size;
	v->ident.pp_rank = d->o.pp_rank;
	v->ident.ep_size = d->o.ep_size;
	v->ident.ep_rank = d->o.ep_rank;
	v->ident.vocab_pad = (uint32_t)v->plan.pp.vocab_pad;
	snprintf(v->ident.device_uuid, sizeof(v->ident.device_uuid), "%s",
		 d->dev.uuid);
	v->ident.cc_major = (uint32_t)d->dev.cc_major;
	v->ident.cc_minor = (uint32_t)d->dev.cc_minor;
	ret = ident_encode(&v->ident, v->ident_enc, sizeof(v->ident_enc),
			   &v->ident_len);
	if (!ret)
		ret = ident_digest(&v->ident, v->digest);
	if (ret)
		return base_errf(err, -ret, "cannot encode the identity: %s",
			       strerror(-ret));
	v->phases.parse_s = secs(rx_now_ns() - t0);
	log_info("phase parse: %.3f s: %u shards, %u tensors for this rank (tp rank %u of %u, pp rank %u of %u), %" PRIu64 " bytes in %u pools",
		 v->phases.parse_s, v->model.nshards, v->plan.ntensors,
		 d->o.tp_rank, d->o.tp_size, d->o.pp_rank, d->o.pp_size,
		 v->plan.total_bytes, v->plan.npools);
	return 0;
}

static const struct plan_piece *ld_piece(struct ld *L, uint32_t i)
{
	return &L->v->plan.pc[i];
}

/* A piece whose bytes are one contiguous source range. */
static bool contiguous(const struct plan_piece *pc)
{
	return pc->height <= 1 || pc->src_pitch == pc->width;
}

/* --- direct path ----------------------------------------------------------- */

/* Skips empty pieces; true while pieces remain. */
static bool gen_more(struct ld *L)
{
	while (L->ti < L->v->plan.npieces &&
	       L->tpos >= ld_piece(L, L->ti)->size) {
		L->ti++;
		L->tpos = 0;
	}
	return L->ti < L->v->plan.npieces && !L->err && !wcd_stopping(L->d);
}

static void direct_issue(struct ld *L);

/* wcd_turn_until's test: the reads and copies of the load are done */
static bool ld_finished(void *arg)
{
	return ((struct ld *)arg)->finished;
}

static void direct_read_cb(struct rx_read *r, int res)
{
	struct dread *dr = container_of(r, struct dread, r);
	struct ld *L = dr->L;

	L->inflight--;
	L->free_reads[L->nfree_reads++] = dr;
	if (res < 0)
		ld_fail(L, res, "read of %" PRIu64 " bytes of %s at offset %" PRIu64 " failed: %s",
			dr->len, ld_shard_name(L, dr->shard), r->off,
			strerror(-res));
	else if ((uint64_t)res < dr->len)
		ld_fail(L, EIO,
			"%s ended early: read %d of %" PRIu64 " bytes at offset %" PRIu64 " (was the file truncated while loading?)",
			ld_shard_name(L, dr->shard), res, dr->len, r->off);
	else {
		L->done_bytes += dr->len;
		L->read_bytes += dr->len;
	}
	ld_progress(L);
	direct_issue(L);
}

static void direct_issue(struct ld *L)
{
	while (L->nfree_reads && gen_more(L)) {
		const struct plan_piece *t = ld_piece(L, L->ti);
		const struct plan_tensor *e = &L->v->plan.t[t->entry];
		struct gpu_pool *pool = &L->v->pools[e->pool];
		struct dread *dr = L->free_reads[--L->nfree_reads];
		uint64_t src, len;
		uint8_t *dst;
		int ret;

		if (contiguous(t)) {
			len = t->size - L->tpos;
			if (len > WCD_READ_CHUNK)
				len = WCD_READ_CHUNK;
			src = t->file_off + L->tpos;
		} else {          /* one row of a dim-1 split */
			uint64_t row = L->tpos / t->width;
			uint64_t col = L->tpos % t->width;

			len = t->width - col;
			if (len > WCD_READ_CHUNK)
				len = WCD_READ_CHUNK;
			src = t->file_off + row * t->src_pitch + col;
		}
		dst = (uint8_t *)pool->host_ptr + e->pool_off + t->dst + L->tpos;
		dr->L = L;
		dr->len = len;
		dr->shard = t->shard;
		ret = rx_read_start(&L->d->loop, &dr->r, L->fd[t->shard], dst,
				    len, src, -1, RX_READ_ASYNC,
				    direct_read_cb);
		if (ret) {
			L->free_reads[L->nfree_reads++] = dr;
			ld_fail(L, ret, "cannot start a read of %s: %s",
				ld_shard_name(L, t->shard), strerror(-ret));
			break;
		}
		L->inflight++;
		L->tpos += len;
	}
	if (!L->inflight)
		L->finished = true;
}

struct hash_part {
	struct ld *L;
	unsigned k, n;
	pthread_t thread;
};

/* Hashes tensors k, k + n, k + 2n, ... in their pools. */
static void *hash_part_main(void *arg)
{
	struct hash_part *hp = arg;
	struct wcd_version *v = hp->L->v;

	for (uint32_t i = hp->k; i < v->plan.ntensors; i += hp->n) {
		const struct plan_tensor *t = &v->plan.t[i];
		const uint8_t *p = v->pools[t->pool].host_ptr;

		if (hp->L->hashed && (hp->L->hashed[i] ||
				      ((t->flags & PLAN_T_ALIAS) &&
				       hp->L->hashed[t->target])))
			continue;       /* the splice fill's workers did it
					 * (an alias has its target's:
					 * alias_hashes) */
		base_hash128(p + t->pool_off, t->size, v->hash[i]);
	}
	return NULL;
}

/* The direct path's hash phase: every tensor not hashed yet, on
 * --hash-threads threads (the loop's own thread when 0 or 1). Blocks the
 * loop meanwhile. */
static void direct_hash(struct ld *L)
{
	struct hash_part parts[HASHPOOL_MAX];
	unsigned n = L->d->o.hash_threads;
	uint64_t t0 = rx_now_ns();
	unsigned started = 1;

	if (n < 1)
		n = 1;
	if (n > L->v->plan.ntensors)
		n = L->v->plan.ntensors ? L->v->plan.ntensors : 1;
	for (unsigned k = 0; k < n; k++)
		parts[k] = (struct hash_part){ .L = L, .k = k, .n = n };
	for (unsigned k = 1; k < n; k++, started++)
		if (pthread_create(&parts[k].thread, NULL, hash_part_main,
				   &parts[k]))
			break;
	if (started < n) {      /* no thread: hash their share here */
		for (unsigned k = started; k < n; k++)
			hash_part_main(&parts[k]);
	}
	hash_part_main(&parts[0]);
	for (unsigned k = 1; k < started; k++)
		pthread_join(parts[k].thread, NULL);
	L->hash_ns += rx_now_ns() - t0;
}

/* The staged path's hashes of what did not stream (views, entries of
 * several pieces; aliases copy their target's), from the pools: on the
 * CPU where a pool has a mapping, else read back through a staging slot.
 * The device hashed the rest already (staged_finish). */
static void post_hash(struct ld *L)
{
	struct wcd_version *v = L->v;
	uint64_t t0 = rx_now_ns();
	uint8_t *bounce = L->slots ? L->slots[0].buf : NULL;

	for (uint32_t i = 0; !L->err && i < v->plan.ntensors; i++) {
		const struct plan_tensor *t = &v->plan.t[i];
		struct gpu_pool *pl = &v->pools[t->pool];
		struct base_hasher h;

		if (!t->size || ld_streamed(L, i) || ld_dev_post(L, i) ||
		    (t->flags & PLAN_T_ALIAS))
			continue;
		if (pl->host_ptr) {
			base_hash128((const uint8_t *)pl->host_ptr + t->pool_off,
				   t->size, v->hash[i]);
			continue;
		}
		base_hasher_init(&h);
		for (uint64_t o = 0; o < t->size; o += L->slot_size) {
			size_t n = t->size - o < L->slot_size ?
				   (size_t)(t->size - o) : (size_t)L->slot_size;
			int ret = bounce ? L->be->copy_from_pool(&L->d->dev, pl,
						t->pool_off + o, bounce, n) :
					   -ENOMEM;

			if (ret) {
				ld_fail(L, ret, "reading %s back to hash it failed: %s",
					t->name, strerror(-ret));
				break;
			}
			base_hasher_update(&h, bounce, n);
		}
		base_hasher_final(&h, v->hash[i]);
	}
	L->hash_ns += rx_now_ns() - t0;
}

/* An alias's hash is its target's (the same bytes). */
static void alias_hashes(struct wcd_version *v)
{
	for (uint32_t i = 0; i < v->plan.ntensors; i++)
		if (v->plan.t[i].flags & PLAN_T_ALIAS)
			memcpy(v->hash[i], v->hash[v->plan.t[i].target],
			       BASE_HASH_LEN);
}

/* Padded entries: the rows past the real ones must read as zeros. Host
 * pools are fresh memfds, whose pages read as zeros; device memory is
 * whatever it was, so the backend zeroes it. WCD_TEST_DIRTY_POOLS=1 (for
 * test/gpu/gpu_e2e) first fills every device pool with 0xa5, so that a
 * missing zeroing shows even where the driver hands out clean memory. */
static int zero_padding(struct wcd *d, struct wcd_version *v, char *err)
{
	bool dirty = fault_on(FAULT_DIRTY_POOLS);
	const struct gpu_backend *be = d->dev.be;
	int ret;

	for (uint32_t i = 0; dirty && be->pool_fill &&
			     i < v->npools; i++) {
		if (v->pools[i].host_ptr)
			continue;
		ret = be->pool_fill(&d->dev, &v->pools[i], 0, v->pools[i].size,
				    0xa5, err);
		if (ret)
			return ret;
	}
	for (uint32_t i = 0; i < v->plan.ntensors; i++) {
		const struct plan_tensor *t = &v->plan.t[i];
		struct gpu_pool *pl = &v->pools[t->pool];

		if ((t->flags & PLAN_T_VIEW) || t->alloc == t->size ||
		    pl->host_ptr)
			continue;
		if (!be->pool_fill)
			return base_errf(err, ENOTSUP, "the %s backend cannot zero the padding of %s",
				       be->name, t->name);
		ret = be->pool_fill(&d->dev, pl, t->pool_off + t->size,
				    t->alloc - t->size, 0, err);
		if (ret)
			return ret;
	}
	return 0;
}

/* --- run ------------------------------------------------------------------ */

#ifndef __NR_cachestat
#define __NR_cachestat 451        /* the same on every architecture */
#endif

struct ld_cachestat_range { uint64_t off, len; };
struct ld_cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted,
		 nr_recently_evicted;
};

/* Fraction (0..1) of the file's pages in the page cache, or -1: with
 * cachestat(2) (Linux 6.5), which walks the cache's folios, else with
 * mincore(2) over a mapping of the file, one lookup per page (0.11-0.16 s
 * for a 16 GB model on the H200's host, bench/RESULTS.md). */
static double cached_fraction(int fd, uint64_t size)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t pages = (size_t)((size + (uint64_t)page - 1) / (uint64_t)page);
	struct ld_cachestat_range r = { 0, size };
	struct ld_cachestat cs;
	unsigned char *vec;
	size_t in = 0;
	void *p;

	if (!size)
		return 1.0;
	if (!fault_on(FAULT_NO_CACHESTAT) &&
	    syscall(__NR_cachestat, fd, &r, &cs, 0) == 0)
		return cs.nr_cache >= pages ? 1.0 :
		       (double)cs.nr_cache / (double)pages;
	p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -1;
	vec = malloc(pages);
	if (vec && mincore(p, size, vec) == 0)
		for (size_t i = 0; i < pages; i++)
			in += vec[i] & 1;
	else
		in = SIZE_MAX;
	free(vec);
	munmap(p, size);
	return in == SIZE_MAX ? -1 : (double)in / (double)pages;
}

/* Opens every shard buffered and, for the staged path, O_DIRECT as well
 * where the file system allows it and the shard is not mostly cached. */
static int open_shards(struct ld *L, bool want_direct, char *err)
{
	uint32_t n = L->v->model.nshards;
	enum wcd_direct_io dio = L->d->o.direct_io;

	L->fd = malloc(n * sizeof(int));
	L->dfd = malloc(n * sizeof(int));
	if (!L->fd || !L->dfd)
		return base_errf(err, ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++)
		L->fd[i] = L->dfd[i] = -1;
	for (uint32_t i = 0; i < n; i++) {
		const struct model_shard *sh = &L->v->model.shards[i];
		double cached;

		struct stat sb;

		/* Reopened by path: it must still be a regular file (a FIFO
		 * put in its place would hang the loop in open or read). */
		L->fd[i] = open(sh->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (L->fd[i] < 0)
			return base_errf(err, errno, "cannot open %s: %s",
				       sh->path, strerror(errno));
		if (fstat(L->fd[i], &sb) || !S_ISREG(sb.st_mode))
			return base_errf(err, EINVAL,
				       "%s is no longer a regular file: replace it with the shard itself",
				       sh->path);
		/* The plan came from the header as parsed: a file of another
		 * size now (truncated, or rewritten) would be read short or
		 * not be what was planned. Nothing is served from it. */
		if ((uint64_t)sb.st_size != sh->size)
			return base_errf(err, EIO,
				       "%s is %" PRIu64 " bytes now but was %" PRIu64 " when its header was read: the shard changed during the load (truncated or rewritten); nothing of it is served; finish writing the model, then load it again",
				       sh->path, (uint64_t)sb.st_size, sh->size);
		if (!want_direct || dio == WCD_DIO_OFF)
			continue;
		if (dio == WCD_DIO_AUTO) {
			cached = cached_fraction(L->fd[i], sh->size);
			if (cached >= 0.5) {
				log_debug("%s is %.0f%% in the page cache: buffered reads",
					  sh->path, cached * 100);
				continue;
			}
			log_debug("%s is %.0f%% in the page cache: O_DIRECT reads where the file system takes them",
				  sh->path, cached < 0 ? 0.0 : cached * 100);
		}
		L->dfd[i] = open(sh->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC |
				 O_DIRECT);
		if (L->dfd[i] < 0)
			log_debug("%s: no O_DIRECT here (%s): buffered reads",
				  sh->path, strerror(errno));
	}
	return 0;
}

static void close_shards(struct ld *L)
{
	for (uint32_t i = 0; L->fd && i < L->v->model.nshards; i++) {
		if (L->fd[i] >= 0)
			close(L->fd[i]);
		if (L->dfd[i] >= 0)
			close(L->dfd[i]);
	}
	free(L->fd);
	free(L->dfd);
}

int load_pools_alloc(struct wcd *d, struct wcd_version *v, char *err)
{
	int ret;

	for (uint32_t i = 0; i < v->plan.npools; i++) {
		ret = d->dev.be->pool_create(&d->dev, &v->pools[i],
					     v->plan.pool_size[i], err);
		if (ret)
			return ret;
		v->npools = i + 1;
	}
	return 0;
}

static int create_pools(struct wcd *d, struct wcd_version *v, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	uint64_t free_b = 0, total_b = 0, need = 0, t = rx_now_ns();
	int ret;

	for (uint32_t i = 0; i < v->plan.npools; i++)
		need += gpu_align_up(v->plan.pool_size[i], d->dev.granularity);
	if (be->mem_info && be->mem_info(&d->dev, &free_b, &total_b) == 0 &&
	    need > free_b)
		return base_errf(err, ENOMEM,
			       "the model needs %" PRIu64 " bytes on device %s but only %" PRIu64 " of %" PRIu64 " are free: free memory or use more tensor-parallel ranks",
			       need, d->dev.name, free_b, total_b);
	step_done("device memory queried (the context, if still being made)", &t);
	ret = load_pools_alloc(d, v, err);
	step_done("pools created", &t);
	return ret;
}

int load_run(struct wcd *d, struct wcd_version *v, char *err)
{
	struct ld *L;
	uint64_t t0, t_read, ts;
	uint32_t ndirect = 0;
	unsigned threads;
	bool staged, splice, refused = false;
	int ret;

	/* drives the loop itself: never from a callback (wcreactor.h) */
	WC_ASSERT(!rx_loop_in_callback(&d->loop));
	ts = rx_now_ns();
	v->hash = calloc(v->plan.ntensors ? v->plan.ntensors : 1,
			 sizeof(*v->hash));
	L = calloc(1, sizeof(*L));
	if (!v->hash || !L) {
		free(L);
		return base_errf(err, ENOMEM, "out of memory");
	}
	v->hashed = d->o.hash;
	/* empty tensors get no piece: their hash is the empty input's */
	for (uint32_t i = 0; i < v->plan.ntensors; i++)
		if (!v->plan.t[i].size)
			base_hash128("", 0, v->hash[i]);
	L->d = d;
	L->v = v;
	L->be = d->dev.be;
	L->total = v->plan.read_bytes;
	/* only host pools have a CPU mapping (gpu.h: host_ptr) */
	staged = d->o.load_path == WCD_LOAD_STAGED ||
		 (v->plan.npools && d->dev.be != &gpu_host_backend);
	if (d->o.load_path == WCD_LOAD_DIRECT && staged) {
		ret = base_errf(err, EINVAL,
			      "--load-path direct needs pools with a CPU mapping, and device %s has none: use --load-path staged",
			      d->dev.name);
		goto out_free;
	}
	if (v->hashed && d->o.hash_on == WCD_HASH_DEVICE &&
	    (!staged || !L->be->hash_begin)) {
		ret = base_errf(err, EINVAL,
			      "--hash-on device needs a CUDA device, and %s is not one: use --hash-on cpu (or auto)",
			      d->dev.name);
		goto out_free;
	}
	splice = !staged && d->o.direct_fill == WCD_FILL_SPLICE;
	/* What needs no device context first (the shards' page-cache
	 * probes, the staging ring's pages): the context may still be in
	 * the making on its thread (GPU_CTX_ASYNC); then the pools. */
	ret = open_shards(L, staged, err);
	if (ret)
		goto out_close;
	ld_test_stall(v->model.path, "opened");
	step_done("shards opened (page-cache probes)", &ts);
	if (staged) {
		ret = staged_setup(L, err);
		if (ret)
			goto out_staged;
		step_done("staging set up", &ts);
	} else if (splice) {
		L->hashed = calloc(v->plan.ntensors ? v->plan.ntensors : 1, 1);
		if (!L->hashed) {
			ret = base_errf(err, ENOMEM, "out of memory");
			goto out_close;
		}
	} else {
		for (unsigned i = 0; i < WCD_READ_DEPTH; i++)
			L->free_reads[L->nfree_reads++] = &L->reads[i];
	}
	ret = create_pools(d, v, err);
	ts = rx_now_ns();
	if (!ret)
		ret = zero_padding(d, v, err);
	if (ret)
		goto out_staged;
	step_done("padding zeroed", &ts);
	v->phases.staged = staged;
	for (uint32_t i = 0; staged && i < v->model.nshards; i++)
		if (L->dfd[i] >= 0)
			ndirect++;
	v->phases.direct_io = ndirect > 0;

	L->start_ns = L->last_progress_ns = t0 = rx_now_ns();
	if (staged) {
		staged_start(L);
	} else if (splice) {
		ret = fill_run(L, &refused, err);
		if (ret)
			goto out_staged;
		L->fill_hash_ns = L->hash_ns;
		L->finished = true;
	} else {
		direct_issue(L);
	}
	ret = wcd_turn_until(d, ld_finished, L);
	if (ret < 0)
		ld_fail(L, ret, "the event loop failed: %s", strerror(-ret));
	step_done("reads and copies done", &ts);
	if (!L->err)
		ld_test_stall(v->model.path, "filled");
	if (staged)
		staged_finish(L);
	if (staged && v->hashed && !L->err)
		post_hash(L);
	if (v->hashed)
		alias_hashes(v);
	t_read = rx_now_ns() - t0;
	if (!L->err && wcd_stopping(d))
		ld_fail(L, ECANCELED, "stopped by a signal while loading");
	if (!L->err && !staged && v->hashed)
		direct_hash(L);
	/* After the hashes too (they read the pools, not the files): a
	 * write at any time from the header read until here fails it. */
	ld_check_shards(L);
	if (L->err) {
		ret = base_errf(err, L->err, "%s", L->errbuf);
		goto out_staged;
	}
	v->phases.read_s = secs(t_read);
	v->phases.read_bytes = L->read_bytes;
	v->phases.copy_s = secs(L->copy_ns);
	v->phases.hash_s = secs(L->dev_hash ? L->hash_tail_ns :
				L->hash_ns - L->fill_hash_ns);
	log_info("phase read: %.3f s, %.2f GB/s (%" PRIu64 " bytes read for %" PRIu64 ", %s, %u of %u shards O_DIRECT)",
		 v->phases.read_s, gbps(L->read_bytes, t_read), L->read_bytes,
		 L->total, staged ? "staged" : !splice ? "direct into the pools" :
		 refused ? "direct into the pools, pread: splice refused" :
			   "direct into the pools, splice",
		 ndirect, v->model.nshards);
	if (staged)
		log_info("phase copy: %.3f s, %.2f GB/s (copy_to_pool submissions, overlapped with the reads)",
			 v->phases.copy_s, gbps(L->total, L->copy_ns));
	else
		log_info("phase copy: none (direct path: the reads landed in the pools)");
	threads = d->o.hash_threads ? d->o.hash_threads : 1;
	if (v->hashed && L->dev_hash)
		log_info("phase hash: on the device, %.3f s, %.2f GB/s (XXH3-128 over the pools: %" PRIu64 " steps queued behind the copies, %.3f s of it after the last copy)",
			 v->phases.read_s, gbps(L->total, t_read),
			 L->dev_hash_steps, secs(L->hash_tail_ns));
	else if (v->hashed && staged)
		log_info("phase hash: %.3f s of hashing, %.2f GB/s per thread (XXH3-128 per tensor on %s, overlapped with the copies)",
			 v->phases.hash_s, gbps(L->total, L->hash_ns),
			 d->o.hash_threads ? "hash threads" : "the loop thread");
	else if (v->hashed && splice)
		log_info("phase hash: %.3f s after the fill on %u thread%s (the entries its workers could not hash as they landed), %.3f s of hashing overlapped with it (XXH3-128 per tensor on the fill's workers)",
			 v->phases.hash_s, threads, threads == 1 ? "" : "s",
			 secs(L->fill_hash_ns));
	else if (v->hashed)
		log_info("phase hash: %.3f s, %.2f GB/s (XXH3-128 per tensor on %u thread%s)",
			 v->phases.hash_s, gbps(L->total, L->hash_ns), threads,
			 threads == 1 ? "" : "s");
	else
		log_info("phase hash: skipped (--no-hash)");

	/* Seal: from here on no byte of a pool changes. */
	t0 = rx_now_ns();
	for (uint32_t i = 0; i < v->npools; i++) {
		ret = L->be->pool_seal(&d->dev, &v->pools[i], err);
		if (ret)
			goto out_staged;
	}
	v->phases.publish_s = secs(rx_now_ns() - t0);
	v->load_seconds = v->phases.parse_s + secs(t_read) +
			  (staged ? 0 : v->phases.hash_s);
	v->load_gbps = v->load_seconds > 0 ?
		       (double)L->total / 1e9 / v->load_seconds : 0;
	ret = 0;
out_staged:
	if (staged)
		staged_teardown(L);
out_close:
	close_shards(L);
	free(L->hashed);
out_free:
	free(L);
	return ret;
}

void load_version_free(struct wcd *d, struct wcd_version *v)
{
	for (uint32_t i = 0; i < v->npools; i++)
		d->dev.be->pool_release(&d->dev, &v->pools[i]);
	free(v->hash);
	plan_free(&v->plan);
	plan_rules_free(&v->rules);
	model_close(&v->model);
	memset(v, 0, sizeof(*v));
}
