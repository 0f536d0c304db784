/* SPDX-License-Identifier: MIT */
/* load/fill.c: the direct path's splice fill. */
#ifndef WCD_FILL_H
#define WCD_FILL_H

#include "load/ld.h"

/* fill.c (load.c calls it): the direct path's splice fill. Moves every
 * piece into its pool and hashes (into v->hash, marking L->hashed) each
 * entry with pieces once it has landed; failures go to ld_fail. *refused:
 * splice was refused and pread took over. 0, or -errno with err set when
 * the fill could not start. */
int fill_run(struct ld *L, bool *refused, char *err);

#endif
