/* SPDX-License-Identifier: MIT */
/*
 * The CUDA memory backend, daemon side: pools (VMM cuMemCreate with
 * POSIX-fd handles, or legacy cudaMalloc + IPC handle), pinned staging
 * memory that io_uring can also register, asynchronous host-to-pool copies
 * on a few streams whose completion runs a host function that calls the
 * caller's done(), sealing, and idle (the context released while the pools
 * live on through their fds). Devices are opened in cuda_dev.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base.h"
#include "cuda_priv.h"

#define HUGE_2M (2ull << 20)

static void oom_hint(struct gpu_dev *dev, char *hint, size_t len)
{
	uint64_t f = 0, t = 0;

	if (gpu_cuda_mem_info(dev, &f, &t) == 0)
		snprintf(hint, len, "%llu MiB free of %llu MiB",
			 (unsigned long long)(f >> 20),
			 (unsigned long long)(t >> 20));
	else
		snprintf(hint, len, "free memory unknown");
}

/* A VMM pool: physical allocation, exported fd, and a read-write mapping in
 * the daemon's address space for the copies. */
static int pool_create_vmm(struct gpu_dev *dev, struct gpu_pool *pool,
			   struct cuda_pool *cp, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	CUdeviceptr ptr = 0;
	char es[160], hint[96];
	CUresult r;
	int fd = -1, ret;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev->ordinal;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	r = cd->drv.MemCreate(&cp->h, pool->alloc_size, &prop, 0);
	if (r != CUDA_SUCCESS) {
		oom_hint(dev, hint, sizeof(hint));
		return base_errf(err, gpu_cuda_drv_errno(r),
				     "cuMemCreate of %llu bytes on %s failed: %s (%s); free device memory or load fewer ranks per GPU",
				     (unsigned long long)pool->alloc_size, dev->name,
				     gpu_cuda_drv_str(cd, r, es, sizeof(es)), hint);
	}
	r = cd->drv.MemAddressReserve(&ptr, pool->alloc_size, dev->granularity, 0, 0);
	if (r != CUDA_SUCCESS) {
		ret = base_errf(err, gpu_cuda_drv_errno(r),
				    "cuMemAddressReserve of %llu bytes failed: %s",
				    (unsigned long long)pool->alloc_size,
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_release;
	}
	r = cd->drv.MemMap(ptr, pool->alloc_size, 0, cp->h, 0);
	if (r != CUDA_SUCCESS) {
		ret = base_errf(err, gpu_cuda_drv_errno(r), "cuMemMap failed: %s",
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_free_va;
	}
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = dev->ordinal;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cd->drv.MemSetAccess(ptr, pool->alloc_size, &acc, 1);
	if (r != CUDA_SUCCESS) {
		ret = base_errf(err, gpu_cuda_drv_errno(r), "cuMemSetAccess failed: %s",
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_unmap;
	}
	r = cd->drv.MemExportToShareableHandle(&fd, cp->h,
					       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r != CUDA_SUCCESS || fd < 0) {
		ret = base_errf(err, EIO,
				    "cuMemExportToShareableHandle (POSIX fd) failed: %s; try --ipc legacy",
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_unmap;
	}
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	pool->fd = fd;
	pool->dev_ptr = ptr;
	cp->has_h = true;
	return 0;

out_unmap:
	cd->drv.MemUnmap(ptr, pool->alloc_size);
out_free_va:
	cd->drv.MemAddressFree(ptr, pool->alloc_size);
out_release:
	cd->drv.MemRelease(cp->h);
	return ret;
}

static int pool_create_legacy(struct gpu_dev *dev, struct gpu_pool *pool, char *err)
{
	cudaIpcMemHandle_t h;
	char hint[96];
	void *p = NULL;
	cudaError_t e;

	e = cudaMalloc(&p, pool->alloc_size);
	if (e != cudaSuccess) {
		oom_hint(dev, hint, sizeof(hint));
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cudaMalloc of %llu bytes on %s failed: %s (%s); free device memory or load fewer ranks per GPU",
				     (unsigned long long)pool->alloc_size, dev->name,
				     cudaGetErrorString(e), hint);
	}
	e = cudaIpcGetMemHandle(&h, p);
	if (e != cudaSuccess) {
		cudaFree(p);
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cudaIpcGetMemHandle failed: %s; use the default (VMM) IPC mode",
				     cudaGetErrorString(e));
	}
	_Static_assert(sizeof(h) <= GPU_IPC_HANDLE_LEN, "IPC handle size");
	memcpy(pool->ipc_handle, &h, sizeof(h));
	pool->dev_ptr = (uint64_t)(uintptr_t)p;
	pool->fd = -1;
	return 0;
}

/* The daemon's only kernel (the hash, cuda_xxh3.cu) uses no stack, printf
 * or malloc, so the context's per-thread stack, printf FIFO and malloc heap
 * reservations are device memory that holds nothing.
 * Shrinks them once, on the first pool (only the daemon creates pools; an
 * engine's context is never touched). WCACHE_CUDA_KEEP_LIMITS=1 keeps the
 * defaults (to measure the difference). */
static void limits_trim(struct gpu_dev *dev)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	const char *keep = getenv("WCACHE_CUDA_KEEP_LIMITS");

	if (cd->limits_trimmed)
		return;
	cd->limits_trimmed = true;
	if (keep && !strcmp(keep, "1"))
		return;
	cudaDeviceSetLimit(cudaLimitStackSize, 0);
	cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 0);
	cudaDeviceSetLimit(cudaLimitMallocHeapSize, 0);
	cudaGetLastError();           /* a refused limit is not an error */
}

/* One large allocation, size rounded up to the granularity; the mode comes
 * from dev->export_kind (gpu.h). */
int gpu_cuda_pool_create(struct gpu_dev *dev, struct gpu_pool *pool,
			 uint64_t size, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_pool *cp;
	int ret;

	memset(pool, 0, sizeof(*pool));
	pool->fd = -1;
	if (size == 0)
		return base_errf(err, EINVAL, "a pool of 0 bytes was asked for");
	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	limits_trim(dev);
	cp = calloc(1, sizeof(*cp));
	if (!cp)
		return base_errf(err, ENOMEM, "out of host memory for a pool record");
	cp->legacy = dev->export_kind == GPU_EXPORT_IPC_HANDLE;
	if (!cp->legacy && !cd->vmm) {
		free(cp);
		return base_errf(err, EOPNOTSUPP,
				     "%s does not support VMM with POSIX file descriptors: use --ipc legacy",
				     dev->name);
	}
	pool->size = size;
	pool->alloc_size = gpu_align_up(size, dev->granularity);
	ret = cp->legacy ? pool_create_legacy(dev, pool, err) :
			   pool_create_vmm(dev, pool, cp, err);
	if (ret) {
		free(cp);
		return ret;
	}
	pool->priv = cp;
	return 0;
}

/* A VMM pool gives up this process's handle and mapping (the created ones,
 * or those re-mapped from its fd); the fd stays. Nothing for a parked one. */
static void pool_unmap(struct gpu_dev *dev, struct gpu_pool *pool)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_pool *cp = pool->priv;

	if (cp->has_h) {
		gpu_cuda_enter(dev, NULL);
		cd->drv.MemUnmap(pool->dev_ptr, pool->alloc_size);
		cd->drv.MemAddressFree(pool->dev_ptr, pool->alloc_size);
		cd->drv.MemRelease(cp->h);
		cp->has_h = false;
	} else if (cp->remapped) {
		gpu_cuda_enter(dev, NULL);
		gpu_cuda_unimport(dev, &cp->map);
		cp->remapped = false;
	}
	pool->dev_ptr = 0;
}

void gpu_cuda_pool_release(struct gpu_dev *dev, struct gpu_pool *pool)
{
	struct cuda_pool *cp = pool->priv;

	if (!cp)
		return;
	if (cp->legacy) {
		gpu_cuda_enter(dev, NULL);
		cudaFree((void *)(uintptr_t)pool->dev_ptr);
	} else {
		pool_unmap(dev, pool);
	}
	/* parked: the fd was all that held the memory (besides engines) */
	if (pool->fd >= 0)
		close(pool->fd);
	free(cp);
	pool->priv = NULL;
	pool->fd = -1;
	pool->dev_ptr = 0;
}

/* A VMM pool another daemon exported, parked as after idle: mapped again
 * from its fd on the next use (gpu_cuda_pool_ready), which is where a fd
 * that is not a VMM allocation of alloc_size bytes fails. */
int gpu_cuda_pool_adopt(struct gpu_dev *dev, struct gpu_pool *pool, int fd,
			uint64_t size, uint64_t alloc_size, bool sealed,
			char *err)
{
	struct cuda_pool *cp;

	memset(pool, 0, sizeof(*pool));
	pool->fd = -1;
	if (dev->export_kind != GPU_EXPORT_FD)
		return base_errf(err, EOPNOTSUPP,
				"legacy IPC pools cannot be handed over: they live in the old daemon's context");
	if (!size || size > alloc_size || alloc_size % dev->granularity)
		return base_errf(err, EINVAL,
				"a handed-over pool of %llu bytes in %llu is not a multiple of %s's granularity %llu",
				(unsigned long long)size,
				(unsigned long long)alloc_size, dev->name,
				(unsigned long long)dev->granularity);
	cp = calloc(1, sizeof(*cp));
	if (!cp)
		return base_errf(err, ENOMEM, "out of host memory for a pool record");
	pool->size = size;
	pool->alloc_size = alloc_size;
	pool->fd = fd;
	pool->sealed = sealed;
	pool->priv = cp;
	return 0;
}

int gpu_cuda_pool_ready(struct gpu_dev *dev, struct gpu_pool *pool, char *err)
{
	struct cuda_pool *cp = pool->priv;
	int ret;

	if (!cp)
		return base_errf(err, EINVAL, "the pool was released");
	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	if (cp->legacy || cp->has_h || cp->remapped)
		return 0;
	limits_trim(dev);
	ret = gpu_cuda_import(dev, pool->fd, NULL, pool->alloc_size, true,
			      NULL, &cp->map, err);
	if (ret)
		return ret;
	cp->remapped = true;
	pool->dev_ptr = (uint64_t)(uintptr_t)cp->map.ptr;
	return 0;
}

/* Parks every pool (gpu.h), then destroys the context: the streams, the
 * trimmed limits and the hash state go with it and are made again on use.
 * Cost: one cudaDeviceReset (measured in bench/RESULTS.md). */
int gpu_cuda_idle(struct gpu_dev *dev, struct gpu_pool *const *pools,
		  unsigned n, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e;
	int ret;

	for (unsigned i = 0; i < n; i++) {
		const struct cuda_pool *cp = pools[i]->priv;

		if (cp && cp->legacy)
			return base_errf(err, ENOTSUP,
					     "legacy IPC pools live in the context; %s keeps it",
					     dev->name);
		if (cp && pools[i]->fd < 0)
			return base_errf(err, EINVAL, "a pool has no exported fd");
	}
	gpu_cuda_ctx_join(dev);
	/* no context was made (wcd --takeover, GPU_CTX_LAZY): none to
	 * release, and making one to reset it would cost what it saves */
	if (!__atomic_load_n(&cd->ctx_made, __ATOMIC_RELAXED) &&
	    !cd->streams_ready)
		return 0;
	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	/* a running hash ends first (cuda_hash.c is above this file: through
	 * the table) */
	WC_ASSERT(dev->be && dev->be->hash_end);
	dev->be->hash_end(dev, NULL, NULL);
	if (cd->streams_ready) {
		for (int i = 0; i < CUDA_STREAMS; i++) {
			cudaStreamSynchronize(cd->st[i].s);
			cudaStreamDestroy(cd->st[i].s);
		}
		cd->streams_ready = false;
	}
	for (unsigned i = 0; i < n; i++)
		if (pools[i]->priv)
			pool_unmap(dev, pools[i]);
	cd->limits_trimmed = false;
	e = cudaDeviceReset();
	__atomic_store_n(&cd->ctx_made, false, __ATOMIC_RELAXED);
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cannot release the CUDA context of %s: %s",
				     dev->name, cudaGetErrorString(e));
	return 0;
}

/* Fresh anonymous memory is faulted in (zeroed) page by page inside
 * cudaHostRegister, on one thread: for a level-1 sleep's 16 GiB that was
 * 6 of its 6.2 s on the H200 (bench/RESULTS.md). Staging is first touched
 * by up to PREFAULT_THREADS threads (one per PREFAULT_PER_THREAD bytes),
 * before the context is waited for (it may still be in the making, on
 * GPU_CTX_ASYNC's thread), so that the register only pins resident pages:
 * for the loader's 96 MiB ring, 3 ms instead of 20-25 ms after the
 * context. */
#define PREFAULT_PER_THREAD (8ull << 20)
#define PREFAULT_THREADS 16

struct prefault { char *p; size_t n; };

static void *prefault_fn(void *arg)
{
	const struct prefault *f = arg;

	for (size_t o = 0; o < f->n; o += 4096)
		((volatile char *)f->p)[o] = 0;
	return NULL;
}

static void prefault(char *p, size_t len)
{
	struct prefault f[PREFAULT_THREADS];
	pthread_t th[PREFAULT_THREADS];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t want = len / PREFAULT_PER_THREAD;
	int n = cpus < 1 ? 1 : cpus > PREFAULT_THREADS ? PREFAULT_THREADS :
		(int)cpus, started = 0;
	size_t per;

	if ((size_t)n > want)
		n = want ? (int)want : 1;
	per = gpu_align_up((len + (size_t)n - 1) / (size_t)n, HUGE_2M);
	for (int i = 0; i < n; i++) {
		size_t off = per * (size_t)i;

		if (off >= len)
			break;
		f[i] = (struct prefault){ p + off, len - off < per ? len - off : per };
		/* not wcd's pool: gpu/ is a library below the reactor */
		if (n == 1 || pthread_create(&th[i], NULL, prefault_fn, &f[i])) {
			prefault_fn(&f[i]);
			continue;
		}
		started |= 1 << i;
	}
	for (int i = 0; i < n; i++)
		if (started & (1 << i))
			pthread_join(th[i], NULL);
}

/* Anonymous memory (huge pages where the system has them reserved, else
 * transparent huge pages), page-locked with cudaHostRegister so copies DMA
 * straight from it; io_uring can register it as fixed buffers too, which it
 * cannot do with cudaHostAlloc memory (EFAULT). Size rounds up to 2 MiB.
 * Mapped and faulted in before the device is entered (gpu_cuda_host_map:
 * no CUDA call, any thread): only the register waits for the context. */
int gpu_cuda_host_map(struct gpu_dev *dev, size_t size, void **ptr, char *err)
{
	size_t len = gpu_align_up(size, HUGE_2M);
	void *p;

	if (size == 0)
		return base_errf(err, EINVAL, "staging of 0 bytes was asked for");
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (p == MAP_FAILED) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return base_errf(err, errno,
					     "cannot map %zu bytes of staging memory: %s; lower the staging size",
					     len, strerror(errno));
		madvise(p, len, MADV_HUGEPAGE);
	}
	prefault(p, len);
	*ptr = p;
	return 0;
}

void gpu_cuda_host_unmap(struct gpu_dev *dev, void *ptr, size_t size)
{
	if (ptr)
		munmap(ptr, gpu_align_up(size, HUGE_2M));
}

/* Pins (cudaHostRegister) what gpu_cuda_host_map gave. On the H200 about
 * 0.37 s per 16 GiB of resident pages whatever the number of threads
 * registering at once (bench/RESULTS.md, issue 17: the driver serialises
 * them), and a cudaMemcpy called meanwhile waits for it. */
int gpu_cuda_staging_pin(struct gpu_dev *dev, void *ptr, size_t size, char *err)
{
	size_t len = gpu_align_up(size, HUGE_2M);
	CUcontext prev;
	cudaError_t e;
	int ret;

	/* also a client's (libwcache's verify): the caller's device kept */
	ret = gpu_cuda_visit(dev, dev->ordinal, &prev, err);
	if (ret)
		return ret;
	e = cudaHostRegister(ptr, len, cudaHostRegisterDefault);
	gpu_cuda_leave(dev, prev);
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cudaHostRegister of %zu bytes of staging failed: %s; raise the locked-memory limit (ulimit -l) or lower the staging size",
				     len, cudaGetErrorString(e));
	return 0;
}

int gpu_cuda_staging_alloc(struct gpu_dev *dev, size_t size, void **ptr, char *err)
{
	void *p;
	int ret;

	ret = gpu_cuda_host_map(dev, size, &p, err);
	if (ret)
		return ret;
	ret = gpu_cuda_staging_pin(dev, p, size, err);
	if (ret) {
		gpu_cuda_host_unmap(dev, p, size);
		return ret;
	}
	*ptr = p;
	return 0;
}

void gpu_cuda_staging_free(struct gpu_dev *dev, void *ptr, size_t size)
{
	CUcontext prev;

	if (!ptr)
		return;
	/* unregistered even where the device cannot be entered, as before */
	gpu_cuda_visit(dev, dev->ordinal, &prev, NULL);
	cudaHostUnregister(ptr);
	gpu_cuda_leave(dev, prev);
	munmap(ptr, gpu_align_up(size, HUGE_2M));
}

/* The copy streams, made once (again after idle released them). */
int gpu_cuda_streams_init(struct gpu_dev *dev)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e;
	int i;

	if (cd->streams_ready)
		return 0;
	for (i = 0; i < CUDA_STREAMS; i++) {
		e = cudaStreamCreateWithFlags(&cd->st[i].s, cudaStreamNonBlocking);
		if (e != cudaSuccess) {
			while (i--)
				cudaStreamDestroy(cd->st[i].s);
			return -gpu_cuda_rt_errno(e);
		}
		cd->st[i].tail = 0;
		atomic_init(&cd->st[i].inflight, 0);
	}
	cd->streams_ready = true;
	return 0;
}

/* Runs on a CUDA driver thread when the stream reaches it: frees the ring
 * record first, then hands off (done must not block). */
static void CUDART_CB copy_done(void *userdata)
{
	struct cuda_cb *cb = userdata;
	gpu_done_fn done = cb->done;
	void *arg = cb->arg;
	unsigned was;

	/* one call per record queued: the count was raised for this one */
	was = atomic_fetch_sub_explicit(&cb->st->inflight, 1, memory_order_release);
	WC_ASSERT(was > 0 && was <= CUDA_INFLIGHT_MAX);
	if (done)
		done(arg, 0);
}

/* Queues the copy and then the completion; -EBUSY when the stream already
 * holds CUDA_INFLIGHT_MAX copies (the caller's slot ring is smaller). */
int gpu_cuda_copy_to_pool(struct gpu_dev *dev, struct gpu_pool *pool,
			  const struct gpu_copy *c, unsigned stream,
			  gpu_done_fn done, void *arg)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_stream *st;
	struct cuda_cb *cb;
	cudaError_t e;
	uint64_t end;
	char *dst;
	int ret;

	if (!c->width || !c->height)
		return -EINVAL;
	end = c->height == 1 ? c->dst_off + c->width :
	      c->dst_off + (uint64_t)(c->height - 1) * c->dst_pitch + c->width;
	if (end > pool->alloc_size || end < c->dst_off ||
	    (c->height > 1 && (c->dst_pitch < c->width || c->src_pitch < c->width)))
		return -EINVAL;
	ret = gpu_cuda_pool_ready(dev, pool, NULL);
	if (ret)
		return ret;
	ret = gpu_cuda_streams_init(dev);
	if (ret)
		return ret;
	WC_ASSERT(cd->streams_ready);
	st = &cd->st[stream % CUDA_STREAMS];
	if (atomic_load_explicit(&st->inflight, memory_order_acquire) >= CUDA_INFLIGHT_MAX)
		return -EBUSY;
	dst = (char *)(uintptr_t)pool->dev_ptr + c->dst_off;
	if (c->height == 1)
		e = cudaMemcpyAsync(dst, c->src, c->width, cudaMemcpyHostToDevice, st->s);
	else
		e = cudaMemcpy2DAsync(dst, c->dst_pitch, c->src, c->src_pitch,
				      c->width, c->height, cudaMemcpyHostToDevice, st->s);
	if (e != cudaSuccess)
		return -gpu_cuda_rt_errno(e);
	cb = &st->cb[st->tail % CUDA_INFLIGHT_MAX];
	cb->done = done;
	cb->arg = arg;
	cb->st = st;
	atomic_fetch_add_explicit(&st->inflight, 1, memory_order_acq_rel);
	e = cudaLaunchHostFunc(st->s, copy_done, cb);
	if (e != cudaSuccess) {
		atomic_fetch_sub(&st->inflight, 1);
		cudaStreamSynchronize(st->s);
		return -gpu_cuda_rt_errno(e);
	}
	st->tail++;
	return 0;
}

/* A copy out of pool's [off, off + len): in range, and the pool mapped. */
static int from_pool_ready(struct gpu_dev *dev, struct gpu_pool *pool,
			   uint64_t off, size_t len)
{
	if (off > pool->alloc_size || len > pool->alloc_size - off)
		return -EINVAL;
	return gpu_cuda_pool_ready(dev, pool, NULL);
}

int gpu_cuda_copy_from_pool(struct gpu_dev *dev, struct gpu_pool *pool,
			    uint64_t off, void *dst, size_t len)
{
	cudaError_t e;
	int ret;

	ret = from_pool_ready(dev, pool, off, len);
	if (ret)
		return ret;
	e = cudaMemcpy(dst, (char *)(uintptr_t)pool->dev_ptr + off, len,
		       cudaMemcpyDeviceToHost);
	return -gpu_cuda_rt_errno(e);
}

/* On copy stream 0 (no completion record: copy_wait synchronises it). */
int gpu_cuda_copy_from_pool_async(struct gpu_dev *dev, struct gpu_pool *pool,
				  uint64_t off, void *dst, size_t len)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e;
	int ret;

	ret = from_pool_ready(dev, pool, off, len);
	if (ret)
		return ret;
	ret = gpu_cuda_streams_init(dev);
	if (ret)
		return ret;
	e = cudaMemcpyAsync(dst, (char *)(uintptr_t)pool->dev_ptr + off, len,
			    cudaMemcpyDeviceToHost, cd->st[0].s);
	return -gpu_cuda_rt_errno(e);
}

int gpu_cuda_copy_wait(struct gpu_dev *dev, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e;

	if (!cd->streams_ready)
		return 0;
	e = cudaStreamSynchronize(cd->st[0].s);
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
			       "a copy from the pools of %s to host memory failed: %s",
			       dev->name, cudaGetErrorString(e));
	return 0;
}

/* cudaMemset, then a device-wide wait: once per load, for the few zero
 * rows of padded vocabularies, so that no copy stream needs to order
 * against it. */
int gpu_cuda_pool_fill(struct gpu_dev *dev, struct gpu_pool *pool,
		       uint64_t off, uint64_t len, uint8_t byte, char *err)
{
	cudaError_t e;
	int ret;

	if (off > pool->alloc_size || len > pool->alloc_size - off)
		return base_errf(err, EINVAL, "filling %" PRIu64 " bytes at %" PRIu64 " is past the pool's %" PRIu64,
			       len, off, pool->alloc_size);
	ret = gpu_cuda_pool_ready(dev, pool, err);
	if (ret)
		return ret;
	e = cudaMemset((char *)(uintptr_t)pool->dev_ptr + off, byte, len);
	if (e == cudaSuccess)
		e = cudaDeviceSynchronize();
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
			       "filling pool bytes (the padding rows) on %s failed: %s",
			       dev->name, cudaGetErrorString(e));
	return 0;
}

/* A device-to-device copy between two of the daemon's pools, then a wait
 * for it (gpu.h's pool_copy): a partial update's kept tensors, about
 * half the device's bandwidth. */
int gpu_cuda_pool_copy(struct gpu_dev *dev, struct gpu_pool *dst,
		       uint64_t off_dst, struct gpu_pool *src,
		       uint64_t off_src, uint64_t len, char *err)
{
	cudaError_t e;
	int ret;

	if (off_dst > dst->alloc_size || len > dst->alloc_size - off_dst ||
	    off_src > src->alloc_size || len > src->alloc_size - off_src)
		return base_errf(err, EINVAL, "copying %" PRIu64 " bytes between pools at %" PRIu64 " and %" PRIu64 " is past a pool's end",
			       len, off_src, off_dst);
	ret = gpu_cuda_pool_ready(dev, src, err);
	if (!ret)
		ret = gpu_cuda_pool_ready(dev, dst, err);
	if (ret)
		return ret;
	e = cudaMemcpyAsync((char *)(uintptr_t)dst->dev_ptr + off_dst,
			    (const char *)(uintptr_t)src->dev_ptr + off_src,
			    len, cudaMemcpyDeviceToDevice, 0);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(0);
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
			       "copying %" PRIu64 " bytes between pools on %s failed: %s",
			       len, dev->name, cudaGetErrorString(e));
	return 0;
}

/* Nothing to seal on the device: engines import VMM pools read-only through
 * cuMemSetAccess. Waits for every queued copy and reports a failed one, so
 * a pool is sealed only once its bytes are really there. */
int gpu_cuda_pool_seal(struct gpu_dev *dev, struct gpu_pool *pool, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e;
	int i, ret;

	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	for (i = 0; cd->streams_ready && i < CUDA_STREAMS; i++) {
		e = cudaStreamSynchronize(cd->st[i].s);
		if (e != cudaSuccess)
			return base_errf(err, gpu_cuda_rt_errno(e),
					     "a copy into the pools of %s failed: %s; the device is unusable until wcd restarts",
					     dev->name, cudaGetErrorString(e));
	}
	pool->sealed = true;
	return 0;
}
