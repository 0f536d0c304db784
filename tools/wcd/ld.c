/* SPDX-License-Identifier: MIT */
/*
 * The loader's helpers that both of its paths call (load.c's direct path,
 * staged.c's staged path): the first failure wins, progress lines, shard
 * names. Kept apart so that load.c calls staged.c and not the other way.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "load.h"
#include "log.h"

#define PROGRESS_NS 500000000ull

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
