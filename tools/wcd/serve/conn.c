/* SPDX-License-Identifier: MIT */
/*
 * One client connection, all in the one loop: its lifetime, its framing
 * and its leases (conn.h; requests.c answers the requests).
 *
 * Each client has one receive in flight (a header of WIRE_HDR_LEN bytes,
 * then exactly its payload), a bounded queue of outgoing frames (at most
 * WCD_OUTQ_MAX; receiving pauses while it is half full, so a client that
 * pipelines without reading cannot make the daemon buffer without bound),
 * and a pidfd watch on its process. A lease ends when the client detaches,
 * disconnects or dies. A malformed frame gets an ERROR reply, then that
 * connection is closed; no other client notices.
 *
 * conn.c calls nothing above it: requests go to hooks->dispatch, and a
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
#include <sys/socket.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "serve/conn.h"

static void client_recv_hdr(struct wcd_client *c);

void server_poke(struct wcd *d)
{
	struct wcd_server *srv = d->srv;

	if (srv->pausing && srv->hooks && srv->hooks->pause_poke)
		srv->hooks->pause_poke(d);
}

void server_maybe_done(struct wcd *d)
{
	if (wcd_stopping(d) && !d->srv->nclients)
		rx_loop_stop(&d->loop);
}

/* --- leases --------------------------------------------------------------- */

uint64_t client_lease_add(struct wcd_client *c, int vi)
{
	struct lease *l;

	WC_ASSERT(c->nleases < WCD_LEASES_PER_CLIENT);
	WC_ASSERT(vi >= 0 && vi < WCD_VERSIONS);
	WC_ASSERT(wcd_model(c->d)->ver[vi].used);
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

/* --- lifetime ------------------------------------------------------------- */

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

void client_free_if_idle(struct wcd_client *c)
{
	struct wcd *d = c->d;
	struct wcd_server *srv = d->srv;

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
		srv->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv->nclients--;
	for (struct wcd_waiter *w = srv->waiters; w; w = w->next)
		if (w->c == c)
			w->c = NULL;
	if (srv->hooks && srv->hooks->client_gone)
		srv->hooks->client_gone(d, c);
	free(c->payload);
	free(c);
	server_maybe_done(d);
	if (srv->pausing)
		server_poke(d);
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

/* --- sending -------------------------------------------------------------- */

static void client_send_next(struct wcd_client *c);

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
		server_poke(c->d);
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

bool client_sends_fd(const struct wcd_client *c, int fd)
{
	for (const struct out_msg *m = c->oq_head; m; m = m->next)
		for (unsigned i = 0; i < m->nfds; i++)
			if (m->fds[i] == fd)
				return true;
	return false;
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

/* --- replies that come later ---------------------------------------------- */

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
/* --- receiving ------------------------------------------------------------ */

void client_recv_next(struct wcd_client *c)
{
	struct wcd *d = c->d;

	if (c->closing)
		return;
	if (d->srv->pausing && c != d->srv->pause_except) {
		c->ho_held = true;
		server_poke(d);
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
			server_poke(c->d);
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


/* --- the process behind it ------------------------------------------------ */

static void client_died(struct rx_child *ch, int res)
{
	struct wcd_client *c = container_of(ch, struct wcd_client, watch);
	const struct server_hooks *hooks = c->d->srv->hooks;

	/* client_log_end says how it ended (ch->exited, its status). A
	 * client whose last frames decide what this daemon does
	 * (hooks->read_to_end: the new daemon of a handover, whose SERVING
	 * may wait in the socket) is read on to its end of file instead: a
	 * process's descriptors are closed before its pidfd reports the
	 * exit, so everything it sent comes before that end. Closing
	 * already (its disconnect came first: the exit in the same batch,
	 * before our cancel, or awaited by client_close): client_close
	 * would do nothing, and nothing else would free it. */
	if (res == 0 && !c->closing && hooks && hooks->read_to_end &&
	    hooks->read_to_end(c->d, c))
		return;
	if (res == 0 && !c->closing)
		client_close(c, "the client process died");
	else
		client_free_if_idle(c);
}

bool client_watch(struct wcd_client *c)
{
	c->watching = rx_child_watch_pid(&c->d->loop, &c->watch, c->pid,
					 client_died) == 0;
	return c->watching;
}

bool client_awaits_frame(const struct wcd_client *c)
{
	return rx_op_busy(&c->rx.op) && c->rx.cb == client_hdr_cb &&
	       !c->hdr_have;
}

/* --- iterating ------------------------------------------------------------ */

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
