/* SPDX-License-Identifier: MIT */
/*
 * The options a restart keeps: wcd's own argv words for every option that
 * shapes what is served or who may attach, or how the daemon logs, listens
 * for scrapes and loads, taken from the options in force (d->o, after a
 * handover's BEGIN too), for the ready file's serve_args (proto/wire/ready.h).
 * wcctl restart gives the new daemon exactly these words, so that both a
 * handover and the reload after a failed one serve what the old daemon
 * served, to whom it served it (ARCHITECTURE.md, Rules). The options of
 * one start only are left out: --model and the tp/pp rank (the ready
 * file's own keys), --device, --runtime-dir, --force, --force-wait,
 * --takeover, --takeover-verify. A new option that shapes serving adds
 * one line below (and a word to test/wcd/handover_reload.sh).
 * Paths are absolute (opts.c makes them so), since the next daemon may
 * start in another directory.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ready.h"
#include "wcd.h"
#include "metrics/metrics.h"

struct args {
	char *buf;
	size_t cap;
	int ret;
};

/* opt, then its value val (NULL: a flag); an empty value as "opt=" */
static void put(struct args *a, const char *opt, const char *val)
{
	char eq[64];

	if (val && !*val) {
		snprintf(eq, sizeof(eq), "%s=", opt);
		opt = eq;
		val = NULL;
	}
	if (!a->ret)
		a->ret = ready_args_put(a->buf, a->cap, opt);
	if (!a->ret && val)
		a->ret = ready_args_put(a->buf, a->cap, val);
}

static void put_u64(struct args *a, const char *opt, uint64_t v)
{
	char num[24];

	snprintf(num, sizeof(num), "%" PRIu64, v);
	put(a, opt, num);
}

static void put_secs(struct args *a, const char *opt, uint32_t ms)
{
	char num[24];

	snprintf(num, sizeof(num), "%u.%03u", ms / 1000, ms % 1000);
	put(a, opt, num);
}

int serve_args_format(const struct wcd *d, char *buf, size_t cap)
{
	static const char *const levels[] = { "debug", "info", "warn", "error" };
	static const char *const hash_on[] = { "auto", "device", "cpu" };
	static const char *const dio[] = { "auto", "on", "off" };
	static const char *const fill[] = { "splice", "read" };
	const struct wcd_opts *o = &d->o;
	struct args a = { buf, cap, 0 };

	buf[0] = '\0';
	/* what is served: the layout tuple, the rules, the packing, hashes */
	if (o->rules)
		put(&a, "--rules", o->rules);
	if (o->layout)
		put(&a, "--layout", o->layout);
	if (o->ep_size != 1) {
		put_u64(&a, "--ep-size", o->ep_size);
		put_u64(&a, "--ep-rank", o->ep_rank);
	}
	if (o->vocab_pad >= 0)
		put_u64(&a, "--vocab-pad", (uint64_t)o->vocab_pad);
	if (o->allow_quant)
		put(&a, "--allow-quant", o->allow_quant);
	if (!o->hash)
		put(&a, "--no-hash", NULL);
	if (o->pool_size != WCD_POOL_SIZE_DEFAULT)
		put_u64(&a, "--pool-size", o->pool_size);
	if (o->ipc_legacy)
		put(&a, "--ipc", "legacy");
	/* who may attach, and how a connection is held */
	for (unsigned i = 0; i < o->nallow_uid; i++)
		put_u64(&a, "--allow-uid", (uint64_t)o->allow_uid[i]);
	for (unsigned i = 0; i < o->nallow_gid; i++)
		put_u64(&a, "--allow-gid", (uint64_t)o->allow_gid[i]);
	for (unsigned i = 0; i < o->nallow_updater; i++)
		put_u64(&a, "--allow-updater", (uint64_t)o->allow_updater[i]);
	if (o->socket_group)
		put_u64(&a, "--socket-group", (uint64_t)o->socket_gid);
	if (o->socket_mode >= 0) {
		char mode[16];

		snprintf(mode, sizeof(mode), "%04o", (unsigned)o->socket_mode);
		put(&a, "--socket-mode", mode);
	}
	if (o->frame_timeout_ms != WCD_FRAME_MS)
		put_secs(&a, "--frame-timeout", o->frame_timeout_ms);
	/* the endpoint and the log */
	if (o->metrics_listen)
		put(&a, "--metrics-listen", metrics_http_addr(d)[0] ?
		    metrics_http_addr(d) : o->metrics_listen);
	if (o->log_level != LOG_INFO)
		put(&a, "--log-level", levels[o->log_level]);
	if (o->log_format == LOG_JSON)
		put(&a, "--log-format", "json");
	if (o->log_file)
		put(&a, "--log-file", o->log_file);
	/* how it runs and loads (a reload, an update) */
	if (o->keep_context)
		put(&a, "--keep-context", NULL);
	if (o->sleep_arena_keep)
		put(&a, "--sleep-arena", "keep");
	if (o->read_timeout_ms != WCD_READ_TIMEOUT_MS)
		put_secs(&a, "--read-timeout", o->read_timeout_ms);
	if (o->load_path != WCD_LOAD_AUTO)
		put(&a, "--load-path", o->load_path == WCD_LOAD_STAGED ?
		    "staged" : "direct");
	if (o->hash_on != WCD_HASH_AUTO)
		put(&a, "--hash-on", hash_on[o->hash_on]);
	if (o->direct_io != WCD_DIO_AUTO)
		put(&a, "--direct-io", dio[o->direct_io]);
	if (o->direct_fill != WCD_FILL_SPLICE)
		put(&a, "--direct-fill", fill[o->direct_fill]);
	if (o->hash_threads_given)
		put_u64(&a, "--hash-threads", o->hash_threads);
	if (o->slots != WCD_SLOTS_DEFAULT)
		put_u64(&a, "--slots", o->slots);
	if (o->slot_size != WCD_SLOT_SIZE_DEFAULT)
		put_u64(&a, "--slot-size", o->slot_size);
	if (o->read_part != WCD_READ_PART_DEFAULT)
		put_u64(&a, "--read-part", o->read_part);
	if (o->read_ahead != WCD_READ_AHEAD_DEFAULT)
		put_u64(&a, "--read-ahead", o->read_ahead);
	return a.ret;
}
