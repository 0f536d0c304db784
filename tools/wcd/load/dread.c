/* SPDX-License-Identifier: MIT */
/*
 * The direct path's read fill (--direct-fill read): io_uring reads
 * straight from the shard files into the pools' mappings (through io-wq:
 * RX_READ_ASYNC), WCD_READ_CHUNK bytes per read, WCD_READ_DEPTH in flight;
 * a dim-1 split is read one row at a time. Then every tensor is hashed in
 * the pools (ld_hash_rest: the hash phase). The splice fill (fill.c) is
 * the default; this path is what it is measured against
 * (bench/gpu/direct_fill.sh).
 *
 * Bounds: WCD_READ_DEPTH reads in flight, each at most WCD_READ_CHUNK.
 * Known cost: one read per row of a dim-1 split.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "load/dread.h"
#include "clock.h"
#include "log.h"

struct dread_st;

struct dread {                /* one read in flight */
	struct rx_read r;
	struct dread_st *st;
	uint64_t len;
	uint32_t shard;           /* for the messages */
};

/* The read path's state (L->priv). */
struct dread_st {
	struct ld *L;
	uint32_t ti;              /* the next read is of piece ti */
	uint64_t tpos;            /* at byte tpos */
	unsigned inflight;
	struct dread reads[WCD_READ_DEPTH];
	struct dread *free_reads[WCD_READ_DEPTH];
	unsigned nfree_reads;
};

static const struct plan_piece *ld_piece(struct ld *L, uint32_t i)
{
	return &L->v->plan.pc[i];
}

/* Skips empty pieces; true while pieces remain. */
static bool gen_more(struct dread_st *st)
{
	struct ld *L = st->L;

	while (st->ti < L->v->plan.npieces &&
	       st->tpos >= ld_piece(L, st->ti)->size) {
		st->ti++;
		st->tpos = 0;
	}
	return st->ti < L->v->plan.npieces && !L->err && !wcd_stopping(L->d);
}

static void direct_issue(struct dread_st *st);

static void direct_read_cb(struct rx_read *r, int res)
{
	struct dread *dr = container_of(r, struct dread, r);
	struct dread_st *st = dr->st;
	struct ld *L = st->L;

	st->inflight--;
	st->free_reads[st->nfree_reads++] = dr;
	if (res < 0)
		ld_fail(L, res, "read of %" PRIu64 " bytes of %s at offset %" PRIu64 " failed: %s",
			dr->len, ld_shard_name(L, dr->shard), r->off,
			strerror(-res));
	else if ((uint64_t)res < dr->len)
		ld_fail(L, EIO,
			"%s ended early: read %d of %" PRIu64 " bytes at offset %" PRIu64 " (was the file truncated while loading?)",
			ld_shard_name(L, dr->shard), res, dr->len, r->off);
	else {
		L->done_bytes += dr->len;
		L->read_bytes += dr->len;
	}
	ld_progress(L);
	direct_issue(st);
}

static void direct_issue(struct dread_st *st)
{
	struct ld *L = st->L;

	while (st->nfree_reads && gen_more(st)) {
		const struct plan_piece *t = ld_piece(L, st->ti);
		const struct plan_tensor *e = &L->v->plan.t[t->entry];
		struct gpu_pool *pool = &L->v->pools[e->pool];
		struct dread *dr = st->free_reads[--st->nfree_reads];
		uint64_t src, len;
		uint8_t *dst;
		int ret;

		if (t->height <= 1 || t->src_pitch == t->width) {
			len = t->size - st->tpos;
			if (len > WCD_READ_CHUNK)
				len = WCD_READ_CHUNK;
			src = t->file_off + st->tpos;
		} else {          /* one row of a dim-1 split */
			uint64_t row = st->tpos / t->width;
			uint64_t col = st->tpos % t->width;

			len = t->width - col;
			if (len > WCD_READ_CHUNK)
				len = WCD_READ_CHUNK;
			src = t->file_off + row * t->src_pitch + col;
		}
		dst = (uint8_t *)pool->host_ptr + e->pool_off + t->dst + st->tpos;
		dr->st = st;
		dr->len = len;
		dr->shard = t->shard;
		ret = rx_read_start(&L->d->loop, &dr->r, L->fd[t->shard], dst,
				    len, src, -1, RX_READ_ASYNC,
				    direct_read_cb);
		if (ret) {
			st->free_reads[st->nfree_reads++] = dr;
			ld_fail(L, ret, "cannot start a read of %s: %s",
				ld_shard_name(L, t->shard), strerror(-ret));
			break;
		}
		st->inflight++;
		st->tpos += len;
	}
	if (!st->inflight)
		L->finished = true;
}

static int dread_setup(struct ld *L, char *err)
{
	struct dread_st *st = calloc(1, sizeof(*st));

	if (!st)
		return base_errf(err, ENOMEM, "out of memory");
	st->L = L;
	for (unsigned i = 0; i < WCD_READ_DEPTH; i++)
		st->free_reads[st->nfree_reads++] = &st->reads[i];
	L->priv = st;
	return 0;
}

static int dread_start(struct ld *L, char *err)
{
	(void)err;
	direct_issue(L->priv);
	return 0;
}

/* Every read is back: the hash phase over the pools. */
static void dread_finish(struct ld *L)
{
	if (L->v->hashed)
		ld_alias_hashes(L->v);
	ld_fill_over(L);
	if (!L->err && L->v->hashed)
		ld_hash_rest(L);
	L->hash_phase_ns = L->hash_ns;
}

static void dread_teardown(struct ld *L)
{
	free(L->priv);
	L->priv = NULL;
}

static void dread_describe(struct ld *L, uint64_t read_ns)
{
	unsigned threads = L->d->o.hash_threads ? L->d->o.hash_threads : 1;

	ld_log_read(L, read_ns, "direct into the pools");
	log_info("phase copy: none (direct path: the reads landed in the pools)");
	if (L->v->hashed)
		log_info("phase hash: %.3f s, %.2f GB/s (XXH3-128 per tensor on %u thread%s)",
			 clock_ns_secs(L->hash_phase_ns),
			 ld_gbps(L->total, L->hash_ns), threads,
			 threads == 1 ? "" : "s");
	else
		log_info("phase hash: skipped (--no-hash)");
}

const struct ld_path ld_read_path = {
	.name = "read",
	.setup = dread_setup,
	.start = dread_start,
	.finish = dread_finish,
	.teardown = dread_teardown,
	.describe = dread_describe,
};
