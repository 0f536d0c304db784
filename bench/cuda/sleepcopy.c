/* SPDX-License-Identifier: MIT */
/*
 * Issue 17, sleep at copy speed: ways to copy GIB GiB of device memory to
 * host memory that a later wake can copy back at the pinned rate, each
 * timed from nothing allocated to the last byte on the host (the sleep's
 * cost), beside the device-to-host ceiling into memory pinned beforehand:
 *
 *   ceiling   D2H into a registered arena kept from before (also what a
 *             kept arena costs at each sleep after the first)
 *   serial    today's sleep: per 2 GiB piece, mmap (THP), cudaHostRegister
 *             (which faults the fresh pages in, one thread), cudaMemcpy
 *   prefault  the same, but THREADS threads touch the fresh pages first
 *   pipeline  prefault + register of piece i+1 (THREADS threads) while
 *             piece i is copied
 *   ring      a pinned ring (4 x 64 MiB, registered before: the staging
 *             ring) streamed into pageable memory by THREADS memcpy threads
 *             (a wake from pageable memory is not at the pinned rate:
 *             printed too)
 *
 * Not built by make (it calls the CUDA runtime directly, which only gpu/
 * may): gcc -O2 -I/usr/local/cuda/include -Itools/common -o sleepcopy \
 *	bench/cuda/sleepcopy.c tools/common/clock.c \
 *	-L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt
 * Usage: sleepcopy [GIB [THREADS]]   (default 16, 16)
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define PIECE (2ull << 30)
#define RING_SLOT (64ull << 20)
#define RING_N 4

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static size_t total;
static int nthreads;
static char *dev;

struct touch { char *p; size_t n; };

static void *touch_fn(void *a)
{
	struct touch *t = a;

	for (size_t o = 0; o < t->n; o += 4096)
		t->p[o] = 0;
	return NULL;
}

/* Faults p[0..n) in with nthreads threads. */
static void prefault(char *p, size_t n)
{
	pthread_t th[64];
	struct touch t[64];
	size_t per = (n / nthreads + 4095) & ~4095ull;

	for (int i = 0; i < nthreads; i++) {
		size_t off = per * i;

		t[i].p = p + off;
		t[i].n = off >= n ? 0 : (n - off < per ? n - off : per);
		pthread_create(&th[i], NULL, touch_fn, &t[i]);
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
}

static char *map(size_t n)
{
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(p, n, MADV_HUGEPAGE);
	return p;
}

static void report(const char *what, double s)
{
	printf("%-9s %6.3f s  %6.2f GB/s\n", what, s, total / s / 1e9);
	fflush(stdout);
}

static void unmap_all(char **h, int n, int registered)
{
	for (int i = 0; i < n; i++) {
		if (registered)
			cudaHostUnregister(h[i]);
		munmap(h[i], PIECE);
	}
}

static void serial(int pre)
{
	int n = (int)(total / PIECE);
	char *h[64];
	double t0 = clock_secs();

	for (int i = 0; i < n; i++) {
		h[i] = map(PIECE);
		if (pre)
			prefault(h[i], PIECE);
		CK(cudaHostRegister(h[i], PIECE, cudaHostRegisterDefault));
		CK(cudaMemcpy(h[i], dev + i * PIECE, PIECE, cudaMemcpyDeviceToHost));
	}
	report(pre ? "prefault" : "serial", clock_secs() - t0);
	unmap_all(h, n, 1);
}

struct prep { char *p; int done; pthread_mutex_t mu; pthread_cond_t cv; };
static struct prep preps[64];

static void *prep_fn(void *a)
{
	int n = (int)(total / PIECE);

	(void)a;
	for (int i = 0; i < n; i++) {
		char *p = map(PIECE);

		prefault(p, PIECE);
		CK(cudaHostRegister(p, PIECE, cudaHostRegisterDefault));
		pthread_mutex_lock(&preps[i].mu);
		preps[i].p = p;
		preps[i].done = 1;
		pthread_cond_signal(&preps[i].cv);
		pthread_mutex_unlock(&preps[i].mu);
	}
	return NULL;
}

static void pipeline(void)
{
	int n = (int)(total / PIECE);
	char *h[64];
	pthread_t th;
	double t0 = clock_secs();

	for (int i = 0; i < n; i++) {
		preps[i].done = 0;
		pthread_mutex_init(&preps[i].mu, NULL);
		pthread_cond_init(&preps[i].cv, NULL);
	}
	pthread_create(&th, NULL, prep_fn, NULL);
	for (int i = 0; i < n; i++) {
		pthread_mutex_lock(&preps[i].mu);
		while (!preps[i].done)
			pthread_cond_wait(&preps[i].cv, &preps[i].mu);
		pthread_mutex_unlock(&preps[i].mu);
		h[i] = preps[i].p;
		CK(cudaMemcpy(h[i], dev + i * PIECE, PIECE, cudaMemcpyDeviceToHost));
	}
	pthread_join(th, NULL);
	report("pipeline", clock_secs() - t0);
	unmap_all(h, n, 1);
}

struct cp { char *dst; const char *src; size_t n; };

static void *cp_fn(void *a)
{
	struct cp *c = a;

	memcpy(c->dst, c->src, c->n);
	return NULL;
}

static void ring(void)
{
	char *slot[RING_N], *host;
	cudaStream_t st;
	cudaEvent_t ev[RING_N];
	double t0, t;

	for (int i = 0; i < RING_N; i++) {
		slot[i] = map(RING_SLOT);
		CK(cudaHostRegister(slot[i], RING_SLOT, cudaHostRegisterDefault));
		CK(cudaEventCreate(&ev[i]));
	}
	CK(cudaStreamCreate(&st));
	t0 = clock_secs();
	host = map(total);
	for (size_t off = 0, k = 0; off < total; off += RING_SLOT, k++) {
		int s = (int)(k % RING_N);
		pthread_t th[64];
		struct cp c[64];
		size_t per = RING_SLOT / nthreads;

		CK(cudaMemcpyAsync(slot[s], dev + off, RING_SLOT,
				   cudaMemcpyDeviceToHost, st));
		CK(cudaEventRecord(ev[s], st));
		CK(cudaEventSynchronize(ev[s]));
		for (int i = 0; i < nthreads; i++) {
			c[i] = (struct cp){ host + off + per * i, slot[s] + per * i, per };
			pthread_create(&th[i], NULL, cp_fn, &c[i]);
		}
		for (int i = 0; i < nthreads; i++)
			pthread_join(th[i], NULL);
	}
	report("ring", clock_secs() - t0);
	/* the wake from pageable memory */
	t = clock_secs();
	CK(cudaMemcpy(dev, host, total, cudaMemcpyHostToDevice));
	printf("          wake from that pageable copy: %.3f s, %.2f GB/s\n",
	       clock_secs() - t, total / (clock_secs() - t) / 1e9);
	munmap(host, total);
	for (int i = 0; i < RING_N; i++) {
		cudaHostUnregister(slot[i]);
		munmap(slot[i], RING_SLOT);
	}
}

static void ceiling(void)
{
	char *h = map(total);
	double t;

	prefault(h, total);
	CK(cudaHostRegister(h, total, cudaHostRegisterDefault));
	for (int r = 0; r < 3; r++) {
		t = clock_secs();
		CK(cudaMemcpy(h, dev, total, cudaMemcpyDeviceToHost));
		report("ceiling", clock_secs() - t);
	}
	t = clock_secs();
	CK(cudaMemcpy(dev, h, total, cudaMemcpyHostToDevice));
	printf("          H2D from it: %.3f s, %.2f GB/s\n", clock_secs() - t,
	       total / (clock_secs() - t) / 1e9);
	cudaHostUnregister(h);
	munmap(h, total);
}

int main(int argc, char **argv)
{
	total = (argc > 1 ? strtoull(argv[1], NULL, 10) : 16) << 30;
	nthreads = argc > 2 ? atoi(argv[2]) : 16;
	if (nthreads < 1 || nthreads > 64)
		nthreads = 16;
	CK(cudaSetDevice(0));
	CK(cudaMalloc((void **)&dev, total));
	CK(cudaMemset(dev, 7, total));
	CK(cudaDeviceSynchronize());
	printf("%zu GiB, %d threads\n", total >> 30, nthreads);
	ceiling();
	serial(0);
	serial(1);
	pipeline();
	ring();
	serial(1);
	pipeline();
	return 0;
}
