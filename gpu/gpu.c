/* SPDX-License-Identifier: MIT */
/* The backend dispatcher: a device spec picks the host or the cuda backend. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gpu.h"
#include "paths.h"

int gpu_errf(char *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		va_start(ap, fmt);
		vsnprintf(err, GPU_ERR_LEN, fmt, ap);
		va_end(ap);
	}
	return code > 0 ? -code : code;
}

int gpu_dev_open(struct gpu_dev *dev, const char *spec, char *err)
{
	const struct gpu_backend *be;
	char name[PATHS_DEVICE_MAX + 1], perr[512];

	memset(dev, 0, sizeof(*dev));
	if (!spec || !*spec) {
		if (err)
			snprintf(err, GPU_ERR_LEN,
				 "no device given: use host, host:NAME, a CUDA ordinal (0) or a GPU UUID (GPU-...)");
		return -EINVAL;
	}
	if (paths_is_host_spec(spec))
		return gpu_host_backend.open(dev, spec, err);
	/* Not an ordinal or a GPU UUID: say so before asking CUDA. */
	if (paths_device_name(spec, name, sizeof(name), perr) == -EINVAL) {
		if (err)
			snprintf(err, GPU_ERR_LEN, "%.200s", perr);
		return -EINVAL;
	}
	be = gpu_cuda_backend();
	if (!be) {
		if (err)
			snprintf(err, GPU_ERR_LEN,
				 "device '%.64s' selects CUDA, but this build has no CUDA backend (no CUDA toolkit was found at build time): use --device host, or rebuild with CUDA=1 CUDA_HOME=...",
				 spec);
		return -ENODEV;
	}
	return be->open(dev, spec, err);
}

void gpu_dev_close(struct gpu_dev *dev)
{
	if (dev->be && dev->be->close)
		dev->be->close(dev);
	dev->be = NULL;
}
