/* SPDX-License-Identifier: MIT */
/* load/dread.c: the direct path's read fill (--direct-fill read). */
#ifndef WCD_DREAD_H
#define WCD_DREAD_H

#include "load/ld.h"

/* io_uring reads into the pools' mappings, then the hash phase */
extern const struct ld_path ld_read_path;
#endif
