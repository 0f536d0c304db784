/* SPDX-License-Identifier: MIT */
/*
 * The loader's helpers that both of its paths call (load.c's direct path,
 * staged.c's staged path): the first failure wins, progress lines, shard
 * names. Kept apart so that load.c calls staged.c and not the other way.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>

#include "load.h"
#include "log.h"

#define PROGRESS_NS 500000000ull

struct wait_fd {
	struct rx_poll poll;
	bool fired;
	int res;
};

static void wait_fd_polled(struct rx_poll *p, int res)
{
	struct wait_fd *w = container_of(p, struct wait_fd, poll);

	w->fired = true;
	w->res = res;
}

int ld_wait_readable(struct wcd *d, int fd, uint64_t ns,
		     bool (*stopping)(void *arg), void *arg, int *res)
{
	struct wait_fd w = { .fired = false };
	int ret;

	rx_op_deadline(&w.poll.op, ns);
	ret = rx_poll_start(&d->loop, &w.poll, fd, POLLIN, wait_fd_polled);
	if (ret)
		return ret;
	while (!w.fired) {
		if (wcd_stopping(d) && stopping(arg) && !w.poll.op.cancelled)
			rx_cancel(&w.poll.op);
		ret = rx_run_once(&d->loop, -1);
		if (ret < 0 && ret != -EINTR && !w.fired)
			rx_cancel(&w.poll.op);
	}
	*res = w.res;
	return 0;
}

void ld_fail(struct ld *L, int code, const char *fmt, ...)
{
	va_list ap;

	if (L->err)
		return;
	L->err = code > 0 ? -code : code;
	va_start(ap, fmt);
	vsnprintf(L->errbuf, sizeof(L->errbuf), fmt, ap);
	va_end(ap);
}

const char *ld_shard_name(struct ld *L, uint32_t shard)
{
	return L->v->model.shards[shard].path;
}

void ld_progress(struct ld *L)
{
	uint64_t now = rx_now_ns();
	uint64_t ns = now - L->start_ns;

	if (now - L->last_progress_ns < PROGRESS_NS)
		return;
	L->last_progress_ns = now;
	log_info("progress: %" PRIu64 "/%" PRIu64 " bytes, %.2f GB/s",
		 L->done_bytes, L->total,
		 ns ? (double)L->done_bytes / (double)ns : 0.0);
}
