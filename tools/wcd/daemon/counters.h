/* SPDX-License-Identifier: MIT */
/*
 * wcd's counters: the subsystems bump them inline (no call between wcd's
 * files for a count); metrics/metrics.c renders them with the daemon's
 * state as Prometheus text.
 *
 *   a reply left              metrics_reply() (serve/conn.c: every
 *                             ERROR and every last frame of a reply)
 *   an ATTACH was handled     metrics_attach() (requests.c)
 *   a lifecycle job ended     metrics_life() (life/)
 *
 * Bounds: fixed arrays by wire type and error code.
 */
#ifndef WCD_COUNTERS_H
#define WCD_COUNTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "wire.h"

#define METRICS_ATTACH_BUCKETS 12

/* Upper bounds (seconds) of the attach histogram's buckets; +Inf after. */
static const double metrics_attach_le_s[METRICS_ATTACH_BUCKETS] = {
	0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.1, 1.0,
};

/* METRICS_PUSH: an update session from memory (push/), by its end:
 * committed or not */
enum metrics_life_kind { METRICS_SLEEP, METRICS_WAKE, METRICS_UPDATE,
			 METRICS_PUSH, METRICS_LIFE_KINDS };

struct metrics_life {
	uint64_t ok, failed;
	uint64_t last_ns, last_bytes;     /* the last one that succeeded */
	uint64_t bytes_total;
	uint64_t ns_total;
};

struct wcd_metrics {
	/* replies by request type (0: unknown) and result */
	uint64_t req_ok[WIRE_TYPE_MAX + 1];
	uint64_t req_err[WIRE_TYPE_MAX + 1];
	/* ERROR replies (and HELLO mismatches) by code */
	uint64_t refusals[WIRE_E_MAX + 1];
	/* ATTACH: request received -> reply queued */
	uint64_t attach_bucket[METRICS_ATTACH_BUCKETS + 1];
	uint64_t attach_count, attach_ns_total;
	struct metrics_life life[METRICS_LIFE_KINDS];
	/* the HTTP endpoint */
	uint64_t http_served, http_errors, http_rejected, http_timeouts;
	uint64_t http_evicted;        /* closed for a newer connection */
	/* log lines of malformed frames: a burst, then a count */
	struct log_limit malformed_log;
};

static inline void metrics_reply(struct wcd_metrics *m, unsigned type,
				 unsigned errcode)
{
	if (type > WIRE_TYPE_MAX)
		type = 0;
	if (errcode) {
		m->req_err[type]++;
		m->refusals[errcode <= WIRE_E_MAX ? errcode : 0]++;
	} else {
		m->req_ok[type]++;
	}
}

static inline void metrics_attach(struct wcd_metrics *m, uint64_t ns)
{
	unsigned i = 0;

	while (i < METRICS_ATTACH_BUCKETS &&
	       (double)ns > metrics_attach_le_s[i] * 1e9)
		i++;
	m->attach_bucket[i]++;
	m->attach_count++;
	m->attach_ns_total += ns;
}

static inline void metrics_life(struct wcd_metrics *m,
				enum metrics_life_kind k, bool ok,
				uint64_t ns, uint64_t bytes)
{
	struct metrics_life *l = &m->life[k];

	if (!ok) {
		l->failed++;
		return;
	}
	l->ok++;
	l->last_ns = ns;
	l->last_bytes = bytes;
	l->ns_total += ns;
	l->bytes_total += bytes;
}

#define METRICS_MALFORMED_BURST 10
#define METRICS_MALFORMED_WINDOW_NS (10ull * 1000000000ull)

/* Malformed frames: true when this one may be logged (then *suppressed
 * is the count to mention). A burst of 10 lines per 10 s. */
static inline bool metrics_malformed_log(struct wcd_metrics *m,
					 uint64_t now_ns, uint64_t *suppressed)
{
	if (!m->malformed_log.burst) {
		m->malformed_log.burst = METRICS_MALFORMED_BURST;
		m->malformed_log.window_ns = METRICS_MALFORMED_WINDOW_NS;
	}
	return log_limit_allow(&m->malformed_log, now_ns, suppressed);
}

#endif
