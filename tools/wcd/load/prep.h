/* SPDX-License-Identifier: MIT */
/* load/prep.c: a load's header reads, gate and plan, off the loop. */
#ifndef WCD_PREP_H
#define WCD_PREP_H

#include "load/ld.h"

/* prep.c: reads d->o.model's headers, applies the quantization gate, reads
 * the layout and builds and packs this rank's plan into v->model,
 * v->rules and v->plan, all on a thread of its own while d's loop turns
 * (--read-timeout bounds the header reads; the plan has no deadline; a
 * stopping daemon gives up at once: -ECANCELED). again (may be NULL): a
 * plan kept from before (its model, rules and plan), moved into v instead,
 * *reused true, when its files and layout are unchanged (prep.c). */
int ld_prepare_bounded(struct wcd *d, struct wcd_version *v,
		       struct wcd_version *again, bool *reused, char *err);
/* Moves from's model, rules and plan (no pools) into to, whose own are
 * empty, and leaves from's empty (model/versions.c keeps a retired
 * version's this way). */
void load_plan_move(struct wcd_version *to, struct wcd_version *from);
/* Test hook (test/wcd/rel_hung.sh, test/wcd/rel_truncated.sh, test/wcd/life_plan.sh):
 * WCD_TEST_STALL_FIFO names a FIFO and WCD_TEST_STALL_DIR a model
 * directory whose load then blocks on that FIFO (a pipe-backed stand-in
 * for a hung file system or a long plan) at WCD_TEST_STALL_AT: "open"
 * (the default: before the header reads), "parsed" (after them), "plan"
 * (before the layout is read and planned), all three on prep.c's thread,
 * "opened" (after the shards were opened and their sizes checked, on
 * the loop's thread: a shard cut while it is read) or "filled" (after
 * the last read and copy, before ld_check_shards: test/wcd/rel_rewritten.sh);
 * point is where the caller is. */
void ld_test_stall(const char *path, const char *point);

#endif
