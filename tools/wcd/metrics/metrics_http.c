/* SPDX-License-Identifier: MIT */
/*
 * wcd --metrics-listen ADDR: GET /metrics over HTTP/1.x from the daemon's
 * own io_uring loop (no thread). Each connection is one request and one
 * answer, then closed (Connection: close). The parser is proto/wire/http.c.
 *
 * Bounds, so that scrapers cannot take anything from the engines:
 *   - at most MHTTP_CONNS_MAX connections at once, the slots allocated
 *     at start-up, and at most MHTTP_PEER_MAX of them from one peer (an
 *     IP address; a pid on unix:). A connection past either limit takes
 *     the slot of the oldest one that has not sent a whole request yet
 *     (of its own peer at the peer's limit; that one is closed: evicted),
 *     so that one peer holding many half-sent requests cannot lock a
 *     scraper out, and its reconnects evict only its own; it waits in the
 *     slot (next_fd) until the evicted one's receive has been cancelled.
 *     Only when every candidate is answering is a new connection closed at
 *     accept (rejected);
 *   - a request head of at most HTTP_HEAD_MAX bytes, read into the slot;
 *   - one deadline (MHTTP_DEADLINE_NS) for the whole exchange, read and
 *     write: a slow or silent client is cut off when it passes (a linked
 *     timeout on each receive and send, no timer of ours);
 *   - a malformed head is answered 4xx at once and closed;
 *   - after the answer our side is shut down and what the client still
 *     sends is read and dropped until it closes (within the deadline), so
 *     that unread bytes do not turn our close into a reset that could
 *     destroy the answer before the client read it ("lingering close").
 * Cost of a scrape: one render of the text (O(clients)), one malloc of
 * METRICS_TEXT_MAX for it, freed when the answer is sent.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "http.h"
#include "log.h"
#include "metrics/metrics.h"
#include "daemon/daemon.h"

#define MHTTP_CONNS_MAX 16
#define MHTTP_PEER_MAX 8              /* connections of one peer */
#define MHTTP_DEADLINE_NS (2000000000ull)   /* read + write, per request */
#define MHTTP_BACKLOG 64
#define MHTTP_CTYPE "text/plain; version=0.0.4; charset=utf-8"

struct mhttp;

/* Who a connection is from: the address family and the IP address, or
 * the pid (SO_PEERCRED) on a unix socket. */
struct mpeer {
	int family;
	uint8_t addr[16];
};

struct mconn {
	struct mhttp *mh;
	int fd;                       /* -1: the slot is free */
	struct mpeer peer;
	int next_fd;                  /* evicting fd: this one takes the slot */
	uint64_t next_at_ns;          /* when next_fd was accepted */
	struct mpeer next_peer;
	struct rx_recv rx;
	struct rx_send tx;
	struct iovec iov[2];
	uint64_t deadline_at_ns;
	size_t n;                     /* head bytes received */
	char in[HTTP_HEAD_MAX];
	char head[256];
	char *body;
	int status;
};

#define MHTTP_RETRY_NS (20000000ull)       /* a busy port, after a handover */

struct mhttp {
	struct wcd *d;
	int listen_fd;
	struct rx_accept acc;
	struct rx_timer retry;        /* the port is still the old daemon's */
	uint64_t retry_until_ns;
	char addr[256];
	char bound[256];              /* where it listens: port 0 resolved */
	char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t unix_dev;               /* the socket file we bound */
	ino_t unix_ino;
	struct mconn conns[MHTTP_CONNS_MAX];
};

static void conn_recv(struct mconn *c);

/* fd's exchange in slot c, from its accept at at_ns. */
static void conn_begin(struct mconn *c, int fd, uint64_t at_ns,
		       const struct mpeer *peer)
{
	c->fd = fd;
	c->peer = *peer;
	c->n = 0;
	c->status = 0;
	c->deadline_at_ns = at_ns + MHTTP_DEADLINE_NS;
	conn_recv(c);
}

/* Ends the slot's connection; a connection waiting for the slot (it
 * evicted this one) starts in it. */
static void conn_close(struct mconn *c)
{
	int next = c->next_fd;

	close(c->fd);
	c->fd = -1;
	free(c->body);
	c->body = NULL;
	c->next_fd = -1;
	if (next >= 0)
		conn_begin(c, next, c->next_at_ns, &c->next_peer);
}

/* Time left of the connection's deadline, or 0 when it has passed. */
static uint64_t time_left(const struct mconn *c)
{
	uint64_t now = rx_now_ns();

	return now >= c->deadline_at_ns ? 0 : c->deadline_at_ns - now;
}

static void conn_drained(struct rx_recv *rr, int res)
{
	struct mconn *c = container_of(rr, struct mconn, rx);
	uint64_t left = time_left(c);

	if (res <= 0 || !left) {
		conn_close(c);
		return;
	}
	rx_op_deadline(&c->rx.op, left);
	if (rx_recv_start(&c->mh->d->loop, &c->rx, c->fd, c->in,
			  sizeof(c->in), 1, 0, conn_drained))
		conn_close(c);
}

static void conn_sent(struct rx_send *s, int res)
{
	struct mconn *c = container_of(s, struct mconn, tx);
	struct wcd_metrics *m = &c->mh->d->m;

	if (res == -ETIME)
		m->http_timeouts++;
	else if (res >= 0 && c->status == 200)
		m->http_served++;
	else if (res >= 0)
		m->http_errors++;
	free(c->body);
	c->body = NULL;
	if (res < 0 || shutdown(c->fd, SHUT_WR)) {
		conn_close(c);
		return;
	}
	conn_drained(&c->rx, 1);
}

static void conn_answer(struct mconn *c, const struct http_request *r,
			int status)
{
	static const char *const msg[] = { "", "bad request\n" };
	struct wcd *d = c->mh->d;
	const char *body = msg[1];
	size_t len = strlen(body);
	bool head_only = false;
	int n;

	if (status == 200) {
		head_only = !strcmp(r->method, "HEAD");
		c->body = malloc(METRICS_TEXT_MAX);
		n = c->body ? metrics_render(d, c->body, METRICS_TEXT_MAX) :
			      -ENOMEM;
		if (n < 0) {
			log_error("metrics: cannot render: %s", strerror(-n));
			status = 503;
		} else {
			body = c->body;
			len = (size_t)n;
		}
	}
	if (status != 200) {
		snprintf(c->in, sizeof(c->in), "%d %s\n", status,
			 http_reason(status));
		body = c->in;
		len = strlen(body);
	}
	c->status = status;
	n = http_response_head(c->head, sizeof(c->head), status,
			       status == 200 ? MHTTP_CTYPE :
			       "text/plain; charset=utf-8", len);
	WC_ASSERT(n > 0);
	c->iov[0] = (struct iovec){ c->head, (size_t)n };
	c->iov[1] = (struct iovec){ (void *)body, head_only ? 0 : len };
	rx_op_deadline(&c->tx.op, time_left(c) ? time_left(c) : 1);
	if (rx_send_start(&d->loop, &c->tx, c->fd, c->iov, 2, NULL, 0,
			  conn_sent))
		conn_close(c);
}

static void conn_received(struct rx_recv *rr, int res)
{
	struct mconn *c = container_of(rr, struct mconn, rx);
	struct wcd_metrics *m = &c->mh->d->m;
	struct http_request r;
	int ret;

	if (res <= 0) {
		if (res == -ETIME)
			m->http_timeouts++;
		conn_close(c);
		return;
	}
	c->n += (size_t)res;
	ret = http_parse_request(c->in, c->n, &r);
	if (ret == 0) {
		conn_recv(c);
		return;
	}
	if (ret < 0) {
		conn_answer(c, &r, ret == -E2BIG ? 431 :
			    ret == -EMSGSIZE ? 413 :
			    ret == -EPROTONOSUPPORT ? 505 : 400);
		return;
	}
	if (strcmp(r.method, "GET") && strcmp(r.method, "HEAD"))
		conn_answer(c, &r, 405);
	else if (!http_path_is(&r, "/metrics"))
		conn_answer(c, &r, 404);
	else
		conn_answer(c, &r, 200);
}

static void conn_recv(struct mconn *c)
{
	uint64_t left = time_left(c);

	if (c->next_fd >= 0) {   /* evicted: bytes came before the cancel */
		conn_close(c);
		return;
	}
	if (!left) {
		c->mh->d->m.http_timeouts++;
		conn_close(c);
		return;
	}
	rx_op_deadline(&c->rx.op, left);
	if (rx_recv_start(&c->mh->d->loop, &c->rx, c->fd, c->in + c->n,
			  sizeof(c->in) - c->n, 1, 0, conn_received))
		conn_close(c);
}

static bool peer_eq(const struct mpeer *a, const struct mpeer *b)
{
	return a->family == b->family && !memcmp(a->addr, b->addr,
						 sizeof(a->addr));
}

/* fd's peer; an address that cannot be read is a peer of its own kind
 * (family 0), which shares the limit with the others that failed. */
static void peer_of(int fd, struct mpeer *p)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct ucred cr;
	socklen_t cl = sizeof(cr);

	memset(p, 0, sizeof(*p));
	if (getpeername(fd, (struct sockaddr *)&ss, &sl))
		return;
	p->family = ss.ss_family;
	if (ss.ss_family == AF_INET)
		memcpy(p->addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	else if (ss.ss_family == AF_INET6)
		memcpy(p->addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	else if (ss.ss_family == AF_UNIX &&
		 !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl))
		memcpy(p->addr, &cr.pid, sizeof(cr.pid));
}

/* Connections of peer p: in slots (not being evicted) and waiting. */
static unsigned peer_count(const struct mhttp *mh, const struct mpeer *p)
{
	unsigned n = 0;

	for (unsigned i = 0; i < MHTTP_CONNS_MAX; i++) {
		const struct mconn *c = &mh->conns[i];

		n += c->fd >= 0 && c->next_fd < 0 && peer_eq(&c->peer, p);
		n += c->next_fd >= 0 && peer_eq(&c->next_peer, p);
	}
	return n;
}

/* The slot for a connection accepted past a limit: the one whose
 * connection is the oldest that has not sent a whole request (only of
 * peer `only` when given; its receive is cancelled; the new fd waits in
 * next_fd). When every such connection is already being evicted, the
 * oldest waiting one is closed instead and the new fd waits in its place.
 * NULL when every candidate is answering. O(MHTTP_CONNS_MAX). */
static struct mconn *evict_oldest(struct mhttp *mh, const struct mpeer *only)
{
	struct mconn *reading = NULL, *waiting = NULL;

	for (unsigned i = 0; i < MHTTP_CONNS_MAX; i++) {
		struct mconn *c = &mh->conns[i];

		if (c->fd < 0 || c->status)
			continue;
		if (c->next_fd < 0 && (!only || peer_eq(&c->peer, only)) &&
		    (!reading || c->deadline_at_ns < reading->deadline_at_ns))
			reading = c;
		if (c->next_fd >= 0 && (!only || peer_eq(&c->next_peer, only)) &&
		    (!waiting || c->next_at_ns < waiting->next_at_ns))
			waiting = c;
	}
	if (reading && !rx_cancel(&reading->rx.op))
		return reading;
	if (waiting) {
		close(waiting->next_fd);
		waiting->next_fd = -1;
		return waiting;
	}
	return NULL;
}

static void mhttp_accepted(struct rx_accept *a, int fd, bool final)
{
	struct mhttp *mh = container_of(a, struct mhttp, acc);
	struct mconn *c = NULL;
	struct mpeer p;

	if (fd < 0) {
		if (final && fd != -ECANCELED)
			log_warn("metrics: accept stopped: %s; the endpoint serves no more scrapes",
				 strerror(-fd));
		return;
	}
	peer_of(fd, &p);
	if (peer_count(mh, &p) >= MHTTP_PEER_MAX) {
		c = evict_oldest(mh, &p);
	} else {
		for (unsigned i = 0; i < MHTTP_CONNS_MAX && !c; i++)
			if (mh->conns[i].fd < 0)
				c = &mh->conns[i];
		if (c) {
			conn_begin(c, fd, rx_now_ns(), &p);
			return;
		}
		c = evict_oldest(mh, NULL);
	}
	if (!c) {
		mh->d->m.http_rejected++;
		close(fd);
		return;
	}
	mh->d->m.http_evicted++;
	c->next_fd = fd;
	c->next_at_ns = rx_now_ns();
	c->next_peer = p;
}

/* Whether a process accepts connections on the unix socket at path: a
 * connect (non-blocking: a full backlog, EAGAIN, is a live one too).
 * 0 nobody (a stale file), 1 somebody, -errno when it cannot be told. */
static int unix_socket_live(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 ||
	    errno == EAGAIN || errno == EINPROGRESS)
		ret = 1;
	else if (errno != ECONNREFUSED && errno != ENOENT)
		ret = -errno;
	close(fd);
	return ret;
}

/* "unix:PATH": a socket file left by a dead process is replaced; one that
 * a live process (another daemon, or the old one during a handover)
 * answers on is left alone: -EADDRINUSE. The inode bound is kept so that
 * metrics_http_stop removes the file only while it is still ours. */
static int mhttp_bind_unix(struct mhttp *mh, const char *addr, char *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, ret;

	if (!addr[5] || strlen(addr + 5) >= sizeof(sa.sun_path))
		return base_errf(err, EINVAL,
			       "--metrics-listen '%s': the unix socket path must be 1 to %zu bytes",
			       addr, sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, addr + 5, strlen(addr + 5) + 1);
	if (lstat(sa.sun_path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return base_errf(err, EEXIST,
				       "--metrics-listen '%s': %s exists and is not a socket; remove it or pick another path",
				       addr, sa.sun_path);
		ret = unix_socket_live(&sa);
		if (ret == 1)
			return base_errf(err, EADDRINUSE,
				       "--metrics-listen '%s': another process serves on %s (it accepted a connection); stop it or give this daemon another path",
				       addr, sa.sun_path);
		if (ret < 0)
			return base_errf(err, -ret,
				       "--metrics-listen '%s': cannot tell whether %s is in use: %s; remove it if it is stale, or pick another path",
				       addr, sa.sun_path, strerror(-ret));
		unlink(sa.sun_path);  /* nobody answers: a stale socket */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return base_errf(err, errno, "socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(fd, MHTTP_BACKLOG) || stat(sa.sun_path, &st)) {
		ret = -errno;
		close(fd);
		return base_errf(err, -ret,
			       "--metrics-listen '%s': cannot listen: %s",
			       addr, strerror(-ret));
	}
	mh->unix_dev = st.st_dev;
	mh->unix_ino = st.st_ino;
	snprintf(mh->unix_path, sizeof(mh->unix_path), "%s", sa.sun_path);
	snprintf(mh->bound, sizeof(mh->bound), "unix:%s", sa.sun_path);
	mh->listen_fd = fd;
	log_info("metrics: serving GET /metrics on unix:%s", sa.sun_path);
	return 0;
}

/* Binds addr: "unix:PATH", "[v6]:port", "host:port" or ":port". */
static int mhttp_bind(struct mhttp *mh, const char *addr, char *err)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	char host[256], shown[300];
	const char *port;
	int fd, one = 1, ret;

	if (!strncmp(addr, "unix:", 5))
		return mhttp_bind_unix(mh, addr, err);
	port = strrchr(addr, ':');
	if (!port || !port[1] || (size_t)(port - addr) >= sizeof(host))
		return base_errf(err, EINVAL,
			       "--metrics-listen '%s' is not host:port, [v6]:port, :port or unix:PATH (e.g. 127.0.0.1:9400)",
			       addr);
	memcpy(host, addr, (size_t)(port - addr));
	host[port - addr] = '\0';
	port++;
	if (host[0] == '[') {
		size_t n = strlen(host);

		if (n < 3 || host[n - 1] != ']')
			return base_errf(err, EINVAL,
				       "--metrics-listen '%s': an IPv6 address goes in brackets, e.g. [::1]:9400",
				       addr);
		memmove(host, host + 1, n - 2);
		host[n - 2] = '\0';
	}
	ret = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (ret)
		return base_errf(err, EINVAL, "--metrics-listen '%s': %s", addr,
			       gai_strerror(ret));
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		freeaddrinfo(res);
		return base_errf(err, -ret, "socket: %s", strerror(-ret));
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) ||
	    listen(fd, MHTTP_BACKLOG)) {
		ret = -errno;
		freeaddrinfo(res);
		close(fd);
		return base_errf(err, -ret,
			       "--metrics-listen '%s': cannot listen: %s; pick a free port",
			       addr, strerror(-ret));
	}
	freeaddrinfo(res);
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char h[128] = "?", p[16] = "?";

		if (!getsockname(fd, (struct sockaddr *)&ss, &sl))
			getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p,
				    sizeof(p), NI_NUMERICHOST | NI_NUMERICSERV);
		snprintf(shown, sizeof(shown),
			 ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, p);
	}
	mh->listen_fd = fd;
	snprintf(mh->bound, sizeof(mh->bound), "%.200s", shown);
	log_info("metrics: serving GET /metrics on http://%s/metrics", shown);
	return 0;
}

static void mhttp_retry(struct rx_timer *t, int res)
{
	struct mhttp *mh = container_of(t, struct mhttp, retry);
	char err[BASE_ERR_LEN];
	int ret;

	if (res < 0)
		return;
	ret = mhttp_bind(mh, mh->addr, err);
	if (ret == -EADDRINUSE && rx_now_ns() < mh->retry_until_ns) {
		rx_timer_start(&mh->d->loop, &mh->retry, MHTTP_RETRY_NS,
			       mhttp_retry);
		return;
	}
	if (!ret)
		ret = rx_accept_start(&mh->d->loop, &mh->acc, mh->listen_fd,
				      mhttp_accepted);
	if (ret)
		log_warn("%s; serving without --metrics-listen",
			 ret == -EADDRINUSE ? err : strerror(-ret));
}

int metrics_http_start(struct wcd *d, const char *addr, unsigned wait_ms,
		       char *err)
{
	struct mhttp *mh = calloc(1, sizeof(*mh));
	int ret;

	if (!mh)
		return base_errf(err, ENOMEM, "out of memory");
	mh->d = d;
	mh->listen_fd = -1;
	snprintf(mh->addr, sizeof(mh->addr), "%s", addr);
	for (unsigned i = 0; i < MHTTP_CONNS_MAX; i++) {
		mh->conns[i].fd = -1;
		mh->conns[i].next_fd = -1;
		mh->conns[i].mh = mh;
	}
	ret = mhttp_bind(mh, addr, err);
	if (ret == -EADDRINUSE && wait_ms) {
		/* the loop goes on serving; the bind is tried again */
		log_info("metrics: %s is still taken (the old daemon?); trying again for %u ms",
			 addr, wait_ms);
		mh->retry_until_ns = rx_now_ns() + wait_ms * 1000000ull;
		ret = rx_timer_start(&d->loop, &mh->retry, MHTTP_RETRY_NS,
				     mhttp_retry);
		if (ret) {
			free(mh);
			return base_errf(err, -ret, "metrics: cannot start a timer: %s",
				       strerror(-ret));
		}
		d->mhttp = mh;
		return 0;
	}
	if (ret) {
		free(mh);
		return ret;
	}
	ret = rx_accept_start(&d->loop, &mh->acc, mh->listen_fd,
			      mhttp_accepted);
	if (ret) {
		close(mh->listen_fd);
		free(mh);
		return base_errf(err, -ret, "metrics: cannot accept: %s",
			       strerror(-ret));
	}
	d->mhttp = mh;
	return 0;
}

void metrics_http_stop(struct wcd *d)
{
	struct mhttp *mh = d->mhttp;

	if (!mh)
		return;
	/* After rx_loop_close nothing of ours is pending; if the loop could
	 * not be closed, leave the memory to the exit rather than free what
	 * the kernel may still write. */
	if (rx_op_busy(&mh->acc.op) || rx_op_busy(&mh->retry.op))
		return;
	for (unsigned i = 0; i < MHTTP_CONNS_MAX; i++) {
		struct mconn *c = &mh->conns[i];

		if (rx_op_busy(&c->rx.op) || rx_op_busy(&c->tx.op))
			return;
	}
	for (unsigned i = 0; i < MHTTP_CONNS_MAX; i++) {
		struct mconn *c = &mh->conns[i];

		if (c->next_fd >= 0)
			close(c->next_fd);
		c->next_fd = -1;
		if (c->fd >= 0)
			conn_close(c);
	}
	/* Unlink while still listening, and only our own file: a daemon that
	 * took the path over (a handover's new one binds once our listener
	 * stops answering) keeps its socket. */
	if (mh->unix_path[0]) {
		struct stat st;

		if (!lstat(mh->unix_path, &st) && st.st_dev == mh->unix_dev &&
		    st.st_ino == mh->unix_ino)
			unlink(mh->unix_path);
	}
	if (mh->listen_fd >= 0)
		close(mh->listen_fd);
	free(mh);
	d->mhttp = NULL;
}

const char *metrics_http_addr(const struct wcd *d)
{
	return d->mhttp ? d->mhttp->bound : "";
}
