// SPDX-License-Identifier: MIT
/*
 * Positioned reads into caller buffers (fixed buffers when registered),
 * re-queued after a short read or -EAGAIN until the range is done or the file
 * ends; O_DIRECT alignment checked before submitting. And one-shot poll on
 * any descriptor.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>

#include "compat.h"
#include "internal.h"

static int rx_read_arm(struct rx_op *op)
{
	struct rx_read *r = (struct rx_read *)op;
	struct io_uring_sqe *sqe = rx__op_sqe(&r->op);
	char *buf = (char *)r->buf + r->done;
	unsigned len = (unsigned)(r->len - r->done);
	uint64_t off = r->off + r->done;

	if (!sqe)
		return -EBUSY;
	if (r->buf_index >= 0)
		io_uring_prep_read_fixed(sqe, r->fd, buf, len, off,
					 r->buf_index);
	else
		io_uring_prep_read(sqe, r->fd, buf, len, off);
	if ((r->flags & RX_READ_ASYNC) || (r->op.flags & RX_OPF_ASYNC))
		sqe->flags |= IOSQE_ASYNC;
	r->op.flags &= ~RX_OPF_POLLING;
	rx__op_arm(&r->op, sqe);
	return 0;
}

static bool rx_read_aligned(const struct rx_read *r)
{
	unsigned mem, off;

	rx_dio_align(r->fd, &mem, &off);
	return !((uintptr_t)r->buf % mem) && !(r->off % off) &&
	       !(r->len % off);
}

int rx_read_start(struct rx_loop *loop, struct rx_read *r, int fd, void *buf,
		  size_t len, uint64_t off, int buf_index, unsigned flags,
		  rx_read_cb cb)
{
	int ret;

	if (loop->closing)
		return -ESHUTDOWN;
	if (fd < 0 || !buf || !len || len > INT32_MAX || !cb ||
	    (flags & ~(unsigned)(RX_READ_ASYNC | RX_READ_DIRECT)) ||
	    (buf_index >= 0 && !loop->has_fixed_bufs) || buf_index < -1)
		return -EINVAL;
	r->fd = fd;
	r->buf = buf;
	r->len = len;
	r->off = off;
	r->done = 0;
	r->buf_index = buf_index;
	r->flags = flags;
	r->misaligned = false;
	r->cb = cb;
	if ((flags & RX_READ_DIRECT) && !rx_read_aligned(r)) {
		r->misaligned = true;
		return -EINVAL;
	}
	rx__op_begin(loop, &r->op, RX_KIND_READ);
	ret = rx_read_arm(&r->op);
	if (ret < 0)
		rx__op_end(&r->op);
	return ret;
}

void rx__read_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_read *r = (struct rx_read *)op;

	/* a regular file polls ready at once after -EAGAIN: the retry goes
	 * to io-wq */
	if (res == -EAGAIN && !(op->flags & RX_OPF_POLLING))
		op->flags |= RX_OPF_ASYNC;
	switch (rx__op_retry(op, &res, r->fd, POLLIN, rx_read_arm)) {
	case 1:
		return;
	case -1:
		goto finish;
	}
	if (res < 0) {
		if (res == -EINVAL && (r->flags & RX_READ_DIRECT))
			r->misaligned = true;
		goto finish;
	}
	/* 0 is the end of the file: what was read is the result. A direct
	 * read of the aligned superset of a file's tail re-queues at an
	 * unaligned offset, but at the end of the file, where the kernel
	 * answers 0 before it checks alignment (test/reactor/rx_direct.c). */
	r->done += (size_t)res;
	if (!res || r->done == r->len) {
		res = (int)r->done;
		goto finish;
	}
	res = rx__op_rearm(op, rx_read_arm);
	if (res < 0)
		goto finish;
	return;
finish:
	rx__op_end(op);
	r->cb(r, res);
}

/* --- poll --------------------------------------------------------------- */

int rx_poll_start(struct rx_loop *loop, struct rx_poll *p, int fd,
		  unsigned events, rx_poll_cb cb)
{
	struct io_uring_sqe *sqe;

	if (loop->closing)
		return -ESHUTDOWN;
	if (fd < 0 || !events || !cb)
		return -EINVAL;
	p->fd = fd;
	p->events = events;
	p->cb = cb;
	rx__op_begin(loop, &p->op, RX_KIND_POLL);
	sqe = rx__op_sqe(&p->op);
	if (!sqe) {
		rx__op_end(&p->op);
		return -EBUSY;
	}
	io_uring_prep_poll_add(sqe, fd, events);
	rx__op_arm(&p->op, sqe);
	return 0;
}

void rx__poll_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_poll *p = (struct rx_poll *)op;

	rx__op_end(op);
	p->cb(p, res);
}
