/* SPDX-License-Identifier: MIT */
/*
 * The loader: model directory -> plan -> pools, through the reactor.
 *
 * load_prepare parses (config, index, every shard header), applies the
 * quantization gate before anything is loaded, builds this rank's plan and
 * packs it into pools, and computes the identity.
 *
 * load_run fills the pools along one of two paths behind the backend
 * interface:
 *
 *   direct  (host backend default: the pool has a CPU mapping, host_ptr)
 *           io_uring reads straight from the shard files into the pool
 *           mapping, WCD_READ_CHUNK bytes per read, WCD_READ_DEPTH in
 *           flight; a dim-1 split is read one row at a time. Then each
 *           tensor is hashed in the pool (the hash phase).
 *
 *   staged  (the CUDA backend; --load-path staged exercises it on the
 *           host) a ring of slots from be->staging_alloc, registered with
 *           io_uring as fixed buffers. Each piece of the plan (a range, or
 *           a group of whole rows for a dim-1 split) is read into a slot as
 *           an aligned superset (O_DIRECT where the file system takes it,
 *           probed per shard by opening with O_DIRECT; buffered reads go
 *           through io-wq with RX_READ_ASYNC). Pieces are handed on in plan
 *           order: be->copy_to_pool (2-D for dim-1 splits) on stream
 *           seq % 4, then the slot is hashed while the copy runs; the
 *           backend's done callback posts the slot back through an rx_wake
 *           (thread-safe) and the loop refills it.
 *
 * Known costs: a dim-1 split reads whole rows (tp x its bytes) in the staged
 * path and one read per row in the direct path; hashing runs on the loop's
 * thread (XXH3 is several times faster than the reads it follows).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "wcd.h"

#define container_of(p, type, member) \
	((type *)(void *)((char *)(p) - offsetof(type, member)))
#define DIO_ALIGN 4096u
#define COPY_STREAMS 4
#define PROGRESS_NS 500000000ull

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;   /* bytes/ns = GB/s */
}

/* --- prepare ---------------------------------------------------------------- */

static int read_rules_file(struct plan_rules *r, const char *path, char *err)
{
	FILE *f = fopen(path, "re");
	char *buf;
	size_t n;
	int ret;

	if (!f)
		return wc_errf(err, errno, "cannot open the rules file %s: %s",
			       path, strerror(errno));
	buf = malloc(PLAN_RULES_FILE_MAX + 1);
	if (!buf) {
		fclose(f);
		return wc_errf(err, ENOMEM, "out of memory");
	}
	n = fread(buf, 1, PLAN_RULES_FILE_MAX + 1, f);
	fclose(f);
	if (n > PLAN_RULES_FILE_MAX) {
		free(buf);
		return wc_errf(err, EFBIG,
			       "rules file %s is over %u bytes", path,
			       PLAN_RULES_FILE_MAX);
	}
	ret = plan_rules_parse(r, buf, n, path, err);
	free(buf);
	return ret;
}

int load_prepare(struct wcd *d, struct wcd_version *v, char *err)
{
	uint64_t t0 = rx_now_ns();
	enum quant_verdict qv;
	char perr[WC_ERR_LEN];
	int ret;

	ret = model_open(&v->model, d->o.model, err);
	if (ret)
		return ret;
	/* The gate comes before anything is planned or loaded. */
	ret = quant_check(&v->model.cfg, d->o.allow_quant, &qv, err);
	if (ret)
		return ret;
	if (qv == QUANT_OVERRIDDEN)
		log_warn("QUANTIZATION OVERRIDE: serving '%s' zero-copy because of --allow-quant %s; this method is NOT verified (verified: %s); attached engines may compute with wrong numbers",
			 v->model.cfg.quant_method, d->o.allow_quant,
			 QUANT_VERIFIED_LIST);
	ret = plan_rules_preset(&v->rules, v->model.cfg.arch, perr);
	if (ret == -ENOTSUP) {
		if (d->o.tp_size > 1 && !d->o.rules)
			return wc_errf(err, ENOTSUP, "%s", perr);
		memset(&v->rules, 0, sizeof(v->rules));
		log_info("no split preset for architecture '%s'%s",
			 v->model.cfg.arch,
			 d->o.rules ? "; using the rules file only" :
				      "; every tensor is replicated (tp 1)");
	} else if (ret) {
		return wc_errf(err, -ret, "%s", perr);
	}
	if (d->o.rules) {
		ret = read_rules_file(&v->rules, d->o.rules, err);
		if (ret)
			return ret;
	}
	ret = plan_build(&v->plan, &v->model, &v->rules, d->o.tp_size,
			 d->o.tp_rank, d->o.pp_size, d->o.pp_rank, err);
	if (ret)
		return ret;
	ret = plan_pack(&v->plan, d->o.pool_size, err);
	if (ret)
		return ret;
	if (v->plan.npools > GPU_POOLS_MAX)
		return wc_errf(err, E2BIG, "the plan needs %u pools, over %d",
			       v->plan.npools, GPU_POOLS_MAX);

	ident_init(&v->ident);
	ret = ident_set_model(&v->ident, &v->model, &v->rules, err);
	if (ret)
		return ret;
	v->ident.tp_size = d->o.tp_size;
	v->ident.tp_rank = d->o.tp_rank;
	v->ident.pp_size = d->o.pp_size;
	v->ident.pp_rank = d->o.pp_rank;
	snprintf(v->ident.device_uuid, sizeof(v->ident.device_uuid), "%s",
		 d->dev.uuid);
	v->ident.cc_major = (uint32_t)d->dev.cc_major;
	v->ident.cc_minor = (uint32_t)d->dev.cc_minor;
	ret = ident_encode(&v->ident, v->ident_enc, sizeof(v->ident_enc),
			   &v->ident_len);
	if (!ret)
		ret = ident_digest(&v->ident, v->digest);
	if (ret)
		return wc_errf(err, -ret, "cannot encode the identity: %s",
			       strerror(-ret));
	v->phases.parse_s = secs(rx_now_ns() - t0);
	log_info("phase parse: %.3f s: %u shards, %u tensors for this rank (tp rank %u of %u, pp rank %u of %u), %" PRIu64 " bytes in %u pools",
		 v->phases.parse_s, v->model.nshards, v->plan.ntensors,
		 d->o.tp_rank, d->o.tp_size, d->o.pp_rank, d->o.pp_size,
		 v->plan.total_bytes, v->plan.npools);
	return 0;
}

/* --- the load: shared state --------------------------------------------- */

struct ld;

struct dread {                /* direct path: one read in flight */
	struct rx_read r;
	struct ld *L;
	uint64_t len;
};

enum slot_state { SLOT_FREE, SLOT_READING, SLOT_READ, SLOT_COPYING };

struct slot {                 /* staged path: one staging buffer */
	struct rx_read r;
	struct rx_wake_node node;
	struct ld *L;
	int idx;
	uint8_t *buf;
	enum slot_state state;
	uint64_t seq;
	uint32_t ti;              /* plan tensor */
	uint32_t shard;
	bool direct;              /* read with O_DIRECT */
	uint64_t read_off, read_len;
	uint64_t delta;           /* first wanted byte in the slot */
	uint64_t need;            /* bytes the read must deliver */
	uint64_t dst_off;         /* in the pool */
	uint64_t width, height, src_pitch;
	bool first, last;         /* of its tensor */
	int copy_res;
};

struct ld {
	struct wcd *d;
	struct wcd_version *v;
	const struct gpu_backend *be;
	int *fd;                  /* per shard: buffered */
	int *dfd;                 /* per shard: O_DIRECT, or -1 */
	uint64_t total, done_bytes, read_bytes;
	uint64_t start_ns, last_progress_ns;
	uint64_t hash_ns, copy_ns;
	int err;
	char errbuf[WC_ERR_LEN];
	/* the generator: next piece is tensor ti at byte tpos of its
	 * destination */
	uint32_t ti;
	uint64_t tpos;
	unsigned inflight;        /* reads, or slots not free */
	bool finished;
	/* direct */
	struct dread reads[WCD_READ_DEPTH];
	struct dread *free_reads[WCD_READ_DEPTH];
	unsigned nfree_reads;
	/* staged */
	unsigned nslots;
	uint64_t slot_size;
	struct slot *slots;
	struct slot *pending[WCD_SLOTS_MAX]; /* by seq % nslots */
	uint64_t next_seq, hash_seq;
	struct wc_hasher hasher;
	struct rx_wake wake;
	bool wake_open;
	bool fixed;
};

static void ld_fail(struct ld *L, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void ld_fail(struct ld *L, int code, const char *fmt, ...)
{
	va_list ap;

	if (L->err)
		return;
	L->err = code > 0 ? -code : code;
	va_start(ap, fmt);
	vsnprintf(L->errbuf, sizeof(L->errbuf), fmt, ap);
	va_end(ap);
}

static const struct plan_tensor *ld_tensor(struct ld *L, uint32_t i)
{
	return &L->v->plan.t[i];
}

static const char *shard_name(struct ld *L, uint32_t shard)
{
	return L->v->model.shards[shard].path;
}

static void ld_progress(struct ld *L)
{
	uint64_t now = rx_now_ns();

	if (now - L->last_progress_ns < PROGRESS_NS)
		return;
	L->last_progress_ns = now;
	log_info("progress: %" PRIu64 "/%" PRIu64 " bytes, %.2f GB/s",
		 L->done_bytes, L->total, gbps(L->done_bytes, now - L->start_ns));
}

/* A plan tensor whose destination bytes are one contiguous source range. */
static bool contiguous(const struct plan_tensor *t)
{
	return t->height <= 1 || t->src_pitch == t->width;
}

/* Skips empty tensors; true while pieces remain. */
static bool gen_more(struct ld *L)
{
	while (L->ti < L->v->plan.ntensors &&
	       L->tpos >= ld_tensor(L, L->ti)->size) {
		L->ti++;
		L->tpos = 0;
	}
	return L->ti < L->v->plan.ntensors && !L->err && !L->d->stopping;
}

/* --- direct path ----------------------------------------------------------- */

static void direct_issue(struct ld *L);

static void direct_read_cb(struct rx_read *r, int res)
{
	struct dread *dr = container_of(r, struct dread, r);
	struct ld *L = dr->L;

	L->inflight--;
	L->free_reads[L->nfree_reads++] = dr;
	if (res < 0)
		ld_fail(L, res, "read of %" PRIu64 " bytes at offset %" PRIu64 " failed: %s",
			dr->len, r->off, strerror(-res));
	else if ((uint64_t)res < dr->len)
		ld_fail(L, EIO,
			"a shard ended early: read %d of %" PRIu64 " bytes at offset %" PRIu64 " (was the file truncated while loading?)",
			res, dr->len, r->off);
	else {
		L->done_bytes += dr->len;
		L->read_bytes += dr->len;
	}
	ld_progress(L);
	direct_issue(L);
}

static void direct_issue(struct ld *L)
{
	while (L->nfree_reads && gen_more(L)) {
		const struct plan_tensor *t = ld_tensor(L, L->ti);
		struct gpu_pool *pool = &L->v->pools[t->pool];
		struct dread *dr = L->free_reads[--L->nfree_reads];
		uint64_t src, len;
		uint8_t *dst;
		int ret;

		if (contiguous(t)) {
			len = t->size - L->tpos;
			if (len > WCD_READ_CHUNK)
				len = WCD_READ_CHUNK;
			src = t->file_off + L->tpos;
		} else {          /* one row of a dim-1 split */
			uint64_t row = L->tpos / t->width;
			uint64_t col = L->tpos % t->width;

			len = t->width - col;
			if (len > WCD_READ_CHUNK)
				len = WCD_READ_CHUNK;
			src = t->file_off + row * t->src_pitch + col;
		}
		dst = (uint8_t *)pool->host_ptr + t->pool_off + L->tpos;
		dr->L = L;
		dr->len = len;
		ret = rx_read_start(&L->d->loop, &dr->r, L->fd[t->shard], dst,
				    len, src, -1, RX_READ_ASYNC,
				    direct_read_cb);
		if (ret) {
			L->free_reads[L->nfree_reads++] = dr;
			ld_fail(L, ret, "cannot start a read of %s: %s",
				shard_name(L, t->shard), strerror(-ret));
			break;
		}
		L->inflight++;
		L->tpos += len;
	}
	if (!L->inflight)
		L->finished = true;
}

/* Hashes every tensor in its pool (the direct path's hash phase). */
static void direct_hash(struct ld *L)
{
	uint64_t t0 = rx_now_ns();

	for (uint32_t i = 0; i < L->v->plan.ntensors; i++) {
		const struct plan_tensor *t = ld_tensor(L, i);
		const uint8_t *p = L->v->pools[t->pool].host_ptr;

		wc_hash128(p + t->pool_off, t->size, L->v->hash[i]);
	}
	L->hash_ns += rx_now_ns() - t0;
}

/* --- staged path ----------------------------------------------------------- */

static void staged_issue(struct ld *L);
static void staged_drain(struct ld *L);

/* Fills s with the next piece of the plan. */
static void staged_next_piece(struct ld *L, struct slot *s)
{
	const struct plan_tensor *t = ld_tensor(L, L->ti);
	uint64_t A = L->dfd[t->shard] >= 0 ? DIO_ALIGN : 1;
	uint64_t room = L->slot_size - 2 * A;
	uint64_t src, span;

	s->ti = L->ti;
	s->shard = t->shard;
	s->first = L->tpos == 0;
	s->dst_off = t->pool_off + L->tpos;
	if (contiguous(t)) {
		s->width = t->size - L->tpos;
		if (s->width > room)
			s->width = room;
		s->height = 1;
		s->src_pitch = s->width;
		src = t->file_off + L->tpos;
		span = s->width;
	} else {
		uint64_t row = L->tpos / t->width;
		uint64_t col = L->tpos % t->width;

		src = t->file_off + row * t->src_pitch + col;
		if (col == 0 && t->width <= room) {
			/* whole rows: as many as fit in the slot */
			uint64_t k = (room - t->width) / t->src_pitch + 1;

			if (k > t->height - row)
				k = t->height - row;
			s->width = t->width;
			s->height = k;
			s->src_pitch = t->src_pitch;
			span = (k - 1) * t->src_pitch + t->width;
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
	L->tpos += s->width * s->height;
	s->last = L->tpos >= t->size;
	s->read_off = src / A * A;
	s->delta = src - s->read_off;
	s->need = s->delta + span;
	s->read_len = gpu_align_up(s->need, A);
	s->direct = A > 1;
}

static void staged_start_read(struct ld *L, struct slot *s);

static void staged_read_cb(struct rx_read *r, int res)
{
	struct slot *s = container_of(r, struct slot, r);
	struct ld *L = s->L;

	if (res == -EINVAL && s->direct) {
		/* O_DIRECT refused after all: this shard goes buffered. */
		log_info("O_DIRECT read of %s refused; reading it buffered",
			 shard_name(L, s->shard));
		close(L->dfd[s->shard]);
		L->dfd[s->shard] = -1;
		staged_start_read(L, s);
		return;
	}
	if (res < 0)
		ld_fail(L, res, "read of %s at offset %" PRIu64 " failed: %s",
			shard_name(L, s->shard), s->read_off, strerror(-res));
	else if ((uint64_t)res < s->need)
		ld_fail(L, EIO,
			"%s ended early: read %d of %" PRIu64 " bytes at offset %" PRIu64 " (was the file truncated while loading?)",
			shard_name(L, s->shard), res, s->need, s->read_off);
	else
		L->read_bytes += (uint64_t)res;
	s->state = SLOT_READ;
	staged_drain(L);
	staged_issue(L);
}

static void staged_start_read(struct ld *L, struct slot *s)
{
	int fd = s->direct && L->dfd[s->shard] >= 0 ? L->dfd[s->shard] : -1;
	unsigned flags = RX_READ_DIRECT;
	int ret;

	if (fd < 0) {
		/* buffered: read exactly the wanted span */
		s->direct = false;
		s->read_off += s->delta;
		s->need -= s->delta;
		s->delta = 0;
		s->read_len = s->need;
		fd = L->fd[s->shard];
		flags = RX_READ_ASYNC;
	}
	ret = rx_read_start(&L->d->loop, &s->r, fd, s->buf, s->read_len,
			    s->read_off, L->fixed ? s->idx : -1, flags,
			    staged_read_cb);
	if (ret == -EINVAL && s->direct) {
		close(L->dfd[s->shard]);
		L->dfd[s->shard] = -1;
		staged_start_read(L, s);
		return;
	}
	if (ret) {
		/* Handed on as a completed (failed) read, so that the
		 * in-order drain gives the slot back. */
		ld_fail(L, ret, "cannot start a read of %s: %s",
			shard_name(L, s->shard), strerror(-ret));
		s->state = SLOT_READ;
	}
}

static void staged_issue(struct ld *L)
{
	for (unsigned i = 0; i < L->nslots && gen_more(L); i++) {
		struct slot *s = &L->slots[i];

		if (s->state != SLOT_FREE)
			continue;
		staged_next_piece(L, s);
		s->seq = L->next_seq++;
		L->pending[s->seq % L->nslots] = s;
		s->state = SLOT_READING;
		L->inflight++;
		staged_start_read(L, s);
	}
	if (L->err)
		staged_drain(L);
	if (!L->inflight)
		L->finished = true;
}

/* The backend's copy is done: maybe on a backend thread, so only hand the
 * slot back to the loop. */
static void staged_copy_done(void *arg, int res)
{
	struct slot *s = arg;

	s->copy_res = res;
	rx_wake_post(&s->L->wake, &s->node);
}

static void staged_wake_cb(struct rx_wake *w, struct rx_wake_node *node)
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
	else
		L->done_bytes += s->width * s->height;
	s->state = SLOT_FREE;
	L->inflight--;
	ld_progress(L);
	staged_issue(L);
}

/* Hands on, in plan order, every piece whose read is complete: copy, then
 * hash the slot while the copy runs. */
static void staged_drain(struct ld *L)
{
	while (L->hash_seq < L->next_seq) {
		struct slot *s = L->pending[L->hash_seq % L->nslots];
		const struct plan_tensor *t;
		struct gpu_copy c;
		uint64_t t0;
		int ret;

		if (s->seq != L->hash_seq || s->state != SLOT_READ)
			return;
		L->hash_seq++;
		s->state = SLOT_COPYING;
		if (L->err) {     /* failing: just give the slot back */
			s->state = SLOT_FREE;
			L->inflight--;
			continue;
		}
		t = ld_tensor(L, s->ti);
		c = (struct gpu_copy){
			.dst_off = s->dst_off, .src = s->buf + s->delta,
			.width = s->width, .height = s->height,
			.src_pitch = s->src_pitch, .dst_pitch = s->width,
		};
		t0 = rx_now_ns();
		ret = L->be->copy_to_pool(&L->d->dev, &L->v->pools[t->pool],
					  &c, (unsigned)(s->seq % COPY_STREAMS),
					  staged_copy_done, s);
		L->copy_ns += rx_now_ns() - t0;
		if (ret) {
			ld_fail(L, ret, "cannot start a copy to the device: %s",
				strerror(-ret));
			s->state = SLOT_FREE;
			L->inflight--;
			continue;
		}
		if (!L->v->hashed)
			continue;
		t0 = rx_now_ns();
		if (s->first)
			wc_hasher_init(&L->hasher);
		for (uint64_t r = 0; r < s->height; r++)
			wc_hasher_update(&L->hasher,
					 s->buf + s->delta + r * s->src_pitch,
					 s->width);
		if (s->last)
			wc_hasher_final(&L->hasher, L->v->hash[s->ti]);
		L->hash_ns += rx_now_ns() - t0;
	}
}

static int staged_setup(struct ld *L, char *err)
{
	struct iovec iov[WCD_SLOTS_MAX];
	int ret;

	L->nslots = L->d->o.slots;
	L->slot_size = L->d->o.slot_size;
	L->slots = calloc(L->nslots, sizeof(*L->slots));
	if (!L->slots)
		return wc_errf(err, ENOMEM, "out of memory for staging slots");
	for (unsigned i = 0; i < L->nslots; i++) {
		struct slot *s = &L->slots[i];

		s->L = L;
		s->idx = (int)i;
		ret = L->be->staging_alloc(&L->d->dev, L->slot_size,
					   (void **)&s->buf, err);
		if (ret)
			return ret;
		iov[i].iov_base = s->buf;
		iov[i].iov_len = L->slot_size;
	}
	L->fixed = rx_loop_register_buffers(&L->d->loop, iov, L->nslots) == 0;
	if (!L->fixed)
		log_info("staging slots are not registered as fixed buffers; plain reads instead");
	ret = rx_wake_init(&L->d->loop, &L->wake, staged_wake_cb);
	if (ret)
		return wc_errf(err, -ret, "rx_wake_init: %s", strerror(-ret));
	L->wake_open = true;
	return 0;
}

static void staged_teardown(struct ld *L)
{
	if (L->wake_open) {
		rx_wake_close(&L->wake);
		while (L->wake_open && rx_run_once(&L->d->loop, -1) >= 0)
			;
	}
	if (L->fixed)
		rx_loop_unregister_buffers(&L->d->loop);
	for (unsigned i = 0; L->slots && i < L->nslots; i++)
		if (L->slots[i].buf)
			L->be->staging_free(&L->d->dev, L->slots[i].buf,
					    L->slot_size);
	free(L->slots);
}

/* --- run ------------------------------------------------------------------ */

static int open_shards(struct ld *L, bool want_direct, char *err)
{
	uint32_t n = L->v->model.nshards;

	L->fd = malloc(n * sizeof(int));
	L->dfd = malloc(n * sizeof(int));
	if (!L->fd || !L->dfd)
		return wc_errf(err, ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++)
		L->fd[i] = L->dfd[i] = -1;
	for (uint32_t i = 0; i < n; i++) {
		const char *p = L->v->model.shards[i].path;

		L->fd[i] = open(p, O_RDONLY | O_CLOEXEC);
		if (L->fd[i] < 0)
			return wc_errf(err, errno, "cannot open %s: %s", p,
				       strerror(errno));
		if (want_direct)
			L->dfd[i] = open(p, O_RDONLY | O_CLOEXEC | O_DIRECT);
	}
	return 0;
}

static void close_shards(struct ld *L)
{
	for (uint32_t i = 0; L->fd && i < L->v->model.nshards; i++) {
		if (L->fd[i] >= 0)
			close(L->fd[i]);
		if (L->dfd[i] >= 0)
			close(L->dfd[i]);
	}
	free(L->fd);
	free(L->dfd);
}

static int create_pools(struct wcd *d, struct wcd_version *v, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	uint64_t free_b = 0, total_b = 0, need = 0;
	int ret;

	for (uint32_t i = 0; i < v->plan.npools; i++)
		need += gpu_align_up(v->plan.pool_size[i], d->dev.granularity);
	if (be->mem_info && be->mem_info(&d->dev, &free_b, &total_b) == 0 &&
	    need > free_b)
		return wc_errf(err, ENOMEM,
			       "the model needs %" PRIu64 " bytes on device %s but only %" PRIu64 " of %" PRIu64 " are free: free memory or use more tensor-parallel ranks",
			       need, d->dev.name, free_b, total_b);
	for (uint32_t i = 0; i < v->plan.npools; i++) {
		ret = be->pool_create(&d->dev, &v->pools[i],
				      v->plan.pool_size[i], err);
		if (ret)
			return ret;
		v->npools = i + 1;
	}
	return 0;
}

int load_run(struct wcd *d, struct wcd_version *v, char *err)
{
	struct ld *L;
	uint64_t t0, t_read;
	bool staged;
	int ret;

	ret = create_pools(d, v, err);
	if (ret)
		return ret;
	v->hash = calloc(v->plan.ntensors ? v->plan.ntensors : 1,
			 sizeof(*v->hash));
	L = calloc(1, sizeof(*L));
	if (!v->hash || !L) {
		free(L);
		return wc_errf(err, ENOMEM, "out of memory");
	}
	v->hashed = d->o.hash;
	L->d = d;
	L->v = v;
	L->be = d->dev.be;
	L->total = v->plan.total_bytes;
	staged = d->o.load_path == WCD_LOAD_STAGED ||
		 (v->npools && !v->pools[0].host_ptr);
	if (d->o.load_path == WCD_LOAD_DIRECT && staged) {
		ret = wc_errf(err, EINVAL,
			      "--load-path direct needs pools with a CPU mapping, and device %s has none: use --load-path staged",
			      d->dev.name);
		goto out_free;
	}
	ret = open_shards(L, staged, err);
	if (ret)
		goto out_close;
	if (staged) {
		ret = staged_setup(L, err);
		if (ret)
			goto out_staged;
	} else {
		for (unsigned i = 0; i < WCD_READ_DEPTH; i++)
			L->free_reads[L->nfree_reads++] = &L->reads[i];
	}
	v->phases.staged = staged;
	for (uint32_t i = 0; staged && i < v->model.nshards; i++)
		v->phases.direct_io |= L->dfd[i] >= 0;

	L->start_ns = L->last_progress_ns = t0 = rx_now_ns();
	if (staged)
		staged_issue(L);
	else
		direct_issue(L);
	while (!L->finished) {
		ret = rx_run_once(&d->loop, -1);
		if (ret < 0 && ret != -EINTR) {
			ld_fail(L, ret, "the event loop failed: %s",
				strerror(-ret));
			break;
		}
	}
	t_read = rx_now_ns() - t0;
	if (!L->err && d->stopping)
		ld_fail(L, ECANCELED, "stopped by a signal while loading");
	if (!L->err && !staged && v->hashed)
		direct_hash(L);
	if (L->err) {
		ret = wc_errf(err, L->err, "%s", L->errbuf);
		goto out_staged;
	}
	v->phases.read_s = secs(t_read);
	v->phases.read_bytes = L->read_bytes;
	v->phases.copy_s = secs(L->copy_ns);
	v->phases.hash_s = secs(L->hash_ns);
	log_info("phase read: %.3f s, %.2f GB/s (%" PRIu64 " bytes read for %" PRIu64 ", %s%s)",
		 v->phases.read_s, gbps(L->read_bytes, t_read), L->read_bytes,
		 L->total, staged ? "staged" : "direct into the pools",
		 v->phases.direct_io ? ", O_DIRECT" : "");
	if (staged)
		log_info("phase copy: %.3f s, %.2f GB/s (copy_to_pool submissions, overlapped with the reads)",
			 v->phases.copy_s, gbps(L->total, L->copy_ns));
	else
		log_info("phase copy: none (direct path: the reads landed in the pools)");
	if (v->hashed)
		log_info("phase hash: %.3f s, %.2f GB/s (XXH3-128 per tensor%s)",
			 v->phases.hash_s, gbps(L->total, L->hash_ns),
			 staged ? ", overlapped with the copies" : "");
	else
		log_info("phase hash: skipped (--no-hash)");

	/* Seal: from here on no byte of a pool changes. */
	t0 = rx_now_ns();
	for (uint32_t i = 0; i < v->npools; i++) {
		ret = L->be->pool_seal(&d->dev, &v->pools[i], err);
		if (ret)
			goto out_staged;
	}
	v->phases.publish_s = secs(rx_now_ns() - t0);
	v->load_seconds = v->phases.parse_s + secs(t_read) +
			  (staged ? 0 : v->phases.hash_s);
	v->load_gbps = v->load_seconds > 0 ?
		       (double)L->total / 1e9 / v->load_seconds : 0;
	ret = 0;
out_staged:
	if (staged)
		staged_teardown(L);
out_close:
	close_shards(L);
out_free:
	free(L);
	return ret;
}

void load_version_free(struct wcd *d, struct wcd_version *v)
{
	for (uint32_t i = 0; i < v->npools; i++)
		d->dev.be->pool_release(&d->dev, &v->pools[i]);
	free(v->hash);
	plan_free(&v->plan);
	plan_rules_free(&v->rules);
	model_close(&v->model);
	memset(v, 0, sizeof(*v));
}
