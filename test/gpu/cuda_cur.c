/* SPDX-License-Identifier: MIT */
/*
 * The client side of the CUDA backend (gpu/cuda_dev.c's open context,
 * gpu/cuda_import.c) leaves the calling thread's current device as it
 * found it, run here without a GPU: both files are compiled in with the
 * runtime calls they make (cudaSetDevice, copies, IPC) and the driver
 * table replaced by a fake of three devices whose one state is the
 * thread's current context (none, or a device's primary context). A
 * trainer on GPU 1 that pushes to the daemon of GPU 0, or a process that
 * attaches several ranks, keeps its current device (torch's too: it is
 * the driver's current context). For every client call, from each
 * starting state (no context, another device's, the device's own): the
 * call's work ran with the device it needs current (the pool's device;
 * for a copy queued on the legacy default stream, the source's), and
 * afterwards the starting state is back.
 * Skips (77) where the build has no CUDA headers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"

#if WC_CUDA
#define cudaSetDevice fake_set_device
#define cudaMemcpy fake_memcpy
#define cudaMemcpyAsync fake_memcpy_async
#define cudaMemcpy2DAsync fake_memcpy_2d_async
#define cudaStreamSynchronize fake_stream_sync
#define cudaIpcOpenMemHandle fake_ipc_open
#define cudaIpcCloseMemHandle fake_ipc_close
#include "cuda_dev.c"
#include "cuda_import.c"

#define NDEV 3

static struct { int d; } fake_ctx[NDEV];
static int cur = -1;            /* the thread's current device; -1: none */
static int seen;                /* the current device at the last work */
static unsigned calls;          /* work done (runtime or driver) */

static void work(void)
{
	seen = cur;
	calls++;
}

cudaError_t fake_set_device(int d)
{
	if (d < 0 || d >= NDEV)
		return cudaErrorInvalidDevice;
	cur = d;
	return cudaSuccess;
}

cudaError_t fake_memcpy(void *dst, const void *src, size_t n,
			enum cudaMemcpyKind k)
{
	(void)dst, (void)src, (void)n, (void)k;
	work();
	return cudaSuccess;
}

cudaError_t fake_memcpy_async(void *dst, const void *src, size_t n,
			      enum cudaMemcpyKind k, cudaStream_t s)
{
	(void)dst, (void)src, (void)n, (void)k, (void)s;
	work();
	return cudaSuccess;
}

cudaError_t fake_memcpy_2d_async(void *dst, size_t dp, const void *src,
				 size_t sp, size_t w, size_t h,
				 enum cudaMemcpyKind k, cudaStream_t s)
{
	(void)dst, (void)dp, (void)src, (void)sp, (void)w, (void)h, (void)k;
	(void)s;
	work();
	return cudaSuccess;
}

cudaError_t fake_stream_sync(cudaStream_t s)
{
	(void)s;
	work();
	return cudaSuccess;
}

cudaError_t fake_ipc_open(void **p, cudaIpcMemHandle_t h, unsigned flags)
{
	(void)h, (void)flags;
	*p = (void *)(uintptr_t)0x7f0000000000ull;
	work();
	return cudaSuccess;
}

cudaError_t fake_ipc_close(void *p)
{
	(void)p;
	work();
	return cudaSuccess;
}

static CUresult CUDAAPI ctx_get(CUcontext *c)
{
	*c = cur < 0 ? NULL : (CUcontext)(void *)&fake_ctx[cur];
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI ctx_set(CUcontext c)
{
	cur = c ? (int)((const char *)(void *)c - (const char *)fake_ctx) /
		  (int)sizeof(fake_ctx[0]) : -1;
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI mem_import(CUmemGenericAllocationHandle *h, void *fd,
				   CUmemAllocationHandleType t)
{
	(void)fd, (void)t;
	*h = 1;
	work();
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI mem_reserve(CUdeviceptr *p, size_t n, size_t a,
				    CUdeviceptr at, unsigned long long f)
{
	(void)n, (void)a, (void)at, (void)f;
	*p = 0x7e0000000000ull;
	work();
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI mem_free(CUdeviceptr p, size_t n)
{
	(void)p, (void)n;
	work();
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI mem_map(CUdeviceptr p, size_t n, size_t o,
				CUmemGenericAllocationHandle h,
				unsigned long long f)
{
	(void)p, (void)n, (void)o, (void)h, (void)f;
	work();
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI mem_unmap(CUdeviceptr p, size_t n)
{
	(void)p, (void)n;
	work();
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI mem_access(CUdeviceptr p, size_t n,
				   const CUmemAccessDesc *d, size_t c)
{
	(void)p, (void)n, (void)d, (void)c;
	work();
	return CUDA_SUCCESS;
}

static CUresult CUDAAPI mem_release(CUmemGenericAllocationHandle h)
{
	(void)h;
	work();
	return CUDA_SUCCESS;
}

/* Runs one client call from each starting state: `what` must have done
 * work with device `want` current and left the state as it found it. */
#define EACH_START(what, want, call)                                         \
	for (int s = -1; s < NDEV; s++) {                                    \
		cur = s;                                                     \
		seen = -2;                                                   \
		calls = 0;                                                   \
		call;                                                        \
		if (!calls || seen != (want))                                \
			T_FAIL("%s from device %d current: its work ran with device %d current, not %d", \
			       what, s, seen, (want));                       \
		if (cur != s)                                                \
			T_FAIL("%s from device %d current (-1: none) left device %d current", \
			       what, s, cur);                                \
	}

int main(void)
{
	static struct cuda_dev cd;
	struct gpu_dev dev = { .priv = &cd, .ordinal = 1,
			       .granularity = 2u << 20 };
	unsigned char handle[64] = { 0 };
	struct gpu_mapping m, legacy;
	char err[BASE_ERR_LEN], buf[16];
	void *at = NULL;
	int dummy_stream;

	snprintf(dev.name, sizeof(dev.name), "fake GPU 1");
	cd.vmm = true;
	cd.drv.CtxGetCurrent = ctx_get;
	cd.drv.CtxSetCurrent = ctx_set;
	cd.drv.MemImportFromShareableHandle = mem_import;
	cd.drv.MemAddressReserve = mem_reserve;
	cd.drv.MemAddressFree = mem_free;
	cd.drv.MemMap = mem_map;
	cd.drv.MemUnmap = mem_unmap;
	cd.drv.MemSetAccess = mem_access;
	cd.drv.MemRelease = mem_release;

	/* an engine's open makes the context and keeps the caller's */
	for (int s = -1; s < NDEV; s++) {
		cur = s;
		T_OK(gpu_cuda_context(&dev, GPU_CTX_NOW, err));
		T_ASSERT(cur == s);
		T_ASSERT(cd.ctx_made);
	}
	EACH_START("a VMM import", 1, {
		T_OK(gpu_cuda_import(&dev, 5, NULL, 4u << 20, false, NULL, &m, err));
		T_ASSERT(m.ptr != NULL);
		if (s < NDEV - 1)
			gpu_cuda_unimport(&dev, &m);
	});
	EACH_START("reading a mapping", 1,
		   T_ASSERT(!gpu_cuda_read_mapping(&dev, &m, 0, buf, sizeof(buf))));
	EACH_START("writing a mapping", 1,
		   T_ASSERT(!gpu_cuda_write_mapping(&dev, &m, 0, buf, sizeof(buf))));
	/* an update's copy: on the caller's stream nothing is made current;
	 * on the legacy default stream, the source's device (a peer copy from
	 * GPU 2; host memory: the pool's) */
	for (int s = -1; s < NDEV; s++) {
		cur = s;
		seen = -2;
		T_ASSERT(!gpu_cuda_copy_to_mapping(&dev, &m, 0, buf, 2, 8, 2, 8,
						   &dummy_stream));
		T_ASSERT(cur == s && seen == s);
	}
	EACH_START("a peer copy on the default stream", 2,
		   T_ASSERT(!gpu_cuda_copy_to_mapping(&dev, &m, 0, buf, 2, 8, 2,
						      16, NULL)));
	EACH_START("a host copy on the default stream", 1,
		   T_ASSERT(!gpu_cuda_copy_to_mapping(&dev, &m, 0, buf, -1, 16,
						      1, 16, NULL)));
	EACH_START("waiting for a peer's default stream", 2,
		   T_OK(gpu_cuda_stream_sync(&dev, NULL, 2, err)));
	gpu_cuda_unimport(&dev, &m);
	EACH_START("giving a mapping up", 1, {
		T_OK(gpu_cuda_import(&dev, 5, NULL, 4u << 20, false, NULL, &m, err));
		calls = 0;      /* only the unimport's work counts */
		gpu_cuda_unimport(&dev, &m);
	});
	EACH_START("a reserve", 1,
		   T_OK(gpu_cuda_reserve(&dev, 8u << 20, &at, err)));
	EACH_START("an import into a reserve", 1, {
		T_OK(gpu_cuda_import(&dev, 5, NULL, 4u << 20, true, at, &m, err));
		gpu_cuda_unimport(&dev, &m);
	});
	EACH_START("an unreserve", 1, gpu_cuda_unreserve(&dev, at, 8u << 20));
	EACH_START("a legacy import", 1, {
		T_OK(gpu_cuda_import(&dev, -1, handle, 4u << 20, false, NULL,
				     &legacy, err));
		gpu_cuda_unimport(&dev, &legacy);
	});
	/* a failed visit (no such device) changes nothing and says why */
	cur = 0;
	dev.ordinal = 7;
	T_ASSERT(gpu_cuda_import(&dev, 5, NULL, 4u << 20, false, NULL, &m,
				 err) < 0);
	T_ASSERT(strstr(err, "device 7") != NULL);
	T_ASSERT(cur == 0);
	/* what is given back is given back all the same, the caller's
	 * device kept */
	dev.ordinal = 1;
	T_OK(gpu_cuda_reserve(&dev, 8u << 20, &at, err));
	T_OK(gpu_cuda_import(&dev, 5, NULL, 4u << 20, false, NULL, &m, err));
	dev.ordinal = 7;
	cur = 0;
	calls = 0;
	gpu_cuda_unimport(&dev, &m);
	T_ASSERT(calls == 3 && cur == 0 && m.priv == NULL);  /* unmap, free, release */
	calls = 0;
	gpu_cuda_unreserve(&dev, at, 8u << 20);
	T_ASSERT(calls == 1 && cur == 0);
	printf("every client call ran on its device and left the caller's current device as it was\n");
	return 0;
}
#else
int main(void)
{
	T_SKIP_IF(1, "this build has no CUDA headers (the client side is CUDA's)");
	return 0;
}
#endif
