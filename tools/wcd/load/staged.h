/* SPDX-License-Identifier: MIT */
/* load/staged.c: the staged path (its design at its top). */
#ifndef WCD_STAGED_H
#define WCD_STAGED_H

#include "load/ld.h"

/* staged.c (load.c calls it) */
int staged_setup(struct ld *L, char *err);
void staged_start(struct ld *L);
/* After the last copy: waits for the device's hashes (if any). */
void staged_finish(struct ld *L);
void staged_teardown(struct ld *L);
bool ld_streamed(struct ld *L, uint32_t e);
bool ld_dev_post(struct ld *L, uint32_t e);
#endif
