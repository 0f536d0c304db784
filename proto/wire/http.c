/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "http.h"

/* RFC 9110 tchar */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Visible ASCII, or obs-text (bytes >= 0x80) as RFC 9110 allows. */
static bool is_vchar(unsigned char c)
{
	return (c > 0x20 && c < 0x7f) || c >= 0x80;
}

/* The end of the line starting at p (the index of its '\n'), or -1 when
 * no '\n' is in buf[p..len). A '\r' may stand only right before it. */
static long line_end(const char *buf, size_t len, size_t p)
{
	const char *nl = memchr(buf + p, '\n', len - p);

	return nl ? (long)(nl - buf) : -1;
}

/* Length of the line's content [p, nl) without a final '\r'. */
static size_t content_len(const char *buf, size_t p, size_t nl)
{
	return nl > p && buf[nl - 1] == '\r' ? nl - 1 - p : nl - p;
}

static bool ieq(const char *a, size_t n, const char *b)
{
	if (strlen(b) != n)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];

		if (x >= 'A' && x <= 'Z')
			x = (unsigned char)(x - 'A' + 'a');
		if (x != y)
			return false;
	}
	return true;
}

static int parse_request_line(const char *s, size_t n, struct http_request *r)
{
	size_t i = 0, m, t;

	while (i < n && is_tchar((unsigned char)s[i]))
		i++;
	if (i == 0 || i == n || s[i] != ' ')
		return -EBADMSG;
	if (i > HTTP_METHOD_MAX)
		return -EBADMSG;
	memcpy(r->method, s, i);
	r->method[i] = '\0';
	m = ++i;
	while (i < n && is_vchar((unsigned char)s[i]))
		i++;
	t = i - m;
	if (t == 0 || i == n || s[i] != ' ')
		return -EBADMSG;
	if (t > HTTP_TARGET_MAX)
		return -E2BIG;
	memcpy(r->target, s + m, t);
	r->target[t] = '\0';
	r->path_len = strcspn(r->target, "?");
	i++;
	if (n - i != 8 || memcmp(s + i, "HTTP/", 5) || s[i + 6] != '.' ||
	    s[i + 5] < '0' || s[i + 5] > '9' || s[i + 7] < '0' ||
	    s[i + 7] > '9')
		return -EBADMSG;
	if (s[i + 5] != '1' || s[i + 7] > '1')
		return -EPROTONOSUPPORT;
	r->minor = s[i + 7] - '0';
	return 0;
}

/* One header line s[0..n) (no line ending). */
static int parse_header(const char *s, size_t n)
{
	size_t i = 0, v, e;

	while (i < n && is_tchar((unsigned char)s[i]))
		i++;
	if (i == 0 || i == n || s[i] != ':')
		return -EBADMSG;   /* also a space before the colon, obs-fold */
	for (size_t k = i + 1; k < n; k++) {
		unsigned char c = (unsigned char)s[k];

		if (!is_vchar(c) && c != ' ' && c != '\t')
			return -EBADMSG;
	}
	v = i + 1;
	while (v < n && (s[v] == ' ' || s[v] == '\t'))
		v++;
	e = n;
	while (e > v && (s[e - 1] == ' ' || s[e - 1] == '\t'))
		e--;
	if (ieq(s, i, "transfer-encoding"))
		return -EMSGSIZE;
	if (ieq(s, i, "content-length")) {
		if (e == v)
			return -EBADMSG;
		for (size_t k = v; k < e; k++)
			if (s[k] < '0' || s[k] > '9')
				return -EBADMSG;
		for (size_t k = v; k < e; k++)
			if (s[k] != '0')
				return -EMSGSIZE;
	}
	return 0;
}

int http_parse_request(const char *buf, size_t len, struct http_request *r)
{
	size_t p = 0, scan = len < HTTP_HEAD_MAX ? len : HTTP_HEAD_MAX;
	bool first = true;
	int ret;

	memset(r, 0, sizeof(*r));
	for (;;) {
		long nl = line_end(buf, scan, p);
		size_t n;

		if (nl < 0) {
			/* no full line yet: a byte that can never belong to
			 * a request ends it early (a binary client) */
			for (size_t k = p; k < scan; k++) {
				unsigned char c = (unsigned char)buf[k];

				if (c < 0x20 && c != '\t' && c != '\r')
					return -EBADMSG;
				if (c == '\r' && k + 1 < scan)
					return -EBADMSG;
			}
			return len >= HTTP_HEAD_MAX ? -E2BIG : 0;
		}
		n = content_len(buf, p, (size_t)nl);
		if (memchr(buf + p, '\r', n))
			return -EBADMSG;   /* a bare CR inside a line */
		if (first) {
			ret = parse_request_line(buf + p, n, r);
			if (ret)
				return ret;
			first = false;
		} else if (n == 0) {
			r->head_len = (size_t)nl + 1;
			return (int)r->head_len;
		} else {
			if (++r->nheaders > HTTP_HEADERS_MAX)
				return -E2BIG;
			ret = parse_header(buf + p, n);
			if (ret)
				return ret;
		}
		p = (size_t)nl + 1;
	}
}

bool http_path_is(const struct http_request *r, const char *path)
{
	return strlen(path) == r->path_len &&
	       !memcmp(r->target, path, r->path_len);
}

const char *http_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 431: return "Request Header Fields Too Large";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return "Error";
	}
}

int http_response_head(char *out, size_t len, int status,
		       const char *content_type, size_t body_len)
{
	int n = snprintf(out, len,
			 "HTTP/1.1 %d %s\r\n"
			 "Content-Type: %s\r\n"
			 "Content-Length: %zu\r\n"
			 "Connection: close\r\n"
			 "\r\n", status, http_reason(status), content_type,
			 body_len);

	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}
