/* SPDX-License-Identifier: MIT */
/*
 * Malformed frames written raw to a real wcd: bad magic, another protocol
 * version, a length over the cap, an unknown type, a payload too short for
 * its request, counts and lengths past the payload, a frame cut off by a
 * half-close. Each gets an ERROR reply with the right code and then the
 * connection is closed, while a libwcache client attached to the same
 * daemon keeps being served (PING after every case, verify at the end).
 */
#include <sys/socket.h>
#include <sys/un.h>

#include "client_util.h"
#include "wire.h"

static int raw_connect(const struct e2e *x)
{
	struct timeval tv = { .tv_sec = 5 };
	int fd = e2e_raw_connect(x->sock);

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void put_hdr(uint8_t *b, uint32_t magic, uint16_t ver, uint16_t type,
		    uint32_t len, uint64_t id)
{
	memcpy(b, &magic, 4);
	memcpy(b + 4, &ver, 2);
	memcpy(b + 6, &type, 2);
	memset(b + 8, 0, 4);
	memcpy(b + 12, &len, 4);
	memcpy(b + 16, &id, 8);
}

static ssize_t recv_full(int fd, void *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = recv(fd, (char *)p + got, n - got, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			T_FAIL("no reply from wcd within 5 s: %s", strerror(errno));
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Reads one ERROR frame: its code must be want (0: any), its message is
 * returned in msg; then the daemon must close the connection. */
static void expect_error_close(int fd, const char *what, uint32_t want,
			       char *msg, size_t cap)
{
	uint8_t hb[WIRE_HDR_LEN], *p, extra;
	struct wire_hdr h;
	struct wire_error we;
	char e[512];

	if (recv_full(fd, hb, sizeof(hb)) != (ssize_t)sizeof(hb))
		T_FAIL("%s: the daemon closed without an ERROR reply", what);
	if (wire_hdr_decode(hb, sizeof(hb), &h, e))
		T_FAIL("%s: the reply header is bad: %s", what, e);
	T_EQ_INT(h.type, WIRE_ERROR);
	T_ASSERT(h.flags & WIRE_F_REPLY);
	p = malloc(h.len + 1);
	T_EQ_INT(recv_full(fd, p, h.len), (ssize_t)h.len);
	if (wire_error_get(p, h.len, &we, e))
		T_FAIL("%s: the ERROR payload is bad: %s", what, e);
	free(p);
	if (want && we.code != want)
		T_FAIL("%s: ERROR code %u (%s), want %u (%s): %s", what, we.code,
		       wire_errcode_name(we.code), want, wire_errcode_name(want),
		       we.msg);
	T_ASSERT(we.msg[0]);
	if (msg)
		snprintf(msg, cap, "%s", we.msg);
	fprintf(stderr, "%s -> %s: %s\n", what, wire_errcode_name(we.code), we.msg);
	/* and then the close */
	T_EQ_INT(recv_full(fd, &extra, 1), 0);
}

static void send_raw(int fd, const void *p, size_t n)
{
	T_EQ_INT(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void still_served(struct wc_conn *c, const char *after)
{
	struct wc_error e;

	if (wc_ping(c, 2, &e))
		T_FAIL("after %s the other client was not served: %s", after, e.msg);
}

int main(void)
{
	static struct e2e x;   /* outlives main for the atexit cleanup */
	struct wc_conn *c;
	struct wc_model *m;
	struct wc_error e;
	uint8_t b[WIRE_HDR_LEN + 64];
	uint64_t bad = 1;
	char msg[4096];
	uint32_t u;
	int fd;

	e2e_init(&x, "malformed");
	e2e_start_wcd(&x, NULL);
	c = e2e_connect(&x);
	T_OK(wc_hello(c, NULL, NULL, &e));
	if (wc_attach(c, 0, &m, NULL, &e))
		T_FAIL("attach: %s", e.msg);

	fd = raw_connect(&x);
	put_hdr(b, 0xdeadbeef, WIRE_VERSION, WIRE_PING, 0, 1);
	send_raw(fd, b, WIRE_HDR_LEN);
	expect_error_close(fd, "bad magic", WIRE_E_MALFORMED, NULL, 0);
	close(fd);
	still_served(c, "bad magic");

	fd = raw_connect(&x);
	put_hdr(b, WIRE_MAGIC, WIRE_VERSION + 1, WIRE_PING, 0, 2);
	send_raw(fd, b, WIRE_HDR_LEN);
	expect_error_close(fd, "another version", WIRE_E_VERSION, msg, sizeof(msg));
	T_HAS(msg, "2");
	T_HAS(msg, "3");
	close(fd);
	still_served(c, "another version");

	fd = raw_connect(&x);
	put_hdr(b, WIRE_MAGIC, WIRE_VERSION, WIRE_PING, WIRE_PAYLOAD_MAX + 1, 3);
	send_raw(fd, b, WIRE_HDR_LEN);
	expect_error_close(fd, "length over the cap", WIRE_E_TOO_LARGE, NULL, 0);
	close(fd);
	still_served(c, "length over the cap");

	fd = raw_connect(&x);
	put_hdr(b, WIRE_MAGIC, WIRE_VERSION, 99, 0, 4);
	send_raw(fd, b, WIRE_HDR_LEN);
	expect_error_close(fd, "unknown type", WIRE_E_TYPE, NULL, 0);
	close(fd);
	still_served(c, "unknown type");

	/* a whole frame whose payload is too short for a HELLO */
	fd = raw_connect(&x);
	put_hdr(b, WIRE_MAGIC, WIRE_VERSION, WIRE_HELLO, 3, 5);
	memset(b + WIRE_HDR_LEN, 0, 3);
	send_raw(fd, b, WIRE_HDR_LEN + 3);
	expect_error_close(fd, "truncated HELLO payload", WIRE_E_MALFORMED, NULL, 0);
	close(fd);
	still_served(c, "truncated HELLO payload");

	/* HELLO whose identity blob claims 1000 bytes of a 12-byte payload */
	fd = raw_connect(&x);
	put_hdr(b, WIRE_MAGIC, WIRE_VERSION, WIRE_HELLO, 12, 6);
	memset(b + WIRE_HDR_LEN, 0, 12);
	b[WIRE_HDR_LEN] = WIRE_VERSION;
	u = 1000;
	memcpy(b + WIRE_HDR_LEN + 4, &u, 4);
	send_raw(fd, b, WIRE_HDR_LEN + 12);
	expect_error_close(fd, "count past the payload", WIRE_E_MALFORMED, NULL, 0);
	close(fd);
	still_served(c, "count past the payload");

	/* STATUS (no HELLO needed) with bytes after its empty payload */
	fd = raw_connect(&x);
	put_hdr(b, WIRE_MAGIC, WIRE_VERSION, WIRE_STATUS, 3, 7);
	memset(b + WIRE_HDR_LEN, 0, 3);
	send_raw(fd, b, WIRE_HDR_LEN + 3);
	expect_error_close(fd, "trailing bytes", WIRE_E_MALFORMED, NULL, 0);
	close(fd);
	still_served(c, "trailing bytes");

	/* a frame cut off: 10 of 40 payload bytes, then a half-close */
	fd = raw_connect(&x);
	put_hdr(b, WIRE_MAGIC, WIRE_VERSION, WIRE_PING, 40, 8);
	memset(b + WIRE_HDR_LEN, 0, 10);
	send_raw(fd, b, WIRE_HDR_LEN + 10);
	shutdown(fd, SHUT_WR);
	expect_error_close(fd, "frame cut off", WIRE_E_MALFORMED, NULL, 0);
	close(fd);
	still_served(c, "frame cut off");

	/* the attached client's bytes are untouched */
	T_OK(wc_verify(m, &bad, &e));
	T_EQ_U64(bad, 0);
	T_OK(wc_detach(m, &e));
	wc_close(c);
	printf("every malformed frame got an ERROR and a close; the other client was served throughout\n");
	return 0;
}
