/* SPDX-License-Identifier: MIT */
/*
 * Hot handover (issue 17): a new wcd takes the device over from the running
 * one without a reload and without closing an engine's connection. The
 * conversation and its frames are in proto/wire_handover.h; this file is
 * both sides of it.
 *
 * The old daemon (handover_request), on ASK from a client of its own uid:
 *   refuse (ERROR, nothing changed) when the versions do not meet, or the
 *   daemon sleeps, runs a job, stops, or has legacy IPC pools; else
 *   pause: stop accepting and let every client come to rest at a frame
 *   boundary (server_pause): a frame half received is read to its end and
 *   answered, then nothing more is received. Pending partial frames are
 *   thus drained, never carried: a client that stays in the middle of a
 *   frame (or does not read its replies) for HO_DRAIN_NS refuses the
 *   handover, naming its pid, and the daemon resumes. Then
 *   send the state (blocking sends on the new daemon's connection; the
 *   loop has nothing else to do while paused) and wait for COMMIT or
 *   ABORT (HO_COMMIT_NS at most; ABORT, the timeout or the connection's
 *   end: resume). On COMMIT answer DONE and touch no client any more; on
 *   SERVING _exit(0) at once: no unlink, no flock(LOCK_UN), no shutdown()
 *   of a shared socket, no unmapping (the kernel closes this process's
 *   copies); if ABORT comes or the connection ends before SERVING,
 *   resume, taking back what the new daemon may have taken meanwhile (the
 *   lock's pid, the ready file, the clients' daemon fd: ho_take_back).
 *   After DONE the clients are lent (d->lent): their sockets are shared
 *   with the new daemon, so nothing here shuts one down, and a stop
 *   (SIGTERM, SHUTDOWN) is held (handover_stop_hold): on SERVING the
 *   daemon exits 0 as above (the stop is done: it is gone, the new one
 *   serves); on ABORT or the connection's end it takes back, then stops
 *   as it was asked; a new daemon that does neither within HO_SERVING_NS
 *   is killed, which is the second case.
 *
 * The new daemon (handover_take), before it owns anything:
 *   connect, ASK, receive everything (closing it all on any failure),
 *   check it against its own parse of each version's model directory
 *   (identity byte for byte, the plan's pools against the pools' sizes,
 *   the backend's checks of each fd: a memfd's size and seals; with
 *   --takeover-verify hash every tensor hashed again on the host backend),
 *   COMMIT, and once DONE arrives (or the connection ends and the old
 *   daemon's pidfd says it exited: it had handed everything over) set
 *   itself up to serve, all that can fail and nothing that receives
 *   (ho_setup): take the lock under its pid, the socket and the clients
 *   (a pidfd watch each), tell each client its new pid (a NOTICE:
 *   libwcache moves its daemon fd), write the ready file. A failure there
 *   sends ABORT and exits (the old daemon resumes and takes all that back;
 *   if the old daemon is gone, it serves all the same). Then send SERVING,
 *   and only then start receiving on the same listening socket and
 *   connections (ho_serve_start): engines keep their mappings and see no
 *   error; requests sent meanwhile wait in the sockets and are answered by
 *   the new daemon.
 *
 * Exactly one daemon serves at every step: the old one until it reads
 * SERVING, the new one after. Killed at any step (WCD_HANDOVER_KILL=old:K
 * or new:K stops that side with SIGKILL at step K, for the tests):
 *   new 1..5 (after ASK, BEGIN, the checks, COMMIT, DONE): the old one
 *            resumes (its connection ends);
 *   new 6    (set up to serve, SERVING not sent; or the set-up failed: it
 *            sends ABORT and exits 1): the old one resumes and takes back
 *            the lock's pid, the ready file and each client's daemon fd
 *            (a HANDOVER notice with its own pid; ho_take_back);
 *   old 1,2  (after the pause, after BEGIN: not everything was sent): the
 *            new one closes what it got and loads from disk if it was
 *            given --model (-ECONNRESET to main), else exits;
 *   old 3..6 (everything sent; after COMMIT, DONE, SERVING): the new one
 *            serves what it got.
 * Not a handover step: new 7 (SERVING sent, the receives not yet started)
 * is a crash of the daemon that serves: the old one has read SERVING and
 * exited, the new one holds the lock, the socket and the clients and the
 * ready file names it; none serves after it, as after any crash; the
 * engines' daemon fds report its death and their mappings stay valid.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "wcd.h"
#include "conn.h"
#include "lifecycle.h"
#include "ready.h"
#include "wire_handover.h"

#define HO_DRAIN_NS (5ull * 1000000000)     /* clients to reach rest */
#define HO_DRAIN_NS_MIN (10ull * 1000000)
#define HO_COMMIT_NS (120ull * 1000000000)  /* the new daemon to verify */
#define HO_SERVING_NS (10ull * 1000000000)  /* to serve, once a stop waits */
#define HO_IO_TIMEOUT_S 30                  /* one blocking frame */
#define HO_EXIT_WAIT_MS 5000                /* old daemon gone after EOF */
#define HO_FRAME_MAX (64u << 20)            /* a state frame we accept */

enum ho_state { HO_IDLE, HO_DRAINING, HO_SENT, HO_DONE };

struct wcd_ho {
	struct wcd *d;
	/* old side */
	enum ho_state st;
	struct wcd_client *peer;
	uint64_t id;                  /* the ASK's request id */
	pid_t peer_pid;
	uint16_t proto;
	struct rx_timer drain_timer, commit_timer, serving_timer;
	bool stop_held;               /* a stop came after DONE */
	struct rx_timer idle_timer;   /* new side: release the context */
	uint64_t t0;
	uint64_t drain_ns, serving_ns;
	/* new side: what d->o points into */
	char model[WCD_VERSIONS][WIRE_PATH_MAX + 1];
	char rules[WIRE_PATH_MAX + 1];
	char allow_quant[WIRE_LABEL_MAX + 1];
};

static struct wcd_ho *ho_get(struct wcd *d)
{
	if (!d->ho) {
		d->ho = calloc(1, sizeof(*d->ho));
		if (d->ho)
			d->ho->d = d;
	}
	return d->ho;
}

void handover_free(struct wcd *d)
{
	free(d->ho);
	d->ho = NULL;
}

/* The tests' hook: WCD_HANDOVER_KILL=old:K|new:K stops that side at step K
 * with SIGKILL, so that every step's failure is reached by an event. */
static void ho_step(const char *side, int k)
{
	const char *e = getenv("WCD_HANDOVER_KILL");
	size_t n = strlen(side);

	if (!e || strncmp(e, side, n) || e[n] != ':' || atoi(e + n + 1) != k)
		return;
	log_warn("WCD_HANDOVER_KILL: stopping the %s daemon at step %d", side,
		 k);
	raise(SIGKILL);
}

/* Makes /proc/locks and the lock file name this process as the lock's
 * owner, for wcctl (it checks them against the ready file): the new daemon
 * when it takes the lock over, the old one when it takes it back from a
 * new one that died before it served. The flock belongs to the open file
 * description both share; /proc/locks names the pid that last set it, so
 * convert EX -> SH -> EX. Each conversion removes, then adds (flock(2):
 * not atomic); a contender needs LOCK_EX, which the SH in between
 * refuses, so only the two instants in the kernel between remove and add
 * are open. */
static int ho_claim_lock(struct wcd *d, char *err)
{
	char pidtxt[32];
	int n;

	if (flock(d->lock_fd, LOCK_SH | LOCK_NB) ||
	    flock(d->lock_fd, LOCK_EX | LOCK_NB))
		return wc_errf(err, errno,
			       "cannot take the lock %s under pid %d: %s (wcctl would not recognise this daemon as its owner)",
			       d->paths.lock, (int)getpid(), strerror(errno));
	n = snprintf(pidtxt, sizeof(pidtxt), "%d\n", (int)getpid());
	errno = EIO;   /* a short write sets none */
	if (ftruncate(d->lock_fd, 0) ||
	    pwrite(d->lock_fd, pidtxt, (size_t)n, 0) != n)
		return wc_errf(err, errno, "cannot write pid %d into %s: %s",
			       (int)getpid(), d->paths.lock, strerror(errno));
	return 0;
}

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static bool pidfd_exited(int pidfd, int wait_ms)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	if (pidfd < 0)
		return false;
	for (;;) {
		int r = poll(&p, 1, wait_ms);

		if (r >= 0)
			return r > 0;
		if (errno != EINTR)
			return false;
	}
}

/* --- blocking frames with descriptors ------------------------------------- */

static int ho_send(int fd, struct wire_put *w, const int *fds, unsigned nfds,
		   char *err)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * WIRE_FDS_PER_FRAME)];
	} cm;
	size_t off = 0;
	int ret = wire_frame_end(w, err);

	if (ret)
		return ret;
	while (off < w->len) {
		struct iovec iov = { w->buf + off, w->len - off };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t k;

		if (nfds && off == 0) {
			struct cmsghdr *c;

			memset(&cm, 0, sizeof(cm));
			m.msg_control = cm.buf;
			m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
			c = CMSG_FIRSTHDR(&m);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
			memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
		}
		k = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return wc_errf(err, k < 0 ? errno : EPIPE,
				       "cannot send a handover frame: %s",
				       k < 0 ? strerror(errno) : "nothing sent");
		off += (size_t)k;
	}
	return 0;
}

struct ho_frame {
	struct wire_hdr h;
	uint8_t *p;                   /* malloc'ed payload */
	int fds[WIRE_FDS_PER_FRAME];
	unsigned nfds;
};

static void ho_frame_free(struct ho_frame *f)
{
	for (unsigned i = 0; i < f->nfds; i++)
		if (f->fds[i] >= 0)
			close(f->fds[i]);
	free(f->p);
	memset(f, 0, sizeof(*f));
}

/* Reads exactly len bytes, keeping the descriptors that come with them.
 * -ECONNRESET when the peer closed (before or inside). */
static int read_full(int fd, void *buf, size_t len, struct ho_frame *f,
		     char *err)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * WIRE_FDS_PER_FRAME)];
	} cm;
	size_t off = 0;

	while (off < len) {
		struct iovec iov = { (uint8_t *)buf + off, len - off };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = cm.buf,
				    .msg_controllen = sizeof(cm.buf) };
		struct cmsghdr *c;
		ssize_t k = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return wc_errf(err, errno == EAGAIN ? ETIMEDOUT : errno,
				       "handover: receive failed: %s",
				       errno == EAGAIN ? "no frame within the timeout" :
				       strerror(errno));
		for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			unsigned n;
			int *p;

			if (c->cmsg_level != SOL_SOCKET ||
			    c->cmsg_type != SCM_RIGHTS)
				continue;
			n = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			p = (int *)CMSG_DATA(c);
			for (unsigned i = 0; i < n; i++) {
				int x;

				memcpy(&x, &p[i], sizeof(x));
				if (f->nfds < WIRE_FDS_PER_FRAME)
					f->fds[f->nfds++] = x;
				else
					close(x);
			}
		}
		if (k == 0)
			return wc_errf(err, ECONNRESET,
				       "handover: the old daemon closed the connection");
		off += (size_t)k;
	}
	return 0;
}

static int ho_recv(int fd, struct ho_frame *f, char *err)
{
	uint8_t hdr[WIRE_HDR_LEN];
	int ret;

	memset(f, 0, sizeof(*f));
	ret = read_full(fd, hdr, sizeof(hdr), f, err);
	if (!ret)
		ret = wire_hdr_decode(hdr, sizeof(hdr), &f->h, err);
	if (!ret && f->h.len > HO_FRAME_MAX)
		ret = wc_errf(err, EMSGSIZE,
			      "handover: a %u-byte frame is over the %u-byte bound",
			      f->h.len, HO_FRAME_MAX);
	if (!ret && f->h.len) {
		f->p = malloc(f->h.len);
		if (!f->p)
			ret = wc_errf(err, ENOMEM, "out of memory");
		else
			ret = read_full(fd, f->p, f->h.len, f, err);
	}
	if (ret)
		ho_frame_free(f);
	return ret;
}

/* --- the old daemon -------------------------------------------------------- */

static void ho_timer_cb(struct rx_timer *t, int res);

/* After DONE the new daemon sets itself up to serve before it sends
 * SERVING (handover_take): it takes the lock over under its pid, tells
 * every client its pid (libwcache moves its daemon fd there) and writes
 * the ready file. When it dies or aborts before SERVING, each is taken
 * back: the lock's pid, the ready file, and a HANDOVER notice naming this
 * pid, which points each engine's daemon fd back here (libwcache follows
 * the pid of the last HANDOVER notice it read). Each is idempotent: a new
 * daemon that died before it touched them costs each client one notice.
 * The clients rest, with nothing queued, so the notice comes before any
 * reply to a request that waited in the socket. */
static void ho_take_back(struct wcd *d)
{
	struct wcd_ho *ho = d->ho;
	struct wire_notice nt = { .kind = WIRE_NOTICE_HANDOVER,
				  .version = wcd_current(d)->number,
				  .pid = (uint32_t)getpid() };
	char err[WC_ERR_LEN];
	unsigned n = 0;

	if (ho_claim_lock(d, err))
		log_error("handover: %s", err);
	if (status_write_ready(d, err))
		log_error("handover: cannot rewrite the ready file under pid %d: %s",
			  (int)getpid(), err);
	snprintf(nt.msg, sizeof(nt.msg),
		 "the handover of device %s to wcd pid %d did not happen; wcd pid %d serves on: same connection, same mappings",
		 d->dev.name, (int)ho->peer_pid, (int)getpid());
	for (struct wcd_client *c = client_first(d), *next; c; c = next) {
		struct wire_put w;

		next = client_next(c);   /* client_queue may close and free c */
		if (c == ho->peer)
			continue;
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
		wire_notice_put(&w, &nt);
		if (wire_frame_end(&w, NULL)) {
			wire_put_free(&w);
			continue;
		}
		client_queue(c, &w, NULL, 0, false);
		n++;
	}
	log_info("handover: the lock, the ready file and %u client(s) taken back from pid %d",
		 n, (int)ho->peer_pid);
}

/* Ends a handover that did not happen: the daemon serves on. */
static void ho_old_abort(struct wcd *d, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void ho_old_abort(struct wcd *d, uint32_t code, const char *fmt, ...)
{
	struct wcd_ho *ho = d->ho;
	bool take_back = ho->st == HO_DONE, stop = ho->stop_held;
	char msg[WIRE_MSG_MAX + 1];
	va_list ap;

	WC_ASSERT(!wcd_stopping(d) || !take_back);   /* a stop is held */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warn("handover to pid %d not done: %s; %s", (int)ho->peer_pid, msg,
		 stop ? "taking the clients back to stop as asked" :
		 "serving on");
	ho->st = HO_IDLE;
	ho->stop_held = false;
	d->lent = false;
	if (rx_op_busy(&ho->drain_timer.op))
		rx_cancel(&ho->drain_timer.op);
	if (rx_op_busy(&ho->commit_timer.op))
		rx_cancel(&ho->commit_timer.op);
	if (rx_op_busy(&ho->serving_timer.op))
		rx_cancel(&ho->serving_timer.op);
	if (take_back)
		ho_take_back(d);
	if (ho->peer) {
		struct wcd_client *c = ho->peer;

		ho->peer = NULL;
		reply_error(c, ho->id, code, true,
			    "handover refused: %s; wcd pid %d %s", msg,
			    (int)getpid(), stop ? "stops" : "serves on");
	}
	server_resume(d);
	if (stop) {
		log_info("handover: the clients are back; carrying out the stop asked for after the commit");
		server_stop(d);
	}
}

static void put_begin(struct wcd *d, struct wire_put *w)
{
	struct wcd_ho *ho = d->ho;
	struct wire_ho_begin b = {
		.ho_version = ho->proto, .pid = (uint32_t)getpid(),
		.cur = (uint32_t)d->cur, .next_lease = d->next_lease,
		.requests = d->requests, .mismatches = d->mismatches,
		.lock_fd = 0, .listen_fd = 1, .hash = d->o.hash,
		.pool_size = d->o.pool_size, .nallow_uid = d->o.nallow_uid,
	};

	for (int i = 0; i < WCD_VERSIONS; i++)
		b.nversions += d->ver[i].used;
	for (struct wcd_client *c = d->clients; c; c = c->next)
		b.nclients += c != ho->peer;
	snprintf(b.rules, sizeof(b.rules), "%s", d->o.rules ? d->o.rules : "");
	snprintf(b.allow_quant, sizeof(b.allow_quant), "%s",
		 d->o.allow_quant ? d->o.allow_quant : "");
	memcpy(b.allow_uid, d->o.allow_uid, sizeof(uid_t) * d->o.nallow_uid);
	wire_frame_begin(w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, ho->id);
	wire_ho_begin_put(w, &b);
}

static void put_version(struct wcd *d, int slot, struct wire_put *w,
			int *fds, unsigned *nfds, bool last)
{
	struct wcd_version *v = &d->ver[slot];
	static struct wire_ho_version x;

	memset(&x, 0, sizeof(x));
	x.slot = (uint32_t)slot;
	x.number = v->number;
	snprintf(x.model, sizeof(x.model), "%s", v->model.path);
	x.tp_size = d->o.tp_size;
	x.tp_rank = d->o.tp_rank;
	x.pp_size = d->o.pp_size;
	x.pp_rank = d->o.pp_rank;
	x.identity = v->ident_enc;
	x.identity_len = v->ident_len;
	memcpy(x.digest, v->digest, sizeof(x.digest));
	x.flags = (slot == d->cur ? WIRE_HO_V_CURRENT : 0) |
		  (v->hashed ? WIRE_HO_V_HASHED : 0);
	x.ntensors = v->plan.ntensors;
	x.hashes = v->hashed ? &v->hash[0][0] : NULL;
	x.npools = v->npools;
	*nfds = 0;
	for (uint32_t i = 0; i < v->npools; i++) {
		x.pools[i] = (struct wire_ho_pool){
			.size = v->pools[i].size,
			.alloc_size = v->pools[i].alloc_size,
			.flags = v->pools[i].sealed ? WIRE_POOL_SEALED : 0,
			.fd_index = *nfds,
		};
		fds[(*nfds)++] = v->pools[i].fd;
	}
	wire_frame_begin(w, WIRE_HANDOVER,
			 WIRE_F_REPLY | (last ? 0 : WIRE_F_MORE), d->ho->id);
	wire_ho_version_put(w, &x);
}

/* Sends BEGIN, every VERSION, every CLIENTS frame. */
static int ho_send_state(struct wcd *d, char *err)
{
	static struct wire_ho_client cl[WIRE_HO_CLIENTS_PER_FRAME];
	struct wcd_ho *ho = d->ho;
	int fd = ho->peer->fd, fds[WIRE_FDS_PER_FRAME];
	struct timeval tv = { .tv_sec = HO_IO_TIMEOUT_S };
	struct wcd_client *c = d->clients;
	unsigned nfds, nv = 0, sent_v = 0, left = 0;
	struct wire_put w;
	int ret;

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	for (int i = 0; i < WCD_VERSIONS; i++)
		nv += d->ver[i].used;
	for (struct wcd_client *x = d->clients; x; x = x->next)
		left += x != ho->peer;
	wire_put_init(&w);
	put_begin(d, &w);
	fds[0] = d->lock_fd;
	fds[1] = d->listen_fd;
	ret = ho_send(fd, &w, fds, 2, err);
	ho_step("old", 2);
	for (int i = 0; !ret && i < WCD_VERSIONS; i++) {
		if (!d->ver[i].used)
			continue;
		sent_v++;
		put_version(d, i, &w, fds, &nfds, sent_v == nv && !left);
		ret = ho_send(fd, &w, fds, nfds, err);
	}
	while (!ret && left) {
		uint32_t n = 0;

		for (; c && n < WIRE_HO_CLIENTS_PER_FRAME; c = c->next) {
			struct wire_ho_client *x = &cl[n];

			if (c == ho->peer)
				continue;
			memset(x, 0, sizeof(*x));
			x->fd_index = n;
			x->pid = (uint32_t)c->pid;
			x->uid = (uint32_t)c->uid;
			x->flags = c->hello_ok ? WIRE_HO_C_HELLO : 0;
			x->requests = c->requests;
			x->nleases = c->nleases;
			for (unsigned k = 0; k < c->nleases; k++) {
				x->leases[k].id = c->leases[k].id;
				x->leases[k].version =
					d->ver[c->leases[k].ver].number;
			}
			fds[n++] = c->fd;
		}
		left -= n;
		wire_frame_begin(&w, WIRE_HANDOVER,
				 WIRE_F_REPLY | (left ? WIRE_F_MORE : 0), ho->id);
		wire_ho_clients_put(&w, cl, n);
		ret = ho_send(fd, &w, fds, n, err);
	}
	wire_put_free(&w);
	return ret;
}

static void ho_arm(struct wcd *d, struct rx_timer *t, uint64_t ns)
{
	if (rx_timer_start(&d->loop, t, ns, ho_timer_cb))
		log_warn("handover: cannot arm its timer; it waits without a bound");
}

void handover_poke(struct wcd *d)
{
	struct wcd_ho *ho = d->ho;
	char err[WC_ERR_LEN];
	pid_t busy;

	if (!ho || ho->st != HO_DRAINING || !server_at_rest(d, &busy))
		return;
	ho->st = HO_SENT;
	if (ho_send_state(d, err)) {
		ho_old_abort(d, WIRE_E_INTERNAL, "%s", err);
		return;
	}
	ho_step("old", 3);
	log_info("handover: state sent to pid %d (%u client(s)) in %.3f ms; waiting for its commit",
		 (int)ho->peer_pid, d->nclients - 1,
		 (double)(rx_now_ns() - ho->t0) / 1e6);
	if (rx_op_busy(&ho->drain_timer.op))
		rx_cancel(&ho->drain_timer.op);
	ho_arm(d, &ho->commit_timer, HO_COMMIT_NS);
}

/* A stop waits after DONE (handover_stop_hold) and the new daemon has
 * neither served nor ended within the bound: it is killed through its
 * pidfd, and its end (its connection's, or its pidfd's) makes this
 * daemon take the clients back and stop (ho_old_abort). A stop wins over
 * a handover that does not finish, as at COMMIT. Should the kill be
 * refused, the new daemon holds everything and this one exits as after
 * SERVING: one daemon or none, never two. */
static void ho_stop_overdue(struct wcd *d)
{
	struct wcd_ho *ho = d->ho;
	struct wcd_client *c = ho->peer;
	int pidfd = c && c->watching ? c->watch.pidfd : -1, own = -1, e = 0;

	log_error("handover: the new daemon pid %d has not served within %.3g s of the stop asked for after its commit; killing it (SIGKILL) to take the clients back and stop",
		  (int)ho->peer_pid, (double)ho->serving_ns / 1e9);
	if (pidfd < 0)
		pidfd = own = pidfd_open_(ho->peer_pid);
	if (pidfd < 0 ||
	    syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0))
		e = errno;
	if (own >= 0)
		close(own);
	if (!e || e == ESRCH)
		return;   /* its end is on the way */
	log_error("handover: cannot kill pid %d: %s; exiting without touching the clients: it holds them",
		  (int)ho->peer_pid, strerror(e));
	fflush(stderr);
	_exit(0);
}

static void ho_timer_cb(struct rx_timer *t, int res)
{
	struct wcd_ho *ho = t->op.data;
	struct wcd *d = ho->d;
	pid_t busy;

	if (res == -ECANCELED)
		return;
	if (ho->st == HO_DRAINING && t == &ho->drain_timer) {
		server_at_rest(d, &busy);
		ho_old_abort(d, WIRE_E_BUSY,
			     "client pid %d did not come to rest (it is in the middle of a frame, or not reading its replies) within %.3g s; try again",
			     (int)busy, (double)ho->drain_ns / 1e9);
	} else if (ho->st == HO_SENT && t == &ho->commit_timer) {
		ho_old_abort(d, WIRE_E_STATE,
			     "the new daemon did not commit within %llu s",
			     HO_COMMIT_NS / 1000000000);
	} else if (ho->st == HO_DONE && t == &ho->serving_timer) {
		ho_stop_overdue(d);
	}
}

/* def_ns, or the milliseconds in environment variable env (the tests'
 * shorter bounds: WCD_HANDOVER_DRAIN_MS, WCD_HANDOVER_SERVING_MS); at
 * least HO_DRAIN_NS_MIN. */
static uint64_t env_bound(const char *env, uint64_t def_ns)
{
	const char *e = getenv(env);
	uint64_t ns = e && *e ? strtoull(e, NULL, 10) * 1000000 : def_ns;

	return ns < HO_DRAIN_NS_MIN ? HO_DRAIN_NS_MIN : ns;
}

/* Why a handover cannot start now, or NULL; code gets the ERROR code. */
static const char *ho_refusal(struct wcd *d, uint32_t *code, char *buf,
			      size_t cap)
{
	*code = WIRE_E_STATE;
	if (wcd_stopping(d))
		return "the daemon is stopping";
	if (d->ho && (d->ho->st != HO_IDLE ||
		      rx_op_busy(&d->ho->drain_timer.op) ||
		      rx_op_busy(&d->ho->commit_timer.op) ||
		      rx_op_busy(&d->ho->serving_timer.op))) {
		*code = WIRE_E_BUSY;
		snprintf(buf, cap, "a handover to pid %d is in progress or ending",
			 (int)d->ho->peer_pid);
		return buf;
	}
	if (d->state == WCD_SLEEPING) {
		*code = WIRE_E_SLEEPING;
		snprintf(buf, cap,
			 "the daemon sleeps (level %u): wake it first (wcctl wake), then restart",
			 d->life.level);
		return buf;
	}
	if (d->state == WCD_WAKING || d->state == WCD_UPDATING ||
	    d->life.job) {
		*code = WIRE_E_BUSY;
		return "a wake or an update is running: wait for it to finish (wcctl status), then restart";
	}
	if (d->dev.export_kind == GPU_EXPORT_IPC_HANDLE) {
		*code = WIRE_E_NOT_IMPLEMENTED;
		return "legacy CUDA IPC pools (--ipc legacy) cannot be handed over: they live in this daemon's CUDA context and die with it; stop and start instead (wcctl stop, wcctl start), or serve with --ipc vmm";
	}
	if (!d->dev.be->pool_adopt) {
		*code = WIRE_E_NOT_IMPLEMENTED;
		snprintf(buf, cap, "the %s backend cannot hand its pools over",
			 d->dev.be->name);
		return buf;
	}
	if (d->state != WCD_READY)
		return "the daemon is not serving yet";
	return NULL;
}

static void ho_ask(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wire_ho_ask a;
	struct wcd_ho *ho;
	char err[WC_ERR_LEN], buf[WIRE_MSG_MAX + 1];
	const char *why;
	uint32_t code;
	unsigned lo, hi;

	if (wire_ho_ask_get(p, n, &a, err)) {
		reply_error(c, c->h.id, WIRE_E_MALFORMED, true, "%s", err);
		return;
	}
	if (c->uid != geteuid()) {
		reply_error(c, c->h.id, WIRE_E_PERM, false,
			    "a handover is only accepted from the daemon's own uid %u (you are uid %u)",
			    (unsigned)geteuid(), (unsigned)c->uid);
		return;
	}
	lo = a.ho_min > WIRE_HO_PROTO_MIN ? a.ho_min : WIRE_HO_PROTO_MIN;
	hi = a.ho_max < WIRE_HO_PROTO ? a.ho_max : WIRE_HO_PROTO;
	if (lo > hi) {
		reply_error(c, c->h.id, WIRE_E_VERSION, false,
			    "handover refused: this wcd (pid %d) hands over with protocol versions %d to %d and the new one takes %u to %u%s; restart with a reload instead (wcctl stop --device %s, then wcctl start); wcd pid %d serves on",
			    (int)getpid(), WIRE_HO_PROTO_MIN, WIRE_HO_PROTO,
			    a.ho_min, a.ho_max,
			    a.ho_max < 2 ? " (protocol 2 packs big layers whole: the pools differ)" : "",
			    d->dev.name, (int)getpid());
		return;
	}
	why = ho_refusal(d, &code, buf, sizeof(buf));
	if (why) {
		reply_error(c, c->h.id, code, false,
			    "handover refused: %s; wcd pid %d serves on", why,
			    (int)getpid());
		return;
	}
	ho = ho_get(d);
	if (!ho) {
		reply_error(c, c->h.id, WIRE_E_INTERNAL, false, "out of memory");
		return;
	}
	ho->st = HO_DRAINING;
	ho->peer = c;
	ho->peer_pid = c->pid;
	ho->id = c->h.id;
	ho->proto = (uint16_t)hi;
	ho->t0 = rx_now_ns();
	ho->drain_timer.op.data = ho;
	ho->commit_timer.op.data = ho;
	ho->serving_timer.op.data = ho;
	ho->stop_held = false;
	log_info("handover: pid %d asks for the device (protocol %u); pausing %u client(s)",
		 (int)c->pid, hi, d->nclients - 1);
	server_pause(d, c);
	ho_step("old", 1);
	ho->drain_ns = env_bound("WCD_HANDOVER_DRAIN_MS", HO_DRAIN_NS);
	ho_arm(d, &ho->drain_timer, ho->drain_ns);
	handover_poke(d);
}

/* COMMIT: let go (DONE), then wait for SERVING, or for the new daemon's
 * end (it died before it served: resume). Nothing here touches a client,
 * and from DONE on the clients are lent (d->lent). */
static void ho_commit(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wcd_ho *ho = d->ho;
	char err[WC_ERR_LEN];
	struct wire_put w;

	if (wire_ho_empty_get(p, n, WIRE_HO_COMMIT, err)) {
		ho_old_abort(d, WIRE_E_MALFORMED, "%s", err);
		return;
	}
	if (wcd_stopping(d)) {
		/* SIGTERM or SHUTDOWN came while paused: the clients are being
		 * told and closed; a stop wins over a handover */
		ho_old_abort(d, WIRE_E_STATE, "the daemon is stopping");
		return;
	}
	ho_step("old", 4);
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HANDOVER, WIRE_F_REPLY, c->h.id);
	wire_ho_empty_put(&w, WIRE_HO_DONE);
	if (ho_send(c->fd, &w, NULL, 0, err)) {
		wire_put_free(&w);
		ho_old_abort(d, WIRE_E_INTERNAL, "%s", err);
		return;
	}
	wire_put_free(&w);
	ho->st = HO_DONE;
	d->lent = true;
	ho_step("old", 5);
}

/* SIGTERM or SHUTDOWN after DONE (server_stop while d->lent): the
 * clients, the lock and the socket are the new daemon's now (it is
 * setting itself up to serve), and this daemon's normal stop (a notice
 * to every client, shutdown() of each connection, the socket and the
 * ready file unlinked) would cut them under it. The stop waits for the
 * handover's end instead, HO_SERVING_NS at most (ho_stop_overdue): on
 * SERVING this daemon exits 0 (ho_serving: the stop is done, it is gone
 * and the new one serves); on ABORT or the connection's end it takes the
 * clients back and stops (ho_old_abort). */
void handover_stop_hold(struct wcd *d)
{
	struct wcd_ho *ho = d->ho;

	WC_ASSERT(ho && ho->st == HO_DONE);
	if (ho->stop_held)
		return;
	ho->stop_held = true;
	ho->serving_ns = env_bound("WCD_HANDOVER_SERVING_MS", HO_SERVING_NS);
	log_info("handover: a stop after the commit: the clients are pid %d's now; waiting up to %.3g s for it to serve (then exiting) or to fail (then taking them back and stopping)",
		 (int)ho->peer_pid, (double)ho->serving_ns / 1e9);
	ho_arm(d, &ho->serving_timer, ho->serving_ns);
}

/* SERVING: the new daemon has taken everything; exit at once. */
static void ho_serving(struct wcd *d)
{
	struct wcd_ho *ho = d->ho;

	ho_step("old", 6);
	log_info("handover: done in %.3f ms; pid %d serves device %s now; exiting without touching the pools or the clients%s",
		 (double)(rx_now_ns() - ho->t0) / 1e6, (int)ho->peer_pid,
		 d->dev.name, ho->stop_held ?
		 " (the stop asked for after the commit is thereby done)" : "");
	fflush(stderr);
	_exit(0);
}

void handover_request(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wcd_ho *ho = d->ho;
	char err[WC_ERR_LEN], why[WIRE_MSG_MAX + 1];
	uint32_t part;

	if (wire_ho_part_get(p, n, &part, err)) {
		reply_error(c, c->h.id, WIRE_E_MALFORMED, true, "%s", err);
		return;
	}
	if (part == WIRE_HO_ASK) {
		ho_ask(c, p, n);
		return;
	}
	if (ho && ho->st == HO_DONE && ho->peer == c &&
	    part == WIRE_HO_SERVING &&
	    !wire_ho_empty_get(p, n, WIRE_HO_SERVING, err)) {
		ho_serving(d);
		return;
	}
	if (ho && ho->st == HO_DONE && ho->peer == c &&
	    part == WIRE_HO_ABORT) {
		/* it could not set itself up to serve (handover_take) */
		if (wire_ho_abort_get(p, n, why, err))
			snprintf(why, sizeof(why), "%s", err);
		ho_old_abort(d, WIRE_E_STATE,
			     "the new daemon aborted after the commit: %s", why);
		return;
	}
	if (!ho || ho->st != HO_SENT || ho->peer != c ||
	    (part != WIRE_HO_COMMIT && part != WIRE_HO_ABORT)) {
		if (ho && ho->st == HO_DONE && ho->peer == c) {
			ho_old_abort(d, WIRE_E_STATE,
				     "the new daemon sent %s where SERVING was due",
				     wire_ho_part_name(part));
			return;
		}
		reply_error(c, c->h.id, WIRE_E_STATE, false,
			    "HANDOVER %s out of turn: send ASK first, then COMMIT or ABORT once the state arrived",
			    wire_ho_part_name(part));
		return;
	}
	if (part == WIRE_HO_COMMIT) {
		ho_commit(c, p, n);
		return;
	}
	if (wire_ho_abort_get(p, n, why, err))
		snprintf(why, sizeof(why), "%s", err);
	ho_old_abort(d, WIRE_E_STATE, "the new daemon aborted: %s", why);
}

void handover_client_gone(struct wcd *d, struct wcd_client *c)
{
	if (!d->ho || d->ho->peer != c)
		return;
	d->ho->peer = NULL;
	if (d->ho->st != HO_IDLE)
		ho_old_abort(d, WIRE_E_STATE,
			     d->ho->st == HO_DONE ?
			     "the new daemon's connection ended before it served (it died?)" :
			     "the new daemon's connection ended");
}

/* --- the new daemon -------------------------------------------------------- */

/* What the old daemon handed over, until it is adopted or closed. */
struct ho_got {
	int sock;                     /* our connection to the old daemon */
	pid_t old_pid;
	int old_pidfd;
	struct wire_ho_begin b;
	int lock_fd, listen_fd;
	unsigned nversions;
	struct ho_client {
		int fd;
		struct wire_ho_client x;
	} *cl;
	uint32_t ncl;
	bool complete;                /* every frame arrived */
};

/* Closes what is still ours in g; with versions, also the versions being
 * verified (the handover did not happen). */
static void got_close(struct wcd *d, struct ho_got *g, bool versions)
{
	/* close() only: the old daemon shares these, and shutdown() or a
	 * flock(LOCK_UN) would act on its copies too */
	for (uint32_t i = 0; i < g->ncl; i++)
		if (g->cl[i].fd >= 0)
			close(g->cl[i].fd);
	free(g->cl);
	g->cl = NULL;
	g->ncl = 0;
	if (g->lock_fd >= 0)
		close(g->lock_fd);
	if (g->listen_fd >= 0)
		close(g->listen_fd);
	g->lock_fd = g->listen_fd = -1;
	for (int i = 0; versions && i < WCD_VERSIONS; i++)
		if (d->ver[i].used)
			load_version_free(d, &d->ver[i]);
	if (g->sock >= 0)
		close(g->sock);
	g->sock = -1;
	if (g->old_pidfd >= 0)
		close(g->old_pidfd);
	g->old_pidfd = -1;
}

static int ho_connect(struct wcd *d, struct ho_got *g, char *err)
{
	struct sockaddr_un sa;
	struct timeval tv = { .tv_sec = HO_IO_TIMEOUT_S };
	struct ready_info ri;
	char rerr[WC_ERR_LEN];
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int fd, e;

	fd = server_sock_open(d, &sa, err);
	if (fd < 0)
		return fd;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		e = errno;
		close(fd);
		return wc_errf(err, e == ECONNREFUSED ? ENOENT : e,
			       "--takeover: no wcd serves device %s (%s: %s); start one with wcctl start, or wcd without --takeover",
			       d->dev.name, d->paths.sock, strerror(e));
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	/* SO_PEERCRED names whoever called listen(), which after an earlier
	 * handover is long gone: the ready file names the daemon that serves
	 * (BEGIN confirms it) */
	if (ready_read_file(&ri, d->paths.ready, rerr) == 0 && ri.pid > 0)
		g->old_pid = ri.pid;
	else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
		g->old_pid = cr.pid;
	g->old_pidfd = pidfd_open_(g->old_pid);
	g->sock = fd;
	return 0;
}

/* The handover versions this build asks for; WCD_TEST_HO_PROTO=MIN:MAX
 * pretends to be another build (the version refusal's test). */
static void ask_versions(struct wire_ho_ask *a)
{
	const char *e = getenv("WCD_TEST_HO_PROTO");
	unsigned lo, hi;

	a->ho_min = WIRE_HO_PROTO_MIN;
	a->ho_max = WIRE_HO_PROTO;
	if (e && sscanf(e, "%u:%u", &lo, &hi) == 2) {
		a->ho_min = (uint16_t)lo;
		a->ho_max = (uint16_t)hi;
	}
}

/* One frame of the old daemon's reply; an ERROR becomes err. */
static int recv_part(struct ho_got *g, struct ho_frame *f, uint64_t id,
		     uint32_t *part, char *err)
{
	struct wire_error e;
	char derr[WC_ERR_LEN];
	int ret = ho_recv(g->sock, f, err);

	if (ret)
		return ret;
	if (f->h.type == WIRE_ERROR && f->h.id == id) {
		ret = wire_error_get(f->p, f->h.len, &e, derr);
		ho_frame_free(f);
		if (ret)
			return wc_errf(err, EBADMSG, "handover: %s", derr);
		return wc_errf(err, e.code == WIRE_E_VERSION ? EPROTONOSUPPORT :
			       e.code == WIRE_E_BUSY ? EBUSY : EPERM,
			       "wcd pid %d: %s", (int)g->old_pid, e.msg);
	}
	if (f->h.type != WIRE_HANDOVER || f->h.id != id ||
	    !(f->h.flags & WIRE_F_REPLY)) {
		ret = wc_errf(err, EBADMSG,
			      "handover: a %s frame (id %" PRIu64 ") where the reply to %" PRIu64 " was due",
			      wire_type_name(f->h.type), f->h.id, id);
		ho_frame_free(f);
		return ret;
	}
	ret = wire_ho_part_get(f->p, f->h.len, part, err);
	if (ret)
		ho_frame_free(f);
	return ret;
}

/* Takes descriptor index i out of the frame (the caller owns it). */
static int take_fd(struct ho_frame *f, uint32_t i)
{
	int fd = f->fds[i];

	f->fds[i] = -1;
	return fd;
}

/* Parses the version's model directory ourselves and checks that it is
 * what the old daemon served; adopts the pools. */
static int verify_version(struct wcd *d, struct ho_frame *f,
			  const struct wire_ho_version *x, char *err)
{
	struct wcd_version *v = &d->ver[x->slot];
	struct wcd_ho *ho = d->ho;
	struct ident theirs;
	struct wire_mismatch mm[4];
	int ret;

	if (v->used)
		return wc_errf(err, EBADMSG, "handover: version slot %u sent twice",
			       x->slot);
	if (x->tp_size != d->o.tp_size || x->tp_rank != d->o.tp_rank ||
	    x->pp_size != d->o.pp_size || x->pp_rank != d->o.pp_rank) {
		if (x->slot != (uint32_t)d->cur && d->ver[d->cur].used)
			return wc_errf(err, EBADMSG,
				       "handover: two versions of different ranks");
		d->o.tp_size = x->tp_size;
		d->o.tp_rank = x->tp_rank;
		d->o.pp_size = x->pp_size;
		d->o.pp_rank = x->pp_rank;
	}
	snprintf(ho->model[x->slot], sizeof(ho->model[0]), "%s", x->model);
	d->o.model = ho->model[x->slot];
	v->used = true;
	v->number = x->number;
	ret = load_prepare(d, v, err);
	if (ret)
		return ret;
	if (v->ident_len != x->identity_len ||
	    memcmp(v->ident_enc, x->identity, v->ident_len) ||
	    memcmp(v->digest, x->digest, WC_HASH_LEN)) {
		unsigned n = 0;

		if (ident_decode(&theirs, x->identity, x->identity_len, err) == 0)
			n = ident_mismatch(&theirs, &v->ident, mm, 4);
		if (!n)
			return wc_errf(err, ESTALE,
				       "handover: version %" PRIu64 "'s identity differs from this build's parse of %s (the encodings differ; a build with another identity format?)",
				       v->number, x->model);
		return wc_errf(err, ESTALE,
			       "handover: version %" PRIu64 " of %s is not what the model directory holds now: %s: old daemon=%s, this parse=%s%s",
			       v->number, x->model, mm[0].field, mm[0].daemon,
			       mm[0].client, n > 1 ? " (and more fields)" : "");
	}
	if (v->plan.npools != x->npools)
		return wc_errf(err, EINVAL,
			       "handover: version %" PRIu64 " comes in %u pools, this build plans %u: the old daemon packs the model otherwise (another build); restart with a reload instead (wcctl stop, then wcctl start)",
			       v->number, x->npools, v->plan.npools);
	for (uint32_t i = 0; i < x->npools; i++) {
		const struct wire_ho_pool *p = &x->pools[i];
		int fd;

		if (p->size != v->plan.pool_size[i])
			return wc_errf(err, EINVAL,
				       "handover: pool %u of version %" PRIu64 " is %" PRIu64 " bytes, this build plans %" PRIu64 ": the old daemon packs the model otherwise (another build); restart with a reload instead (wcctl stop, then wcctl start)",
				       i, v->number, p->size,
				       v->plan.pool_size[i]);
		fd = take_fd(f, p->fd_index);
		ret = d->dev.be->pool_adopt(&d->dev, &v->pools[i], fd, p->size,
					    p->alloc_size,
					    p->flags & WIRE_POOL_SEALED, err);
		if (ret) {
			close(fd);
			return ret;
		}
		v->npools = i + 1;
	}
	if (x->flags & WIRE_HO_V_HASHED) {
		if (x->ntensors != v->plan.ntensors)
			return wc_errf(err, EINVAL,
				       "handover: %u hashes for the %u tensors of version %" PRIu64,
				       x->ntensors, v->plan.ntensors, v->number);
		v->hash = malloc((size_t)x->ntensors * WC_HASH_LEN + 1);
		if (!v->hash)
			return wc_errf(err, ENOMEM, "out of memory");
		memcpy(v->hash, x->hashes, (size_t)x->ntensors * WC_HASH_LEN);
		v->hashed = true;
	}
	return 0;
}

/* --takeover-verify hash: every tensor hashed again from the pools (on
 * the device where the backend can, else from the host mapping). */
static int rehash_version(struct wcd *d, struct wcd_version *v, char *err)
{
	uint64_t t0 = rx_now_ns();
	char name[WC_ERR_LEN];
	int bad;

	if (!v->hashed)
		return 0;
	bad = life_verify_pools(d, v, name);
	if (bad < 0)
		return wc_errf(err, -bad, "handover: re-hashing version %" PRIu64 " failed: %s",
			       v->number, name);
	if (bad)
		return wc_errf(err, EILSEQ,
			       "handover: %d tensor(s) of version %" PRIu64 " no longer hash to the manifest (the first: %s)",
			       bad, v->number, name);
	log_info("handover: %u tensors of version %" PRIu64 " hashed again in %.3f s: all match",
		 v->plan.ntensors, v->number, (double)(rx_now_ns() - t0) / 1e9);
	return 0;
}

static int recv_state(struct wcd *d, struct ho_got *g, char *err)
{
	static struct wire_ho_version x;
	static struct wire_ho_client xc[WIRE_HO_CLIENTS_PER_FRAME];
	struct wcd_ho *ho = d->ho;
	struct ho_frame f;
	uint32_t part, n;
	int ret;

	ret = recv_part(g, &f, 1, &part, err);
	if (ret)
		return ret;
	ret = part == WIRE_HO_BEGIN ?
	      wire_ho_begin_get(f.p, f.h.len, f.nfds, &g->b, err) :
	      wc_errf(err, EBADMSG, "handover: %s where BEGIN was due",
		      wire_ho_part_name(part));
	if (!ret) {
		g->lock_fd = take_fd(&f, g->b.lock_fd);
		g->listen_fd = take_fd(&f, g->b.listen_fd);
		g->cl = calloc(g->b.nclients + 1, sizeof(*g->cl));
		if (!g->cl)
			ret = wc_errf(err, ENOMEM, "out of memory");
	}
	ho_frame_free(&f);
	if (ret)
		return ret;
	if (g->b.pid != (uint32_t)g->old_pid) {
		/* the ready file was stale: watch the pid that answered */
		if (g->old_pidfd >= 0)
			close(g->old_pidfd);
		g->old_pid = (pid_t)g->b.pid;
		g->old_pidfd = pidfd_open_(g->old_pid);
	}
	ho_step("new", 2);
	/* the old daemon's options that decide the plan and whom it serves */
	d->o.hash = g->b.hash;
	d->o.pool_size = g->b.pool_size;
	snprintf(ho->rules, sizeof(ho->rules), "%s", g->b.rules);
	snprintf(ho->allow_quant, sizeof(ho->allow_quant), "%s",
		 g->b.allow_quant);
	d->o.rules = ho->rules[0] ? ho->rules : NULL;
	d->o.allow_quant = ho->allow_quant[0] ? ho->allow_quant : NULL;
	d->o.nallow_uid = g->b.nallow_uid;
	for (uint32_t i = 0; i < g->b.nallow_uid; i++)
		d->o.allow_uid[i] = g->b.allow_uid[i];
	d->cur = (int)g->b.cur;

	for (unsigned k = 0; k < g->b.nversions; k++) {
		ret = recv_part(g, &f, 1, &part, err);
		if (ret)
			return ret;
		ret = part == WIRE_HO_VERSION ?
		      wire_ho_version_get(f.p, f.h.len, f.nfds, &x, err) :
		      wc_errf(err, EBADMSG, "handover: %s where VERSION was due",
			      wire_ho_part_name(part));
		if (!ret)
			ret = verify_version(d, &f, &x, err);
		ho_frame_free(&f);
		if (ret)
			return ret;
	}
	while (g->ncl < g->b.nclients) {
		ret = recv_part(g, &f, 1, &part, err);
		if (ret)
			return ret;
		ret = part == WIRE_HO_CLIENTS ?
		      wire_ho_clients_get(f.p, f.h.len, f.nfds, xc,
					  WIRE_HO_CLIENTS_PER_FRAME, &n, err) :
		      wc_errf(err, EBADMSG, "handover: %s where CLIENTS was due",
			      wire_ho_part_name(part));
		if (!ret && g->ncl + n > g->b.nclients)
			ret = wc_errf(err, EBADMSG,
				      "handover: more clients than the %u announced",
				      g->b.nclients);
		for (uint32_t i = 0; !ret && i < n; i++) {
			g->cl[g->ncl].x = xc[i];
			g->cl[g->ncl].fd = take_fd(&f, xc[i].fd_index);
			g->ncl++;
		}
		ho_frame_free(&f);
		if (ret)
			return ret;
	}
	if (!d->ver[d->cur].used)
		return wc_errf(err, EBADMSG,
			       "handover: the current version's slot %d was not sent",
			       d->cur);
	d->o.model = ho->model[d->cur];
	g->complete = true;
	return 0;
}

/* The old daemon has let go: DONE, or its end and exit. */
static int wait_done(struct ho_got *g, char *err)
{
	struct ho_frame f;
	uint32_t part;
	int ret = recv_part(g, &f, 2, &part, err);

	if (ret == 0) {
		ret = part == WIRE_HO_DONE ?
		      wire_ho_empty_get(f.p, f.h.len, WIRE_HO_DONE, err) :
		      wc_errf(err, EBADMSG, "handover: %s where DONE was due",
			      wire_ho_part_name(part));
		ho_frame_free(&f);
		return ret;
	}
	return ret;
}

static void send_abort(struct ho_got *g, const char *why)
{
	struct wire_put w;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HANDOVER, 0, 2);
	wire_ho_abort_put(&w, why);
	ho_send(g->sock, &w, NULL, 0, NULL);
	wire_put_free(&w);
}

/* Tells every handed-over client that this pid serves it now (libwcache
 * moves its daemon fd here), before SERVING lets the old daemon exit and
 * its pidfd fire. Nobody else writes to the connections now (the old
 * daemon let go, we have not started), and each client rested with
 * nothing queued, so these small frames go out whole or not at all
 * (MSG_DONTWAIT: a client whose socket is full misses the notice; it sees
 * the old daemon's exit, as after a crash, and keeps its mappings). */
static void ho_tell_clients(struct wcd *d, pid_t old_pid)
{
	struct wire_notice nt = { .kind = WIRE_NOTICE_HANDOVER,
				  .version = wcd_current(d)->number,
				  .pid = (uint32_t)getpid() };
	unsigned missed = 0;
	struct wire_put w;

	snprintf(nt.msg, sizeof(nt.msg),
		 "wcd pid %d handed device %s over to wcd pid %d: same connection, same mappings",
		 (int)old_pid, d->dev.name, (int)getpid());
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
	wire_notice_put(&w, &nt);
	if (wire_frame_end(&w, NULL)) {
		wire_put_free(&w);
		return;
	}
	for (struct wcd_client *c = d->clients; c; c = c->next) {
		if (send(c->fd, w.buf, w.len, MSG_DONTWAIT | MSG_NOSIGNAL) !=
		    (ssize_t)w.len)
			missed++;
	}
	wire_put_free(&w);
	if (missed)
		log_warn("handover: %u client(s) could not be told (socket full or gone)",
			 missed);
}

/* Takes what was handed over: the lock (under this pid), the socket, the
 * clients with their leases and a pidfd watch each (not yet received
 * from: ho_serve_start starts that). Returns the first failure, having
 * done all it could (the caller serves all the same when the old daemon
 * is gone). */
static int adopt(struct wcd *d, struct ho_got *g, char *err)
{
	int ret;

	d->lock_fd = g->lock_fd;
	g->lock_fd = -1;
	ret = ho_claim_lock(d, err);
	d->listen_fd = g->listen_fd;
	g->listen_fd = -1;
	d->next_lease = g->b.next_lease;
	d->requests = g->b.requests;
	d->mismatches = g->b.mismatches;
	wcd_enter(d, WCD_READY);
	for (uint32_t i = 0; i < g->ncl; i++) {
		const struct wire_ho_client *x = &g->cl[i].x;
		struct wcd_client *c;

		c = server_adopt_client(d, g->cl[i].fd, (pid_t)x->pid,
					(uid_t)x->uid, x->flags & WIRE_HO_C_HELLO,
					x->requests);
		if (!c) {
			if (!ret)
				ret = wc_errf(err, ENOMEM,
					      "out of memory adopting client pid %u",
					      x->pid);
			continue;   /* fd stays in g->cl: closed by got_close */
		}
		g->cl[i].fd = -1;
		for (uint32_t k = 0; k < x->nleases; k++) {
			int vi = -1;

			for (int s = 0; s < WCD_VERSIONS; s++)
				if (d->ver[s].used &&
				    d->ver[s].number == x->leases[k].version)
					vi = s;
			if (vi < 0) {
				log_warn("client pid %u: lease %" PRIu64 " on version %" PRIu64 ", which was not handed over; dropped",
					 x->pid, x->leases[k].id,
					 x->leases[k].version);
				continue;
			}
			c->leases[c->nleases].id = x->leases[k].id;
			c->leases[c->nleases].ver = vi;
			c->nleases++;
			d->ver[vi].leases++;
			if (x->leases[k].id > d->next_lease)
				d->next_lease = x->leases[k].id;
		}
	}
	return ret;
}

/* Everything that can fail before SERVING, and nothing that receives:
 * the lock and the socket taken, the clients adopted and told this pid,
 * the ready file written (WCD_TEST_HO_READY_FAIL=1: it cannot be, for
 * the tests). Not a byte of a client and no connection is taken before
 * SERVING: a request this daemon received and then died with is one the
 * old daemon never sees. So the receives and the accept start after
 * SERVING (ho_serve_start), not here: starting one queues SQEs, but the
 * reactor submits the queue at once when it is full (256 entries; one or
 * two per client, and a pidfd watch each), so with a hundred clients or
 * more the first receives would reach the kernel before SERVING. Each
 * step runs even after one failed (the caller may serve all the same);
 * the first failure is returned. */
static int ho_setup(struct wcd *d, struct ho_got *g,
		    const struct server_hooks *hooks, char *err)
{
	char e2[WC_ERR_LEN];
	int ret, r2;

	d->hooks = hooks;
	ret = adopt(d, g, err);
	ho_tell_clients(d, g->old_pid);
	if (getenv("WCD_TEST_HO_READY_FAIL"))
		r2 = wc_errf(e2, EIO,
			     "WCD_TEST_HO_READY_FAIL: the ready file %s cannot be written",
			     d->paths.ready);
	else
		r2 = status_write_ready(d, e2);
	if (r2 && !ret) {
		ret = r2;
		snprintf(err, WC_ERR_LEN, "%s", e2);
	}
	return ret;
}

/* The set-up failed while the old daemon waits in DONE: it resumes on
 * ABORT (or on this connection's end) and takes back what this process
 * touched (ho_take_back), then answers with an ERROR and closes the
 * connection. That end is awaited (HO_IO_TIMEOUT_S at most), so that the
 * old daemon reads the ABORT before it sees this process die, and serves
 * again before this one has exited. Then exits at once, as the old daemon
 * does after SERVING: main's clean-up would unlink the ready file and the
 * socket, unlock the flock and shut the shared connections down, all of
 * which the old daemon goes on using. */
static void __attribute__((noreturn)) ho_give_up(struct ho_got *g,
						 const char *why)
{
	char buf[256];
	ssize_t k;

	log_error("handover: %s; aborted before serving: wcd pid %d serves on",
		  why, (int)g->old_pid);
	send_abort(g, why);
	do
		k = recv(g->sock, buf, sizeof(buf), 0);
	while (k > 0 || (k < 0 && errno == EINTR));
	fflush(stderr);
	_exit(1);
}

/* The context this process made at start-up (CUDA) is released as after
 * a load, but HO_IDLE_NS later: the requests that waited in the sockets
 * during the handover are answered first, not after a cudaDeviceReset. */
#define HO_IDLE_NS (200ull * 1000000)

static void idle_timer_cb(struct rx_timer *t, int res)
{
	struct wcd_ho *ho = container_of(t, struct wcd_ho, idle_timer);

	if (res == 0)
		life_device_idle(ho->d);
}

/* After SERVING: the loop's receives, the accept and the idle timer. A
 * receive that cannot start closes that client (client_recv_next), an
 * accept that cannot start ends the daemon (server_start): the reactor
 * refuses them only when the kernel refuses a submission. */
static void ho_serve_start(struct wcd *d)
{
	server_start(d, d->hooks);
	for (struct wcd_client *c = d->clients, *n; c; c = n) {
		n = c->next;
		server_client_start(c);
	}
	if (rx_timer_start(&d->loop, &d->ho->idle_timer, HO_IDLE_NS,
			   idle_timer_cb))
		life_device_idle(d);
}

/* The tests' hook (WCD_TEST_HO_SERVE_GATE=PATH): after the set-up and
 * before SERVING (or the ABORT of a set-up that failed), wait up to 60 s
 * for PATH to exist (and remove it), so that a test can act on the old
 * daemon while it waits in DONE. */
static void test_serve_gate(void)
{
	const char *gate = getenv("WCD_TEST_HO_SERVE_GATE");

	if (!gate || !*gate)
		return;
	for (int k = 0; k < 6000 && access(gate, F_OK); k++)
		usleep(10000);
	unlink(gate);
}

int handover_take(struct wcd *d, const struct server_hooks *hooks, char *err)
{
	struct ho_got g = { .sock = -1, .old_pidfd = -1, .lock_fd = -1,
			    .listen_fd = -1 };
	struct wire_ho_ask a = { .pid = (uint32_t)getpid() };
	uint64_t t0 = rx_now_ns(), t1;
	struct wire_put w;
	int ret;

	if (!d->dev.be->pool_adopt)
		return wc_errf(err, ENOTSUP,
			       "--takeover: the %s backend cannot take pools over",
			       d->dev.be->name);
	if (!ho_get(d))
		return wc_errf(err, ENOMEM, "out of memory");
	ret = ho_connect(d, &g, err);
	if (ret)
		return ret;
	ask_versions(&a);
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HANDOVER, 0, 1);
	wire_ho_ask_put(&w, &a);
	ret = ho_send(g.sock, &w, NULL, 0, err);
	wire_put_free(&w);
	ho_step("new", 1);
	if (!ret)
		ret = recv_state(d, &g, err);
	for (int i = 0; !ret && d->o.ho_rehash && i < WCD_VERSIONS; i++)
		if (d->ver[i].used)
			ret = rehash_version(d, &d->ver[i], err);
	t1 = rx_now_ns();
	if (ret) {
		bool died = pidfd_exited(g.old_pidfd,
					 ret == -ECONNRESET ? HO_EXIT_WAIT_MS : 0);

		if (!died && g.b.pid) { /* BEGIN came: it waits for us */
			size_t n = strlen(err);

			send_abort(&g, err);
			snprintf(err + n, WC_ERR_LEN - n, "; wcd pid %u serves on",
				 g.b.pid);
		}
		got_close(d, &g, true);
		return died ? -ECONNRESET : ret;
	}
	ho_step("new", 3);
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HANDOVER, 0, 2);
	wire_ho_empty_put(&w, WIRE_HO_COMMIT);
	ret = ho_send(g.sock, &w, NULL, 0, err);
	wire_put_free(&w);
	ho_step("new", 4);
	if (!ret)
		ret = wait_done(&g, err);
	if ((ret == -ECONNRESET || ret == -EPIPE) &&
	    pidfd_exited(g.old_pidfd, HO_EXIT_WAIT_MS)) {
		log_info("handover: the old daemon pid %d exited after everything was handed over; taking over",
			 (int)g.old_pid);
		ret = 0;
	}
	if (ret) {
		/* no DONE, and the old daemon did not exit: it resumed */
		got_close(d, &g, true);
		return ret;
	}
	ho_step("new", 5);
	ret = ho_setup(d, &g, hooks, err);
	test_serve_gate();
	if (ret) {
		if (!pidfd_exited(g.old_pidfd, 0))
			ho_give_up(&g, err);
		log_error("handover: %s; the old daemon pid %d is gone: serving all the same",
			  err, (int)g.old_pid);
	}
	ho_step("new", 6);
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HANDOVER, 0, 3);
	wire_ho_empty_put(&w, WIRE_HO_SERVING);
	if (ho_send(g.sock, &w, NULL, 0, err))
		log_debug("SERVING not sent (the old daemon is gone): %s", err);
	wire_put_free(&w);
	ho_step("new", 7);
	got_close(d, &g, false);
	ho_serve_start(d);
	log_info("handover: took device %s over from pid %d in %.3f ms (state received and checked in %.3f ms): %u client(s), %u version(s)",
		 d->dev.name, (int)g.old_pid, (double)(rx_now_ns() - t0) / 1e6,
		 (double)(t1 - t0) / 1e6, d->nclients, g.b.nversions);
	return 0;
}
