/* SPDX-License-Identifier: MIT */
/*
 * wcd's metrics/ folder: the Prometheus text exposition (format 0.0.4) of
 * the counters (daemon/counters.h) and of the daemon's state, and the
 * endpoint that serves it on --metrics-listen.
 *
 *   metrics.c       metrics_render: the text
 *   metrics_http.c  GET /metrics from the loop
 *
 * Bounds: the text is at most METRICS_TEXT_MAX bytes (about 15 KiB today,
 * the rank's labels on every sample).
 */
#ifndef WCD_METRICS_H
#define WCD_METRICS_H

#include <stddef.h>

#define METRICS_TEXT_MAX (64u << 10)
#define METRICS_LINE_MAX 1024         /* one sample with its labels */

struct wcd;
/* The Prometheus text exposition (format 0.0.4) of d into buf[0..cap);
 * returns its length, or -ENOSPC. */
int metrics_render(struct wcd *d, char *buf, size_t cap);

/* metrics_http.c: GET /metrics on addr ("host:port", "[v6]:port" or
 * "unix:PATH"), served from d's loop. 0, or -errno with err set. With
 * wait_ms, a port still in use (an old daemon after a handover) is tried
 * again from the loop every 20 ms for that long; 0 fails at once. The
 * address bound (a port 0 resolved) is metrics_http_addr's. */
int metrics_http_start(struct wcd *d, const char *addr, unsigned wait_ms,
		       char *err);
/* Closes the listener and every connection (their callbacks run with
 * -ECANCELED); frees it all once they have. */
void metrics_http_stop(struct wcd *d);
/* Where the endpoint listens (a port 0 resolved), or "" when it does not
 * (yet: a port still in use is being tried again). */
const char *metrics_http_addr(const struct wcd *d);

#endif
