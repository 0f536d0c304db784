/* SPDX-License-Identifier: MIT */
/*
 * The ceilings the loader is measured against, on the machine it runs on:
 *   - pinned host-to-device copy rate through the CUDA backend (staging from
 *     staging_alloc, a VMM pool, copy_to_pool over N streams), for several
 *     chunk sizes and stream counts;
 *   - XXH3-128 hashing rate of one CPU thread over memory that is not in
 *     cache, alone and while the copies run (do they contend?).
 *
 *   gpu_h2d [--gib N]    N GiB copied per configuration (default 8)
 *   gpu_h2d --mem        only the device memory of a context and a pool
 *
 * Rates are 1e9 bytes per second. Exits 77 where no GPU is found.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "gpu.h"
#include "clock.h"

#define STAGE_BYTES (1ull << 30)
#define POOL_BYTES (4ull << 30)

static atomic_long done_n;

static void on_done(void *arg, int res)
{
	(void)arg;
	(void)res;
	atomic_fetch_add(&done_n, 1);
}

/* Copies total bytes in chunk-sized pieces round-robin over streams, with
 * at most 2 * streams copies queued (like a slot ring); returns GB/s. */
static double h2d(const struct gpu_backend *be, struct gpu_dev *dev,
		  struct gpu_pool *pool, const unsigned char *stage,
		  uint64_t chunk, unsigned streams, uint64_t total)
{
	uint64_t n = total / chunk, i, inflight = 2 * streams;
	struct gpu_copy c = { .height = 1 };
	double t0;
	int ret;

	atomic_store(&done_n, 0);
	t0 = clock_secs();
	for (i = 0; i < n; i++) {
		while ((long)i - atomic_load(&done_n) >= (long)inflight)
			;
		c.dst_off = (i * chunk) % (POOL_BYTES - chunk + 1) / 256 * 256;
		c.src = stage + (i * chunk) % (STAGE_BYTES - chunk + 1);
		c.width = chunk;
		ret = be->copy_to_pool(dev, pool, &c, (unsigned)(i % streams),
				       on_done, NULL);
		if (ret) {
			fprintf(stderr, "copy_to_pool: %d\n", ret);
			exit(1);
		}
	}
	while (atomic_load(&done_n) < (long)n)
		;
	return n * chunk / (clock_secs() - t0) / 1e9;
}

static unsigned char *hash_buf;
static atomic_int hash_stop;
static double hash_gbps;

/* Hashes 64 MiB "tensors" of a 1 GiB buffer until told to stop. */
static void *hash_thread(void *arg)
{
	uint64_t bytes = 0, piece = 64ull << 20, off = 0;
	volatile uint64_t sink = 0;
	double t0 = clock_secs();

	(void)arg;
	do {
		XXH128_hash_t h = XXH3_128bits(hash_buf + off, piece);

		sink ^= h.low64;
		bytes += piece;
		off = (off + piece) % STAGE_BYTES;
	} while (!atomic_load(&hash_stop) || bytes < STAGE_BYTES);
	hash_gbps = bytes / (clock_secs() - t0) / 1e9;
	return NULL;
}

struct mt_arg {
	const unsigned char *p;
	uint64_t len;
};

static void *hash_part(void *arg)
{
	struct mt_arg *m = arg;
	volatile uint64_t sink = 0;
	uint64_t off;
	int rep;

	for (rep = 0; rep < 4; rep++)
		for (off = 0; off < m->len; off += 16ull << 20)
			sink ^= XXH3_128bits(m->p + off, 16ull << 20).low64;
	return NULL;
}

/* T threads hash disjoint parts of the buffer, 4 passes; returns GB/s. */
static double hash_mt(unsigned t)
{
	struct mt_arg args[16];
	pthread_t th[16];
	uint64_t part = STAGE_BYTES / t / (16ull << 20) * (16ull << 20);
	double t0 = clock_secs();
	unsigned i;

	for (i = 0; i < t; i++) {
		args[i].p = hash_buf + i * part;
		args[i].len = part;
		pthread_create(&th[i], NULL, hash_part, &args[i]);
	}
	for (i = 0; i < t; i++)
		pthread_join(th[i], NULL);
	return 4.0 * part * t / (clock_secs() - t0) / 1e9;
}

int main(int argc, char **argv)
{
	static const uint64_t chunks[] = { 2ull << 20, 8ull << 20, 32ull << 20, 128ull << 20 };
	static const unsigned nstreams[] = { 1, 2, 4 };
	const struct gpu_backend *be = gpu_cuda_backend();
	uint64_t total = 8ull << 30, best_chunk = 0, f0 = 0, f1 = 0, t = 0;
	double r, best = 0;
	unsigned best_s = 0;
	char err[BASE_ERR_LEN];
	struct gpu_pool pool;
	struct gpu_dev dev;
	unsigned char *stage;
	pthread_t th;
	size_t a, b;

	if (argc == 3 && !strcmp(argv[1], "--gib"))
		total = strtoull(argv[2], NULL, 10) << 30;
	if (!be || be->open(&dev, "0", err)) {
		printf("skip: %s\n", be ? err : "built without CUDA");
		return 77;
	}
	be->mem_info(&dev, &f0, &t);
	if (be->staging_alloc(&dev, STAGE_BYTES, (void **)&stage, err) ||
	    be->pool_create(&dev, &pool, POOL_BYTES, err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	be->mem_info(&dev, &f1, &t);
	/* alone on the GPU: used memory is this process's */
	printf("device memory used: %llu MiB after open, %llu MiB with a %llu MiB pool (context %llu MiB%s)\n",
	       (unsigned long long)((t - f0) >> 20), (unsigned long long)((t - f1) >> 20),
	       (unsigned long long)(POOL_BYTES >> 20),
	       (unsigned long long)((t - f1 - POOL_BYTES) >> 20),
	       getenv("WCACHE_CUDA_KEEP_LIMITS") ? ", default limits" : ", limits trimmed");
	if (argc == 2 && !strcmp(argv[1], "--mem"))
		return 0;
	memset(stage, 0x5a, STAGE_BYTES);
	hash_buf = malloc(STAGE_BYTES);
	if (!hash_buf)
		return 1;
	memset(hash_buf, 0xa5, STAGE_BYTES);
	printf("device %s; %llu GiB per configuration\n", dev.name,
	       (unsigned long long)(total >> 30));
	h2d(be, &dev, &pool, stage, 32ull << 20, 2, 1ull << 30);   /* warm-up */
	for (a = 0; a < sizeof(chunks) / sizeof(chunks[0]); a++) {
		for (b = 0; b < sizeof(nstreams) / sizeof(nstreams[0]); b++) {
			r = h2d(be, &dev, &pool, stage, chunks[a], nstreams[b], total);
			printf("h2d chunk %3llu MiB, %u stream(s): %6.2f GB/s\n",
			       (unsigned long long)(chunks[a] >> 20), nstreams[b], r);
			if (r > best) {
				best = r;
				best_chunk = chunks[a];
				best_s = nstreams[b];
			}
		}
	}
	printf("h2d ceiling: %.2f GB/s (chunk %llu MiB, %u streams)\n", best,
	       (unsigned long long)(best_chunk >> 20), best_s);

	atomic_store(&hash_stop, 1);
	hash_thread(NULL);
	printf("xxh3-128, 1 thread, alone: %.2f GB/s\n", hash_gbps);
	atomic_store(&hash_stop, 0);
	pthread_create(&th, NULL, hash_thread, NULL);
	r = h2d(be, &dev, &pool, stage, best_chunk, best_s, total);
	atomic_store(&hash_stop, 1);
	pthread_join(th, NULL);
	printf("concurrently: h2d %.2f GB/s, xxh3-128 1 thread %.2f GB/s\n", r, hash_gbps);
	for (a = 1; a <= 8; a *= 2)
		printf("xxh3-128, %zu threads: %.2f GB/s\n", a, hash_mt((unsigned)a));

	be->pool_release(&dev, &pool);
	be->staging_free(&dev, stage, STAGE_BYTES);
	free(hash_buf);
	be->close(&dev);
	return 0;
}
