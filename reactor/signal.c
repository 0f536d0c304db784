// SPDX-License-Identifier: MIT
/*
 * Signals through a signalfd: the signals are blocked in the calling thread
 * and read from the fd when a multishot poll says it is readable, so a
 * handler never runs at an arbitrary point of the loop.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "internal.h"

_Static_assert(sizeof(struct signalfd_siginfo) ==
	       sizeof(struct signalfd_siginfo_buf), "signalfd_siginfo size");

static int rx_signal_arm(struct rx_signal *s)
{
	struct io_uring_sqe *sqe = rx__op_sqe(&s->op);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_multishot(sqe, s->sfd, POLLIN);
	rx__op_arm(&s->op, sqe);
	return 0;
}

int rx_signal_start(struct rx_loop *loop, struct rx_signal *s,
		    const sigset_t *mask, rx_signal_cb cb)
{
	int ret;

	if (loop->closing)
		return -ESHUTDOWN;
	if (!mask || !cb)
		return -EINVAL;
	ret = pthread_sigmask(SIG_BLOCK, mask, NULL);
	if (ret)
		return -ret;
	s->sfd = signalfd(-1, mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (s->sfd < 0)
		return -errno;
	s->mask = *mask;
	s->cb = cb;
	s->stopping = false;
	s->op.deadline_ns = 0;
	rx__op_begin(loop, &s->op, RX_KIND_SIGNAL);
	ret = rx_signal_arm(s);
	if (ret < 0) {
		rx__op_end(&s->op);
		close(s->sfd);
		s->sfd = -1;
	}
	return ret;
}

int rx_signal_close(struct rx_signal *s)
{
	s->stopping = true;
	return rx_cancel(&s->op);
}

/* Reads every queued signal (bounded by what the kernel has queued). */
static void rx_signal_drain(struct rx_signal *s)
{
	struct signalfd_siginfo si;

	while (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		memcpy(s->si.b, &si, sizeof(si));
		s->cb(s, (int)si.ssi_signo);
	}
}

void rx__signal_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_signal *s = (struct rx_signal *)op;

	if (res > 0)
		rx_signal_drain(s);
	if (cflags & IORING_CQE_F_MORE)
		return;
	if (!s->stopping && !op->cancelled && !op->loop->closing &&
	    rx_signal_arm(s) == 0)
		return;
	rx__op_end(op);
	close(s->sfd);
	s->sfd = -1;
	s->cb(s, res < 0 ? res : -ECANCELED);
}
