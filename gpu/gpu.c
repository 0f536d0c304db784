/* SPDX-License-Identifier: MIT */
/* The backend dispatcher: a device spec picks the host or the cuda backend. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "gpu.h"
#include "paths.h"

int gpu_dev_open(struct gpu_dev *dev, const char *spec, char *err)
{
	return gpu_dev_open_ctx(dev, spec, GPU_CTX_NOW, err);
}

int gpu_dev_open_ctx(struct gpu_dev *dev, const char *spec, enum gpu_ctx how,
		     char *err)
{
	int ret;

	const struct gpu_backend *be;
	char name[PATHS_DEVICE_MAX + 1], perr[BASE_ERR_LEN];

	memset(dev, 0, sizeof(*dev));
	if (!spec || !*spec)
		return base_errf(err, EINVAL,
			       "no device given: use host, host:NAME, a CUDA ordinal (0) or a GPU UUID (GPU-...)");
	if (paths_is_host_spec(spec))
		return gpu_host_backend.open(dev, spec, err);
	/* Not an ordinal or a GPU UUID: say so before asking CUDA. */
	if (paths_device_name(spec, name, sizeof(name), perr) == -EINVAL)
		return base_errf(err, EINVAL, "%s", perr);
	be = gpu_cuda_backend();
	if (!be)
		return base_errf(err, ENODEV,
			       "device '%.64s' selects CUDA, but this build has no CUDA backend (no CUDA toolkit was found at build time): use --device host, or rebuild with CUDA=1 CUDA_HOME=...",
			       spec);
	ret = be->open(dev, spec, err);
	/* an open backend has set its table: close and every call go there */
	WC_ASSERT(ret || dev->be == be);
	if (ret || !be->context)
		return ret;
	ret = be->context(dev, how, err);
	if (ret)
		gpu_dev_close(dev);
	return ret;
}

void gpu_dev_close(struct gpu_dev *dev)
{
	if (dev->be && dev->be->close)
		dev->be->close(dev);
	dev->be = NULL;
}
