/* SPDX-License-Identifier: MIT */
/*
 * The direct path's splice fill (the host backend's default: --direct-fill
 * splice): workers (jobs of the daemon's worker pool, d->work) move every
 * piece from its shard into its pool's memfd with splice(2), shard ->
 * pipe -> memfd at explicit offsets, and a tensor is hashed by the worker
 * that landed its last byte, while the other workers go on moving bytes.
 *
 * Why not read(2) into the pool's mapping (--direct-fill read, dread.c):
 * there every 4 KiB page of the memfd is faulted in inside the copy, and
 * the fault zeroes the page before the copy overwrites it; on the 2-core
 * box clear_page was the largest single cost of a cold load (bench/
 * RESULTS.md, issue 17). splice writes through shmem's write path, which
 * does not zero a page it fills whole, and the bytes go page cache ->
 * memfd in one kernel copy, never through user space. Hashing after the
 * last read (the read fill's hash phase) is the other serial part: here a
 * view (fused qkv_proj, gate_up_proj: its bytes are its group's) is
 * hashed by the worker that landed the last member of its group, and only
 * aliases, and views of groups with a member without pieces of its own,
 * are left for the hash phase.
 *
 * Bounds: FILL_THREADS_MAX workers; one pipe each (FILL_PIPE bytes, or the
 * kernel's default where F_SETPIPE_SZ is refused); a worker claims at most
 * FILL_CHUNK bytes (or one row of a dim-1 split, whole) at a time; the
 * read-ahead (fill_ahead.c: one pool job, one pipe, one more description
 * of each shard) runs at most --read-ahead bytes past the claims. The
 * bytes move in fill_move.c.
 * Where splice is refused (a file system without splice, EINVAL), the
 * worker and every later claim pread into the mapping instead (one log
 * line); any other failure (EIO from the shard, ENOMEM or ENOSPC from the
 * memfd, a splice that moves nothing) fails the load with a sentence that
 * names the shard, the offset, the tensor and the errno, and the workers
 * stop at their next claim. Where the read-ahead's reader cannot
 * work, it falls back to POSIX_FADV_WILLNEED for the rest of the fill
 * (one log line). The loop thread only polls meanwhile: clients are served
 * and progress is logged every half second.
 *
 * Test hooks (env, read once per fill):
 *   WCD_TEST_NO_SPLICE=1      splice is refused (EINVAL): pread takes over.
 *   WCD_TEST_FILL_FAIL=P:E    the move of piece P (the plan's index) fails
 *                             with errno E (a number; 0: the destination
 *                             takes no bytes, or pread finds none): on the
 *                             memfd side of splice, after the shard side
 *                             moved bytes, else in pread; P:E:shard fails
 *                             splice's shard side instead.
 *                             WCD_TEST_FILL_FAIL_DIR=DIR limits it to loads
 *                             of model directory DIR (an update's).
 *   WCD_TEST_RA_FAIL=open     the read-ahead reader cannot be set up;
 *                    thread   its job cannot be queued (as if
 *                             rx_queue_work failed);
 *                    drain    its splice into /dev/null fails (EIO) after
 *                             the shard side filled the pipe (the workers
 *                             wait for that first chunk, so that it comes
 *                             however fast the fill is).
 *   WCD_TEST_FILL_THREADS=K   worker jobs from the K-th on cannot be
 *                             queued (as if rx_queue_work failed); 0: the
 *                             loop thread fills alone.
 *   WCD_TEST_FILL_POLL_FAIL=1 the loop cannot watch the workers' eventfd
 *                             (rx_poll_start answers -EBUSY).
 *   WCD_TEST_FILL_EVENTFD_FAIL=1  there is no eventfd (EMFILE): the loop
 *                             waits for the workers, as with POLL_FAIL.
 *   WCD_TEST_FILL_PIPE_FAIL=K worker K's pipe cannot be made (EMFILE): it
 *                             preads its claims.
 *   WCD_TEST_STALL_AT=fill    see fill_test_stall.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "load/fill.h"
#include "load/fill_int.h"
#include "clock.h"
#include "log.h"
#include "daemon/fault.h"

#define FILL_POLL_NS 500000000ull

/* The next claim, or false when no work is left (or a stop was asked). */
static bool fill_claim(struct fill *f, struct claim *c)
{
	struct ld *L = f->L;
	const struct plan *p = &L->v->plan;
	bool ok = false;

	if (__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&f->failed, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&f->mu);
	while (f->ti < p->npieces && f->tpos >= p->pc[f->ti].size) {
		f->ti++;
		f->tpos = 0;
	}
	if (f->ti < p->npieces) {
		const struct plan_piece *pc = &p->pc[f->ti];
		const struct plan_tensor *e = &p->t[pc->entry];
		uint64_t len;

		c->inject = f->fail_piece == (int64_t)f->ti && !f->tpos;
		c->entry = pc->entry;
		c->in = L->fd[pc->shard];
		c->shard = pc->shard;
		c->out = L->v->pools[e->pool].fd;
		c->dst = e->pool_off + pc->dst + f->tpos;
		if (pc->height <= 1 || pc->src_pitch == pc->width) {
			len = pc->size - f->tpos;
			if (len > FILL_CHUNK)
				len = FILL_CHUNK;
			c->src = pc->file_off + f->tpos;
			c->width = len;
			c->nrows = 1;
			c->src_pitch = len;
		} else {          /* whole rows of a dim-1 split */
			uint64_t row = f->tpos / pc->width;
			uint64_t rows = FILL_CHUNK / pc->width;

			if (rows < 1)
				rows = 1;
			if (rows > pc->height - row)
				rows = pc->height - row;
			c->src = pc->file_off + row * pc->src_pitch;
			c->width = pc->width;
			c->nrows = rows;
			c->src_pitch = pc->src_pitch;
			len = rows * pc->width;
		}
		f->tpos += len;
		f->claimed += len;
		if (f->ahead)
			pthread_cond_signal(&f->cv);
		ok = true;
	}
	pthread_mutex_unlock(&f->mu);
	return ok;
}

static void hash_entry(struct fill *f, uint32_t i)
{
	struct wcd_version *v = f->L->v;
	const struct plan_tensor *t = &v->plan.t[i];
	const uint8_t *p = v->pools[t->pool].host_ptr;
	uint64_t t0 = rx_now_ns();

	base_hash128(p + t->pool_off, t->size, v->hash[i]);
	f->L->hashed[i] = 1;
	__atomic_add_fetch(&f->hash_ns, rx_now_ns() - t0, __ATOMIC_RELAXED);
}

/* Entry i has landed whole: its hash, and its group's views' once the
 * group's last member has landed. */
static void entry_landed(struct fill *f, uint32_t i)
{
	const struct plan_tensor *t = &f->L->v->plan.t[i];

	if (!(t->flags & PLAN_T_ALIAS))
		hash_entry(f, i);
	if (t->group < 0 || f->gview[t->group] < 0 ||
	    __atomic_sub_fetch(&f->gleft[t->group], 1, __ATOMIC_ACQ_REL))
		return;
	for (int32_t v = f->gview[t->group]; v >= 0; v = f->vnext[v])
		hash_entry(f, (uint32_t)v);
}

/* The views whose groups can be followed: every member has pieces (is
 * no view itself), so that the group is whole once its members are. */
static void fill_groups(struct fill *f)
{
	const struct plan *p = &f->L->v->plan;

	for (uint32_t g = 0; g < p->ngroups; g++) {
		f->gview[g] = -1;
		f->gleft[g] = p->g[g].n;
		for (uint32_t k = 0; k < p->g[g].n; k++) {
			const struct plan_tensor *m =
				&p->t[p->members[p->g[g].member0 + k]];

			if (!m->npieces || (m->flags & PLAN_T_VIEW))
				f->gleft[g] = 0;
		}
	}
	for (uint32_t i = p->ntensors; i-- > 0;) {
		const struct plan_tensor *t = &p->t[i];
		int32_t g;

		f->vnext[i] = -1;
		if ((t->flags & (PLAN_T_VIEW | PLAN_T_ALIAS)) != PLAN_T_VIEW ||
		    !t->size)
			continue;
		g = p->t[t->target].group;
		if (g < 0 || !f->gleft[g])
			continue;
		f->vnext[i] = f->gview[g];
		f->gview[g] = (int32_t)i;
	}
}

/* Test hook (test/wcd/wcd_load_stop.sh): with WCD_TEST_STALL_AT=fill, the
 * first worker writes one byte to the FIFO WCD_TEST_STALL_FIFO (whoever
 * reads it knows that the fill has begun), and every worker waits before
 * its first claim until the loop asks them to stop: a load that is still
 * running when SIGTERM comes, whatever the machine's speed. */
static void fill_test_stall(struct worker *w)
{
	const char *fifo = fault_str(FAULT_STALL_FIFO);
	const char *at = fault_str(FAULT_STALL_AT);
	struct timespec ms = { .tv_nsec = 1000000 };
	int fd;

	if (!fifo || !at || strcmp(at, "fill"))
		return;
	if (w->k == 0) {
		fd = open(fifo, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, "f", 1) < 0)
				fd = -fd;
			close(fd < 0 ? -fd : fd);
		}
	}
	while (!__atomic_load_n(&w->f->stop, __ATOMIC_ACQUIRE))
		nanosleep(&ms, NULL);
}

/* A worker is done (or its job never ran): the last one wakes the loop,
 * through the eventfd and done_cv (fill_join). */
static void worker_gone(struct fill *f)
{
	uint64_t one = 1;

	pthread_mutex_lock(&f->mu);
	if (!__atomic_sub_fetch(&f->running, 1, __ATOMIC_ACQ_REL)) {
		pthread_cond_broadcast(&f->done_cv);
		if (f->efd >= 0 && write(f->efd, &one, sizeof(one)) < 0)
			ld_fail(f->L, EIO, "cannot wake the loop after the fill: %s",
				strerror(errno));
	}
	pthread_mutex_unlock(&f->mu);
}

/* One worker: claims and moves pieces until none is left; on a pool
 * thread, or on the loop's where no job could be queued. */
static void fill_worker(struct worker *w)
{
	struct fill *f = w->f;
	struct ld *L = f->L;
	struct claim c;
	int sz;

	w->pipe_size = 65536;
	if ((int)w->k == f->pipe_fail ? (errno = EMFILE, -1) :
	    pipe2(w->pipe, O_CLOEXEC)) {
		log_info("fill: worker %u has no pipe (%s): it reads its pieces with pread",
			 w->k, strerror(errno));
		w->pipe[0] = w->pipe[1] = -1;
		w->use_pread = true;
	} else {
		sz = fcntl(w->pipe[1], F_SETPIPE_SZ, FILL_PIPE);
		if (sz > 0)
			w->pipe_size = (uint64_t)sz;
	}
	fill_test_stall(w);
	while (!__atomic_load_n(&f->ra_gate, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE))
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	while (fill_claim(f, &c)) {
		const struct plan_tensor *e = &L->v->plan.t[c.entry];
		uint8_t *base = L->v->pools[e->pool].host_ptr;
		uint64_t len = c.width * c.nrows;
		int ret = 0;

		w->inject = c.inject;
		for (uint64_t r = 0; !ret && r < c.nrows; r++)
			ret = fill_move_range(w, &c, base, c.src + r * c.src_pitch,
					 c.dst + r * c.width, c.width);
		if (ret) {
			fill_fail_move(w, &c, ret);
			break;
		}
		__atomic_add_fetch(&f->done, len, __ATOMIC_RELAXED);
		if (!__atomic_sub_fetch(&f->left[c.entry], len, __ATOMIC_ACQ_REL) &&
		    L->v->hashed)
			entry_landed(f, c.entry);
	}
	fill_pipe_close(w);
	worker_gone(f);
}

static void fill_work(struct rx_work *rw)
{
	fill_worker(container_of(rw, struct worker, work));
}

/* On the loop: a worker's job has ended, or was cancelled before it ran
 * (the pool closing), which counts as a worker gone. */
static void fill_after(struct rx_work *rw, int status)
{
	struct worker *w = container_of(rw, struct worker, work);

	if (status == -ECANCELED)
		worker_gone(w->f);
	w->f->due--;
}

/* While the daemon stops: the workers are asked to stop, and the wait
 * goes on until they have (the eventfd fires). */
static bool fill_stopping(void *arg)
{
	struct fill *f = arg;

	__atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
	return false;
}

/* Turns the loop until every worker is done: polls the eventfd with a
 * deadline, logging progress at each, and asks the workers to stop once
 * the daemon is stopping. Where the eventfd cannot be watched (or there
 * is none) it returns at once, and the workers go on. */
static void fill_wait(struct fill *f)
{
	struct ld *L = f->L;
	int ret, res;

	for (;;) {
		ret = f->nowatch[0] ? -EBADF : f->poll_fail ? -EBUSY :
		      ld_wait_readable(L->d, f->efd, FILL_POLL_NS,
				       fill_stopping, f, &res);
		if (ret) {
			/* cannot watch: fill_join waits for the
			 * workers (asking them to stop here would leave the
			 * rest of the pools unfilled) */
			log_warn("fill: cannot watch its workers from the event loop (%s): waiting for them, serving no client until the fill is done",
				 f->nowatch[0] ? f->nowatch : strerror(-ret));
			return;
		}
		if (res > 0 ||
		    !__atomic_load_n(&f->running, __ATOMIC_ACQUIRE))
			return;
		L->done_bytes = __atomic_load_n(&f->done, __ATOMIC_RELAXED);
		ld_progress(L);
		if (wcd_stopping(L->d))
			__atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
	}
}

static unsigned fill_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 2)
		return 2;       /* one splices while the other hashes */
	return n > FILL_THREADS_MAX ? FILL_THREADS_MAX : (unsigned)n;
}

/* The test hooks WCD_TEST_FILL_FAIL(_DIR), WCD_TEST_FILL_THREADS and
 * WCD_TEST_RA_FAIL (see the top of this file), read once per fill. */
static void fill_test_hooks(struct fill *f)
{
	const char *ff = fault_str(FAULT_FILL_FAIL);
	const char *dir = fault_str(FAULT_FILL_FAIL_DIR);
	const char *ra = fault_str(FAULT_RA_FAIL);
	const char *th = fault_str(FAULT_FILL_THREADS);
	bool pf = fault_on(FAULT_FILL_POLL_FAIL);
	bool ef = fault_on(FAULT_FILL_EVENTFD_FAIL);
	char *end;

	f->fail_piece = -1;
	if (ff && *ff && (!dir || !strcmp(dir, f->L->v->model.path))) {
		f->fail_piece = (int64_t)strtoul(ff, &end, 10);
		f->fail_errno = EIO;
		if (*end == ':')
			f->fail_errno = (int)strtol(end + 1, &end, 10);
		f->fail_shard = !strcmp(end, ":shard");
	}
	f->poll_fail = pf;
	f->efd_fail = ef;
	f->pipe_fail = (int)fault_num(FAULT_FILL_PIPE_FAIL, -1);
	f->threads_max = f->n;
	if (th && *th && strtoul(th, NULL, 10) < f->n)
		f->threads_max = (unsigned)strtoul(th, NULL, 10);
	if (ra && !strcmp(ra, "open"))
		f->ra_fail = RA_FAIL_OPEN;
	else if (ra && !strcmp(ra, "drain"))
		f->ra_fail = RA_FAIL_DRAIN;
	else if (ra && !strcmp(ra, "thread"))
		f->ra_fail = RA_FAIL_THREAD;
}

/* The fill's tables (bytes left per entry, the groups' views), its test
 * hooks, blocking shard descriptors and its eventfd. 0 or -errno (err
 * set). */
static int fill_init(struct fill *f, char *err)
{
	struct ld *L = f->L;
	const struct plan *p = &L->v->plan;

	f->left = calloc(p->ntensors ? p->ntensors : 1, sizeof(*f->left));
	f->vnext = calloc(p->ntensors ? p->ntensors : 1, sizeof(*f->vnext));
	f->gleft = calloc(p->ngroups ? p->ngroups : 1, sizeof(*f->gleft));
	f->gview = calloc(p->ngroups ? p->ngroups : 1, sizeof(*f->gview));
	if (!f->left || !f->vnext || !f->gleft || !f->gview)
		return base_errf(err, ENOMEM, "out of memory");
	fill_groups(f);
	fill_test_hooks(f);
	/* open_shards opened them O_NONBLOCK against a FIFO put in a shard's
	 * place and then checked that each is a regular file: blocking reads
	 * are what the workers want (a file system that honours O_NONBLOCK on
	 * a regular file would answer EAGAIN) */
	for (uint32_t i = 0; i < L->v->model.nshards; i++) {
		int fl = fcntl(L->fd[i], F_GETFL);

		if (fl >= 0 && (fl & O_NONBLOCK))
			fcntl(L->fd[i], F_SETFL, fl & ~O_NONBLOCK);
	}
	for (uint32_t i = 0; i < p->npieces; i++)
		f->left[p->pc[i].entry] += p->pc[i].size;
	/* without an eventfd the loop cannot be woken by the workers: it
	 * waits for them (as where it cannot watch one), the load goes on */
	if (f->efd_fail) {
		errno = EMFILE;
	} else {
		f->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	}
	if (f->efd < 0)
		snprintf(f->nowatch, sizeof(f->nowatch), "no eventfd: %s",
			 strerror(errno));
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	pthread_cond_init(&f->done_cv, NULL);
	f->running = f->n;
	f->ahead = L->d->o.read_ahead;
	f->ra_gate = !f->ahead || f->ra_fail != RA_FAIL_DRAIN;
	return 0;
}

/* Queues the n workers' jobs on the worker pool (WCD_TEST_FILL_THREADS=K:
 * from the K-th on they cannot be queued); where not one could be, one
 * worker's share runs on this thread, serving no client meanwhile. */
static void fill_spawn(struct fill *f, struct worker *w)
{
	unsigned queued = 0;
	int ret = 0;

	for (; queued < f->n; queued++) {
		w[queued] = (struct worker){ .f = f, .k = queued,
					     .pipe = { -1, -1 } };
		ret = queued >= f->threads_max ? -EAGAIN :
		      rx_queue_work(&f->L->d->work, &w[queued].work,
				    fill_work, fill_after);
		if (ret)
			break;
		f->due++;
	}
	if (queued < f->n)
		log_info("fill: %u of %u worker jobs queued on the worker pool (%s)%s",
			 queued, f->n, strerror(-ret),
			 queued ? "" : ": the loop thread fills alone, serving no client meanwhile");
	if (queued < f->n && !__atomic_sub_fetch(&f->running, f->n - queued,
						__ATOMIC_ACQ_REL)) {
		/* no job at all: one worker's share on this thread */
		f->running = 1;
		w[0] = (struct worker){ .f = f, .pipe = { -1, -1 } };
		fill_worker(&w[0]);
	} else {
		fill_wait(f);
	}
}

/* wcd_turn_until's test: every job's after has run. */
static bool fill_jobs_done(void *arg)
{
	return ((struct fill *)arg)->due == 0;
}

/* Waits for the workers to be done (done_cv: at once after fill_wait saw
 * the eventfd; the whole fill where the loop cannot watch it, blocking
 * the loop as a join would), ends the read-ahead, then turns the loop
 * until every job's after has run: f and the workers live on fill_run's
 * stack. */
static void fill_join(struct fill *f)
{
	int ret;

	pthread_mutex_lock(&f->mu);
	while (__atomic_load_n(&f->running, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&f->done_cv, &f->mu);
	pthread_mutex_unlock(&f->mu);
	fill_ahead_end(f);
	while ((ret = wcd_turn_until(f->L->d, fill_jobs_done, f)) < 0)
		ld_fail(f->L, ret, "the event loop failed: %s", strerror(-ret));
}

/* Moves every piece into its pool and hashes (into v->hash, marking
 * L->hashed) each entry with pieces once it has landed; failures go to
 * ld_fail. *refused: splice was refused and pread took over. 0, or -errno
 * with err set when the fill could not start. Outside every callback. */
static int fill_run(struct ld *L, bool *refused, char *err)
{
	struct worker w[FILL_THREADS_MAX];
	bool ns = fault_on(FAULT_NO_SPLICE);
	struct fill f = {
		.L = L, .efd = -1, .n = fill_threads(),
		.no_splice = ns,
	};
	int ret;

	WC_ASSERT(!rx_loop_in_callback(&L->d->loop));
	ret = fill_init(&f, err);
	if (ret)
		goto out_free;
	fill_ahead_start(&f);
	fill_spawn(&f, w);
	fill_join(&f);
	/* every byte landed, or the load fails: a fill that stopped early
	 * for any other reason than a failure or a stopping daemon would
	 * publish pools with holes */
	if (!__atomic_load_n(&f.failed, __ATOMIC_ACQUIRE) && !L->err &&
	    !wcd_stopping(L->d) && f.done != L->total)
		ld_fail(L, EIO,
			"the fill stopped with %" PRIu64 " of %" PRIu64 " bytes landed, and no worker said why",
			f.done, L->total);
	pthread_cond_destroy(&f.done_cv);
	pthread_cond_destroy(&f.cv);
	pthread_mutex_destroy(&f.mu);
	L->done_bytes = L->read_bytes = f.done;
	L->hash_ns += f.hash_ns;
	*refused = f.refused;
	if (f.efd >= 0)
		close(f.efd);
out_free:
	free(f.left);
	free(f.vnext);
	free(f.gleft);
	free(f.gview);
	return ret;
}

/* --- the splice path's ops --------------------------------------------- */

struct fill_st {              /* the splice path's state (L->priv) */
	bool refused;             /* splice was refused: pread took over */
	uint64_t fill_hash_ns;    /* hashing inside the workers */
};

static int fill_setup(struct ld *L, char *err)
{
	L->priv = calloc(1, sizeof(struct fill_st));
	L->hashed = calloc(L->v->plan.ntensors ? L->v->plan.ntensors : 1, 1);
	if (!L->priv || !L->hashed)
		return base_errf(err, ENOMEM, "out of memory");
	return 0;
}

/* The whole fill, the loop turning meanwhile: finished on return. */
static int fill_start(struct ld *L, char *err)
{
	struct fill_st *st = L->priv;
	int ret = fill_run(L, &st->refused, err);

	st->fill_hash_ns = L->hash_ns;
	L->finished = true;
	return ret;
}

/* The hash phase: what the workers could not hash as it landed. */
static void fill_finish(struct ld *L)
{
	struct fill_st *st = L->priv;

	if (L->v->hashed)
		ld_alias_hashes(L->v);
	ld_fill_over(L);
	if (!L->err && L->v->hashed)
		ld_hash_rest(L);
	L->hash_phase_ns = L->hash_ns - st->fill_hash_ns;
}

static void fill_teardown(struct ld *L)
{
	free(L->priv);
	L->priv = NULL;
	free(L->hashed);
	L->hashed = NULL;
}

static void fill_describe(struct ld *L, uint64_t read_ns)
{
	struct fill_st *st = L->priv;
	unsigned threads = L->d->o.hash_threads ? L->d->o.hash_threads : 1;

	ld_log_read(L, read_ns, st->refused ?
		    "direct into the pools, pread: splice refused" :
		    "direct into the pools, splice");
	log_info("phase copy: none (direct path: the reads landed in the pools)");
	if (L->v->hashed)
		log_info("phase hash: %.3f s after the fill on %u thread%s (the entries its workers could not hash as they landed), %.3f s of hashing overlapped with it (XXH3-128 per tensor on the fill's workers)",
			 clock_ns_secs(L->hash_phase_ns), threads,
			 threads == 1 ? "" : "s", clock_ns_secs(st->fill_hash_ns));
	else
		log_info("phase hash: skipped (--no-hash)");
}

const struct ld_path ld_fill_path = {
	.name = "splice",
	.setup = fill_setup,
	.start = fill_start,
	.finish = fill_finish,
	.teardown = fill_teardown,
	.describe = fill_describe,
};
