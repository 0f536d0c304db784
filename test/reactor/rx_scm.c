// SPDX-License-Identifier: MIT
/* SCM_RIGHTS: three descriptors sent with a message arrive as three new
 * close-on-exec descriptors of the same files (fstat: same device and inode);
 * five sent to a receiver that takes two: two kept, three closed (the fd
 * count says so), fds_truncated set; too many to send is refused. */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rx_util.h"

static int recv_res = 1, send_res = 1;

static void on_recv(struct rx_recv *r, int res) { recv_res = res; }
static void on_send(struct rx_send *s, int res) { send_res = res; }

static void same_file(int a, int b)
{
	struct stat sa, sb;

	T_ASSERT(fstat(a, &sa) == 0);
	T_ASSERT(fstat(b, &sb) == 0);
	T_EQ_U64(sa.st_dev, sb.st_dev);
	T_EQ_U64(sa.st_ino, sb.st_ino);
}

static void round_trip(struct rx_loop *loop, int sock_tx, int sock_rx,
		       const int *fds, unsigned nfds, unsigned max_fds,
		       struct rx_recv *r)
{
	static char msg[] = "three fds";
	char buf[sizeof(msg)];
	struct iovec iov = { msg, sizeof(msg) };
	struct rx_send s = { 0 };

	recv_res = send_res = 1;
	T_OK(rx_recv_start(loop, r, sock_rx, buf, sizeof(buf), sizeof(buf),
			   max_fds, on_recv));
	T_OK(rx_send_start(loop, &s, sock_tx, &iov, 1, fds, nfds, on_send));
	RX_RUN_UNTIL(loop, recv_res != 1 && send_res != 1, 5000);
	T_EQ_INT(send_res, sizeof(msg));
	T_EQ_INT(recv_res, sizeof(msg));
	T_EQ_STR(buf, msg);
}

int main(void)
{
	static struct rx_recv r;
	static int many[RX_FDS_MAX + 1];
	struct rx_send s = { 0 };
	struct iovec iov = { "x", 1 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), sv[2], p[2], fds[5], i, before;

	T_OK(rx_loop_init(&loop, 0));
	T_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	T_ASSERT(pipe(p) == 0);
	fds[0] = p[0];
	fds[1] = p[1];
	fds[2] = sv[0];
	fds[3] = 0;
	fds[4] = 1;

	round_trip(&loop, sv[0], sv[1], fds, 3, 3, &r);
	T_EQ_INT(r.nfds, 3);
	T_ASSERT(!r.fds_truncated);
	for (i = 0; i < 3; i++) {
		T_ASSERT(r.fds[i] != fds[i]);
		T_ASSERT(rx_test_cloexec(r.fds[i]));
		same_file(r.fds[i], fds[i]);
		close(r.fds[i]);
	}

	before = rx_test_fd_count();
	round_trip(&loop, sv[0], sv[1], fds, 5, 2, &r);
	T_EQ_INT(r.nfds, 2);
	T_ASSERT(r.fds_truncated);
	T_EQ_INT(rx_test_fd_count(), before + 2);
	same_file(r.fds[0], fds[0]);
	same_file(r.fds[1], fds[1]);
	close(r.fds[0]);
	close(r.fds[1]);

	/* max_fds 0 (a plain recv): the bytes arrive, the descriptors a peer
	 * sent anyway are closed by the kernel, none leaks */
	before = rx_test_fd_count();
	round_trip(&loop, sv[0], sv[1], fds, 3, 0, &r);
	T_EQ_INT(r.nfds, 0);
	T_EQ_INT(rx_test_fd_count(), before);

	T_EQ_INT(rx_send_start(&loop, &s, sv[0], &iov, 1, many, RX_FDS_MAX + 1,
			       on_send), -EINVAL);
	T_EQ_INT(loop.active, 0);
	T_OK(rx_loop_close(&loop));
	close(sv[0]);
	close(sv[1]);
	close(p[0]);
	close(p[1]);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
