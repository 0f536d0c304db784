/* SPDX-License-Identifier: MIT */
/*
 * Hot handover, the new daemon's side (wcd --takeover: handover_take):
 * connect, ASK, receive and check everything, COMMIT, wait for DONE, set
 * up to serve (ho_setup), SERVING, then serve (ho_serve_start). The
 * conversation and its failure at each step are in handover.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "compat.h"
#include "base.h"
#include "err.h"
#include "log.h"
#include "handover/handover.h"
#include "serve/server.h"
#include "life/lifecycle.h"
#include "load/load.h"
#include "ready.h"
#include "wire_handover.h"
#include "daemon/fault.h"

#define HO_EXIT_WAIT_MS 5000                /* old daemon gone after EOF */

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
		if (wcd_model(d)->ver[i].used)
			load_version_free(d, &wcd_model(d)->ver[i]);
	if (g->sock >= 0)
		close(g->sock);
	g->sock = -1;
	if (g->old_pidfd >= 0)
		close(g->old_pidfd);
	g->old_pidfd = -1;
}

/* The bound on each blocking frame of this side, HO_IO_TIMEOUT_S or the
 * milliseconds in WCD_HANDOVER_IO_MS (the tests' shorter bound; 10 ms at
 * least): the old daemon answers each step at once (its drain is bounded
 * by HO_DRAIN_NS, well below), so a wait past it means the old daemon
 * hangs, and this one gives up, having taken nothing over. */
static struct timeval io_timeout(void)
{
	unsigned long long ms = fault_num(FAULT_HANDOVER_IO_MS,
					  HO_IO_TIMEOUT_S * 1000ull);

	if (ms < 10)
		ms = 10;
	return (struct timeval){ .tv_sec = (time_t)(ms / 1000),
				 .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
}

static int ho_connect(struct wcd *d, struct ho_got *g, char *err)
{
	struct sockaddr_un sa;
	struct timeval tv = io_timeout();
	struct ready_info ri;
	char rerr[BASE_ERR_LEN];
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int fd, e;

	fd = server_sock_open(d, &sa, err);
	if (fd < 0)
		return fd;
	/* before connect(): a full backlog blocks it for SO_SNDTIMEO */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		e = errno;
		close(fd);
		return base_errf(err, e == ECONNREFUSED ? ENOENT : e,
			       "--takeover: no wcd serves device %s (%s: %s); start one with wcctl start, or wcd without --takeover",
			       d->dev.name, d->paths.sock, strerror(e));
	}
	/* SO_PEERCRED names whoever called listen(), which after an earlier
	 * handover is long gone: the ready file names the daemon that serves
	 * (BEGIN confirms it) */
	if (ready_read_file(&ri, d->paths.ready, rerr) == 0 && ri.pid > 0)
		g->old_pid = ri.pid;
	else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
		g->old_pid = cr.pid;
	g->old_pidfd = rx_pidfd_open(g->old_pid);
	g->sock = fd;
	return 0;
}

/* The handover versions this build asks for; WCD_TEST_HO_PROTO=MIN:MAX
 * pretends to be another build (the version refusal's test). */
static void ask_versions(struct wire_ho_ask *a)
{
	const char *e = fault_str(FAULT_HO_PROTO);
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
	struct wire_notice nt;
	char derr[BASE_ERR_LEN];
	int ret = ho_recv(g->sock, f, err);

	if (ret)
		return ret;
	if (f->h.type == WIRE_NOTICE &&
	    !wire_notice_get(f->p, f->h.len, &nt, NULL) &&
	    nt.kind == WIRE_NOTICE_SHUTDOWN) {
		/* its stop told every client, this connection too */
		ho_frame_free(f);
		return base_errf(err, ECANCELED,
			       "wcd pid %d was stopped (SIGTERM or SHUTDOWN) before the commit: a stop wins over a handover; nothing taken over (wcctl start serves the device afresh)",
			       (int)g->old_pid);
	}
	if (f->h.type == WIRE_ERROR && f->h.id == id) {
		ret = wire_error_get(f->p, f->h.len, &e, derr);
		ho_frame_free(f);
		if (ret)
			return base_errf(err, EBADMSG, "handover: %s", derr);
		return base_errf(err, e.code == WIRE_E_VERSION ? EPROTONOSUPPORT :
			       e.code == WIRE_E_BUSY ? EBUSY : EPERM,
			       "wcd pid %d: %s", (int)g->old_pid, e.msg);
	}
	if (f->h.type != WIRE_HANDOVER || f->h.id != id ||
	    !(f->h.flags & WIRE_F_REPLY)) {
		ret = base_errf(err, EBADMSG,
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
	struct wcd_model *model = wcd_model(d);
	struct wcd_version *v = &model->ver[x->slot];
	struct wcd_ho *ho = d->ho;
	struct ident theirs;
	struct wire_mismatch mm[4];
	int ret;

	if (v->used)
		return base_errf(err, EBADMSG, "handover: version slot %u sent twice",
			       x->slot);
	if (x->tp_size != d->o.tp_size || x->tp_rank != d->o.tp_rank ||
	    x->pp_size != d->o.pp_size || x->pp_rank != d->o.pp_rank) {
		if (x->slot != (uint32_t)model->cur &&
		    model_current(model)->used)
			return base_errf(err, EBADMSG,
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
	    memcmp(v->digest, x->digest, BASE_HASH_LEN)) {
		unsigned n = 0;

		if (ident_decode(&theirs, x->identity, x->identity_len, err) == 0)
			n = ident_mismatch(&theirs, &v->ident, mm, 4);
		if (!n)
			return base_errf(err, ESTALE,
				       "handover: version %" PRIu64 "'s identity differs from this build's parse of %s (the encodings differ; a build with another identity format?)",
				       v->number, x->model);
		return base_errf(err, ESTALE,
			       "handover: version %" PRIu64 " of %s is not what the model directory holds now: %s: old daemon=%s, this parse=%s%s",
			       v->number, x->model, mm[0].field, mm[0].daemon,
			       mm[0].client, n > 1 ? " (and more fields)" : "");
	}
	if (v->plan.npools != x->npools)
		return base_errf(err, EINVAL,
			       "handover: version %" PRIu64 " comes in %u pools, this build plans %u: the old daemon packs the model otherwise (another build); restart with a reload instead (wcctl stop, then wcctl start)",
			       v->number, x->npools, v->plan.npools);
	for (uint32_t i = 0; i < x->npools; i++) {
		const struct wire_ho_pool *p = &x->pools[i];
		int fd;

		if (p->size != v->plan.pool_size[i])
			return base_errf(err, EINVAL,
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
			return base_errf(err, EINVAL,
				       "handover: %u hashes for the %u tensors of version %" PRIu64,
				       x->ntensors, v->plan.ntensors, v->number);
		v->hash = malloc((size_t)x->ntensors * BASE_HASH_LEN + 1);
		if (!v->hash)
			return base_errf(err, ENOMEM, "out of memory");
		memcpy(v->hash, x->hashes, (size_t)x->ntensors * BASE_HASH_LEN);
		v->hashed = true;
	}
	return 0;
}

/* --takeover-verify hash: every tensor hashed again from the pools (on
 * the device where the backend can, else from the host mapping). */
static int rehash_version(struct wcd *d, struct wcd_version *v, char *err)
{
	uint64_t t0 = rx_now_ns();
	char name[BASE_ERR_LEN];
	int bad;

	if (!v->hashed)
		return 0;
	bad = life_verify_pools(d, v, name);
	if (bad < 0)
		return base_errf(err, -bad, "handover: re-hashing version %" PRIu64 " failed: %s",
			       v->number, name);
	if (bad)
		return base_errf(err, EILSEQ,
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
	      base_errf(err, EBADMSG, "handover: %s where BEGIN was due",
		      wire_ho_part_name(part));
	if (!ret) {
		g->lock_fd = take_fd(&f, g->b.lock_fd);
		g->listen_fd = take_fd(&f, g->b.listen_fd);
		g->cl = calloc(g->b.nclients + 1, sizeof(*g->cl));
		if (!g->cl)
			ret = base_errf(err, ENOMEM, "out of memory");
	}
	ho_frame_free(&f);
	if (ret)
		return ret;
	if (g->b.pid != (uint32_t)g->old_pid) {
		/* the ready file was stale: watch the pid that answered */
		if (g->old_pidfd >= 0)
			close(g->old_pidfd);
		g->old_pid = (pid_t)g->b.pid;
		g->old_pidfd = rx_pidfd_open(g->old_pid);
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
	d->o.nallow_gid = g->b.nallow_gid;
	for (uint32_t i = 0; i < g->b.nallow_gid; i++)
		d->o.allow_gid[i] = g->b.allow_gid[i];
	wcd_model(d)->cur = (int)g->b.cur;

	for (unsigned k = 0; k < g->b.nversions; k++) {
		ret = recv_part(g, &f, 1, &part, err);
		if (ret)
			return ret;
		ret = part == WIRE_HO_VERSION ?
		      wire_ho_version_get(f.p, f.h.len, f.nfds, &x, err) :
		      base_errf(err, EBADMSG, "handover: %s where VERSION was due",
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
		      base_errf(err, EBADMSG, "handover: %s where CLIENTS was due",
			      wire_ho_part_name(part));
		if (!ret && g->ncl + n > g->b.nclients)
			ret = base_errf(err, EBADMSG,
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
	if (!wcd_model(d)->ver[wcd_model(d)->cur].used)
		return base_errf(err, EBADMSG,
			       "handover: the current version's slot %d was not sent",
			       wcd_model(d)->cur);
	d->o.model = ho->model[wcd_model(d)->cur];
	g->complete = true;
	return 0;
}

/* The old daemon has let go: DONE, or its end and exit. Bounded by the
 * socket's timeout (io_timeout): an old daemon that does not answer
 * COMMIT hangs; this one takes nothing over and exits (the old one serves
 * on if it wakes: its DONE then meets a closed connection, or the
 * connection's end after it, and it resumes or takes back). */
static int wait_done(struct ho_got *g, char *err)
{
	struct ho_frame f;
	uint32_t part;
	int ret = recv_part(g, &f, 2, &part, err);

	if (ret == -ETIMEDOUT) {
		struct timeval tv = io_timeout();

		return base_errf(err, ETIMEDOUT,
			       "handover: wcd pid %d did not answer COMMIT within %.3g s (hung?); nothing taken over, exiting: it serves on if it resumes (else stop it and start afresh: wcctl stop, wcctl start)",
			       (int)g->old_pid,
			       (double)tv.tv_sec + tv.tv_usec / 1e6);
	}

	if (ret == 0) {
		ret = part == WIRE_HO_DONE ?
		      wire_ho_empty_get(f.p, f.h.len, WIRE_HO_DONE, err) :
		      base_errf(err, EBADMSG, "handover: %s where DONE was due",
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
	for (struct wcd_client *c = d->srv->clients; c; c = c->next) {
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
	struct wcd_model *model = wcd_model(d);
	int ret;

	d->lock_fd = g->lock_fd;
	g->lock_fd = -1;
	ret = ho_claim_lock(d, err);
	d->srv->listen_fd = g->listen_fd;
	g->listen_fd = -1;
	d->srv->next_lease = g->b.next_lease;
	d->srv->requests = g->b.requests;
	d->srv->mismatches = g->b.mismatches;
	wcd_enter(d, WCD_READY);
	for (uint32_t i = 0; i < g->ncl; i++) {
		const struct wire_ho_client *x = &g->cl[i].x;
		struct wcd_client *c;

		c = server_adopt_client(d, g->cl[i].fd, (pid_t)x->pid,
					(uid_t)x->uid, x->flags & WIRE_HO_C_HELLO,
					x->requests);
		if (!c) {
			if (!ret)
				ret = base_errf(err, ENOMEM,
					      "out of memory adopting client pid %u",
					      x->pid);
			continue;   /* fd stays in g->cl: closed by got_close */
		}
		g->cl[i].fd = -1;
		for (uint32_t k = 0; k < x->nleases; k++) {
			int vi = -1;

			for (int s = 0; s < WCD_VERSIONS; s++)
				if (model->ver[s].used &&
				    model->ver[s].number ==
				    x->leases[k].version)
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
			model->ver[vi].leases++;
			if (x->leases[k].id > d->srv->next_lease)
				d->srv->next_lease = x->leases[k].id;
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
	char e2[BASE_ERR_LEN];
	int ret, r2;

	d->srv->hooks = hooks;
	ret = adopt(d, g, err);
	ho_tell_clients(d, g->old_pid);
	if (fault_on(FAULT_HO_READY_FAIL))
		r2 = base_errf(e2, EIO,
			     "WCD_TEST_HO_READY_FAIL: the ready file %s cannot be written",
			     d->paths.ready);
	else
		r2 = d->ready_write(d, e2);
	if (r2 && !ret) {
		ret = r2;
		snprintf(err, BASE_ERR_LEN, "%s", e2);
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
	server_start(d, d->srv->hooks);
	for (struct wcd_client *c = d->srv->clients, *n; c; c = n) {
		n = c->next;
		server_client_start(c);
	}
	if (rx_timer_start(&d->loop, &d->ho->idle_timer, HO_IDLE_NS,
			   idle_timer_cb))
		life_device_idle(d);
}

/* The tests' hooks (fault_gate): WCD_TEST_HO_COMMIT_GATE before COMMIT
 * (the old daemon in SENT), WCD_TEST_HO_SERVE_GATE after the set-up and
 * before SERVING (or the ABORT of a set-up that failed; the old daemon in
 * DONE), so that a test can act on the old daemon while the new waits. */
int handover_take(struct wcd *d, const struct server_hooks *hooks, char *err)
{
	struct ho_got g = { .sock = -1, .old_pidfd = -1, .lock_fd = -1,
			    .listen_fd = -1 };
	struct wire_ho_ask a = { .pid = (uint32_t)getpid() };
	uint64_t t0 = rx_now_ns(), t1;
	struct wire_put w;
	int ret;

	if (!d->dev.be->pool_adopt)
		return base_errf(err, ENOTSUP,
			       "--takeover: the %s backend cannot take pools over",
			       d->dev.be->name);
	if (!ho_get(d))
		return base_errf(err, ENOMEM, "out of memory");
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
		if (wcd_model(d)->ver[i].used)
			ret = rehash_version(d, &wcd_model(d)->ver[i], err);
	t1 = rx_now_ns();
	if (ret) {
		bool died = ho_pidfd_exited(g.old_pidfd,
					 ret == -ECONNRESET ? HO_EXIT_WAIT_MS : 0);

		if (!died && g.b.pid) { /* BEGIN came: it waits for us */
			size_t n = strlen(err);

			send_abort(&g, err);
			snprintf(err + n, BASE_ERR_LEN - n, "; wcd pid %u serves on",
				 g.b.pid);
		}
		got_close(d, &g, true);
		return died ? -ECONNRESET : ret;
	}
	ho_step("new", 3);
	fault_gate(FAULT_HO_COMMIT_GATE, NULL, NULL);
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HANDOVER, 0, 2);
	wire_ho_empty_put(&w, WIRE_HO_COMMIT);
	ret = ho_send(g.sock, &w, NULL, 0, err);
	wire_put_free(&w);
	ho_step("new", 4);
	/* DONE; or, when the old daemon closed the connection, what it sent
	 * before: a SHUTDOWN notice (it stopped: its stop shut the clients
	 * down and unlinked the socket) fails the handover, nothing at all
	 * (it died with everything handed over) is taken over below */
	if (!ret || ret == -EPIPE || ret == -ECONNRESET)
		ret = wait_done(&g, err);
	if ((ret == -ECONNRESET || ret == -EPIPE) &&
	    ho_pidfd_exited(g.old_pidfd, HO_EXIT_WAIT_MS)) {
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
	fault_gate(FAULT_HO_SERVE_GATE, NULL, NULL);
	if (ret) {
		if (!ho_pidfd_exited(g.old_pidfd, 0))
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
		 (double)(t1 - t0) / 1e6, d->srv->nclients, g.b.nversions);
	return 0;
}
