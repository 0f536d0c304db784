// SPDX-License-Identifier: MIT
/* Partial sends are continued: 4 MiB in three iovecs through a socket whose
 * buffer holds a few KiB arrives whole and in order, on a blocking and on a
 * non-blocking socket (where io_uring answers -EAGAIN and the send waits
 * for POLLOUT). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "rx_util.h"

#define TOTAL (4u << 20)

static int recv_res = 1, send_res = 1;

static void on_recv(struct rx_recv *r, int res) { recv_res = res; }
static void on_send(struct rx_send *s, int res) { send_res = res; }

static void one(struct rx_loop *loop, int nonblock, unsigned char *src,
		unsigned char *dst)
{
	struct iovec iov[3] = {
		{ src, 1 }, { src + 1, 1000 }, { src + 1001, TOTAL - 1001 },
	};
	struct rx_send s = { 0 };
	struct rx_recv r = { 0 };
	int sv[2], small = 4096;

	T_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	T_ASSERT(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small,
			    sizeof(small)) == 0);
	if (nonblock)
		T_ASSERT(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0 &&
			 fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
	memset(dst, 0, TOTAL);
	recv_res = send_res = 1;
	T_OK(rx_send_start(loop, &s, sv[0], iov, 3, NULL, 0, on_send));
	T_OK(rx_recv_start(loop, &r, sv[1], dst, TOTAL, TOTAL, 0, on_recv));
	RX_RUN_UNTIL(loop, recv_res != 1 && send_res != 1, 20000);
	T_EQ_INT(send_res, TOTAL);
	T_EQ_INT(recv_res, TOTAL);
	T_ASSERT(memcmp(src, dst, TOTAL) == 0);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	unsigned char *src = malloc(TOTAL), *dst = malloc(TOTAL);
	struct rx_loop loop;
	int fds0 = rx_test_fd_count();
	unsigned i;

	T_ASSERT(src && dst);
	for (i = 0; i < TOTAL; i++)
		src[i] = (unsigned char)(i * 2654435761u >> 24);
	T_OK(rx_loop_init(&loop, 0));
	one(&loop, 0, src, dst);
	one(&loop, 1, src, dst);
	T_OK(rx_loop_close(&loop));
	free(src);
	free(dst);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
