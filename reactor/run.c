// SPDX-License-Identifier: MIT
/*
 * Turning the loop: the batch completion walk (submit and wait, walk every
 * ready CQE, mark the whole batch seen once -- the shape of liburing's
 * examples/proxy.c), each completion handed to its op kind's file, and the
 * close that drains the ops still in flight. Above the op files (net.c,
 * file.c, child.c, timer.c, wake.c, signal.c), which call only loop.c's
 * core: the files of reactor/ depend one way (test/make/lib_deps.sh).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "compat.h"
#include "internal.h"

#define RX_CLOSE_DRAIN_MS 5000  /* rx_loop_close waits this long for ops */

/* Cancels every active operation and runs the loop until their callbacks
 * have all run (bounded by RX_CLOSE_DRAIN_MS: an io-wq read of a slow disk
 * cannot be interrupted), then closes the ring. Starting operations from the
 * callbacks it runs fails with -ESHUTDOWN. A pool's threads would post to a
 * wake-up that is gone: an open pool makes it -EBUSY at once. */
int rx_loop_close(struct rx_loop *loop)
{
	uint64_t give_up_ns;
	struct rx_op *op;
	int ret;

	if (loop->in_run || loop->pools)
		return -EBUSY;
	loop->closing = true;
	for (op = loop->ops; op; op = op->next)
		rx_cancel(op);
	give_up_ns = rx_now_ns() + RX_CLOSE_DRAIN_MS * 1000000ull;
	while (loop->active && rx_now_ns() < give_up_ns) {
		ret = rx_run_once(loop, 100);
		if (ret < 0)
			return ret;
	}
	if (loop->active)
		return -EBUSY;
	if (loop->has_fixed_bufs)
		io_uring_unregister_buffers(&loop->ring);
	io_uring_queue_exit(&loop->ring);
	loop->ring.ring_fd = -1;
	return 0;
}

static void rx_handle(struct rx_op *op, int res, unsigned cflags)
{
	switch (op->kind) {
	case RX_KIND_ACCEPT: rx__accept_cqe(op, res, cflags); break;
	case RX_KIND_RECV:   rx__recv_cqe(op, res, cflags); break;
	case RX_KIND_SEND:   rx__send_cqe(op, res, cflags); break;
	case RX_KIND_READ:   rx__read_cqe(op, res, cflags); break;
	case RX_KIND_POLL:   rx__poll_cqe(op, res, cflags); break;
	case RX_KIND_CHILD:  rx__child_cqe(op, res, cflags); break;
	case RX_KIND_TIMER:  rx__timer_cqe(op, res, cflags); break;
	case RX_KIND_WAKE:   rx__wake_cqe(op, res, cflags); break;
	case RX_KIND_SIGNAL: rx__signal_cqe(op, res, cflags); break;
	default: break;
	}
}

/* One CQE. An op with a linked deadline has two CQEs in flight; its handler
 * runs once both have arrived (so the op's memory is not reused while the
 * kernel still names it), with -ETIME when the deadline cancelled it. */
static void rx_dispatch(struct io_uring_cqe *cqe)
{
	uint64_t ud = cqe->user_data;
	struct rx_op *op = (struct rx_op *)(uintptr_t)(ud & ~RX_TAG_MASK);
	unsigned cflags = cqe->flags;
	int res = cqe->res;

	/* a cancel request that failed, or liburing's own timeout (kernels
	 * without IORING_FEAT_EXT_ARG): nothing to do */
	if (!op || ud == LIBURING_UDATA_TIMEOUT)
		return;
	/* a CQE names an op with a request in flight (else its memory was
	 * reused while the kernel still held it) */
	WC_ASSERT(op->pending > 0);
	if ((ud & RX_TAG_MASK) == RX_TAG_DEADLINE) {
		op->deadline_res = res;
		if (--op->pending || !(op->flags & RX_OPF_HELD))
			return;
		res = op->res_held;
		cflags = op->cflags_held;
		op->flags &= ~RX_OPF_HELD;
	} else if (!(cflags & IORING_CQE_F_MORE) && --op->pending) {
		op->res_held = res;
		op->cflags_held = cflags;
		op->flags |= RX_OPF_HELD;
		return;
	}
	if (op->deadline_res == -ETIME && res == -ECANCELED)
		res = -ETIME;
	op->deadline_res = 0;
	rx_handle(op, res, cflags);
}

int rx_run_once(struct rx_loop *loop, int timeout_ms)
{
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	int ret;

	if (loop->in_run)
		return -EBUSY;
	if (timeout_ms == 0) {
		/* enters the kernel only to submit, or when the ring flags
		 * task work (IORING_SQ_TASKRUN) or an overflow */
		ret = io_uring_submit(&loop->ring);
	} else if (timeout_ms < 0) {
		ret = io_uring_submit_and_wait(&loop->ring, 1);
	} else {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
		ret = io_uring_submit_and_wait_timeout(&loop->ring, &cqe, 1,
						       &ts, NULL);
	}
	if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EAGAIN &&
	    ret != -EBUSY)
		return ret;
	loop->in_run++;
	io_uring_for_each_cqe(&loop->ring, head, cqe) {
		rx_dispatch(cqe);
		n++;
	}
	io_uring_cq_advance(&loop->ring, n);
	loop->in_run--;
	loop->completions += n;
	return (int)n;
}

int rx_run(struct rx_loop *loop)
{
	int ret = 0;

	while (!loop->stop && rx_loop_alive(loop)) {
		ret = rx_run_once(loop, -1);
		if (ret < 0)
			break;
	}
	loop->stop = false;
	return ret < 0 ? ret : 0;
}
