/* SPDX-License-Identifier: MIT */
/*
 * The daemon's socket: connections, framing and leases, all in the one
 * loop (requests.c answers the requests).
 *
 * Each client has one receive in flight (a header of WIRE_HDR_LEN bytes,
 * then exactly its payload), a bounded queue of outgoing frames (at most
 * WCD_OUTQ_MAX; receiving pauses while it is half full, so a client that
 * pipelines without reading cannot make the daemon buffer without bound),
 * and a pidfd watch on its process. A lease ends when the client detaches,
 * disconnects or dies. A malformed frame gets an ERROR reply, then that
 * connection is closed; no other client notices.
 *
 * server.c calls nothing above it: requests go to hooks->dispatch, and a
 * lease's end to hooks->lease_ended (both registered by main.c); a reply
 * that comes later (a lifecycle job) is held in a struct wcd_waiter.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "serve/server.h"
#include "serve/access.h"
#include "serve/own.h"

#define STOP_FLUSH_NS 1000000000ull   /* notices get 1 s to leave */

static void client_recv_hdr(struct wcd_client *c);

/* While a handover pauses the server: tell it that a client may have come
 * to rest (hooks->pause_poke, handover_old.c). */
static void pause_poke(struct wcd *d)
{
	if (d->srv->pausing && d->srv->hooks && d->srv->hooks->pause_poke)
		d->srv->hooks->pause_poke(d);
}
static void server_maybe_done(struct wcd *d);

/* --- leases ---------------------------------------------------------------- */

uint64_t client_lease_add(struct wcd_client *c, int vi)
{
	struct lease *l;

	WC_ASSERT(c->nleases < WCD_LEASES_PER_CLIENT);
	WC_ASSERT(vi >= 0 && vi < WCD_VERSIONS && c->d->model.ver[vi].used);
	l = &c->leases[c->nleases++];
	l->id = ++c->d->srv->next_lease;
	l->ver = vi;
	return l->id;
}

void client_lease_drop(struct wcd_client *c, unsigned i)
{
	int vi;

	WC_ASSERT(i < c->nleases);
	vi = c->leases[i].ver;
	c->leases[i] = c->leases[--c->nleases];
	c->d->srv->hooks->lease_ended(c->d, vi);
}

static void leases_end(struct wcd_client *c, const char *why)
{
	struct log_fields lf = { .client_pid = c->pid };

	if (c->nleases)
		log_with(LOG_DEBUG, &lf, "client pid %d: %u lease(s) ended (%s)",
			 (int)c->pid, c->nleases, why);
	while (c->nleases)
		client_lease_drop(c, c->nleases - 1);
}

/* --- lifetime ---------------------------------------------------------------- */

static bool client_busy(const struct wcd_client *c)
{
	return rx_op_busy(&c->rx.op) || rx_op_busy(&c->tx.op) ||
	       (c->watching && rx_op_busy(&c->watch.op));
}

/* The one line that says how a client ended, when it is freed: its death
 * when the pidfd saw it (a signal at info, as an engine killed is worth
 * seeing; an exit at debug), else the first close's cause (debug, as the
 * per-attach lines). */
static void client_log_end(const struct wcd_client *c)
{
	const struct rx_child *ch = &c->watch;
	struct log_fields lf = { .client_pid = c->pid };

	if (!c->watching || !ch->exited)
		log_with(LOG_DEBUG, &lf, "client pid %d: closed (%s)",
			 (int)c->pid, c->why);
	else if (ch->term_signal > 0)
		log_with(LOG_INFO, &lf, "client pid %d was killed by signal %d (SIG%s)",
			 (int)c->pid, ch->term_signal,
			 sigabbrev_np(ch->term_signal) ?
			 sigabbrev_np(ch->term_signal) : "?");
	else if (ch->exit_code >= 0)
		log_with(LOG_DEBUG, &lf, "client pid %d exited with code %d",
			 (int)c->pid, ch->exit_code);
	else
		log_with(LOG_DEBUG, &lf, "client pid %d exited (its status went to its parent, which reaped it first)",
			 (int)c->pid);
}

static void client_free_if_idle(struct wcd_client *c)
{
	struct wcd *d = c->d;

	if (!c->closing || client_busy(c))
		return;
	client_log_end(c);
	while (c->oq_head) {
		struct out_msg *m = c->oq_head;

		c->oq_head = m->next;
		wire_put_free(&m->w);
		free(m);
	}
	if (c->watching)
		rx_child_close(&c->watch);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		d->srv->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	d->srv->nclients--;
	for (struct wcd_waiter *w = d->srv->waiters; w; w = w->next)
		if (w->c == c)
			w->c = NULL;
	if (d->srv->hooks && d->srv->hooks->client_gone)
		d->srv->hooks->client_gone(d, c);
	free(c->payload);
	free(c);
	server_maybe_done(d);
	if (d->srv->pausing)
		pause_poke(d);
}

void client_close(struct wcd_client *c, const char *why)
{
	/* Already closing: this is one of its operations finishing (the
	 * pidfd after the end of file, say); free it if it was the last. */
	if (c->closing) {
		client_free_if_idle(c);
		return;
	}
	c->closing = true;
	c->why = why;
	leases_end(c, why);
	/* a lent connection is shared with the new daemon: shutdown() would
	 * cut it there too; close() drops only this process's copy */
	if (!c->d->srv->lent)
		shutdown(c->fd, SHUT_RDWR);
	if (rx_op_busy(&c->rx.op))
		rx_cancel(&c->rx.op);
	if (rx_op_busy(&c->tx.op))
		rx_cancel(&c->tx.op);
	/* A dying process closes its socket before its pidfd says so: when
	 * it is exiting, the watch stays (the exit is under way) so that
	 * client_log_end can give the death as the cause. Not while the
	 * daemon stops or hands over: those wait for nobody. */
	if (c->watching && rx_op_busy(&c->watch.op) &&
	    (wcd_stopping(c->d) || c->d->srv->pausing ||
	     !rx_child_exiting(&c->watch)))
		rx_cancel(&c->watch.op);
	client_free_if_idle(c);
}

/* --- sending ------------------------------------------------------------- */

static void client_send_next(struct wcd_client *c);
static void client_recv_next(struct wcd_client *c);

static void client_sent(struct rx_send *s, int res)
{
	struct wcd_client *c = container_of(s, struct wcd_client, tx);
	struct out_msg *m = c->oq_head;
	bool close_after = m && m->close_after;

	if (m) {
		c->oq_head = m->next;
		if (!c->oq_head)
			c->oq_tail = NULL;
		c->noq--;
		wire_put_free(&m->w);
		free(m);
	}
	if (c->closing) {
		client_free_if_idle(c);
		return;
	}
	if (res < 0) {
		client_close(c, "send failed: the peer went away");
		return;
	}
	if (close_after) {
		client_close(c, "closed after an error");
		return;
	}
	client_send_next(c);
	if (c->recv_paused && c->noq < WCD_OUTQ_MAX / 2) {
		c->recv_paused = false;
		client_recv_next(c);
	}
	if (c->d->srv->pausing)
		pause_poke(c->d);
}

static void client_send_next(struct wcd_client *c)
{
	struct out_msg *m = c->oq_head;
	int ret;

	if (!m || rx_op_busy(&c->tx.op) || c->closing)
		return;
	m->iov.iov_base = m->w.buf;
	m->iov.iov_len = m->w.len;
	ret = rx_send_start(&c->d->loop, &c->tx, c->fd, &m->iov, 1,
			    m->nfds ? m->fds : NULL, m->nfds, client_sent);
	if (ret)
		client_close(c, "cannot start a send");
}

void client_queue(struct wcd_client *c, struct wire_put *w,
			 const int *fds, unsigned nfds, bool close_after)
{
	struct out_msg *m;

	if (c->closing) {
		wire_put_free(w);
		return;
	}
	m = calloc(1, sizeof(*m));
	if (!m || c->noq >= WCD_OUTQ_MAX) {
		free(m);
		wire_put_free(w);
		client_close(c, m ? "output queue full" : "out of memory");
		return;
	}
	m->w = *w;
	wire_put_init(w);
	if (nfds)
		memcpy(m->fds, fds, nfds * sizeof(int));
	m->nfds = nfds;
	m->close_after = close_after;
	if (c->oq_tail)
		c->oq_tail->next = m;
	else
		c->oq_head = m;
	c->oq_tail = m;
	c->noq++;
	client_send_next(c);
}

/* The type of the request that id answers: the one being handled, a held
 * one answered now, else 0 (unknown: a frame whose header was bad). */
static unsigned reply_type(const struct wcd_client *c, uint64_t id)
{
	if (id == c->h.id)
		return c->h.type;
	if (id == c->late_id)
		return c->late_type;
	return 0;
}

/* Frames a peer got wrong: logged at a bounded rate (a client that sends
 * garbage in a loop must not fill the disk); refusals stay at info. */
static bool errcode_is_malformed(uint32_t code)
{
	return code == WIRE_E_MALFORMED || code == WIRE_E_VERSION ||
	       code == WIRE_E_TOO_LARGE || code == WIRE_E_TYPE;
}

void reply_error(struct wcd_client *c, uint64_t id, uint32_t code,
		 bool close_after, const char *fmt, ...)
{
	struct log_fields lf = { .client_pid = c->pid };
	struct wire_put w;
	char msg[WIRE_MSG_MAX + 1];
	uint64_t suppressed = 0;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	metrics_reply(&c->d->m, reply_type(c, id), code);
	if (!errcode_is_malformed(code))
		log_with(LOG_INFO, &lf, "client pid %d: %s error: %s%s",
			 (int)c->pid, wire_errcode_name(code), msg,
			 close_after ? " (closing the connection)" : "");
	else if (metrics_malformed_log(&c->d->m, rx_now_ns(), &suppressed))
		log_with(LOG_INFO, &lf, "client pid %d: %s error: %s%s%s",
			 (int)c->pid, wire_errcode_name(code), msg,
			 close_after ? " (closing the connection)" : "",
			 suppressed ? " (and more like it: see below)" : "");
	if (suppressed)
		log_info("malformed frames: suppressed %llu similar lines",
			 (unsigned long long)suppressed);
	wire_put_init(&w);
	if (wire_error_frame(&w, id, code, msg, NULL)) {
		wire_put_free(&w);
		client_close(c, "cannot build an error");
		return;
	}
	client_queue(c, &w, NULL, 0, close_after);
}

void reply_frame(struct wcd_client *c, uint64_t id, struct wire_put *w,
		 const int *fds, unsigned nfds)
{
	char err[BASE_ERR_LEN];

	struct wire_hdr h;

	if (wire_frame_end(w, err)) {
		wire_put_free(w);
		reply_error(c, id, WIRE_E_INTERNAL, false,
			    "cannot build the reply: %s", err);
		return;
	}
	/* a reply is counted once, at its last frame */
	if (!wire_hdr_decode(w->buf, w->len, &h, NULL) &&
	    !(h.flags & WIRE_F_MORE))
		metrics_reply(&c->d->m, h.type == WIRE_ATTACH_MORE ?
			      WIRE_ATTACH : h.type, 0);
	client_queue(c, w, fds, nfds, false);
}

void reply_send(struct wcd_client *c, struct wire_put *w,
		const int *fds, unsigned nfds)
{
	reply_frame(c, c->h.id, w, fds, nfds);
}

/* --- replies that come later --------------------------------------------- */

void waiter_hold(struct wcd_waiter *w, struct wcd_client *c, uint64_t id)
{
	struct wcd *d = c->d;

	WC_ASSERT(!w->held);
	w->c = c;
	w->id = id;
	w->type = c->h.type;
	w->held = true;
	w->next = d->srv->waiters;
	d->srv->waiters = w;
}

struct wcd_client *waiter_take(struct wcd *d, struct wcd_waiter *w,
			       uint64_t *id)
{
	struct wcd_client *c = w->c;

	if (!w->held)
		return NULL;
	for (struct wcd_waiter **p = &d->srv->waiters; *p; p = &(*p)->next) {
		if (*p == w) {
			*p = w->next;
			break;
		}
	}
	*id = w->id;
	if (c) {
		c->late_id = w->id;
		c->late_type = w->type;
	}
	w->c = NULL;
	w->next = NULL;
	w->held = false;
	return c;
}
/* --- receiving ------------------------------------------------------------- */

/* Starts the next receive, unless the output queue is backing up or a
 * handover pauses the server (the client rests at this frame boundary). */
static void client_recv_next(struct wcd_client *c)
{
	struct wcd *d = c->d;

	if (c->closing)
		return;
	if (d->srv->pausing && c != d->srv->pause_except) {
		c->ho_held = true;
		pause_poke(d);
		return;
	}
	if (c->noq >= WCD_OUTQ_MAX / 2) {
		c->recv_paused = true;
		return;
	}
	client_recv_hdr(c);
}

static uint64_t frame_ns(const struct wcd_client *c)
{
	return (uint64_t)c->d->o.frame_timeout_ms * 1000000;
}

/* A frame (or the first one) did not arrive within --frame-timeout. */
static void client_frame_timeout(struct wcd_client *c, size_t got,
				 size_t want)
{
	c->d->srv->frame_timeouts++;
	c->d->srv->requests++;
	reply_error(c, c->h.id, WIRE_E_MALFORMED, true,
		    "%s: %zu of %zu bytes arrived within %.3g s (--frame-timeout); closing the connection",
		    got ? "a frame was left unfinished" : "no first frame",
		    got, want,
		    (double)c->d->o.frame_timeout_ms / 1000);
}

static void client_payload_cb(struct rx_recv *r, int res)
{
	struct wcd_client *c = container_of(r, struct wcd_client, rx);

	if (c->closing) {
		client_free_if_idle(c);
		return;
	}
	if (res == -ETIME) {
		client_frame_timeout(c, WIRE_HDR_LEN + r->done,
				     WIRE_HDR_LEN + c->h.len);
		return;
	}
	if (res == -ECONNRESET) {
		/* half-closed mid-payload: it can still read our answer */
		c->d->srv->requests++;
		reply_error(c, c->h.id, WIRE_E_MALFORMED, true,
			    "truncated %s frame: %zu of %u payload bytes arrived before the peer closed",
			    wire_type_name(c->h.type), r->done, c->h.len);
		return;
	}
	if (res <= 0 || (uint32_t)res < c->h.len) {
		client_close(c, "receive failed");
		return;
	}
	c->d->srv->hooks->dispatch(c, c->payload, c->h.len);
	client_recv_next(c);
}

static void client_hdr_cb(struct rx_recv *r, int res)
{
	struct wcd_client *c = container_of(r, struct wcd_client, rx);
	char err[BASE_ERR_LEN];
	size_t have = c->hdr_have + r->done;
	int ret;

	if (c->closing) {
		client_free_if_idle(c);
		return;
	}
	if (res == -ECANCELED) {
		/* server_pause cancelled the wait for a frame to begin: none
		 * of it came, so the client rests; or part of a first header
		 * did, and the rest is read (the frame is answered) before it
		 * does; or the pause ended before the cancel did: receive
		 * again */
		if (have) {
			c->hdr_have = have;
			ret = rx_recv_start(&c->d->loop, &c->rx, c->fd,
					    c->hdr + have, WIRE_HDR_LEN - have,
					    WIRE_HDR_LEN - have, 0,
					    client_hdr_cb);
			if (ret)
				client_close(c, "cannot start a receive");
			return;
		}
		if (c->d->srv->pausing) {
			c->ho_held = true;
			pause_poke(c->d);
			return;
		}
		client_recv_hdr(c);
		return;
	}
	if (res == 0 && have == 0) {
		client_close(c, "disconnected");
		return;
	}
	if (res == -ETIME) {
		client_frame_timeout(c, have, WIRE_HDR_LEN);
		return;
	}
	if (res > 0 && have < WIRE_HDR_LEN) {
		/* begun: the rest of the header within the deadline */
		c->hdr_have = have;
		rx_op_deadline(&c->rx.op, frame_ns(c));
		ret = rx_recv_start(&c->d->loop, &c->rx, c->fd,
				    c->hdr + have, WIRE_HDR_LEN - have,
				    WIRE_HDR_LEN - have, 0, client_hdr_cb);
		if (ret)
			client_close(c, "cannot start a receive");
		return;
	}
	c->hdr_have = 0;
	if (res == 0)
		res = -ECONNRESET;
	if (res > 0)
		res = WIRE_HDR_LEN;
	if (res == -ECONNRESET) {
		c->d->srv->requests++;
		reply_error(c, 0, WIRE_E_MALFORMED, true,
			    "truncated frame header: %zu of %d bytes arrived before the peer closed",
			    have, WIRE_HDR_LEN);
		return;
	}
	if (res < 0 || res < WIRE_HDR_LEN) {
		client_close(c, "receive failed");
		return;
	}
	ret = wire_hdr_decode(c->hdr, WIRE_HDR_LEN, &c->h, err);
	if (ret) {
		c->d->srv->requests++;
		reply_error(c, c->h.id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (c->h.len > WCD_REQ_MAX) {
		c->d->srv->requests++;
		reply_error(c, c->h.id, WIRE_E_TOO_LARGE, true,
			    "a %s request of %u bytes is over this daemon's request limit of %u bytes",
			    wire_type_name(c->h.type), c->h.len, WCD_REQ_MAX);
		return;
	}
	if (c->h.len == 0) {
		c->d->srv->hooks->dispatch(c, NULL, 0);
		client_recv_next(c);
		return;
	}
	if (c->pcap < c->h.len) {
		uint8_t *p = realloc(c->payload, c->h.len);

		if (!p) {
			client_close(c, "out of memory");
			return;
		}
		c->payload = p;
		c->pcap = c->h.len;
	}
	rx_op_deadline(&c->rx.op, frame_ns(c));
	ret = rx_recv_start(&c->d->loop, &c->rx, c->fd, c->payload, c->h.len,
			    c->h.len, 0, client_payload_cb);
	if (ret)
		client_close(c, "cannot start a receive");
}

/* The next header: the first frame of a connection must come within
 * --frame-timeout; later ones may take their time to begin (min 1 byte, no
 * deadline), and client_hdr_cb gives the rest of a begun header one. */
static void client_recv_hdr(struct wcd_client *c)
{
	bool first = c->requests == 0 && !c->hello_ok;
	int ret;

	c->hdr_have = 0;
	if (first)
		rx_op_deadline(&c->rx.op, frame_ns(c));
	ret = rx_recv_start(&c->d->loop, &c->rx, c->fd, c->hdr, WIRE_HDR_LEN,
			    first ? WIRE_HDR_LEN : 1, 0, client_hdr_cb);

	if (ret)
		client_close(c, "cannot start a receive");
}

/* --- accepting -------------------------------------------------------------- */

static void client_died(struct rx_child *ch, int res)
{
	struct wcd_client *c = container_of(ch, struct wcd_client, watch);

	/* client_log_end says how it ended (ch->exited, its status). A
	 * client whose last frames decide what this daemon does
	 * (hooks->read_to_end: the new daemon of a handover, whose SERVING
	 * may wait in the socket) is read on to its end of file instead: a
	 * process's descriptors are closed before its pidfd reports the
	 * exit, so everything it sent comes before that end. Closing
	 * already (its disconnect came first: the exit in the same batch,
	 * before our cancel, or awaited by client_close): client_close
	 * would do nothing, and nothing else would free it. */
	if (res == 0 && !c->closing && c->d->srv->hooks &&
	    c->d->srv->hooks->read_to_end && c->d->srv->hooks->read_to_end(c->d, c))
		return;
	if (res == 0 && !c->closing)
		client_close(c, "the client process died");
	else
		client_free_if_idle(c);
}

/* The oldest connection that holds no lease and has nothing queued, or
 * NULL. O(clients), only while descriptors are short. */
static struct wcd_client *oldest_idle(struct wcd *d)
{
	struct wcd_client *c, *found = NULL;

	for (c = d->srv->clients; c; c = c->next)   /* newest first */
		if (!c->closing && !c->nleases && !c->noq)
			found = c;
	return found;
}

/* The accept ran out of descriptors (it pauses and tries again by itself):
 * says so once per episode, and closes the oldest idle connection so that
 * the next accept has a descriptor. */
static void fd_shortage(struct wcd *d, int err)
{
	struct wcd_client *c = oldest_idle(d);

	d->srv->fd_shortages++;
	if (!d->srv->fd_short) {
		struct rlimit rl = { 0 };

		getrlimit(RLIMIT_NOFILE, &rl);
		d->srv->fd_short = true;
		log_warn("out of descriptors (%s, limit %llu, %u connections): accepting again every %d ms and closing the oldest idle connections; raise the limit (ulimit -n) if this lasts",
			 strerror(-err), (unsigned long long)rl.rlim_cur,
			 d->srv->nclients, RX_ACCEPT_PAUSE_NS / 1000000);
	}
	if (c) {
		d->srv->shed++;
		log_debug("client pid %d: closed to free a descriptor",
			  (int)c->pid);
		client_close(c, "out of descriptors: the oldest idle connection");
	}
}

static void accept_cb(struct rx_accept *a, int fd, bool final)
{
	struct wcd *d = container_of(a, struct wcd_server, accept)->d;
	struct wcd_client *c;
	struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t len = sizeof(cred);

	if (fd < 0) {
		if (final && d->srv->accept_again && !wcd_stopping(d) &&
		    d->srv->listen_fd >= 0) {
			/* a handover's pause ended before its stop did */
			d->srv->accept_again = false;
			if (!d->srv->pausing)
				server_start(d, d->srv->hooks);
			return;
		}
		if (final && !wcd_stopping(d) && !d->srv->pausing)
			log_error("accept stopped: %s", strerror(-fd));
		else if (!final && fd != -ECONNABORTED && fd != -EINTR &&
			 fd != -EAGAIN)
			fd_shortage(d, fd);
		if (final && d->srv->pausing)
			pause_poke(d);
		return;
	}
	if (d->srv->fd_short) {
		d->srv->fd_short = false;
		log_info("accepting again after the descriptor shortage (%" PRIu64 " pauses, %" PRIu64 " idle connections shed so far)",
			 d->srv->fd_shortages, d->srv->shed);
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->d = d;
	c->fd = fd;
	c->pid = -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
		c->pid = cred.pid;
		c->uid = cred.uid;
	}
	c->next = d->srv->clients;
	if (d->srv->clients)
		d->srv->clients->prev = c;
	d->srv->clients = c;
	d->srv->nclients++;
	if (wcd_stopping(d)) {
		client_close(c, "shutting down");
		return;
	}
	if (c->pid <= 0 || !access_peer_allowed(d, fd, c->uid, cred.gid)) {
		reply_error(c, 0, WIRE_E_PERM, true,
			    "uid %u (gid %u) may not use this daemon (it runs as uid %u): start wcd with --allow-uid %u, or run the engine in a group wcd allows (--allow-gid, --socket-group)",
			    (unsigned)c->uid, (unsigned)cred.gid,
			    (unsigned)geteuid(), (unsigned)c->uid);
		return;
	}
	if (d->srv->nclients > WCD_CLIENTS_MAX) {
		reply_error(c, 0, WIRE_E_LIMIT, true,
			    "this daemon already serves %d connections (the limit)",
			    WCD_CLIENTS_MAX);
		return;
	}
	if (rx_child_watch_pid(&d->loop, &c->watch, c->pid, client_died) == 0)
		c->watching = true;
	else
		log_warn("client pid %d: cannot watch it with a pidfd; its lease ends when it disconnects",
			 (int)c->pid);
	log_debug("client pid %d uid %u connected", (int)c->pid,
		  (unsigned)c->uid);
	client_recv_next(c);
}

/* --- listen, stop ------------------------------------------------------------ */

void server_init(struct wcd *d, struct wcd_server *s)
{
	*s = (struct wcd_server){ .d = d, .listen_fd = -1 };
	d->srv = s;
}

int server_sock_open(const struct wcd *d, struct sockaddr_un *sa, char *err)
{
	int fd;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(d->paths.sock) >= sizeof(sa->sun_path))
		return base_errf(err, ENAMETOOLONG, "socket path too long: %s",
			       d->paths.sock);
	strcpy(sa->sun_path, d->paths.sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return base_errf(err, errno, "socket: %s", strerror(errno));
	return fd;
}

int server_listen(struct wcd *d, char *err)
{
	struct sockaddr_un sa;
	mode_t old;
	int fd, ret;

	fd = server_sock_open(d, &sa, err);
	if (fd < 0)
		return fd;
	unlink(d->paths.sock);
	old = umask(0177);   /* the socket is born 0600 */
	ret = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (ret || listen(fd, 512)) {
		ret = base_errf(err, errno, "cannot listen on %s: %s",
			      d->paths.sock, strerror(errno));
		close(fd);
		return ret;
	}
	/* the mode and group engines of other users need (access.c) */
	ret = access_sock_publish(d, err);
	if (ret) {
		close(fd);
		return ret;
	}
	d->srv->listen_fd = fd;
	return 0;
}

void server_start(struct wcd *d, const struct server_hooks *hooks)
{
	int ret;

	d->srv->hooks = hooks;
	ret = rx_accept_start(&d->loop, &d->srv->accept, d->srv->listen_fd, accept_cb);
	if (ret)
		die("cannot accept on %s: %s", d->paths.sock, strerror(-ret));
}

static void server_maybe_done(struct wcd *d)
{
	if (wcd_stopping(d) && !d->srv->nclients)
		rx_loop_stop(&d->loop);
}

static void stop_timer_cb(struct rx_timer *t, int res)
{
	struct wcd *d = container_of(t, struct wcd_server, stop_timer)->d;

	if (res == -ECANCELED)
		return;
	for (struct wcd_client *c = d->srv->clients, *n; c; c = n) {
		n = c->next;
		client_close(c, "shutting down");
	}
	rx_loop_stop(&d->loop);
}

/* Stops accepting, unpublishes, tells every client, and lets the loop end
 * once they are gone (or after STOP_FLUSH_NS). While the clients are lent
 * (a committed handover) none of that is this daemon's to do: the stop is
 * held (hooks->stop_hold) until the handover ends. */
void server_stop(struct wcd *d)
{
	struct wire_notice nt = { .kind = WIRE_NOTICE_SHUTDOWN };

	if (wcd_stopping(d))
		return;
	if (d->srv->lent) {
		WC_ASSERT(d->srv->hooks && d->srv->hooks->stop_hold);
		d->srv->hooks->stop_hold(d);
		return;
	}
	wcd_enter(d, WCD_STOPPING);
	log_info("stopping: no new connections; telling %u client(s)",
		 d->srv->nclients);
	if (d->srv->listen_fd >= 0) {
		rx_accept_stop(&d->srv->accept);
		close(d->srv->listen_fd);
		d->srv->listen_fd = -1;
	}
	own_remove_published(d);
	nt.version = wcd_current(d)->number;
	snprintf(nt.msg, sizeof(nt.msg),
		 "wcd pid %d is shutting down; with the host backend your mappings stay valid",
		 (int)getpid());
	server_notify(d, &nt, SERVER_NOTIFY_CLOSE);
	if (rx_timer_start(&d->loop, &d->srv->stop_timer, STOP_FLUSH_NS,
			   stop_timer_cb))
		rx_loop_stop(&d->loop);
	server_maybe_done(d);
}

/* --- the client API (conn.h) ---------------------------------------------- */

struct wcd_client *client_first(struct wcd *d)
{
	struct wcd_client *c = d->srv->clients;

	while (c && c->closing)
		c = c->next;
	return c;
}

struct wcd_client *client_next(struct wcd_client *c)
{
	do
		c = c->next;
	while (c && c->closing);
	return c;
}

unsigned server_notify(struct wcd *d, const struct wire_notice *nt,
		       unsigned flags)
{
	unsigned n = 0;

	for (struct wcd_client *c = d->srv->clients, *next; c; c = next) {
		struct wire_put w;

		next = c->next;   /* client_queue may close and free c */
		if (c->closing || ((flags & SERVER_NOTIFY_LEASED) && !c->nleases))
			continue;
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
		wire_notice_put(&w, nt);
		if (wire_frame_end(&w, NULL)) {
			wire_put_free(&w);
			continue;
		}
		client_queue(c, &w, NULL, 0, flags & SERVER_NOTIFY_CLOSE);
		n++;
	}
	return n;
}

unsigned server_lease_pids(struct wcd *d, int vi, pid_t *pids, unsigned max)
{
	unsigned n = 0;

	for (struct wcd_client *c = client_first(d); c && n < max;
	     c = client_next(c)) {
		for (unsigned i = 0; i < c->nleases; i++) {
			if (vi < 0 || c->leases[i].ver == vi) {
				pids[n++] = c->pid;
				break;
			}
		}
	}
	return n;
}

unsigned server_clients(struct wcd *d, pid_t *pids, unsigned *leases,
			unsigned max)
{
	unsigned n = 0;

	for (struct wcd_client *c = d->srv->clients; c && n < max; c = c->next) {
		if (c->closing)
			continue;
		pids[n] = c->pid;
		leases[n] = c->nleases;
		n++;
	}
	return n;
}

/* --- hot handover (handover_old.c, handover_new.c) ------------------------------ */

void server_pause(struct wcd *d, struct wcd_client *except)
{
	d->srv->pausing = true;
	d->srv->pause_except = except;
	d->srv->accept_again = false;
	if (rx_op_busy(&d->srv->accept.op))
		rx_accept_stop(&d->srv->accept);
	for (struct wcd_client *c = d->srv->clients; c; c = c->next) {
		if (c == except || c->closing)
			continue;
		/* waiting for a header: stop waiting (client_hdr_cb); a
		 * payload being received is read to its end */
		if (rx_op_busy(&c->rx.op) && c->rx.cb == client_hdr_cb &&
		    !c->hdr_have)
			rx_cancel(&c->rx.op);
		if (c->recv_paused) {
			c->recv_paused = false;
			c->ho_held = true;
		}
	}
}

bool server_at_rest(struct wcd *d, pid_t *busy_pid)
{
	*busy_pid = 0;
	if (rx_op_busy(&d->srv->accept.op))
		return false;
	for (struct wcd_client *c = d->srv->clients; c; c = c->next) {
		if (c == d->srv->pause_except)
			continue;
		if (c->closing || !c->ho_held || rx_op_busy(&c->rx.op) ||
		    rx_op_busy(&c->tx.op) || c->noq) {
			*busy_pid = c->pid;
			return false;
		}
	}
	return true;
}

void server_resume(struct wcd *d)
{
	if (!d->srv->pausing)
		return;
	d->srv->pausing = false;
	d->srv->pause_except = NULL;
	for (struct wcd_client *c = d->srv->clients, *n; c; c = n) {
		n = c->next;
		if (!c->ho_held || c->closing)
			continue;
		c->ho_held = false;
		client_recv_next(c);
	}
	if (d->srv->listen_fd < 0 || wcd_stopping(d))
		return;
	if (rx_op_busy(&d->srv->accept.op))
		d->srv->accept_again = true;
	else
		server_start(d, d->srv->hooks);
}

struct wcd_client *server_adopt_client(struct wcd *d, int fd, pid_t pid,
				       uid_t uid, bool hello_ok,
				       uint64_t requests)
{
	struct wcd_client *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->d = d;
	c->fd = fd;
	c->pid = pid;
	c->uid = uid;
	c->hello_ok = hello_ok;
	c->requests = requests;
	c->next = d->srv->clients;
	if (d->srv->clients)
		d->srv->clients->prev = c;
	d->srv->clients = c;
	d->srv->nclients++;
	if (rx_child_watch_pid(&d->loop, &c->watch, c->pid, client_died) == 0)
		c->watching = true;
	else
		log_info("handed-over client pid %d is gone (no pidfd); its leases end",
			 (int)pid);
	return c;
}

/* Starts receiving on an adopted client (after its leases are set). */
void server_client_start(struct wcd_client *c)
{
	if (!c->watching) {
		client_close(c, "the client process died during the handover");
		return;
	}
	client_recv_next(c);
}
