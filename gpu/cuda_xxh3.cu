/* SPDX-License-Identifier: MIT */
/*
 * The XXH3-128 kernel: advances one tensor's hash over bytes already in a
 * pool (gpu/xxh3_split.h has the arithmetic and why it splits).
 *
 * One thread block per launch, warp-specialized and double-buffered:
 * warps 1..8 (256 threads) compute the sums of the next XK_CHUNK 1 KiB
 * blocks, one block per thread, while lanes 0..7 of warp 0 chain the
 * previous chunk's sums through the scramble, one lane per accumulator.
 * The chain (a few dependent integer operations per kilobyte and lane) is
 * what bounds one launch; the loader runs one launch per staging piece on
 * one of several hash streams, so several tensors advance at once.
 * xk_batch runs the same per thread block, one whole tensor each, for
 * tensors already in the pools: n chains side by side in one launch (what
 * a batch falls back to when the rounds below get no scratch memory).
 *
 * Only this file is compiled by nvcc (the Makefile builds every .cu in
 * gpu/ where CUDA is on); gpu/cuda_hash.c calls it.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hash_plan.h"
#include "xxh3_split.h"

#define XK_CHUNK 256u                    /* blocks per chunk = compute threads */
#define XK_THREADS (32u + XK_CHUNK)      /* warp 0 chains, the rest sum */

/* Thread t (of XK_CHUNK) adds up block b of the tensor at base. */
static __device__ __forceinline__ void block_sum(uint64_t sum[8],
						 const uint8_t *p,
						 const uint64_t *kw)
{
	const ulonglong2 *q = (const ulonglong2 *)p;

#pragma unroll
	for (unsigned i = 0; i < 8; i++)
		sum[i] = 0;
#pragma unroll 4
	for (unsigned s = 0; s < XS_STRIPES_PER_BLOCK; s++) {
		uint64_t v[8], k[8];

#pragma unroll
		for (unsigned j = 0; j < 4; j++) {
			ulonglong2 w = __ldg(q + s * 4 + j);

			v[2 * j] = w.x;
			v[2 * j + 1] = w.y;
		}
#pragma unroll
		for (unsigned i = 0; i < 8; i++)
			k[i] = kw[s + i];
		xs_stripe_add(sum, v, k);
	}
}

/* Blocks [b0, b1) of the tensor at base (len bytes, 16-byte aligned) go
 * into the chain whose accumulators are in state (xs_init'ed first when
 * init); when fin, the tail is added and the canonical hash written to out
 * (b1 must then be xs_nblocks(len)). */
static __device__ __forceinline__ void
xk_run(const uint8_t *base, uint64_t len, uint64_t b0, uint64_t b1,
       uint64_t *state, int init, int fin, uint8_t *out)
{
	__shared__ uint64_t kw[XS_SECRET_WORDS];
	__shared__ uint64_t sums[2][XK_CHUNK][8];
	__shared__ uint64_t acc_s[8];
	unsigned tid = threadIdx.x;
	uint64_t nblk = b1 - b0;
	uint64_t nchunks = (nblk + XK_CHUNK - 1) / XK_CHUNK;
	uint64_t acc = 0, key = 0;

	if (tid < XS_SECRET_WORDS)
		kw[tid] = xs_secret64(8 * tid);
	if (tid < 8) {
		acc = init ? xs_init1(tid) : state[tid];
	}
	__syncthreads();
	if (tid < 8)
		key = kw[16 + tid];
	if (tid >= 32 && nchunks) {
		uint64_t b = tid - 32;

		if (b < nblk)
			block_sum(sums[0][b], base + (b0 + b) * XS_BLOCK, kw);
	}
	__syncthreads();
	for (uint64_t c = 0; c < nchunks; c++) {
		uint64_t n = nblk - c * XK_CHUNK;

		if (n > XK_CHUNK)
			n = XK_CHUNK;
		if (tid >= 32) {
			uint64_t b = (c + 1) * XK_CHUNK + tid - 32;

			if (b < nblk)
				block_sum(sums[(c + 1) & 1][tid - 32],
					  base + (b0 + b) * XS_BLOCK, kw);
		} else if (tid < 8) {
			const uint64_t (*s)[8] = sums[c & 1];

			for (uint64_t j = 0; j < n; j++)
				acc = xs_scramble1(acc, s[j][tid], key);
		}
		__syncthreads();
	}
	if (!fin) {
		if (tid < 8)
			state[tid] = acc;
		return;
	}
	if (tid < 8)
		acc_s[tid] = acc;
	__syncthreads();
	if (tid == 0) {
		uint64_t a[8];

		for (unsigned i = 0; i < 8; i++)
			a[i] = acc_s[i];
		xs_finish(a, base, len, out);
	}
}

__global__ void __launch_bounds__(XK_THREADS)
xk_advance(const uint8_t *base, uint64_t len, uint64_t b0, uint64_t b1,
	   uint64_t *state, int init, int fin, uint8_t *out)
{
	xk_run(base, len, b0, b1, state, init, fin, out);
}

/* One whole tensor per thread block: thread block k hashes jobs[k] from
 * its first byte to its canonical hash (init and fin in one), so that n
 * tensors already in the pools advance side by side on up to n SMs
 * instead of one chain each on a few streams (a chain is sequential: the
 * longest tensor alone bounds a batch). */
struct xk_job {
	const uint8_t *base;
	uint64_t len;
	uint8_t *out;
};

__global__ void __launch_bounds__(XK_THREADS)
xk_batch(const struct xk_job *jobs)
{
	const struct xk_job *j = &jobs[blockIdx.x];
	const uint8_t *base = j->base;
	uint64_t len = j->len;
	uint8_t *out = j->out;

	xk_run(base, len, 0, xs_nblocks(len), NULL, 1, 1, out);
}

/*
 * Rounds: one tensor's sums spread over the whole device. A thread block
 * on one SM reads about 30 GB/s (the sums of xk_run are what bounds one
 * chain at 14 GB/s there), the chain alone runs at about 66 GB/s (15.5 ns
 * a step on an H200), and the device reads 2.5 TB/s this way (one
 * thread a block; xr_sums4's four threads a block read faster: llama-8b's
 * layers 8.1 ms against 10.3 on an H100). So a batch
 * is cut into rounds (gpu/cuda_hash.c schedules them): a round is a list
 * of segments, at most XR_SEG_BLOCKS blocks of one tensor each; xr_sums4
 * computes every block sum of the round, four threads a block, into a
 * scratch buffer (64 bytes per 1 KiB block); xr_chain runs each
 * segment's chain over them, a thread block per segment (its sums staged
 * through shared memory), carrying the accumulators from one round to
 * the next in the tensor's state and finishing the hash in the segment
 * that ends it. Two scratch buffers, so the sums of round r + 1 may run
 * beside the chains of round r; on an H200 they mostly did not (llama-8b's
 * 16 GB: sums alone 6.2 ms, chains alone 15.4 ms, both 21.5 ms): a chain
 * is one warp's latency-bound arithmetic, and the sums blocks sharing its
 * SM took its issue slots. Keeping the sums grid off some SMs made the
 * sums slower than the overlap gained (25-27 ms); a chain block that
 * takes an SM's whole shared memory (gpu_cuda_xxh3_alone_smem) keeps the sums off its
 * SM alone, and cuda_hash.c launches a round's chains that way where
 * they fit in one wave, and chains a batch's tensors over 256 MiB whole,
 * beside the rounds (llama-8b's tensors and fused views: 25 -> 16.8 ms).
 */
struct xr_seg {
	const uint8_t *base;             /* the tensor's first byte */
	uint64_t len;                    /* the tensor's bytes */
	uint64_t b0, nblk;               /* its blocks [b0, b0 + nblk) */
	uint64_t flat0;                  /* the first block's sum in scratch */
	uint64_t *state;                 /* its 8 accumulators between rounds */
	uint8_t *out;                    /* its canonical hash, when it ends */
	uint64_t flags;                  /* XR_INIT, XR_FIN */
};

#define XR_INIT 1u
#define XR_FIN 2u
static_assert(XR_INIT == HASH_SEG_INIT && XR_FIN == HASH_SEG_FIN &&
	      sizeof(struct xr_seg) == sizeof(struct hash_seg),
	      "a segment as gpu/hash_plan.h plans it");
#define XR_SUMS_THREADS 256u
#define XR_CHAIN_THREADS 128u            /* warp 0 chains, 1..3 stage */
#define XR_C 256u                        /* chain steps per staged chunk */
#define XR_STAGERS 96u
#define XR_STAGE_PER ((XR_C * 4u + XR_STAGERS - 1) / XR_STAGERS)
#define XR_U 16u                         /* chain steps read ahead */

/* The first byte of flat block g of a round: its segment found by a
 * binary search over the round's segments (their flat0 ascending). */
static __device__ __forceinline__ const uint8_t *
block_at(const struct xr_seg *segs, unsigned nseg, uint64_t g)
{
	unsigned lo = 0, hi = nseg;

	while (hi - lo > 1) {
		unsigned mid = (lo + hi) / 2;

		if (segs[mid].flat0 <= g)
			lo = mid;
		else
			hi = mid;
	}
	return segs[lo].base + (segs[lo].b0 + g - segs[lo].flat0) * XS_BLOCK;
}

/* One thread per block of the round (the baseline that xr_sums4
 * replaced, run where WCACHE_CUDA_SUMS=thread; block_at finds it). Block g's
 * eight sums at scr[8 g ..] (lanes = 0: a round's chains read them a
 * block at a time), or lane-major, lane l's at scr[l * lanes + g] (the
 * host chains: each host task streams only its own lanes). */
__global__ void __launch_bounds__(XR_SUMS_THREADS)
xr_sums(const struct xr_seg *segs, unsigned nseg, uint64_t nblocks,
	uint64_t *scr, uint64_t lanes)
{
	__shared__ uint64_t kw[XS_SECRET_WORDS];
	uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint64_t sum[8];
	ulonglong2 *o;

	if (threadIdx.x < XS_SECRET_WORDS)
		kw[threadIdx.x] = xs_secret64(8 * threadIdx.x);
	__syncthreads();
	if (g >= nblocks)
		return;
	block_sum(sum, block_at(segs, nseg, g), kw);
	if (lanes) {
#pragma unroll
		for (unsigned i = 0; i < 8; i++)
			scr[i * lanes + g] = sum[i];
		return;
	}
	o = (ulonglong2 *)(scr + 8 * g);
#pragma unroll
	for (unsigned i = 0; i < 4; i++)
		o[i] = make_ulonglong2(sum[2 * i], sum[2 * i + 1]);
}

/* As xr_sums, four threads to a block: thread j of block g adds up
 * lanes 2j and 2j + 1 of its 16 stripes, so that one load of a warp reads
 * 64 contiguous bytes of each of its 8 blocks (xr_sums' thread reads a
 * whole 1 KiB block itself: a load of its warp touched 32 blocks 1 KiB
 * apart, 16 bytes of each). No sum crosses threads: no shuffle. */
#define XR_SUMS_PARTS 4u
__global__ void __launch_bounds__(XR_SUMS_THREADS)
xr_sums4(const struct xr_seg *segs, unsigned nseg, uint64_t nblocks,
	 uint64_t *scr, uint64_t lanes)
{
	__shared__ uint64_t kw[XS_SECRET_WORDS];
	uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint64_t g = t / XR_SUMS_PARTS, a0 = 0, a1 = 0;
	unsigned j = (unsigned)(t % XR_SUMS_PARTS);
	const ulonglong2 *q;

	if (threadIdx.x < XS_SECRET_WORDS)
		kw[threadIdx.x] = xs_secret64(8 * threadIdx.x);
	__syncthreads();
	if (g >= nblocks)
		return;
	q = (const ulonglong2 *)block_at(segs, nseg, g) + j;
#pragma unroll
	for (unsigned s = 0; s < XS_STRIPES_PER_BLOCK; s++) {
		ulonglong2 w = __ldg(q + 4 * s);   /* words 2j, 2j + 1 of stripe s */

		xs_pair_add(&a0, &a1, w.x, w.y, kw[s + 2 * j],
			    kw[s + 2 * j + 1]);
	}
	if (lanes) {
		scr[2 * j * lanes + g] = a0;
		scr[(2 * j + 1) * lanes + g] = a1;
		return;
	}
	((ulonglong2 *)(scr + 8 * g))[j] = make_ulonglong2(a0, a1);
}

/* The sums kernel's launch: xr_sums4, or xr_sums where
 * WCACHE_CUDA_SUMS=thread (read at every launch, so that a benchmark
 * may alternate them in one process). */
static cudaError_t sums_launch(cudaStream_t s, const struct xr_seg *sg,
			       unsigned nseg, uint64_t nblocks, uint64_t *scr,
			       uint64_t lanes)
{
	const char *env = getenv("WCACHE_CUDA_SUMS");
	uint64_t grid;

	if (!nblocks)
		return cudaSuccess;
	if (env && !strcmp(env, "thread")) {
		grid = (nblocks + XR_SUMS_THREADS - 1) / XR_SUMS_THREADS;
		xr_sums<<<(unsigned)grid, XR_SUMS_THREADS, 0, s>>>(sg, nseg,
								   nblocks, scr,
								   lanes);
	} else {
		grid = (nblocks * XR_SUMS_PARTS + XR_SUMS_THREADS - 1) /
		       XR_SUMS_THREADS;
		xr_sums4<<<(unsigned)grid, XR_SUMS_THREADS, 0, s>>>(sg, nseg,
								    nblocks,
								    scr, lanes);
	}
	return cudaGetLastError();
}

/* Warps 1..3 copy chunk c of a segment's sums (XR_C steps of 64 bytes)
 * from scratch to shared memory, every load of a thread in flight at
 * once: the sums kernel beside it keeps the device's memory busy, and a
 * chain that waited for each load would run at half its speed. */
static __device__ __forceinline__ void
xr_stage(uint64_t (*dst)[8], const ulonglong2 *src, uint64_t c,
	 uint64_t nblk, unsigned t)
{
	uint64_t n = nblk - c * XR_C;
	unsigned units = (unsigned)(n < XR_C ? n : XR_C) * 4;
	ulonglong2 v[XR_STAGE_PER];
	ulonglong2 *d = (ulonglong2 *)dst;

	src += c * XR_C * 4;
#pragma unroll
	for (unsigned k = 0; k < XR_STAGE_PER; k++)
		if (t + k * XR_STAGERS < units)
			v[k] = __ldcg(src + t + k * XR_STAGERS);
#pragma unroll
	for (unsigned k = 0; k < XR_STAGE_PER; k++)
		if (t + k * XR_STAGERS < units)
			d[t + k * XR_STAGERS] = v[k];
}

/* One thread block per segment: lanes 0..7 of warp 0 chain chunk c from
 * shared memory while warps 1..3 stage chunk c + 1. */
__global__ void __launch_bounds__(XR_CHAIN_THREADS)
xr_chain(const struct xr_seg *segs, const uint64_t *scr)
{
	__shared__ uint64_t buf[2][XR_C][8];
	__shared__ uint64_t acc_s[8];
	const struct xr_seg *sg = &segs[blockIdx.x];
	const ulonglong2 *src = (const ulonglong2 *)(scr + 8 * sg->flat0);
	unsigned tid = threadIdx.x;
	uint64_t nblk = sg->nblk;
	uint64_t nch = (nblk + XR_C - 1) / XR_C;
	uint64_t acc = 0, key = 0;

	if (tid < 8) {
		key = xs_secret64(8 * (16 + tid));
		acc = sg->flags & XR_INIT ? xs_init1(tid) : sg->state[tid];
	}
	if (tid >= 32 && nch)
		xr_stage(buf[0], src, 0, nblk, tid - 32);
	__syncthreads();
	for (uint64_t c = 0; c < nch; c++) {
		if (tid >= 32) {
			if (c + 1 < nch)
				xr_stage(buf[(c + 1) & 1], src, c + 1, nblk,
					 tid - 32);
		} else if (tid < 8) {
			const uint64_t (*sm)[8] = buf[c & 1];
			uint64_t n = nblk - c * XR_C;
			unsigned j = 0;

			if (n > XR_C)
				n = XR_C;
			for (; j + XR_U <= n; j += XR_U) {
				uint64_t v[XR_U];

#pragma unroll
				for (unsigned u = 0; u < XR_U; u++)
					v[u] = sm[j + u][tid];
#pragma unroll
				for (unsigned u = 0; u < XR_U; u++)
					acc = xs_scramble1(acc, v[u], key);
			}
			for (; j < n; j++)
				acc = xs_scramble1(acc, sm[j][tid], key);
		}
		__syncthreads();
	}
	if (!(sg->flags & XR_FIN)) {
		if (tid < 8)
			sg->state[tid] = acc;
		return;
	}
	if (tid < 8)
		acc_s[tid] = acc;
	__syncthreads();
	if (tid == 0) {
		uint64_t all[8];

		for (unsigned i = 0; i < 8; i++)
			all[i] = acc_s[i];
		xs_finish(all, sg->base, sg->len, sg->out);
	}
}

/* The dynamic shared memory that leaves no room on an SM beside one
 * xr_chain block, allowed for xr_chain in the current context (0 where
 * it cannot be had): a long chain is one warp's latency-bound
 * arithmetic, which the warps of sums blocks sharing its SM would slow.
 * The attribute is the context's (an idle daemon's next context is
 * another): cuda_hash.c asks once per hash, or keeps the answer with
 * the last hash's scratch, which the idle path frees before its reset. */
extern "C" size_t gpu_cuda_xxh3_alone_smem(void)
{
	struct cudaFuncAttributes a;
	int dev, optin = 0;

	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
				   dev) != cudaSuccess ||
	    cudaFuncGetAttributes(&a, xr_chain) != cudaSuccess ||
	    (size_t)optin <= a.sharedSizeBytes ||
	    cudaFuncSetAttribute(xr_chain,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 optin - (int)a.sharedSizeBytes) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return (size_t)optin - a.sharedSizeBytes;
}

/* Queues one round on two streams: the sums of the first nseg segments
 * (nblocks blocks in all, their flat0 consecutive from 0) into scr on ss,
 * after free (the chains that last read scr) and then recording summed;
 * the chains of all nchain on cs after summed (those after the first
 * nseg read sums the first ones' made), then recording free. segs in
 * device memory, in the layout of struct xr_seg. chain_smem: the chain
 * blocks' dynamic shared memory (gpu_cuda_xxh3_alone_smem's: each has an
 * SM to itself; 0: they share). */
extern "C" int gpu_cuda_xxh3_round(cudaStream_t ss, cudaStream_t cs,
				   cudaEvent_t summed, cudaEvent_t freed,
				   const void *segs, unsigned nseg,
				   unsigned nchain, uint64_t nblocks,
				   uint64_t *scr, size_t chain_smem)
{
	const struct xr_seg *sg = (const struct xr_seg *)segs;
	cudaError_t e = cudaStreamWaitEvent(ss, freed, 0);

	if (e == cudaSuccess)
		e = sums_launch(ss, sg, nseg, nblocks, scr, 0);
	if (e == cudaSuccess)
		e = cudaEventRecord(summed, ss);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(cs, summed, 0);
	if (e == cudaSuccess)
		xr_chain<<<nchain, XR_CHAIN_THREADS, chain_smem, cs>>>(sg, scr);
	if (e == cudaSuccess)
		e = cudaGetLastError();
	if (e == cudaSuccess)
		e = cudaEventRecord(freed, cs);
	return (int)e;
}

/* Queues the block sums of nseg segments (nblocks blocks in all, their
 * flat0 consecutive from 0) into scr on stream s, lane-major (lane l's
 * nblocks sums at scr + l * nblocks), and nothing else: the host chains
 * of cuda_hash_host.c copy them to the host and chain there. */
extern "C" int gpu_cuda_xxh3_sums(cudaStream_t s, const void *segs,
				  unsigned nseg, uint64_t nblocks, uint64_t *scr)
{
	return (int)sums_launch(s, (const struct xr_seg *)segs, nseg, nblocks,
				scr, nblocks);
}

/* cudaSuccess when this build holds code the current device can run. */
extern "C" int gpu_cuda_xxh3_probe(void)
{
	struct cudaFuncAttributes a;

	cudaError_t e = cudaFuncGetAttributes(&a, xk_advance);

	if (e == cudaSuccess)
		e = cudaFuncGetAttributes(&a, xk_batch);
	if (e == cudaSuccess)
		e = cudaFuncGetAttributes(&a, xr_sums);
	if (e == cudaSuccess)
		e = cudaFuncGetAttributes(&a, xr_sums4);

	if (e == cudaSuccess)
		e = cudaFuncGetAttributes(&a, xr_chain);
	return (int)e;
}

/* Queues one xk_advance on stream s; returns the launch's cudaError_t. */
extern "C" int gpu_cuda_xxh3_launch(cudaStream_t s, const void *base,
				    uint64_t len, uint64_t b0, uint64_t b1,
				    uint64_t *state, int init, int fin,
				    uint8_t *out)
{
	xk_advance<<<1, XK_THREADS, 0, s>>>((const uint8_t *)base, len, b0, b1,
					    state, init, fin, out);
	return (int)cudaGetLastError();
}

/* Queues one xk_batch of n jobs (already in device memory at jobs, in the
 * layout of struct xk_job: pointer, length, pointer) on stream s. */
extern "C" int gpu_cuda_xxh3_batch(cudaStream_t s, const void *jobs,
				   unsigned n)
{
	if (!n)
		return (int)cudaSuccess;
	xk_batch<<<n, XK_THREADS, 0, s>>>((const struct xk_job *)jobs);
	return (int)cudaGetLastError();
}
