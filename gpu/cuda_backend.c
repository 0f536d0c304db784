/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend's table (gpu.h's struct gpu_backend): the one file that
 * knows every cuda_* file, so that they depend one way, top to bottom:
 * cuda_backend.c -> cuda_hash.c (and cuda_xxh3.cu) -> cuda_pool.c ->
 * cuda_import.c -> cuda_dev.c. Open and close live here because they span
 * the files: open sets the table, close ends a hash and the copy streams.
 */
#include <stdlib.h>

#include "cuda_priv.h"

static const struct gpu_backend cuda_backend;

static int cuda_open(struct gpu_dev *dev, const char *spec, char *err)
{
	int ret = gpu_cuda_open(dev, spec, err);

	if (ret == 0)
		dev->be = &cuda_backend;
	return ret;
}

static void cuda_close(struct gpu_dev *dev)
{
	struct cuda_dev *cd = cuda_dev_of(dev);
	int i;

	if (!cd)
		return;
	gpu_cuda_ctx_join(dev);
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

static const struct gpu_backend cuda_backend = {
	.name = "cuda",
	.open = cuda_open,
	.close = cuda_close,
	.mem_info = gpu_cuda_mem_info,
	.pool_create = gpu_cuda_pool_create,
	.staging_alloc = gpu_cuda_staging_alloc,
	.staging_free = gpu_cuda_staging_free,
	.host_map = gpu_cuda_host_map,
	.staging_pin = gpu_cuda_staging_pin,
	.host_unmap = gpu_cuda_host_unmap,
	.copy_to_pool = gpu_cuda_copy_to_pool,
	.copy_from_pool = gpu_cuda_copy_from_pool,
	.copy_from_pool_async = gpu_cuda_copy_from_pool_async,
	.copy_wait = gpu_cuda_copy_wait,
	.pool_fill = gpu_cuda_pool_fill,
	.pool_copy = gpu_cuda_pool_copy,
	.pool_seal = gpu_cuda_pool_seal,
	.pool_release = gpu_cuda_pool_release,
	.pool_adopt = gpu_cuda_pool_adopt,
	.import = gpu_cuda_import,
	.reserve = gpu_cuda_reserve,
	.unreserve = gpu_cuda_unreserve,
	.read_mapping = gpu_cuda_read_mapping,
	.unimport = gpu_cuda_unimport,
	.write_mapping = gpu_cuda_write_mapping,
	.copy_to_mapping = gpu_cuda_copy_to_mapping,
	.stream_sync = gpu_cuda_stream_sync,
	.hash_begin = gpu_cuda_hash_begin,
	.hash_step = gpu_cuda_hash_step,
	.hash_end = gpu_cuda_hash_end,
	.hash_batch = gpu_cuda_hash_batch,
	.idle = gpu_cuda_idle,
	.context = gpu_cuda_context,
};

const struct gpu_backend *gpu_cuda_backend(void)
{
	return &cuda_backend;
}
