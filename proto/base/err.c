/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>

#include "err.h"

int base_verrf(char *buf, size_t cap, int code, const char *fmt, va_list ap)
{
	if (buf && cap)
		vsnprintf(buf, cap, fmt, ap);
	return code > 0 ? -code : code;
}

int base_errf(char *err, int code, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = base_verrf(err, BASE_ERR_LEN, code, fmt, ap);
	va_end(ap);
	return ret;
}
