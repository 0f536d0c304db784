/* SPDX-License-Identifier: MIT */
/*
 * Tensor hashes on the device: the backend's hash_begin/hash_step/hash_end
 * (gpu.h) around the kernel in cuda_xxh3.cu.
 *
 * Why: hashing the staging slots on the CPU is a third pass over host
 * memory (page cache -> staging by io-wq, staging -> device by DMA, staging
 * -> hasher), and on the H200's host that pass alone cost a warm load a
 * third of its speed (bench/RESULTS.md). The device reads its own memory
 * at terabytes per second, so the hash moves there: after each piece's copy
 * (an event on the copy stream, waited for on a hash stream, no host
 * round trip), one launch advances the tensor's XXH3 chain over the whole
 * 1 KiB blocks that have landed; the last piece finishes the hash.
 * Whole tensors already in the pools (a wake's pool once its copy is
 * queued, a re-hash, the fused views after a load, an update session's
 * commit) go through hash_batch. Where the caller asks
 * (gpu_dev.hash_host_chains: an update's commit), its longest tensors
 * first go to the host chains (cuda_hash_host.c: summed here, chained on
 * host cores, which run a chain about six times as fast as one warp). The rest go in
 * rounds (cuda_xxh3.cu says why; gpu/hash_plan.c plans them): each round
 * gives every unfinished tensor, longest left first, a segment of at most
 * XR_SEG_BLOCKS 1 KiB blocks, until the round holds XR_ROUND_BLOCKS; its
 * sums run over the whole device, its chains side by side, and the
 * longest tensors advance in every round, so a batch takes about its
 * longest chain (66 GB/s on an H200) rather than a thread block's read
 * (14 GB/s a tensor); a tensor inside another's bytes (a fused view's
 * parts) chains from that one's sums instead of being summed again. Where
 * the host chains are not asked for or cannot be had
 * (WCACHE_CUDA_HOST_CHAINS=0, one core, no pinned memory), a batch's long
 * tensors (over XR_LONG_BLOCKS blocks:
 * a 1 GiB embedding) are taken out of the rounds and run beside them,
 * every block sum at once and then each whole chain in one thread block,
 * on two streams of their own (long_queue says why). Where the rounds'
 * scratch cannot be allocated (or a batch needs more segments than it
 * holds) the batch is one launch of a thread block per tensor, as before
 * the rounds.
 *
 * Bounds: CUDA_HASH_CHAINS hash streams; device memory n x 104 bytes
 * (accumulators, results, batch jobs), host memory n x 33 bytes, and from
 * the first batch 2 x 64 MiB of round scratch and a segment table of
 * n + XR_SEGS_EXTRA entries on both sides; for the first batch with
 * host chains 64 bytes per KiB of them on the device and as much pinned
 * host memory (at most 256 MiB each: 128 MiB for llama-8b's two 1 GiB
 * tensors) and up to HC_THREADS worker threads (asleep between hashes);
 * without them, for the first batch with long tensors 64 bytes per KiB
 * of them. A hash that ends well leaves its streams, events, device
 * memory, scratch and workers to the next (hash_park; a commit's hash
 * 4 ms shorter on an H200, gpu/README.md); an abandoning hash_end with
 * no hash running (the idle path before its device reset, close) frees
 * them. One tensor's steps must use one chain, in order (the chain's
 * stream keeps them in order); any number of tensors may share a chain.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cuda_hash_priv.h"
#include "xxh3_split.h"

_Static_assert(GPU_HASH_MIN_LEN == XS_MIN_LEN, "gpu.h and xxh3_split.h disagree");

#define HASH_DEV_BYTES_PER_TENSOR (64 + 16 + sizeof(struct xk_job_h))

static void hash_free(struct cuda_hash *h)
{
	gpu_cuda_hc_free(h);
	free(h->hc_t);
	for (unsigned i = 0; i < 2; i++) {
		if (h->lev[i])
			cudaEventDestroy(h->lev[i]);
		if (h->ls[i])
			cudaStreamDestroy(h->ls[i]);
	}
	if (h->lscr)
		cudaFree(h->lscr);
	for (unsigned i = 0; i < h->nrev; i++)
		cudaEventDestroy(i < 2 ? h->summed[i] : h->freed[i - 2]);
	if (h->scr[0])
		cudaFree(h->scr[0]);
	free(h->segs);
	for (unsigned i = 0; i < h->nhs; i++)
		cudaStreamDestroy(h->hs[i]);
	for (unsigned i = 0; i < h->nev; i++)
		cudaEventDestroy(h->ev[i]);
	if (h->d_mem)
		cudaFree(h->d_mem);
	free(h->blocks);
	free(h->tstate);
	free(h->jobs);
	free(h);
}

/* After a hash that ended well: its streams, events, per-tensor device
 * memory and scratch kept in cd for the next one, which would otherwise
 * make them again (on an H200 0.4-6.8 ms of a commit's hash_begin,
 * and the scratch's cudaMalloc in its first batch); the host's
 * per-tensor arrays are freed. What is kept (2 x 64
 * MiB of round scratch, the long tensors' sums: 128 MiB for llama-8b's
 * two 1 GiB tensors) is freed by an abandoning hash_end with no hash
 * running: the idle path, before its device reset, and close. */
static void hash_park(struct cuda_dev *cd, struct cuda_hash *h)
{
	free(h->blocks);
	free(h->tstate);
	free(h->jobs);
	free(h->hc_t);
	h->blocks = NULL;
	h->tstate = NULL;
	h->jobs = NULL;
	h->hc_t = NULL;
	if (cd->spare)
		hash_free(cd->spare);
	cd->spare = h;
}

/* A fresh hash of n tensors with the spare's streams, events, scratch and
 * device memory (those too small for n freed), else nothing made yet;
 * NULL when out of host memory. */
static struct cuda_hash *hash_take(struct cuda_dev *cd, uint32_t n)
{
	struct cuda_hash *h = cd->spare, *k;

	cd->spare = NULL;
	if (!h)
		return calloc(1, sizeof(*h));
	k = calloc(1, sizeof(*k));
	if (!k) {
		hash_free(h);
		return NULL;
	}
	memcpy(k->hs, h->hs, sizeof(k->hs));
	memcpy(k->ev, h->ev, sizeof(k->ev));
	k->nhs = h->nhs;
	k->nev = h->nev;
	memcpy(k->summed, h->summed, sizeof(k->summed));
	memcpy(k->freed, h->freed, sizeof(k->freed));
	k->nrev = h->nrev;
	memcpy(k->ls, h->ls, sizeof(k->ls));
	memcpy(k->lev, h->lev, sizeof(k->lev));
	k->lscr = h->lscr;
	k->lscr_blocks = h->lscr_blocks;
	memcpy(k->hcs, h->hcs, sizeof(k->hcs));
	k->hc_dscr = h->hc_dscr;
	k->hc_host = h->hc_host;
	k->hc_blocks = h->hc_blocks;
	k->hc_ev = h->hc_ev;
	k->hc_nev = h->hc_nev;
	k->hc_pool = h->hc_pool;
	if (h->d_cap >= n) {
		k->d_mem = h->d_mem;
		k->d_cap = h->d_cap;
	} else {
		cudaFree(h->d_mem);
	}
	/* the segment table is in the round scratch's allocation */
	if (h->scr[0] && h->segs_cap >= n + XR_SEGS_EXTRA) {
		memcpy(k->scr, h->scr, sizeof(k->scr));
		k->segs = h->segs;
		k->d_segs = h->d_segs;
		k->segs_cap = h->segs_cap;
		k->nsm = h->nsm;
		k->alone_smem = h->alone_smem;
	} else {
		if (h->scr[0])
			cudaFree(h->scr[0]);
		free(h->segs);
	}
	free(h);
	return k;
}

int gpu_cuda_hash_begin(struct gpu_dev *dev, uint32_t n, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_hash *h;
	cudaError_t e;
	int ret, lo, hi;

	if (cd->hash)
		return base_errf(err, EBUSY, "a device hash is already running on %s", dev->name);
	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	e = (cudaError_t)gpu_cuda_xxh3_probe();
	if (e != cudaSuccess) {
		cudaGetLastError();
		return base_errf(err, ENOTSUP,
				     "this build has no XXH3 kernel for %s (compute capability %d.%d): %s",
				     dev->name, dev->cc_major, dev->cc_minor,
				     cudaGetErrorString(e));
	}
	ret = gpu_cuda_streams_init(dev);
	if (ret)
		return base_errf(err, -ret, "cannot create the copy streams of %s", dev->name);
	h = hash_take(cd, n);
	if (!h)
		return base_errf(err, ENOMEM, "out of memory");
	h->n = n;
	h->blocks = calloc(n ? n : 1, sizeof(*h->blocks));
	h->tstate = calloc(n ? n : 1, 1);
	h->jobs = calloc(n ? n : 1, sizeof(*h->jobs));
	if (!h->blocks || !h->tstate || !h->jobs) {
		hash_free(h);
		return base_errf(err, ENOMEM, "out of memory");
	}
	e = cudaSuccess;
	if (!h->d_mem) {          /* else the spare's, with room for n */
		e = cudaMalloc((void **)&h->d_mem,
			       (size_t)(n ? n : 1) * HASH_DEV_BYTES_PER_TENSOR);
		h->d_cap = n ? n : 1;
	}
	if (e != cudaSuccess) {
		h->d_mem = NULL;
		hash_free(h);
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cannot allocate %zu bytes for hashing on %s: %s",
				     (size_t)n * HASH_DEV_BYTES_PER_TENSOR, dev->name,
				     cudaGetErrorString(e));
	}
	/* hs[1] runs the rounds' chains (rounds_queue) at the device's
	 * greatest priority: their thread blocks are placed before the next
	 * round's sums, which would otherwise fill every SM first (a batch of
	 * llama-8b's tensors and fused views: 27 -> 25 ms on an H200) */
	if (cudaDeviceGetStreamPriorityRange(&lo, &hi) != cudaSuccess) {
		cudaGetLastError();
		lo = hi = 0;
	}
	for (; h->nhs < CUDA_HASH_CHAINS; h->nhs++) {
		e = cudaStreamCreateWithPriority(&h->hs[h->nhs], cudaStreamNonBlocking,
						 h->nhs == 1 ? hi : lo);
		if (e != cudaSuccess)
			goto out_cuda;
	}
	for (; h->nev < CUDA_STREAMS; h->nev++) {
		e = cudaEventCreateWithFlags(&h->ev[h->nev], cudaEventDisableTiming);
		if (e != cudaSuccess)
			goto out_cuda;
	}
	cd->hash = h;
	return 0;
out_cuda:
	hash_free(h);
	return base_errf(err, gpu_cuda_rt_errno(e), "cannot set up hashing on %s: %s",
			     dev->name, cudaGetErrorString(e));
}

int gpu_cuda_hash_step(struct gpu_dev *dev, struct gpu_pool *pool,
		       uint64_t off, uint64_t len, uint32_t i, uint64_t landed,
		       unsigned copy_stream, unsigned chain, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_hash *h = cd->hash;
	uint64_t nb = xs_nblocks(len), b1;
	cudaStream_t hs;
	cudaEvent_t ev;
	bool fin = landed >= len;
	cudaError_t e;
	int ret;

	if (!h || i >= h->n || len <= XS_MIN_LEN || off % 16 ||
	    off > pool->alloc_size || len > pool->alloc_size - off ||
	    h->tstate[i] == T_DONE)
		return base_errf(err, EINVAL,
				     "bad device hash step (tensor %u, %llu bytes at %llu)",
				     i, (unsigned long long)len, (unsigned long long)off);
	ret = gpu_cuda_pool_ready(dev, pool, err);
	if (ret)
		return ret;
	/* hash_begin sets cd->hash only once every stream and event is made */
	WC_ASSERT(h->nhs == CUDA_HASH_CHAINS && h->nev == CUDA_STREAMS);
	hs = h->hs[chain % CUDA_HASH_CHAINS];
	ev = h->ev[copy_stream % CUDA_STREAMS];
	/* Always wait, even with no whole block to chain yet: a later step
	 * covers this piece's bytes too. */
	e = cudaEventRecord(ev, cd->st[copy_stream % CUDA_STREAMS].s);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(hs, ev, 0);
	if (e != cudaSuccess)
		goto out_cuda;
	b1 = fin ? nb : landed / XS_BLOCK;
	if (b1 > nb)
		b1 = nb;
	if (!fin && b1 <= h->blocks[i])
		return 0;
	e = (cudaError_t)gpu_cuda_xxh3_launch(
		hs, (const char *)(uintptr_t)pool->dev_ptr + off, len,
		h->blocks[i], b1, h->d_mem + (uint64_t)8 * i,
		h->tstate[i] == T_IDLE, fin,
		(uint8_t *)(h->d_mem + (uint64_t)8 * h->n) + (uint64_t)16 * i);
	if (e != cudaSuccess)
		goto out_cuda;
	h->blocks[i] = b1;
	h->tstate[i] = fin ? T_DONE : T_RUNNING;
	return 0;
out_cuda:
	return base_errf(err, gpu_cuda_rt_errno(e),
			     "cannot queue the hash of a tensor on %s: %s",
			     dev->name, cudaGetErrorString(e));
}

static int job_cmp(const void *a, const void *b)
{
	const struct xk_job_h *x = a, *y = b;

	return x->len < y->len ? 1 : x->len > y->len ? -1 : 0;
}

/* The rounds' scratch, segment table and events, made at the first batch
 * of a hash; false (once, then the batches fall back) where they cannot
 * be. */
static bool rounds_ready(struct cuda_hash *h)
{
	uint64_t scr_words = (uint64_t)XR_ROUND_BLOCKS * 8;
	uint32_t cap = h->n + XR_SEGS_EXTRA;
	uint64_t *mem = NULL;
	int dev, nsm = 0;
	cudaError_t e;

	if (h->scr[0] || h->rounds_tried)
		return h->scr[0] != NULL;
	h->rounds_tried = true;
	if (cudaGetDevice(&dev) == cudaSuccess &&
	    cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount,
				   dev) == cudaSuccess && nsm > 0)
		h->nsm = (unsigned)nsm;
	cudaGetLastError();
	h->alone_smem = gpu_cuda_xxh3_alone_smem();
	h->segs = malloc(sizeof(*h->segs) * cap);
	if (!h->segs)
		return false;
	e = cudaMalloc((void **)&mem, sizeof(uint64_t) * 2 * scr_words +
				      sizeof(*h->segs) * cap);
	/* counted once made: hash_free destroys those */
	while (e == cudaSuccess && h->nrev < 4 &&
	       (e = cudaEventCreateWithFlags(h->nrev < 2 ?
					     &h->summed[h->nrev] :
					     &h->freed[h->nrev - 2],
					     cudaEventDisableTiming)) == cudaSuccess)
		h->nrev++;
	if (e != cudaSuccess) {
		cudaGetLastError();      /* not sticky: the fallback runs */
		if (mem)
			cudaFree(mem);
		free(h->segs);
		h->segs = NULL;
		return false;
	}
	h->scr[0] = mem;
	h->scr[1] = mem + scr_words;
	h->d_segs = (struct hash_seg *)(mem + 2 * scr_words);
	h->segs_cap = cap;
	return true;
}

/*
 * The long jobs hj[0..k) (longest first, more than XR_LONG_BLOCKS blocks
 * each) queued as one round of one segment a tensor, on streams of their
 * own after the copy event ev: every block sum at once into a scratch of
 * their own (64 bytes a KiB: 128 MiB for llama-8b's two 1 GiB tensors),
 * then each tensor's whole chain in one thread block on an SM of its
 * own (gpu_cuda_xxh3_alone_smem). Their chains are the longest of a
 * batch: in rounds each of their segments waited for its round's sums
 * and ran beside sums blocks that took its SM's issue slots (llama-8b's
 * 16 GB and fused views: 25 ms, against 15.5 ms for a 1 GiB chain
 * alone); here they start at once, beside the rounds of the rest (with
 * the rounds' chains alone too: 16.8 ms). 0 queued, 1 when the scratch
 * or the streams cannot be had (nothing queued: the rounds take them),
 * or a cudaError_t.
 */
static int long_queue(struct cuda_hash *h, const struct xk_job_h *hj,
		      uint32_t k, cudaEvent_t ev, const uint8_t *results)
{
	uint64_t total = 0, flat = 0;
	uint32_t s = h->nsegs;
	cudaError_t e = cudaSuccess;
	int lo, hi;

	if (h->long_tried || k > h->segs_cap - h->nsegs)
		return 1;
	h->long_tried = true;
	for (uint32_t j = 0; j < k; j++)
		total += xs_nblocks(hj[j].len);
	if (cudaDeviceGetStreamPriorityRange(&lo, &hi) != cudaSuccess)
		lo = hi = 0;
	/* a failed create leaves its handle NULL: hash_free ends the rest */
	for (unsigned i = 0; i < 2 && e == cudaSuccess; i++) {
		if (!h->ls[i])       /* else the spare's (hash_take) */
			e = cudaStreamCreateWithPriority(&h->ls[i],
							 cudaStreamNonBlocking, hi);
		if (e == cudaSuccess && !h->lev[i])
			e = cudaEventCreateWithFlags(&h->lev[i],
						     cudaEventDisableTiming);
	}
	if (e == cudaSuccess && h->lscr_blocks < total) {
		if (h->lscr)         /* the spare's, too small */
			cudaFree(h->lscr);
		h->lscr_blocks = 0;
		e = cudaMalloc((void **)&h->lscr, sizeof(uint64_t) * 8 * total);
		if (e == cudaSuccess)
			h->lscr_blocks = total;
		else
			h->lscr = NULL;
	}
	if (e != cudaSuccess) {
		cudaGetLastError();      /* not sticky: the rounds run */
		return 1;
	}
	for (uint32_t j = 0; j < k; j++) {
		uint64_t nb = xs_nblocks(hj[j].len);
		uint64_t i = (hj[j].out - (uint64_t)(uintptr_t)results) / 16;

		h->segs[s++] = (struct hash_seg){
			.base = hj[j].base, .len = hj[j].len, .b0 = 0,
			.nblk = nb, .flat0 = flat,
			.state = (uint64_t)(uintptr_t)(h->d_mem + 8 * i),
			.out = hj[j].out, .flags = HASH_SEG_INIT | HASH_SEG_FIN,
		};
		flat += nb;
	}
	e = cudaStreamWaitEvent(h->ls[0], ev, 0);
	/* lev[1] ("freed"), if recorded at all, was by a hash that ended (its
	 * streams waited for): waiting on it is no wait */
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(h->d_segs + h->nsegs, h->segs + h->nsegs,
				    sizeof(*h->segs) * k,
				    cudaMemcpyHostToDevice, h->ls[0]);
	if (e == cudaSuccess)
		e = (cudaError_t)gpu_cuda_xxh3_round(h->ls[0], h->ls[1],
						     h->lev[0], h->lev[1],
						     h->d_segs + h->nsegs, k, k,
						     total, h->lscr, h->alone_smem);
	h->nsegs = s;
	return (int)e;
}

/* The n jobs hj (longest first) cut into rounds (hash_plan_rounds) and
 * queued on hs[0] (sums) and hs[1] (chains), after the copy event ev; 1
 * when the segment table is too small (nothing queued: fall back), 0, or
 * a cudaError_t. */
static int rounds_queue(struct cuda_hash *h, const struct xk_job_h *hj,
			uint32_t n, cudaEvent_t ev, const uint8_t *results)
{
	struct hash_pjob *pj = malloc(sizeof(*pj) * (n ? n : 1));
	struct hash_round *rd = NULL;
	cudaStream_t ss = h->hs[0], cs = h->hs[1];
	uint32_t nseg = 0, nrd = 0;
	int ret;

	if (!pj)
		return 1;
	for (uint32_t k = 0; k < n; k++) {
		uint64_t i = (hj[k].out - (uint64_t)(uintptr_t)results) / 16;

		pj[k] = (struct hash_pjob){
			.base = hj[k].base, .len = hj[k].len,
			.state = (uint64_t)(uintptr_t)(h->d_mem + 8 * i),
			.out = hj[k].out,
		};
	}
	ret = hash_plan_rounds(pj, n, XR_SEG_BLOCKS, XR_ROUND_BLOCKS,
			       h->segs + h->nsegs, h->segs_cap - h->nsegs,
			       &nseg, &rd, &nrd);
	free(pj);
	if (ret)                  /* too small, or no memory: fall back */
		return 1;
	/* h->segs lives until hash_end: the copy may read it late */
	ret = cudaStreamWaitEvent(ss, ev, 0);
	if (ret == cudaSuccess)
		ret = cudaMemcpyAsync(h->d_segs + h->nsegs, h->segs + h->nsegs,
				      sizeof(*h->segs) * nseg,
				      cudaMemcpyHostToDevice, ss);
	/* a round's chains each on an SM of their own where they fit in one
	 * wave (the sums blocks beside a chain slow its one warp: llama-8b's
	 * 16 GB and views 19.2 -> 16.9 ms on an H200); more segments than
	 * SMs (thousands of small tensors) share them */
	for (uint32_t r = 0; r < nrd && ret == cudaSuccess; r++, h->round++)
		ret = gpu_cuda_xxh3_round(ss, cs, h->summed[h->round & 1],
					  h->freed[h->round & 1],
					  h->d_segs + h->nsegs + rd[r].first,
					  rd[r].nseg, rd[r].nchain,
					  rd[r].nblocks, h->scr[h->round & 1],
					  h->nsm && rd[r].nchain <= h->nsm ?
					  h->alone_smem : 0);
	h->nsegs += nseg;
	free(rd);
	return ret;
}

int gpu_cuda_hash_batch(struct gpu_dev *dev, const struct gpu_hash_job *jobs,
			uint32_t n, unsigned copy_stream, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_hash *h = cd->hash;
	struct xk_job_h *hj, *rest;
	uint32_t nrest, nlong = 0, nhost = 0;
	uint8_t *results, *d_jobs;
	cudaStream_t hs;
	cudaEvent_t ev;
	cudaError_t e;
	int ret;

	if (!h)
		return base_errf(err, EINVAL, "no device hash is running");
	if (n > h->n - h->njobs)
		return base_errf(err, EINVAL,
			       "a hash batch of %u tensors is more than the %u left of this hash",
			       n, h->n - h->njobs);
	results = (uint8_t *)(h->d_mem + (uint64_t)8 * h->n);
	d_jobs = results + (uint64_t)16 * h->n;
	hj = h->jobs + h->njobs;
	for (uint32_t k = 0; k < n; k++) {
		const struct gpu_hash_job *j = &jobs[k];

		if (j->i >= h->n || j->len <= XS_MIN_LEN || j->off % 16 ||
		    j->off > j->pool->alloc_size ||
		    j->len > j->pool->alloc_size - j->off ||
		    h->tstate[j->i] != T_IDLE)
			return base_errf(err, EINVAL,
				       "bad device hash batch job (tensor %u, %llu bytes at %llu)",
				       j->i, (unsigned long long)j->len,
				       (unsigned long long)j->off);
		for (uint32_t m = 0; m < k; m++)
			if (jobs[m].i == j->i)
				return base_errf(err, EINVAL,
					       "tensor %u is twice in one hash batch",
					       j->i);
	}
	for (uint32_t k = 0; k < n; k++) {
		ret = gpu_cuda_pool_ready(dev, jobs[k].pool, err);
		if (ret)
			return ret;
		hj[k] = (struct xk_job_h){
			.base = (uint64_t)jobs[k].pool->dev_ptr + jobs[k].off,
			.len = jobs[k].len,
			.out = (uint64_t)(uintptr_t)(results + (uint64_t)16 * jobs[k].i),
		};
	}
	if (!n)
		return 0;
	/* longest first: thread blocks start in index order, and the
	 * longest chain bounds the batch */
	qsort(hj, n, sizeof(*hj), job_cmp);
	rest = hj;
	nrest = n;
	hs = h->hs[h->next_hs++ % CUDA_HASH_CHAINS];
	ev = h->ev[copy_stream % CUDA_STREAMS];
	e = cudaEventRecord(ev, cd->st[copy_stream % CUDA_STREAMS].s);
	if (e == cudaSuccess && rounds_ready(h)) {
		ret = gpu_cuda_hc_queue(h, dev, hj, n, ev, results, &nhost);
		if (ret != 0) {
			e = (cudaError_t)ret;
			goto queued;
		}
		rest = hj + nhost;
		nrest = n - nhost;
		while (nlong < nrest &&
		       xs_nblocks(rest[nlong].len) > XR_LONG_BLOCKS)
			nlong++;
		ret = nlong ? long_queue(h, rest, nlong, ev, results) : 1;
		if (ret != 0 && ret != 1) {
			e = (cudaError_t)ret;
			goto queued;
		}
		if (ret == 0) {          /* the long ones are queued */
			rest += nlong;
			nrest -= nlong;
		} else {
			nlong = 0;
		}
		ret = nrest ? rounds_queue(h, rest, nrest, ev, results) : 0;
		if (ret != 1) {
			e = (cudaError_t)ret;
			goto queued;
		}
	}
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(hs, ev, 0);
	/* h->jobs lives until hash_end: the copy may read it late */
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(d_jobs + sizeof(*hj) * (rest - h->jobs),
				    rest, sizeof(*hj) * nrest,
				    cudaMemcpyHostToDevice, hs);
	if (e == cudaSuccess)
		e = (cudaError_t)gpu_cuda_xxh3_batch(
			hs, d_jobs + sizeof(*hj) * (rest - h->jobs), nrest);
queued:
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
			       "cannot queue the hashes of %u tensors on %s: %s",
			       n, dev->name, cudaGetErrorString(e));
	for (uint32_t k = 0; k < n; k++)
		h->tstate[jobs[k].i] = T_DONE;
	h->njobs += n;
	return 0;
}

int gpu_cuda_hash_end(struct gpu_dev *dev, uint8_t (*out)[16], char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_hash *h = cd->hash;
	cudaError_t e = cudaSuccess, e2;
	uint8_t *res = NULL;
	int ret = 0;

	if (!h) {
		if (out)
			return base_errf(err, EINVAL, "no device hash is running");
		if (cd->spare) {      /* idle or close: nothing kept */
			gpu_cuda_enter(dev, NULL);
			hash_free(cd->spare);
			cd->spare = NULL;
		}
		return 0;
	}
	gpu_cuda_enter(dev, NULL);
	for (unsigned i = 0; i < h->nhs; i++) {
		e2 = cudaStreamSynchronize(h->hs[i]);
		if (e == cudaSuccess)
			e = e2;
	}
	for (unsigned i = 0; i < 2; i++) {
		e2 = h->ls[i] ? cudaStreamSynchronize(h->ls[i]) : cudaSuccess;
		if (e == cudaSuccess)
			e = e2;
		e2 = h->hcs[i] ? cudaStreamSynchronize(h->hcs[i]) : cudaSuccess;
		if (e == cudaSuccess)
			e = e2;
	}
	e2 = (cudaError_t)gpu_cuda_hc_end(h);
	if (e == cudaSuccess)
		e = e2;
	cd->hash = NULL;
	if (!out)
		goto out_free;
	if (e != cudaSuccess) {
		ret = base_errf(err, gpu_cuda_rt_errno(e),
				    "hashing on %s failed: %s", dev->name,
				    cudaGetErrorString(e));
		goto out_free;
	}
	res = malloc((size_t)(h->n ? h->n : 1) * 16);
	if (!res) {
		ret = base_errf(err, ENOMEM, "out of memory");
		goto out_free;
	}
	e = cudaMemcpy(res, h->d_mem + (uint64_t)8 * h->n, (size_t)h->n * 16,
		       cudaMemcpyDeviceToHost);
	if (e != cudaSuccess) {
		ret = base_errf(err, gpu_cuda_rt_errno(e),
				    "cannot read the hashes back from %s: %s",
				    dev->name, cudaGetErrorString(e));
		goto out_free;
	}
	for (uint32_t k = 0; k < h->hc_n; k++)
		memcpy(res + (uint64_t)16 * h->hc_t[k].i, h->hc_t[k].out, 16);
	for (uint32_t i = 0; i < h->n; i++) {
		if (h->tstate[i] == T_RUNNING) {
			ret = base_errf(err, EIO,
					    "the device hash of tensor %u was never finished", i);
			goto out_free;
		}
		if (h->tstate[i] == T_DONE)
			memcpy(out[i], res + (uint64_t)16 * i, 16);
	}
out_free:
	free(res);
	if (out && e == cudaSuccess)
		hash_park(cd, h);
	else
		hash_free(h);
	return ret;
}
