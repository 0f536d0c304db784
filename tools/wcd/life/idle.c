/* SPDX-License-Identifier: MIT */
/*
 * The device's idle (idle.h). It sits at the bottom of life/ so that the
 * end of a host copy's free (host_free.c), main.c after each job and the
 * handover after SERVING can all call it; it reads d->model.life.freeing rather
 * than asking host_free.c, which calls it.
 */
#include "base.h"
#include "log.h"
#include "life/idle.h"

void life_device_idle(struct wcd *d)
{
	struct gpu_pool *pools[(WCD_VERSIONS + 1) * GPU_POOLS_MAX];
	char err[BASE_ERR_LEN];
	unsigned n = 0;
	uint64_t t0;
	int ret;

	/* a kept sleep arena (--sleep-arena keep) is registered in the
	 * context: releasing it would unpin the arena */
	/* nor while the last wake's host copy (registered in it) is being
	 * freed: the free's end calls this again */
	if (!d->dev.be->idle || d->o.keep_context || d->o.ipc_legacy ||
	    d->state != WCD_READY || d->model.life.arena_bytes || d->model.life.freeing)
		return;
	for (int i = 0; i < WCD_VERSIONS; i++) {
		struct wcd_version *v = &d->model.ver[i];

		for (uint32_t k = 0; v->used && k < v->npools; k++)
			pools[n++] = &v->pools[k];
	}
	/* the spare's pools live on through their fds too */
	for (uint32_t k = 0; k < d->model.nspare; k++)
		pools[n++] = &d->model.spare[k];
	t0 = rx_now_ns();
	ret = d->dev.be->idle(&d->dev, pools, n, err);
	if (ret)
		log_warn("keeping the CUDA context: %s", err);
	else
		log_info("device idle: CUDA context released in %.3f s; %u pools live on through their fds (--keep-context keeps it)",
			 (double)(rx_now_ns() - t0) / 1e9, n);
}
