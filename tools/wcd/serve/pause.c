/* SPDX-License-Identifier: MIT */
/*
 * Hot handover (issue 17), serve/'s side (server.h): the pause that lets
 * every client come to rest at a frame boundary while handover_old.c sends
 * them, the resume after, and the clients handover_new.c adopts.
 */
#include <stdlib.h>

#include "log.h"
#include "serve/server.h"

void server_pause(struct wcd *d, struct wcd_client *except)
{
	struct wcd_server *srv = d->srv;

	srv->pausing = true;
	srv->pause_except = except;
	srv->accept_again = false;
	if (rx_op_busy(&srv->accept.op))
		rx_accept_stop(&srv->accept);
	for (struct wcd_client *c = srv->clients; c; c = c->next) {
		if (c == except || c->closing)
			continue;
		/* waiting for a header: stop waiting (client_hdr_cb); a
		 * payload being received is read to its end */
		if (client_awaits_frame(c))
			rx_cancel(&c->rx.op);
		if (c->recv_paused) {
			c->recv_paused = false;
			c->ho_held = true;
		}
	}
}

bool server_at_rest(struct wcd *d, pid_t *busy_pid)
{
	struct wcd_server *srv = d->srv;

	*busy_pid = 0;
	if (rx_op_busy(&srv->accept.op))
		return false;
	for (struct wcd_client *c = srv->clients; c; c = c->next) {
		if (c == srv->pause_except)
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
	struct wcd_server *srv = d->srv;

	if (!srv->pausing)
		return;
	srv->pausing = false;
	srv->pause_except = NULL;
	for (struct wcd_client *c = srv->clients, *n; c; c = n) {
		n = c->next;
		if (!c->ho_held || c->closing)
			continue;
		c->ho_held = false;
		client_recv_next(c);
	}
	if (srv->listen_fd < 0 || wcd_stopping(d))
		return;
	if (rx_op_busy(&srv->accept.op))
		srv->accept_again = true;
	else
		server_start(d, srv->hooks);
}

struct wcd_client *server_adopt_client(struct wcd *d, int fd, pid_t pid,
				       uid_t uid, bool hello_ok,
				       uint64_t requests)
{
	struct wcd_server *srv = d->srv;
	struct wcd_client *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->d = d;
	c->fd = fd;
	c->pid = pid;
	c->uid = uid;
	c->hello_ok = hello_ok;
	c->requests = requests;
	c->next = srv->clients;
	if (srv->clients)
		srv->clients->prev = c;
	srv->clients = c;
	srv->nclients++;
	if (!client_watch(c))
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
