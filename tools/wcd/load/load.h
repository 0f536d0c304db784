/* SPDX-License-Identifier: MIT */
/*
 * wcd's load/ folder: a model directory into a version's pools.
 *
 *   load.c      prepare (parse, gate, plan) and run a load: the pools, the
 *               direct path's reads, the hash phase (this header)
 *   staged.c    the staged path: staging slots, copies, hashes (staged.h)
 *   fill.c      the direct path's splice fill: workers splice the pieces
 *               into the memfds, hash tensors as they land, read ahead
 *               (fill.h)
 *   prep.c      the header reads, the gate and the plan, off the loop
 *               (prep.h)
 *   ld.c        what the paths share: struct ld, failure, progress (ld.h)
 *   hashpool.c  hash worker threads for the staged path (hashpool.h)
 */
#ifndef WCD_LOAD_H
#define WCD_LOAD_H

#include "daemon/daemon.h"

/* load.c: parse + plan (no I/O on tensor data), then the load. */
int load_prepare(struct wcd *d, struct wcd_version *v, char *err);
int load_run(struct wcd *d, struct wcd_version *v, char *err);
/* Creates v's pools as planned (v->npools counts those made); no check of
 * free memory (the callers word that differently). */
int load_pools_alloc(struct wcd *d, struct wcd_version *v, char *err);
void load_version_free(struct wcd *d, struct wcd_version *v);

#endif
