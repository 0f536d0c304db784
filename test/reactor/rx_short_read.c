// SPDX-License-Identifier: MIT
/* Short reads are re-queued until the range is done or the file ends: a pipe
 * written in pieces (blocking and O_NONBLOCK, where io_uring answers -EAGAIN),
 * and a file that ends before the range does. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "rx_util.h"

#define PIECES 5
#define PIECE 100

static int read_res;
static int wfd;

static void on_read(struct rx_read *r, int res) { read_res = res; }

static void *writer(void *arg)
{
	char piece[PIECE];
	int i;

	for (i = 0; i < PIECES; i++) {
		memset(piece, 'a' + i, sizeof(piece));
		if (write(wfd, piece, sizeof(piece)) != sizeof(piece))
			abort();
		usleep(5000);
	}
	close(wfd);
	return NULL;
}

static void pipe_case(struct rx_loop *loop, int nonblock)
{
	struct rx_read r = { 0 };
	char buf[PIECES * PIECE * 2];
	pthread_t th;
	int p[2], i;

	T_ASSERT(pipe2(p, nonblock ? O_NONBLOCK : 0) == 0);
	wfd = p[1];
	read_res = 1;
	T_OK(rx_read_start(loop, &r, p[0], buf, sizeof(buf), 0, -1, 0,
			   on_read));
	T_ASSERT(pthread_create(&th, NULL, writer, NULL) == 0);
	RX_RUN_UNTIL(loop, read_res != 1, 10000);
	pthread_join(th, NULL);
	T_EQ_INT(read_res, PIECES * PIECE);
	for (i = 0; i < PIECES * PIECE; i++)
		if (buf[i] != 'a' + i / PIECE)
			T_FAIL("byte %d is %c, want %c", i, buf[i],
			       'a' + i / PIECE);
	close(p[0]);
}

static int file_read(struct rx_loop *loop, int fd, char *buf, size_t len,
		     uint64_t off)
{
	struct rx_read r = { 0 };

	read_res = 1;
	T_OK(rx_read_start(loop, &r, fd, buf, len, off, -1, RX_READ_ASYNC,
			   on_read));
	RX_RUN_UNTIL(loop, read_res != 1, 10000);
	return read_res;
}

int main(void)
{
	char path[] = "/tmp/rx_short_read.XXXXXX", data[1000], buf[4096];
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), fd, i;

	T_OK(rx_loop_init(&loop, 0));
	pipe_case(&loop, 0);
	pipe_case(&loop, 1);

	fd = mkstemp(path);
	T_ASSERT(fd >= 0);
	unlink(path);
	for (i = 0; i < (int)sizeof(data); i++)
		data[i] = (char)(i * 7);
	T_ASSERT(write(fd, data, sizeof(data)) == sizeof(data));
	T_EQ_INT(file_read(&loop, fd, buf, sizeof(buf), 0), 1000);
	T_ASSERT(memcmp(buf, data, 1000) == 0);
	T_EQ_INT(file_read(&loop, fd, buf, sizeof(buf), 600), 400);
	T_ASSERT(memcmp(buf, data + 600, 400) == 0);
	T_EQ_INT(file_read(&loop, fd, buf, sizeof(buf), 5000), 0);
	T_EQ_INT(file_read(&loop, fd, buf, 10, 3), 10);
	T_ASSERT(memcmp(buf, data + 3, 10) == 0);
	/* a closed fd: the kernel's error, as it comes */
	close(fd);
	T_EQ_INT(file_read(&loop, fd, buf, 10, 0), -EBADF);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
