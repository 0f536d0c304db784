/* SPDX-License-Identifier: MIT */
/* The node's CUDA devices as wcctl sees them, without linking CUDA. */
#ifndef WCCTL_GPUS_H
#define WCCTL_GPUS_H

#include <stddef.h>

#define GPUS_MAX 64
#define GPU_UUID_LEN 64

/* Lists the UUIDs of the GPUs a CUDA program started from here would see,
 * in ordinal order: `nvidia-smi --query-gpu=index,uuid` filtered and ordered
 * by CUDA_VISIBLE_DEVICES when it is set (indices or UUID prefixes). Returns
 * the count or -errno with a sentence in err (no nvidia-smi, no GPU). */
int gpus_list(char (*uuids)[GPU_UUID_LEN], int max, char *err);

/* A device spec as the user gives it (host, host:NAME, GPU-<uuid>, or a
 * CUDA ordinal, resolved through gpus_list) -> its file-name-safe name. */
int gpus_device_name(const char *spec, char *out, size_t len, char *err);

#endif
