/* SPDX-License-Identifier: MIT */
/*
 * wcd's serve/ folder: the socket and who may use it.
 *
 *   server.c    connections, framing, notices, leases (this header)
 *   access.c    who may connect: the socket's group and mode, the runtime
 *               directory's x bits, every peer's credentials (access.h)
 *   own.c       ownership of the device's files: flock, --force, stale
 *               files (own.h)
 *
 * server.c's client API. One client connection (struct wcd_client),
 * and what the files above server.c may do with clients:
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
#ifndef WCD_CONN_H
#define WCD_CONN_H

#include <stdarg.h>

#include "daemon/daemon.h"

struct out_msg {
	struct out_msg *next;
	struct wire_put w;
	struct iovec iov;
	int fds[WIRE_FDS_PER_FRAME];
	unsigned nfds;
	bool close_after;
};

struct lease {
	uint64_t id;
	int ver;                      /* index into d->model.ver */
};

struct wcd_client {
	struct wcd *d;
	struct wcd_client *next, *prev;
	int fd;
	pid_t pid;
	uid_t uid;
	struct rx_recv rx;
	uint8_t hdr[WIRE_HDR_LEN];
	size_t hdr_have;              /* header bytes of a begun frame */
	struct wire_hdr h;
	uint8_t *payload;
	size_t pcap;
	bool recv_paused;
	struct rx_send tx;
	struct out_msg *oq_head, *oq_tail;
	unsigned noq;
	struct rx_child watch;
	bool watching;
	bool hello_ok;
	bool closing;
	const char *why;              /* the first close's cause (static) */
	unsigned nleases;
	struct lease leases[WCD_LEASES_PER_CLIENT];
	uint64_t requests;
	/* hot handover (handover_old.c): receiving stopped at a frame boundary
	 * while the server is paused */
	bool ho_held;
	/* a held request being answered now (waiter_take): its id and type,
	 * so that the reply is counted under its type */
	uint64_t late_id;
	uint16_t late_type;
};

void client_close(struct wcd_client *c, const char *why);
/* Queues the frame built in w (taken over: w is reset). */
void client_queue(struct wcd_client *c, struct wire_put *w, const int *fds,
		  unsigned nfds, bool close_after);
/* Ends a reply begun in w (for request id) and queues it. */
void reply_frame(struct wcd_client *c, uint64_t id, struct wire_put *w,
		 const int *fds, unsigned nfds);
/* reply_frame for the request being handled (c->h.id). */
void reply_send(struct wcd_client *c, struct wire_put *w, const int *fds,
		unsigned nfds);
void reply_error(struct wcd_client *c, uint64_t id, uint32_t code,
		 bool close_after, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Holds w for a reply to request id of c that comes later. */
void waiter_hold(struct wcd_waiter *w, struct wcd_client *c, uint64_t id);
/* Ends the hold; returns the client to answer (id in *id), or NULL when
 * it went away or nothing was held. */
struct wcd_client *waiter_take(struct wcd *d, struct wcd_waiter *w,
			       uint64_t *id);

struct wcd_client *client_first(struct wcd *d);
struct wcd_client *client_next(struct wcd_client *c);
/* The live clients' pids and lease counts (at most max). */
unsigned server_clients(struct wcd *d, pid_t *pids, unsigned *leases,
			unsigned max);

#define SERVER_NOTIFY_LEASED 1u   /* only clients that hold a lease */
#define SERVER_NOTIFY_CLOSE  2u   /* close each connection once sent */
/* Sends nt to every live client (flags above); returns how many. */
unsigned server_notify(struct wcd *d, const struct wire_notice *nt,
		       unsigned flags);

/* Records a lease of c on version index vi; returns its id. The caller
 * counts it on the version (version_attach does both). */
uint64_t client_lease_add(struct wcd_client *c, int vi);
/* Ends c's lease i: hooks->lease_ended(d, its version). */
void client_lease_drop(struct wcd_client *c, unsigned i);
/* Pids of the clients holding a lease on version index vi (-1: on any
 * version), at most max. */
unsigned server_lease_pids(struct wcd *d, int vi, pid_t *pids, unsigned max);

/* Hot handover (handover_new.c) over the clients: a client made from a
 * connection another daemon handed over (its pidfd watch started, nothing
 * received yet); NULL, with the fd left to the caller, when out of memory.
 * server_client_start starts receiving (or closes it when its process is
 * gone). */
struct wcd_client *server_adopt_client(struct wcd *d, int fd, pid_t pid,
				       uid_t uid, bool hello_ok,
				       uint64_t requests);
void server_client_start(struct wcd_client *c);

struct sockaddr_un;

/* serve/'s state (d->srv): the socket, the connections, the waiters, the
 * counts STATUS shows and a handover's pause. Owned by server.c; the
 * files above read the counts and the handover moves them. */
struct wcd_server {
	struct wcd *d;
	const struct server_hooks *hooks; /* server_start's */
	int listen_fd;
	struct rx_accept accept;
	struct rx_timer stop_timer;   /* server_stop: STOP_FLUSH_NS */
	struct wcd_client *clients;
	unsigned nclients;
	struct wcd_waiter *waiters;   /* held (waiter_hold) */
	uint64_t next_lease;
	uint64_t requests;
	uint64_t mismatches;
	uint64_t fd_shortages;        /* accepts paused: out of descriptors */
	uint64_t shed;                /* idle connections closed for them */
	uint64_t frame_timeouts;      /* clients closed by --frame-timeout */
	bool fd_short;                /* in a shortage episode (logged once) */
	/* hot handover (handover*.c) */
	bool pausing;                 /* no accept, no new receive */
	struct wcd_client *pause_except;  /* the new daemon's connection */
	bool accept_again;            /* resume: restart a stopping accept */
	/* after DONE: the clients' connections are the new daemon's (shared
	 * sockets): no shutdown() of one, and a stop waits (stop_hold) */
	bool lent;
};

/* Gives d its server state s (zeroed, no socket yet): d->srv. */
void server_init(struct wcd *d, struct wcd_server *s);

/* The daemon's unix socket: fills sa with d->paths.sock (-ENAMETOOLONG when
 * it does not fit) and returns a new stream socket for it (close-on-exec),
 * not yet bound or connected; -errno with err set on failure. Used to
 * listen (server_listen) and to reach the daemon being taken over
 * (handover_new.c). */
int server_sock_open(const struct wcd *d, struct sockaddr_un *sa, char *err);

/* What server.c calls upwards, registered by main.c (server.c knows no
 * file above it). */
struct server_hooks {
	/* one whole, header-checked request frame (requests.c) */
	void (*dispatch)(struct wcd_client *c, const uint8_t *p, uint32_t n);
	/* a lease on version index vi ended (versions.c counts and retires) */
	void (*lease_ended)(struct wcd *d, int vi);
	/* while paused (server_pause): something a pause waits for may have
	 * changed; and client c is being freed (handover_old.c) */
	void (*pause_poke)(struct wcd *d);
	void (*client_gone)(struct wcd *d, struct wcd_client *c);
	/* server_stop while d->srv->lent: the stop waits for the handover's end
	 * (handover_old.c calls server_stop again if this daemon still owns
	 * the clients then) */
	void (*stop_hold)(struct wcd *d);
	/* client c's process died: true to read its connection on to the
	 * end of file (what it sent before it died) instead of closing it
	 * now (handover_old.c: the new daemon after DONE) */
	bool (*read_to_end)(struct wcd *d, struct wcd_client *c);
};

int server_listen(struct wcd *d, char *err);
/* Starts accepting; hooks stay registered for the daemon's life. */
void server_start(struct wcd *d, const struct server_hooks *hooks);
void server_stop(struct wcd *d);

/* Hot handover (issue 17), server.c's side: pausing stops accepting and
 * lets every client but `except` come to rest at a frame boundary (a frame
 * half received is read to its end and answered; nothing more is
 * received); server_at_rest says when all are, else names one that is not;
 * resume undoes it. */
void server_pause(struct wcd *d, struct wcd_client *except);
bool server_at_rest(struct wcd *d, pid_t *busy_pid);
void server_resume(struct wcd *d);

#endif
