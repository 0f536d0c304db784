// SPDX-License-Identifier: MIT
/* One-shot poll: POLLIN when a pipe gets data, POLLHUP when its writer goes
 * away, an invalid fd is the kernel's -EBADF, and a callback may start the
 * poll again; rx_loop_close from a callback is refused (-EBUSY). */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "rx_util.h"

static int res_seen[4], n_seen, close_res = 1;

static void on_poll(struct rx_poll *p, int res)
{
	res_seen[n_seen++] = res;
	if (n_seen == 1)
		T_OK(rx_poll_start(p->op.loop, p, p->fd, POLLIN, on_poll));
	close_res = rx_loop_close(p->op.loop);
}

int main(void)
{
	struct rx_poll p = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), pfd[2];

	T_OK(rx_loop_init(&loop, 0));
	T_ASSERT(pipe(pfd) == 0);
	T_OK(rx_poll_start(&loop, &p, pfd[0], POLLIN, on_poll));
	T_EQ_INT(rx_run_once(&loop, 0), 0);
	T_EQ_INT(n_seen, 0);
	T_ASSERT(write(pfd[1], "x", 1) == 1);
	RX_RUN_UNTIL(&loop, n_seen == 1, 5000);
	T_ASSERT(res_seen[0] & POLLIN);
	T_EQ_INT(close_res, -EBUSY);
	/* re-armed from the callback: still readable */
	RX_RUN_UNTIL(&loop, n_seen == 2, 5000);
	T_ASSERT(res_seen[1] & POLLIN);

	close(pfd[0]);
	close(pfd[1]);
	T_ASSERT(pipe(pfd) == 0);
	close(pfd[1]);
	T_OK(rx_poll_start(&loop, &p, pfd[0], POLLIN, on_poll));
	RX_RUN_UNTIL(&loop, n_seen == 3, 5000);
	T_ASSERT(res_seen[2] & POLLHUP);
	close(pfd[0]);

	T_OK(rx_poll_start(&loop, &p, 1000, POLLIN, on_poll));
	RX_RUN_UNTIL(&loop, n_seen == 4, 5000);
	T_EQ_INT(res_seen[3], -EBADF);
	T_EQ_INT(rx_poll_start(&loop, &p, 0, 0, on_poll), -EINVAL);
	T_EQ_INT(loop.active, 0);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
