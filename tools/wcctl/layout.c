/* SPDX-License-Identifier: MIT */
/* The node's rank layout (see layout.h for the formulas). */
#include <errno.h>
#include <string.h>

#include "err.h"
#include "layout.h"

static int max_int(int a, int b)
{
	return a > b ? a : b;
}

/* Range checks first, so the arithmetic below cannot overflow: every input
 * is at most LAYOUT_SIZE_MAX (base: 1 << 20), so gpu ids stay far below
 * INT_MAX. */
static int layout_check(const struct layout_params *p, char *err)
{
	if (p->tp < 1 || p->tp > LAYOUT_SIZE_MAX)
		return base_errf(err, EINVAL,
			       "--tp-size %d is out of range; use 1..%d",
			       p->tp, LAYOUT_SIZE_MAX);
	if (p->pp < 1 || p->pp > LAYOUT_SIZE_MAX)
		return base_errf(err, EINVAL,
			       "--pp-size %d is out of range; use 1..%d",
			       p->pp, LAYOUT_SIZE_MAX);
	if (p->nnodes < 1 || p->nnodes > LAYOUT_SIZE_MAX)
		return base_errf(err, EINVAL,
			       "--nnodes %d is out of range; use 1..%d",
			       p->nnodes, LAYOUT_SIZE_MAX);
	if (p->node_rank < 0 || p->node_rank >= p->nnodes)
		return base_errf(err, EINVAL,
			       "--node-rank %d does not exist with --nnodes %d; use 0..%d",
			       p->node_rank, p->nnodes, p->nnodes - 1);
	if (p->base_gpu < 0 || p->base_gpu > (1 << 20))
		return base_errf(err, EINVAL,
			       "--base-gpu-id %d is out of range; use 0 or more",
			       p->base_gpu);
	if (p->gpu_step < 1 || p->gpu_step > LAYOUT_SIZE_MAX)
		return base_errf(err, EINVAL,
			       "--gpu-id-step %d is out of range; use 1..%d",
			       p->gpu_step, LAYOUT_SIZE_MAX);
	if (p->pp >= p->nnodes && p->pp % p->nnodes)
		return base_errf(err, EINVAL,
			       "--pp-size %d cannot be split over --nnodes %d (pp ranks %d..%d would never start); make pp a multiple of nnodes",
			       p->pp, p->nnodes, p->pp / p->nnodes * p->nnodes,
			       p->pp - 1);
	if (p->pp < p->nnodes && p->nnodes % p->pp)
		return base_errf(err, EINVAL,
			       "--nnodes %d cannot be split evenly over --pp-size %d; make nnodes a multiple of pp",
			       p->nnodes, p->pp);
	return 0;
}

int layout_compute(const struct layout_params *p, struct layout *out,
		   char *err)
{
	int pp_per_node, nodes_per_pp, tp_per_node, n, i, ret;

	memset(out, 0, sizeof(*out));
	ret = layout_check(p, err);
	if (ret)
		return ret;
	pp_per_node = max_int(p->pp / p->nnodes, 1);
	nodes_per_pp = max_int(p->nnodes / p->pp, 1);
	if (p->tp % nodes_per_pp)
		return base_errf(err, EINVAL,
			       "--tp-size %d is not divisible by the %d nodes that share each pp rank (--nnodes %d / --pp-size %d); make tp a multiple of %d",
			       p->tp, nodes_per_pp, p->nnodes, p->pp,
			       nodes_per_pp);
	tp_per_node = p->tp / nodes_per_pp;
	n = pp_per_node * tp_per_node;
	if (n > LAYOUT_RANKS_MAX)
		return base_errf(err, EINVAL,
			       "this node would run %d ranks (%d pp x %d tp), more than the limit of %d; use more nodes",
			       n, pp_per_node, tp_per_node, LAYOUT_RANKS_MAX);
	if (p->num_gpus > 0 && n > p->num_gpus)
		return base_errf(err, EINVAL,
			       "this node would run %d ranks (%d pp x %d tp) but has %d GPUs; use more nodes (--nnodes) or smaller --tp-size/--pp-size",
			       n, pp_per_node, tp_per_node, p->num_gpus);

	out->pp_first = pp_per_node * (p->node_rank / nodes_per_pp);
	out->pp_count = pp_per_node;
	out->tp_first = tp_per_node * (p->node_rank % nodes_per_pp);
	out->tp_count = tp_per_node;
	out->n = n;
	i = 0;
	for (int pp = out->pp_first; pp < out->pp_first + pp_per_node; pp++) {
		for (int tp = out->tp_first; tp < out->tp_first + tp_per_node;
		     tp++) {
			struct layout_rank *r = &out->ranks[i++];

			r->pp_rank = pp;
			r->tp_rank = tp;
			r->gpu = p->base_gpu +
				 (pp % pp_per_node) * tp_per_node +
				 (tp % tp_per_node) * p->gpu_step;
			r->global_rank = p->tp * pp + tp;
			if (p->num_gpus > 0 && r->gpu >= p->num_gpus)
				return base_errf(err, EINVAL,
					       "pp_rank=%d tp_rank=%d would use GPU %d but this node has %d GPUs (0..%d); lower --base-gpu-id %d or --gpu-id-step %d",
					       pp, tp, r->gpu, p->num_gpus,
					       p->num_gpus - 1, p->base_gpu,
					       p->gpu_step);
			for (int j = 0; j < i - 1; j++)
				if (out->ranks[j].gpu == r->gpu)
					return base_errf(err, EINVAL,
						       "pp_rank=%d tp_rank=%d and pp_rank=%d tp_rank=%d would both use GPU %d; choose a --gpu-id-step (now %d) that keeps ranks apart",
						       out->ranks[j].pp_rank,
						       out->ranks[j].tp_rank,
						       pp, tp, r->gpu,
						       p->gpu_step);
		}
	}
	return 0;
}
