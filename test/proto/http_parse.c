/* SPDX-License-Identifier: MIT */
/*
 * proto/wire/http: the metrics endpoint's request parser. A Prometheus scrape
 * and curl's request parse; a head cut anywhere asks for more; every
 * malformed shape a slow or hostile client can send is refused with the
 * code the endpoint answers (400, 413, 431, 505); the response head.
 */
#include <errno.h>
#include <string.h>

#include "http.h"
#include "t.h"

static int parse(const char *s, struct http_request *r)
{
	return http_parse_request(s, strlen(s), r);
}

static void test_ok(void)
{
	static const char prom[] =
		"GET /metrics HTTP/1.1\r\n"
		"Host: 127.0.0.1:9400\r\n"
		"User-Agent: Prometheus/2.42.0\r\n"
		"Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
		"Accept-Encoding: gzip\r\n"
		"X-Prometheus-Scrape-Timeout-Seconds: 10\r\n"
		"\r\n";
	struct http_request r;

	T_EQ_INT(parse(prom, &r), (int)strlen(prom));
	T_EQ_STR(r.method, "GET");
	T_EQ_STR(r.target, "/metrics");
	T_ASSERT(http_path_is(&r, "/metrics"));
	T_ASSERT(!http_path_is(&r, "/metric"));
	T_EQ_INT(r.minor, 1);
	T_EQ_INT(r.nheaders, 5);
	/* every prefix is "not yet" */
	for (size_t k = 0; k < strlen(prom); k++)
		T_EQ_INT(http_parse_request(prom, k, &r), 0);
	/* bytes after the head (pipelined) are not the parser's */
	T_EQ_INT(parse("GET /metrics?name[]=x HTTP/1.0\n\nGET", &r), 32);
	T_EQ_STR(r.target, "/metrics?name[]=x");
	T_ASSERT(http_path_is(&r, "/metrics"));
	T_EQ_INT(r.minor, 0);
	T_EQ_INT(parse("HEAD / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &r), 38);
	T_EQ_INT(parse("GET / HTTP/1.1\r\nX-Empty:\r\n\r\n", &r), 28);
}

static void test_bad(void)
{
	static const struct { const char *s; int want; } cases[] = {
		{ "GET /metrics\r\n\r\n", -EBADMSG },          /* HTTP/0.9 */
		{ "GET  /metrics HTTP/1.1\r\n\r\n", -EBADMSG },
		{ "GET /metrics HTTP/1.1 \r\n\r\n", -EBADMSG },
		{ "GET /metrics HTTP/1.1x\r\n\r\n", -EBADMSG },
		{ "G(T / HTTP/1.1\r\n\r\n", -EBADMSG },
		{ " GET / HTTP/1.1\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/2.0\r\n\r\n", -EPROTONOSUPPORT },
		{ "GET / HTTP/1.2\r\n\r\n", -EPROTONOSUPPORT },
		{ "GET / HTTP/1.1\r\nHost : x\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\nNo colon\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", -EMSGSIZE },
		{ "GET / HTTP/1.1\r\nContent-Length: 0x\r\n\r\n", -EBADMSG },
		{ "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", -EMSGSIZE },
		{ "METHODTOOLONGFORUS / HTTP/1.1\r\n\r\n", -EBADMSG },
		/* a binary client is refused before any newline arrives */
		{ "\x16\x03\x01\x02\x00\x01", -EBADMSG },
		{ "GET /\r", 0 },                 /* a CR at the end: wait */
		{ "GET /\rX", -EBADMSG },
	};
	struct http_request r;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got = parse(cases[i].s, &r);

		if (got != cases[i].want)
			T_FAIL("case %zu '%s': got %d, want %d", i,
			       cases[i].s, got, cases[i].want);
	}
}

static void test_bounds(void)
{
	static char big[HTTP_HEAD_MAX + 64];
	struct http_request r;
	size_t n;

	/* a head that never ends within HTTP_HEAD_MAX */
	n = (size_t)snprintf(big, sizeof(big), "GET / HTTP/1.1\r\n");
	while (n < HTTP_HEAD_MAX)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "A: b\r\n");
	T_EQ_INT(http_parse_request(big, n, &r), -E2BIG);
	/* a request line that never ends */
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /", 5);
	T_EQ_INT(http_parse_request(big, HTTP_HEAD_MAX - 1, &r), 0);
	T_EQ_INT(http_parse_request(big, HTTP_HEAD_MAX, &r), -E2BIG);
	/* too many headers, within the byte bound */
	n = (size_t)snprintf(big, sizeof(big), "GET / HTTP/1.1\r\n");
	for (int i = 0; i <= HTTP_HEADERS_MAX; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "A:\r\n");
	n += (size_t)snprintf(big + n, sizeof(big) - n, "\r\n");
	T_ASSERT(n < HTTP_HEAD_MAX);
	T_EQ_INT(http_parse_request(big, n, &r), -E2BIG);
	/* a target over HTTP_TARGET_MAX */
	n = (size_t)snprintf(big, sizeof(big), "GET /");
	memset(big + n, 'x', HTTP_TARGET_MAX);
	n += HTTP_TARGET_MAX;
	n += (size_t)snprintf(big + n, sizeof(big) - n, " HTTP/1.1\r\n\r\n");
	T_EQ_INT(http_parse_request(big, n, &r), -E2BIG);
}

static void test_response(void)
{
	char out[256];
	int n = http_response_head(out, sizeof(out), 200,
				   "text/plain; version=0.0.4; charset=utf-8", 12);

	T_CMP_INT(n, >, 0);
	T_EQ_STR(out, "HTTP/1.1 200 OK\r\n"
		      "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
		      "Content-Length: 12\r\n"
		      "Connection: close\r\n\r\n");
	T_EQ_INT(http_response_head(out, 20, 200, "text/plain", 1), -ENOSPC);
	T_EQ_STR(http_reason(431), "Request Header Fields Too Large");
}

int main(void)
{
	test_ok();
	test_bad();
	test_bounds();
	test_response();
	printf("http_parse: ok\n");
	return 0;
}
