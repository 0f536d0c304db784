/* SPDX-License-Identifier: MIT */
/*
 * Error reporting for library code (prefix base_, proto/base), the one
 * helper of every layer (proto, gpu, reactor users, wcd, libwcache): one
 * sentence into the caller's buffer, never printed, never fatal. The
 * buffer is `char err[BASE_ERR_LEN]` everywhere inside the project; a
 * message that wraps another one embeds it whole ("%s"), and the outer
 * snprintf truncates once at the end. Only the
 * public struct wc_error (wcache.h) is larger (WC_ERR_MSG_LEN, to hold an
 * identity mismatch list); libwcache's wc__fail fills it through the same
 * base_verrf. A NULL buffer is allowed.
 */
#ifndef WC_ERR_H
#define WC_ERR_H

#include <stdarg.h>
#include <stddef.h>

#define BASE_ERR_LEN 512

/* Formats into err (BASE_ERR_LEN bytes, truncating) and returns -code (code
 * is an errno of either sign) so callers can write
 * `return base_errf(err, EINVAL, "...", ...);`. */
int base_errf(char *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The same into buf of cap bytes (buf may be NULL). */
int base_verrf(char *buf, size_t cap, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#endif
