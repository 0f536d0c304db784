/* SPDX-License-Identifier: MIT */
/*
 * The host chains' workers (gpu/cuda_hash_host.c), run here without a GPU:
 * the file is compiled in with its one wait (cudaEventSynchronize, a
 * piece's copy to the host) replaced by a clock (each piece lands at a
 * random time up to 0.3 ms after its hash began). Hash after hash, the
 * kept workers (1 to HC_THREADS of them) and hash_end's caller take every
 * task: when gpu_cuda_hc_end returns, every tensor's hash, whole ones over
 * one to three pieces and parts that read a holder's sums at a block
 * offset, equals libxxhash's; no error is left; between hashes the tensors'
 * memory is freed (a worker that touched a finished hash's state would
 * read freed memory, which the sanitizer build reports). The pool stops
 * and joins its workers at the end.
 * Skips (77) where the build has no CUDA headers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "t.h"

#if WC_CUDA
#define cudaEventSynchronize hc_fake_sync
#include "cuda_hash_host.c"
#undef cudaEventSynchronize

#include "hash.h"

/* a piece's copy event: when it lands (CLOCK_MONOTONIC ns) */
struct fake_ev {
	uint64_t at;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

cudaError_t hc_fake_sync(cudaEvent_t e)
{
	const struct fake_ev *f = (const struct fake_ev *)e;

	while (now_ns() < __atomic_load_n(&f->at, __ATOMIC_ACQUIRE))
		sched_yield();
	return cudaSuccess;
}

static uint64_t rng = 0x6a09e667f3bcc908ull;

static uint64_t next(void)
{
	return t_xorshift(&rng);
}

#define NB_MAX (3u * HC_PIECE)            /* the data: 96 MiB of blocks */
#define T_MAX 6u

/* a tensor of a hash: its block offset in the data, its length, and
 * which earlier one holds it (itself: none) */
struct tt {
	uint64_t w, len;
	uint32_t holder;
};

/* One hash of the tensors tt[0..n) (holders before their parts) over
 * the data's block sums bs (eight words a block) through the workers of
 * h; checks every result against libxxhash's of its bytes. */
static void one_hash(struct cuda_hash *h, const uint8_t *data,
		     const uint64_t *bs, const struct tt *tt, uint32_t n,
		     unsigned want)
{
	uint64_t flat = 0, t0 = now_ns();
	uint32_t npiece = 0;
	uint64_t *sums;
	struct fake_ev *ev;

	h->hc_t = calloc(n, sizeof(*h->hc_t));
	T_ASSERT(h->hc_t);
	for (uint32_t j = 0; j < n; j++)
		if (tt[j].holder == j)
			npiece += (uint32_t)((xs_nblocks(tt[j].len) + HC_PIECE - 1) / HC_PIECE);
	ev = calloc(2 * npiece, sizeof(*ev));
	h->hc_ev = calloc(2 * npiece, sizeof(*h->hc_ev));
	T_ASSERT(ev && h->hc_ev);
	sums = (uint64_t *)(h->hc_host + (size_t)HC_MAX_T * XS_BLOCK);
	npiece = 0;
	for (uint32_t j = 0; j < n; j++) {
		struct hc_tensor *t = &h->hc_t[j];
		uint64_t nb = xs_nblocks(tt[j].len), off = xs_tail_off(tt[j].len);
		uint8_t *tail = h->hc_host + (size_t)j * XS_BLOCK;

		*t = (struct hc_tensor){ .len = tt[j].len, .nblk = nb,
					 .flat0 = flat, .hn = nb, .i = j,
					 .piece0 = npiece, .tail = tail,
					 .tasks_left = HC_TASKS };
		memcpy(tail, data + tt[j].w * XS_BLOCK + off, tt[j].len - off);
		if (tt[j].holder != j) {
			const struct hc_tensor *ht = &h->hc_t[tt[j].holder];

			t->at = tt[j].w - tt[tt[j].holder].w;
			t->flat0 = ht->flat0;
			t->hn = ht->nblk;
			t->piece0 = ht->piece0;
			continue;
		}
		/* its sums, lane-major in each piece, as the device writes them */
		for (uint64_t b = 0; b < nb; b += HC_PIECE, npiece++) {
			uint64_t np = nb - b < HC_PIECE ? nb - b : HC_PIECE;

			for (uint64_t q = 0; q < np; q++)
				for (unsigned l = 0; l < 8; l++)
					sums[8 * (flat + b) + l * np + q] =
						bs[8 * (tt[j].w + b + q) + l];
			ev[2 * npiece + 1].at = t0 + next() % 300000;
			h->hc_ev[2 * npiece + 1] = (cudaEvent_t)&ev[2 * npiece + 1];
		}
		flat += nb;
	}
	h->hc_n = n;
	h->hc_next = 0;
	h->hc_err = 0;
	hc_pool_give(h, 0, want);
	T_EQ_INT(gpu_cuda_hc_end(h), 0);
	for (uint32_t j = 0; j < n; j++) {
		uint8_t want_h[16];

		base_hash128(data + tt[j].w * XS_BLOCK, tt[j].len, want_h);
		if (memcmp(want_h, h->hc_t[j].out, 16))
			T_FAIL("tensor %u of %u (%llu bytes at block %llu, holder %u; %u workers asked): the host chains' hash differs from libxxhash's",
			       j, n, (unsigned long long)tt[j].len,
			       (unsigned long long)tt[j].w, tt[j].holder, want);
		T_EQ_INT(h->hc_t[j].tasks_left, 0);
	}
	/* a worker touching them after hc_end reads freed memory */
	free(h->hc_t);
	free(h->hc_ev);
	free(ev);
	h->hc_t = NULL;
	h->hc_ev = NULL;
	h->hc_n = 0;
}

/* A random set of tensors: a holder or two, whole ones, and parts at a
 * block offset inside an earlier holder; big: one of 1 to 3 pieces. */
static uint32_t pick(struct tt *tt, bool big)
{
	uint32_t n = 1 + (uint32_t)(next() % T_MAX);

	for (uint32_t j = 0; j < n; j++) {
		uint64_t nb = big && !j ? HC_PIECE / 2 + next() % (NB_MAX - HC_PIECE / 2 - 4) :
					  1 + next() % 600;

		tt[j] = (struct tt){ .w = next() % (NB_MAX - nb - 2),
				     .len = nb * XS_BLOCK + 1 + next() % XS_BLOCK,
				     .holder = j };
		if (j && next() % 3 == 0 && tt[0].len > 2 * XS_BLOCK) {
			/* a part of tensor 0: whole blocks in, inside its end */
			uint64_t h_nb = tt[0].len / XS_BLOCK;
			uint64_t at = next() % (h_nb - 1);

			tt[j].w = tt[0].w + at;
			tt[j].len = XS_MIN_LEN + 1 +
				    next() % (tt[0].len - at * XS_BLOCK - XS_MIN_LEN);
			tt[j].holder = 0;
		}
	}
	return n;
}

int main(void)
{
	size_t data_len = (size_t)(NB_MAX + 2) * XS_BLOCK;
	uint8_t *data = malloc(data_len);
	uint64_t *bs = malloc(sizeof(uint64_t) * 8 * (NB_MAX + 1));
	struct cuda_hash h = { 0 };
	uint64_t kw[XS_SECRET_WORDS];
	struct tt tt[T_MAX];
	unsigned rounds = 0, tensors = 0;

	T_ASSERT(data && bs);
	for (size_t i = 0; i < data_len; i += 8) {
		uint64_t v = next();

		memcpy(data + i, &v, 8);
	}
	xs_secret_words(kw);
	for (uint64_t b = 0; b <= NB_MAX; b++)
		xs_block_sum(bs + 8 * b, data + b * XS_BLOCK, kw);
	h.hc_host = malloc((size_t)HC_MAX_T * XS_BLOCK + 64 * (size_t)NB_MAX * T_MAX);
	T_ASSERT(h.hc_host);
	for (unsigned r = 0; r < 400; r++) {
		uint32_t n = pick(tt, r % 50 == 7);

		one_hash(&h, data, bs, tt, n, 1 + r % HC_THREADS);
		rounds++;
		tensors += n;
	}
	T_ASSERT(h.hc_pool && h.hc_pool->nth >= 1 &&
		 h.hc_pool->nth <= HC_THREADS);
	printf("%u hashes (%u tensors) through %u kept workers: every hash equals libxxhash's\n",
	       rounds, tensors, h.hc_pool->nth);
	hc_pool_free(&h);
	T_ASSERT(!h.hc_pool);
	free(h.hc_host);
	free(bs);
	free(data);
	return 0;
}
#else
int main(void)
{
	T_SKIP_IF(1, "this build has no CUDA headers (the host chains are CUDA's)");
	return 0;
}
#endif
