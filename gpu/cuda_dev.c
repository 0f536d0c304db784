/* SPDX-License-Identifier: MIT */
/*
 * The CUDA memory backend, daemon side: open a device (index or UUID),
 * pools (VMM cuMemCreate with POSIX-fd handles, or legacy cudaMalloc + IPC
 * handle), pinned staging memory that io_uring can also register, and
 * asynchronous host-to-pool copies on a few streams whose completion runs a
 * host function that calls the caller's done(). Engine-side import lives in
 * cuda_import.c.
 *
 * cudart is linked statically; the driver API is looked up at open time
 * (cuda_priv.h says why), so nothing here needs libcuda.so.1 to start.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_priv.h"

#define HUGE_2M (2ull << 20)

int gpu_cuda_rt_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return ENOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidDevicePointer:
		return EINVAL;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
		return ENODEV;
	case cudaErrorNotSupported:
		return EOPNOTSUPP;
	case cudaErrorNotPermitted:
		return EPERM;
	default:
		return EIO;
	}
}

int gpu_cuda_drv_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
		return EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
		return EOPNOTSUPP;
	case CUDA_ERROR_NOT_PERMITTED:
		return EPERM;
	default:
		return EIO;
	}
}

const char *gpu_cuda_drv_str(struct cuda_dev *cd, CUresult r, char *buf,
			     size_t len)
{
	const char *s = NULL;

	if (cd && cd->drv.GetErrorString)
		cd->drv.GetErrorString(r, &s);
	snprintf(buf, len, "CUDA driver error %d (%s)", (int)r,
		 s ? s : "unknown");
	return buf;
}

int gpu_cuda_enter(struct gpu_dev *dev, char *err)
{
	cudaError_t e = cudaSetDevice(dev->ordinal);

	if (e != cudaSuccess)
		return wc_errf(err, gpu_cuda_rt_errno(e),
				     "cannot make CUDA device %d current: %s",
				     dev->ordinal, cudaGetErrorString(e));
	return 0;
}

/* Looks every driver function up by the CUDA version it was introduced
 * with, so the ABI matches the typedef. */
static int drv_resolve(struct cuda_drv *d, char *err)
{
	static const struct {
		const char *sym;
		size_t off;
		unsigned ver;
	} tab[] = {
#define E(f, v) { "cu" #f, offsetof(struct cuda_drv, f), v }
		E(GetErrorString, 6000),
		E(DeviceGet, 2000),
		E(DeviceGetAttribute, 2000),
		E(DeviceGetUuid, 11040),
		E(MemCreate, 10020),
		E(MemRelease, 10020),
		E(MemAddressReserve, 10020),
		E(MemAddressFree, 10020),
		E(MemMap, 10020),
		E(MemUnmap, 10020),
		E(MemSetAccess, 10020),
		E(MemExportToShareableHandle, 10020),
		E(MemImportFromShareableHandle, 10020),
		E(MemGetAllocationGranularity, 10020),
		E(MemGetAllocationPropertiesFromHandle, 10020),
#undef E
	};
	enum cudaDriverEntryPointQueryResult q;
	cudaError_t e;
	size_t i;

	for (i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		void *fn = NULL;

		e = cudaGetDriverEntryPointByVersion(tab[i].sym, &fn,
						     tab[i].ver,
						     cudaEnableDefault, &q);
		if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
			return wc_errf(err, ENOSYS,
					     "the CUDA driver lacks %s (query result %d, %s): update the NVIDIA driver or use --device host",
					     tab[i].sym, (int)q,
					     cudaGetErrorString(e));
		memcpy((char *)d + tab[i].off, &fn, sizeof(fn));
	}
	return 0;
}

static void uuid_format(const CUuuid *u, char *out, size_t len)
{
	const unsigned char *b = (const unsigned char *)u->bytes;

	snprintf(out, len,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
		 b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* What one process learns once: the device count, the driver table, and per
 * device its UUID, capability and VMM support. Engines open a device for
 * every connection, so open must cost microseconds after the first. */
struct cuda_info {
	bool known;
	char uuid[GPU_NAME_LEN];
	int cc_major, cc_minor;
	bool vmm;
	uint64_t granularity;
};

static struct {
	pthread_once_t once;
	pthread_mutex_t lock;
	cudaError_t count_err;
	int count;
	int drv_ret;
	char drv_err[WC_ERR_LEN];
	struct cuda_drv drv;
	struct cuda_info dev[CUDA_DEVS_MAX];
} proc = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER };

static void proc_init(void)
{
	proc.count_err = cudaGetDeviceCount(&proc.count);
	if (proc.count_err != cudaSuccess || proc.count <= 0)
		return;
	if (proc.count > CUDA_DEVS_MAX)
		proc.count = CUDA_DEVS_MAX;
	proc.drv_ret = drv_resolve(&proc.drv, proc.drv_err);
}

/* Fills (once) and returns the facts about ordinal ord. */
static const struct cuda_info *info_get(int ord)
{
	struct cuda_info *in = &proc.dev[ord];
	const struct cuda_drv *d = &proc.drv;
	CUmemAllocationProp prop;
	int vmm = 0, fdok = 0;
	size_t gran = 0;
	CUdevice cud;
	CUuuid u;

	pthread_mutex_lock(&proc.lock);
	if (in->known || d->DeviceGet(&cud, ord) != CUDA_SUCCESS)
		goto out;
	if (d->DeviceGetUuid(&u, cud) != CUDA_SUCCESS)
		goto out;
	uuid_format(&u, in->uuid, sizeof(in->uuid));
	d->DeviceGetAttribute(&in->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cud);
	d->DeviceGetAttribute(&in->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cud);
	d->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cud);
	d->DeviceGetAttribute(&fdok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, cud);
	in->vmm = vmm && fdok;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = ord;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	if (!in->vmm || d->MemGetAllocationGranularity(&gran, &prop,
			CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || !gran)
		gran = HUGE_2M;
	in->granularity = gran;
	in->known = true;
out:
	pthread_mutex_unlock(&proc.lock);
	return in->known ? in : NULL;
}

/* Resolves a spec ("0", "GPU-<uuid>") to an ordinal. */
static int spec_ordinal(const char *spec, int count, int *ord, char *err)
{
	const struct cuda_info *in;
	char *end;
	long v;
	int i;

	if (!strncasecmp(spec, "GPU-", 4)) {
		for (i = 0; i < count; i++) {
			in = info_get(i);
			if (in && !strcasecmp(in->uuid, spec)) {
				*ord = i;
				return 0;
			}
		}
		return wc_errf(err, ENODEV,
				     "no CUDA device has UUID %s (%d visible): check nvidia-smi -L and CUDA_VISIBLE_DEVICES",
				     spec, count);
	}
	errno = 0;
	v = strtol(spec, &end, 10);
	if (errno || end == spec || *end || v < 0)
		return wc_errf(err, EINVAL,
				     "bad CUDA device \"%s\": give an index (0..%d), a GPU-... UUID, or host",
				     spec, count - 1);
	if (v >= count)
		return wc_errf(err, ENODEV,
				     "CUDA device %ld does not exist: %d device(s) visible (0..%d); check nvidia-smi -L and CUDA_VISIBLE_DEVICES",
				     v, count, count - 1);
	*ord = (int)v;
	return 0;
}

/* Why cudaGetDeviceCount found nothing, in words: cudart reports a missing
 * libcuda.so.1 as an "insufficient driver", which misleads. */
static const char *no_device_why(cudaError_t e)
{
	void *h;

	if (e == cudaSuccess)
		return "the driver reports 0 devices";
	if (e != cudaErrorInsufficientDriver)
		return cudaGetErrorString(e);
	h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		return "the NVIDIA driver library libcuda.so.1 is not installed";
	dlclose(h);
	return "the NVIDIA driver is older than this build's CUDA runtime (update the driver)";
}

/* Opens a device by index or UUID and makes it current (the first open in
 * a process creates the primary context: about 0.1 to 0.5 s; later opens
 * cost microseconds). */
static int cuda_open(struct gpu_dev *dev, const char *spec, char *err)
{
	const struct cuda_info *in;
	struct cuda_dev *cd;
	int ord = 0, ret;

	memset(dev, 0, sizeof(*dev));
	dev->ordinal = -1;
	pthread_once(&proc.once, proc_init);
	if (proc.count_err != cudaSuccess || proc.count <= 0)
		return wc_errf(err, ENODEV,
				     "no CUDA device found: %s; use --device host",
				     no_device_why(proc.count_err));
	if (proc.drv_ret)
		return wc_errf(err, -proc.drv_ret, "%s", proc.drv_err);
	ret = spec_ordinal(spec, proc.count, &ord, err);
	if (ret)
		return ret;
	in = info_get(ord);
	if (!in)
		return wc_errf(err, EIO,
				     "cannot query CUDA device %d (its UUID): the driver refused; check nvidia-smi",
				     ord);
	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return wc_errf(err, ENOMEM, "out of memory opening CUDA device %s", spec);
	cd->drv = proc.drv;
	cd->vmm = in->vmm;
	dev->priv = cd;
	dev->be = gpu_cuda_backend();
	dev->ordinal = ord;
	ret = gpu_cuda_enter(dev, err);
	if (ret) {
		free(cd);
		dev->priv = NULL;
		return ret;
	}
	memcpy(dev->uuid, in->uuid, sizeof(dev->uuid));
	memcpy(dev->name, in->uuid, sizeof(dev->name));
	dev->cc_major = in->cc_major;
	dev->cc_minor = in->cc_minor;
	dev->export_kind = GPU_EXPORT_FD;
	dev->granularity = in->granularity;
	return 0;
}

static void cuda_close(struct gpu_dev *dev)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	int i;

	if (!cd)
		return;
	gpu_cuda_hash_end(dev, NULL, NULL);
	if (cd->streams_ready && gpu_cuda_enter(dev, NULL) == 0) {
		for (i = 0; i < CUDA_STREAMS; i++) {
			cudaStreamSynchronize(cd->st[i].s);
			cudaStreamDestroy(cd->st[i].s);
		}
	}
	free(cd);
	dev->priv = NULL;
}

static int cuda_mem_info(struct gpu_dev *dev, uint64_t *free_b, uint64_t *total_b)
{
	size_t f = 0, t = 0;
	cudaError_t e;
	int ret = gpu_cuda_enter(dev, NULL);

	if (ret)
		return ret;
	e = cudaMemGetInfo(&f, &t);
	if (e != cudaSuccess)
		return -gpu_cuda_rt_errno(e);
	*free_b = f;
	*total_b = t;
	return 0;
}

static void oom_hint(struct gpu_dev *dev, char *hint, size_t len)
{
	uint64_t f = 0, t = 0;

	if (cuda_mem_info(dev, &f, &t) == 0)
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
		return wc_errf(err, gpu_cuda_drv_errno(r),
				     "cuMemCreate of %llu bytes on %s failed: %s (%s); free device memory or load fewer ranks per GPU",
				     (unsigned long long)pool->alloc_size, dev->name,
				     gpu_cuda_drv_str(cd, r, es, sizeof(es)), hint);
	}
	r = cd->drv.MemAddressReserve(&ptr, pool->alloc_size, dev->granularity, 0, 0);
	if (r != CUDA_SUCCESS) {
		ret = wc_errf(err, gpu_cuda_drv_errno(r),
				    "cuMemAddressReserve of %llu bytes failed: %s",
				    (unsigned long long)pool->alloc_size,
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_release;
	}
	r = cd->drv.MemMap(ptr, pool->alloc_size, 0, cp->h, 0);
	if (r != CUDA_SUCCESS) {
		ret = wc_errf(err, gpu_cuda_drv_errno(r), "cuMemMap failed: %s",
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_free_va;
	}
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = dev->ordinal;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	r = cd->drv.MemSetAccess(ptr, pool->alloc_size, &acc, 1);
	if (r != CUDA_SUCCESS) {
		ret = wc_errf(err, gpu_cuda_drv_errno(r), "cuMemSetAccess failed: %s",
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_unmap;
	}
	r = cd->drv.MemExportToShareableHandle(&fd, cp->h,
					       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r != CUDA_SUCCESS || fd < 0) {
		ret = wc_errf(err, EIO,
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
		return wc_errf(err, gpu_cuda_rt_errno(e),
				     "cudaMalloc of %llu bytes on %s failed: %s (%s); free device memory or load fewer ranks per GPU",
				     (unsigned long long)pool->alloc_size, dev->name,
				     cudaGetErrorString(e), hint);
	}
	e = cudaIpcGetMemHandle(&h, p);
	if (e != cudaSuccess) {
		cudaFree(p);
		return wc_errf(err, gpu_cuda_rt_errno(e),
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
static int cuda_pool_create(struct gpu_dev *dev, struct gpu_pool *pool,
			    uint64_t size, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_pool *cp;
	int ret;

	memset(pool, 0, sizeof(*pool));
	pool->fd = -1;
	if (size == 0)
		return wc_errf(err, EINVAL, "a pool of 0 bytes was asked for");
	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	limits_trim(dev);
	cp = calloc(1, sizeof(*cp));
	if (!cp)
		return wc_errf(err, ENOMEM, "out of host memory for a pool record");
	cp->legacy = dev->export_kind == GPU_EXPORT_IPC_HANDLE;
	if (!cp->legacy && !cd->vmm) {
		free(cp);
		return wc_errf(err, EOPNOTSUPP,
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

static void cuda_pool_release(struct gpu_dev *dev, struct gpu_pool *pool)
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

int gpu_cuda_pool_ready(struct gpu_dev *dev, struct gpu_pool *pool, char *err)
{
	struct cuda_pool *cp = pool->priv;
	int ret;

	if (!cp)
		return wc_errf(err, EINVAL, "the pool was released");
	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	if (cp->legacy || cp->has_h || cp->remapped)
		return 0;
	limits_trim(dev);
	ret = gpu_cuda_import(dev, pool->fd, NULL, pool->alloc_size, true,
			      &cp->map, err);
	if (ret)
		return ret;
	cp->remapped = true;
	pool->dev_ptr = (uint64_t)(uintptr_t)cp->map.ptr;
	return 0;
}

/* Parks every pool (gpu.h), then destroys the context: the streams, the
 * trimmed limits and the hash state go with it and are made again on use.
 * Cost: one cudaDeviceReset (measured in bench/RESULTS.md). */
static int cuda_idle(struct gpu_dev *dev, struct gpu_pool *const *pools,
		     unsigned n, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e;
	int ret;

	for (unsigned i = 0; i < n; i++) {
		const struct cuda_pool *cp = pools[i]->priv;

		if (cp && cp->legacy)
			return wc_errf(err, ENOTSUP,
					     "legacy IPC pools live in the context; %s keeps it",
					     dev->name);
		if (cp && pools[i]->fd < 0)
			return wc_errf(err, EINVAL, "a pool has no exported fd");
	}
	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	gpu_cuda_hash_end(dev, NULL, NULL);
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
	if (e != cudaSuccess)
		return wc_errf(err, gpu_cuda_rt_errno(e),
				     "cannot release the CUDA context of %s: %s",
				     dev->name, cudaGetErrorString(e));
	return 0;
}

/* Anonymous memory (huge pages where the system has them reserved, else
 * transparent huge pages), page-locked with cudaHostRegister so copies DMA
 * straight from it; io_uring can register it as fixed buffers too, which it
 * cannot do with cudaHostAlloc memory (EFAULT). Size rounds up to 2 MiB. */
static int cuda_staging_alloc(struct gpu_dev *dev, size_t size, void **ptr, char *err)
{
	size_t len = gpu_align_up(size, HUGE_2M);
	cudaError_t e;
	void *p;
	int ret;

	if (size == 0)
		return wc_errf(err, EINVAL, "staging of 0 bytes was asked for");
	ret = gpu_cuda_enter(dev, err);
	if (ret)
		return ret;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (p == MAP_FAILED) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return wc_errf(err, errno,
					     "cannot map %zu bytes of staging memory: %s; lower the staging size",
					     len, strerror(errno));
		madvise(p, len, MADV_HUGEPAGE);
	}
	e = cudaHostRegister(p, len, cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		munmap(p, len);
		return wc_errf(err, gpu_cuda_rt_errno(e),
				     "cudaHostRegister of %zu bytes of staging failed: %s; raise the locked-memory limit (ulimit -l) or lower the staging size",
				     len, cudaGetErrorString(e));
	}
	*ptr = p;
	return 0;
}

static void cuda_staging_free(struct gpu_dev *dev, void *ptr, size_t size)
{
	if (!ptr)
		return;
	gpu_cuda_enter(dev, NULL);
	cudaHostUnregister(ptr);
	munmap(ptr, gpu_align_up(size, HUGE_2M));
}

int gpu_cuda_streams_init(struct gpu_dev *dev)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e;
	int i;

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

	atomic_fetch_sub_explicit(&cb->st->inflight, 1, memory_order_release);
	if (done)
		done(arg, 0);
}

/* Queues the copy and then the completion; -EBUSY when the stream already
 * holds CUDA_INFLIGHT_MAX copies (the caller's slot ring is smaller). */
static int cuda_copy_to_pool(struct gpu_dev *dev, struct gpu_pool *pool,
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
	if (!cd->streams_ready) {
		ret = gpu_cuda_streams_init(dev);
		if (ret)
			return ret;
	}
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

static int cuda_copy_from_pool(struct gpu_dev *dev, struct gpu_pool *pool,
			       uint64_t off, void *dst, size_t len)
{
	cudaError_t e;
	int ret;

	if (off > pool->alloc_size || len > pool->alloc_size - off)
		return -EINVAL;
	ret = gpu_cuda_pool_ready(dev, pool, NULL);
	if (ret)
		return ret;
	e = cudaMemcpy(dst, (char *)(uintptr_t)pool->dev_ptr + off, len,
		       cudaMemcpyDeviceToHost);
	return -gpu_cuda_rt_errno(e);
}

/* cudaMemset, then a device-wide wait: once per load, for the few zero
 * rows of padded vocabularies, so that no copy stream needs to order
 * against it. */
static int cuda_pool_zero(struct gpu_dev *dev, struct gpu_pool *pool,
			  uint64_t off, uint64_t len, char *err)
{
	cudaError_t e;
	int ret;

	if (off > pool->alloc_size || len > pool->alloc_size - off)
		return wc_errf(err, EINVAL, "zeroing %" PRIu64 " bytes at %" PRIu64 " is past the pool's %" PRIu64,
				len, off, pool->alloc_size);
	ret = gpu_cuda_pool_ready(dev, pool, err);
	if (ret)
		return ret;
	e = cudaMemset((char *)(uintptr_t)pool->dev_ptr + off, 0, len);
	if (e == cudaSuccess)
		e = cudaDeviceSynchronize();
	if (e != cudaSuccess)
		return wc_errf(err, gpu_cuda_rt_errno(e),
				"zeroing the padding rows on %s failed: %s",
				dev->name, cudaGetErrorString(e));
	return 0;
}

/* Nothing to seal on the device: engines import VMM pools read-only through
 * cuMemSetAccess. Waits for every queued copy and reports a failed one, so
 * a pool is sealed only once its bytes are really there. */
static int cuda_pool_seal(struct gpu_dev *dev, struct gpu_pool *pool, char *err)
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
			return wc_errf(err, gpu_cuda_rt_errno(e),
					     "a copy into the pools of %s failed: %s; the device is unusable until wcd restarts",
					     dev->name, cudaGetErrorString(e));
	}
	pool->sealed = true;
	return 0;
}

static const struct gpu_backend cuda_backend = {
	.name = "cuda",
	.open = cuda_open,
	.close = cuda_close,
	.mem_info = cuda_mem_info,
	.pool_create = cuda_pool_create,
	.staging_alloc = cuda_staging_alloc,
	.staging_free = cuda_staging_free,
	.copy_to_pool = cuda_copy_to_pool,
	.copy_from_pool = cuda_copy_from_pool,
	.pool_zero = cuda_pool_zero,
	.pool_seal = cuda_pool_seal,
	.pool_release = cuda_pool_release,
	.import = gpu_cuda_import,
	.read_mapping = gpu_cuda_read_mapping,
	.unimport = gpu_cuda_unimport,
	.write_mapping = gpu_cuda_write_mapping,
	.hash_begin = gpu_cuda_hash_begin,
	.hash_step = gpu_cuda_hash_step,
	.hash_end = gpu_cuda_hash_end,
	.idle = cuda_idle,
};

const struct gpu_backend *gpu_cuda_backend(void)
{
	return &cuda_backend;
}
