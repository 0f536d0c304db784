/* SPDX-License-Identifier: MIT */
/*
 * The direct path's splice fill (the host backend's default: --direct-fill
 * splice): worker threads move every piece from its shard into its pool's
 * memfd with splice(2), shard -> pipe -> memfd at explicit offsets, and a
 * tensor is hashed by the worker that landed its last byte, while the
 * other workers go on moving bytes.
 *
 * Why not read(2) into the pool's mapping (--direct-fill read, load.c):
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
 * read-ahead thread (one pipe, one more description of each shard) runs at
 * most --read-ahead bytes past the claims.
 * Where splice is refused (a file system without splice, EINVAL), the
 * worker and every later claim pread into the mapping instead (one log
 * line); any other failure (EIO from the shard, ENOMEM or ENOSPC from the
 * memfd, a splice that moves nothing) fails the load with a sentence that
 * names the shard, the offset, the tensor and the errno, and the workers
 * stop at their next claim. Where the read-ahead thread's reader cannot
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
 *                    thread   its thread cannot be made (pthread_create);
 *                    drain    its splice into /dev/null fails (EIO) after
 *                             the shard side filled the pipe (the workers
 *                             wait for that first chunk, so that it comes
 *                             however fast the fill is).
 *   WCD_TEST_FILL_THREADS=K   worker threads from the K-th on cannot be
 *                             made (as if pthread_create failed); 0: the
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
#include "log.h"
#include "daemon/fault.h"

#define FILL_THREADS_MAX 8
#define FILL_CHUNK (8u << 20)
#define FILL_PIPE (1u << 20)
#define FILL_POLL_NS 500000000ull

struct fill {
	struct ld *L;
	pthread_mutex_t mu;       /* the cursor and the first error */
	uint32_t ti;              /* next claim: piece ti at byte tpos */
	uint64_t tpos;
	uint64_t *left;           /* atomic, per entry: bytes still to land */
	uint32_t *gleft;          /* atomic, per group: members to land */
	int32_t *gview;           /* per group: its first view, or -1 */
	int32_t *vnext;           /* per entry: the group's next view, or -1 */
	int failed;               /* atomic: a worker failed */
	int stop;                 /* atomic: the loop asks them to stop */
	int refused;              /* atomic: splice was refused once */
	uint64_t done;            /* atomic: bytes landed */
	uint64_t hash_ns;         /* atomic: hashing inside the workers */
	unsigned running;         /* atomic: workers not yet done */
	int efd;                  /* written by the last worker */
	bool no_splice;           /* WCD_TEST_NO_SPLICE=1 */
	int64_t fail_piece;       /* WCD_TEST_FILL_FAIL: piece, or -1 */
	int fail_errno;           /* its errno (0: nothing moves) */
	bool fail_shard;          /* on splice's shard side */
	unsigned threads_max;     /* WCD_TEST_FILL_THREADS, else n */
	bool poll_fail;           /* WCD_TEST_FILL_POLL_FAIL=1 */
	bool efd_fail;            /* WCD_TEST_FILL_EVENTFD_FAIL=1 */
	int pipe_fail;            /* WCD_TEST_FILL_PIPE_FAIL: worker, or -1 */
	char nowatch[96];         /* why the loop cannot watch ("": it can) */
	int ra_fail;              /* WCD_TEST_RA_FAIL: RA_FAIL_* */
	int ra_gate;              /* atomic: with drain, the workers wait
				   * for the read-ahead's first chunk */
	unsigned n;
	pthread_t th[FILL_THREADS_MAX];
	/* read-ahead: posix_fadvise(WILLNEED) at most `ahead` bytes past
	 * the claims, on a thread of its own */
	uint64_t ahead;
	uint64_t claimed;         /* under mu: bytes claimed so far */
	pthread_cond_t cv;        /* claimed moved, or the fill is over */
	bool over;                /* under mu */
	pthread_t ra;
};

/* One claim: nrows rows of width bytes, the first at src in the shard,
 * each src_pitch after the previous one, landing contiguously at dst in
 * the pool. */
struct claim {
	uint32_t entry, shard;
	int in, out;
	uint64_t src, src_pitch, width, nrows, dst;
	bool inject;              /* WCD_TEST_FILL_FAIL: fail this one */
};

static void fill_fail(struct fill *f, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fill_fail(struct fill *f, int code, const char *fmt, ...)
{
	char msg[BASE_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&f->mu);
	ld_fail(f->L, code, "%s", msg);
	pthread_mutex_unlock(&f->mu);
	__atomic_store_n(&f->failed, 1, __ATOMIC_RELEASE);
}

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

struct worker {
	struct fill *f;
	unsigned k;               /* 0 .. n - 1 */
	int pipe[2];
	uint64_t pipe_size;
	bool use_pread;
	bool inject;              /* the claim's WCD_TEST_FILL_FAIL, unspent */
	/* the last failure: the shard's offset, and whether the pool's side
	 * (the memfd) failed or took nothing */
	uint64_t fail_off;
	bool fail_dst, fail_zero;
};

static bool splice_refused(int e)
{
	return e == EINVAL || e == ENOSYS || e == EOPNOTSUPP;
}

static const char *errno_name(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "unknown errno";
}

/* WCD_TEST_FILL_FAIL's answer, once, in place of a move of the claim that
 * has one (when is false: not this side): *k is -1 with errno, or 0 (no
 * bytes). */
static bool injected(struct worker *w, bool when, ssize_t *k)
{
	if (!w->inject || !when)
		return false;
	w->inject = false;
	errno = w->f->fail_errno;
	*k = errno ? -1 : 0;
	return true;
}

/* What a read from the shard at src came to (k bytes, -1 with errno): 1
 * to ask again (EINTR), 0 bytes came, or -errno / -ENODATA (the file ended
 * first), with w->fail_* saying where. */
static int file_side(struct worker *w, ssize_t k, uint64_t src)
{
	if (k < 0 && errno == EINTR)
		return 1;
	w->fail_off = src;
	w->fail_dst = false;
	if (k < 0)
		return -errno;
	return k ? 0 : -ENODATA;
}

/* The pool's side of a splice: the hook's answer, else splice's. */
static ssize_t splice_to_pool(struct worker *w, int out, loff_t *off,
			      size_t len)
{
	ssize_t k;

	if (injected(w, true, &k))
		return k;
	return splice(w->pipe[0], NULL, out, off, len, SPLICE_F_MOVE);
}

/* Moves len bytes from in at src to out at dst through the worker's
 * pipe. 0, -ENODATA where the file ends first, or -errno (w->fail_*
 * say where). */
static int move_splice(struct worker *w, int in, uint64_t src, int out,
		       uint64_t dst, uint64_t len)
{
	if (w->f->no_splice)
		return -EINVAL;
	while (len) {
		loff_t off_in = (loff_t)src, off_out = (loff_t)dst;
		size_t ask = len < w->pipe_size ? (size_t)len :
						  (size_t)w->pipe_size;
		ssize_t k;
		int r;

		if (!injected(w, w->f->fail_shard, &k))
			k = splice(in, &off_in, w->pipe[1], NULL, ask,
				   SPLICE_F_MOVE);
		r = file_side(w, k, src);
		if (r > 0)
			continue;
		if (r)
			return r;
		for (ssize_t m = 0; m < k;) {
			ssize_t o = splice_to_pool(w, out, &off_out,
						   (size_t)(k - m));

			if (o < 0 && errno == EINTR)
				continue;
			w->fail_off = src + (uint64_t)m;
			w->fail_dst = true;
			w->fail_zero = o == 0;
			if (o <= 0)
				return o < 0 ? -errno : -EIO;
			m += o;
		}
		src += (uint64_t)k;
		dst += (uint64_t)k;
		len -= (uint64_t)k;
	}
	return 0;
}

/* The fallback: pread straight into the pool's mapping. */
static int move_pread(struct worker *w, uint8_t *base, int in, uint64_t src,
		      uint64_t dst, uint64_t len)
{
	while (len) {
		ssize_t k;
		int r;

		if (!injected(w, true, &k))
			k = pread(in, base + dst, len, (off_t)src);
		r = file_side(w, k, src);
		if (r > 0)
			continue;
		if (r)
			return r;
		src += (uint64_t)k;
		dst += (uint64_t)k;
		len -= (uint64_t)k;
	}
	return 0;
}

/* A pipe's contents after a failed splice are of no use: start afresh. */
static void worker_pipe_close(struct worker *w)
{
	if (w->pipe[0] >= 0) {
		close(w->pipe[0]);
		close(w->pipe[1]);
	}
	w->pipe[0] = w->pipe[1] = -1;
}

static int move_range(struct worker *w, const struct claim *c, uint8_t *base,
		      uint64_t src, uint64_t dst, uint64_t len)
{
	struct fill *f = w->f;
	int ret;

	if (!w->use_pread && __atomic_load_n(&f->refused, __ATOMIC_ACQUIRE))
		w->use_pread = true;
	if (!w->use_pread) {
		ret = move_splice(w, c->in, src, c->out, dst, len);
		if (!ret || !splice_refused(-ret))
			return ret;
		/* nothing of a refused splice landed that pread won't redo */
		if (!__atomic_exchange_n(&f->refused, 1, __ATOMIC_ACQ_REL))
			log_info("splice into the pools was refused (%s): pread into their mappings instead",
				 strerror(-ret));
		w->use_pread = true;
		worker_pipe_close(w);
	}
	return move_pread(w, base, c->in, src, dst, len);
}

/* Fails the fill for claim c's move that answered ret, in one sentence
 * that names the shard, the offset, the tensor and the errno. */
static void fill_fail_move(struct worker *w, const struct claim *c, int ret)
{
	struct fill *f = w->f;
	struct ld *L = f->L;
	const char *shard = ld_shard_name(L, c->shard);
	const char *name = L->v->plan.t[c->entry].name;
	uint64_t len = c->width * c->nrows;
	const char *hint = ret == -ENOMEM || ret == -ENOSPC ?
		"; the host has no memory left for the pools: free some (or raise the memory cgroup's limit), then load again" :
		"";

	if (ret == -ENODATA)
		fill_fail(f, EIO,
			  "%s ended early: no bytes of %s at %" PRIu64 "..%" PRIu64 " (was the file truncated while loading?)",
			  shard, name, c->src,
			  c->src + (c->nrows - 1) * c->src_pitch + c->width);
	else if (w->fail_zero)
		fill_fail(f, EIO,
			  "writing %" PRIu64 " bytes of %s (%s at offset %" PRIu64 ") into its pool failed: the pool's memfd took no bytes (EIO)",
			  len, name, shard, w->fail_off);
	else if (w->fail_dst)
		fill_fail(f, ret,
			  "writing %" PRIu64 " bytes of %s (%s at offset %" PRIu64 ") into its pool failed: %s (%s)%s",
			  len, name, shard, w->fail_off, strerror(-ret),
			  errno_name(-ret), hint);
	else
		fill_fail(f, ret,
			  "reading %s at offset %" PRIu64 " (%s) failed: %s (%s)",
			  shard, w->fail_off, name, strerror(-ret),
			  errno_name(-ret));
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

static void *fill_worker(void *arg)
{
	struct worker *w = arg;
	struct fill *f = w->f;
	struct ld *L = f->L;
	struct claim c;
	uint64_t one = 1;
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
			ret = move_range(w, &c, base, c.src + r * c.src_pitch,
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
	worker_pipe_close(w);
	if (!__atomic_sub_fetch(&f->running, 1, __ATOMIC_ACQ_REL) &&
	    f->efd >= 0 && write(f->efd, &one, sizeof(one)) < 0)
		fill_fail(f, EIO, "cannot wake the loop after the fill: %s",
			  strerror(errno));
	return NULL;
}

/* The read-ahead thread's reader: its own open file description of each
 * shard (through /proc/self/fd, so the very file open_shards checked),
 * marked POSIX_FADV_SEQUENTIAL, read with splice into /dev/null (pages
 * move by reference: no copy). */
struct ra {
	int *fd;                  /* per shard, or -1 */
	uint32_t nfd;
	int pipe[2];
	int null;
	uint64_t pipe_size;
	bool fail_drain;          /* WCD_TEST_RA_FAIL=drain */
};

enum { RA_FAIL_NONE, RA_FAIL_OPEN, RA_FAIL_DRAIN, RA_FAIL_THREAD };

static void ra_close(struct ra *ra)
{
	for (uint32_t i = 0; ra->fd && i < ra->nfd; i++)
		if (ra->fd[i] >= 0)
			close(ra->fd[i]);
	free(ra->fd);
	ra->fd = NULL;
	if (ra->pipe[0] >= 0) {
		close(ra->pipe[0]);
		close(ra->pipe[1]);
	}
	ra->pipe[0] = ra->pipe[1] = -1;
	if (ra->null >= 0)
		close(ra->null);
	ra->null = -1;
}

/* 0, or -errno with *what naming the part that could not be had (the
 * caller closes ra either way). */
static int ra_open(struct ra *ra, struct ld *L, int fail, const char **what)
{
	uint32_t n = L->v->model.nshards;
	char path[64];
	int sz;

	*ra = (struct ra){ .pipe = { -1, -1 }, .null = -1,
			   .pipe_size = 65536,
			   .fail_drain = fail == RA_FAIL_DRAIN };
	*what = "its descriptor table";
	ra->fd = malloc((n ? n : 1) * sizeof(int));
	if (!ra->fd)
		return -ENOMEM;
	ra->nfd = n;
	for (uint32_t i = 0; i < n; i++)
		ra->fd[i] = -1;
	*what = "WCD_TEST_RA_FAIL=open";
	if (fail == RA_FAIL_OPEN)
		return -EMFILE;
	*what = "a pipe";
	if (pipe2(ra->pipe, O_CLOEXEC)) {
		ra->pipe[0] = ra->pipe[1] = -1;
		return -errno;
	}
	sz = fcntl(ra->pipe[1], F_SETPIPE_SZ, FILL_PIPE);
	if (sz > 0)
		ra->pipe_size = (uint64_t)sz;
	*what = "/dev/null";
	ra->null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (ra->null < 0)
		return -errno;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", L->fd[i]);
		*what = ld_shard_name(L, i);
		ra->fd[i] = open(path, O_RDONLY | O_CLOEXEC);
		if (ra->fd[i] < 0)
			return -errno;
		posix_fadvise(ra->fd[i], 0, 0, POSIX_FADV_SEQUENTIAL);
	}
	return 0;
}

/* Reads len bytes at off of shard i into the page cache: 0, or -errno
 * (-ENODATA where the file ends first; the caller falls back to
 * POSIX_FADV_WILLNEED, since the pipe may now hold bytes). */
static int ra_read(struct ra *ra, uint32_t i, uint64_t off, uint64_t len)
{
	while (len) {
		loff_t o = (loff_t)off;
		ssize_t k = splice(ra->fd[i], &o, ra->pipe[1], NULL,
				   len < ra->pipe_size ? (size_t)len :
							 (size_t)ra->pipe_size,
				   0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -ENODATA;
		for (ssize_t m = 0; m < k;) {
			ssize_t d;

			if (ra->fail_drain) {
				d = -1;
				errno = EIO;
			} else {
				d = splice(ra->pipe[0], NULL, ra->null, NULL,
					   (size_t)(k - m), 0);
			}
			if (d < 0 && errno == EINTR)
				continue;
			if (d <= 0)
				return d < 0 ? -errno : -EIO;
			m += d;
		}
		off += (uint64_t)k;
		len -= (uint64_t)k;
	}
	return 0;
}

/* The read-ahead thread: walks the pieces in claim order and reads each
 * contiguous one into the page cache (FILL_CHUNK at a time) while it is
 * less than f->ahead bytes past what the workers have claimed, so that
 * the disk always has reads queued however the workers' own reads land.
 * Why a reader of its own: two workers splicing neighbouring chunks
 * through one file description defeat the kernel's sequential read-ahead
 * (a queue depth of 3-5), and POSIX_FADV_WILLNEED alone queues requests of
 * about 1.3 MiB where one sequential reader's read-ahead asks for 2.5 MiB
 * (bench/RESULTS.md: about 12% faster cold on the 2-core box). Where the
 * reader cannot be set up, or one of its reads fails, it is closed and
 * POSIX_FADV_WILLNEED on the workers' descriptors does for the rest of the
 * fill (one log line: the load itself is the workers'). Rows of a dim-1
 * split are left to the kernel: their spans hold other ranks' bytes. */
static void *fill_ahead(void *arg)
{
	struct fill *f = arg;
	const struct plan *p = &f->L->v->plan;
	uint64_t pos = 0;           /* bytes of the pieces walked so far */
	const char *what;
	struct ra ra;
	int ret = ra_open(&ra, f->L, f->ra_fail, &what);
	bool reader = !ret;

	if (ret) {
		log_info("read-ahead: cannot set up its reader (%s: %s): POSIX_FADV_WILLNEED instead",
			 what, strerror(-ret));
		ra_close(&ra);
	}
	for (uint32_t i = 0; i < p->npieces; i++) {
		const struct plan_piece *pc = &p->pc[i];
		bool flat = pc->height <= 1 || pc->src_pitch == pc->width;

		for (uint64_t o = 0; o < pc->size; o += FILL_CHUNK) {
			uint64_t len = pc->size - o < FILL_CHUNK ?
				       pc->size - o : FILL_CHUNK;
			bool over;

			pthread_mutex_lock(&f->mu);
			while (!f->over && pos > f->claimed + f->ahead)
				pthread_cond_wait(&f->cv, &f->mu);
			over = f->over;
			pthread_mutex_unlock(&f->mu);
			if (over)
				goto out;
			pos += len;
			if (flat && reader) {
				ret = ra_read(&ra, pc->shard, pc->file_off + o,
					      len);
				if (ret) {
					log_info("read-ahead: reading %s at offset %" PRIu64 " failed (%s): POSIX_FADV_WILLNEED for the rest of the load",
						 ld_shard_name(f->L, pc->shard),
						 pc->file_off + o,
						 strerror(-ret));
					ra_close(&ra);
					reader = false;
				}
			}
			if (flat && !reader)
				posix_fadvise(f->L->fd[pc->shard],
					      (off_t)(pc->file_off + o),
					      (off_t)len, POSIX_FADV_WILLNEED);
			__atomic_store_n(&f->ra_gate, 1, __ATOMIC_RELEASE);
		}
	}
out:
	__atomic_store_n(&f->ra_gate, 1, __ATOMIC_RELEASE);
	ra_close(&ra);
	return NULL;
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
			/* cannot watch: the caller's join waits for the
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

int fill_run(struct ld *L, bool *refused, char *err)
{
	const struct plan *p = &L->v->plan;
	struct worker w[FILL_THREADS_MAX];
	bool ns = fault_on(FAULT_NO_SPLICE);
	struct fill f = {
		.L = L, .efd = -1, .n = fill_threads(),
		.no_splice = ns,
	};
	unsigned started = 0;
	int ret = 0;

	f.left = calloc(p->ntensors ? p->ntensors : 1, sizeof(*f.left));
	f.vnext = calloc(p->ntensors ? p->ntensors : 1, sizeof(*f.vnext));
	f.gleft = calloc(p->ngroups ? p->ngroups : 1, sizeof(*f.gleft));
	f.gview = calloc(p->ngroups ? p->ngroups : 1, sizeof(*f.gview));
	if (!f.left || !f.vnext || !f.gleft || !f.gview) {
		ret = base_errf(err, ENOMEM, "out of memory");
		goto out_free;
	}
	fill_groups(&f);
	fill_test_hooks(&f);
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
		f.left[p->pc[i].entry] += p->pc[i].size;
	/* without an eventfd the loop cannot be woken by the workers: it
	 * waits for them (as where it cannot watch one), the load goes on */
	if (f.efd_fail) {
		errno = EMFILE;
	} else {
		f.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	}
	if (f.efd < 0)
		snprintf(f.nowatch, sizeof(f.nowatch), "no eventfd: %s",
			 strerror(errno));
	pthread_mutex_init(&f.mu, NULL);
	f.running = f.n;
	pthread_cond_init(&f.cv, NULL);
	f.ahead = L->d->o.read_ahead;
	f.ra_gate = !f.ahead || f.ra_fail != RA_FAIL_DRAIN;
	if (f.ahead) {
		ret = f.ra_fail == RA_FAIL_THREAD ? EAGAIN :
		      pthread_create(&f.ra, NULL, fill_ahead, &f);
		if (ret) {
			/* no thread: the kernel's read-ahead only */
			log_info("read-ahead: no thread (%s): the kernel's read-ahead only",
				 strerror(ret));
			f.ahead = 0;
			f.ra_gate = 1;
		}
	}
	for (; started < f.n; started++) {
		w[started] = (struct worker){ .f = &f, .k = started,
					      .pipe = { -1, -1 } };
		if (started >= f.threads_max) {
			ret = EAGAIN;   /* WCD_TEST_FILL_THREADS */
			break;
		}
		ret = pthread_create(&f.th[started], NULL, fill_worker,
				     &w[started]);
		if (ret)
			break;
	}
	if (started < f.n)
		log_info("fill: %u of %u worker threads made (%s)%s", started,
			 f.n, strerror(ret),
			 started ? "" : ": the loop thread fills alone, serving no client meanwhile");
	ret = 0;
	if (started < f.n && !__atomic_sub_fetch(&f.running, f.n - started,
						 __ATOMIC_ACQ_REL)) {
		/* no thread at all: one worker's share on this thread */
		f.running = 1;
		w[0] = (struct worker){ .f = &f, .pipe = { -1, -1 } };
		fill_worker(&w[0]);
	} else {
		fill_wait(&f);
	}
	for (unsigned k = 0; k < started; k++)
		pthread_join(f.th[k], NULL);
	/* every byte landed, or the load fails: a fill that stopped early
	 * for any other reason than a failure or a stopping daemon would
	 * publish pools with holes */
	if (!__atomic_load_n(&f.failed, __ATOMIC_ACQUIRE) &&
	    !wcd_stopping(L->d) && f.done != L->total)
		ld_fail(L, EIO,
			"the fill stopped with %" PRIu64 " of %" PRIu64 " bytes landed, and no worker said why",
			f.done, L->total);
	if (f.ahead) {
		pthread_mutex_lock(&f.mu);
		f.over = true;
		pthread_cond_signal(&f.cv);
		pthread_mutex_unlock(&f.mu);
		pthread_join(f.ra, NULL);
	}
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
