/* SPDX-License-Identifier: MIT */
/*
 * Slow and half-sent clients (issue 15, item 5), wcd --frame-timeout 0.5:
 * a client that never sends its first frame, one that stops in the middle
 * of a header, and one that stops in the middle of a payload are each told
 * why and closed after the deadline; a client idle between whole frames is
 * not; a header announcing more than the per-client bound (64 KiB) is
 * refused at once, before any buffer exists. STATUS counts the timeouts.
 * Waits are on the socket (poll for the reply or the end of file).
 */
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "client_util.h"
#include "wire.h"

static struct e2e gx;    /* e2e_cleanup runs at exit: not on main's stack */

static void send_hdr(int fd, uint16_t type, uint32_t len, size_t n)
{
	struct wire_hdr h = { .magic = WIRE_MAGIC, .version = WIRE_VERSION,
			      .type = type, .len = len, .id = 7 };
	uint8_t b[WIRE_HDR_LEN];

	wire_hdr_encode(&h, b);
	T_EQ_INT(write(fd, b, n), (ssize_t)n);
}

/* Reads until the end of file (bounded by 10 s, far above the deadline):
 * returns what arrived, NUL-terminated, and how long it took. */
static size_t read_to_eof(int fd, char *buf, size_t len, uint64_t *ms)
{
	uint64_t t0 = e2e_now_ms();
	size_t got = 0;

	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t n;

		if (poll(&p, 1, 10000) != 1)
			T_FAIL("no reply and no end of file within 10 s: the slow client is still held");
		n = read(fd, buf + got, len - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	*ms = e2e_now_ms() - t0;
	return got;
}

/* The error frame's message is after the header and two u32 (code, len):
 * just look for the text in the bytes. */
static void expect_closed(int fd, const char *want, const char *what)
{
	char buf[4096];
	uint64_t ms;
	size_t n = read_to_eof(fd, buf, sizeof(buf), &ms);

	for (size_t i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	printf("%s: closed after %llu ms: %s\n", what, (unsigned long long)ms,
	       n > WIRE_HDR_LEN ? buf + WIRE_HDR_LEN : "(nothing)");
	if (!strstr(buf + (n > WIRE_HDR_LEN ? WIRE_HDR_LEN : 0), want))
		T_FAIL("%s: the reply does not say '%s'", what, want);
	close(fd);
}

static void ping(int fd)
{
	uint8_t b[WIRE_HDR_LEN];
	struct pollfd p = { fd, POLLIN, 0 };

	send_hdr(fd, WIRE_PING, 0, WIRE_HDR_LEN);
	T_EQ_INT(poll(&p, 1, 10000), 1);
	T_EQ_INT(read(fd, b, sizeof(b)), WIRE_HDR_LEN);
}

int main(void)
{
	static const char *const args[] = { "--frame-timeout", "0.5", NULL };
	int silent, half_hdr, half_payload, idle, big;
	char pad[100] = { 0 };
	struct pollfd p;
	json_t *j, *cn;

	e2e_init(&gx, "slow");
	e2e_start_wcd(&gx, args);

	silent = e2e_raw_connect(gx.sock);
	half_hdr = e2e_raw_connect(gx.sock);
	ping(half_hdr);                  /* a whole frame first, then half */
	send_hdr(half_hdr, WIRE_PING, 0, 10);
	half_payload = e2e_raw_connect(gx.sock);
	send_hdr(half_payload, WIRE_HELLO, 1000, WIRE_HDR_LEN);
	T_EQ_INT(write(half_payload, pad, sizeof(pad)), (ssize_t)sizeof(pad));
	idle = e2e_raw_connect(gx.sock);
	ping(idle);
	big = e2e_raw_connect(gx.sock);
	send_hdr(big, WIRE_HELLO, 1u << 20, WIRE_HDR_LEN);

	expect_closed(big, "request limit of 65536 bytes", "a 1 MiB HELLO");
	expect_closed(silent, "no first frame: 0 of 24 bytes", "silent");
	expect_closed(half_hdr, "a frame was left unfinished: 10 of 24 bytes",
		      "half a header");
	expect_closed(half_payload,
		      "a frame was left unfinished: 124 of 1024 bytes",
		      "half a payload");
	/* idle between whole frames for twice the deadline: still served
	 * (the one wait here that must run out: nothing may arrive) */
	p = (struct pollfd){ idle, POLLIN, 0 };
	T_EQ_INT(poll(&p, 1, 1000), 0);
	ping(idle);
	close(idle);

	j = e2e_status(&gx);
	cn = json_object_get(j, "connections");
	T_ASSERT(json_is_object(cn));
	T_EQ_INT(json_integer_value(json_object_get(cn, "frame_timeouts")), 3);
	json_decref(j);
	printf("ok\n");
	return 0;
}
