/* SPDX-License-Identifier: MIT */
/*
 * Checks shared by the plan tests: an entry's pieces tile its bytes, and
 * across the ranks of a tp group every source byte of a checkpoint tensor
 * is served exactly `mult` times (1 for a split, tp for a replicated
 * tensor, tp / H for KV heads replicated over tp > H).
 */
#ifndef WC_TEST_PLAN_CHECK_H
#define WC_TEST_PLAN_CHECK_H

#include <stdlib.h>

#include "plan.h"
#include "t.h"

/* Entry e of p: pieces in order, back to back from 0 to size; size is the
 * bytes of the shape; alloc is size or padded_rows rows. */
void pc_check_entry(const struct plan *p, uint32_t e);

/* Across plans p[0..n): the checkpoint tensor model_idx is served mult
 * times, every byte of it, nothing outside it. */
void pc_check_cover(const struct plan *p, uint32_t n,
		    const struct model *m, uint32_t model_idx,
		    uint64_t mult);

#endif
