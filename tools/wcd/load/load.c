/* SPDX-License-Identifier: MIT */
/*
 * The loader: model directory -> plan -> pools, through the reactor.
 *
 * load_prepare parses (config, index, every shard header), applies the
 * quantization gate before anything is loaded, builds this rank's plan and
 * packs it into pools (those on a thread of their own: prep.c), and
 * computes the identity.
 *
 * load_run fills the pools along one of three paths behind the backend
 * interface, each a struct ld_path (ld.h: setup, start, finish, teardown,
 * describe, with its state of its own); load_run chooses one
 * (choose_path) and calls its ops, the same for all:
 *
 *   direct  (host backend default: the pool has a CPU mapping, host_ptr)
 *           --direct-fill splice (the default, ld_fill_path): worker pool
 *           jobs splice each piece from the shard's page cache into the
 *           pool's memfd and hash each tensor as soon as it has landed
 *           (fill.c: why). --direct-fill read (ld_read_path, dread.c):
 *           io_uring reads straight from the shard files into the pool
 *           mapping. Then every tensor not hashed yet (all of them after
 *           read; views and aliases after splice) is hashed in the pool on
 *           --hash-threads jobs of the worker pool (the hash phase,
 *           ld_hash_rest).
 *
 *   staged  (ld_staged_path: the CUDA backend; --load-path staged runs it
 *           on the host)
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
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "err.h"
#include "load/load.h"
#include "load/ld.h"
#include "load/prep.h"
#include "load/dread.h"
#include "load/fill.h"
#include "load/staged.h"
#include "clock.h"
#include "log.h"
#include "daemon/fault.h"

/* Start-up timeline at debug level: what took how long since *t. */
static void step_done(const char *what, uint64_t *t)
{
	uint64_t n = rx_now_ns();

	log_debug("load step: %s in %.3f s", what, clock_ns_secs(n - *t));
	*t = n;
}

/* --- prepare ---------------------------------------------------------------- */

int load_prepare(struct wcd *d, struct wcd_version *v, char *err)
{
	bool reused;

	return load_prepare_again(d, v, NULL, &reused, err);
}

int load_prepare_again(struct wcd *d, struct wcd_version *v,
		       struct wcd_version *again, bool *reused, char *err)
{
	uint64_t t0 = rx_now_ns();
	int ret;

	/* headers, the quantization gate (before anything is planned or
	 * loaded), the layout and the packed plan, off the loop (prep.c) */
	ret = ld_prepare_bounded(d, v, again, reused, err);
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
	v->phases.parse_s = clock_ns_secs(rx_now_ns() - t0);
	log_info("phase parse: %.3f s%s: %u shards, %u tensors for this rank (tp rank %u of %u, pp rank %u of %u), %" PRIu64 " bytes in %u pools",
		 v->phases.parse_s,
		 *reused ? " (the plan kept from before: its files unchanged)" : "",
		 v->model.nshards, v->plan.ntensors,
		 d->o.tp_rank, d->o.tp_size, d->o.pp_rank, d->o.pp_size,
		 v->plan.total_bytes, v->plan.npools);
	return 0;
}

/* Padded entries: the rows past the real ones must read as zeros. Host
 * pools are fresh memfds, whose pages read as zeros; device memory is
 * whatever it was, so the backend zeroes it (load.h). */
int load_zero_padding(struct wcd *d, struct wcd_version *v, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	int ret;

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

/* A load's padding: WCD_TEST_DIRTY_POOLS=1 (for test/gpu/gpu_e2e) first
 * fills every device pool with 0xa5, so that a missing zeroing shows even
 * where the driver hands out clean memory. */
static int zero_padding(struct wcd *d, struct wcd_version *v, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	int ret;

	for (uint32_t i = 0; fault_on(FAULT_DIRTY_POOLS) && be->pool_fill &&
			     i < v->npools; i++) {
		if (v->pools[i].host_ptr)
			continue;
		ret = be->pool_fill(&d->dev, &v->pools[i], 0, v->pools[i].size,
				    0xa5, err);
		if (ret)
			return ret;
	}
	return load_zero_padding(d, v, err);
}

/* --- run ------------------------------------------------------------------ */

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
		if ((uint64_t)sb.st_size != sh->stamp.size)
			return base_errf(err, EIO,
				       "%s is %" PRIu64 " bytes now but was %" PRIu64 " when its header was read: the shard changed during the load (truncated or rewritten); nothing of it is served; finish writing the model, then load it again",
				       sh->path, (uint64_t)sb.st_size, sh->stamp.size);
		if (!want_direct || dio == WCD_DIO_OFF)
			continue;
		if (dio == WCD_DIO_AUTO) {
			cached = cached_fraction(L->fd[i], sh->stamp.size);
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

/* wcd_turn_until's test: the path's fill is done */
static bool ld_finished(void *arg)
{
	return ((struct ld *)arg)->finished;
}

/* The path that fills v's pools (ld_path): staged where the pools have no
 * CPU mapping or --load-path staged asks; else the direct path's splice
 * fill, or its read fill (--direct-fill read). NULL with err set when the
 * options cannot be met. */
static const struct ld_path *choose_path(struct wcd *d, struct wcd_version *v,
					 char *err)
{
	/* only host pools have a CPU mapping (gpu.h: host_ptr) */
	bool staged = d->o.load_path == WCD_LOAD_STAGED ||
		      (v->plan.npools && d->dev.be != &gpu_host_backend);

	if (d->o.load_path == WCD_LOAD_DIRECT && staged) {
		base_errf(err, EINVAL,
			  "--load-path direct needs pools with a CPU mapping, and device %s has none: use --load-path staged",
			  d->dev.name);
		return NULL;
	}
	if (v->hashed && d->o.hash_on == WCD_HASH_DEVICE &&
	    (!staged || !d->dev.be->hash_begin)) {
		base_errf(err, EINVAL,
			  "--hash-on device needs a CUDA device, and %s is not one: use --hash-on cpu (or auto)",
			  d->dev.name);
		return NULL;
	}
	if (staged)
		return &ld_staged_path;
	return d->o.direct_fill == WCD_FILL_SPLICE ? &ld_fill_path :
						      &ld_read_path;
}

/* The version's hash table (empty tensors get no piece: their hash is the
 * empty input's) and the load's state. NULL with err set. */
static struct ld *ld_new(struct wcd *d, struct wcd_version *v, char *err)
{
	struct ld *L;

	v->hash = calloc(v->plan.ntensors ? v->plan.ntensors : 1,
			 sizeof(*v->hash));
	L = calloc(1, sizeof(*L));
	if (!v->hash || !L) {
		free(L);
		base_errf(err, ENOMEM, "out of memory");
		return NULL;
	}
	v->hashed = d->o.hash;
	for (uint32_t i = 0; i < v->plan.ntensors; i++)
		if (!v->plan.t[i].size)
			base_hash128("", 0, v->hash[i]);
	L->d = d;
	L->v = v;
	L->be = d->dev.be;
	L->total = v->plan.read_bytes;
	return L;
}

/* Seals the pools (from here on no byte of one changes) and sets the
 * version's load figures. */
static int publish(struct ld *L, char *err)
{
	struct wcd_version *v = L->v;
	uint64_t t0 = rx_now_ns();
	int ret;

	for (uint32_t i = 0; i < v->npools; i++) {
		ret = L->be->pool_seal(&L->d->dev, &v->pools[i], err);
		if (ret)
			return ret;
	}
	v->phases.publish_s = clock_ns_secs(rx_now_ns() - t0);
	v->load_seconds = v->phases.parse_s + v->phases.read_s +
			  (L->path->hash_in_read ? 0 : v->phases.hash_s);
	v->load_gbps = v->load_seconds > 0 ?
		       (double)L->total / 1e9 / v->load_seconds : 0;
	return 0;
}

int load_run(struct wcd *d, struct wcd_version *v, char *err)
{
	const struct ld_path *path;
	struct ld *L;
	uint64_t ts;
	int ret;

	/* drives the loop itself: never from a callback (wcreactor.h) */
	WC_ASSERT(!rx_loop_in_callback(&d->loop));
	ts = rx_now_ns();
	L = ld_new(d, v, err);
	if (!L)
		return -ENOMEM;
	path = choose_path(d, v, err);
	if (!path) {
		ret = -EINVAL;
		goto out_free;
	}
	L->path = path;
	/* What needs no device context first (the shards' page-cache
	 * probes, the staging ring's pages): the context may still be in
	 * the making on its thread (GPU_CTX_ASYNC); then the pools. */
	ret = open_shards(L, path->o_direct, err);
	if (ret)
		goto out_close;
	ld_test_stall(v->model.path, "opened");
	step_done("shards opened (page-cache probes)", &ts);
	ret = path->setup(L, err);
	if (ret)
		goto out_teardown;
	step_done("path set up", &ts);
	ret = create_pools(d, v, err);
	ts = rx_now_ns();
	if (!ret)
		ret = zero_padding(d, v, err);
	if (ret)
		goto out_teardown;
	step_done("padding zeroed", &ts);
	v->phases.staged = path == &ld_staged_path;
	for (uint32_t i = 0; i < v->model.nshards; i++)
		if (L->dfd[i] >= 0)
			L->ndirect++;
	v->phases.direct_io = L->ndirect > 0;

	L->start_ns = L->last_progress_ns = rx_now_ns();
	ret = path->start(L, err);
	if (ret)
		goto out_teardown;
	ret = wcd_turn_until(d, ld_finished, L);
	if (ret < 0)
		ld_fail(L, ret, "the event loop failed: %s", strerror(-ret));
	step_done("reads and copies done", &ts);
	if (!L->err)
		ld_test_stall(v->model.path, "filled");
	path->finish(L);
	/* After the hashes too (they read the pools, not the files): a
	 * write at any time from the header read until here fails it. */
	ld_check_shards(L);
	if (L->err) {
		ret = base_errf(err, L->err, "%s", L->errbuf);
		goto out_teardown;
	}
	v->phases.read_s = clock_ns_secs(L->read_ns);
	v->phases.read_bytes = L->read_bytes;
	v->phases.copy_s = clock_ns_secs(L->copy_ns);
	v->phases.hash_s = clock_ns_secs(L->hash_phase_ns);
	path->describe(L, L->read_ns);
	ret = publish(L, err);
out_teardown:
	path->teardown(L);
out_close:
	close_shards(L);
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
