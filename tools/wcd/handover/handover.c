/* SPDX-License-Identifier: MIT */
/*
 * Hot handover: what both sides use (handover.h): d->ho, the tests' kill
 * hook, the lock's owner pid, pidfds, and blocking frames that carry
 * descriptors (SCM_RIGHTS) on the connection between the two daemons.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "handover/handover.h"
#include "wire_handover.h"
#include "daemon/fault.h"

struct wcd_ho *ho_get(struct wcd *d)
{
	if (!d->ho) {
		d->ho = calloc(1, sizeof(*d->ho));
		if (d->ho)
			d->ho->d = d;
	}
	return d->ho;
}

void handover_free(struct wcd *d)
{
	free(d->ho);
	d->ho = NULL;
}

/* The tests' hook: WCD_HANDOVER_KILL=old:K|new:K stops that side at step K
 * with SIGKILL, so that every step's failure is reached by an event. */
void ho_step(const char *side, int k)
{
	const char *e = fault_str(FAULT_HANDOVER_KILL);
	size_t n = strlen(side);

	if (!e || strncmp(e, side, n) || e[n] != ':' || atoi(e + n + 1) != k)
		return;
	log_warn("WCD_HANDOVER_KILL: stopping the %s daemon at step %d", side,
		 k);
	raise(SIGKILL);
}

/* Makes /proc/locks and the lock file name this process as the lock's
 * owner, for wcctl (it checks them against the ready file): the new daemon
 * when it takes the lock over, the old one when it takes it back from a
 * new one that died before it served. The flock belongs to the open file
 * description both share; /proc/locks names the pid that last set it, so
 * convert EX -> SH -> EX. Each conversion removes, then adds (flock(2):
 * not atomic); a contender needs LOCK_EX, which the SH in between
 * refuses, so only the two instants in the kernel between remove and add
 * are open. */
int ho_claim_lock(struct wcd *d, char *err)
{
	char pidtxt[32];
	int n;

	if (flock(d->lock_fd, LOCK_SH | LOCK_NB) ||
	    flock(d->lock_fd, LOCK_EX | LOCK_NB))
		return base_errf(err, errno,
			       "cannot take the lock %s under pid %d: %s (wcctl would not recognise this daemon as its owner)",
			       d->paths.lock, (int)getpid(), strerror(errno));
	n = snprintf(pidtxt, sizeof(pidtxt), "%d\n", (int)getpid());
	errno = EIO;   /* a short write sets none */
	if (ftruncate(d->lock_fd, 0) ||
	    pwrite(d->lock_fd, pidtxt, (size_t)n, 0) != n)
		return base_errf(err, errno, "cannot write pid %d into %s: %s",
			       (int)getpid(), d->paths.lock, strerror(errno));
	return 0;
}

bool ho_pidfd_exited(int pidfd, int wait_ms)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	if (pidfd < 0)
		return false;
	for (;;) {
		int r = poll(&p, 1, wait_ms);

		if (r >= 0)
			return r > 0;
		if (errno != EINTR)
			return false;
	}
}

/* --- blocking frames with descriptors ------------------------------------- */

int ho_send(int fd, struct wire_put *w, const int *fds, unsigned nfds,
		   char *err)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * WIRE_FDS_PER_FRAME)];
	} cm;
	size_t off = 0;
	int ret = wire_frame_end(w, err);

	if (ret)
		return ret;
	while (off < w->len) {
		struct iovec iov = { w->buf + off, w->len - off };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t k;

		if (nfds && off == 0) {
			struct cmsghdr *c;

			memset(&cm, 0, sizeof(cm));
			m.msg_control = cm.buf;
			m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
			c = CMSG_FIRSTHDR(&m);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
			memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
		}
		k = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return base_errf(err, k < 0 ? errno : EPIPE,
				       "cannot send a handover frame: %s",
				       k < 0 ? strerror(errno) : "nothing sent");
		off += (size_t)k;
	}
	return 0;
}

void ho_frame_free(struct ho_frame *f)
{
	for (unsigned i = 0; i < f->nfds; i++)
		if (f->fds[i] >= 0)
			close(f->fds[i]);
	free(f->p);
	memset(f, 0, sizeof(*f));
}

/* Reads exactly len bytes, keeping the descriptors that come with them.
 * -ECONNRESET when the peer closed (before or inside). */
static int read_full(int fd, void *buf, size_t len, struct ho_frame *f,
		     char *err)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * WIRE_FDS_PER_FRAME)];
	} cm;
	size_t off = 0;

	while (off < len) {
		struct iovec iov = { (uint8_t *)buf + off, len - off };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = cm.buf,
				    .msg_controllen = sizeof(cm.buf) };
		struct cmsghdr *c;
		ssize_t k = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return base_errf(err, errno == EAGAIN ? ETIMEDOUT : errno,
				       "handover: receive failed: %s",
				       errno == EAGAIN ? "no frame within the timeout" :
				       strerror(errno));
		for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			unsigned n;
			int *p;

			if (c->cmsg_level != SOL_SOCKET ||
			    c->cmsg_type != SCM_RIGHTS)
				continue;
			n = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			p = (int *)CMSG_DATA(c);
			for (unsigned i = 0; i < n; i++) {
				int x;

				memcpy(&x, &p[i], sizeof(x));
				if (f->nfds < WIRE_FDS_PER_FRAME)
					f->fds[f->nfds++] = x;
				else
					close(x);
			}
		}
		if (k == 0)
			return base_errf(err, ECONNRESET,
				       "handover: the old daemon closed the connection");
		off += (size_t)k;
	}
	return 0;
}

int ho_recv(int fd, struct ho_frame *f, char *err)
{
	uint8_t hdr[WIRE_HDR_LEN];
	int ret;

	memset(f, 0, sizeof(*f));
	ret = read_full(fd, hdr, sizeof(hdr), f, err);
	if (!ret)
		ret = wire_hdr_decode(hdr, sizeof(hdr), &f->h, err);
	if (!ret && f->h.len > HO_FRAME_MAX)
		ret = base_errf(err, EMSGSIZE,
			      "handover: a %u-byte frame is over the %u-byte bound",
			      f->h.len, HO_FRAME_MAX);
	if (!ret && f->h.len) {
		f->p = malloc(f->h.len);
		if (!f->p)
			ret = base_errf(err, ENOMEM, "out of memory");
		else
			ret = read_full(fd, f->p, f->h.len, f, err);
	}
	if (ret)
		ho_frame_free(f);
	return ret;
}
