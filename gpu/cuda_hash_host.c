/* SPDX-License-Identifier: MIT */
/*
 * The device hash's host chains (cuda_hash.c runs the rest).
 *
 * Host chains: a chain is one warp's dependent 64-bit arithmetic, 15.5 ns
 * a step on an H100 or H200 (16 ms for a 1 GiB embedding, the longest
 * part of an update's commit), where a host core runs two lanes of it in
 * about 2 ns a step. So the longest tensors of a batch have their block
 * sums computed on the device in pieces of HC_PIECE blocks, lane-major
 * (gpu_cuda_xxh3_sums), each piece copied to pinned host memory as soon
 * as it is summed, and chained on the host: each pair of lanes of a
 * tensor is a task (HC_TASKS a tensor) that a worker thread (up to
 * HC_THREADS, fewer on a host of few cores) or hash_end's caller takes,
 * waits for each piece's copy event and chains; the task that ends last
 * finishes the hash from a copy of the tensor's last bytes. A task reads
 * its own lanes' words alone: the sums come from memory the device's
 * copy just wrote (in no cache), and with a block's eight words side by
 * side, read by two tasks of four lanes each (64 MB streamed by each
 * for a 1 GiB tensor), llama-8b's two 1 GiB tensors took 13.3-14.7 ms
 * on an H200 host against 5.6-6.7 ms this way (bench/RESULTS.md).
 * A tensor inside a taken one's bytes at a whole number of blocks from
 * its start (a fused view's part, an alias) reads that one's sums: no
 * sums or copies of its own. The rest of the batch runs on the device as
 * before, beside them. Only where the caller asks (gpu_dev.hash_host_chains: an
 * update's commit; gpu.h says why). Which go (hc_take): longest first, while a tensor's chain on the
 * device (HC_DEV_STEP_PS a block) would outlast both the batch's block
 * sums (HC_SUM_PS a block, every tensor's: the device reads them all
 * either way) and the copies of the sums to the host so far, itself
 * included (HC_D2H_PS a block: they go one after another; a part adds
 * none); at most HC_MAX_BLOCKS, HC_MAX_T tensors, none under
 * HC_MIN_BLOCKS.
 * WCACHE_CUDA_HOST_CHAINS=0 keeps every chain on the device.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_hash_priv.h"
#include "xxh3_split.h"

#define HC_DEV_STEP_PS 15500u          /* a chain step on the device */
#define HC_SUM_PS 420u                 /* 1 KiB summed at 2.5 TB/s */
#define HC_D2H_PS 1300u                /* 64 bytes of sums at 50 GB/s */
#define HC_MIN_BLOCKS (1u << 14)       /* 16 MiB: a 0.25 ms chain */
#define HC_MAX_BLOCKS (1u << 22)       /* 4 GiB of tensors, 256 MiB of sums */
#define HC_PIECE (1u << 15)            /* 32 MiB of a tensor, 2 MiB of sums */

static void hc_pool_free(struct cuda_hash *h);

void gpu_cuda_hc_free(struct cuda_hash *h)
{
	hc_pool_free(h);
	for (unsigned i = 0; i < h->hc_nev; i++)
		cudaEventDestroy(h->hc_ev[i]);
	free(h->hc_ev);
	for (unsigned i = 0; i < 2; i++)
		if (h->hcs[i])
			cudaStreamDestroy(h->hcs[i]);
	if (h->hc_dscr)
		cudaFree(h->hc_dscr);
	if (h->hc_host)
		cudaFreeHost(h->hc_host);
}

/* Task k of the host chains: lanes (k % HC_TASKS) * 2 and the next of
 * tensor k / HC_TASKS, each piece of the sums it reads (lane-major:
 * gpu_cuda_xxh3_sums) chained once that piece's copy to the host has
 * landed (a part's blocks lie at an offset in its holder's pieces: it
 * waits for each piece its blocks span). */
static void hc_run(struct cuda_hash *h, uint32_t k)
{
	struct hc_tensor *t = &h->hc_t[k / HC_TASKS];
	const uint64_t *sums = (const uint64_t *)(h->hc_host +
						  (size_t)HC_MAX_T * XS_BLOCK);
	unsigned l0 = k % HC_TASKS * 2;
	uint64_t kw[XS_SECRET_WORDS], acc[8];

	xs_secret_words(kw);
	xs_init(acc);
	for (uint64_t b = 0; b < t->nblk;) {
		uint64_t hb = t->at + b, p = hb / HC_PIECE, o = hb % HC_PIECE;
		uint64_t np = t->hn - p * HC_PIECE, n = HC_PIECE - o;
		cudaError_t e = cudaEventSynchronize(h->hc_ev[2 * (t->piece0 + p) + 1]);
		int none = cudaSuccess;

		if (e != cudaSuccess) {
			__atomic_compare_exchange_n(&h->hc_err, &none, (int)e,
						    false, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED);
			return;
		}
		if (np > HC_PIECE)
			np = HC_PIECE;
		if (n > t->nblk - b)
			n = t->nblk - b;
		xs_chain2(acc, l0, sums + 8 * (t->flat0 + p * HC_PIECE) +
				   l0 * np + o, np, n, kw);
		b += n;
	}
	memcpy(t->acc + l0, acc + l0, 2 * sizeof(*acc));
	if (__atomic_sub_fetch(&t->tasks_left, 1, __ATOMIC_ACQ_REL) == 0)
		xs_finish_tail(t->acc, t->tail, t->len, t->out);
}

/* Takes tasks until none is left (the workers, and hash_end's caller). */
static void hc_drain(struct cuda_hash *h)
{
	uint32_t k;

	while ((k = __atomic_fetch_add(&h->hc_next, 1, __ATOMIC_RELAXED)) <
	       HC_TASKS * h->hc_n)
		hc_run(h, k);
}

/* A worker: for each hash handed out (a new gen with h set), its tasks
 * until none is left, then sleep until the next or stop. */
static void *hc_thread(void *arg)
{
	struct hc_pool *pl = arg;
	uint64_t seen = 0;

	pthread_mutex_lock(&pl->mu);
	for (;;) {
		struct cuda_hash *h;

		while (!pl->stop && (pl->gen == seen || !pl->h))
			pthread_cond_wait(&pl->go, &pl->mu);
		if (pl->stop)
			break;
		seen = pl->gen;
		h = pl->h;
		pl->busy++;
		pthread_mutex_unlock(&pl->mu);
		cudaSetDevice(pl->ordinal); /* a failure shows in the waits */
		hc_drain(h);
		pthread_mutex_lock(&pl->mu);
		if (--pl->busy == 0)
			pthread_cond_broadcast(&pl->done);
	}
	pthread_mutex_unlock(&pl->mu);
	return NULL;
}

/* Stops h's workers and frees them (no hash of theirs running). */
static void hc_pool_free(struct cuda_hash *h)
{
	struct hc_pool *pl = h->hc_pool;

	if (!pl)
		return;
	pthread_mutex_lock(&pl->mu);
	pl->stop = true;
	pthread_cond_broadcast(&pl->go);
	pthread_mutex_unlock(&pl->mu);
	for (unsigned i = 0; i < pl->nth; i++)
		pthread_join(pl->th[i], NULL);
	pthread_cond_destroy(&pl->go);
	pthread_cond_destroy(&pl->done);
	pthread_mutex_destroy(&pl->mu);
	free(pl);
	h->hc_pool = NULL;
}

/* h's tasks handed to want workers (made as far as they are missing and
 * can be made: fewer is slower, not wrong, since hash_end's caller takes
 * what is left). */
static void hc_pool_give(struct cuda_hash *h, int ordinal, unsigned want)
{
	struct hc_pool *pl = h->hc_pool;

	if (!pl) {
		pl = calloc(1, sizeof(*pl));
		if (!pl)
			return;
		pthread_mutex_init(&pl->mu, NULL);
		pthread_cond_init(&pl->go, NULL);
		pthread_cond_init(&pl->done, NULL);
		h->hc_pool = pl;
	}
	pthread_mutex_lock(&pl->mu);
	pl->ordinal = ordinal;
	pl->h = h;
	pl->gen++;
	while (pl->nth < want &&
	       !pthread_create(&pl->th[pl->nth], NULL, hc_thread, pl))
		pl->nth++;
	pthread_cond_broadcast(&pl->go);
	pthread_mutex_unlock(&pl->mu);
}

/* The cores this process may run on (1 where that cannot be read). */
static unsigned hc_cores(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	return (unsigned)CPU_COUNT(&set);
}

/* hc_queue's streams, events (2 a piece, npiece pieces), device scratch and
 * pinned host memory for blocks sums; false where any cannot be had. */
static bool hc_ready(struct cuda_hash *h, uint64_t blocks, unsigned npiece)
{
	cudaError_t e = cudaSuccess;
	int lo, hi;

	if (cudaDeviceGetStreamPriorityRange(&lo, &hi) != cudaSuccess)
		lo = hi = 0;
	for (unsigned i = 0; i < 2 && e == cudaSuccess; i++)
		if (!h->hcs[i])
			e = cudaStreamCreateWithPriority(&h->hcs[i],
							 cudaStreamNonBlocking, hi);
	if (e == cudaSuccess && h->hc_nev < 2 * npiece) {
		cudaEvent_t *ev = realloc(h->hc_ev, sizeof(*ev) * 2 * npiece);

		if (!ev) {
			cudaGetLastError();
			return false;
		}
		h->hc_ev = ev;
		while (h->hc_nev < 2 * npiece &&
		       (e = cudaEventCreateWithFlags(&ev[h->hc_nev],
						     cudaEventDisableTiming)) ==
			       cudaSuccess)
			h->hc_nev++;
	}
	if (e == cudaSuccess && h->hc_blocks < blocks) {
		if (h->hc_dscr)
			cudaFree(h->hc_dscr);
		if (h->hc_host)
			cudaFreeHost(h->hc_host);
		h->hc_dscr = NULL;
		h->hc_host = NULL;
		h->hc_blocks = 0;
		e = cudaMalloc((void **)&h->hc_dscr, 64 * blocks);
		if (e == cudaSuccess)
			e = cudaMallocHost((void **)&h->hc_host,
					   (size_t)HC_MAX_T * XS_BLOCK + 64 * blocks);
		if (e == cudaSuccess)
			h->hc_blocks = blocks;
	}
	if (e != cudaSuccess) {
		cudaGetLastError();      /* not sticky: the device chains run */
		return false;
	}
	return true;
}

/* Job j is a part of an earlier job m < j (hj longest first) that is no
 * part itself: its bytes inside m's at a whole number of blocks from
 * m's start. Its holder's index into holder[j] (else holder[j] = j). */
static void hc_part_of(const struct xk_job_h *hj, uint32_t j,
		       uint32_t *holder)
{
	holder[j] = j;
	for (uint32_t m = 0; m < j; m++)
		if (holder[m] == m && hj[j].base >= hj[m].base &&
		    (hj[j].base - hj[m].base) % XS_BLOCK == 0 &&
		    hj[j].base + hj[j].len <= hj[m].base + hj[m].len) {
			holder[j] = m;
			return;
		}
}

/* How many of the jobs hj (longest first) go to the host (the file's
 * head says which; a part of one taken reads that one's sums: no sums,
 * no copy of its own); their summed blocks in *total, their pieces in
 * *npiece, each one's holder in holder[] (HC_MAX_T entries). */
static uint32_t hc_take(const struct xk_job_h *hj, uint32_t n,
			uint64_t *total, unsigned *npiece, uint32_t *holder)
{
	uint64_t all = 0;
	uint32_t k = 0;

	*total = 0;
	*npiece = 0;
	for (uint32_t j = 0; j < n; j++)
		all += xs_nblocks(hj[j].len);
	for (; k < n && k < HC_MAX_T; k++) {
		uint64_t nb = xs_nblocks(hj[k].len), dev_ps = nb * HC_DEV_STEP_PS;
		bool part;

		hc_part_of(hj, k, holder);
		part = holder[k] != k;
		if (nb <= HC_MIN_BLOCKS || dev_ps <= all * HC_SUM_PS ||
		    (!part && (*total + nb > HC_MAX_BLOCKS ||
			       dev_ps <= (*total + nb) * HC_D2H_PS)))
			break;
		if (part)
			continue;
		*total += nb;
		*npiece += (unsigned)((nb + HC_PIECE - 1) / HC_PIECE);
	}
	return k;
}

/* Queues on the copy stream the copy of job j's bytes from xs_tail_off
 * to its end into t's tail (t: its host tensor). */
static cudaError_t hc_tail(struct cuda_hash *h, const struct xk_job_h *j,
			   const struct hc_tensor *t)
{
	uint64_t t0 = xs_tail_off(j->len);

	return cudaMemcpyAsync((void *)t->tail,
			       (const uint8_t *)(uintptr_t)j->base + t0,
			       j->len - t0, cudaMemcpyDeviceToHost, h->hcs[1]);
}

/*
 * The host chains (see the file's head) of the longest jobs at the front
 * of hj (n of them, longest first), queued after the copy event ev and
 * their workers started; *taken gets how many (0: none long enough, the
 * host chains off, or their memory, events or streams not to be had:
 * the device chains take them). 0 or a cudaError_t.
 */
int gpu_cuda_hc_queue(struct cuda_hash *h, const struct gpu_dev *dev,
		      const struct xk_job_h *hj, uint32_t n, cudaEvent_t ev,
		      const uint8_t *results, uint32_t *taken)
{
	const char *env = getenv("WCACHE_CUDA_HOST_CHAINS");
	uint64_t total = 0, flat = 0;
	uint32_t k, s0 = h->nsegs, s, holder[HC_MAX_T];
	unsigned npiece = 0, cores = hc_cores(), want;
	uint8_t *tails;
	uint64_t *sums;
	cudaError_t e;

	*taken = 0;
	if (!dev->hash_host_chains || h->hc_tried || cores < 2 ||
	    (env && !strcmp(env, "0")))
		return 0;
	k = hc_take(hj, n, &total, &npiece, holder);
	if (!k || npiece > h->segs_cap - h->nsegs)
		return 0;
	h->hc_tried = true;
	h->hc_t = calloc(k, sizeof(*h->hc_t));
	if (!h->hc_t || !hc_ready(h, total, npiece)) {
		free(h->hc_t);
		h->hc_t = NULL;
		return 0;
	}
	tails = h->hc_host;
	sums = (uint64_t *)(h->hc_host + (size_t)HC_MAX_T * XS_BLOCK);
	s = s0;
	npiece = 0;
	for (uint32_t j = 0; j < k; j++) {
		struct hc_tensor *t = &h->hc_t[j];

		*t = (struct hc_tensor){
			.len = hj[j].len, .nblk = xs_nblocks(hj[j].len),
			.flat0 = flat, .hn = xs_nblocks(hj[j].len),
			.i = (uint32_t)((hj[j].out - (uint64_t)(uintptr_t)results) / 16),
			.piece0 = npiece, .tail = tails + (size_t)j * XS_BLOCK,
			.tasks_left = HC_TASKS,
		};
		if (holder[j] != j) {    /* a part: its holder's sums */
			const struct hc_tensor *ht = &h->hc_t[holder[j]];

			t->at = (hj[j].base - hj[holder[j]].base) / XS_BLOCK;
			t->flat0 = ht->flat0;
			t->hn = ht->nblk;
			t->piece0 = ht->piece0;
			continue;
		}
		for (uint64_t b = 0; b < t->nblk; b += HC_PIECE, npiece++)
			h->segs[s++] = (struct hash_seg){
				.base = hj[j].base, .len = hj[j].len, .b0 = b,
				.nblk = t->nblk - b < HC_PIECE ? t->nblk - b :
								  HC_PIECE,
			};
		flat += t->nblk;
	}
	/* h->segs lives until hash_end: the copy may read it late */
	e = cudaStreamWaitEvent(h->hcs[0], ev, 0);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(h->d_segs + s0, h->segs + s0,
				    sizeof(*h->segs) * (s - s0),
				    cudaMemcpyHostToDevice, h->hcs[0]);
	for (uint32_t j = 0, p = 0; j < k && e == cudaSuccess; j++) {
		struct hc_tensor *t = &h->hc_t[j];

		if (holder[j] != j)
			continue;
		for (uint64_t b = 0; b < t->nblk && e == cudaSuccess;
		     b += HC_PIECE, p++) {
			uint64_t nb = t->nblk - b < HC_PIECE ? t->nblk - b :
							       HC_PIECE;
			uint64_t at = 8 * (t->flat0 + b);

			e = (cudaError_t)gpu_cuda_xxh3_sums(
				h->hcs[0], h->d_segs + s0 + p, 1, nb,
				h->hc_dscr + at);
			if (e == cudaSuccess)
				e = cudaEventRecord(h->hc_ev[2 * p], h->hcs[0]);
			if (e == cudaSuccess)
				e = cudaStreamWaitEvent(h->hcs[1],
							h->hc_ev[2 * p], 0);
			if (e == cudaSuccess)
				e = cudaMemcpyAsync(sums + at, h->hc_dscr + at,
						    64 * nb,
						    cudaMemcpyDeviceToHost,
						    h->hcs[1]);
			/* the tails: its parts' with its first piece (a
			 * part's waits are all for its pieces' events), its
			 * own with its last */
			for (uint32_t m = j + 1; !b && m < k && e == cudaSuccess;
			     m++)
				if (holder[m] == j)
					e = hc_tail(h, &hj[m], &h->hc_t[m]);
			if (e == cudaSuccess && b + nb == t->nblk)
				e = hc_tail(h, &hj[j], t);
			if (e == cudaSuccess)
				e = cudaEventRecord(h->hc_ev[2 * p + 1],
						    h->hcs[1]);
		}
	}
	h->nsegs = s;
	if (e != cudaSuccess)
		return (int)e;
	/* every event is recorded before a worker waits for one */
	h->hc_n = k;
	h->hc_next = 0;
	want = cores - 1 < HC_THREADS ? cores - 1 : HC_THREADS;
	if (want > HC_TASKS * k)
		want = HC_TASKS * k;
	hc_pool_give(h, dev->ordinal, want);
	*taken = k;
	return 0;
}

/* hash_end's part: the tasks left taken, the workers out of them (they
 * sleep until the next hash); 0 or the first failed wait's cudaError_t. */
int gpu_cuda_hc_end(struct cuda_hash *h)
{
	struct hc_pool *pl = h->hc_pool;

	hc_drain(h);
	if (pl) {
		pthread_mutex_lock(&pl->mu);
		while (pl->busy)
			pthread_cond_wait(&pl->done, &pl->mu);
		pl->h = NULL;      /* a worker waking late takes nothing */
		pthread_mutex_unlock(&pl->mu);
	}
	return h->hc_err;
}

