/* SPDX-License-Identifier: MIT */
/* load/fill.c: the direct path's splice fill (its design at its top). */
#ifndef WCD_FILL_H
#define WCD_FILL_H

#include "load/ld.h"

/* splice into the memfds on the worker pool, hashing as tensors land */
extern const struct ld_path ld_fill_path;

#endif
