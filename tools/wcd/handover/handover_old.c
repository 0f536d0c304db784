/* SPDX-License-Identifier: MIT */
/*
 * Hot handover, the running daemon's side: the HANDOVER requests of the
 * new daemon (handover_request), the pause and the state sent, COMMIT,
 * DONE, then SERVING (exit) or the take-back; a stop held after DONE
 * (handover_stop_hold). The conversation and its failure at each step are
 * in handover.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

#include "compat.h"
#include "base.h"
#include "err.h"
#include "log.h"
#include "handover/handover.h"
#include "push/push.h"
#include "serve/server.h"
#include "wire_handover.h"
#include "daemon/fault.h"

#define HO_DRAIN_NS (5ull * 1000000000)     /* clients to reach rest */
#define HO_DRAIN_NS_MIN (10ull * 1000000)
#define HO_COMMIT_NS (120ull * 1000000000)  /* the new daemon to verify */
#define HO_SERVING_NS (10ull * 1000000000)  /* DONE to SERVING */
#define HO_SERVING_GRACE_NS (1ull * 1000000)  /* a SERVING already in */
#define HO_KILL_WAIT_NS (1000ull * 1000000)   /* SIGKILL to its end */

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
	char err[BASE_ERR_LEN];
	unsigned n = 0;

	if (ho_claim_lock(d, err))
		log_error("handover: %s", err);
	if (d->ready_write(d, err))
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
	d->srv->lent = false;
	if (rx_op_busy(&ho->drain_timer.op))
		rx_cancel(&ho->drain_timer.op);
	if (rx_op_busy(&ho->commit_timer.op))
		rx_cancel(&ho->commit_timer.op);
	if (rx_op_busy(&ho->serving_timer.op))
		rx_cancel(&ho->serving_timer.op);
	ho->overdue = HO_OVERDUE_NO;
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
		.cur = (uint32_t)wcd_model(d)->cur,
		.next_lease = d->srv->next_lease,
		.requests = d->srv->requests, .mismatches = d->srv->mismatches,
		.lock_fd = 0, .listen_fd = 1, .hash = d->o.hash,
		.pool_size = d->o.pool_size, .nallow_uid = d->o.nallow_uid,
		.nallow_gid = d->o.nallow_gid,
	};

	for (int i = 0; i < WCD_VERSIONS; i++)
		b.nversions += wcd_model(d)->ver[i].used;
	for (struct wcd_client *c = d->srv->clients; c; c = c->next)
		b.nclients += c != ho->peer;
	snprintf(b.rules, sizeof(b.rules), "%s", d->o.rules ? d->o.rules : "");
	snprintf(b.allow_quant, sizeof(b.allow_quant), "%s",
		 d->o.allow_quant ? d->o.allow_quant : "");
	memcpy(b.allow_uid, d->o.allow_uid, sizeof(uid_t) * d->o.nallow_uid);
	memcpy(b.allow_gid, d->o.allow_gid, sizeof(gid_t) * d->o.nallow_gid);
	wire_frame_begin(w, WIRE_HANDOVER, WIRE_F_REPLY | WIRE_F_MORE, ho->id);
	wire_ho_begin_put(w, &b);
}

static void put_version(struct wcd *d, int slot, struct wire_put *w,
			int *fds, unsigned *nfds, bool last)
{
	struct wcd_version *v = &wcd_model(d)->ver[slot];
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
	x.flags = (slot == wcd_model(d)->cur ? WIRE_HO_V_CURRENT : 0) |
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
	struct wcd_client *c = d->srv->clients;
	unsigned nfds, nv = 0, sent_v = 0, left = 0;
	struct wire_put w;
	int ret;

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	for (int i = 0; i < WCD_VERSIONS; i++)
		nv += wcd_model(d)->ver[i].used;
	for (struct wcd_client *x = d->srv->clients; x; x = x->next)
		left += x != ho->peer;
	wire_put_init(&w);
	put_begin(d, &w);
	fds[0] = d->lock_fd;
	fds[1] = d->srv->listen_fd;
	ret = ho_send(fd, &w, fds, 2, err);
	ho_step("old", 2);
	for (int i = 0; !ret && i < WCD_VERSIONS; i++) {
		if (!wcd_model(d)->ver[i].used)
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
				int vi = c->leases[k].ver;

				x->leases[k].version =
					wcd_model(d)->ver[vi].number;
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
	char err[BASE_ERR_LEN];
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
		 (int)ho->peer_pid, d->srv->nclients - 1,
		 (double)(rx_now_ns() - ho->t0) / 1e6);
	if (rx_op_busy(&ho->drain_timer.op))
		rx_cancel(&ho->drain_timer.op);
	ho_arm(d, &ho->commit_timer, HO_COMMIT_NS);
}

/* The signal that kills an overdue new daemon: SIGKILL, or for the tests
 * WCD_TEST_HO_KILL_SIG (SIGSTOP: a kill that does not end it, as in a
 * driver call; 0x7f: one the kernel refuses). */
static int kill_sig(void)
{
	return (int)fault_num(FAULT_HO_KILL_SIG, SIGKILL);
}

/* The new daemon has neither served nor ended within HO_SERVING_NS of
 * DONE (WCD_HANDOVER_SERVING_MS): it hangs (deadlocked, stopped, stuck in
 * a driver call) where its set-up takes milliseconds (ho_setup: the lock,
 * a pidfd and a notice per client, the ready file; the re-hash of
 * --takeover-verify hash runs before COMMIT), and every engine's requests
 * wait in the sockets that nobody receives from. In three steps:
 *   grace   wait HO_SERVING_GRACE_NS more, so that a SERVING already in
 *           this loop's completions (this daemon was itself stopped past
 *           the bound, say) is read first;
 *   kill    SIGKILL through its pidfd; its end (its connection's, or its
 *           pidfd's) makes this daemon take the clients back
 *           (ho_old_abort): it serves on, or stops if a stop was held.
 *           Should the kill be refused, the new daemon holds everything
 *           and this one exits as after SERVING: one daemon or none,
 *           never two;
 *   killed  no end within HO_KILL_WAIT_NS of the kill: it is stuck in the
 *           kernel (uninterruptible) and, with SIGKILL pending, runs no
 *           code of its own any more, and before SERVING it has no
 *           receive queued: the clients are taken back without its end.
 * Known cost: a new daemon that sends SERVING at the very moment of the
 * kill dies with the requests it received since; the bound is a thousand
 * times its set-up. */
static void ho_serving_overdue(struct wcd *d)
{
	struct wcd_ho *ho = d->ho;
	struct wcd_client *c = ho->peer;
	int pidfd = c && c->watching ? c->watch.pidfd : -1, own = -1, e = 0;
	int sig = kill_sig();

	if (ho->overdue == HO_OVERDUE_NO) {
		ho->overdue = HO_OVERDUE_GRACE;
		ho_arm(d, &ho->serving_timer, HO_SERVING_GRACE_NS);
		return;
	}
	if (ho->overdue == HO_OVERDUE_KILLED) {
		ho_old_abort(d, WIRE_E_STATE,
			     "the new daemon pid %d has not ended within %llu ms of its SIGKILL (stuck in the kernel: it runs no code of its own any more); taking the clients back without waiting for its end",
			     (int)ho->peer_pid, HO_KILL_WAIT_NS / 1000000);
		return;
	}
	log_error("handover: the new daemon pid %d has not served within %.3g s of its commit (waited %.3f s since DONE); killing it (SIGKILL) to take the clients back and %s",
		  (int)ho->peer_pid, (double)ho->serving_ns / 1e9,
		  (double)(rx_now_ns() - ho->t_done) / 1e9,
		  ho->stop_held ? "stop as asked" : "serve on");
	if (pidfd < 0)
		pidfd = own = rx_pidfd_open(ho->peer_pid);
	if (pidfd < 0 || syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0))
		e = errno;
	if (own >= 0)
		close(own);
	if (!e || e == ESRCH) {
		/* its end is on the way */
		ho->overdue = HO_OVERDUE_KILLED;
		ho_arm(d, &ho->serving_timer, HO_KILL_WAIT_NS);
		return;
	}
	log_error("handover: cannot kill pid %d: %s; exiting without touching the clients: it holds them (one daemon or none, never two)",
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
		ho_serving_overdue(d);
	}
}

/* def_ns, or the milliseconds in environment variable env (the tests'
 * shorter bounds: WCD_HANDOVER_DRAIN_MS, WCD_HANDOVER_SERVING_MS); at
 * least HO_DRAIN_NS_MIN. */
static uint64_t env_bound(enum fault_point env, uint64_t def_ns)
{
	const char *e = fault_str(env);
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
			 wcd_model(d)->life.level);
		return buf;
	}
	if (d->state == WCD_WAKING || d->state == WCD_UPDATING ||
	    wcd_model(d)->life.job) {
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
	if (push_incomplete(d)) {
		/* the mark is this daemon's: a new one would serve the bytes */
		snprintf(buf, cap,
			 "version %" PRIu64 " is incomplete (an in-place update ended before its commit): update it first (another in-place session, or wcctl update), then restart",
			 wcd_current(d)->number);
		return buf;
	}
	return NULL;
}

static void ho_ask(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wire_ho_ask a;
	struct wcd_ho *ho;
	char err[BASE_ERR_LEN], buf[WIRE_MSG_MAX + 1];
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
			    a.ho_max < 2 ? " (protocol 2 packs big layers whole: the pools differ)" :
			    a.ho_max < 3 ? " (protocol 3 carries the groups the daemon serves, --allow-gid)" : "",
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
	ho->overdue = HO_OVERDUE_NO;
	log_info("handover: pid %d asks for the device (protocol %u); pausing %u client(s)",
		 (int)c->pid, hi, d->srv->nclients - 1);
	server_pause(d, c);
	ho_step("old", 1);
	ho->drain_ns = env_bound(FAULT_HANDOVER_DRAIN_MS, HO_DRAIN_NS);
	ho_arm(d, &ho->drain_timer, ho->drain_ns);
	handover_poke(d);
}

/* The tests' hook WCD_TEST_HO_WAIT_PEER_EXIT=1: after DONE, wait (a
 * blocking poll of its pidfd, 60 s at most) until the new daemon has
 * ended, so that what it sent before (SERVING, with WCD_HANDOVER_KILL=
 * new:7) and its pidfd's event reach the loop together. */
static void test_wait_peer_exit(struct wcd_ho *ho)
{
	int fd;

	if (!fault_on(FAULT_HO_WAIT_PEER_EXIT))
		return;
	fd = rx_pidfd_open(ho->peer_pid);
	if (fd >= 0) {
		ho_pidfd_exited(fd, 60000);
		close(fd);
	}
}

/* COMMIT: let go (DONE), then wait for SERVING, or for the new daemon's
 * end (it died before it served: resume), HO_SERVING_NS at most
 * (ho_serving_overdue: then it is killed). Nothing here touches a client,
 * and from DONE on the clients are lent (d->srv->lent). */
static void ho_commit(struct wcd_client *c, const uint8_t *p, uint32_t n)
{
	struct wcd *d = c->d;
	struct wcd_ho *ho = d->ho;
	char err[BASE_ERR_LEN];
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
	d->srv->lent = true;
	ho->t_done = rx_now_ns();
	ho->serving_ns = env_bound(FAULT_HANDOVER_SERVING_MS, HO_SERVING_NS);
	ho_arm(d, &ho->serving_timer, ho->serving_ns);
	ho_step("old", 5);
	test_wait_peer_exit(ho);
}

/* SIGTERM or SHUTDOWN after DONE (server_stop while d->srv->lent): the
 * clients, the lock and the socket are the new daemon's now (it is
 * setting itself up to serve), and this daemon's normal stop (a notice
 * to every client, shutdown() of each connection, the socket and the
 * ready file unlinked) would cut them under it. The stop waits for the
 * handover's end instead, what is left of HO_SERVING_NS from DONE
 * (ho_serving_overdue, armed at the commit): on
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
	log_info("handover: a stop after the commit: the clients are pid %d's now; waiting up to %.3g s from its commit for it to serve (then exiting) or to fail (then taking them back and stopping)",
		 (int)ho->peer_pid, (double)ho->serving_ns / 1e9);
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
	char err[BASE_ERR_LEN], why[WIRE_MSG_MAX + 1];
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

/* The new daemon's process ended after DONE: it may have sent SERVING
 * first, and that frame may still be in the socket, or be read in this
 * very batch of completions after the pidfd's (the pidfd fired first in 3
 * of 82 kills right after SERVING, and the old daemon took the clients
 * back from a daemon that had served). What it sent decides: the
 * connection is read on to its end of file, which comes after every byte
 * it sent (its descriptors are closed before its pidfd fires): SERVING
 * there makes this daemon exit (ho_serving), the end without it takes
 * the clients back (handover_client_gone). Bounded: the serving timer,
 * armed at DONE, runs on. */
bool handover_read_to_end(struct wcd *d, struct wcd_client *c)
{
	struct wcd_ho *ho = d->ho;

	if (!ho || ho->st != HO_DONE || ho->peer != c)
		return false;
	log_debug("handover: the new daemon pid %d ended after DONE; reading what it sent before deciding",
		  (int)ho->peer_pid);
	return true;
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
