/* SPDX-License-Identifier: MIT */
/*
 * wcd's load/ folder: a model directory into a version's pools.
 *
 *   load.c        prepare (parse, gate, plan) and run a load: load_run
 *                 chooses a path (struct ld_path, ld.h) and calls its ops
 *                 (this header)
 *   staged.c      the staged path: staging slots, copies, hashes
 *                 (staged.h, and staged_int.h for its state)
 *   hashpool.c    the staged path's hash workers, jobs of the worker pool
 *                 (hashpool.h)
 *   fill.c        the direct path's splice fill: workers (pool jobs) splice
 *                 the pieces into the memfds and hash tensors as they land
 *                 (fill.h, and fill_int.h for what they share)
 *   fill_move.c   the splice fill's byte moving: splice, or pread where
 *                 splice is refused, and the failure's sentence
 *   fill_ahead.c  the splice fill's read-ahead, a pool job
 *   dread.c       the direct path's read fill (--direct-fill read):
 *                 io_uring reads into the mappings (dread.h)
 *   prep.c        the header reads, the gate and the plan, off the loop on
 *                 a thread of its own (prep.h)
 *   ld.c          what the paths share: struct ld, failure, progress, the
 *                 direct paths' hash phase on pool jobs (ld.h)
 *
 * Threads: every thread the loader starts is a job of the daemon's worker
 * pool (d->work), waited for by turning the loop until its after function
 * has run (wcd_turn_until, outside every callback), but prep.c's, which a
 * hung file system may keep for good (rx_pool_close waits for jobs).
 */
#ifndef WCD_LOAD_H
#define WCD_LOAD_H

#include "daemon/daemon.h"

/* load.c: parse + plan (no I/O on tensor data), then the load. */
int load_prepare(struct wcd *d, struct wcd_version *v, char *err);
/* load_prepare, given again, a plan kept from before (version_planned):
 * when its files and layout are as they were, its model, rules and plan
 * move into v (*reused true, again emptied) instead of being read and
 * made again (prep.c); the identity is computed either way. */
int load_prepare_again(struct wcd *d, struct wcd_version *v,
		       struct wcd_version *again, bool *reused, char *err);
int load_run(struct wcd *d, struct wcd_version *v, char *err);
/* Creates v's pools as planned (v->npools counts those made); no check of
 * free memory (the callers word that differently). */
int load_pools_alloc(struct wcd *d, struct wcd_version *v, char *err);
/* Zeroes the padded rows past each entry's size in v's device pools (host
 * pools are fresh memfds, already zero); not the whole pools, which the
 * load or a trainer fills. 0 or -errno with err set. */
int load_zero_padding(struct wcd *d, struct wcd_version *v, char *err);
void load_version_free(struct wcd *d, struct wcd_version *v);

#endif
