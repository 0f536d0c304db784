/* SPDX-License-Identifier: MIT */
/*
 * sleepprep's measurements of each step alone (bench/cuda/sleepprep.c has
 * the probe's design and its build line): first touch, register and
 * unregister from 1..8 threads and as sub-ranges, register faulting pages
 * in, MAP_POPULATE and MADV_POPULATE_WRITE, munmap; the warm-up of guest
 * memory; the D2H ceiling every way is compared with.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "clock.h"
#include "sleepprep.h"

/* --- each step alone ---------------------------------------------------- */

static void map_all(int touch)
{
	for (int k = 0; k < npieces; k++) {
		bufs[k].p = mmap(NULL, PIECE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (bufs[k].p == MAP_FAILED) {
			perror("mmap");
			exit(1);
		}
		madvise(bufs[k].p, PIECE, MADV_HUGEPAGE);
		if (touch)
			on_threads(bufs[k].p, PIECE, 16, OP_TOUCH);
	}
}

struct multi { int first, step, op, split; };

static void *multi_fn(void *a)
{
	struct multi *m = a;

	for (int k = m->first; k < npieces; k += m->step) {
		int r = on_threads(bufs[k].p, PIECE, m->split, m->op);

		if (r && m->op != OP_UNREG) {
			printf("op %d on piece %d: %d\n", m->op, k, r);
			exit(1);
		}
	}
	return NULL;
}

/* op on every piece, from nth threads at once (pieces dealt round-robin),
 * each piece in split ranges on as many threads. */
static double multi(int nth, int op, int split)
{
	pthread_t th[NMAX];
	struct multi m[NMAX];
	double t = clock_secs();

	for (int i = 0; i < nth; i++) {
		m[i] = (struct multi){ i, nth, op, split };
		pthread_create(&th[i], NULL, multi_fn, &m[i]);
	}
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	return clock_secs() - t;
}

static void unmap_all(void)
{
	for (int k = 0; k < npieces; k++)
		munmap(bufs[k].p, PIECE);
}

static void line(const char *what, double s)
{
	printf("  %-58s %6.3f s  (%6.2f GB/s)\n", what, s, total / s / 1e9);
	fflush(stdout);
}

void components(void)
{
	char name[96];
	double t;

	printf("== each step alone, %zu GiB in %d pieces of 2 GiB\n", total >> 30, npieces);
	for (int k = 0; k < npieces; k++) {
		bufs[k].p = mmap(NULL, PIECE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		madvise(bufs[k].p, PIECE, MADV_HUGEPAGE);
	}
	t = clock_secs();
	for (int k = 0; k < npieces; k++)
		on_threads(bufs[k].p, PIECE, 16, OP_TOUCH);
	line("touch, pieces one by one, 16 threads each", clock_secs() - t);
	line("register, 1 thread (touched pieces)", multi(1, OP_REG, 1));
	line("unregister, 1 thread", multi(1, OP_UNREG, 1));
	for (int n = 2; n <= 8; n *= 2) {
		snprintf(name, sizeof(name), "register, %d pieces at once from %d threads", n, n);
		line(name, multi(n, OP_REG, 1));
		snprintf(name, sizeof(name), "unregister, %d threads", n);
		line(name, multi(n, OP_UNREG, 1));
	}
	for (int s = 8; s <= 16; s *= 2) {
		snprintf(name, sizeof(name), "register, each piece as %d sub-ranges on %d threads", s, s);
		line(name, multi(1, OP_REG, s));
		/* a copy that crosses the sub-ranges: one cudaMemcpy per piece */
		{
			cudaError_t e1 = cudaMemcpy(bufs[0].p, dev, PIECE, cudaMemcpyDeviceToHost);
			cudaError_t e2 = cudaMemcpy(dev, bufs[0].p, PIECE, cudaMemcpyHostToDevice);

			printf("  one cudaMemcpy across %d sub-registrations: D2H %s, H2D %s\n",
			       s, cudaGetErrorString(e1), cudaGetErrorString(e2));
			cudaGetLastError();
		}
		t = clock_secs();
		for (int k = 0; k < npieces; k++)
			copy_sub(bufs[k].p, dev + (size_t)k * PIECE, s, cudaMemcpyDeviceToHost);
		snprintf(name, sizeof(name), "  D2H, 1 cudaMemcpy per sub-range (%d per piece)", s);
		line(name, clock_secs() - t);
		t = clock_secs();
		for (int k = 0; k < npieces; k++)
			copy_sub(dev + (size_t)k * PIECE, bufs[k].p, s, cudaMemcpyHostToDevice);
		snprintf(name, sizeof(name), "  H2D, 1 cudaMemcpy per sub-range (%d per piece)", s);
		line(name, clock_secs() - t);
		snprintf(name, sizeof(name), "unregister %d sub-ranges on %d threads", s, s);
		line(name, multi(1, OP_UNREG, s));
	}
	t = clock_secs();
	unmap_all();
	line("munmap of touched pieces, 1 thread", clock_secs() - t);

	map_all(1);
	multi(1, OP_REG, 1);
	multi(1, OP_UNREG, 1);
	line("munmap of touched pieces that were pinned, 8 threads", multi(8, OP_UNMAP, 1));

	map_all(0);
	line("register of untouched pieces (faulted in by it), 8 threads", multi(8, OP_REG, 1));
	multi(8, OP_UNREG, 1);
	multi(8, OP_UNMAP, 1);
	map_all(0);
	line("register of untouched pieces, each as 2 sub-ranges, 16 threads", multi(8, OP_REG, 2));
	multi(8, OP_UNREG, 2);
	multi(8, OP_UNMAP, 1);
	map_all(0);
	line("MADV_POPULATE_WRITE (THP), pieces one by one, 16 threads", multi(1, OP_POPULATE, 16));
	multi(8, OP_UNMAP, 1);
	map_all(0);
	line("MADV_POPULATE_WRITE (THP), 8 pieces at once, 2 threads each", multi(8, OP_POPULATE, 2));
	multi(8, OP_UNMAP, 1);
	map_all(0);
	line("touch, 8 pieces at once, 2 threads each", multi(8, OP_TOUCH, 2));
	multi(8, OP_UNMAP, 1);
	map_all(0);
	line("touch, pieces one by one, 8 threads each", multi(1, OP_TOUCH, 8));
	multi(8, OP_UNMAP, 1);
	t = clock_secs();
	for (int k = 0; k < npieces; k++) {
		bufs[k].p = mmap(NULL, PIECE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (bufs[k].p == MAP_FAILED) {
			perror("mmap MAP_POPULATE");
			exit(1);
		}
	}
	line("mmap MAP_POPULATE (no THP: madvise comes after), 1 thread", clock_secs() - t);
	line("  register of those (4 KiB pages), 1 thread", multi(1, OP_REG, 1));
	multi(1, OP_UNREG, 1);
	multi(8, OP_UNMAP, 1);
}

/* The first touch of guest memory since boot is the hypervisor's: touch
 * WARM_GIB GiB once (timed: that cost), then 16 GiB again (the rate on
 * memory touched before). */
void warm(size_t gib)
{
	for (int r = 0; r < 2; r++) {
		size_t n = (r ? 16 : gib) << 30;
		char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		double t;

		if (p == MAP_FAILED) {
			perror("mmap warm-up");
			exit(1);
		}
		madvise(p, n, MADV_HUGEPAGE);
		t = clock_secs();
		on_threads(p, n, 16, OP_TOUCH);
		t = clock_secs() - t;
		printf("warm-up %d: %zu GiB touched by 16 threads in %.3f s (%.2f GB/s)\n",
		       r, n >> 30, t, n / t / 1e9);
		t = clock_secs();
		for (size_t o = 0; o < n; o += PIECE)
			CK(cudaHostRegister(p + o, PIECE, cudaHostRegisterDefault));
		t = clock_secs() - t;
		printf("          cudaHostRegister of them (2 GiB at a time, 1 thread): %.3f s (%.2f GB/s)\n",
		       t, n / t / 1e9);
		t = clock_secs();
		for (size_t o = 0; o < n; o += PIECE)
			CK(cudaHostUnregister(p + o));
		printf("          unregister %.3f s", clock_secs() - t);
		t = clock_secs();
		munmap(p, n);
		printf(", munmap %.3f s\n", clock_secs() - t);
		fflush(stdout);
	}
}

void ceiling(char *h)
{
	double t, best = 1e9;

	for (int r = 0; r < 3; r++) {
		t = clock_secs();
		for (int k = 0; k < npieces; k++)
			CK(cudaMemcpy(h + (size_t)k * PIECE, dev + (size_t)k * PIECE,
				      PIECE, cudaMemcpyDeviceToHost));
		t = clock_secs() - t;
		if (t < best)
			best = t;
		printf("ceiling: D2H into %zu GiB registered before: %.3f s (%.2f GB/s)\n",
		       total >> 30, t, total / t / 1e9);
	}
	t = clock_secs();
	CK(cudaMemcpy(dev, h, total, cudaMemcpyHostToDevice));
	t = clock_secs() - t;
	printf("ceiling: H2D from it: %.3f s (%.2f GB/s)\n", t, total / t / 1e9);
	fflush(stdout);
	if (!ceil_s || best < ceil_s)
		ceil_s = best;
}
