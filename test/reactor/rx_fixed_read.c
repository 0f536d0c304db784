// SPDX-License-Identifier: MIT
/* Reads into a registered (fixed) buffer by index: the bytes match the file,
 * at an offset and into the middle of the buffer; a buf_index without
 * registered buffers is refused; a range outside the registered buffer is
 * the kernel's -EFAULT. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "rx_util.h"

#define FILE_LEN (256 * 1024 + 123)

static int read_res;

static void on_read(struct rx_read *r, int res) { read_res = res; }

static int do_read(struct rx_loop *loop, int fd, void *buf, size_t len,
		   uint64_t off, int index)
{
	struct rx_read r = { 0 };

	read_res = 1;
	T_OK(rx_read_start(loop, &r, fd, buf, len, off, index, 0, on_read));
	RX_RUN_UNTIL(loop, read_res != 1, 10000);
	return read_res;
}

int main(void)
{
	char path[] = "/tmp/rx_fixed_read.XXXXXX";
	unsigned char *data = malloc(FILE_LEN), *fixed;
	struct rx_read r = { 0 };
	struct rx_loop loop;
	struct iovec iov;
	int fds0 = rx_test_fd_count(), fd, i;

	T_ASSERT(data);
	T_ASSERT(posix_memalign((void **)&fixed, 4096, 512 * 1024) == 0);
	for (i = 0; i < FILE_LEN; i++)
		data[i] = (unsigned char)(i ^ (i >> 9));
	fd = mkstemp(path);
	T_ASSERT(fd >= 0);
	unlink(path);
	T_ASSERT(write(fd, data, FILE_LEN) == FILE_LEN);

	T_OK(rx_loop_init(&loop, 0));
	T_EQ_INT(rx_read_start(&loop, &r, fd, fixed, 10, 0, 0, 0, on_read),
		 -EINVAL);
	iov.iov_base = fixed;
	iov.iov_len = 512 * 1024;
	T_OK(rx_loop_register_buffers(&loop, &iov, 1));
	T_EQ_INT(rx_loop_register_buffers(&loop, &iov, 1), -EBUSY);

	T_EQ_INT(do_read(&loop, fd, fixed, 512 * 1024, 0, 0), FILE_LEN);
	T_ASSERT(memcmp(fixed, data, FILE_LEN) == 0);
	memset(fixed, 0, 512 * 1024);
	T_EQ_INT(do_read(&loop, fd, fixed + 1000, 70000, 4097, 0), 70000);
	T_ASSERT(memcmp(fixed + 1000, data + 4097, 70000) == 0);
	/* past the end of the registered buffer */
	T_EQ_INT(do_read(&loop, fd, fixed + 512 * 1024 - 10, 100, 0, 0),
		 -EFAULT);
	T_OK(rx_loop_unregister_buffers(&loop));
	T_OK(rx_loop_close(&loop));
	close(fd);
	free(fixed);
	free(data);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
