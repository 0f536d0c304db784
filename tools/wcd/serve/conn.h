/* SPDX-License-Identifier: MIT */
/*
 * serve/conn.c's API: one client connection (struct wcd_client), serve/'s
 * state (struct wcd_server, d->srv) and the hooks serve/ calls upwards.
 * The files above include serve/server.h, which includes this one.
 */
#ifndef WCD_SERVE_CONN_H
#define WCD_SERVE_CONN_H

#include <stdarg.h>

#include "daemon/daemon.h"

#define WCD_CLIENTS_MAX 1024          /* connections at once */
#define WCD_LEASES_PER_CLIENT 64
/* Request payload bytes we buffer per client: the largest request (HELLO
 * with an identity, IDENT_ENC_MAX) is under 6 KiB; 1024 clients pin at most
 * 64 MiB with this bound (1 GiB with the 1 MiB it was). */
#define WCD_REQ_MAX (64u << 10)
#define WCD_OUTQ_MAX 16               /* frames queued per client */

/* What serve/ calls upwards, registered by main.c (serve/ knows no file
 * above it). */
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

/* serve/'s state (d->srv): the socket, the connections, the waiters, the
 * counts STATUS shows and a handover's pause. Owned by serve/; the
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
	/* the engine said it will not read the pools until it resumes (PAUSE:
	 * push/push_pause.c); gone with the connection */
	bool paused;
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
/* A frame that carries descriptor fd is queued to c or being sent (its
 * number still names it to the peer). O(queued frames), at most
 * WCD_OUTQ_MAX. */
bool client_sends_fd(const struct wcd_client *c, int fd);
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

/* Records a lease of c on version index vi; returns its id. The caller
 * counts it on the version (version_attach does both). */
uint64_t client_lease_add(struct wcd_client *c, int vi);
/* Ends c's lease i: hooks->lease_ended(d, its version). */
void client_lease_drop(struct wcd_client *c, unsigned i);
/* Inside serve/ (server.c, pause.c): */
/* Frees c once it is closing and no operation of it is in flight. */
void client_free_if_idle(struct wcd_client *c);
/* Starts the next receive, unless the output queue is backing up or a
 * handover pauses the server (the client rests at this frame boundary). */
void client_recv_next(struct wcd_client *c);
/* Starts the pidfd watch on c's process; false when it cannot (gone). */
bool client_watch(struct wcd_client *c);
/* c waits for a frame to begin (no byte of it yet): a pause may cancel. */
bool client_awaits_frame(const struct wcd_client *c);
/* While a handover pauses the server: tell it that a client may have come
 * to rest (hooks->pause_poke, handover_old.c). */
void server_poke(struct wcd *d);
/* Ends the loop once a stopping daemon has no client left. */
void server_maybe_done(struct wcd *d);

#endif
