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
 * queued, a re-hash, the fused views after a load) go through hash_batch:
 * one launch, a thread block per tensor, longest first, so that they run
 * side by side on the SMs instead of a chain at a time on a few streams.
 *
 * Bounds: CUDA_HASH_CHAINS hash streams; device memory n x 104 bytes
 * (accumulators, results, batch jobs), host memory n x 33 bytes, both
 * freed by hash_end. One tensor's steps must use one chain, in order (the
 * chain's stream keeps them in order); any number of tensors may share a
 * chain.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cuda_priv.h"
#include "xxh3_split.h"

_Static_assert(GPU_HASH_MIN_LEN == XS_MIN_LEN, "gpu.h and xxh3_split.h disagree");

enum { T_IDLE, T_RUNNING, T_DONE };

/* struct xk_job of cuda_xxh3.cu, as the host writes it */
struct xk_job_h {
	uint64_t base, len, out;
};
_Static_assert(sizeof(struct xk_job_h) == 24, "xk_job is three 8-byte words");

struct cuda_hash {
	uint32_t n;
	uint64_t *d_mem;               /* n x 8 accumulators, then n x 16 bytes,
					* then n batch jobs */
	struct xk_job_h *jobs;         /* host copy of the batch jobs */
	uint32_t njobs;                /* jobs used by batches so far */
	unsigned next_hs;              /* the hash stream of the next batch */
	uint64_t *blocks;              /* per tensor: blocks chained so far */
	uint8_t *tstate;               /* per tensor: T_* */
	cudaStream_t hs[CUDA_HASH_CHAINS];
	cudaEvent_t ev[CUDA_STREAMS];  /* "the last copy on copy stream i" */
	unsigned nhs, nev;
};

int gpu_cuda_xxh3_probe(void);
int gpu_cuda_xxh3_launch(cudaStream_t s, const void *base, uint64_t len,
			 uint64_t b0, uint64_t b1, uint64_t *state, int init,
			 int fin, uint8_t *out);
int gpu_cuda_xxh3_batch(cudaStream_t s, const void *jobs, unsigned n);

#define HASH_DEV_BYTES_PER_TENSOR (64 + 16 + sizeof(struct xk_job_h))

static void hash_free(struct cuda_hash *h)
{
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

int gpu_cuda_hash_begin(struct gpu_dev *dev, uint32_t n, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_hash *h;
	cudaError_t e;
	int ret;

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
	h = calloc(1, sizeof(*h));
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
	e = cudaMalloc((void **)&h->d_mem,
		       (size_t)(n ? n : 1) * HASH_DEV_BYTES_PER_TENSOR);
	if (e != cudaSuccess) {
		h->d_mem = NULL;
		hash_free(h);
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cannot allocate %zu bytes for hashing on %s: %s",
				     (size_t)n * HASH_DEV_BYTES_PER_TENSOR, dev->name,
				     cudaGetErrorString(e));
	}
	for (; h->nhs < CUDA_HASH_CHAINS; h->nhs++) {
		e = cudaStreamCreateWithFlags(&h->hs[h->nhs], cudaStreamNonBlocking);
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

int gpu_cuda_hash_batch(struct gpu_dev *dev, const struct gpu_hash_job *jobs,
			uint32_t n, unsigned copy_stream, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_hash *h = cd->hash;
	struct xk_job_h *hj;
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
	hs = h->hs[h->next_hs++ % CUDA_HASH_CHAINS];
	ev = h->ev[copy_stream % CUDA_STREAMS];
	e = cudaEventRecord(ev, cd->st[copy_stream % CUDA_STREAMS].s);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(hs, ev, 0);
	/* h->jobs lives until hash_end: the copy may read it late */
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(d_jobs + sizeof(*hj) * h->njobs, hj,
				    sizeof(*hj) * n, cudaMemcpyHostToDevice, hs);
	if (e == cudaSuccess)
		e = (cudaError_t)gpu_cuda_xxh3_batch(
			hs, d_jobs + sizeof(*hj) * h->njobs, n);
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

	if (!h)
		return out ? base_errf(err, EINVAL, "no device hash is running") : 0;
	gpu_cuda_enter(dev, NULL);
	for (unsigned i = 0; i < h->nhs; i++) {
		e2 = cudaStreamSynchronize(h->hs[i]);
		if (e == cudaSuccess)
			e = e2;
	}
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
	hash_free(h);
	return ret;
}
