/* SPDX-License-Identifier: MIT */
/*
 * The loader's helpers that both of its paths call (load.c's direct path,
 * staged.c's staged path): the first failure wins, progress lines, shard
 * names, the check after the fill that no shard changed. Kept apart so
 * that load.c calls staged.c and not the other way.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "load/hashpool.h"
#include "load/ld.h"
#include "clock.h"
#include "log.h"

#define PROGRESS_NS 500000000ull
#define RECHECK_CHUNK (1u << 20)  /* bytes of a header hashed per pread */

struct wait_fd {
	struct rx_poll poll;
	bool fired;
	int res;
	struct wcd *d;
	bool (*stopping)(void *arg);
	void *arg;
};

/* wcd_turn_until's test: cancels the poll when the daemon stops and the
 * caller agrees (once), and is done when the poll has completed. */
static bool wait_fd_done(void *arg)
{
	struct wait_fd *w = arg;

	if (!w->fired && wcd_stopping(w->d) && w->stopping(w->arg) &&
	    !w->poll.op.cancelled)
		rx_cancel(&w->poll.op);
	return w->fired;
}

static void wait_fd_polled(struct rx_poll *p, int res)
{
	struct wait_fd *w = container_of(p, struct wait_fd, poll);

	w->fired = true;
	w->res = res;
}

int ld_wait_readable(struct wcd *d, int fd, uint64_t ns,
		     bool (*stopping)(void *arg), void *arg, int *res)
{
	struct wait_fd w = { .fired = false };
	int ret;

	rx_op_deadline(&w.poll.op, ns);
	ret = rx_poll_start(&d->loop, &w.poll, fd, POLLIN, wait_fd_polled);
	if (ret)
		return ret;
	w.d = d;
	w.stopping = stopping;
	w.arg = arg;
	while (wcd_turn_until(d, wait_fd_done, &w) < 0)
		rx_cancel(&w.poll.op);
	*res = w.res;
	return 0;
}

void ld_fail(struct ld *L, int code, const char *fmt, ...)
{
	va_list ap;

	if (L->err)
		return;
	L->err = code > 0 ? -code : code;
	va_start(ap, fmt);
	vsnprintf(L->errbuf, sizeof(L->errbuf), fmt, ap);
	va_end(ap);
}

const char *ld_shard_name(struct ld *L, uint32_t shard)
{
	return L->v->model.shards[shard].path;
}

void ld_progress(struct ld *L)
{
	uint64_t now = rx_now_ns();
	uint64_t ns = now - L->start_ns;

	if (now - L->last_progress_ns < PROGRESS_NS)
		return;
	L->last_progress_ns = now;
	log_info("progress: %" PRIu64 "/%" PRIu64 " bytes, %.2f GB/s",
		 L->done_bytes, L->total,
		 ns ? (double)L->done_bytes / (double)ns : 0.0);
}

/* --- after the fill: did a shard change while it was read? ---------------- */

static int64_t ts_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* "SECONDS.NANOSECONDS" of a time in ns since the epoch, into b (as
 * `stat -c %.9Y` prints it; before 1970 the seconds are the floor). */
static const char *ts_text(int64_t ns, char b[32])
{
	int64_t sec = ns / 1000000000, sub = ns % 1000000000;

	if (sub < 0) {
		sub += 1000000000;
		sec--;
	}
	snprintf(b, 32, "%" PRId64 ".%09" PRId64, sec, sub);
	return b;
}

/* XXH3-128 of the first n bytes of fd, read again; 0 or -errno. */
static int hash_head(int fd, uint64_t n, uint8_t out[BASE_HASH_LEN])
{
	struct base_hasher h;
	uint64_t done = 0;
	uint8_t *buf = malloc(RECHECK_CHUNK);

	if (!buf)
		return -ENOMEM;
	base_hasher_init(&h);
	while (done < n) {
		size_t want = n - done < RECHECK_CHUNK ? (size_t)(n - done) :
							 RECHECK_CHUNK;
		ssize_t r = pread(fd, buf, want, (off_t)done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(buf);
			return r < 0 ? -errno : -EIO;
		}
		base_hasher_update(&h, buf, (size_t)r);
		done += (uint64_t)r;
	}
	free(buf);
	base_hasher_final(&h, out);
	return 0;
}

/* What changed in the file open as fd since sh was read (into what, ""
 * when nothing did): another file than the one parsed, its size, its
 * modification time, its header bytes, its status-change time, in that
 * order, the most telling first (a write changes both times; a writer
 * that puts the old mtime back, as rsync --inplace does, still changes
 * the ctime). Reading a file changes none of these (only its atime).
 * With only_which, just whether fd is that file (an O_DIRECT descriptor:
 * its reads would need aligned buffers; the buffered one of the same
 * file is checked in full). */
static int fd_changed(int fd, const struct model_shard *sh, bool only_which,
		      char *what, size_t len)
{
	uint8_t hash[BASE_HASH_LEN];
	char a[32], b[32];
	struct stat sb;
	int ret;

	if (fstat(fd, &sb))
		return -errno;
	if ((uint64_t)sb.st_ino != sh->stamp.ino || (uint64_t)sb.st_dev != sh->stamp.dev)
		snprintf(what, len, "the file read is inode %" PRIu64 " on device %" PRIu64 ", not inode %" PRIu64 " on device %" PRIu64 " whose header was read (it was replaced in between)",
			 (uint64_t)sb.st_ino, (uint64_t)sb.st_dev, sh->stamp.ino,
			 sh->stamp.dev);
	else if (only_which)
		return 0;
	else if ((uint64_t)sb.st_size != sh->stamp.size)
		snprintf(what, len, "it is %" PRIu64 " bytes now, was %" PRIu64 " when its header was read",
			 (uint64_t)sb.st_size, sh->stamp.size);
	else if (ts_ns(&sb.st_mtim) != sh->stamp.mtime_ns)
		snprintf(what, len, "its modification time is %s now, was %s when its header was read",
			 ts_text(ts_ns(&sb.st_mtim), a),
			 ts_text(sh->stamp.mtime_ns, b));
	else if ((ret = hash_head(fd, sh->st.data_off, hash)))
		return ret;
	else if (memcmp(hash, sh->st.header_hash, BASE_HASH_LEN))
		snprintf(what, len, "its first %" PRIu64 " bytes (the header) differ from those parsed",
			 sh->st.data_off);
	else if (ts_ns(&sb.st_ctim) != sh->stamp.ctime_ns)
		snprintf(what, len, "its status-change time (ctime) is %s now, was %s when its header was read",
			 ts_text(ts_ns(&sb.st_ctim), a),
			 ts_text(sh->stamp.ctime_ns, b));
	return 0;
}

/* Shard i against its record from the header read: the path must still
 * name that file, and the descriptors read (buffered, O_DIRECT) must be
 * it, unchanged. false after ld_fail when anything differs. */
static bool shard_unchanged(struct ld *L, uint32_t i)
{
	const struct model_shard *sh = &L->v->model.shards[i];
	char what[384] = "";
	struct stat sb;
	int ret = 0;

	if (stat(sh->path, &sb))
		snprintf(what, sizeof(what), "the path no longer names a file (%s)",
			 strerror(errno));
	else if ((uint64_t)sb.st_ino != sh->stamp.ino ||
		 (uint64_t)sb.st_dev != sh->stamp.dev)
		snprintf(what, sizeof(what), "the path now names another file (inode %" PRIu64 " on device %" PRIu64 ", was inode %" PRIu64 " on device %" PRIu64 " when its header was read): it was renamed over or replaced",
			 (uint64_t)sb.st_ino, (uint64_t)sb.st_dev, sh->stamp.ino,
			 sh->stamp.dev);
	else
		ret = fd_changed(L->fd[i], sh, false, what, sizeof(what));
	if (!ret && !what[0] && L->dfd[i] >= 0)
		ret = fd_changed(L->dfd[i], sh, true, what, sizeof(what));
	if (ret) {
		ld_fail(L, ret, "%s: cannot check after the load that it did not change: %s; nothing of this load is served: check the file system and load again",
			sh->path, strerror(-ret));
		return false;
	}
	if (what[0]) {
		ld_fail(L, EIO, "%s changed while it was loaded: %s; nothing of this load is served: wait for the writer to finish and load again",
			sh->path, what);
		return false;
	}
	return true;
}

void ld_check_shards(struct ld *L)
{
	for (uint32_t i = 0; !L->err && i < L->v->model.nshards; i++)
		if (!shard_unchanged(L, i))
			break;
}

/* --- after the fill: the hashes it left, the phases' lines ---------------- */

double ld_gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;   /* bytes/ns = GB/s */
}

void ld_alias_hashes(struct wcd_version *v)
{
	for (uint32_t i = 0; i < v->plan.ntensors; i++)
		if (v->plan.t[i].flags & PLAN_T_ALIAS)
			memcpy(v->hash[i], v->hash[v->plan.t[i].target],
			       BASE_HASH_LEN);
}

void ld_fill_over(struct ld *L)
{
	L->read_ns = rx_now_ns() - L->start_ns;
	if (!L->err && wcd_stopping(L->d))
		ld_fail(L, ECANCELED, "stopped by a signal while loading");
}

struct hash_part {
	struct rx_work work;
	struct ld *L;
	unsigned k, n;
	bool due;                 /* queued: its after is still to come */
	bool cancelled;           /* never ran: its share is still to do */
};

/* Hashes entries k, k + n, k + 2n, ... in their pools. */
static void hash_part_run(struct hash_part *hp)
{
	struct ld *L = hp->L;
	struct wcd_version *v = L->v;

	for (uint32_t i = hp->k; i < v->plan.ntensors; i += hp->n) {
		const struct plan_tensor *t = &v->plan.t[i];
		const uint8_t *p = v->pools[t->pool].host_ptr;

		if (L->hashed && (L->hashed[i] ||
				  ((t->flags & PLAN_T_ALIAS) &&
				   L->hashed[t->target])))
			continue;       /* the splice fill's workers did it
					 * (an alias has its target's:
					 * ld_alias_hashes) */
		base_hash128(p + t->pool_off, t->size, v->hash[i]);
	}
}

static void hash_part_work(struct rx_work *w)
{
	hash_part_run(container_of(w, struct hash_part, work));
}

static void hash_part_after(struct rx_work *w, int status)
{
	struct hash_part *hp = container_of(w, struct hash_part, work);

	hp->cancelled = status == -ECANCELED;
	hp->due = false;
}

struct hash_phase {
	struct hash_part part[HASHPOOL_MAX];
	unsigned n;
};

/* wcd_turn_until's test: every queued share's after has run. */
static bool hash_phase_done(void *arg)
{
	struct hash_phase *ph = arg;

	for (unsigned k = 1; k < ph->n; k++)
		if (ph->part[k].due)
			return false;
	return true;
}

void ld_hash_rest(struct ld *L)
{
	struct hash_phase ph = { .n = L->d->o.hash_threads };
	uint64_t t0 = rx_now_ns();
	int ret;

	WC_ASSERT(!rx_loop_in_callback(&L->d->loop));
	if (ph.n < 1)
		ph.n = 1;
	if (ph.n > L->v->plan.ntensors)
		ph.n = L->v->plan.ntensors ? L->v->plan.ntensors : 1;
	for (unsigned k = 0; k < ph.n; k++)
		ph.part[k] = (struct hash_part){ .L = L, .k = k, .n = ph.n };
	for (unsigned k = 1; k < ph.n; k++) {
		/* a share that cannot be queued is hashed here */
		ret = rx_queue_work(&L->d->work, &ph.part[k].work,
				    hash_part_work, hash_part_after);
		ph.part[k].due = !ret;
		ph.part[k].cancelled = ret != 0;
	}
	hash_part_run(&ph.part[0]);
	/* the shares live on this stack: wait for every after, as
	 * ld_wait_readable waits for its poll, whatever the loop says */
	while ((ret = wcd_turn_until(L->d, hash_phase_done, &ph)) < 0)
		ld_fail(L, ret, "the event loop failed: %s", strerror(-ret));
	for (unsigned k = 1; k < ph.n; k++)
		if (ph.part[k].cancelled)
			hash_part_run(&ph.part[k]);
	L->hash_ns += rx_now_ns() - t0;
}

void ld_log_read(struct ld *L, uint64_t read_ns, const char *what)
{
	log_info("phase read: %.3f s, %.2f GB/s (%" PRIu64 " bytes read for %" PRIu64 ", %s, %u of %u shards O_DIRECT)",
		 clock_ns_secs(read_ns), ld_gbps(L->read_bytes, read_ns),
		 L->read_bytes, L->total, what, L->ndirect,
		 L->v->model.nshards);
}
