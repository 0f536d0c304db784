// SPDX-License-Identifier: MIT
/*
 * Wake-ups from other threads: an intrusive lock-free MPSC stack plus an
 * eventfd. Producers push with a CAS and write the eventfd only when the
 * stack was empty (one syscall per batch, not per node); the loop keeps a
 * multishot poll on the eventfd, resets it, takes the whole stack with one
 * exchange and reverses it, so nodes arrive in push order. The eventfd is
 * read before the exchange: a push that lands after the exchange finds the
 * stack empty and writes the eventfd again, so no wake-up is lost.
 */
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

static int rx_wake_arm(struct rx_wake *w)
{
	struct io_uring_sqe *sqe = rx__op_sqe(&w->op);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_multishot(sqe, w->efd, POLLIN);
	rx__op_arm(&w->op, sqe);
	return 0;
}

int rx_wake_init(struct rx_loop *loop, struct rx_wake *w, rx_wake_cb cb)
{
	int ret;

	if (loop->closing)
		return -ESHUTDOWN;
	if (!cb)
		return -EINVAL;
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0)
		return -errno;
	w->counter = 0;
	__atomic_store_n(&w->head, NULL, __ATOMIC_RELEASE);
	w->cb = cb;
	w->stopping = false;
	w->op.deadline_ns = 0;
	rx__op_begin(loop, &w->op, RX_KIND_WAKE);
	ret = rx_wake_arm(w);
	if (ret < 0) {
		rx__op_end(&w->op);
		close(w->efd);
		w->efd = -1;
	}
	return ret;
}

void rx_wake_post(struct rx_wake *w, struct rx_wake_node *node)
{
	struct rx_wake_node *old = __atomic_load_n(&w->head, __ATOMIC_RELAXED);
	uint64_t one = 1;

	do
		node->next = old;
	while (!__atomic_compare_exchange_n(&w->head, &old, node, true,
					    __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
	if (!old && write(w->efd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, a wake-up is pending */
	}
}

/* Takes every posted node and hands them to cb oldest first. */
static void rx_wake_drain(struct rx_wake *w)
{
	struct rx_wake_node *n, *next, *fifo = NULL;

	if (read(w->efd, &w->counter, sizeof(w->counter)) < 0) {
		/* EAGAIN: already reset by an earlier drain */
	}
	n = __atomic_exchange_n(&w->head, NULL, __ATOMIC_ACQUIRE);
	while (n) {
		next = n->next;
		n->next = fifo;
		fifo = n;
		n = next;
	}
	while (fifo) {
		next = fifo->next;
		fifo->next = NULL;
		w->cb(w, fifo);
		fifo = next;
	}
}

int rx_wake_close(struct rx_wake *w)
{
	w->stopping = true;
	return rx_cancel(&w->op);
}

void rx__wake_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_wake *w = (struct rx_wake *)op;

	if (res > 0)
		rx_wake_drain(w);
	if (cflags & IORING_CQE_F_MORE)
		return;
	if (!w->stopping && !op->cancelled && !op->loop->closing &&
	    rx_wake_arm(w) == 0)
		return; /* the kernel ended the multishot: re-armed */
	rx__op_end(op);
	rx_wake_drain(w);
	close(w->efd);
	w->efd = -1;
	w->cb(w, NULL);
}
