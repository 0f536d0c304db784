/* SPDX-License-Identifier: MIT */
/*
 * What the reactor's files share and nobody else sees: the user_data tags,
 * op flags, the op life cycle (loop.c) and each kind's completion handler
 * (called by run.c).
 *
 * Life cycle of an operation: rx__op_begin (it joins the loop's active list),
 * one or more submissions (rx__op_sqe + rx__op_arm, each optionally followed
 * by its linked deadline), rx__op_end just before the final callback (so the
 * callback may start it again).
 */
#ifndef RX_INTERNAL_H
#define RX_INTERNAL_H

#include "wcreactor.h"

/* Low bits of user_data: which of an op's submissions completed. Ops are at
 * least 8-byte aligned (they hold pointers). Cancel requests carry 0. */
#define RX_TAG_MASK     7ULL
#define RX_TAG_MAIN     0ULL
#define RX_TAG_DEADLINE 1ULL

/* rx_op.flags */
#define RX_OPF_ACTIVE   0x01 /* between begin and end */
#define RX_OPF_HELD     0x02 /* main CQE seen, waiting for its deadline's */
#define RX_OPF_POLLING  0x04 /* waiting for readiness after -EAGAIN */
#define RX_OPF_OWNCHILD 0x08 /* rx_child: our child, waitid can reap it */
#define RX_OPF_WAITID   0x10 /* rx_child: IORING_OP_WAITID in flight */
#define RX_OPF_ASYNC    0x20 /* rx_read: -EAGAIN seen, go to io-wq */

void rx__op_begin(struct rx_loop *loop, struct rx_op *op, enum rx_kind kind);
void rx__op_end(struct rx_op *op);
/* An SQE for op's next submission (room for its linked deadline too), or
 * NULL when the ring is full even after a flush (-EBUSY). */
struct io_uring_sqe *rx__op_sqe(struct rx_op *op);
/* Tags the prepared sqe as op's, counts it, and links op's deadline. */
void rx__op_arm(struct rx_op *op, struct io_uring_sqe *sqe);
/* Re-submits op through arm, unless it was cancelled or the loop is
 * closing (-ECANCELED). Returns 0 or -errno. */
int rx__op_rearm(struct rx_op *op, int (*arm)(struct rx_op *op));
/* The not-ready path shared by read, recv and send: an -EAGAIN completion
 * becomes a one-shot poll for events on fd, and the poll's completion
 * re-arms op through arm. Returns 1 when the completion was consumed (op
 * is in flight again), 0 when the caller handles *res itself, -1 when op
 * must finish with the error now in *res. */
int rx__op_retry(struct rx_op *op, int *res, int fd, unsigned events,
		 int (*arm)(struct rx_op *op));

/* Per-kind completion handlers: res is the CQE's (the deadline already
 * folded in: -ETIME when it fired), cflags its flags. */
void rx__accept_cqe(struct rx_op *op, int res, unsigned cflags);
void rx__recv_cqe(struct rx_op *op, int res, unsigned cflags);
void rx__send_cqe(struct rx_op *op, int res, unsigned cflags);
void rx__read_cqe(struct rx_op *op, int res, unsigned cflags);
void rx__poll_cqe(struct rx_op *op, int res, unsigned cflags);
void rx__child_cqe(struct rx_op *op, int res, unsigned cflags);
void rx__timer_cqe(struct rx_op *op, int res, unsigned cflags);
void rx__wake_cqe(struct rx_op *op, int res, unsigned cflags);
void rx__signal_cqe(struct rx_op *op, int res, unsigned cflags);

#endif
