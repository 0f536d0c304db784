/* SPDX-License-Identifier: MIT */
/* wcd: one client connection, shared by server.c (framing, lifetime) and
 * requests.c (what each request does). */
#ifndef WCD_CONN_H
#define WCD_CONN_H

#include <stdarg.h>

#include "wcd.h"

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
	int ver;                      /* index into d->ver */
};

struct wcd_client {
	struct wcd *d;
	struct wcd_client *next, *prev;
	int fd;
	pid_t pid;
	uid_t uid;
	struct rx_recv rx;
	uint8_t hdr[WIRE_HDR_LEN];
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
	unsigned nleases;
	struct lease leases[WCD_LEASES_PER_CLIENT];
	uint64_t requests;
	/* hot handover (handover.c): receiving stopped at a frame boundary
	 * while the server is paused; hdr_have header bytes were read before
	 * a cancelled receive (the rest is read before it rests) */
	bool ho_held;
	size_t hdr_have;
};

/* server.c */
void client_close(struct wcd_client *c, const char *why);
/* Queues the frame built in w (taken over: w is reset). */
void client_queue(struct wcd_client *c, struct wire_put *w, const int *fds,
		  unsigned nfds, bool close_after);
/* Ends a reply begun in w and queues it. */
void reply_send(struct wcd_client *c, struct wire_put *w, const int *fds,
		unsigned nfds);
void reply_error(struct wcd_client *c, uint64_t id, uint32_t code,
		 bool close_after, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void lease_drop(struct wcd_client *c, unsigned i);

/* server.c, for handover.c: a client made from a connection another
 * daemon handed over (its pidfd watch and receive started); NULL, with the
 * fd left to the caller, when out of memory. */
struct wcd_client *server_adopt_client(struct wcd *d, int fd, pid_t pid,
				       uid_t uid, bool hello_ok,
				       uint64_t requests);
void server_client_start(struct wcd_client *c);

/* requests.c */
void client_dispatch(struct wcd_client *c, const uint8_t *p, uint32_t n);

#endif
