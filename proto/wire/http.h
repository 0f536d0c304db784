/* SPDX-License-Identifier: MIT */
/*
 * The smallest HTTP/1.x request parser a Prometheus scrape needs: pure C, no
 * I/O, no allocation, so that it can be fuzzed (test/fuzz/http_request.c)
 * and so that the daemon's loop only moves bytes. wcd's metrics endpoint
 * (tools/wcd/metrics/metrics_http.c) feeds it what has arrived so far and answers
 * once the head is complete; every answer closes the connection.
 *
 * Bounds: the whole head (request line + headers + the blank line) is at
 * most HTTP_HEAD_MAX bytes and HTTP_HEADERS_MAX header lines; the target at
 * most HTTP_TARGET_MAX. A request with a body (Content-Length > 0 or any
 * Transfer-Encoding) is refused: GET and HEAD carry none.
 *
 * Grammar accepted (RFC 9112, strict): METHOD SP TARGET SP HTTP/1.0|1.1
 * CRLF, then header lines NAME ":" OWS VALUE OWS CRLF, then CRLF. A bare LF
 * is accepted where CRLF is due (as most servers do); obs-fold, NUL, other
 * control characters, a space before the colon and header names outside
 * tchar are not.
 */
#ifndef WC_HTTP_H
#define WC_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#define HTTP_HEAD_MAX 4096
#define HTTP_HEADERS_MAX 64
#define HTTP_TARGET_MAX 1024
#define HTTP_METHOD_MAX 15

struct http_request {
	char method[HTTP_METHOD_MAX + 1];
	char target[HTTP_TARGET_MAX + 1];   /* as sent, NUL-terminated */
	size_t path_len;                    /* target bytes before '?' */
	int minor;                          /* HTTP/1.<minor> */
	unsigned nheaders;
	size_t head_len;                    /* bytes through the blank line */
};

/*
 * Parses the request head in buf[0..len) (what has arrived so far).
 * Returns 0 when the head is not complete yet (read more; len <
 * HTTP_HEAD_MAX), the head's length (> 0) when it is complete and valid
 * (r is filled), or a negative errno: -EBADMSG malformed (answer 400),
 * -E2BIG the head is over HTTP_HEAD_MAX or has too many headers (431),
 * -EPROTONOSUPPORT not HTTP/1.0 or 1.1 (505), -EMSGSIZE a body was
 * announced (413). Never reads past buf[len).
 */
int http_parse_request(const char *buf, size_t len, struct http_request *r);

/* true when the request's path (before any query) equals path. */
bool http_path_is(const struct http_request *r, const char *path);

/* The status line's reason phrase for the codes this parser leads to
 * (200, 400, 404, 405, 413, 431, 503, 505), "Error" for others. */
const char *http_reason(int status);

/* Writes a response head (status, Content-Type, Content-Length, Connection:
 * close) into out[0..len); returns its length, or -ENOSPC. */
int http_response_head(char *out, size_t len, int status,
		       const char *content_type, size_t body_len);

#endif
