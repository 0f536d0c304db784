/* SPDX-License-Identifier: MIT */
/*
 * What cuda_hash.c (the device hash) and cuda_hash_host.c (its host
 * chains) share: a running hash's state and the kernels' entry points
 * (cuda_xxh3.cu).
 */
#ifndef WC_GPU_CUDA_HASH_PRIV_H
#define WC_GPU_CUDA_HASH_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cuda_priv.h"
#include "hash_plan.h"

enum { T_IDLE, T_RUNNING, T_DONE };

/* struct xk_job of cuda_xxh3.cu, as the host writes it */
struct xk_job_h {
	uint64_t base, len, out;
};
_Static_assert(sizeof(struct xk_job_h) == 24, "xk_job is three 8-byte words");

_Static_assert(sizeof(struct hash_seg) == 64, "xr_seg is eight 8-byte words");

#define XR_SEG_BLOCKS 32768u           /* 32 MiB: 0.5 ms of one chain */
#define XR_ROUND_BLOCKS (1u << 20)     /* 1 GiB read, 64 MiB of sums */
#define XR_SEGS_EXTRA 8192u            /* segments beyond one a tensor */
/* A tensor of more blocks than this (256 MiB: a 4 ms chain) is "long":
 * long_queue sums all its blocks at once and chains it in one go, beside
 * the rounds of the rest */
#define XR_LONG_BLOCKS (1u << 18)

/* the host chains (cuda_hash_host.c) */
#define HC_MAX_T 64u                   /* tensors */
#define HC_THREADS 8u

/* the host tasks of a tensor: lanes 0-1, 2-3, 4-5, 6-7 */
#define HC_TASKS 4u

struct hc_tensor {
	uint64_t len, nblk;
	/* the tensor whose sums it reads (itself, or a part's holder): its
	 * first block's in hc_sums, its blocks, its first piece's events,
	 * and where this one's blocks begin in it (a part's offset, else 0) */
	uint64_t flat0, hn;
	uint32_t piece0;
	uint64_t at;
	uint32_t i;                    /* the hash's tensor index */
	const uint8_t *tail;           /* its bytes from xs_tail_off, pinned */
	uint64_t acc[8];
	unsigned tasks_left;
	uint8_t out[16];
};

struct cuda_hash {
	uint32_t n;
	uint64_t *d_mem;               /* n x 8 accumulators, then n x 16 bytes,
					* then n batch jobs */
	uint32_t d_cap;                /* the tensors d_mem has room for */
	struct xk_job_h *jobs;         /* host copy of the batch jobs */
	uint32_t njobs;                /* jobs used by batches so far */
	unsigned next_hs;              /* the hash stream of the next batch */
	uint64_t *blocks;              /* per tensor: blocks chained so far */
	uint8_t *tstate;               /* per tensor: T_* */
	cudaStream_t hs[CUDA_HASH_CHAINS];
	cudaEvent_t ev[CUDA_STREAMS];  /* "the last copy on copy stream i" */
	unsigned nhs, nev;
	/* the rounds (from the first batch): scratch, segments, events */
	bool rounds_tried;
	uint64_t *scr[2];              /* XR_ROUND_BLOCKS x 8 words each */
	struct hash_seg *segs, *d_segs;
	uint32_t nsegs, segs_cap;      /* used by batches so far, held */
	cudaEvent_t summed[2], freed[2];
	unsigned nrev;                 /* events made, of the four */
	uint64_t round;                /* rounds queued: the scratch's parity */
	unsigned nsm;                  /* the device's SMs (0: unknown) */
	size_t alone_smem;             /* a chain block's SM alone (0: none) */
	/* the long tensors of the first batch that has any (long_queue):
	 * their sums' scratch, two streams at the greatest priority and two
	 * events, each NULL until made */
	bool long_tried;
	uint64_t *lscr;
	uint64_t lscr_blocks;          /* the block sums lscr has room for */
	cudaStream_t ls[2];
	cudaEvent_t lev[2];
	/* host chains (hc_queue): two streams (sums, copies to the host),
	 * the device's and the host's copy of the sums (the host's after
	 * HC_MAX_T tails of XS_BLOCK bytes), two events a piece; kept by
	 * hash_park like the rest */
	cudaStream_t hcs[2];
	uint64_t *hc_dscr;
	uint8_t *hc_host;
	uint64_t hc_blocks;            /* the sums both have room for */
	cudaEvent_t *hc_ev;
	unsigned hc_nev;               /* events made */
	/* this hash's (the first batch with long tensors): its tensors,
	 * HC_TASKS tasks each (two lanes a task), the next task to take, the
	 * first error of a wait */
	bool hc_tried;
	struct hc_tensor *hc_t;
	uint32_t hc_n, hc_next;
	int hc_err;
	struct hc_pool *hc_pool;       /* the workers, kept like the rest */
};

/* The host chains' worker threads: made by the first hash that has host
 * chains and kept between hashes (hash_park), since making them and
 * joining them was part of every commit's hash; each hash with host
 * chains hands them its tasks (h, gen) and waits at its end until none
 * is inside one (busy). */
struct hc_pool {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;                  /* hashes handed out so far */
	struct cuda_hash *h;           /* whose tasks to take, or NULL */
	int ordinal;                   /* the device they wait for */
	unsigned busy;                 /* workers inside h's tasks */
	bool stop;
	pthread_t th[HC_THREADS];
	unsigned nth;
};

int gpu_cuda_xxh3_probe(void);
int gpu_cuda_xxh3_launch(cudaStream_t s, const void *base, uint64_t len,
			 uint64_t b0, uint64_t b1, uint64_t *state, int init,
			 int fin, uint8_t *out);
int gpu_cuda_xxh3_batch(cudaStream_t s, const void *jobs, unsigned n);
int gpu_cuda_xxh3_round(cudaStream_t ss, cudaStream_t cs, cudaEvent_t summed,
			cudaEvent_t freed, const void *segs, unsigned nseg,
			unsigned nchain, uint64_t nblocks, uint64_t *scr,
			size_t chain_smem);
size_t gpu_cuda_xxh3_alone_smem(void);
int gpu_cuda_xxh3_sums(cudaStream_t s, const void *segs, unsigned nseg,
		       uint64_t nblocks, uint64_t *scr);

/* cuda_hash_host.c: the host chains of a batch's longest jobs hj[0..)
 * (longest first), queued after the copy event ev (*taken: how many; 0
 * or a cudaError_t); at hash_end, the tasks left run and the workers
 * out of them (0 or the first failed wait's cudaError_t); their
 * streams, events, memory and workers freed */
int gpu_cuda_hc_queue(struct cuda_hash *h, const struct gpu_dev *dev,
		      const struct xk_job_h *hj, uint32_t n, cudaEvent_t ev,
		      const uint8_t *results, uint32_t *taken);
int gpu_cuda_hc_end(struct cuda_hash *h);
void gpu_cuda_hc_free(struct cuda_hash *h);

#endif
