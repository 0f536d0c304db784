/* SPDX-License-Identifier: MIT */
/* Built instead of gpu/cuda*.c when no CUDA toolkit is found. */
#include <stddef.h>

#include "gpu.h"

const struct gpu_backend *gpu_cuda_backend(void)
{
	return NULL;
}
