/* SPDX-License-Identifier: MIT */
/*
 * wcd, the rank daemon: a map of its folders. Calls and #includes go one
 * way, top to bottom, among the folders and among the files of each
 * (test/wcd/wcd_deps.sh fails on a circle, and on a file that its folder's
 * header does not name); each folder's header lists its files:
 *
 *   tools/wcd/  the top: what sees every subsystem and wires them
 *     main.c        start-up order, signals, shutdown; the hooks
 *     opts.c        the command line: usage, options, their checks
 *     requests.c    what each request does (client_dispatch)
 *     status.c      STATUS JSON and the ready file
 *     serve_args.c  the options a restart keeps (the ready file's
 *                   serve_args)
 *     wcd.h         this file: the map, and the top files' API
 *   metrics/    the Prometheus text and GET /metrics (metrics.h)
 *   handover/   hot handover, both sides (handover.h)
 *   life/       SLEEP, WAKE, UPDATE: checks, job queue, jobs (lifecycle.h)
 *   push/       an update session: version N+1 written from a trainer's
 *               memory, committed and published (push.h)
 *   model/      a model's resident versions: publish, retire, leases,
 *               memory (versions.h)
 *   load/       the loader: model -> plan -> pools, its paths (load.h)
 *   serve/      the socket: connections, framing, notices, leases; who may
 *               connect; the device's files; its state d->srv (server.h)
 *   daemon/     the bottom: options, struct wcd, struct wcd_model, the
 *               state machine, the counters (daemon.h)
 *
 * Where to hook in:
 *   change state            wcd_enter() (daemon/state.c); read it with
 *                           d->state, wcd_stopping()
 *   the model served        wcd_model(d) (struct wcd_model: versions,
 *                           path, lifecycle), wcd_current(d)
 *   notify every client     server_notify() (serve/server.h)
 *   iterate clients/leases  client_first()/client_next(), server_clients(),
 *                           server_lease_pids() (serve/server.h)
 *   answer a request later  struct wcd_waiter: waiter_hold(), waiter_take()
 *   publish/retire versions version_publish(), version_retire(),
 *                           version_attach(), version_find()
 *                           (model/versions.h)
 *   count for the metrics   metrics_reply(), metrics_attach(),
 *                           metrics_life() (inline in daemon/counters.h:
 *                           d->m)
 *   rewrite the ready file  status_write_ready(); from below it:
 *                           d->ready_write (set by main.c)
 */
#ifndef WCD_H
#define WCD_H

#include <stddef.h>

#include "daemon/daemon.h"

/* opts.c: fills o from argv (defaults first); exits 2 on a bad option,
 * 0 after --help. Returns the --log-level. */
enum log_level opts_parse(struct wcd_opts *o, int argc, char **argv);

/* status.c */
char *status_json(struct wcd *d);       /* malloc'ed, NUL-terminated */
int status_write_ready(struct wcd *d, char *err);
/* serve_args.c: the ready file's serve_args (encoded argv words) into buf;
 * -E2BIG when they do not fit in cap bytes. */
int serve_args_format(const struct wcd *d, char *buf, size_t cap);

/* requests.c: one whole, header-checked frame (server_hooks.dispatch) */
void client_dispatch(struct wcd_client *c, const uint8_t *p, uint32_t n);

#endif
