/* SPDX-License-Identifier: MIT */
/*
 * Deaths on either side, with a real wcd (host backend, wcgen tiny):
 *  - a client SIGKILLed while attached: its lease disappears from STATUS
 *    (the daemon watches the peer, not a heartbeat);
 *  - the daemon SIGKILLed while a client is attached: the client's daemon
 *    fd (a pidfd) becomes readable within a second, its mapping still holds
 *    the file's bytes and verifies, a request fails with EPIPE and detach
 *    still succeeds; the next wcd on the device starts over the stale files.
 */
#include <poll.h>

#include "client_util.h"

static void client_killed(struct e2e *x)
{
	int ready[2], leases = 0;
	uint64_t end;
	pid_t k;
	char b;

	T_OK(pipe2(ready, O_CLOEXEC) ? -errno : 0);
	k = fork();
	T_ASSERT(k >= 0);
	if (!k) {
		struct wc_conn *c = e2e_connect(x);
		struct wc_model *m;
		struct wc_error e;

		if (wc_hello(c, NULL, NULL, &e) || wc_attach(c, 0, &m, NULL, &e))
			T_FAIL("attach: %s", e.msg);
		T_EQ_INT(write(ready[1], "a", 1), 1);
		for (;;)
			pause();
	}
	close(ready[1]);
	T_EQ_INT(read(ready[0], &b, 1), 1);
	close(ready[0]);
	T_ASSERT(e2e_status_has_pid(x, k, &leases));
	T_EQ_INT(leases, 1);
	kill(k, SIGKILL);
	T_EQ_INT(waitpid(k, NULL, 0), k);
	end = e2e_now_ms() + 5000;
	while (e2e_status_has_pid(x, k, NULL)) {
		if (e2e_now_ms() > end)
			T_FAIL("the SIGKILLed client %d is still in STATUS after 5 s", (int)k);
		usleep(10000);
	}
}

static void daemon_killed(struct e2e *x)
{
	struct wc_conn *c = e2e_connect(x);
	struct wc_model *m;
	struct wc_error e;
	struct pollfd p;
	uint64_t bad = 1;

	if (wc_hello(c, NULL, NULL, &e) || wc_attach(c, 0, &m, NULL, &e))
		T_FAIL("attach: %s", e.msg);
	T_EQ_INT(wc_daemon_pid(c), x->wcd);
	p.fd = wc_daemon_fd(c);
	p.events = POLLIN;
	T_CMP_INT(p.fd, >=, 0);
	T_EQ_INT(poll(&p, 1, 0), 0);
	kill(x->wcd, SIGKILL);
	/* the engine is told, not killed */
	T_EQ_INT(poll(&p, 1, 1000), 1);
	T_ASSERT(p.revents & POLLIN);
	T_EQ_INT(waitpid(x->wcd, NULL, 0), x->wcd);
	x->wcd = 0;
	e2e_compare_all(x, m);
	T_OK(wc_verify(m, &bad, &e));
	T_EQ_U64(bad, 0);
	T_EQ_INT(wc_ping(c, 1, &e), -EPIPE);
	T_HAS(e.msg, "pid");
	T_OK(wc_detach(m, &e));
	wc_close(c);
}

int main(void)
{
	static struct e2e x;   /* outlives main for the atexit cleanup */
	struct wc_conn *c;
	struct wc_error e;

	e2e_init(&x, "death");
	e2e_start_wcd(&x, NULL);
	client_killed(&x);
	daemon_killed(&x);
	/* SIGKILL left the socket and ready file behind; the next start
	 * cleans them and serves again */
	e2e_start_wcd(&x, NULL);
	c = e2e_connect(&x);
	T_OK(wc_ping(c, 1, &e));
	wc_close(c);
	printf("client and daemon deaths handled\n");
	return 0;
}
