/* SPDX-License-Identifier: MIT */
/*
 * The CUDA memory backend: devices. Discovery (index or UUID, once per
 * process), open, the context, free memory, CUDA error texts: the bottom
 * of the backend, which calls no other cuda_* file (cuda_priv.h has the
 * order; the table and close are in cuda_backend.c).
 *
 * cudart is linked statically; the driver API is looked up at open time
 * (cuda_priv.h says why), so nothing here needs libcuda.so.1 to start.
 */
#include <dlfcn.h>
#include <errno.h>
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
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e = cudaSetDevice(dev->ordinal);   /* makes the context */

	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cannot make CUDA device %d current: %s",
				     dev->ordinal, cudaGetErrorString(e));
	if (cd)
		__atomic_store_n(&cd->ctx_made, true, __ATOMIC_RELAXED);
	return 0;
}

int gpu_cuda_visit(struct gpu_dev *dev, int ordinal, CUcontext *prev,
		   char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	cudaError_t e;

	if (cd->drv.CtxGetCurrent(prev) != CUDA_SUCCESS)
		*prev = NULL;
	e = cudaSetDevice(ordinal);
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cannot make CUDA device %d current: %s",
				     ordinal, cudaGetErrorString(e));
	if (ordinal == dev->ordinal)
		__atomic_store_n(&cd->ctx_made, true, __ATOMIC_RELAXED);
	return 0;
}

void gpu_cuda_leave(struct gpu_dev *dev, CUcontext prev)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	CUcontext cur = NULL;

	if (cd->drv.CtxGetCurrent(&cur) != CUDA_SUCCESS || cur != prev)
		cd->drv.CtxSetCurrent(prev);
}

/* GPU_CTX_ASYNC's thread: creates the primary context (cudaSetDevice does
 * since CUDA 12; cudaFree(0) makes sure); a failure is seen again by the
 * first gpu_cuda_enter that needs the context. */
static void *ctx_thread(void *arg)
{
	struct gpu_dev *dev = arg;

	if (gpu_cuda_enter(dev, NULL) == 0)
		cudaFree(0);
	return NULL;
}

/* Waits for GPU_CTX_ASYNC's thread, if one runs (from the thread that
 * opened the device: close and idle). */
void gpu_cuda_ctx_join(struct gpu_dev *dev)
{
	struct cuda_dev *cd = cuda_dev_of(dev);

	if (cd && cd->ctx_th_started) {
		pthread_join(cd->ctx_th, NULL);
		cd->ctx_th_started = false;
	}
}

int gpu_cuda_context(struct gpu_dev *dev, enum gpu_ctx how, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);

	switch (how) {
	case GPU_CTX_LAZY:
		return 0;
	case GPU_CTX_ASYNC:
		/* dev must stay where it is until close (wcd's is in struct wcd) */
		/* not wcd's pool: gpu/ is a library below the reactor */
		if (!pthread_create(&cd->ctx_th, NULL, ctx_thread, dev)) {
			cd->ctx_th_started = true;
			return 0;
		}
		return gpu_cuda_enter(dev, err);   /* no thread: now */
	case GPU_CTX_NOW:
	default: {
		/* an engine's open: the context made, the caller's kept */
		CUcontext prev;
		int ret = gpu_cuda_visit(dev, dev->ordinal, &prev, err);

		if (!ret)
			gpu_cuda_leave(dev, prev);
		return ret;
	}
	}
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
		E(CtxGetCurrent, 4000),
		E(CtxSetCurrent, 4000),
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
			return base_errf(err, ENOSYS,
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
	char drv_err[BASE_ERR_LEN];
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
		return base_errf(err, ENODEV,
				     "no CUDA device has UUID %s (%d visible): check nvidia-smi -L and CUDA_VISIBLE_DEVICES",
				     spec, count);
	}
	errno = 0;
	v = strtol(spec, &end, 10);
	if (errno || end == spec || *end || v < 0)
		return base_errf(err, EINVAL,
				     "bad CUDA device \"%s\": give an index (0..%d), a GPU-... UUID, or host",
				     spec, count - 1);
	if (v >= count)
		return base_errf(err, ENODEV,
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

/* Opens a device by index or UUID; the context (the first one in a process
 * costs about 0.1 to 0.5 s; later ones microseconds) is cuda_context's, as
 * gpu_dev_open_ctx asks. */
int gpu_cuda_open(struct gpu_dev *dev, const char *spec, char *err)
{
	const struct cuda_info *in;
	struct cuda_dev *cd;
	int ord = 0, ret;

	memset(dev, 0, sizeof(*dev));
	dev->ordinal = -1;
	pthread_once(&proc.once, proc_init);
	if (proc.count_err != cudaSuccess || proc.count <= 0)
		return base_errf(err, ENODEV,
				     "no CUDA device found: %s; use --device host",
				     no_device_why(proc.count_err));
	if (proc.drv_ret)
		return base_errf(err, -proc.drv_ret, "%s", proc.drv_err);
	ret = spec_ordinal(spec, proc.count, &ord, err);
	if (ret)
		return ret;
	in = info_get(ord);
	if (!in)
		return base_errf(err, EIO,
				     "cannot query CUDA device %d (its UUID): the driver refused; check nvidia-smi",
				     ord);
	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return base_errf(err, ENOMEM, "out of memory opening CUDA device %s", spec);
	cd->drv = proc.drv;
	cd->vmm = in->vmm;
	dev->priv = cd;
	dev->ordinal = ord;
	memcpy(dev->uuid, in->uuid, sizeof(dev->uuid));
	memcpy(dev->name, in->uuid, sizeof(dev->name));
	dev->cc_major = in->cc_major;
	dev->cc_minor = in->cc_minor;
	dev->export_kind = GPU_EXPORT_FD;
	dev->granularity = in->granularity;
	return 0;
}

int gpu_cuda_mem_info(struct gpu_dev *dev, uint64_t *free_b, uint64_t *total_b)
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
