/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base.h"
#include "err.h"

int wc_errf(char *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		va_start(ap, fmt);
		vsnprintf(err, WC_ERR_LEN, fmt, ap);
		va_end(ap);
	}
	return code > 0 ? -code : code;
}

void wc__assert_fail(const char *cond, const char *file, int line,
		     const char *func)
{
	fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", file, line, func,
		cond);
	fflush(stderr);
	abort();
}
