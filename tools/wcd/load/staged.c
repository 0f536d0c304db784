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
 * are hashed from the pools afterwards (ld_post_hash). */
bool ld_streamed(struct ld *L, uint32_t e)
{
	const struct plan_tensor *t = tensor(L, e);
	const struct plan_piece *pc;

	if ((t->flags & PLAN_T_VIEW) || t->npieces != 1)
		return false;
	pc = piece(L, t->piece0);
	if (pc->dst || pc->size != t->size)
		return false;
	return !L->dev_hash || t->size <= GPU_HASH_MIN_LEN ||
	       t->pool_off % 16 == 0;
}

/* Whether the device hashes entry e after the load (not streamed). */
bool ld_dev_post(struct ld *L, uint32_t e)
{
	const struct plan_tensor *t = tensor(L, e);

	return L->dev_hash && !(t->flags & PLAN_T_ALIAS) &&
	       t->size > GPU_HASH_MIN_LEN && t->pool_off % 16 == 0;
}

/* Picks the next lane with a piece left (round robin), refilling lanes
 * from the plan; false when the plan is exhausted. */
static bool lane_pick(struct ld *L, unsigned *out)
{
	if (L->err || wcd_stopping(L->d))
		return false;
	for (unsigned k = 0; k < L->nlanes; k++) {
		unsigned i = (L->rr + k) % L->nlanes;
		struct lane *ln = &L->lanes[i];

		while (!ln->active || ln->tpos >= piece(L, ln->ti)->size) {
			if (L->next_ti >= L->v->plan.npieces) {
				ln->active = false;
				break;
			}
			ln->ti = L->next_ti++;
			ln->tpos = 0;
			ln->active = true;
		}
		if (ln->active) {
			*out = i;
			L->rr = (i + 1) % L->nlanes;
			return true;
		}
	}
	return false;
}

/* Fills s with the next piece of lane k. */
static void next_piece(struct ld *L, struct slot *s, unsigned k)
{
	struct lane *ln = &L->lanes[k];
	const struct plan_piece *t = piece(L, ln->ti);
	uint64_t A = L->dfd[t->shard] >= 0 ? LD_DIO_ALIGN : 1;
	uint64_t room = L->slot_size - 2 * A;
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
				    L->fixed ? s->idx : -1, RX_READ_ASYNC, part_cb);
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
			    s->read_off, L->fixed ? s->idx : -1,
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
	unsigned k;

	for (unsigned i = 0; i < L->nslots; i++) {
		struct slot *s = &L->slots[i];

		if (s->state != SLOT_FREE)
			continue;
		if (!lane_pick(L, &k))
			break;
		next_piece(L, s, k);
		/* fewer than nslots pieces unprocessed: pending[] is unique */
		WC_ASSERT(L->next_seq - L->hash_seq < L->nslots);
		s->seq = L->next_seq++;
		L->pending[s->seq % L->nslots] = s;
		slot_to(s, SLOT_READING);
		L->inflight++;
		start_read(L, s);
	}
	if (L->err)
		drain(L);
	if (!L->inflight)
		L->finished = true;
}

/* One of the slot's jobs (copy, hash) is done. */
static void slot_put(struct ld *L, struct slot *s)
{
	WC_ASSERT(s->busy > 0 && L->inflight > 0);
	if (--s->busy)
		return;
	if (!L->err)
		L->done_bytes += s->width * s->height;
	slot_to(s, SLOT_FREE);
	L->inflight--;
	ld_progress(L);
	issue(L);
}

/* The backend's copy is done: maybe on a backend thread, so only hand the
 * slot back to the loop. */
static void copy_done(void *arg, int res)
{
	struct slot *s = arg;

	s->copy_res = res;
	rx_wake_post(&s->L->wake, &s->node);
}

static void copy_wake_cb(struct rx_wake *w, struct rx_wake_node *node)
{
	struct ld *L = container_of(w, struct ld, wake);
	struct slot *s;

	if (!node) {              /* rx_wake_close finished */
		L->wake_open = false;
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
	struct ld *L = container_of(w, struct ld, hwake);

	struct slot *s;

	if (!node) {
		L->hwake_open = false;
		return;
	}
	s = container_of(node, struct slot, hjob.node);
	L->hash_ns += s->hjob.ns;
	slot_put(L, s);
}

/* Hashes the slot's rows: on the lane's worker, or here. */
static void hash_slot(struct ld *L, struct slot *s)
{
	const uint8_t *p = s->buf + s->delta;
	uint64_t t0;

	if (L->hp_started) {
		s->hjob = (struct hjob){
			.p = p, .width = s->width, .height = s->height,
			.pitch = s->src_pitch, .first = s->first,
			.last = s->last, .out = L->v->hash[s->ti],
		};
		hashpool_submit(&L->hp, s->lane % L->hp.n, &s->hjob);
		return;
	}
	t0 = rx_now_ns();
	if (s->first)
		base_hasher_init(&L->hasher);
	for (uint64_t r = 0; r < s->height; r++)
		base_hasher_update(&L->hasher, p + r * s->src_pitch, s->width);
	if (s->last)
		base_hasher_final(&L->hasher, L->v->hash[s->ti]);
	L->hash_ns += rx_now_ns() - t0;
}

/* Device hashing: the tensor's bytes up to the end of this piece are
 * queued for copying; the device hashes them after the copy. Tensors of
 * at most GPU_HASH_MIN_LEN bytes (one piece) are hashed here. */
static void dev_hash_step(struct ld *L, struct slot *s)
{
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
	L->dev_hash_steps++;
}

/* Hands on, in issue order, every piece whose read is complete: start the
 * copy, then hash the slot while the copy runs (or, hashing on the device,
 * queue the hash behind the copy). */
static void drain(struct ld *L)
{
	while (L->hash_seq < L->next_seq) {
		struct slot *s = L->pending[L->hash_seq % L->nslots];
		bool async_hash = L->v->hashed && L->hp_started;
		struct gpu_copy c;
		uint64_t t0;
		int ret;

		if (s->seq != L->hash_seq || s->state != SLOT_READ)
			return;
		L->hash_seq++;
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
		if (L->v->hashed && s->stream && L->dev_hash)
			dev_hash_step(L, s);
		else if (L->v->hashed && s->stream)
			hash_slot(L, s);
	}
}

/* The ring first, as one staging allocation: the backend maps and faults
 * it in while the device's context may still be in the making (wcd opens
 * the device with GPU_CTX_ASYNC), and only its register waits; the hash
 * set-up, which needs the context, comes after. */
int staged_setup(struct ld *L, char *err)
{
	struct iovec iov[WCD_SLOTS_MAX];
	unsigned threads;
	int ret;

	L->nslots = L->d->o.slots;
	L->slot_size = L->d->o.slot_size;
	L->slots = calloc(L->nslots, sizeof(*L->slots));
	if (!L->slots)
		return base_errf(err, ENOMEM, "out of memory for staging slots");
	ret = L->be->staging_alloc(&L->d->dev, L->nslots * L->slot_size,
				   (void **)&L->ring, err);
	if (ret)
		return ret;
	for (unsigned i = 0; i < L->nslots; i++) {
		struct slot *s = &L->slots[i];

		s->L = L;
		s->idx = (int)i;
		s->buf = L->ring + i * L->slot_size;
		iov[i].iov_base = s->buf;
		iov[i].iov_len = L->slot_size;
	}
	L->fixed = rx_loop_register_buffers(&L->d->loop, iov, L->nslots) == 0;
	if (!L->fixed)
		log_info("staging slots are not registered as fixed buffers; plain reads instead");
	L->dev_hash = L->v->hashed && L->be->hash_begin &&
		      L->d->o.hash_on != WCD_HASH_CPU;
	if (L->dev_hash) {
		ret = L->be->hash_begin(&L->d->dev, L->v->plan.ntensors, err);
		if (ret == -ENOTSUP && L->d->o.hash_on == WCD_HASH_AUTO) {
			log_info("%s; hashing on CPU threads instead", err);
			L->dev_hash = false;
		} else if (ret) {
			return ret;
		} else {
			L->dev_hash_begun = true;
		}
	}
	threads = L->v->hashed && !L->dev_hash ? L->d->o.hash_threads : 0;
	ret = rx_wake_init(&L->d->loop, &L->wake, copy_wake_cb);
	if (ret)
		return base_errf(err, -ret, "rx_wake_init: %s", strerror(-ret));
	L->wake_open = true;
	/* one lane per hash worker (or per device hash chain), but never
	 * more lanes than slots */
	L->nlanes = L->dev_hash ? LD_DEV_HASH_LANES : threads ? threads : 1;
	if (L->nlanes > L->nslots)
		L->nlanes = L->nslots;
	if (threads) {
		ret = rx_wake_init(&L->d->loop, &L->hwake, hash_wake_cb);
		if (ret)
			return base_errf(err, -ret, "rx_wake_init: %s",
				       strerror(-ret));
		L->hwake_open = true;
		ret = hashpool_start(&L->hp, threads, &L->hwake);
		if (ret)
			return base_errf(err, -ret, "cannot start %u hash threads: %s",
				       threads, strerror(-ret));
		L->hp_started = true;
	}
	return 0;
}

void staged_start(struct ld *L)
{
	issue(L);
}

void staged_finish(struct ld *L)
{
	struct gpu_hash_job *jobs;
	char err[BASE_ERR_LEN];
	uint32_t n = 0;
	uint64_t t0 = rx_now_ns();
	int ret;

	if (!L->dev_hash_begun)
		return;
	/* the views and entries of several pieces: every copy is done; in
	 * one batch where the backend can (64 fused views of llama-8b took
	 * 0.079 s after the last copy on 8 chains) */
	jobs = L->be->hash_batch ?
	       malloc(sizeof(*jobs) * (L->v->plan.ntensors ? L->v->plan.ntensors : 1)) :
	       NULL;
	for (uint32_t i = 0; !L->err && i < L->v->plan.ntensors; i++) {
		const struct plan_tensor *t = tensor(L, i);

		if (ld_streamed(L, i) || !ld_dev_post(L, i))
			continue;
		L->dev_hash_steps++;
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
		 * copies of every stream are done by now (staged_finish
		 * runs once the last one completed) */
		ret = L->be->hash_batch(&L->d->dev, jobs, n, 0, err);
		if (ret)
			ld_fail(L, ret, "%s", err);
	}
	free(jobs);
	L->dev_hash_begun = false;
	ret = L->be->hash_end(&L->d->dev, L->err ? NULL : L->v->hash, err);
	if (ret)
		ld_fail(L, ret, "%s", err);
	L->hash_tail_ns = rx_now_ns() - t0;
}

/* wcd_turn_until's test: both of the load's wakes are closed */
static bool wakes_closed(void *arg)
{
	struct ld *L = arg;

	return !L->wake_open && !L->hwake_open;
}

void staged_teardown(struct ld *L)
{
	if (L->dev_hash_begun)
		L->be->hash_end(&L->d->dev, NULL, NULL);
	L->dev_hash_begun = false;
	if (L->hp_started)
		hashpool_stop(&L->hp);
	L->hp_started = false;
	if (L->wake_open)
		rx_wake_close(&L->wake);
	if (L->hwake_open)
		rx_wake_close(&L->hwake);
	wcd_turn_until(L->d, wakes_closed, L);
	if (L->fixed)
		rx_loop_unregister_buffers(&L->d->loop);
	if (L->ring)
		L->be->staging_free(&L->d->dev, L->ring,
				    L->nslots * L->slot_size);
	free(L->slots);
}
