/* SPDX-License-Identifier: MIT */
/*
 * Error reporting for library code: one sentence into the caller's buffer
 * (WC_ERR_LEN bytes), never printed, never fatal. A NULL buffer is allowed.
 */
#ifndef WC_ERR_H
#define WC_ERR_H

#include <stddef.h>

#define WC_ERR_LEN 512

/* Formats into err (truncating) and returns -code so callers can write
 * `return wc_errf(err, EINVAL, "...", ...);`. */
int wc_errf(char *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
