/* SPDX-License-Identifier: MIT */
/*
 * libwcache: the connection's frames -- blocking framed request/reply
 * through proto/wire, descriptors received with recvmsg(MSG_CMSG_CLOEXEC),
 * notices queued while a reply is awaited, the daemon's pidfd, and the
 * small requests (PING, STATUS, SHUTDOWN). Connecting and closing, which
 * detaches what is attached (attach.c, above this file), are connect.c.
 *
 * Frames are read exactly (header, then payload), never past the end of the
 * current frame, so descriptors the daemon attaches to a frame's first byte
 * are always received with that frame.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "client.h"
#include "err.h"
#include "paths.h"
#include "wire.h"

int wc__pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

void wc__frame_release(struct wc_frame *f)
{
	for (unsigned i = 0; i < f->nfds; i++)
		if (f->fds[i] >= 0)
			close(f->fds[i]);
	f->nfds = 0;
}

/* Moves descriptors out of a control message into f; more than the frame
 * limit (or a truncated control message) is a protocol error. */
static int take_fds(struct wc_conn *c, struct msghdr *mh, struct wc_frame *f,
		    struct wc_error *err)
{
	int ret = 0;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm;
	     cm = CMSG_NXTHDR(mh, cm)) {
		unsigned n;
		int *fds;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		n = (unsigned)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		fds = (int *)CMSG_DATA(cm);
		for (unsigned i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, &fds[i], sizeof(fd));
			if (f->nfds < WIRE_FDS_PER_FRAME)
				f->fds[f->nfds++] = fd;
			else {
				close(fd);
				ret = -E2BIG;
			}
		}
	}
	if (mh->msg_flags & MSG_CTRUNC)
		ret = -EBADMSG;
	if (ret)
		return wc__fail(err, -ret, "the daemon %s sent more than %u file descriptors with one frame: restart the daemon, it does not speak this library's protocol",
				c->sock, WIRE_FDS_PER_FRAME);
	return 0;
}

/* Reads exactly len bytes into buf, collecting descriptors into f. */
static int recv_exact(struct wc_conn *c, void *buf, size_t len,
		      struct wc_frame *f, struct wc_error *err)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * WIRE_FDS_PER_FRAME)];
		struct cmsghdr align;
	} ctl;
	size_t got = 0;

	while (got < len) {
		struct iovec iov = { (char *)buf + got, len - got };
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1,
			.msg_control = ctl.b, .msg_controllen = sizeof(ctl.b),
		};
		ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
		int ret;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return wc__fail(err, ETIMEDOUT, "no reply from the daemon at %s within %d ms: it may be overloaded or stuck; check `wcctl status`",
					c->sock, c->timeout_ms);
		if (n < 0 && errno != ECONNRESET)
			return wc__fail(err, errno, "reading from the daemon at %s failed: %s",
					c->sock, strerror(errno));
		ret = n < 0 ? 0 : take_fds(c, &mh, f, err);
		if (ret)
			return ret;
		/* ECONNRESET: the daemon died with our bytes unread; to the
		 * engine that is the same as a close */
		if (n <= 0) {
			c->eof = true;
			return wc__fail(err, EPIPE, "the daemon (pid %d) closed the connection at %s%s: it exited or refused this client; see its log, then reconnect",
					(int)c->pid, c->sock,
					got ? " in the middle of a frame" : "");
		}
		got += (size_t)n;
	}
	return 0;
}

/* Receives one whole frame into f (payload in c->rbuf, valid until the next
 * receive). The header is checked before the payload is read. */
int wc__frame_recv(struct wc_conn *c, struct wc_frame *f, struct wc_error *err)
{
	uint8_t hdr[WIRE_HDR_LEN];
	char e[BASE_ERR_LEN];
	int ret;

	f->nfds = 0;
	f->payload = NULL;
	if (c->eof)
		return wc__fail(err, EPIPE, "the daemon (pid %d) has closed the connection at %s: reconnect",
				(int)c->pid, c->sock);
	ret = recv_exact(c, hdr, sizeof(hdr), f, err);
	if (ret)
		goto out_release;
	ret = wire_hdr_decode(hdr, sizeof(hdr), &f->h, e);
	if (ret) {
		ret = wc__fail(err, -ret, "the daemon at %s sent a bad frame: %s", c->sock, e);
		goto out_release;
	}
	if (f->h.len > c->rcap) {
		void *p = realloc(c->rbuf, f->h.len);

		if (!p) {
			ret = wc__fail(err, ENOMEM, "out of memory for a %u-byte reply", f->h.len);
			goto out_release;
		}
		c->rbuf = p;
		c->rcap = f->h.len;
	}
	ret = recv_exact(c, c->rbuf, f->h.len, f, err);
	if (ret)
		goto out_release;
	f->payload = c->rbuf;
	return 0;
out_release:
	wc__frame_release(f);
	/* the stream is out of step now */
	c->eof = true;
	return ret;
}

static int send_all(struct wc_conn *c, const void *buf, size_t len,
		    struct wc_error *err)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(c->fd, (const char *)buf + done, len - done,
				 MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return wc__fail(err, ETIMEDOUT, "the daemon at %s accepted no request bytes within %d ms: it may be stuck; check `wcctl status`",
					c->sock, c->timeout_ms);
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
			c->eof = true;
			return wc__fail(err, EPIPE, "the daemon (pid %d) at %s has gone away: it exited; restart it and reconnect",
					(int)c->pid, c->sock);
		}
		if (n < 0)
			return wc__fail(err, errno, "sending to the daemon at %s failed: %s",
					c->sock, strerror(errno));
		done += (size_t)n;
	}
	return 0;
}

static int error_reply(struct wc_conn *c, const struct wc_frame *f,
		       unsigned req_type, struct wc_error *err);

/* The daemon may refuse a connection (an ERROR with id 0) and close it
 * before the first request is written: the refusal then waits in the
 * receive queue, and it, not EPIPE, is the error to report. */
static int refusal_or(struct wc_conn *c, unsigned type, int ret,
		      struct wc_error *err)
{
	struct wc_error e2;
	struct wc_frame f;

	c->eof = false;
	if (!wc__frame_recv(c, &f, &e2)) {
		wc__frame_release(&f);
		if (f.h.type == WIRE_ERROR) {
			c->eof = true;
			return error_reply(c, &f, type, err);
		}
	}
	c->eof = true;
	return ret;
}

int wc__sock_open(const struct wc_conn *c, int *out, struct ucred *cr)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t crlen = sizeof(*cr);
	struct timeval tv;
	int fd, e;

	memcpy(sa.sun_path, c->sock, strlen(c->sock) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (c->timeout_ms > 0) {
		tv.tv_sec = c->timeout_ms / 1000;
		tv.tv_usec = (c->timeout_ms % 1000) * 1000;
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &crlen) < 0) {
		e = errno;
		close(fd);
		return -e;
	}
	*out = fd;
	return 0;
}

/* Whether what waits on c's socket is the daemon's word that the first
 * frame came too late (an ERROR, MALFORMED, before it closed), peeked:
 * left in place, it is read as any reply would be otherwise. */
static bool dropped_as_late(const struct wc_conn *c)
{
	uint8_t buf[WIRE_HDR_LEN + WIRE_MSG_MAX + 16];
	struct wire_error we;
	struct wire_hdr h;
	char e[BASE_ERR_LEN];
	ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);

	return n >= WIRE_HDR_LEN &&
	       !wire_hdr_decode(buf, (size_t)n, &h, e) &&
	       h.type == WIRE_ERROR && h.len <= (size_t)n - WIRE_HDR_LEN &&
	       !wire_error_get(buf + WIRE_HDR_LEN, h.len, &we, e) &&
	       we.code == WIRE_E_MALFORMED;
}

/* A connection that has not spoken yet and that the daemon may have
 * dropped (its first frame late): quiet longer than WC_QUIET_REOPEN_NS,
 * or its peer already hung up. When bytes wait, only if they are the
 * daemon's "too late": any other word before it closed (a refusal of
 * this client) is read as the answer, as it would have been. */
static bool quiet_too_long(const struct wc_conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };
	int avail = 0;

	if (c->spoke || ioctl(c->fd, FIONREAD, &avail) < 0)
		return false;
	if (avail > 0)
		return dropped_as_late(c);
	if (wc__now_ns() - c->connected_ns > WC_QUIET_REOPEN_NS)
		return true;
	return poll(&p, 1, 0) == 1 &&
	       (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* c's socket opened again on the same descriptor number (wc_notice_fd
 * stays valid), the peer the uid wc_connect trusted; a new daemon's pid
 * followed as a handover's is (wc__follow_daemon: wc_daemon_fd keeps its
 * number too). */
static int reopen(struct wc_conn *c, struct wc_error *err)
{
	struct ucred cr;
	int fd, ret, e;

	ret = wc__sock_open(c, &fd, &cr);
	if (ret)
		return wc__fail(err, -ret, "connecting to %s again (the connection was quiet since it opened, longer than the daemon waits for a first frame) failed: %s",
				c->sock, strerror(-ret));
	if (cr.uid != c->peer_uid) {
		close(fd);
		return wc__fail(err, EACCES, "the process serving %s now runs as uid %u, not the uid %u trusted when the connection opened: connect again",
				c->sock, (unsigned)cr.uid, (unsigned)c->peer_uid);
	}
	if (dup3(fd, c->fd, O_CLOEXEC) < 0) {
		e = errno;
		close(fd);
		return wc__fail(err, e, "dup3 of the new socket failed: %s", strerror(e));
	}
	close(fd);
	if (cr.pid > 0 && cr.pid != c->pid)      /* a new daemon (a restart) */
		wc__follow_daemon(c, cr.pid);
	c->connected_ns = wc__now_ns();
	return 0;
}

int wc__send(struct wc_conn *c, struct wire_put *w, struct wc_error *err)
{
	char e[BASE_ERR_LEN];
	int ret = wire_frame_end(w, e);

	if (ret)
		return wc__fail(err, -ret, "could not encode the request: %s", e);
	/* the daemon drops a connection whose first frame is late: one
	 * opened long ago (an engine that connected, then built its model)
	 * is opened again first; nothing was said on it, nothing is lost */
	if (quiet_too_long(c)) {
		ret = reopen(c, err);
		if (ret)
			return ret;
	}
	ret = send_all(c, w->buf, w->len, err);
	if (!ret)
		c->spoke = true;
	if (ret == -EPIPE)
		ret = refusal_or(c, w->buf[6] | (unsigned)w->buf[7] << 8, ret,
				 err);
	return ret;
}

static enum wc_notice_kind notice_kind(uint32_t k)
{
	switch (k) {
	case WIRE_NOTICE_SHUTDOWN:
		return WC_NOTICE_SHUTDOWN;
	case WIRE_NOTICE_NEW_VERSION:
		return WC_NOTICE_VERSION;
	case WIRE_NOTICE_HANDOVER:
		return WC_NOTICE_HANDOVER;
	case WIRE_NOTICE_IN_PLACE:
		return WC_NOTICE_IN_PLACE;
	case WIRE_NOTICE_INCOMPLETE:
		return WC_NOTICE_INCOMPLETE;
	default:
		return WC_NOTICE_OTHER;
	}
}

/* Another wcd serves this connection now: the daemon fd keeps its number
 * (engines may have it in their poll sets) and watches the new pid. A new
 * pid already gone leaves the old, readable pidfd: the daemon is gone. */
void wc__follow_daemon(struct wc_conn *c, pid_t pid)
{
	int fd = wc__pidfd_open(pid);

	if (fd < 0)
		return;
	if (c->pidfd < 0) {
		c->pidfd = fd;
	} else {
		if (dup3(fd, c->pidfd, O_CLOEXEC) < 0) {
			close(fd);
			return;
		}
		close(fd);
	}
	c->pid = pid;
}

/* An IN_PLACE notice of version: the models attached to the version
 * before it hold it now (the same mappings); wc_resume fetches their new
 * hashes (wc__models_refresh). */
static void models_in_place(struct wc_conn *c, uint64_t version)
{
	for (struct wc_model *m = c->models; m; m = m->next) {
		if (m->manifest_only || m->info.version + 1 != version)
			continue;
		m->info.version = version;
		m->hashes_stale = true;
	}
}

/* Queues a NOTICE frame (the oldest is dropped when the queue is full). */
static int queue_notice(struct wc_conn *c, const struct wc_frame *f,
			struct wc_error *err)
{
	struct wire_notice nt;
	struct wc_notice *n;
	char e[BASE_ERR_LEN];
	int ret = wire_notice_get(f->payload, f->h.len, &nt, e);

	if (ret)
		return wc__fail(err, -ret, "the daemon at %s sent a bad notice: %s", c->sock, e);
	if (nt.kind == WIRE_NOTICE_HANDOVER && nt.pid > 0 &&
	    (pid_t)nt.pid != c->pid)
		wc__follow_daemon(c, (pid_t)nt.pid);
	if (nt.kind == WIRE_NOTICE_IN_PLACE)
		models_in_place(c, nt.version);
	if (c->nq_len == WC_NOTICES_MAX) {
		c->nq_head = (c->nq_head + 1) % WC_NOTICES_MAX;
		c->nq_len--;
	}
	WC_ASSERT(c->nq_len < WC_NOTICES_MAX && c->nq_head < WC_NOTICES_MAX);
	n = &c->notices[(c->nq_head + c->nq_len) % WC_NOTICES_MAX];
	n->kind = notice_kind(nt.kind);
	n->version = nt.version;
	wc__strlcpy(n->msg, nt.msg, sizeof(n->msg));
	c->nq_len++;
	return 0;
}

static int errcode_errno(uint32_t code)
{
	switch (code) {
	case WIRE_E_MALFORMED:       return EBADMSG;
	case WIRE_E_VERSION:         return EPROTONOSUPPORT;
	case WIRE_E_TOO_LARGE:       return EMSGSIZE;
	case WIRE_E_TYPE:            return EOPNOTSUPP;
	case WIRE_E_PERM:            return EACCES;
	case WIRE_E_STATE:           return EINVAL;
	case WIRE_E_MISMATCH:        return ESTALE;
	case WIRE_E_NOT_IMPLEMENTED: return ENOSYS;
	case WIRE_E_NO_LEASE:        return ESRCH;
	case WIRE_E_LIMIT:           return EAGAIN;
	case WIRE_E_SLEEPING:        return EAGAIN;
	case WIRE_E_BUSY:            return EBUSY;
	case WIRE_E_READONLY:        return EROFS;
	default:                     return EIO;
	}
}

/* Turns an ERROR frame into the caller's error: the daemon's message as it
 * was sent (it already says what to do). */
static int error_reply(struct wc_conn *c, const struct wc_frame *f,
		       unsigned req_type, struct wc_error *err)
{
	struct wire_error we;
	char e[BASE_ERR_LEN];
	int ret = wire_error_get(f->payload, f->h.len, &we, e);

	if (ret)
		return wc__fail(err, -ret, "the daemon at %s sent a bad error reply: %s", c->sock, e);
	if (!req_type)
		return wc__fail(err, errcode_errno(we.code), "the daemon refused this connection (%s): %s",
				wire_errcode_name(we.code), we.msg);
	return wc__fail(err, errcode_errno(we.code), "the daemon refused %s (%s): %s",
			wire_type_name(req_type), wire_errcode_name(we.code),
			we.msg);
}

/* Waits for the reply to request id (of type type), queueing notices met
 * on the way. An ERROR reply (or an ERROR with id 0: a connection-level
 * refusal) becomes the returned error. The caller releases f's fds. */
int wc__reply(struct wc_conn *c, uint64_t id, unsigned type,
	      struct wc_frame *f, struct wc_error *err)
{
	for (unsigned skipped = 0;; skipped++) {
		int ret = wc__frame_recv(c, f, err);

		if (ret)
			return ret;
		if (f->h.type == WIRE_NOTICE && !(f->h.flags & WIRE_F_REPLY)) {
			wc__frame_release(f);
			ret = queue_notice(c, f, err);
			if (ret)
				return ret;
			continue;
		}
		if (f->h.type == WIRE_ERROR && (f->h.id == id || f->h.id == 0)) {
			wc__frame_release(f);
			return error_reply(c, f, type, err);
		}
		if (f->h.id != id || f->h.type != type ||
		    !(f->h.flags & WIRE_F_REPLY)) {
			wc__frame_release(f);
			c->eof = true;
			return wc__fail(err, EBADMSG, "the daemon at %s answered %s request %llu with a %s frame for request %llu: the connection is out of step; reconnect",
					c->sock, wire_type_name(type),
					(unsigned long long)id,
					wire_type_name(f->h.type),
					(unsigned long long)f->h.id);
		}
		return 0;
	}
}

/* Sends the frame in w (begun with id) and waits for its reply. */
int wc__call(struct wc_conn *c, struct wire_put *w, uint64_t id,
	     unsigned type, struct wc_frame *f, struct wc_error *err)
{
	int ret = wc__send(c, w, err);

	if (ret)
		return ret;
	return wc__reply(c, id, type, f, err);
}

int wc__dev_open(struct wc_conn *c, const char *spec, char *err)
{
	uint64_t t0 = wc__now_ns();
	int ret = gpu_dev_open(&c->dev, spec, err);

	c->times.device_ns += wc__now_ns() - t0;
	if (!ret)
		c->dev_open = true;
	return ret;
}

int wc_daemon_fd(const struct wc_conn *c)
{
	return c->pidfd;
}

pid_t wc_daemon_pid(const struct wc_conn *c)
{
	return c->pid;
}

int wc_notice_fd(const struct wc_conn *c)
{
	return c->fd;
}

int wc_notice_read(struct wc_conn *c, struct wc_notice *n,
		   struct wc_error *err)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	struct wc_frame f;
	int ret;

	while (!c->nq_len) {
		if (c->eof)
			return wc__fail(err, EPIPE, "the daemon (pid %d) has closed the connection at %s",
					(int)c->pid, c->sock);
		if (poll(&p, 1, 0) <= 0) {
			wc__ok(err);
			return 0;
		}
		ret = wc__frame_recv(c, &f, err);
		if (ret)
			return ret;
		wc__frame_release(&f);
		if (f.h.type == WIRE_ERROR && f.h.id == 0) {
			/* a refusal sent at accept (uid, client limit) */
			c->eof = true;
			return error_reply(c, &f, 0, err);
		}
		if (f.h.type != WIRE_NOTICE) {
			c->eof = true;
			return wc__fail(err, EBADMSG, "the daemon at %s sent an unrequested %s frame: reconnect",
					c->sock, wire_type_name(f.h.type));
		}
		ret = queue_notice(c, &f, err);
		if (ret)
			return ret;
	}
	WC_ASSERT(c->nq_len > 0 && c->nq_head < WC_NOTICES_MAX);
	*n = c->notices[c->nq_head];
	c->nq_head = (c->nq_head + 1) % WC_NOTICES_MAX;
	c->nq_len--;
	wc__ok(err);
	return 1;
}

int wc_ping(struct wc_conn *c, unsigned depth, struct wc_error *err)
{
	uint64_t first = c->next_id;
	struct wc_frame f;
	int ret;

	if (!depth)
		depth = 1;
	if (depth > 4096)
		return wc__fail(err, EINVAL, "ping depth %u is over the limit of 4096", depth);
	for (unsigned i = 0; i < depth; i++) {
		wire_frame_begin(&c->w, WIRE_PING, 0, c->next_id++);
		ret = wc__send(c, &c->w, err);
		if (ret)
			return ret;
	}
	for (unsigned i = 0; i < depth; i++) {
		ret = wc__reply(c, first + i, WIRE_PING, &f, err);
		if (ret)
			return ret;
		wc__frame_release(&f);
	}
	wc__ok(err);
	return 0;
}

/* STATUS and METRICS: one request, a text blob back. */
static int call_text(struct wc_conn *c, unsigned type, const char *what,
		     char **out, struct wc_error *err)
{
	uint64_t id = c->next_id++;
	struct wc_frame f;
	const char *j;
	size_t jn;
	char e[BASE_ERR_LEN];
	int ret;

	*out = NULL;
	wire_frame_begin(&c->w, type, 0, id);
	ret = wc__call(c, &c->w, id, type, &f, err);
	if (ret)
		return ret;
	wc__frame_release(&f);
	ret = wire_status_get(f.payload, f.h.len, &j, &jn, e);
	if (ret)
		return wc__fail(err, -ret, "the daemon at %s sent a bad %s reply: %s",
				c->sock, what, e);
	*out = malloc(jn + 1);
	if (!*out)
		return wc__fail(err, ENOMEM, "out of memory for a %zu-byte %s reply",
				jn, what);
	memcpy(*out, j, jn);
	(*out)[jn] = '\0';
	wc__ok(err);
	return 0;
}

int wc_status(struct wc_conn *c, char **json, struct wc_error *err)
{
	return call_text(c, WIRE_STATUS, "STATUS", json, err);
}

int wc_metrics(struct wc_conn *c, char **text, struct wc_error *err)
{
	return call_text(c, WIRE_METRICS, "METRICS", text, err);
}

int wc_shutdown(struct wc_conn *c, struct wc_error *err)
{
	uint64_t id = c->next_id++;
	struct wc_frame f;
	int ret;

	wire_frame_begin(&c->w, WIRE_SHUTDOWN, 0, id);
	ret = wc__call(c, &c->w, id, WIRE_SHUTDOWN, &f, err);
	if (ret)
		return ret;
	wc__frame_release(&f);
	wc__ok(err);
	return 0;
}

void wc_times(const struct wc_conn *c, struct wc_attach_times *out)
{
	*out = c->times;
}
