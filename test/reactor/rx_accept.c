// SPDX-License-Identifier: MIT
/* Multishot accept on a unix listening socket: every connection arrives
 * (close-on-exec), including after the kernel ends the multishot -- which it
 * does when the CQ is full: 64 connections against a 16-entry CQ -- and the
 * accept is re-armed; rx_accept_stop ends it with a final callback. Out of
 * descriptors (EMFILE) pauses it (errors, not final) until descriptors are
 * free again, also when stopped during the pause; a socket that is not
 * listening ends it. */
#include <errno.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <unistd.h>

#include "rx_util.h"

#define CLIENTS 64

static int accepted, not_cloexec, errors, finals, final_res;
static int conns[CLIENTS];

static void on_accept(struct rx_accept *a, int fd, bool final)
{
	if (final) {
		finals++;
		final_res = fd;
		return;
	}
	if (fd < 0) {
		errors++;
		return;
	}
	if (!rx_test_cloexec(fd))
		not_cloexec++;
	if (accepted < CLIENTS)
		conns[accepted] = fd;
	else
		close(fd);
	accepted++;
}

int main(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct rx_accept a = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), lfd, i, clients[CLIENTS], extra;
	unsigned rearms;

	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	T_ASSERT(lfd >= 0);
	snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "rx_accept.%d",
		 (int)getpid());
	T_ASSERT(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	T_ASSERT(listen(lfd, 128) == 0);

	T_OK(rx_loop_init(&loop, 4));
	T_EQ_INT(loop.cq_entries, 16);
	T_OK(rx_accept_start(&loop, &a, lfd, on_accept));
	T_EQ_INT(rx_run_once(&loop, 0), 0);
	for (i = 0; i < CLIENTS; i++) {
		clients[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		T_ASSERT(clients[i] >= 0);
		T_ASSERT(connect(clients[i], (struct sockaddr *)&sa,
				 sizeof(sa)) == 0);
	}
	RX_RUN_UNTIL(&loop, accepted == CLIENTS, 10000);
	T_EQ_INT(errors, 0);
	T_EQ_INT(not_cloexec, 0);
	T_EQ_INT(finals, 0);
	rearms = a.rearms;
	printf("re-armed %u times\n", rearms);
	if (!rearms)
		printf("skip: the kernel never ended the multishot accept\n");

	T_OK(rx_accept_stop(&a));
	RX_RUN_UNTIL(&loop, finals == 1, 5000);
	T_EQ_INT(final_res, -ECANCELED);
	T_EQ_INT(loop.active, 0);

	/* no descriptor left for the new connection: final -EMFILE */
	{
		struct rlimit old, low;
		int next = dup(0);

		/* the kernel reads the limit when the accept is submitted and
		 * takes the descriptor before it waits for a connection: make
		 * the next free descriptor number one past the limit */
		T_ASSERT(next >= 0);
		close(next);
		T_ASSERT(getrlimit(RLIMIT_NOFILE, &old) == 0);
		low = old;
		low.rlim_cur = (rlim_t)next;
		T_ASSERT(setrlimit(RLIMIT_NOFILE, &low) == 0);
		finals = 0;
		errors = 0;
		T_OK(rx_accept_start(&loop, &a, lfd, on_accept));
		/* not final: the accept pauses and tries again */
		RX_RUN_UNTIL(&loop, errors >= 2 || finals, 5000);
		T_EQ_INT(finals, 0);
		T_CMP_INT(a.pauses, >=, 2);
		T_ASSERT(setrlimit(RLIMIT_NOFILE, &old) == 0);
		/* descriptors are back: the next connection is accepted */
		accepted = CLIENTS;     /* on_accept closes it */
		extra = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		T_ASSERT(extra >= 0);
		T_ASSERT(connect(extra, (struct sockaddr *)&sa,
				 sizeof(sa)) == 0);
		RX_RUN_UNTIL(&loop, accepted == CLIENTS + 1, 5000);
		close(extra);
		T_OK(rx_accept_stop(&a));
		RX_RUN_UNTIL(&loop, finals == 1, 5000);
		T_EQ_INT(final_res, -ECANCELED);
		errors = 0;
	}
	/* stopped while paused: one final -ECANCELED */
	{
		struct rlimit old, low;
		int next = dup(0);

		T_ASSERT(next >= 0);
		close(next);
		T_ASSERT(getrlimit(RLIMIT_NOFILE, &old) == 0);
		low = old;
		low.rlim_cur = (rlim_t)next;
		T_ASSERT(setrlimit(RLIMIT_NOFILE, &low) == 0);
		finals = 0;
		T_OK(rx_accept_start(&loop, &a, lfd, on_accept));
		RX_RUN_UNTIL(&loop, errors >= 1, 5000);
		T_ASSERT(setrlimit(RLIMIT_NOFILE, &old) == 0);
		T_ASSERT(a.paused);
		T_OK(rx_accept_stop(&a));
		RX_RUN_UNTIL(&loop, finals == 1, 5000);
		T_EQ_INT(final_res, -ECANCELED);
		T_EQ_INT(loop.active, 0);
		errors = 0;
	}
	/* not listening: final -EINVAL */
	{
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		finals = 0;
		T_OK(rx_accept_start(&loop, &a, s, on_accept));
		RX_RUN_UNTIL(&loop, finals == 1, 5000);
		T_EQ_INT(final_res, -EINVAL);
		close(s);
	}
	T_EQ_INT(errors, 0);
	T_EQ_INT(loop.active, 0);
	T_OK(rx_loop_close(&loop));
	for (i = 0; i < CLIENTS; i++) {
		close(clients[i]);
		close(conns[i]);
	}
	close(lfd);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return rearms ? 0 : T_SKIP;
}
