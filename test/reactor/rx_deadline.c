// SPDX-License-Identifier: MIT
/* Linked deadlines: a read of a pipe that never gets data, a recv from a
 * silent peer, a poll that never fires and a send to a peer that never reads
 * all complete with -ETIME; a read
 * that completes in time keeps its bytes and its deadline is not reported. */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "rx_util.h"

static int read_res = 1, recv_res = 1, poll_res = 1, ok_res = 1;
static int send_res = 1;

static void on_read(struct rx_read *r, int res) { read_res = res; }
static void on_recv(struct rx_recv *r, int res) { recv_res = res; }
static void on_poll(struct rx_poll *p, int res) { poll_res = res; }
static void on_ok(struct rx_read *r, int res) { ok_res = res; }
static void on_send(struct rx_send *s, int res) { send_res = res; }

int main(void)
{
	struct rx_read r = { 0 }, r2 = { 0 };
	struct rx_recv rv = { 0 };
	struct rx_poll p = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), pfd[2], sv[2];
	char buf[64], buf2[8];
	uint64_t start;

	T_OK(rx_loop_init(&loop, 8));
	T_ASSERT(pipe(pfd) == 0);
	T_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	start = rx_now_ns();
	rx_op_deadline(&r.op, 30 * 1000000ull);
	T_OK(rx_read_start(&loop, &r, pfd[0], buf, sizeof(buf), 0, -1, 0,
			   on_read));
	rx_op_deadline(&rv.op, 30 * 1000000ull);
	T_OK(rx_recv_start(&loop, &rv, sv[0], buf2, sizeof(buf2), 0, 0,
			   on_recv));
	rx_op_deadline(&p.op, 30 * 1000000ull);
	T_OK(rx_poll_start(&loop, &p, sv[1], POLLIN, on_poll));
	RX_RUN_UNTIL(&loop, read_res != 1 && recv_res != 1 && poll_res != 1,
		     5000);
	T_EQ_INT(read_res, -ETIME);
	T_EQ_INT(recv_res, -ETIME);
	T_EQ_INT(poll_res, -ETIME);
	T_CMP_INT(rx_now_ns() - start, >=, 30 * 1000000ull);
	T_EQ_INT(loop.active, 0);

	/* a send to a peer that never reads: partial sends, then -ETIME */
	{
		static char big[1 << 20];
		struct iovec iov = { big, sizeof(big) };
		struct rx_send s = { 0 };

		rx_op_deadline(&s.op, 30 * 1000000ull);
		T_OK(rx_send_start(&loop, &s, sv[0], &iov, 1, NULL, 0,
				   on_send));
		RX_RUN_UNTIL(&loop, send_res != 1, 5000);
		T_EQ_INT(send_res, -ETIME);
		T_CMP_INT(s.done, <, sizeof(big));
	}

	/* in time: the bytes, not -ETIME; the deadline is consumed */
	T_ASSERT(write(pfd[1], "hello", 5) == 5);
	rx_op_deadline(&r2.op, 5ull * 1000000000ull);
	T_OK(rx_read_start(&loop, &r2, pfd[0], buf, 5, 0, -1, 0, on_ok));
	RX_RUN_UNTIL(&loop, ok_res != 1, 5000);
	T_EQ_INT(ok_res, 5);
	T_EQ_INT(r2.op.deadline_ns, 0);
	T_EQ_INT(loop.active, 0);

	T_OK(rx_loop_close(&loop));
	close(pfd[0]);
	close(pfd[1]);
	close(sv[0]);
	close(sv[1]);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
