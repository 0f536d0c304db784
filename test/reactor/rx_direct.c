// SPDX-License-Identifier: MIT
/* O_DIRECT reads: an aligned read works; the aligned superset of a file's
 * unaligned tail returns the tail (short at the end of the file, not
 * -EINVAL); a misaligned buffer, offset or length is reported as such
 * (r->misaligned, -EINVAL) before anything is queued. Skips where the file system under /var/tmp has no O_DIRECT
 * (tmpfs). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "rx_util.h"

#define LEN (64 * 1024)
#define TAIL 1000 /* the file is LEN + TAIL bytes */

static int read_res;

static void on_read(struct rx_read *r, int res) { read_res = res; }

int main(void)
{
	char path[] = "/var/tmp/rx_direct.XXXXXX";
	unsigned char *buf, *data = malloc(LEN + TAIL);
	struct rx_read r = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), fd, dfd, i;

	T_ASSERT(data);
	T_ASSERT(posix_memalign((void **)&buf, 4096, LEN + 4096) == 0);
	for (i = 0; i < LEN + TAIL; i++)
		data[i] = (unsigned char)(i * 31);
	fd = mkstemp(path);
	T_ASSERT(fd >= 0);
	T_ASSERT(write(fd, data, LEN + TAIL) == LEN + TAIL);
	T_ASSERT(fsync(fd) == 0);
	dfd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	unlink(path);
	close(fd);
	if (dfd < 0) {
		free(buf);
		free(data);
		T_SKIP_IF(errno == EINVAL, "/var/tmp does not do O_DIRECT");
		T_FAIL("open O_DIRECT: %s", strerror(errno));
	}
	T_OK(rx_loop_init(&loop, 0));

	read_res = 1;
	T_OK(rx_read_start(&loop, &r, dfd, buf, LEN, 0, -1, RX_READ_DIRECT,
			   on_read));
	RX_RUN_UNTIL(&loop, read_res != 1, 10000);
	T_EQ_INT(read_res, LEN);
	T_ASSERT(!r.misaligned);
	T_ASSERT(memcmp(buf, data, LEN) == 0);

	/* the whole file through an aligned superset: the tail, then EOF */
	read_res = 1;
	memset(buf, 0, LEN + 4096);
	T_OK(rx_read_start(&loop, &r, dfd, buf, LEN + 4096, 0, -1,
			   RX_READ_DIRECT, on_read));
	RX_RUN_UNTIL(&loop, read_res != 1, 10000);
	T_EQ_INT(read_res, LEN + TAIL);
	T_ASSERT(!r.misaligned);
	T_ASSERT(memcmp(buf, data, LEN + TAIL) == 0);

	T_EQ_INT(rx_read_start(&loop, &r, dfd, buf + 1, 4096, 0, -1,
			       RX_READ_DIRECT, on_read), -EINVAL);
	T_ASSERT(r.misaligned);
	T_EQ_INT(rx_read_start(&loop, &r, dfd, buf, 4096, 100, -1,
			       RX_READ_DIRECT, on_read), -EINVAL);
	T_ASSERT(r.misaligned);
	T_EQ_INT(rx_read_start(&loop, &r, dfd, buf, 1000, 0, -1,
			       RX_READ_DIRECT, on_read), -EINVAL);
	T_ASSERT(r.misaligned);

	/* an -EINVAL from the kernel on a direct read is flagged too (here
	 * an offset past 2^63, aligned but negative as a loff_t) */
	read_res = 1;
	T_OK(rx_read_start(&loop, &r, dfd, buf, 4096, 1ull << 63, -1,
			   RX_READ_DIRECT, on_read));
	T_ASSERT(!r.misaligned);
	RX_RUN_UNTIL(&loop, read_res != 1, 10000);
	T_EQ_INT(read_res, -EINVAL);
	T_ASSERT(r.misaligned);
	T_EQ_INT(loop.active, 0);
	T_OK(rx_loop_close(&loop));
	close(dfd);
	free(buf);
	free(data);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
