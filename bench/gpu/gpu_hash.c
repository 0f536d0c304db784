/* SPDX-License-Identifier: MIT */
/*
 * Can the loader hash (XXH3-128 per tensor) as fast as PCIe copies? Measures,
 * on the machine it runs on (the GPU host's CPU):
 *   - base_hash128 (proto/base/hash.c, what wcd uses: xxHash inlined, built with
 *     the project's flags, so SSE2 on x86-64),
 *   - the same XXH3-128 inlined here with AVX2 enabled (where the CPU has it),
 * each on memory not in cache (a 1 GiB buffer, 16 MiB pieces: like tensors
 * arriving in staging) and in cache (one 4 MiB piece again and again), with
 * 1, 2, 4 and 8 threads. Checks that both give the same hash.
 *
 *   gpu_hash
 *
 * Rates are 1e9 bytes per second.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hash.h"

#pragma GCC push_options
#pragma GCC target("avx2")
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include "clock.h"

static void hash_avx2(const void *p, size_t n, uint8_t out[16])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(p, n));
	memcpy(out, c.digest, 16);
}
#pragma GCC pop_options

#define BUF_BYTES (1ull << 30)
#define PIECE (16ull << 20)
#define HOT (4ull << 20)

typedef void (*hash_fn)(const void *p, size_t n, uint8_t out[16]);

struct job {
	hash_fn fn;
	const unsigned char *p;
	uint64_t len;
	bool hot;
};

static unsigned char *buf;

/* Hashes len bytes: fresh memory in PIECE steps, or one HOT block again. */
static void *run_job(void *arg)
{
	struct job *j = arg;
	volatile uint8_t sink = 0;
	uint8_t h[16];
	uint64_t off;

	for (off = 0; off < j->len; off += j->hot ? HOT : PIECE) {
		j->fn(j->hot ? j->p : j->p + off, j->hot ? HOT : PIECE, h);
		sink ^= h[0];
	}
	return NULL;
}

static double rate(hash_fn fn, unsigned threads, bool hot)
{
	uint64_t part = BUF_BYTES / threads / PIECE * PIECE;
	struct job jobs[8];
	pthread_t th[8];
	double t0;
	unsigned i;

	t0 = clock_secs();
	for (i = 0; i < threads; i++) {
		jobs[i] = (struct job){ fn, buf + i * part, part, hot };
		pthread_create(&th[i], NULL, run_job, &jobs[i]);
	}
	for (i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	return (double)part * threads / (clock_secs() - t0) / 1e9;
}

int main(void)
{
	static const struct {
		const char *name;
		hash_fn fn;
	} fns[] = { { "base_hash128 (sse2)", base_hash128 }, { "xxh3-128 avx2", hash_avx2 } };
	uint8_t a[16], b[16];
	unsigned t;
	size_t f;
	int hot;

	buf = malloc(BUF_BYTES);
	if (!buf)
		return 1;
	for (size_t i = 0; i < BUF_BYTES; i += 8)
		*(uint64_t *)(buf + i) = i * 0x9e3779b97f4a7c15ull;
	base_hash128(buf, 12345677, a);
	if (!__builtin_cpu_supports("avx2")) {
		printf("no AVX2 on this CPU: only base_hash128\n");
		for (t = 1; t <= 8; t *= 2)
			printf("%s cold, %u thread(s): %.2f GB/s\n", fns[0].name, t,
			       rate(fns[0].fn, t, false));
		return 0;
	}
	hash_avx2(buf, 12345677, b);
	printf("avx2 hash %s base_hash128\n", memcmp(a, b, 16) ? "DIFFERS FROM" : "equals");
	for (f = 0; f < 2; f++)
		for (hot = 0; hot < 2; hot++)
			for (t = 1; t <= 8; t *= 2)
				printf("%s %s, %u thread(s): %.2f GB/s\n", fns[f].name,
				       hot ? "hot" : "cold", t, rate(fns[f].fn, t, hot));
	free(buf);
	return 0;
}
