/* SPDX-License-Identifier: MIT */
/*
 * Hot handover refusals and the drain (tools/wcd/handover/handover_old.c):
 *   - a client that has sent part of a frame header and stalls keeps the
 *     old daemon from coming to rest: after the drain bound
 *     (WCD_HANDOVER_DRAIN_MS here) the handover is refused naming that
 *     client's pid, the new wcd exits 1, the old one serves on, and the
 *     stalled client's frame, finished afterwards, is answered (its bytes
 *     were kept, not carried or lost);
 *   - a frame finished while the old daemon drains is answered, and the
 *     handover goes on (the connection comes to rest after it);
 *   - a sleeping daemon refuses ("wake it first") and stays asleep;
 *   - HANDOVER parts out of turn (COMMIT without ASK) are refused.
 */
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "client_util.h"
#include "wire.h"
#include "wire_handover.h"

/* A PING frame of id in buf; returns its length. */
static size_t ping_frame(uint8_t *buf, uint64_t id)
{
	struct wire_put w;
	size_t n;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PING, 0, id);
	wire_put_bytes(&w, "abcd", 4);
	T_OK(wire_frame_end(&w, NULL));
	memcpy(buf, w.buf, w.len);
	n = w.len;
	wire_put_free(&w);
	return n;
}

/* Reads exactly n bytes of fd (10 s bound a read). */
static void read_n(int fd, uint8_t *b, size_t n)
{
	struct pollfd p = { fd, POLLIN, 0 };

	for (size_t got = 0; got < n;) {
		ssize_t k;

		T_ASSERT(poll(&p, 1, 10000) == 1);
		k = recv(fd, b + got, n - got, 0);
		T_ASSERT(k > 0);
		got += (size_t)k;
	}
}

/* Reads frames from fd until a reply: it must be of type and id. NOTICE
 * frames (a handover's) are skipped; returns how many were. */
static int read_reply(int fd, unsigned type, uint64_t id)
{
	static uint8_t b[1 << 16];
	struct wire_hdr h;
	int notices = 0;

	for (;;) {
		read_n(fd, b, WIRE_HDR_LEN);
		T_OK(wire_hdr_decode(b, WIRE_HDR_LEN, &h, NULL));
		T_ASSERT(h.len <= sizeof(b));
		read_n(fd, b, h.len);
		if (h.type != WIRE_NOTICE)
			break;
		notices++;
	}
	T_EQ_INT(h.type, type);
	T_EQ_U64(h.id, id);
	T_ASSERT(h.flags & WIRE_F_REPLY);
	return notices;
}

static bool log_has(const struct e2e *x, const char *needle)
{
	char cmd[1200];

	snprintf(cmd, sizeof(cmd), "grep -qF \"%s\" '%s'", needle, x->log);
	return system(cmd) == 0;
}

static int exit_code(pid_t p)
{
	int st;

	T_EQ_INT(waitpid(p, &st, 0), p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static pid_t status_pid(struct e2e *x, const char **state)
{
	static char st[32];
	json_t *j = e2e_status(x);
	pid_t p = (pid_t)json_integer_value(json_object_get(j, "pid"));

	snprintf(st, sizeof(st), "%s",
		 json_string_value(json_object_get(j, "state")));
	json_decref(j);
	*state = st;
	return p;
}

int main(void)
{
	static struct e2e x;
	uint8_t frame[128];
	char needle[256];
	const char *state;
	size_t n;
	pid_t old, nw;
	int fd;

	e2e_init(&x, "horefuse");
	/* the old daemon's drain bound, short for the test */
	setenv("WCD_HANDOVER_DRAIN_MS", "300", 1);
	e2e_start_wcd(&x, NULL);
	old = x.wcd;

	/* a stalled half header: refused after the bound, naming the pid */
	fd = e2e_raw_connect(x.sock);
	n = ping_frame(frame, 41);
	T_EQ_INT(send(fd, frame, 10, 0), 10);
	nw = e2e_spawn_takeover(&x);
	T_EQ_INT(exit_code(nw), 1);
	snprintf(needle, sizeof(needle),
		 "client pid %d did not come to rest (it is in the middle of a frame, or not reading its replies) within 0.3 s",
		 (int)getpid());
	if (!log_has(&x, needle)) {
		e2e_show_log(x.log);
		T_FAIL("the refusal does not name the stalled client");
	}
	T_EQ_INT(status_pid(&x, &state), old);
	T_EQ_STR(state, "ready");
	/* the stalled frame, finished now, is answered by the old daemon */
	T_EQ_INT(send(fd, frame + 10, n - 10, 0), (ssize_t)(n - 10));
	read_reply(fd, WIRE_PING, 41);

	/* a half frame finished while the old daemon may be draining: the
	 * reply comes, and the handover goes on */
	T_EQ_INT(send(fd, frame, 10, 0), 10);
	nw = e2e_spawn_takeover(&x);
	usleep(20000);
	T_EQ_INT(send(fd, frame + 10, n - 10, 0), (ssize_t)(n - 10));
	read_reply(fd, WIRE_PING, 41);
	T_EQ_INT(exit_code(old), 0);
	x.wcd = nw;
	T_EQ_INT(status_pid(&x, &state), nw);
	/* the same connection, now served by the new daemon */
	n = ping_frame(frame, 42);
	T_EQ_INT(send(fd, frame, n, 0), (ssize_t)n);
	T_EQ_INT(read_reply(fd, WIRE_PING, 42), 1);   /* and the notice */
	close(fd);

	/* COMMIT out of turn */
	{
		struct wire_put w;

		fd = e2e_raw_connect(x.sock);
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_HANDOVER, 0, 7);
		wire_ho_empty_put(&w, WIRE_HO_COMMIT);
		T_OK(wire_frame_end(&w, NULL));
		T_EQ_INT(send(fd, w.buf, w.len, 0), (ssize_t)w.len);
		wire_put_free(&w);
		read_reply(fd, WIRE_ERROR, 7);
		close(fd);
	}

	/* a sleeping daemon refuses, and sleeps on */
	{
		struct wc_conn *c = e2e_connect(&x);
		struct wc_error e;

		if (wc_sleep(c, 2, NULL, &e))
			T_FAIL("sleep: %s", e.msg);
		wc_close(c);
	}
	old = x.wcd;
	nw = e2e_spawn_takeover(&x);
	T_EQ_INT(exit_code(nw), 1);
	if (!log_has(&x, "the daemon sleeps (level 2): wake it first (wcctl wake), then restart")) {
		e2e_show_log(x.log);
		T_FAIL("no refusal of a handover while asleep");
	}
	T_EQ_INT(status_pid(&x, &state), old);
	T_EQ_STR(state, "sleeping");
	printf("refusals and the drain: ok\n");
	return 0;
}
