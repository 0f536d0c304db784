// SPDX-License-Identifier: MIT
/* rx_loop_submit hands what is queued to the kernel inside the call: a
 * send started in a callback reaches its peer before the loop turns (wcd
 * replies to a commit so, then frees the old version's pools); the
 * completion still comes at the loop's next turn. */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "rx_util.h"

static int send_res = 1;

static void on_send(struct rx_send *s, int res) { send_res = res; }

int main(void)
{
	struct rx_send s = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), sv[2];
	char msg[10] = "0123456789", got[10];
	struct iovec iov = { msg, sizeof(msg) };
	struct pollfd pfd;

	T_OK(rx_loop_init(&loop, 0));
	T_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);

	/* queued only: nothing has reached the peer */
	T_OK(rx_send_start(&loop, &s, sv[0], &iov, 1, NULL, 0, on_send));
	pfd = (struct pollfd){ .fd = sv[1], .events = POLLIN };
	T_EQ_INT(poll(&pfd, 1, 50), 0);
	/* submitted: the bytes are there, the loop not run */
	T_OK(rx_loop_submit(&loop));
	T_EQ_INT(poll(&pfd, 1, 5000), 1);
	T_EQ_INT(read(sv[1], got, sizeof(got)), sizeof(got));
	T_ASSERT(memcmp(got, msg, sizeof(msg)) == 0);
	T_EQ_INT(send_res, 1);
	RX_RUN_UNTIL(&loop, send_res != 1, 5000);
	T_EQ_INT(send_res, sizeof(msg));
	/* nothing queued: a no-op */
	T_OK(rx_loop_submit(&loop));
	close(sv[0]);
	close(sv[1]);
	T_EQ_INT(loop.active, 0);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
