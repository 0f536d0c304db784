// SPDX-License-Identifier: MIT
/* A peer that closes in the middle of a message: the receive that wanted a
 * whole 24-byte header completes with -ECONNRESET and r->done says what
 * arrived; a peer that closes between messages gives 0; a send to a closed
 * peer gives -EPIPE (MSG_NOSIGNAL: no SIGPIPE); bad arguments are refused. */
#include <errno.h>
#include <unistd.h>

#include "rx_util.h"

static int recv_res = 1, send_res = 1;

static void on_recv(struct rx_recv *r, int res) { recv_res = res; }
static void on_send(struct rx_send *s, int res) { send_res = res; }

int main(void)
{
	struct rx_recv r = { 0 };
	struct rx_send s = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), sv[2];
	char hdr[24], msg[10] = "0123456789";
	struct iovec iov = { msg, sizeof(msg) };

	T_OK(rx_loop_init(&loop, 0));

	/* mid-message */
	T_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	T_OK(rx_recv_start(&loop, &r, sv[0], hdr, sizeof(hdr), sizeof(hdr), 0,
			   on_recv));
	T_ASSERT(write(sv[1], msg, sizeof(msg)) == sizeof(msg));
	T_EQ_INT(rx_run_once(&loop, 100) >= 0, 1);
	T_ASSERT(close(sv[1]) == 0);
	RX_RUN_UNTIL(&loop, recv_res != 1, 5000);
	T_EQ_INT(recv_res, -ECONNRESET);
	T_EQ_INT(r.done, sizeof(msg));
	T_ASSERT(memcmp(hdr, msg, sizeof(msg)) == 0);

	/* between messages: a clean 0 */
	recv_res = 1;
	T_OK(rx_recv_start(&loop, &r, sv[0], hdr, sizeof(hdr), sizeof(hdr), 0,
			   on_recv));
	RX_RUN_UNTIL(&loop, recv_res != 1, 5000);
	T_EQ_INT(recv_res, 0);

	/* sending to it */
	T_OK(rx_send_start(&loop, &s, sv[0], &iov, 1, NULL, 0, on_send));
	RX_RUN_UNTIL(&loop, send_res != 1, 5000);
	T_EQ_INT(send_res, -EPIPE);
	close(sv[0]);

	/* refused before anything is queued */
	T_EQ_INT(rx_recv_start(&loop, &r, 0, hdr, sizeof(hdr), 0,
			       RX_FDS_MAX + 1, on_recv), -EINVAL);
	T_EQ_INT(rx_recv_start(&loop, &r, 0, hdr, sizeof(hdr),
			       sizeof(hdr) + 1, 0, on_recv), -EINVAL);
	T_EQ_INT(rx_send_start(&loop, &s, 0, &iov, 9, NULL, 0, on_send),
		 -EINVAL);
	T_EQ_INT(loop.active, 0);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
