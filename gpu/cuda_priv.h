/* SPDX-License-Identifier: MIT */
/*
 * Private to gpu/cuda*.c: the per-device state of the CUDA backend and the
 * driver API table. The files, each calling only the ones below it:
 *   cuda_backend.c   the backend table (gpu.h), open and close
 *   cuda_hash.c      hashes on the device (its kernels: cuda_xxh3.cu)
 *   cuda_pool.c      pools, staging, copies, seal, idle (the daemon side)
 *   cuda_import.c    the engine side: import, reserve, read and write
 *   cuda_dev.c       devices: discovery, open, the context, error texts
 * A call up goes through the table (dev->be): idle ends a running hash so.
 * Only files under gpu/ include this (it pulls in CUDA headers).
 *
 * The driver API (VMM: cuMemCreate and friends) is never linked: every
 * function is looked up through cudaGetDriverEntryPointByVersion once the
 * runtime has found a driver, so binaries start on machines without
 * libcuda.so.1 (CI) and fail there with a clear error at open time.
 */
#ifndef WC_GPU_CUDA_PRIV_H
#define WC_GPU_CUDA_PRIV_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>

#include "gpu.h"

#define CUDA_DEVS_MAX 64         /* devices one process looks at */
#define CUDA_STREAMS 4           /* copy streams per device */
#define CUDA_INFLIGHT_MAX 1024   /* outstanding copies per stream */
#define CUDA_HASH_CHAINS 16      /* hash streams while hashing (cuda_hash.c) */

/* Driver entry points, resolved at open time. */
struct cuda_drv {
	PFN_cuGetErrorString_v6000 GetErrorString;
	PFN_cuDeviceGet_v2000 DeviceGet;
	PFN_cuDeviceGetAttribute_v2000 DeviceGetAttribute;
	PFN_cuDeviceGetUuid_v11040 DeviceGetUuid;
	PFN_cuMemCreate_v10020 MemCreate;
	PFN_cuMemRelease_v10020 MemRelease;
	PFN_cuMemAddressReserve_v10020 MemAddressReserve;
	PFN_cuMemAddressFree_v10020 MemAddressFree;
	PFN_cuMemMap_v10020 MemMap;
	PFN_cuMemUnmap_v10020 MemUnmap;
	PFN_cuMemSetAccess_v10020 MemSetAccess;
	PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle;
	PFN_cuMemImportFromShareableHandle_v10020 MemImportFromShareableHandle;
	PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity;
	PFN_cuMemGetAllocationPropertiesFromHandle_v10020 MemGetAllocationPropertiesFromHandle;
	PFN_cuCtxGetCurrent_v4000 CtxGetCurrent;
	PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
};

/* One queued completion: done(arg, 0) once the stream reaches it. */
struct cuda_cb {
	gpu_done_fn done;
	void *arg;
	struct cuda_stream *st;
};

/* A copy stream with a fixed ring of completion records; host functions on
 * one stream run in order, so the ring is consumed FIFO. */
struct cuda_stream {
	cudaStream_t s;
	struct cuda_cb cb[CUDA_INFLIGHT_MAX];
	unsigned tail;                 /* next record to fill (submitter) */
	atomic_uint inflight;          /* filled, not yet called back */
};

struct cuda_dev {
	struct cuda_drv drv;
	bool vmm;                      /* device supports VMM + POSIX fds */
	bool streams_ready;
	bool limits_trimmed;           /* daemon: kernel reservations shrunk */
	struct cuda_stream st[CUDA_STREAMS];
	struct cuda_hash *hash;        /* between hash_begin and hash_end */
	/* the last hash's streams, events and per-tensor device memory,
	 * kept for the next (cuda_hash.c: hash_park); freed by an
	 * abandoning hash_end (idle, close) */
	struct cuda_hash *spare;
	/* GPU_CTX_ASYNC: the thread creating the primary context */
	pthread_t ctx_th;
	bool ctx_th_started;
	/* whether a context may exist (made since open or the last idle);
	 * written with __atomic (any thread enters) */
	bool ctx_made;
};

/* Per-pool state (daemon side). A VMM pool is in one of three states:
 * created (h valid, mapped at dev_ptr), parked by idle (no handle, no
 * mapping, no context: only pool->fd holds the memory), or re-mapped after
 * parking (imported from its own fd into map). */
struct cuda_pool {
	bool legacy;                   /* cudaMalloc + IPC handle */
	bool has_h;                    /* VMM: h is ours, mapped at dev_ptr */
	CUmemGenericAllocationHandle h;
	bool remapped;                 /* VMM: map holds the mapping */
	struct gpu_mapping map;
};

/* Per-mapping state (engine side). */
struct cuda_map {
	bool legacy;
	CUdeviceptr ptr;
	size_t map_size;               /* reserved/mapped bytes (VMM) */
	bool in_reserve;               /* VA from gpu_cuda_reserve, not ours */
	CUmemGenericAllocationHandle h;
};

static inline struct cuda_dev *cuda_dev_of(struct gpu_dev *dev)
{
	return dev->priv;
}

/* Maps CUDA errors to an errno. */
int gpu_cuda_rt_errno(cudaError_t e);
int gpu_cuda_drv_errno(CUresult r);
/* Text of a driver error ("CUDA_ERROR_X: text"), into a static buffer of
 * the caller's. */
const char *gpu_cuda_drv_str(struct cuda_dev *cd, CUresult r, char *buf, size_t len);
/* Makes the device current on the calling thread (cheap when it already
 * is), and leaves it so: the daemon's calls. */
int gpu_cuda_enter(struct gpu_dev *dev, char *err);
/* The client side's calls (libwcache in an engine's or a trainer's
 * process, which may drive several GPUs; torch's current device is the
 * thread's current context): visit makes CUDA device `ordinal` (dev's, or
 * a copy source's) current for one call and keeps the thread's context in
 * *prev (NULL: none), filled before anything can fail (the context is
 * then unchanged, so a leave after a failed visit changes nothing); leave
 * makes prev current again (gpu.h). */
int gpu_cuda_visit(struct gpu_dev *dev, int ordinal, CUcontext *prev,
		   char *err);
void gpu_cuda_leave(struct gpu_dev *dev, CUcontext prev);

/* cuda_dev.c: the backend's open (all but dev->be, which cuda_backend.c
 * sets), context and mem_info (gpu.h) */
int gpu_cuda_open(struct gpu_dev *dev, const char *spec, char *err);
int gpu_cuda_context(struct gpu_dev *dev, enum gpu_ctx how, char *err);
int gpu_cuda_mem_info(struct gpu_dev *dev, uint64_t *free_b, uint64_t *total_b);

/* cuda_pool.c: the backend's pool, staging, copy, seal and idle calls
 * (gpu.h says what each does) */
int gpu_cuda_pool_create(struct gpu_dev *dev, struct gpu_pool *pool,
			 uint64_t size, char *err);
void gpu_cuda_pool_release(struct gpu_dev *dev, struct gpu_pool *pool);
int gpu_cuda_pool_adopt(struct gpu_dev *dev, struct gpu_pool *pool, int fd,
			uint64_t size, uint64_t alloc_size, bool sealed,
			char *err);
int gpu_cuda_idle(struct gpu_dev *dev, struct gpu_pool *const *pools,
		  unsigned n, char *err);
int gpu_cuda_staging_alloc(struct gpu_dev *dev, size_t size, void **ptr,
			   char *err);
void gpu_cuda_staging_free(struct gpu_dev *dev, void *ptr, size_t size);
int gpu_cuda_host_map(struct gpu_dev *dev, size_t size, void **ptr, char *err);
int gpu_cuda_staging_pin(struct gpu_dev *dev, void *ptr, size_t size, char *err);
void gpu_cuda_host_unmap(struct gpu_dev *dev, void *ptr, size_t size);
int gpu_cuda_copy_from_pool_async(struct gpu_dev *dev, struct gpu_pool *pool,
				  uint64_t off, void *dst, size_t len);
int gpu_cuda_copy_wait(struct gpu_dev *dev, char *err);
void gpu_cuda_ctx_join(struct gpu_dev *dev);
int gpu_cuda_copy_to_pool(struct gpu_dev *dev, struct gpu_pool *pool,
			  const struct gpu_copy *c, unsigned stream,
			  gpu_done_fn done, void *arg);
int gpu_cuda_copy_from_pool(struct gpu_dev *dev, struct gpu_pool *pool,
			    uint64_t off, void *dst, size_t len);
int gpu_cuda_pool_seal(struct gpu_dev *dev, struct gpu_pool *pool, char *err);
int gpu_cuda_pool_fill(struct gpu_dev *dev, struct gpu_pool *pool,
		       uint64_t off, uint64_t len, uint8_t byte, char *err);
int gpu_cuda_pool_copy(struct gpu_dev *dev, struct gpu_pool *dst,
		       uint64_t off_dst, struct gpu_pool *src,
		       uint64_t off_src, uint64_t len, char *err);
/* Creates the copy streams (once). */
int gpu_cuda_streams_init(struct gpu_dev *dev);
/* Makes the device current and a pool parked by idle usable again (maps
 * it from its own fd in the current context); for a mapped pool, only the
 * former. */
int gpu_cuda_pool_ready(struct gpu_dev *dev, struct gpu_pool *pool, char *err);

/* cuda_hash.c: the backend's hash_begin/hash_step/hash_end (gpu.h) */
int gpu_cuda_hash_begin(struct gpu_dev *dev, uint32_t n, char *err);
int gpu_cuda_hash_step(struct gpu_dev *dev, struct gpu_pool *pool,
		       uint64_t off, uint64_t len, uint32_t i, uint64_t landed,
		       unsigned copy_stream, unsigned chain, char *err);
int gpu_cuda_hash_end(struct gpu_dev *dev, uint8_t (*out)[16], char *err);
int gpu_cuda_hash_batch(struct gpu_dev *dev, const struct gpu_hash_job *jobs,
			uint32_t n, unsigned copy_stream, char *err);

/* cuda_import.c */
int gpu_cuda_import(struct gpu_dev *dev, int fd, const unsigned char *handle,
		    uint64_t size, bool writable, void *at,
		    struct gpu_mapping *m, char *err);
int gpu_cuda_reserve(struct gpu_dev *dev, uint64_t size, void **at, char *err);
void gpu_cuda_unreserve(struct gpu_dev *dev, void *at, uint64_t size);
int gpu_cuda_read_mapping(struct gpu_dev *dev, const struct gpu_mapping *m,
			  uint64_t off, void *dst, size_t len);
int gpu_cuda_write_mapping(struct gpu_dev *dev, const struct gpu_mapping *m,
			   uint64_t off, const void *src, size_t len);
int gpu_cuda_copy_to_mapping(struct gpu_dev *dev, const struct gpu_mapping *m,
			     uint64_t off, const void *src, int src_dev,
			     size_t width, size_t height, size_t src_pitch,
			     void *stream);
int gpu_cuda_stream_sync(struct gpu_dev *dev, void *stream, int src_dev,
			 char *err);
void gpu_cuda_unimport(struct gpu_dev *dev, struct gpu_mapping *m);

#endif
