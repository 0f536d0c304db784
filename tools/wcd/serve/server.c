/* SPDX-License-Identifier: MIT */
/*
 * The daemon's socket (server.h): listening, accepting (who may connect,
 * the descriptor limit, the connection limit), stopping, and what goes to
 * every client (notices, pids, lease holders). One connection's life is
 * conn.c; a handover's pause of them all is pause.c.
 */
#include <errno.h>
#include <inttypes.h>
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

/* --- accepting ------------------------------------------------------------ */

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
	struct wcd_server *srv = d->srv;
	struct wcd_client *c = oldest_idle(d);

	srv->fd_shortages++;
	if (!srv->fd_short) {
		struct rlimit rl = { 0 };

		getrlimit(RLIMIT_NOFILE, &rl);
		srv->fd_short = true;
		log_warn("out of descriptors (%s, limit %llu, %u connections): accepting again every %d ms and closing the oldest idle connections; raise the limit (ulimit -n) if this lasts",
			 strerror(-err), (unsigned long long)rl.rlim_cur,
			 srv->nclients, RX_ACCEPT_PAUSE_NS / 1000000);
	}
	if (c) {
		srv->shed++;
		log_debug("client pid %d: closed to free a descriptor",
			  (int)c->pid);
		client_close(c, "out of descriptors: the oldest idle connection");
	}
}

static void accept_cb(struct rx_accept *a, int fd, bool final)
{
	struct wcd_server *srv = container_of(a, struct wcd_server, accept);
	struct wcd *d = srv->d;
	struct wcd_client *c;
	struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
	socklen_t len = sizeof(cred);

	if (fd < 0) {
		if (final && srv->accept_again && !wcd_stopping(d) &&
		    srv->listen_fd >= 0) {
			/* a handover's pause ended before its stop did */
			srv->accept_again = false;
			if (!srv->pausing)
				server_start(d, srv->hooks);
			return;
		}
		if (final && !wcd_stopping(d) && !srv->pausing)
			log_error("accept stopped: %s", strerror(-fd));
		else if (!final && fd != -ECONNABORTED && fd != -EINTR &&
			 fd != -EAGAIN)
			fd_shortage(d, fd);
		if (final && srv->pausing)
			server_poke(d);
		return;
	}
	if (srv->fd_short) {
		srv->fd_short = false;
		log_info("accepting again after the descriptor shortage (%" PRIu64 " pauses, %" PRIu64 " idle connections shed so far)",
			 srv->fd_shortages, srv->shed);
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
	c->next = srv->clients;
	if (srv->clients)
		srv->clients->prev = c;
	srv->clients = c;
	srv->nclients++;
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
	if (srv->nclients > WCD_CLIENTS_MAX) {
		reply_error(c, 0, WIRE_E_LIMIT, true,
			    "this daemon already serves %d connections (the limit)",
			    WCD_CLIENTS_MAX);
		return;
	}
	if (!client_watch(c))
		log_warn("client pid %d: cannot watch it with a pidfd; its lease ends when it disconnects",
			 (int)c->pid);
	log_debug("client pid %d uid %u connected", (int)c->pid,
		  (unsigned)c->uid);
	client_recv_next(c);
}

/* --- listen, stop --------------------------------------------------------- */

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
	struct wcd_server *srv = d->srv;
	int ret;

	srv->hooks = hooks;
	ret = rx_accept_start(&d->loop, &srv->accept, srv->listen_fd,
			      accept_cb);
	if (ret)
		die("cannot accept on %s: %s", d->paths.sock, strerror(-ret));
}

static void stop_timer_cb(struct rx_timer *t, int res)
{
	struct wcd_server *srv = container_of(t, struct wcd_server,
					      stop_timer);
	struct wcd *d = srv->d;

	if (res == -ECANCELED)
		return;
	for (struct wcd_client *c = srv->clients, *n; c; c = n) {
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
	struct wcd_server *srv = d->srv;
	struct wire_notice nt = { .kind = WIRE_NOTICE_SHUTDOWN };

	if (wcd_stopping(d))
		return;
	if (srv->lent) {
		WC_ASSERT(srv->hooks && srv->hooks->stop_hold);
		srv->hooks->stop_hold(d);
		return;
	}
	wcd_enter(d, WCD_STOPPING);
	log_info("stopping: no new connections; telling %u client(s)",
		 srv->nclients);
	if (srv->listen_fd >= 0) {
		rx_accept_stop(&srv->accept);
		close(srv->listen_fd);
		srv->listen_fd = -1;
	}
	own_remove_published(d);
	nt.version = wcd_current(d)->number;
	snprintf(nt.msg, sizeof(nt.msg),
		 "wcd pid %d is shutting down; with the host backend your mappings stay valid",
		 (int)getpid());
	server_notify(d, &nt, SERVER_NOTIFY_CLOSE);
	if (rx_timer_start(&d->loop, &srv->stop_timer, STOP_FLUSH_NS,
			   stop_timer_cb))
		rx_loop_stop(&d->loop);
	server_maybe_done(d);
}
/* --- every client --------------------------------------------------------- */

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

	for (struct wcd_client *c = d->srv->clients; c && n < max;
	     c = c->next) {
		if (c->closing)
			continue;
		pids[n] = c->pid;
		leases[n] = c->nleases;
		n++;
	}
	return n;
}
