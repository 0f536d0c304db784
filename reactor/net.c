// SPDX-License-Identifier: MIT
/*
 * Stream sockets: multishot accept (re-armed when the kernel ends it), and
 * recvmsg/sendmsg that carry SCM_RIGHTS descriptors, continue partial
 * transfers, and wait for readiness after -EAGAIN (a non-blocking socket).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "compat.h"
#include "internal.h"

/* --- accept ------------------------------------------------------------- */

static int rx_accept_arm(struct rx_accept *a)
{
	struct io_uring_sqe *sqe = rx__op_sqe(&a->op);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_multishot_accept(sqe, a->listen_fd, NULL, NULL,
				       SOCK_CLOEXEC);
	rx__op_arm(&a->op, sqe);
	return 0;
}

int rx_accept_start(struct rx_loop *loop, struct rx_accept *a, int listen_fd,
		    rx_accept_cb cb)
{
	int ret;

	if (loop->closing)
		return -ESHUTDOWN;
	if (listen_fd < 0 || !cb)
		return -EINVAL;
	a->listen_fd = listen_fd;
	a->cb = cb;
	a->stopping = false;
	a->paused = false;
	a->rearms = 0;
	a->pauses = 0;
	a->op.deadline_ns = 0; /* a deadline makes no sense on a listener */
	rx__op_begin(loop, &a->op, RX_KIND_ACCEPT);
	ret = rx_accept_arm(a);
	if (ret < 0)
		rx__op_end(&a->op);
	return ret;
}

int rx_accept_stop(struct rx_accept *a)
{
	a->stopping = true;
	return rx_cancel(&a->op);
}

/* Errors after which accepting again makes sense at once. Others (EBADF,
 * EINVAL: not listening) end the accept; running out of descriptors or
 * memory pauses it (rx_accept_short). */
static bool rx_accept_transient(int res)
{
	return res == -ECONNABORTED || res == -EINTR || res == -EAGAIN;
}

/* Out of descriptors (ours or the system's) or of kernel memory: accepting
 * again at once would spin, giving up would leave a deaf listener. */
static bool rx_accept_short(int res)
{
	return res == -EMFILE || res == -ENFILE || res == -ENOBUFS ||
	       res == -ENOMEM;
}

/* The same op waits RX_ACCEPT_PAUSE_NS on a timeout, then accepts again. */
static int rx_accept_pause(struct rx_accept *a)
{
	struct io_uring_sqe *sqe = rx__op_sqe(&a->op);

	if (!sqe)
		return -EBUSY;
	a->pause_ts.tv_sec = 0;
	a->pause_ts.tv_nsec = RX_ACCEPT_PAUSE_NS;
	io_uring_prep_timeout(sqe, &a->pause_ts, 0, 0);
	rx__op_arm(&a->op, sqe);
	a->paused = true;
	a->pauses++;
	return 0;
}

void rx__accept_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_accept *a = (struct rx_accept *)op;
	bool over = a->stopping || op->cancelled || op->loop->closing;
	int end = -ECANCELED;

	if (a->paused) {
		/* the pause is over (-ETIME), or it was cancelled */
		a->paused = false;
		if (!over && (res == -ETIME || res == 0)) {
			end = rx_accept_arm(a);
			if (end == 0)
				return;
		}
		rx__op_end(op);
		a->cb(a, end, true);
		return;
	}
	if (cflags & IORING_CQE_F_MORE) {
		a->cb(a, res, false);
		return;
	}
	if (!over && rx_accept_short(res) && rx_accept_pause(a) == 0) {
		a->cb(a, res, false);
		return;
	}
	/* The kernel ended the multishot (a full CQ, an error): re-arm. */
	if (!over && (res >= 0 || rx_accept_transient(res))) {
		end = rx_accept_arm(a);
		if (end == 0) {
			a->rearms++;
			a->cb(a, res, false);
			return;
		}
	}
	rx__op_end(op);
	if (res >= 0 || rx_accept_transient(res)) {
		a->cb(a, res, false);
		res = end;
	}
	a->cb(a, res, true);
}

/* --- recv --------------------------------------------------------------- */

static int rx_recv_arm(struct rx_op *op)
{
	struct rx_recv *r = (struct rx_recv *)op;
	struct io_uring_sqe *sqe = rx__op_sqe(&r->op);

	if (!sqe)
		return -EBUSY;
	r->iov.iov_base = (char *)r->buf + r->done;
	r->iov.iov_len = r->len - r->done;
	memset(&r->msg, 0, sizeof(r->msg));
	r->msg.msg_iov = &r->iov;
	r->msg.msg_iovlen = 1;
	/* always room for the kernel's maximum, so that nothing is dropped
	 * silently: what is past max_fds is closed here */
	r->msg.msg_control = r->cmsg.buf;
	r->msg.msg_controllen = sizeof(r->cmsg.buf);
	if (r->max_fds) {
		io_uring_prep_recvmsg(sqe, r->fd, &r->msg, MSG_CMSG_CLOEXEC);
	} else {
		/* No descriptors wanted: a plain recv is cheaper (bench/RESULTS.md,
		 * Suite: 1.41x -> 1.14x of the ping-pong floor on one CPU); the
		 * kernel closes any descriptors a peer sends anyway. */
		r->msg.msg_controllen = 0;
		io_uring_prep_recv(sqe, r->fd, r->iov.iov_base, r->iov.iov_len, 0);
	}
	r->op.flags &= ~RX_OPF_POLLING;
	rx__op_arm(&r->op, sqe);
	return 0;
}

int rx_recv_start(struct rx_loop *loop, struct rx_recv *r, int fd, void *buf,
		  size_t len, size_t min, unsigned max_fds, rx_recv_cb cb)
{
	int ret;

	if (loop->closing)
		return -ESHUTDOWN;
	if (fd < 0 || !buf || !len || len > INT32_MAX || min > len ||
	    max_fds > RX_FDS_MAX || !cb)
		return -EINVAL;
	r->fd = fd;
	r->buf = buf;
	r->len = len;
	r->min = min ? min : 1;
	r->done = 0;
	r->max_fds = max_fds;
	r->nfds = 0;
	r->fds_truncated = false;
	r->cb = cb;
	rx__op_begin(loop, &r->op, RX_KIND_RECV);
	ret = rx_recv_arm(&r->op);
	if (ret < 0)
		rx__op_end(&r->op);
	return ret;
}

/* Keeps the descriptors that fit in max_fds, closes the rest. */
static void rx_recv_take_fds(struct rx_recv *r)
{
	struct cmsghdr *c;
	unsigned i, n;
	int *fds;

	if (r->msg.msg_flags & MSG_CTRUNC)
		r->fds_truncated = true;
	for (c = CMSG_FIRSTHDR(&r->msg); c; c = CMSG_NXTHDR(&r->msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		fds = (int *)CMSG_DATA(c);
		for (i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, &fds[i], sizeof(fd));
			if (r->nfds < r->max_fds) {
				r->fds[r->nfds++] = fd;
			} else {
				close(fd);
				r->fds_truncated = true;
			}
		}
	}
}

void rx__recv_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_recv *r = (struct rx_recv *)op;

	switch (rx__op_retry(op, &res, r->fd, POLLIN, rx_recv_arm)) {
	case 1:
		return;
	case -1:
		goto finish;
	}
	if (res < 0)
		goto finish;
	rx_recv_take_fds(r);
	r->done += (size_t)res;
	if (res == 0) { /* the peer closed: cleanly, or mid-message */
		res = r->done ? -ECONNRESET : 0;
		goto finish;
	}
	res = (int)r->done;
	if (r->done >= r->min)
		goto finish;
	res = rx__op_rearm(op, rx_recv_arm);
	if (res < 0)
		goto finish;
	return;
finish:
	rx__op_end(op);
	r->cb(r, res);
}

/* --- send --------------------------------------------------------------- */

#define RX_SEND_IOV_MAX 8

static int rx_send_arm(struct rx_op *op)
{
	struct rx_send *s = (struct rx_send *)op;
	struct io_uring_sqe *sqe = rx__op_sqe(&s->op);
	struct iovec *iov = s->cur;
	size_t skip = s->done;
	unsigned n = s->iovcnt;

	if (!sqe)
		return -EBUSY;
	/* rebuild the unsent tail from the caller's iov */
	memcpy(iov, s->iov, sizeof(*iov) * n);
	while (n && skip >= iov->iov_len) {
		skip -= iov->iov_len;
		iov++;
		n--;
	}
	if (n) {
		iov->iov_base = (char *)iov->iov_base + skip;
		iov->iov_len -= skip;
	}
	memset(&s->msg, 0, sizeof(s->msg));
	s->msg.msg_iov = iov;
	s->msg.msg_iovlen = n;
	if (s->nfds && !s->done) {
		struct cmsghdr *c;

		s->msg.msg_control = s->cmsg.buf;
		s->msg.msg_controllen = CMSG_SPACE(sizeof(int) * s->nfds);
		c = CMSG_FIRSTHDR(&s->msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * s->nfds);
		memcpy(CMSG_DATA(c), s->fds, sizeof(int) * s->nfds);
	}
	if (n == 1 && !s->msg.msg_controllen)
		io_uring_prep_send(sqe, s->fd, iov->iov_base, iov->iov_len,
				   MSG_NOSIGNAL); /* one buffer, no fds: cheaper */
	else
		io_uring_prep_sendmsg(sqe, s->fd, &s->msg, MSG_NOSIGNAL);
	s->op.flags &= ~RX_OPF_POLLING;
	rx__op_arm(&s->op, sqe);
	return 0;
}

int rx_send_start(struct rx_loop *loop, struct rx_send *s, int fd,
		  const struct iovec *iov, unsigned iovcnt, const int *fds,
		  unsigned nfds, rx_send_cb cb)
{
	size_t total = 0;
	unsigned i;
	int ret;

	if (loop->closing)
		return -ESHUTDOWN;
	if (fd < 0 || !iov || !iovcnt || iovcnt > RX_SEND_IOV_MAX ||
	    nfds > RX_FDS_MAX || (nfds && !fds) || !cb)
		return -EINVAL;
	for (i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (!total || total > INT32_MAX)
		return -EINVAL; /* descriptors need at least one byte */
	s->fd = fd;
	s->iov = iov;
	s->iovcnt = iovcnt;
	s->total = total;
	s->done = 0;
	s->fds = fds;
	s->nfds = nfds;
	s->cb = cb;
	rx__op_begin(loop, &s->op, RX_KIND_SEND);
	ret = rx_send_arm(&s->op);
	if (ret < 0)
		rx__op_end(&s->op);
	return ret;
}

void rx__send_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_send *s = (struct rx_send *)op;

	switch (rx__op_retry(op, &res, s->fd, POLLOUT, rx_send_arm)) {
	case 1:
		return;
	case -1:
		goto finish;
	}
	if (res <= 0) {
		/* 0 from a stream socket would spin: report it */
		res = res ? res : -EIO;
		goto finish;
	}
	s->done += (size_t)res;
	res = (int)s->total;
	if (s->done >= s->total)
		goto finish;
	res = rx__op_rearm(op, rx_send_arm);
	if (res < 0)
		goto finish;
	return;
finish:
	rx__op_end(op);
	s->cb(s, res);
}
