/* SPDX-License-Identifier: MIT */
/*
 * wcd's serve/ folder: the socket and who may use it.
 *
 *   conn.c      one connection: its life, framing, replies, waiters,
 *               leases; serve/'s state and hooks (conn.h)
 *   server.c    listen, accept, stop; notices, pids and lease holders of
 *               every client (this header)
 *   pause.c     a handover's pause and resume of every client, and the
 *               clients it adopts (this header)
 *   access.c    who may connect: the socket's group and mode, the runtime
 *               directory's x bits, every peer's credentials (access.h)
 *   own.c       ownership of the device's files: flock, --force, stale
 *               files (own.h)
 *
 * serve/'s client API (this header and conn.h, which it includes). One
 * client connection (struct wcd_client), and what the files above serve/
 * may do with clients:
 *
 *   reply to a request      reply_send() (the request being handled),
 *                           reply_frame() (any id), reply_error()
 *   reply later             waiter_hold() when the request arrives,
 *                           waiter_take() when the answer is ready (NULL
 *                           if the client went away meanwhile)
 *   notify every client     server_notify() (SERVER_NOTIFY_LEASED: only
 *                           those holding a lease)
 *   iterate clients         client_first()/client_next() (closing ones
 *                           skipped), server_clients() (pids, lease counts)
 *   leases                  client_lease_add(), client_lease_drop() (the
 *                           end of a lease calls hooks->lease_ended),
 *                           server_lease_pids()
 *   close one               client_close()
 *
 * A client may be freed inside any call that queues to it (a full output
 * queue closes it): iterate with client_next() taken before the call, as
 * server_notify() does.
 */
#ifndef WCD_SERVER_H
#define WCD_SERVER_H

#include "serve/conn.h"

/* The live clients' pids and lease counts (at most max). */
unsigned server_clients(struct wcd *d, pid_t *pids, unsigned *leases,
			unsigned max);

#define SERVER_NOTIFY_LEASED 1u   /* only clients that hold a lease */
#define SERVER_NOTIFY_CLOSE  2u   /* close each connection once sent */
/* Sends nt to every live client (flags above); returns how many. */
unsigned server_notify(struct wcd *d, const struct wire_notice *nt,
		       unsigned flags);

/* Pids of the clients holding a lease on version index vi (-1: on any
 * version), at most max. */
unsigned server_lease_pids(struct wcd *d, int vi, pid_t *pids, unsigned max);

/* Hot handover (handover_new.c), pause.c: a client made from a
 * connection another daemon handed over (its pidfd watch started, nothing
 * received yet); NULL, with the fd left to the caller, when out of memory.
 * server_client_start starts receiving (or closes it when its process is
 * gone). */
struct wcd_client *server_adopt_client(struct wcd *d, int fd, pid_t pid,
				       uid_t uid, bool hello_ok,
				       uint64_t requests);
void server_client_start(struct wcd_client *c);

/* Gives d its server state s (zeroed, no socket yet): d->srv. */
void server_init(struct wcd *d, struct wcd_server *s);

/* The daemon's unix socket: fills sa with d->paths.sock (-ENAMETOOLONG when
 * it does not fit) and returns a new stream socket for it (close-on-exec),
 * not yet bound or connected; -errno with err set on failure. Used to
 * listen (server_listen) and to reach the daemon being taken over
 * (handover_new.c). */
struct sockaddr_un;
int server_sock_open(const struct wcd *d, struct sockaddr_un *sa, char *err);

int server_listen(struct wcd *d, char *err);
/* Starts accepting; hooks stay registered for the daemon's life. */
void server_start(struct wcd *d, const struct server_hooks *hooks);
void server_stop(struct wcd *d);

/* Hot handover (issue 17), pause.c: pausing stops accepting and
 * lets every client but `except` come to rest at a frame boundary (a frame
 * half received is read to its end and answered; nothing more is
 * received); server_at_rest says when all are, else names one that is not;
 * resume undoes it. */
void server_pause(struct wcd *d, struct wcd_client *except);
bool server_at_rest(struct wcd *d, pid_t *busy_pid);
void server_resume(struct wcd *d);

#endif
