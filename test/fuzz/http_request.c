/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: hostile bytes through the metrics endpoint's HTTP
 * request parser (proto/wire/http.c). No read past the input (ASan); a head
 * that parses is consistent with itself: its length is within the input
 * and the bound, it ends with a newline, it parses the same alone, and
 * every shorter prefix asks for more bytes (the daemon feeds the parser
 * what has arrived so far, so an early "complete" would answer a request
 * cut in two).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct http_request r, again;
	int n = http_parse_request(buf, size, &r);

	if (n < 0) {
		if (n != -EBADMSG && n != -E2BIG && n != -EPROTONOSUPPORT &&
		    n != -EMSGSIZE)
			abort();
		return 0;
	}
	if (n == 0) {
		if (size >= HTTP_HEAD_MAX)
			abort();
		return 0;
	}
	if ((size_t)n != r.head_len || r.head_len > size ||
	    r.head_len > HTTP_HEAD_MAX || buf[r.head_len - 1] != '\n' ||
	    !r.method[0] || !r.target[0] || strchr(r.target, ' ') ||
	    r.path_len > strlen(r.target) || r.minor < 0 || r.minor > 1 ||
	    r.nheaders > HTTP_HEADERS_MAX)
		abort();
	if (http_parse_request(buf, r.head_len, &again) != n ||
	    memcmp(&r, &again, sizeof(r)))
		abort();
	for (size_t k = 0; k < r.head_len; k += 1 + k / 4)
		if (http_parse_request(buf, k, &again) != 0)
			abort();
	return 0;
}
