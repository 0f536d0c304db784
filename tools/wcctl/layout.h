/* SPDX-License-Identifier: MIT */
/*
 * The ranks one node launches, with the layout SGLang's launcher uses so an
 * operator can move over without re-learning it. Pure: no I/O, no globals.
 *
 *   pp_size_per_node   = max(pp / nnodes, 1)
 *   nnodes_per_pp_rank = max(nnodes / pp, 1)
 *   pp ranks  = [pp_size_per_node * (node_rank / nnodes_per_pp_rank),
 *                +pp_size_per_node)
 *   tp_size_per_node   = tp / nnodes_per_pp_rank
 *   tp ranks  = [tp_size_per_node * (node_rank % nnodes_per_pp_rank),
 *                +tp_size_per_node)
 *   local GPU = base + (pp_rank % pp_size_per_node) * tp_size_per_node
 *                    + (tp_rank % tp_size_per_node) * step
 *   global rank = tp * pp_rank + tp_rank
 */
#ifndef WCCTL_LAYOUT_H
#define WCCTL_LAYOUT_H

#define LAYOUT_SIZE_MAX 4096   /* tp, pp, nnodes each at most this */
#define LAYOUT_RANKS_MAX 256   /* ranks on one node */

struct layout_params {
	int tp;          /* tensor-parallel size, >= 1 */
	int pp;          /* pipeline-parallel size, >= 1 */
	int nnodes;      /* >= 1 */
	int node_rank;   /* [0, nnodes) */
	int base_gpu;    /* >= 0 */
	int gpu_step;    /* >= 1 */
	int num_gpus;    /* GPUs on this node; <= 0: no limit (host backend) */
};

struct layout_rank {
	int pp_rank;
	int tp_rank;
	int gpu;         /* local GPU id (CUDA ordinal, host device number) */
	int global_rank; /* tp * pp_rank + tp_rank */
};

struct layout {
	int pp_first, pp_count;  /* this node's pp ranks */
	int tp_first, tp_count;  /* this node's tp ranks */
	int n;                   /* pp_count * tp_count */
	struct layout_rank ranks[LAYOUT_RANKS_MAX]; /* pp outer, tp inner */
};

/* Computes this node's ranks into out. Returns 0, or -EINVAL with one
 * sentence in err (BASE_ERR_LEN) naming the value that does not fit and what
 * to change: sizes out of range, node_rank >= nnodes, tp not divisible by
 * the nodes sharing a pp rank, pp and nnodes that do not divide one another,
 * or a local GPU id past num_gpus (more ranks than GPUs). */
int layout_compute(const struct layout_params *p, struct layout *out,
		   char *err);

#endif
