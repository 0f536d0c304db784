// SPDX-License-Identifier: MIT
/*
 * The loop's core: ring set-up, the op life cycle, submission with linked
 * deadlines, cancellation. What each op file calls; it calls none of them
 * (run.c, above them, turns the loop and hands each completion to its
 * op's file).
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

void rx_loop_stop(struct rx_loop *loop)
{
	loop->stop = true;
}

int rx_loop_submit(struct rx_loop *loop)
{
	int ret = io_uring_submit(&loop->ring);

	return ret < 0 ? ret : 0;
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

bool rx_loop_in_callback(const struct rx_loop *loop)
{
	return loop->in_run > 0;
}

bool rx_loop_alive(const struct rx_loop *loop)
{
	return loop->active > loop->unref;
}
