/* SPDX-License-Identifier: MIT */
/* load/staged.c: the staged path (its design at its top). */
#ifndef WCD_STAGED_H
#define WCD_STAGED_H

#include "load/ld.h"

/* staging slots, copy_to_pool, hashing while the copy runs */
extern const struct ld_path ld_staged_path;
#endif
