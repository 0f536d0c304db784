/* SPDX-License-Identifier: MIT */
/*
 * The splice fill's byte moving (fill.c has the design): a worker's claim
 * from shard to pool through its pipe with splice(2), or with pread into
 * the pool's mapping once splice was refused (EINVAL and kin), the
 * WCD_TEST_FILL_FAIL injections on either side, and the failure's
 * sentence.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "load/fill_int.h"
#include "log.h"

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
void fill_pipe_close(struct worker *w)
{
	if (w->pipe[0] >= 0) {
		close(w->pipe[0]);
		close(w->pipe[1]);
	}
	w->pipe[0] = w->pipe[1] = -1;
}

int fill_move_range(struct worker *w, const struct claim *c, uint8_t *base,
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
		fill_pipe_close(w);
	}
	return move_pread(w, base, c->in, src, dst, len);
}

/* Fails the fill for claim c's move that answered ret, in one sentence
 * that names the shard, the offset, the tensor and the errno. */
void fill_fail_move(struct worker *w, const struct claim *c, int ret)
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

