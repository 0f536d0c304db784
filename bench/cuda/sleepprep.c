/* SPDX-License-Identifier: MIT */
/*
 * Issue 17, sleep at copy speed, second probe: where a level-1 sleep's
 * host-buffer preparation (fresh memory faulted in, then pinned) goes, and
 * which way of preparing GIB GiB in 2 GiB pieces (wcd's pools are 1916 MiB)
 * keeps up with the device-to-host copy. Everything runs on memory that
 * was touched once before (a warm-up of WARM_GIB GiB, default 64, touched
 * and unmapped first: the first touch of a KVM guest's memory since boot is
 * the hypervisor's cost, measured but not what is compared).
 *
 *   ceiling     D2H into GIB GiB registered beforehand, same process
 *   components  each step alone on 16 GiB: first touch by 16 threads;
 *               cudaHostRegister of touched pieces from 1/2/4/8 threads at
 *               once; one piece registered as 8 or 16 sub-ranges from as
 *               many threads; register of untouched pieces (the register
 *               faults them in) from 8 threads; MAP_POPULATE and
 *               MADV_POPULATE_WRITE instead of touching; unregister and
 *               munmap (a wake's free), serial and from 8 threads
 *   sleeps      from nothing allocated to the last byte on the host:
 *               "wcd" is tools/wcd/lifecycle.c's arena_job before a9e8930 (SLEEP_AHEAD 2,
 *               each buffer mmap + THP + touched by 16 threads + one
 *               register, the copy on the calling thread); the others
 *               prepare pieces on W workers (each piece touched by T
 *               threads, registered as S sub-ranges on S threads), the
 *               calling thread copies each piece once it is ready; "vmm"
 *               is cuMemCreate(CU_MEM_LOCATION_TYPE_HOST_NUMA) + map
 *               instead of mmap + register; "3 stages" is one thread
 *               mapping and touching (T threads) piece after piece, one
 *               registering them, the calling thread copying; "async" the
 *               same with the registering thread queueing each piece's
 *               copy (cudaMemcpyAsync) right after its register, the
 *               calling thread waiting for the stream at the end. After each,
 *               the wake's copy back (H2D) and the free are timed too.
 *               One cudaMemcpy may not cross two registrations (invalid
 *               argument: measured), so a piece registered as sub-ranges is
 *               copied one sub-range at a time.
 *
 * Two files: this one (the ways of sleeping) and sleepprep_steps.c (each
 * step alone, the warm-up, the ceiling); sleepprep.h has what they share.
 * Not built by make (it calls the CUDA runtime directly, which only gpu/
 * may): gcc -O2 -I/usr/local/cuda/include -Itools/common -o sleepprep \
 *	bench/cuda/sleepprep.c bench/cuda/sleepprep_steps.c \
 *	tools/common/clock.c \
 *	-L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt
 * Usage: sleepprep [GIB]   (default 16; WARM_GIB=N in the environment;
 *        QUICK=1: the warm-up, the ceiling and wcd's way against the
 *        staged ways only, twice)
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "sleepprep.h"


size_t total;
int npieces;
char *dev;
double ceil_s;

static PFN_cuMemCreate_v10020 MemCreate;
static PFN_cuMemRelease_v10020 MemRelease;
static PFN_cuMemAddressReserve_v10020 Reserve;
static PFN_cuMemAddressFree_v10020 AddrFree;
static PFN_cuMemMap_v10020 Map;
static PFN_cuMemUnmap_v10020 Unmap;
static PFN_cuMemSetAccess_v10020 SetAccess;

static void *getp(const char *sym, unsigned ver)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	CK(cudaGetDriverEntryPointByVersion(sym, &fn, ver, cudaEnableDefault, &q));
	if (!fn) {
		printf("no %s\n", sym);
		exit(1);
	}
	return fn;
}

/* --- touching, populating, registering a range on threads ------------- */

struct rng { char *p; size_t n; int op; int ret; };

static void *rng_fn(void *a)
{
	struct rng *r = a;

	switch (r->op) {
	case OP_TOUCH:
		for (size_t o = 0; o < r->n; o += 4096)
			((volatile char *)r->p)[o] = 0;
		break;
	case OP_POPULATE:
		r->ret = madvise(r->p, r->n, MADV_POPULATE_WRITE);
		break;
	case OP_REG:
		r->ret = cudaHostRegister(r->p, r->n, cudaHostRegisterDefault);
		break;
	case OP_UNREG:
		r->ret = cudaHostUnregister(r->p);
		break;
	case OP_UNMAP:
		r->ret = munmap(r->p, r->n);
		break;
	}
	return NULL;
}

/* Runs op on p[0..n) split into k ranges (2 MiB aligned), one thread each
 * (inline when k is 1). */
int on_threads(char *p, size_t n, int k, int op)
{
	pthread_t th[SUBMAX * 4];
	struct rng r[SUBMAX * 4];
	size_t per = (n / k + HUGE - 1) / HUGE * HUGE;
	int m = 0, ret = 0;

	for (int i = 0; i < k; i++) {
		size_t off = per * i;

		if (off >= n)
			break;
		r[m] = (struct rng){ p + off, n - off < per ? n - off : per, op, 0 };
		m++;
	}
	if (m == 1) {
		rng_fn(&r[0]);
		return r[0].ret;
	}
	for (int i = 0; i < m; i++)
		pthread_create(&th[i], NULL, rng_fn, &r[i]);
	for (int i = 0; i < m; i++) {
		pthread_join(th[i], NULL);
		if (r[i].ret)
			ret = r[i].ret;
	}
	return ret;
}

/* --- one piece's host buffer ------------------------------------------ */

struct way {
	const char *name;
	int workers;            /* pieces prepared at once */
	int touch;              /* threads first-touching a piece (0: none) */
	int populate;           /* 1 MAP_POPULATE, 2 MADV_POPULATE_WRITE on touch threads */
	int split;              /* sub-registrations per piece, on as many threads */
	int vmm;                /* cuMemCreate HOST_NUMA + map instead */
	int stages;             /* 1: one toucher (T threads), one registrar, the copy: three stages;
				   2: the same, but the registrar queues each piece's copy
				   (cudaMemcpyAsync, one stream) right after its register */
};

static int vmm_host_ok = 1;

static void buf_prep(const struct way *w, struct buf *b)
{
	double t0 = clock_secs(), t1, t2;
	int r;

	memset(b, 0, sizeof(*b));
	b->split = w->split;
	if (w->vmm) {
		CUmemAllocationProp prop = { 0 };
		CUmemAccessDesc acc[2] = { 0 };
		CUdeviceptr va;
		CUresult cr;

		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
		prop.location.id = 0;
		cr = MemCreate(&b->h, PIECE, &prop, 0);
		if (cr) {
			/* the vmm ways run last: nothing after them is lost */
			printf("cuMemCreate(HOST_NUMA, 2 GiB): %d: host VMM memory not available here\n",
			       (int)cr);
			fflush(stdout);
			exit(0);
		}
		t1 = clock_secs();
		if (Reserve(&va, PIECE, HUGE, 0, 0) || Map(va, PIECE, 0, b->h, 0)) {
			printf("reserve/map of host VMM memory failed\n");
			exit(1);
		}
		acc[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc[0].location.id = 0;
		acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		acc[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
		acc[1].location.id = 0;
		acc[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		cr = vmm_host_ok ? SetAccess(va, PIECE, acc, 2) : 1;
		if (cr) {
			if (vmm_host_ok)
				printf("  cuMemSetAccess(device + host) %d: device only\n", (int)cr);
			vmm_host_ok = 0;
			cr = SetAccess(va, PIECE, acc, 1);
		}
		if (cr) {
			printf("cuMemSetAccess(device): %d\n", (int)cr);
			exit(1);
		}
		b->p = (char *)(uintptr_t)va;
		b->vmm = 1;
		b->t_map = 0;
		b->t_touch = t1 - t0;      /* create */
		b->t_reg = clock_secs() - t1;     /* reserve + map + access */
		return;
	}
	b->p = mmap(NULL, PIECE, PROT_READ | PROT_WRITE, MAP_PRIVATE |
		    MAP_ANONYMOUS | (w->populate == 1 ? MAP_POPULATE : 0), -1, 0);
	if (b->p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(b->p, PIECE, MADV_HUGEPAGE);
	t1 = clock_secs();
	if (w->populate == 2) {
		r = on_threads(b->p, PIECE, w->touch ? w->touch : 1, OP_POPULATE);
		if (r) {
			perror("MADV_POPULATE_WRITE");
			exit(1);
		}
	} else if (w->touch) {
		on_threads(b->p, PIECE, w->touch, OP_TOUCH);
	}
	t2 = clock_secs();
	if (w->split) {
		r = on_threads(b->p, PIECE, w->split, OP_REG);
		if (r) {
			printf("cudaHostRegister: %s\n", cudaGetErrorString(r));
			exit(1);
		}
	}
	b->t_map = t1 - t0;
	b->t_touch = t2 - t1;
	b->t_reg = clock_secs() - t2;
}

static void buf_free(struct buf *b, double *unreg, double *unmap)
{
	double t = clock_secs();

	if (b->vmm) {
		Unmap((CUdeviceptr)(uintptr_t)b->p, PIECE);
		AddrFree((CUdeviceptr)(uintptr_t)b->p, PIECE);
		*unreg += clock_secs() - t;
		t = clock_secs();
		MemRelease(b->h);
		*unmap += clock_secs() - t;
		return;
	}
	if (b->split)
		on_threads(b->p, PIECE, b->split, OP_UNREG);
	*unreg += clock_secs() - t;
	t = clock_secs();
	munmap(b->p, PIECE);
	*unmap += clock_secs() - t;
}

/* --- the ways of sleeping --------------------------------------------- */

struct buf bufs[NMAX];
static int ready[NMAX];
static atomic_int next_piece;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static const struct way *cur;

static int touched[NMAX];

static void mark(int *flag)
{
	pthread_mutex_lock(&mu);
	*flag = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void await(int *flag)
{
	pthread_mutex_lock(&mu);
	while (!*flag)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

/* the 3-stage way: touch, then register, each on its own thread */
static void *toucher(void *a)
{
	struct way w = *cur;

	(void)a;
	w.split = 0;
	for (int k = 0; k < npieces; k++) {
		buf_prep(&w, &bufs[k]);
		bufs[k].split = cur->split;
		mark(&touched[k]);
	}
	return NULL;
}

static cudaStream_t st;

static void *registrar(void *a)
{
	(void)a;
	for (int k = 0; k < npieces; k++) {
		double t;
		int r;

		await(&touched[k]);
		t = clock_secs();
		r = on_threads(bufs[k].p, PIECE, cur->split, OP_REG);
		if (r) {
			printf("cudaHostRegister: %s\n", cudaGetErrorString(r));
			exit(1);
		}
		bufs[k].t_reg = clock_secs() - t;
		if (cur->stages == 2) {
			size_t per = (PIECE / cur->split + HUGE - 1) / HUGE * HUGE;

			for (size_t o = 0; o < PIECE; o += per)
				CK(cudaMemcpyAsync(bufs[k].p + o, dev + (size_t)k * PIECE + o,
						   PIECE - o < per ? PIECE - o : per,
						   cudaMemcpyDeviceToHost, st));
		}
		mark(&ready[k]);
	}
	return NULL;
}

static void *worker(void *a)
{
	int k;

	(void)a;
	while ((k = atomic_fetch_add(&next_piece, 1)) < npieces) {
		buf_prep(cur, &bufs[k]);
		pthread_mutex_lock(&mu);
		ready[k] = 1;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

/* A piece registered as split ranges is split-many registrations: one
 * cudaMemcpy may not cross them (invalid argument), so one per range. */
void copy_sub(char *dst, char *src, int split, enum cudaMemcpyKind kind)
{
	size_t per = (PIECE / split + HUGE - 1) / HUGE * HUGE;

	for (size_t o = 0; o < PIECE; o += per)
		CK(cudaMemcpy(dst + o, src + o, PIECE - o < per ? PIECE - o : per, kind));
}

static void copy_piece(struct buf *b, int k)
{
	char *src = dev + (size_t)k * PIECE;

	if (b->vmm) {
		CK(cudaMemcpy(b->p, src, PIECE, cudaMemcpyDefault));
	} else if (b->split > 1) {
		copy_sub(b->p, src, b->split, cudaMemcpyDeviceToHost);
	} else {
		CK(cudaMemcpy(b->p, src, PIECE, cudaMemcpyDeviceToHost));
	}
}

/* wcd's arena_job before a9e8930: SLEEP_AHEAD 2 jobs, one thread per job;
 * the "async" way is what wcd does since. */
struct job { int k; pthread_t th; };
static const struct way wcd_way = { "wcd", 2, 16, 0, 1, 0, 0 };

static void *job_fn(void *a)
{
	struct job *j = a;

	buf_prep(&wcd_way, &bufs[j->k]);
	return NULL;
}

static double copy_s, wait_s;

static double sleep_wcd(void)
{
	struct job jobs[2];
	int next = 0;
	double t0 = clock_secs(), t;

	for (int i = 0; i < npieces; i++) {
		for (; next < npieces && next < i + 2; next++) {
			jobs[next % 2].k = next;
			pthread_create(&jobs[next % 2].th, NULL, job_fn, &jobs[next % 2]);
		}
		t = clock_secs();
		pthread_join(jobs[i % 2].th, NULL);
		wait_s += clock_secs() - t;
		t = clock_secs();
		copy_piece(&bufs[i], i);
		copy_s += clock_secs() - t;
	}
	return clock_secs() - t0;
}

static double sleep_workers(const struct way *w)
{
	pthread_t th[NMAX];
	double t0 = clock_secs(), t;

	int nth = w->stages ? 2 : w->workers;

	cur = w;
	memset(ready, 0, sizeof(ready));
	memset(touched, 0, sizeof(touched));
	atomic_store(&next_piece, 0);
	if (w->stages) {
		pthread_create(&th[0], NULL, toucher, NULL);
		pthread_create(&th[1], NULL, registrar, NULL);
	} else {
		for (int i = 0; i < nth; i++)
			pthread_create(&th[i], NULL, worker, NULL);
	}
	for (int k = 0; k < npieces; k++) {
		t = clock_secs();
		await(&ready[k]);
		wait_s += clock_secs() - t;
		t = clock_secs();
		if (w->stages != 2)
			copy_piece(&bufs[k], k);
		copy_s += clock_secs() - t;
	}
	if (w->stages == 2) {
		t = clock_secs();
		CK(cudaStreamSynchronize(st));
		copy_s += clock_secs() - t;
	}
	t = clock_secs() - t0;
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	return t;
}

static int check_bytes(void)
{
	unsigned char c[4096];

	for (int k = 0; k < npieces; k++)
		for (size_t o = 0; o < PIECE; o += PIECE / 16) {
			if (bufs[k].vmm && !vmm_host_ok)
				CK(cudaMemcpy(c, bufs[k].p + o, 1, cudaMemcpyDefault));
			else
				memcpy(c, bufs[k].p + o, 1);
			if (c[0] != 7)
				return 0;
		}
	return 1;
}

static void run_way(const struct way *w)
{
	double s, pm = 0, pt = 0, pr = 0, mx = 0, wake, ur = 0, um = 0;
	const char *ok;

	copy_s = wait_s = 0;
	s = w == &wcd_way ? sleep_wcd() : sleep_workers(w);
	for (int k = 0; k < npieces; k++) {
		double p = bufs[k].t_map + bufs[k].t_touch + bufs[k].t_reg;

		pm += bufs[k].t_map;
		pt += bufs[k].t_touch;
		pr += bufs[k].t_reg;
		if (p > mx)
			mx = p;
	}
	ok = check_bytes() ? "bytes ok" : "BYTES WRONG";
	wake = clock_secs();
	for (int k = 0; k < npieces; k++)
		if (bufs[k].split > 1)
			copy_sub(dev + (size_t)k * PIECE, bufs[k].p, bufs[k].split,
				 cudaMemcpyHostToDevice);
		else
			CK(cudaMemcpy(dev + (size_t)k * PIECE, bufs[k].p, PIECE,
				      bufs[k].vmm ? cudaMemcpyDefault : cudaMemcpyHostToDevice));
	wake = clock_secs() - wake;
	for (int k = 0; k < npieces; k++)
		buf_free(&bufs[k], &ur, &um);
	printf("%-30s %6.3f s %6.2f GB/s %5.2fx | prep/piece: map %.3f %s %.3f reg %.3f (max %.3f) | copy %.3f waited %.3f | wake H2D %.3f s (%.1f GB/s) | free: unreg %.3f unmap %.3f | %s\n",
	       w->name, s, total / s / 1e9, ceil_s / s, pm / npieces,
	       w->vmm ? "create" : "touch", pt / npieces, pr / npieces, mx,
	       copy_s, wait_s, wake, total / wake / 1e9, ur, um, ok);
	fflush(stdout);
}

static const struct way ways[] = {
	/* name                             W   T  pop split vmm stages */
	{ "W1 T16 S8 (one piece, all threads)", 1, 16, 0, 8, 0, 0 },
	{ "3 stages: touch T16 | reg S1 | copy", 1, 16, 0, 1, 0, 1 },
	{ "async: touch T16 | reg S1 + queue copy", 1, 16, 0, 1, 0, 2 },
	{ "async: touch T8 | reg S1 + queue copy", 1, 8, 0, 1, 0, 2 },
	{ "3 stages: touch T16 | reg S8 | copy", 1, 16, 0, 8, 0, 1 },
	{ "3 stages: touch T8 | reg S1 | copy",  1, 8, 0, 1, 0, 1 },
	{ "W1 T16 S16",                        1, 16, 0, 16, 0, 0 },
	{ "W2 T8 S4",                          2, 8, 0, 4, 0, 0 },
	{ "W2 T8 S1",                          2, 8, 0, 1, 0, 0 },
	{ "W4 T4 S1",                          4, 4, 0, 1, 0, 0 },
	{ "W4 T4 S2",                          4, 4, 0, 2, 0, 0 },
	{ "W8 T2 S1",                          8, 2, 0, 1, 0, 0 },
	{ "W8 T0 S1 (register faults)",        8, 0, 0, 1, 0, 0 },
	{ "W8 T0 S2 (register faults)",        8, 0, 0, 2, 0, 0 },
	{ "W1 T0 S16 (register faults)",       1, 0, 0, 16, 0, 0 },
	{ "W2 T0 S8 (register faults)",        2, 0, 0, 8, 0, 0 },
	{ "W4 POPULATE_WRITE x4 S4",           4, 4, 2, 4, 0, 0 },
	{ "W1 POPULATE_WRITE x16 S8",          1, 16, 2, 8, 0, 0 },
};

static const struct way vmm_ways[] = {
	{ "vmm HOST_NUMA W1",                  1, 0, 0, 0, 1, 0 },
	{ "vmm HOST_NUMA W8",                  8, 0, 0, 0, 1, 0 },
};

int main(int argc, char **argv)
{
	const char *wg = getenv("WARM_GIB");
	char *h;

	total = (argc > 1 ? strtoull(argv[1], NULL, 10) : 16) << 30;
	npieces = (int)(total / PIECE);
	if (npieces < 1 || npieces > NMAX) {
		printf("GIB must be 2..%d\n", 2 * NMAX);
		return 1;
	}
	total = (size_t)npieces * PIECE;
	CK(cudaSetDevice(0));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaMalloc((void **)&dev, total));
	CK(cudaMemset(dev, 7, total));
	CK(cudaDeviceSynchronize());
	MemCreate = getp("cuMemCreate", 10020);
	MemRelease = getp("cuMemRelease", 10020);
	Reserve = getp("cuMemAddressReserve", 10020);
	AddrFree = getp("cuMemAddressFree", 10020);
	Map = getp("cuMemMap", 10020);
	Unmap = getp("cuMemUnmap", 10020);
	SetAccess = getp("cuMemSetAccess", 10020);
	printf("%zu GiB in %d pieces of 2 GiB, %ld CPUs\n", total >> 30, npieces,
	       sysconf(_SC_NPROCESSORS_ONLN));
	warm(wg ? strtoull(wg, NULL, 10) : 64);
	h = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	madvise(h, total, MADV_HUGEPAGE);
	{
		double t = clock_secs();

		on_threads(h, total, 16, OP_TOUCH);
		printf("ceiling's buffer: touch %.3f s", clock_secs() - t);
		t = clock_secs();
		CK(cudaHostRegister(h, total, cudaHostRegisterDefault));
		printf(", register (one range) %.3f s\n", clock_secs() - t);
	}
	ceiling(h);
	if (getenv("QUICK")) {
		static const struct way q[] = {
			{ "3 stages: touch T16 | reg S1 | copy", 1, 16, 0, 1, 0, 1 },
			{ "async: touch T16 | reg S1 + queue copy", 1, 16, 0, 1, 0, 2 },
			{ "async: touch T8 | reg S1 + queue copy", 1, 8, 0, 1, 0, 2 },
		};

		printf("== sleeps (QUICK): %zu GiB from nothing allocated to the last byte on the host; x = ceiling / time\n",
		       total >> 30);
		for (int r = 0; r < 2; r++) {
			run_way(&wcd_way);
			for (int i = 0; i < 3; i++)
				run_way(&q[i]);
		}
		ceiling(h);
		return 0;
	}
	components();
	printf("== sleeps: %zu GiB from nothing allocated to the last byte on the host; x = ceiling / time\n",
	       total >> 30);
	run_way(&wcd_way);
	for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++)
		run_way(&ways[i]);
	run_way(&wcd_way);
	run_way(&ways[0]);
	ceiling(h);
	for (size_t i = 0; i < sizeof(vmm_ways) / sizeof(vmm_ways[0]); i++)
		run_way(&vmm_ways[i]);
	return 0;
}
