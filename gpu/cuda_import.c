/* SPDX-License-Identifier: MIT */
/*
 * The CUDA memory backend, engine side: import a pool exported by wcd.
 *
 *   VMM     cuMemImportFromShareableHandle on the POSIX fd, reserve a
 *           virtual range, map, and set access read-only (read-write only
 *           when asked). The engine's mapping holds its own reference, so
 *           its pointers stay valid after the daemon dies.
 *   legacy  cudaIpcOpenMemHandle on the 64-byte handle. CUDA IPC has no
 *           read-only mode: the mapping is writable (m->writable says so).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_priv.h"

static int import_vmm(struct gpu_dev *dev, int fd, uint64_t size,
		      bool writable, void *at, struct cuda_map *cm,
		      char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	CUmemAccessDesc acc;
	char es[160];
	CUresult r;
	int ret;

	r = cd->drv.MemImportFromShareableHandle(&cm->h, (void *)(uintptr_t)fd,
						 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r != CUDA_SUCCESS)
		return base_errf(err, gpu_cuda_drv_errno(r),
				     "cannot import pool fd %d on %s: %s; the daemon must run on the same GPU and be reachable (same host)",
				     fd, dev->name, gpu_cuda_drv_str(cd, r, es, sizeof(es)));
	cm->map_size = gpu_align_up(size, dev->granularity);
	cm->in_reserve = at != NULL;
	if (at)
		cm->ptr = (CUdeviceptr)(uintptr_t)at;
	else
		r = cd->drv.MemAddressReserve(&cm->ptr, cm->map_size,
					      dev->granularity, 0, 0);
	if (!at && r != CUDA_SUCCESS) {
		ret = base_errf(err, gpu_cuda_drv_errno(r),
				    "cannot reserve %zu bytes of device address space: %s",
				    cm->map_size, gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_release;
	}
	r = cd->drv.MemMap(cm->ptr, cm->map_size, 0, cm->h, 0);
	if (r != CUDA_SUCCESS) {
		ret = base_errf(err, gpu_cuda_drv_errno(r),
				    "cannot map an imported pool of %llu bytes: %s; the size does not match the daemon's pool",
				    (unsigned long long)size,
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_free_va;
	}
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = dev->ordinal;
	acc.flags = writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE :
			       CU_MEM_ACCESS_FLAGS_PROT_READ;
	r = cd->drv.MemSetAccess(cm->ptr, cm->map_size, &acc, 1);
	if (r != CUDA_SUCCESS) {
		ret = base_errf(err, gpu_cuda_drv_errno(r),
				    "cannot set %s access on an imported pool: %s",
				    writable ? "read-write" : "read-only",
				    gpu_cuda_drv_str(cd, r, es, sizeof(es)));
		goto out_unmap;
	}
	return 0;

out_unmap:
	cd->drv.MemUnmap(cm->ptr, cm->map_size);
out_free_va:
	if (!cm->in_reserve)
		cd->drv.MemAddressFree(cm->ptr, cm->map_size);
out_release:
	cd->drv.MemRelease(cm->h);
	return ret;
}

static int import_legacy(struct gpu_dev *dev, const unsigned char *handle,
			 struct cuda_map *cm, char *err)
{
	cudaIpcMemHandle_t h;
	cudaError_t e;
	void *p = NULL;

	memcpy(&h, handle, sizeof(h));
	e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
				     "cudaIpcOpenMemHandle on %s failed: %s; legacy handles open only in another process than the daemon, on the same host",
				     dev->name, cudaGetErrorString(e));
	cm->ptr = (CUdeviceptr)(uintptr_t)p;
	return 0;
}

int gpu_cuda_import(struct gpu_dev *dev, int fd, const unsigned char *handle,
		    uint64_t size, bool writable, void *at,
		    struct gpu_mapping *m, char *err)
{
	struct cuda_map *cm;
	CUcontext prev;
	int ret;

	memset(m, 0, sizeof(*m));
	if (size == 0 || (fd < 0 && !handle))
		return base_errf(err, EINVAL,
				     "import needs a pool fd or an IPC handle and a size (got fd %d, size %llu)",
				     fd, (unsigned long long)size);
	if (fd < 0 && at)
		return base_errf(err, EINVAL, "a legacy IPC handle cannot be mapped at a chosen address");
	cm = calloc(1, sizeof(*cm));
	if (!cm)
		return base_errf(err, ENOMEM, "out of host memory importing a pool");
	cm->legacy = fd < 0;
	ret = gpu_cuda_visit(dev, dev->ordinal, &prev, err);
	if (!ret) {
		ret = cm->legacy ? import_legacy(dev, handle, cm, err) :
				   import_vmm(dev, fd, size, writable, at, cm, err);
		gpu_cuda_leave(dev, prev);
	}
	if (ret) {
		free(cm);
		return ret;
	}
	m->size = size;
	m->ptr = (const void *)(uintptr_t)cm->ptr;
	m->writable = cm->legacy || writable;
	m->in_reserve = cm->in_reserve;
	m->priv = cm;
	return 0;
}

/* Address space for one lease's pools (gpu.h). */
int gpu_cuda_reserve(struct gpu_dev *dev, uint64_t size, void **at, char *err)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	CUdeviceptr p = 0;
	CUcontext prev;
	char es[160];
	CUresult r;
	int ret;

	if (!cd->vmm)
		return base_errf(err, EOPNOTSUPP, "%s has no VMM: no address space to reserve",
			       dev->name);
	ret = gpu_cuda_visit(dev, dev->ordinal, &prev, err);
	if (ret)
		return ret;
	r = cd->drv.MemAddressReserve(&p, gpu_align_up(size, dev->granularity),
				      dev->granularity, 0, 0);
	gpu_cuda_leave(dev, prev);
	if (r != CUDA_SUCCESS)
		return base_errf(err, gpu_cuda_drv_errno(r),
			       "cannot reserve %llu bytes of device address space: %s",
			       (unsigned long long)size,
			       gpu_cuda_drv_str(cd, r, es, sizeof(es)));
	*at = (void *)(uintptr_t)p;
	return 0;
}

void gpu_cuda_unreserve(struct gpu_dev *dev, void *at, uint64_t size)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	CUcontext prev;

	if (!at)
		return;
	/* given back even where the device cannot be entered */
	gpu_cuda_visit(dev, dev->ordinal, &prev, NULL);
	cd->drv.MemAddressFree((CUdeviceptr)(uintptr_t)at,
			       gpu_align_up(size, dev->granularity));
	gpu_cuda_leave(dev, prev);
}

/* Copies between host memory and m->ptr + off. Uses only m->ptr and
 * m->size, so a caller may describe any device range this process has
 * mapped (a test's view of a pool that libwcache imported). */
static int mapping_copy(struct gpu_dev *dev, const struct gpu_mapping *m,
			uint64_t off, void *host, const void *src, size_t len)
{
	CUcontext prev;
	cudaError_t e;
	int ret;

	if (!m->ptr || off > m->size || len > m->size - off)
		return -EINVAL;
	ret = gpu_cuda_visit(dev, dev->ordinal, &prev, NULL);
	if (ret)
		return ret;
	if (host)
		e = cudaMemcpy(host, (const char *)m->ptr + off, len, cudaMemcpyDeviceToHost);
	else
		e = cudaMemcpy((char *)(uintptr_t)m->ptr + off, src, len, cudaMemcpyHostToDevice);
	gpu_cuda_leave(dev, prev);
	return -gpu_cuda_rt_errno(e);
}

int gpu_cuda_read_mapping(struct gpu_dev *dev, const struct gpu_mapping *m,
			  uint64_t off, void *dst, size_t len)
{
	return mapping_copy(dev, m, off, dst, NULL, len);
}

/* No software check of m->writable: on a read-only VMM import the device
 * must refuse the write, and tests assert that it does. */
int gpu_cuda_write_mapping(struct gpu_dev *dev, const struct gpu_mapping *m,
			   uint64_t off, const void *src, size_t len)
{
	return mapping_copy(dev, m, off, NULL, src, len);
}

/* The device whose legacy default stream a NULL stream means for a
 * source on src_dev (gpu.h's copy_to_mapping): visited for the call
 * (*visited). For a stream of the caller's nothing changes: a copy may be
 * queued on a stream of any device. */
static int stream_enter(struct gpu_dev *dev, void *stream, int src_dev,
			CUcontext *prev, bool *visited, char *err)
{
	*visited = false;
	if (stream)
		return 0;
	*visited = true;
	return gpu_cuda_visit(dev, src_dev >= 0 ? src_dev : dev->ordinal,
			      prev, err);
}

static void stream_leave(struct gpu_dev *dev, CUcontext prev, bool visited)
{
	if (visited)
		gpu_cuda_leave(dev, prev);
}

/* An update session's write (gpu.h): one cudaMemcpy2DAsync (rows back
 * to back: one cudaMemcpyAsync) of kind cudaMemcpyDefault, which under
 * unified addressing tells device, peer and host sources apart by their
 * address, on the caller's stream. */
int gpu_cuda_copy_to_mapping(struct gpu_dev *dev, const struct gpu_mapping *m,
			     uint64_t off, const void *src, int src_dev,
			     size_t width, size_t height, size_t src_pitch,
			     void *stream)
{
	char *dst = (char *)(uintptr_t)m->ptr + off;
	CUcontext prev = NULL;
	bool visited;
	uint64_t rows;
	cudaError_t e;
	int ret;

	if (!m->ptr || !width || !height || src_pitch < width ||
	    __builtin_mul_overflow((uint64_t)width, (uint64_t)height, &rows) ||
	    off > m->size || rows > m->size - off)
		return -EINVAL;
	ret = stream_enter(dev, stream, src_dev, &prev, &visited, NULL);
	if (ret)
		return ret;
	/* rows back to back in the source too: one plain copy (2-D copies
	 * refuse pitches past cudaDevAttrMaxPitch, and run slower) */
	if (height == 1 || src_pitch == width)
		e = cudaMemcpyAsync(dst, src, rows, cudaMemcpyDefault,
				    (cudaStream_t)stream);
	else
		e = cudaMemcpy2DAsync(dst, width, src, src_pitch, width,
				      height, cudaMemcpyDefault,
				      (cudaStream_t)stream);
	stream_leave(dev, prev, visited);
	return -gpu_cuda_rt_errno(e);
}

int gpu_cuda_stream_sync(struct gpu_dev *dev, void *stream, int src_dev,
			 char *err)
{
	CUcontext prev = NULL;
	bool visited;
	cudaError_t e;
	int ret;

	ret = stream_enter(dev, stream, src_dev, &prev, &visited, err);
	if (ret)
		return ret;
	e = cudaStreamSynchronize((cudaStream_t)stream);
	stream_leave(dev, prev, visited);
	if (e != cudaSuccess)
		return base_errf(err, gpu_cuda_rt_errno(e),
				 "a copy into the update session's pools failed: %s; abort the session (the served version is untouched) and check the source tensors' devices",
				 cudaGetErrorString(e));
	return 0;
}

void gpu_cuda_unimport(struct gpu_dev *dev, struct gpu_mapping *m)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	struct cuda_map *cm = m->priv;
	CUcontext prev;

	if (!cm)
		return;
	/* a mapping is given up even where the device cannot be entered */
	gpu_cuda_visit(dev, dev->ordinal, &prev, NULL);
	if (cm->legacy) {
		cudaIpcCloseMemHandle((void *)(uintptr_t)cm->ptr);
	} else {
		cd->drv.MemUnmap(cm->ptr, cm->map_size);
		if (!cm->in_reserve)   /* else unreserve frees it */
			cd->drv.MemAddressFree(cm->ptr, cm->map_size);
		cd->drv.MemRelease(cm->h);
	}
	gpu_cuda_leave(dev, prev);
	free(cm);
	memset(m, 0, sizeof(*m));
}
