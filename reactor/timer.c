// SPDX-License-Identifier: MIT
/*
 * One-shot timers (IORING_OP_TIMEOUT with no completion count: they end only
 * when the time is up or when cancelled). Deadlines linked to another
 * operation live in loop.c (rx__op_arm).
 */
#include <errno.h>

#include "internal.h"

int rx_timer_start(struct rx_loop *loop, struct rx_timer *t, uint64_t ns,
		   rx_timer_cb cb)
{
	struct io_uring_sqe *sqe;

	if (loop->closing)
		return -ESHUTDOWN;
	if (!cb)
		return -EINVAL;
	t->ts.tv_sec = (long long)(ns / 1000000000ull);
	t->ts.tv_nsec = (long long)(ns % 1000000000ull);
	t->cb = cb;
	t->op.deadline_ns = 0;
	rx__op_begin(loop, &t->op, RX_KIND_TIMER);
	sqe = rx__op_sqe(&t->op);
	if (!sqe) {
		rx__op_end(&t->op);
		return -EBUSY;
	}
	io_uring_prep_timeout(sqe, &t->ts, 0, 0);
	rx__op_arm(&t->op, sqe);
	return 0;
}

int rx_timer_stop(struct rx_timer *t)
{
	return rx_cancel(&t->op);
}

void rx__timer_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_timer *t = (struct rx_timer *)op;

	rx__op_end(op);
	t->cb(t, res == -ETIME ? 0 : res);
}
