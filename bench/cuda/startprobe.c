/* SPDX-License-Identifier: MIT */
/*
 * Issue 17, start-up: what each CUDA step that wcd's start-up takes costs
 * on this machine, in the order wcd takes them, each timed alone:
 *
 *   spawn->main   from $SPAWN_NS (CLOCK_REALTIME ns, set by the caller just
 *                 before exec) to main()
 *   dlopen        libcuda.so.1
 *   cuInit        the driver's start-up (opens /dev/nvidia*; with
 *                 persistence mode off and no other process on the GPU,
 *                 the GPU's own initialisation too)
 *   cudart init   cudaGetDeviceCount on an initialised driver
 *   queries       entry points, cuDeviceGet, UUID, attributes, granularity
 *   context       cudaSetDevice + cudaFree(0): the primary context
 *   limits        the three cudaDeviceSetLimit calls wcd makes
 *   pools         NPOOLS x (cuMemCreate, reserve, map, set access, export)
 *   staging       12 x 8 MiB: mmap + cudaHostRegister of fresh pages (what
 *                 wcd does), then of pages first touched (prefaulted)
 *   pin 1 GiB     cudaHostRegister of 1 GiB fresh, and 1 GiB prefaulted
 *                 by 16 threads (the per-GB cost of pinning resident pages)
 *   streams       4 x cudaStreamCreateWithFlags
 *   first H2D     8 MiB cudaMemcpyAsync + sync, twice
 *   ceiling       4 GiB H2D from a pinned 1 GiB buffer, 128 MiB chunks,
 *                 4 streams
 *
 * `startprobe hold` only runs cuInit and sleeps until killed: a second
 * process holding the driver open. `startprobe touch GIB` maps GIB GiB of
 * fresh memory three times (unmapped in between), touches it with 16
 * threads and pins it, each timed: whether a first touch since boot costs
 * more than a later one (a level-1 sleep's first host copy).
 *
 * Not built by make (it calls the CUDA runtime directly, which only gpu/
 * may): gcc -O2 -I/usr/local/cuda/include -Itools/common -o startprobe \
 *	bench/cuda/startprobe.c tools/common/clock.c \
 *	-L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt
 * Usage: startprobe [NPOOLS [POOL_MIB]] (default 8 x 1915: llama-8b's pools)
 *        startprobe hold | startprobe touch GIB
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

static double T0, Tl;

static void mark(const char *what)
{
	double t = clock_secs() * 1e3;

	printf("%-44s %8.2f ms  (at %8.2f ms)\n", what, t - Tl, t - T0);
	fflush(stdout);
	Tl = clock_secs() * 1e3;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define DK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
	fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(1); } } while (0)

static void *getp(const char *sym, unsigned ver)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	CK(cudaGetDriverEntryPointByVersion(sym, &fn, ver, cudaEnableDefault, &q));
	if (!fn) {
		fprintf(stderr, "no %s\n", sym);
		exit(1);
	}
	return fn;
}

struct touch { char *p; size_t n; };

static void *touch_fn(void *a)
{
	struct touch *t = a;

	for (size_t o = 0; o < t->n; o += 4096)
		((volatile char *)t->p)[o] = 0;
	return NULL;
}

static void touch(char *p, size_t len, int n)
{
	pthread_t th[64];
	struct touch t[64];
	size_t per = (len / n + (2u << 20) - 1) / (2u << 20) * (2u << 20);

	for (int i = 0; i < n; i++) {
		size_t off = per * i;

		t[i] = (struct touch){ p + off, off >= len ? 0 : len - off < per ? len - off : per };
		pthread_create(&th[i], NULL, touch_fn, &t[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

static char *anon(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(p, len, MADV_HUGEPAGE);
	return p;
}

/* `startprobe touch GIB`: three rounds of mapping len bytes of fresh
 * memory, touching them with 16 threads and pinning them, each timed. */
static void touch_rounds(size_t len)
{
	double t;

	CK(cudaFree(0));
	mark("context");
	for (int r = 1; r <= 3; r++) {
		char *b = anon(len);

		touch(b, len, 16);
		t = clock_secs() * 1e3;
		printf("round %d: %zu GiB fresh, touched by 16 threads: %.1f ms (%.2f GB/s)\n",
		       r, len >> 30, t - Tl, len / (t - Tl) / 1e6);
		Tl = t;
		CK(cudaHostRegister(b, len, cudaHostRegisterDefault));
		t = clock_secs() * 1e3;
		printf("round %d: cudaHostRegister of them: %.1f ms\n", r, t - Tl);
		Tl = t;
		CK(cudaHostUnregister(b));
		munmap(b, len);
		mark("  unregister + munmap");
	}
}

/* The driver's virtual memory calls wcd's pools make. */
struct vmm {
	PFN_cuMemCreate_v10020 MemCreate;
	PFN_cuMemAddressReserve_v10020 Reserve;
	PFN_cuMemMap_v10020 Map;
	PFN_cuMemSetAccess_v10020 SetAccess;
	PFN_cuMemExportToShareableHandle_v10020 Export;
	CUmemAllocationProp prop;
	size_t gran;
};

/* cudart's start, then wcd's queries: the entry points, the device, its
 * UUID and attributes, the pools' granularity (into *v). */
static void queries(struct vmm *v)
{
	PFN_cuMemGetAllocationGranularity_v10020 Gran;
	PFN_cuDeviceGet_v2000 DevGet;
	PFN_cuDeviceGetUuid_v11040 GetUuid;
	PFN_cuDeviceGetAttribute_v2000 GetAttr;
	CUdevice dev;
	CUuuid u;
	int n = 0, a;

	CK(cudaGetDeviceCount(&n));
	mark("cudart init (cudaGetDeviceCount)");
	v->MemCreate = getp("cuMemCreate", 10020);
	v->Reserve = getp("cuMemAddressReserve", 10020);
	v->Map = getp("cuMemMap", 10020);
	v->SetAccess = getp("cuMemSetAccess", 10020);
	v->Export = getp("cuMemExportToShareableHandle", 10020);
	Gran = getp("cuMemGetAllocationGranularity", 10020);
	DevGet = getp("cuDeviceGet", 2000);
	GetUuid = getp("cuDeviceGetUuid", 11040);
	GetAttr = getp("cuDeviceGetAttribute", 2000);
	DK(DevGet(&dev, 0));
	DK(GetUuid(&u, dev));
	GetAttr(&a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	GetAttr(&a, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
	memset(&v->prop, 0, sizeof(v->prop));
	v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	v->prop.location.id = 0;
	v->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	v->gran = 0;
	DK(Gran(&v->gran, &v->prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	mark("queries (entry points, device, uuid, gran)");
}

/* The primary context, the three limits wcd sets and a memory query. */
static void context(void)
{
	size_t f, tt;

	CK(cudaSetDevice(0));
	mark("cudaSetDevice(0)");
	CK(cudaFree(0));
	mark("cudaFree(0) (context, if not yet)");
	cudaDeviceSetLimit(cudaLimitStackSize, 0);
	cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 0);
	cudaDeviceSetLimit(cudaLimitMallocHeapSize, 0);
	cudaGetLastError();
	mark("limits x3");
	CK(cudaMemGetInfo(&f, &tt));
	mark("cudaMemGetInfo");
}

/* npools pools of pool bytes each (a multiple of v->gran) as wcd makes
 * them, each timed: the first one's device address. */
static char *pools(const struct vmm *v, int npools, size_t pool)
{
	CUmemAccessDesc acc;
	char *dptr = NULL;
	double t;

	for (int i = 0; i < npools; i++) {
		CUmemGenericAllocationHandle h;
		CUdeviceptr p;
		int fd;

		t = clock_secs() * 1e3;
		DK(v->MemCreate(&h, pool, &v->prop, 0));
		DK(v->Reserve(&p, pool, v->gran, 0, 0));
		DK(v->Map(p, pool, 0, h, 0));
		acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc.location.id = 0;
		acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		DK(v->SetAccess(p, pool, &acc, 1));
		DK(v->Export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		if (!dptr)
			dptr = (char *)(uintptr_t)p;
		printf("  pool %d (%zu MiB): %.2f ms\n", i, pool >> 20, clock_secs() * 1e3 - t);
	}
	mark("pools (create+reserve+map+access+export)");
	return dptr;
}

/* wcd's 12 staging buffers of 8 MiB registered fresh (into buf), then 12
 * more touched first; then 1 GiB pinned fresh (the buffer returned) and
 * 1 GiB touched by 16 threads first. */
static char *pins(char *buf[12])
{
	char *b2[12], *big, *b;

	for (int i = 0; i < 12; i++) {
		buf[i] = anon(8 << 20);
		CK(cudaHostRegister(buf[i], 8 << 20, cudaHostRegisterDefault));
	}
	mark("staging 12 x 8 MiB fresh: mmap+register");
	for (int i = 0; i < 12; i++) {
		b2[i] = anon(8 << 20);
		memset(b2[i], 0, 8 << 20);
	}
	mark("staging 12 x 8 MiB: mmap+touch (no CUDA)");
	for (int i = 0; i < 12; i++)
		CK(cudaHostRegister(b2[i], 8 << 20, cudaHostRegisterDefault));
	mark("staging 12 x 8 MiB prefaulted: register");
	big = anon(1ul << 30);
	CK(cudaHostRegister(big, 1ul << 30, cudaHostRegisterDefault));
	mark("pin 1 GiB fresh (register faults it)");
	b = anon(1ul << 30);
	touch(b, 1ul << 30, 16);
	mark("1 GiB: touched by 16 threads");
	CK(cudaHostRegister(b, 1ul << 30, cudaHostRegisterDefault));
	mark("pin 1 GiB prefaulted");
	return big;
}

/* Four streams, two 8 MiB copies from buf, then the H2D ceiling: 4 GiB
 * from big (1 GiB pinned) into the pools in 128 MiB chunks on the four
 * streams, when the pools (npools x pool bytes at dptr) hold 4 GiB. */
static void copies(char *dptr, char *buf[12], char *big, int npools,
		   size_t pool)
{
	size_t chunk = 128u << 20, tot = 4ul << 30;
	cudaStream_t st[4];
	double t;

	for (int i = 0; i < 4; i++)
		CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
	mark("streams x4");
	CK(cudaMemcpyAsync(dptr, buf[0], 8 << 20, cudaMemcpyHostToDevice, st[0]));
	CK(cudaStreamSynchronize(st[0]));
	mark("first H2D 8 MiB");
	CK(cudaMemcpyAsync(dptr, buf[1], 8 << 20, cudaMemcpyHostToDevice, st[0]));
	CK(cudaStreamSynchronize(st[0]));
	mark("second H2D 8 MiB");
	if (npools * pool >= tot) {
		t = clock_secs() * 1e3;
		for (size_t o = 0, k = 0; o < tot; o += chunk, k++)
			CK(cudaMemcpyAsync(dptr + k % (pool / chunk) * chunk, big + o % (1ul << 30),
					   chunk, cudaMemcpyHostToDevice, st[k % 4]));
		CK(cudaDeviceSynchronize());
		t = clock_secs() * 1e3 - t;
		printf("H2D ceiling: %.2f GB/s (4 GiB, 128 MiB chunks, 4 streams)\n",
		       tot / t / 1e6);
	}
	mark("ceiling");
}

int main(int argc, char **argv)
{
	CUresult (*Init)(unsigned);
	const char *sp = getenv("SPAWN_NS");
	int npools = argc > 1 && strcmp(argv[1], "hold") ? atoi(argv[1]) : 8;
	size_t pool = (argc > 2 ? atol(argv[2]) : 1915ul) << 20;
	struct timespec rt;
	struct vmm v;
	char *buf[12], *big, *dptr;
	void *lib;

	clock_gettime(CLOCK_REALTIME, &rt);
	T0 = Tl = clock_secs() * 1e3;
	if (sp)
		printf("%-44s %8.2f ms\n", "spawn -> main",
		       (rt.tv_sec * 1e9 + rt.tv_nsec - atof(sp)) / 1e6);
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!lib) {
		fprintf(stderr, "no libcuda.so.1\n");
		return 1;
	}
	mark("dlopen libcuda.so.1");
	Init = (CUresult (*)(unsigned))dlsym(lib, "cuInit");
	DK(Init(0));
	mark("cuInit");
	if (argc > 2 && !strcmp(argv[1], "touch")) {
		touch_rounds((size_t)atol(argv[2]) << 30);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "hold")) {
		printf("holding the driver open\n");
		fflush(stdout);
		pause();
		return 0;
	}
	queries(&v);
	context();
	pool = (pool + v.gran - 1) / v.gran * v.gran;
	dptr = pools(&v, npools, pool);
	big = pins(buf);
	copies(dptr, buf, big, npools, pool);
	return 0;
}
