/* SPDX-License-Identifier: MIT */
/*
 * wcctl's rank layout against SGLang's formulas, re-derived here in a
 * different shape (per global rank: which node owns it), over a grid of
 * (tp, pp, nnodes, node_rank), plus hand-checked cases and every error.
 * The layout code is pure and lives in the wcctl tool, so it is compiled
 * into this test directly.
 */
#include <errno.h>

#include "t.h"
#include "tools/wcctl/layout.c"

/* Which node owns global rank (pp_rank, tp_rank), written from the cluster's
 * point of view: nodes are grouped per block of pp ranks; within a group
 * the tp ranks are cut into equal consecutive slices. */
static int owner_node(int tp, int pp, int nnodes, int pp_rank, int tp_rank)
{
	if (nnodes >= pp) {
		int group = nnodes / pp;        /* nodes per pp rank */
		int slice = tp / group;         /* tp ranks per node */

		return pp_rank * group + tp_rank / slice;
	}
	return pp_rank / (pp / nnodes);         /* pp ranks per node */
}

/* The local GPU id: position of the rank within its node, pp major. */
static int expect_gpu(int tp, int pp, int nnodes, int pp_rank, int tp_rank,
		      int base, int step)
{
	int nodes_per_pp = nnodes >= pp ? nnodes / pp : 1;
	int pp_local_count = nnodes >= pp ? 1 : pp / nnodes;
	int tp_local_count = tp / nodes_per_pp;
	int pp_local = pp_rank - (pp_rank / pp_local_count) * pp_local_count;
	int tp_local = tp_rank - (tp_rank / tp_local_count) * tp_local_count;

	return base + pp_local * tp_local_count + tp_local * step;
}

static void check_grid_point(int tp, int pp, int nnodes, int node,
			     int base, int step)
{
	struct layout_params p = { tp, pp, nnodes, node, base, step, 0 };
	struct layout l;
	char err[BASE_ERR_LEN] = "";
	int fits = (nnodes >= pp ? nnodes % pp == 0 &&
				   tp % (nnodes / pp) == 0
				 : pp % nnodes == 0);
	int ret = layout_compute(&p, &l, err);
	int want_n = 0, k = 0;

	if (ret == -EINVAL && strstr(err, "would both use GPU"))
		return; /* step collisions: checked separately */
	if (!fits) {
		if (ret != -EINVAL)
			T_FAIL("tp=%d pp=%d nnodes=%d node=%d: want -EINVAL, got %d",
			       tp, pp, nnodes, node, ret);
		T_ASSERT(err[0] != '\0');
		return;
	}
	if (ret)
		T_FAIL("tp=%d pp=%d nnodes=%d node=%d: %s", tp, pp, nnodes,
		       node, err);
	for (int pr = 0; pr < pp; pr++)
		for (int tr = 0; tr < tp; tr++) {
			struct layout_rank *r;

			if (owner_node(tp, pp, nnodes, pr, tr) != node)
				continue;
			want_n++;
			T_ASSERT(k < l.n);
			r = &l.ranks[k++];
			T_EQ_INT(r->pp_rank, pr);
			T_EQ_INT(r->tp_rank, tr);
			T_EQ_INT(r->global_rank, pr * tp + tr);
			T_EQ_INT(r->gpu, expect_gpu(tp, pp, nnodes, pr, tr,
						    base, step));
		}
	T_EQ_INT(l.n, want_n);
	T_EQ_INT(l.n, l.pp_count * l.tp_count);
	T_EQ_INT(l.ranks[0].pp_rank, l.pp_first);
	T_EQ_INT(l.ranks[0].tp_rank, l.tp_first);
	T_EQ_INT(l.ranks[l.n - 1].pp_rank, l.pp_first + l.pp_count - 1);
	T_EQ_INT(l.ranks[l.n - 1].tp_rank, l.tp_first + l.tp_count - 1);
}

/* Every global rank is launched by exactly one node. */
static void check_partition(int tp, int pp, int nnodes)
{
	static int seen[64 * 64];
	struct layout l;
	char err[BASE_ERR_LEN];

	memset(seen, 0, sizeof(seen));
	for (int node = 0; node < nnodes; node++) {
		struct layout_params p = { tp, pp, nnodes, node, 0, 1, 0 };

		T_OK(layout_compute(&p, &l, err));
		for (int i = 0; i < l.n; i++)
			seen[l.ranks[i].global_rank]++;
	}
	for (int g = 0; g < tp * pp; g++)
		if (seen[g] != 1)
			T_FAIL("tp=%d pp=%d nnodes=%d: global rank %d launched %d times",
			       tp, pp, nnodes, g, seen[g]);
}

struct known {
	int tp, pp, nnodes, node, base, step;
	int pp_first, pp_count, tp_first, tp_count;
	int gpus[8];
};

static const struct known known[] = {
	{ 4, 1, 1, 0, 0, 1, 0, 1, 0, 4, { 0, 1, 2, 3 } },
	{ 8, 1, 2, 1, 0, 1, 0, 1, 4, 4, { 0, 1, 2, 3 } },
	{ 4, 2, 2, 1, 0, 1, 1, 1, 0, 4, { 0, 1, 2, 3 } },
	{ 2, 4, 2, 1, 0, 1, 2, 2, 0, 2, { 0, 1, 2, 3 } },
	{ 8, 2, 4, 3, 0, 1, 1, 1, 4, 4, { 0, 1, 2, 3 } },
	{ 2, 1, 1, 0, 4, 2, 0, 1, 0, 2, { 4, 6 } },
	{ 2, 2, 1, 0, 1, 1, 0, 2, 0, 2, { 1, 2, 3, 4 } },
};

static void check_known(void)
{
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		const struct known *k = &known[i];
		struct layout_params p = { k->tp, k->pp, k->nnodes, k->node,
					   k->base, k->step, 8 };
		struct layout l;
		char err[BASE_ERR_LEN];

		T_OK(layout_compute(&p, &l, err));
		T_EQ_INT(l.pp_first, k->pp_first);
		T_EQ_INT(l.pp_count, k->pp_count);
		T_EQ_INT(l.tp_first, k->tp_first);
		T_EQ_INT(l.tp_count, k->tp_count);
		for (int j = 0; j < l.n; j++)
			T_EQ_INT(l.ranks[j].gpu, k->gpus[j]);
	}
}

struct bad {
	struct layout_params p;
	const char *msg;
};

static const struct bad bad[] = {
	{ { 3, 1, 2, 0, 0, 1, 0 }, "--tp-size 3 is not divisible by the 2 nodes" },
	{ { 4, 1, 2, 2, 0, 1, 0 }, "--node-rank 2 does not exist with --nnodes 2" },
	{ { 4, 1, 2, -1, 0, 1, 0 }, "--node-rank -1 does not exist" },
	{ { 8, 1, 1, 0, 0, 1, 4 }, "would run 8 ranks (1 pp x 8 tp) but has 4 GPUs" },
	{ { 4, 1, 1, 0, 6, 1, 8 }, "would use GPU 8 but this node has 8 GPUs" },
	{ { 4, 1, 1, 0, 0, 3, 8 }, "would use GPU 9 but this node has 8 GPUs" },
	{ { 2, 2, 1, 0, 0, 2, 0 }, "would both use GPU 2" },
	{ { 4, 3, 2, 0, 0, 1, 0 }, "--pp-size 3 cannot be split over --nnodes 2" },
	{ { 4, 2, 3, 0, 0, 1, 0 }, "--nnodes 3 cannot be split evenly over --pp-size 2" },
	{ { 0, 1, 1, 0, 0, 1, 0 }, "--tp-size 0 is out of range" },
	{ { 1, 0, 1, 0, 0, 1, 0 }, "--pp-size 0 is out of range" },
	{ { 1, 1, 0, 0, 0, 1, 0 }, "--nnodes 0 is out of range" },
	{ { 1, 1, 1, 0, -1, 1, 0 }, "--base-gpu-id -1 is out of range" },
	{ { 1, 1, 1, 0, 0, 0, 0 }, "--gpu-id-step 0 is out of range" },
	{ { 512, 1, 1, 0, 0, 1, 0 }, "would run 512 ranks" },
};

static void check_errors(void)
{
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct layout l;
		char err[BASE_ERR_LEN] = "";

		T_EQ_INT(layout_compute(&bad[i].p, &l, err), -EINVAL);
		T_HAS(err, bad[i].msg);
	}
}

int main(void)
{
	static const int sizes[] = { 1, 2, 3, 4, 6, 8, 16 };
	const int ns = sizeof(sizes) / sizeof(sizes[0]);
	int points = 0;

	for (int a = 0; a < ns; a++)
		for (int b = 0; b < ns; b++)
			for (int c = 0; c < ns; c++) {
				int tp = sizes[a], pp = sizes[b];
				int nnodes = sizes[c];

				for (int node = 0; node < nnodes; node++) {
					check_grid_point(tp, pp, nnodes, node,
							 0, 1);
					check_grid_point(tp, pp, nnodes, node,
							 2, 1);
					points += 2;
				}
				if (nnodes >= pp ? nnodes % pp == 0 &&
						   tp % (nnodes / pp) == 0
						 : pp % nnodes == 0)
					check_partition(tp, pp, nnodes);
			}
	/* step > 1 with one pp rank per node never collides */
	for (int tp = 1; tp <= 8; tp++)
		for (int step = 1; step <= 3; step++)
			check_grid_point(tp, 1, 1, 0, 1, step);
	check_known();
	check_errors();
	printf("layout: %d grid points, %zu known cases, %zu errors checked\n",
	       points, sizeof(known) / sizeof(known[0]),
	       sizeof(bad) / sizeof(bad[0]));
	return 0;
}
