/* SPDX-License-Identifier: MIT */
/*
 * The loader's staged path (the CUDA backend's; `--load-path staged` runs
 * it on the host backend too): io_uring reads into a ring of staging slots,
 * then be->copy_to_pool, with the slot hashed while the copy runs.
 *
 * A piece is a range of one tensor, or a group of whole rows of a dim-1
 * split (2-D copy), read as an aligned superset when the shard is read with
 * O_DIRECT. Pieces come from nlanes lanes in turn, each lane streaming one
 * tensor at a time, so that with hash workers every worker has a tensor of
 * its own (one XXH3 stream is sequential). Pieces are handed on in issue
 * order (seq): copy on stream seq % LD_COPY_STREAMS, hash on the lane's
 * worker (or inline on the loop thread without workers). The backend's done
 * callback and the worker post the slot back through rx_wakes; the slot is
 * refilled when both are done. Where the backend hashes on the device
 * (--hash-on, cuda), the hash is queued behind the copy on the lane's
 * device chain instead, reads the pool, and the slot is free once copied.
 *
 * Bounds: nslots <= WCD_SLOTS_MAX slots of slot_size bytes; every read is
 * at most slot_size; the unprocessed pieces (seq in [hash_seq, next_seq))
 * are fewer than nslots, so pending[seq % nslots] is unique.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "load/staged.h"
#include "load/staged_int.h"
#include "clock.h"
#include "log.h"

static const struct plan_tensor *tensor(struct ld *L, uint32_t i)
{
	return &L->v->plan.t[i];
}

static const struct plan_piece *piece(struct ld *L, uint32_t i)
{
	return &L->v->plan.pc[i];
}

static bool contiguous(const struct plan_piece *t)
{
	return t->height <= 1 || t->src_pitch == t->width;
}

/* Whether entry e is hashed as its bytes stream through the slots: one
 * piece that is the whole entry (and, hashing on the device, a place the
 * device hash can start at). Views, aliases and entries of several pieces
 * are hashed from the pools afterwards (post_hash). */
static bool ld_streamed(struct ld *L, uint32_t e)
{
	struct staged *S = L->priv;
	const struct plan_tensor *t = tensor(L, e);
	const struct plan_piece *pc;

	if ((t->flags & PLAN_T_VIEW) || t->npieces != 1)
		return false;
	pc = piece(L, t->piece0);
	if (pc->dst || pc->size != t->size)
		return false;
	return !S->dev_hash || t->size <= GPU_HASH_MIN_LEN ||
	       t->pool_off % 16 == 0;
}

/* Whether the device hashes entry e after the load (not streamed). */
static bool ld_dev_post(struct ld *L, uint32_t e)
{
	struct staged *S = L->priv;
	const struct plan_tensor *t = tensor(L, e);

	return S->dev_hash && !(t->flags & PLAN_T_ALIAS) &&
	       t->size > GPU_HASH_MIN_LEN && t->pool_off % 16 == 0;
}

/* Picks the next lane with a piece left (round robin), refilling lanes
 * from the plan; false when the plan is exhausted. */
static bool lane_pick(struct ld *L, unsigned *out)
{
	struct staged *S = L->priv;

	if (L->err || wcd_stopping(L->d))
		return false;
	for (unsigned k = 0; k < S->nlanes; k++) {
		unsigned i = (S->rr + k) % S->nlanes;
		struct lane *ln = &S->lanes[i];

		while (!ln->active || ln->tpos >= piece(L, ln->ti)->size) {
			if (S->next_ti >= L->v->plan.npieces) {
				ln->active = false;
				break;
			}
			ln->ti = S->next_ti++;
			ln->tpos = 0;
			ln->active = true;
		}
		if (ln->active) {
			*out = i;
			S->rr = (i + 1) % S->nlanes;
			return true;
		}
	}
	return false;
}

/* Fills s with the next piece of lane k. */
static void next_piece(struct ld *L, struct slot *s, unsigned k)
{
	struct staged *S = L->priv;
	struct lane *ln = &S->lanes[k];
	const struct plan_piece *t = piece(L, ln->ti);
	uint64_t A = L->dfd[t->shard] >= 0 ? LD_DIO_ALIGN : 1;
	uint64_t room = S->slot_size - 2 * A;
	uint64_t src, span;

	s->lane = k;
	s->ti = t->entry;
	s->stream = ld_streamed(L, t->entry);
	s->shard = t->shard;
	s->first = ln->tpos == 0;
	s->dst_off = tensor(L, t->entry)->pool_off + t->dst + ln->tpos;
	if (contiguous(t)) {
		s->width = t->size - ln->tpos;
		if (s->width > room)
			s->width = room;
		s->height = 1;
		s->src_pitch = s->width;
		src = t->file_off + ln->tpos;
		span = s->width;
	} else {
		uint64_t row = ln->tpos / t->width;
		uint64_t col = ln->tpos % t->width;

		src = t->file_off + row * t->src_pitch + col;
		if (col == 0 && t->width <= room) {
			/* whole rows: as many as fit in the slot */
			uint64_t n = (room - t->width) / t->src_pitch + 1;

			if (n > t->height - row)
				n = t->height - row;
			s->width = t->width;
			s->height = n;
			s->src_pitch = t->src_pitch;
			span = (n - 1) * t->src_pitch + t->width;
		} else {
			/* a row wider than a slot: part of one row */
			s->width = t->width - col;
			if (s->width > room)
				s->width = room;
			s->height = 1;
			s->src_pitch = s->width;
			span = s->width;
		}
	}
	ln->tpos += s->width * s->height;
	s->last = ln->tpos >= t->size;
	s->read_off = src / A * A;
	s->delta = src - s->read_off;
	s->need = s->delta + span;
	s->read_len = gpu_align_up(s->need, A);
	s->direct = A > 1;
}

static void issue(struct ld *L);
static void drain(struct ld *L);
static void start_read(struct ld *L, struct slot *s);

static void read_cb(struct rx_read *r, int res)
{
	struct slot *s = container_of(r, struct slot, r);
	struct ld *L = s->L;

	if (res == -EINVAL && s->direct) {
		/* O_DIRECT refused after all: this shard goes buffered. */
		log_info("O_DIRECT read of %s refused; reading it buffered",
			 ld_shard_name(L, s->shard));
		if (L->dfd[s->shard] >= 0)
			close(L->dfd[s->shard]);
		L->dfd[s->shard] = -1;
		start_read(L, s);
		return;
	}
	if (res < 0)
		ld_fail(L, res, "read of %s at offset %" PRIu64 " failed: %s",
			ld_shard_name(L, s->shard), s->read_off,
			strerror(-res));
	else if ((uint64_t)res < s->need)
		ld_fail(L, EIO,
			"%s ended early: read %d of %" PRIu64 " bytes at offset %" PRIu64 " (was the file truncated while loading?)",
			ld_shard_name(L, s->shard), res, s->need, s->read_off);
	else
		L->read_bytes += (uint64_t)res;
	slot_to(s, SLOT_READ);
	drain(L);
	issue(L);
}

/* One part of a buffered read is back; the last one hands the slot on. */
static void part_cb(struct rx_read *r, int res)
{
	struct part *pt = container_of(r, struct part, r);
	struct slot *s = pt->s;
	struct ld *L = s->L;

	if (res < 0 && !s->part_err)
		s->part_err = res;
	else if (res >= 0 && (uint64_t)res < pt->len && !s->part_err)
		s->part_err = -EIO;
	else if (res > 0)
		L->read_bytes += (uint64_t)res;
	WC_ASSERT(s->parts_left > 0);
	if (--s->parts_left)
		return;
	if (s->part_err == -EIO)
		ld_fail(L, EIO,
			"%s ended early: fewer than %" PRIu64 " bytes at offset %" PRIu64 " (was the file truncated while loading?)",
			ld_shard_name(L, s->shard), s->need, s->read_off);
	else if (s->part_err)
		ld_fail(L, -s->part_err, "read of %s at offset %" PRIu64 " failed: %s",
			ld_shard_name(L, s->shard), s->read_off,
			strerror(-s->part_err));
	slot_to(s, SLOT_READ);
	drain(L);
	issue(L);
}

/* A buffered read, through io-wq, of exactly the wanted span, in parts of
 * at most --read-part bytes (at most LD_PARTS_MAX parts). */
static void start_parts(struct ld *L, struct slot *s)
{
	struct staged *S = L->priv;
	uint64_t psize = L->d->o.read_part ? L->d->o.read_part : s->need;
	uint64_t off = 0;
	unsigned n;

	if (psize * LD_PARTS_MAX < s->need)
		psize = gpu_align_up((s->need + LD_PARTS_MAX - 1) / LD_PARTS_MAX, 4096);
	n = (unsigned)((s->need + psize - 1) / psize);
	s->parts_left = n;
	s->part_err = 0;
	for (unsigned i = 0; i < n; i++, off += psize) {
		struct part *pt = &s->part[i];
		int ret;

		pt->s = s;
		pt->len = s->need - off < psize ? s->need - off : psize;
		ret = rx_read_start(&L->d->loop, &pt->r, L->fd[s->shard],
				    s->buf + off, pt->len, s->read_off + off,
				    S->fixed ? s->idx : -1, RX_READ_ASYNC, part_cb);
		if (ret) {
			/* counted as a failed part; the others still land */
			if (!s->part_err)
				s->part_err = ret;
			if (--s->parts_left == 0) {
				ld_fail(L, -ret, "cannot start a read of %s: %s",
					ld_shard_name(L, s->shard), strerror(-ret));
				slot_to(s, SLOT_READ);
			}
		}
	}
}

static void start_read(struct ld *L, struct slot *s)
{
	struct staged *S = L->priv;
	int fd = s->direct ? L->dfd[s->shard] : -1;
	int ret;

	if (fd < 0) {
		s->direct = false;
		s->read_off += s->delta;
		s->need -= s->delta;
		s->delta = 0;
		s->read_len = s->need;
		start_parts(L, s);
		return;
	}
	ret = rx_read_start(&L->d->loop, &s->r, fd, s->buf, s->read_len,
			    s->read_off, S->fixed ? s->idx : -1,
			    RX_READ_DIRECT, read_cb);
	if (ret == -EINVAL) {
		close(L->dfd[s->shard]);
		L->dfd[s->shard] = -1;
		start_read(L, s);
		return;
	}
	if (ret) {
		/* Handed on as a completed (failed) read, so that the
		 * in-order drain gives the slot back. */
		ld_fail(L, ret, "cannot start a read of %s: %s",
			ld_shard_name(L, s->shard), strerror(-ret));
		slot_to(s, SLOT_READ);
	}
}

static void issue(struct ld *L)
{
	struct staged *S = L->priv;
	unsigned k;

	for (unsigned i = 0; i < S->nslots; i++) {
		struct slot *s = &S->slots[i];

		if (s->state != SLOT_FREE)
			continue;
		if (!lane_pick(L, &k))
			break;
		next_piece(L, s, k);
		/* fewer than nslots pieces unprocessed: pending[] is unique */
		WC_ASSERT(S->next_seq - S->hash_seq < S->nslots);
		s->seq = S->next_seq++;
		S->pending[s->seq % S->nslots] = s;
		slot_to(s, SLOT_READING);
		S->inflight++;
		start_read(L, s);
	}
	if (L->err)
		drain(L);
	if (!S->inflight)
		L->finished = true;
}

/* One of the slot's jobs (copy, hash) is done. */
static void slot_put(struct ld *L, struct slot *s)
{
	struct staged *S = L->priv;

	WC_ASSERT(s->busy > 0 && S->inflight > 0);
	if (--s->busy)
		return;
	if (!L->err)
		L->done_bytes += s->width * s->height;
	slot_to(s, SLOT_FREE);
	S->inflight--;
	ld_progress(L);
	issue(L);
}

/* The backend's copy is done: maybe on a backend thread, so only hand the
 * slot back to the loop. */
static void copy_done(void *arg, int res)
{
	struct slot *s = arg;
	struct staged *S = s->L->priv;

	s->copy_res = res;
	rx_wake_post(&S->wake, &s->node);
}

static void copy_wake_cb(struct rx_wake *w, struct rx_wake_node *node)
{
	struct staged *S = container_of(w, struct staged, wake);
	struct ld *L = S->L;
	struct slot *s;

	if (!node) {              /* rx_wake_close finished */
		S->wake_open = false;
		return;
	}
	s = container_of(node, struct slot, node);
	if (s->copy_res < 0)
		ld_fail(L, s->copy_res, "copy to the device failed: %s",
			strerror(-s->copy_res));
	slot_put(L, s);
}

static void hash_wake_cb(struct rx_wake *w, struct rx_wake_node *node)
{
	struct staged *S = container_of(w, struct staged, hwake);
	struct ld *L = S->L;
	struct slot *s;

	if (!node) {
		S->hwake_open = false;
		return;
	}
	s = container_of(node, struct slot, hjob.node);
	L->hash_ns += s->hjob.ns;
	slot_put(L, s);
}

/* Hashes the slot's rows: on the lane's worker, or here. */
static void hash_slot(struct ld *L, struct slot *s)
{
	struct staged *S = L->priv;
	const uint8_t *p = s->buf + s->delta;
	uint64_t t0;

	if (S->hp_started) {
		s->hjob = (struct hjob){
			.p = p, .width = s->width, .height = s->height,
			.pitch = s->src_pitch, .first = s->first,
			.last = s->last, .out = L->v->hash[s->ti],
		};
		hashpool_submit(&S->hp, s->lane % S->hp.n, &s->hjob);
		return;
	}
	t0 = rx_now_ns();
	if (s->first)
		base_hasher_init(&S->hasher);
	for (uint64_t r = 0; r < s->height; r++)
		base_hasher_update(&S->hasher, p + r * s->src_pitch, s->width);
	if (s->last)
		base_hasher_final(&S->hasher, L->v->hash[s->ti]);
	L->hash_ns += rx_now_ns() - t0;
}

/* Device hashing: the tensor's bytes up to the end of this piece are
 * queued for copying; the device hashes them after the copy. Tensors of
 * at most GPU_HASH_MIN_LEN bytes (one piece) are hashed here. */
static void dev_hash_step(struct ld *L, struct slot *s)
{
	struct staged *S = L->priv;
	const struct plan_tensor *t = tensor(L, s->ti);
	char err[BASE_ERR_LEN];
	int ret;

	if (t->size <= GPU_HASH_MIN_LEN) {
		hash_slot(L, s);
		return;
	}
	ret = L->be->hash_step(&L->d->dev, &L->v->pools[t->pool], t->pool_off,
			       t->size, s->ti,
			       s->dst_off - t->pool_off + s->width * s->height,
			       (unsigned)(s->seq % LD_COPY_STREAMS), s->lane, err);
	if (ret)
		ld_fail(L, ret, "%s", err);
	S->dev_hash_steps++;
}

/* Hands on, in issue order, every piece whose read is complete: start the
 * copy, then hash the slot while the copy runs (or, hashing on the device,
 * queue the hash behind the copy). */
static void drain(struct ld *L)
{
	struct staged *S = L->priv;

	while (S->hash_seq < S->next_seq) {
		struct slot *s = S->pending[S->hash_seq % S->nslots];
		bool async_hash = L->v->hashed && S->hp_started;
		struct gpu_copy c;
		uint64_t t0;
		int ret;

		if (s->seq != S->hash_seq || s->state != SLOT_READ)
			return;
		S->hash_seq++;
		slot_to(s, SLOT_BUSY);
		if (L->err) {     /* failing: just give the slot back */
			s->busy = 1;
			slot_put(L, s);
			continue;
		}
		s->busy = async_hash && s->stream ? 2 : 1;
		c = (struct gpu_copy){
			.dst_off = s->dst_off, .src = s->buf + s->delta,
			.width = s->width, .height = s->height,
			.src_pitch = s->src_pitch, .dst_pitch = s->width,
		};
		t0 = rx_now_ns();
		if (s->seq == 0)
			log_debug("load step: first read back, first copy queued %.3f s after the load began",
				  (double)(t0 - L->start_ns) / 1e9);
		ret = L->be->copy_to_pool(&L->d->dev,
					  &L->v->pools[L->v->plan.t[s->ti].pool],
					  &c, (unsigned)(s->seq % LD_COPY_STREAMS),
					  copy_done, s);
		L->copy_ns += rx_now_ns() - t0;
		if (ret) {
			ld_fail(L, ret, "cannot start a copy to the device: %s",
				strerror(-ret));
			s->busy = 1;
			slot_put(L, s);
			continue;
		}
		if (L->v->hashed && s->stream && S->dev_hash)
			dev_hash_step(L, s);
		else if (L->v->hashed && s->stream)
			hash_slot(L, s);
	}
}

/* The ring first, as one staging allocation: the backend maps and faults
 * it in while the device's context may still be in the making (wcd opens
 * the device with GPU_CTX_ASYNC), and only its register waits; the hash
 * set-up, which needs the context, comes after. */
static int staged_setup(struct ld *L, char *err)
{
	struct iovec iov[WCD_SLOTS_MAX];
	struct staged *S;
	unsigned threads;
	int ret;

	S = L->priv = calloc(1, sizeof(*S));
	if (!S)
		return base_errf(err, ENOMEM, "out of memory");
	S->L = L;
	S->nslots = L->d->o.slots;
	S->slot_size = L->d->o.slot_size;
	S->slots = calloc(S->nslots, sizeof(*S->slots));
	if (!S->slots)
		return base_errf(err, ENOMEM, "out of memory for staging slots");
	ret = L->be->staging_alloc(&L->d->dev, S->nslots * S->slot_size,
				   (void **)&S->ring, err);
	if (ret)
		return ret;
	for (unsigned i = 0; i < S->nslots; i++) {
		struct slot *s = &S->slots[i];

		s->L = L;
		s->idx = (int)i;
		s->buf = S->ring + i * S->slot_size;
		iov[i].iov_base = s->buf;
		iov[i].iov_len = S->slot_size;
	}
	S->fixed = rx_loop_register_buffers(&L->d->loop, iov, S->nslots) == 0;
	if (!S->fixed)
		log_info("staging slots are not registered as fixed buffers; plain reads instead");
	S->dev_hash = L->v->hashed && L->be->hash_begin &&
		      L->d->o.hash_on != WCD_HASH_CPU;
	if (S->dev_hash) {
		ret = L->be->hash_begin(&L->d->dev, L->v->plan.ntensors, err);
		if (ret == -ENOTSUP && L->d->o.hash_on == WCD_HASH_AUTO) {
			log_info("%s; hashing on CPU threads instead", err);
			S->dev_hash = false;
		} else if (ret) {
			return ret;
		} else {
			S->dev_hash_begun = true;
		}
	}
	threads = L->v->hashed && !S->dev_hash ? L->d->o.hash_threads : 0;
	ret = rx_wake_init(&L->d->loop, &S->wake, copy_wake_cb);
	if (ret)
		return base_errf(err, -ret, "rx_wake_init: %s", strerror(-ret));
	S->wake_open = true;
	/* one lane per hash worker (or per device hash chain), but never
	 * more lanes than slots */
	S->nlanes = S->dev_hash ? LD_DEV_HASH_LANES : threads ? threads : 1;
	if (S->nlanes > S->nslots)
		S->nlanes = S->nslots;
	if (threads) {
		ret = rx_wake_init(&L->d->loop, &S->hwake, hash_wake_cb);
		if (ret)
			return base_errf(err, -ret, "rx_wake_init: %s",
				       strerror(-ret));
		S->hwake_open = true;
		ret = hashpool_start(&S->hp, &L->d->work, threads, &S->hwake);
		if (ret)
			return base_errf(err, -ret, "cannot queue %u hash workers on the worker pool: %s",
				       threads, strerror(-ret));
		S->hp_started = true;
	}
	return 0;
}

static int staged_start(struct ld *L, char *err)
{
	(void)err;
	issue(L);
	return 0;
}

/* After the last copy: the device's hashes (if any) of the views and
 * entries of several pieces; every copy is done. In one batch where the
 * backend can (64 fused views of llama-8b took 0.079 s after the last
 * copy on 8 chains). */
static void dev_hash_finish(struct ld *L)
{
	struct staged *S = L->priv;
	struct gpu_hash_job *jobs;
	char err[BASE_ERR_LEN];
	uint32_t n = 0;
	uint64_t t0 = rx_now_ns();
	int ret;

	if (!S->dev_hash_begun)
		return;
	jobs = L->be->hash_batch ?
	       malloc(sizeof(*jobs) * (L->v->plan.ntensors ? L->v->plan.ntensors : 1)) :
	       NULL;
	for (uint32_t i = 0; !L->err && i < L->v->plan.ntensors; i++) {
		const struct plan_tensor *t = tensor(L, i);

		if (ld_streamed(L, i) || !ld_dev_post(L, i))
			continue;
		S->dev_hash_steps++;
		if (jobs) {
			jobs[n++] = (struct gpu_hash_job){
				.pool = &L->v->pools[t->pool],
				.off = t->pool_off, .len = t->size, .i = i,
			};
			continue;
		}
		ret = L->be->hash_step(&L->d->dev, &L->v->pools[t->pool],
				       t->pool_off, t->size, i, t->size, 0,
				       i % LD_DEV_HASH_LANES, err);
		if (ret)
			ld_fail(L, ret, "%s", err);
	}
	if (L->be->hash_batch && !jobs)
		ld_fail(L, -ENOMEM, "out of memory");
	if (jobs && !L->err && n) {
		/* copy stream 0: hash_step waited for it alone too; the
		 * copies of every stream are done by now (this runs once the
		 * last one completed) */
		ret = L->be->hash_batch(&L->d->dev, jobs, n, 0, err);
		if (ret)
			ld_fail(L, ret, "%s", err);
	}
	free(jobs);
	S->dev_hash_begun = false;
	ret = L->be->hash_end(&L->d->dev, L->err ? NULL : L->v->hash, err);
	if (ret)
		ld_fail(L, ret, "%s", err);
	S->hash_tail_ns = rx_now_ns() - t0;
}

/* The hashes of what did not stream (views, entries of several pieces;
 * aliases copy their target's), from the pools: on the CPU where a pool
 * has a mapping, else read back through a staging slot. The device hashed
 * the rest already (dev_hash_finish). */
static void post_hash(struct ld *L)
{
	struct staged *S = L->priv;
	struct wcd_version *v = L->v;
	uint64_t t0 = rx_now_ns();
	uint8_t *bounce = S->slots ? S->slots[0].buf : NULL;

	for (uint32_t i = 0; !L->err && i < v->plan.ntensors; i++) {
		const struct plan_tensor *t = &v->plan.t[i];
		struct gpu_pool *pl = &v->pools[t->pool];
		struct base_hasher h;

		if (!t->size || ld_streamed(L, i) || ld_dev_post(L, i) ||
		    (t->flags & PLAN_T_ALIAS))
			continue;
		if (pl->host_ptr) {
			base_hash128((const uint8_t *)pl->host_ptr + t->pool_off,
				   t->size, v->hash[i]);
			continue;
		}
		base_hasher_init(&h);
		for (uint64_t o = 0; o < t->size; o += S->slot_size) {
			size_t n = t->size - o < S->slot_size ?
				   (size_t)(t->size - o) : (size_t)S->slot_size;
			int ret = bounce ? L->be->copy_from_pool(&L->d->dev, pl,
						t->pool_off + o, bounce, n) :
					   -ENOMEM;

			if (ret) {
				ld_fail(L, ret, "reading %s back to hash it failed: %s",
					t->name, strerror(-ret));
				break;
			}
			base_hasher_update(&h, bounce, n);
		}
		base_hasher_final(&h, v->hash[i]);
	}
	L->hash_ns += rx_now_ns() - t0;
}

/* After the last copy: the device's hashes, then the CPU's of what did
 * not stream; both count in the read phase (they overlap the copies but
 * for their tail). */
static void staged_finish(struct ld *L)
{
	struct staged *S = L->priv;

	dev_hash_finish(L);
	if (L->v->hashed && !L->err)
		post_hash(L);
	if (L->v->hashed)
		ld_alias_hashes(L->v);
	ld_fill_over(L);
	L->hash_phase_ns = S->dev_hash ? S->hash_tail_ns : L->hash_ns;
}

/* wcd_turn_until's test: both of the load's wakes are closed */
static bool wakes_closed(void *arg)
{
	struct staged *S = arg;

	return !S->wake_open && !S->hwake_open;
}

/* The hash workers first (they post to hwake), then the wakes; turns the
 * loop for both (load_run runs outside every callback). */
static void staged_teardown(struct ld *L)
{
	struct staged *S = L->priv;

	if (!S)
		return;
	if (S->dev_hash_begun)
		L->be->hash_end(&L->d->dev, NULL, NULL);
	S->dev_hash_begun = false;
	if (S->hp_started) {
		hashpool_stop(&S->hp);
		wcd_turn_until(L->d, hashpool_stopped, &S->hp);
	}
	S->hp_started = false;
	if (S->wake_open)
		rx_wake_close(&S->wake);
	if (S->hwake_open)
		rx_wake_close(&S->hwake);
	wcd_turn_until(L->d, wakes_closed, S);
	if (S->fixed)
		rx_loop_unregister_buffers(&L->d->loop);
	if (S->ring)
		L->be->staging_free(&L->d->dev, S->ring,
				    S->nslots * S->slot_size);
	free(S->slots);
	free(S);
	L->priv = NULL;
}

static void staged_describe(struct ld *L, uint64_t read_ns)
{
	struct staged *S = L->priv;
	struct wcd_version *v = L->v;

	ld_log_read(L, read_ns, "staged");
	log_info("phase copy: %.3f s, %.2f GB/s (copy_to_pool submissions, overlapped with the reads)",
		 clock_ns_secs(L->copy_ns), ld_gbps(L->total, L->copy_ns));
	if (v->hashed && S->dev_hash)
		log_info("phase hash: on the device, %.3f s, %.2f GB/s (XXH3-128 over the pools: %" PRIu64 " steps queued behind the copies, %.3f s of it after the last copy)",
			 clock_ns_secs(read_ns), ld_gbps(L->total, read_ns),
			 S->dev_hash_steps, clock_ns_secs(S->hash_tail_ns));
	else if (v->hashed)
		log_info("phase hash: %.3f s of hashing, %.2f GB/s per thread (XXH3-128 per tensor on %s, overlapped with the copies)",
			 clock_ns_secs(L->hash_phase_ns),
			 ld_gbps(L->total, L->hash_ns),
			 L->d->o.hash_threads ? "hash threads" : "the loop thread");
	else
		log_info("phase hash: skipped (--no-hash)");
}

const struct ld_path ld_staged_path = {
	.name = "staged",
	.o_direct = true,
	.hash_in_read = true,
	.setup = staged_setup,
	.start = staged_start,
	.finish = staged_finish,
	.teardown = staged_teardown,
	.describe = staged_describe,
};
