/* SPDX-License-Identifier: MIT */
/*
 * The device hash's rounds, planned on the host without CUDA (so that CI
 * runs the plan the kernels follow: test/gpu/hash_plan.c executes it on
 * the CPU with xxh3_split.h's arithmetic and compares with libxxhash).
 *
 * A batch of whole tensors is cut into rounds: each round gives every
 * unfinished tensor, longest left first, a segment of at most seg_blocks
 * 1 KiB blocks until the round holds round_blocks; the round's block sums
 * are computed side by side into a scratch (a segment's at flat0), then
 * each segment's chain runs over them, the accumulators carried from round
 * to round in the tensor's state. A tensor whose bytes lie inside a longer
 * one's at a whole number of blocks from its start (a fused view's parts,
 * an alias) is a part: it is not summed, its chain reads its holder's sums
 * (a block's sum depends only on its 1024 bytes), so the device reads
 * those bytes once. gpu/cuda_hash.c queues the plan; gpu/README.md says
 * what it measured.
 */
#ifndef WC_GPU_HASH_PLAN_H
#define WC_GPU_HASH_PLAN_H

#include <stdint.h>

#define HASH_SEG_INIT 1u               /* the tensor's first segment */
#define HASH_SEG_FIN 2u                /* its last: the hash is finished */
/* a tensor of fewer blocks is never a part (it is summed itself) */
#define HASH_PART_MIN_BLOCKS 64u

/* A tensor to hash: its bytes, and the two words its segments carry (the
 * device's accumulators and result for it). */
struct hash_pjob {
	uint64_t base, len;
	uint64_t state, out;
};

/* One segment: blocks [b0, b0 + nblk) of the tensor at base (len bytes),
 * their sums at flat0 of the round's scratch; the layout of cuda_xxh3.cu's
 * struct xr_seg. */
struct hash_seg {
	uint64_t base, len;
	uint64_t b0, nblk;
	uint64_t flat0;
	uint64_t state, out;
	uint64_t flags;                /* HASH_SEG_* */
};

/* Segments [first, first + nseg) are summed (their flat0 ascending from
 * 0, nblocks in all); [first, first + nchain) are chained, the parts'
 * after the summed ones. */
struct hash_round {
	uint32_t first, nseg, nchain;
	uint64_t nblocks;
};

/*
 * Plans the n jobs (any order; each at most XS_MIN_LEN bytes long is the
 * caller's to hash otherwise) into segs[0..) (room entries) and *rounds
 * (malloc'ed, *nrounds of them; the caller frees). 0; 1 when the
 * segments need more than room (nothing planned); -ENOMEM; -EINVAL
 * when seg_blocks is 0 or more than round_blocks.
 */
int hash_plan_rounds(const struct hash_pjob *jobs, uint32_t n,
		     uint64_t seg_blocks, uint64_t round_blocks,
		     struct hash_seg *segs, uint32_t room, uint32_t *nsegs,
		     struct hash_round **rounds, uint32_t *nrounds);

#endif
