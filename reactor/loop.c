// SPDX-License-Identifier: MIT
/*
 * The loop: ring set-up and tear-down, the op life cycle, submission with
 * linked deadlines, cancellation, and the batch completion walk (submit and
 * wait, walk every ready CQE, mark the whole batch seen once -- the shape of
 * liburing's examples/proxy.c).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "compat.h"
#include "internal.h"

#define RX_ENTRIES_MAX 32768    /* the kernel's SQ limit */
#define RX_CLOSE_DRAIN_MS 5000  /* rx_loop_close waits this long for ops */

uint64_t rx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One ring with a CQ four times the SQ, so that a batch of submissions whose
 * operations each complete more than once (multishot, linked deadlines) does
 * not overflow it; probes IORING_OP_WAITID once. */
int rx_loop_init(struct rx_loop *loop, unsigned entries)
{
	int ret;

	if (!entries)
		entries = RX_LOOP_ENTRIES_DEFAULT;
	if (entries > RX_ENTRIES_MAX)
		return -EINVAL;
	memset(loop, 0, sizeof(*loop));
	ret = rx_ring_init(&loop->ring, entries, entries * 4,
			   &loop->coop_taskrun);
	if (ret < 0)
		return ret;
	loop->entries = entries;
	loop->cq_entries = loop->ring.cq.ring_entries;
	loop->has_waitid = rx_probe_op(&loop->ring, RX_IORING_OP_WAITID);
	return 0;
}

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

void rx_loop_stop(struct rx_loop *loop)
{
	loop->stop = true;
}

/* The ring fd itself: it polls readable while CQEs are waiting (checked by
 * test/reactor/rx_embed.c, with COOP_TASKRUN on; no registered eventfd needed). */
int rx_loop_fd(const struct rx_loop *loop)
{
	return loop->ring.ring_fd;
}

int rx_loop_register_buffers(struct rx_loop *loop, const struct iovec *iov,
			     unsigned count)
{
	int ret;

	if (loop->has_fixed_bufs)
		return -EBUSY;
	ret = io_uring_register_buffers(&loop->ring, iov, count);
	if (ret < 0)
		return ret;
	loop->has_fixed_bufs = true;
	return 0;
}

int rx_loop_unregister_buffers(struct rx_loop *loop)
{
	int ret;

	if (!loop->has_fixed_bufs)
		return -ENOENT;
	ret = io_uring_unregister_buffers(&loop->ring);
	if (ret < 0)
		return ret;
	loop->has_fixed_bufs = false;
	return 0;
}

/* io-wq sizes its pools per NUMA node; RX_READ_ASYNC reads of the page cache
 * scale with them (36-43 GB/s with io-wq versus 5 GB/s inline on the GPU
 * machine), so a daemon may want to bound them rather than switch them off. */
int rx_loop_set_iowq_workers(struct rx_loop *loop, unsigned bounded,
			     unsigned unbounded)
{
	unsigned vals[2] = { bounded, unbounded };
	int ret;

	ret = io_uring_register_iowq_max_workers(&loop->ring, vals);
	if (ret < 0)
		return ret;
	if (bounded)
		loop->iowq_bounded = (int)bounded;
	return 0;
}

void rx__op_begin(struct rx_loop *loop, struct rx_op *op, enum rx_kind kind)
{
	uint64_t deadline_ns = op->deadline_ns;

	op->loop = loop;
	op->kind = (uint8_t)kind;
	op->pending = 0;
	op->flags = RX_OPF_ACTIVE;
	op->cancelled = 0;
	op->deadline_res = 0;
	op->res_held = 0;
	op->cflags_held = 0;
	op->deadline_ns = 0;
	op->deadline_at_ns = deadline_ns ? rx_now_ns() + deadline_ns : 0;
	op->prev = NULL;
	op->next = loop->ops;
	if (loop->ops)
		loop->ops->prev = op;
	loop->ops = op;
	loop->active++;
}

void rx__op_end(struct rx_op *op)
{
	struct rx_loop *loop = op->loop;

	WC_ASSERT((op->flags & RX_OPF_ACTIVE) && loop->active > 0);
	if (op->prev)
		op->prev->next = op->next;
	else
		loop->ops = op->next;
	if (op->next)
		op->next->prev = op->prev;
	op->next = op->prev = NULL;
	op->flags = 0;
	op->deadline_at_ns = 0;
	loop->active--;
}

/* Flushes the SQ when it has fewer than need free entries: the caller then
 * always gets its SQEs, unless the kernel refuses the flush (-EBUSY with a
 * backed-up CQ), which the caller reports. */
static struct io_uring_sqe *rx_sqe_get(struct rx_loop *loop, unsigned need)
{
	if (io_uring_sq_space_left(&loop->ring) < need)
		io_uring_submit(&loop->ring);
	if (io_uring_sq_space_left(&loop->ring) < need)
		return NULL;
	return io_uring_get_sqe(&loop->ring);
}

struct io_uring_sqe *rx__op_sqe(struct rx_op *op)
{
	return rx_sqe_get(op->loop, op->deadline_at_ns ? 2 : 1);
}

void rx__op_arm(struct rx_op *op, struct io_uring_sqe *sqe)
{
	struct io_uring_sqe *t;

	io_uring_sqe_set_data64(sqe, (uintptr_t)op | RX_TAG_MAIN);
	op->pending++;
	if (!op->deadline_at_ns)
		return;
	/* rx__op_sqe left room for this one */
	t = io_uring_get_sqe(&op->loop->ring);
	sqe->flags |= IOSQE_IO_LINK;
	op->deadline_ts.tv_sec = (long long)(op->deadline_at_ns / 1000000000);
	op->deadline_ts.tv_nsec = (long long)(op->deadline_at_ns % 1000000000);
	io_uring_prep_link_timeout(t, &op->deadline_ts, IORING_TIMEOUT_ABS);
	io_uring_sqe_set_data64(t, (uintptr_t)op | RX_TAG_DEADLINE);
	op->pending++;
}

int rx__op_rearm(struct rx_op *op, int (*arm)(struct rx_op *op))
{
	if (op->cancelled || op->loop->closing)
		return -ECANCELED;
	return arm(op);
}

static int rx_op_poll_again(struct rx_op *op, int fd, unsigned events)
{
	struct io_uring_sqe *sqe = rx__op_sqe(op);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, fd, events);
	op->flags |= RX_OPF_POLLING;
	rx__op_arm(op, sqe);
	return 0;
}

int rx__op_retry(struct rx_op *op, int *res, int fd, unsigned events,
		 int (*arm)(struct rx_op *op))
{
	int ret;

	if (op->flags & RX_OPF_POLLING) {
		/* ready after -EAGAIN (a pipe, a socket): try again */
		ret = *res;
		if (ret >= 0)
			ret = rx__op_rearm(op, arm);
	} else if (*res == -EAGAIN && !op->cancelled && !op->loop->closing) {
		ret = rx_op_poll_again(op, fd, events);
	} else {
		return 0;
	}
	if (ret < 0) {
		*res = ret;
		return -1;
	}
	return 1;
}

/* Cancels by user_data; the cancel request itself carries user_data 0 and,
 * where the kernel can, posts no CQE when it succeeds. */
int rx_cancel(struct rx_op *op)
{
	struct io_uring_sqe *sqe;

	if (!(op->flags & RX_OPF_ACTIVE))
		return -ENOENT;
	op->cancelled = 1;
	sqe = rx_sqe_get(op->loop, 1);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_cancel64(sqe, (uintptr_t)op | RX_TAG_MAIN, 0);
	io_uring_sqe_set_data64(sqe, 0);
	if (op->loop->ring.features & IORING_FEAT_CQE_SKIP)
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	return 0;
}

void rx_op_deadline(struct rx_op *op, uint64_t ns)
{
	op->deadline_ns = ns;
}

bool rx_op_busy(const struct rx_op *op)
{
	return op->flags & RX_OPF_ACTIVE;
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

bool rx_loop_in_callback(const struct rx_loop *loop)
{
	return loop->in_run > 0;
}

bool rx_loop_alive(const struct rx_loop *loop)
{
	return loop->active > loop->unref;
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
