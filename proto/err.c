/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>

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
