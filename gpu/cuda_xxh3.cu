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
 * tensors already in the pools: n chains side by side in one launch.
 *
 * Only this file is compiled by nvcc (the Makefile builds every .cu in
 * gpu/ where CUDA is on); gpu/cuda_hash.c calls it.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>

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

/* cudaSuccess when this build holds code the current device can run. */
extern "C" int gpu_cuda_xxh3_probe(void)
{
	struct cudaFuncAttributes a;

	cudaError_t e = cudaFuncGetAttributes(&a, xk_advance);

	return (int)(e != cudaSuccess ? e : cudaFuncGetAttributes(&a, xk_batch));
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
