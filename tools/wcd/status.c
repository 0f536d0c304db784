/* SPDX-License-Identifier: MIT */
/*
 * What the daemon tells about itself: the STATUS JSON and the ready file.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "ready.h"
#include "utf8.h"
#include "wcd.h"
#include "daemon/fault.h"
#include "serve/server.h"
#include "model/versions.h"
#include "metrics/metrics.h"
#include "push/push.h"

#define STATUS_CLIENTS_MAX WCD_CLIENTS_MAX

/* A JSON array of the pids holding leases on version index vi. */
static json_t *version_pids(struct wcd *d, int vi)
{
	pid_t *pids = malloc(WCD_CLIENTS_MAX * sizeof(*pids));
	json_t *a = json_array();
	unsigned n = 0;

	if (pids)
		n = server_lease_pids(d, vi, pids, WCD_CLIENTS_MAX);
	for (unsigned i = 0; a && i < n; i++)
		json_array_append_new(a, json_integer(pids[i]));
	free(pids);
	return a;
}

/* The lifecycle's fields (wcd_model(d)->life). */
static void life_status(struct wcd *d, json_t *o)
{
	const struct wcd_life *L = &wcd_model(d)->life;
	json_t *lc;

	json_object_set_new(o, "sleep_level", json_integer(L->level));
	json_object_set_new(o, "resident_bytes",
			    json_integer((json_int_t)version_resident_bytes(d)));
	json_object_set_new(o, "host_copy_bytes",
			    json_integer((json_int_t)L->host_bytes));
	json_object_set_new(o, "sleep_arena_bytes",
			    json_integer((json_int_t)L->arena_bytes));
	json_object_set_new(o, "host_freeing_bytes",
			    json_integer((json_int_t)L->freeing_bytes));
	lc = json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:o}",
		       "sleeps", (json_int_t)L->sleeps,
		       "wakes", (json_int_t)L->wakes,
		       "updates", (json_int_t)L->updates,
		       "failures", (json_int_t)L->failures,
		       "sleep_copy_seconds", L->sleep_copy_s,
		       "wake_copy_seconds", L->wake_copy_s,
		       "wake_copy_gbps", L->wake_copy_gbps,
		       "wake_verify_seconds", L->wake_verify_s,
		       "last", json_text(L->last));	/* may name a path */
	if (lc)
		json_object_set_new(o, "lifecycle", lc);
}

/* The update session from memory (push/): the open one, the last one. */
static void push_status(struct wcd *d, json_t *o)
{
	struct push_info pi;
	json_t *ps, *cur = json_null(), *last = json_null();

	push_info(d, &pi);
	if (pi.open)
		cur = json_pack("{s:I, s:I, s:b, s:I, s:i, s:I, s:f, s:I}",
				"session", (json_int_t)pi.session,
				"version", (json_int_t)pi.version,
				"writing", pi.writing,
				"bytes", (json_int_t)pi.bytes,
				"pid", (int)pi.pid,
				"uid", (json_int_t)pi.uid,
				"seconds", pi.seconds,
				"timeout_ms", (json_int_t)pi.timeout_ms);
	if (pi.last[0])
		last = json_pack("{s:b, s:I, s:I, s:i, s:I, s:f, s:o}",
				 "committed", pi.last_ok,
				 "version", (json_int_t)pi.last_version,
				 "bytes", (json_int_t)pi.last_bytes,
				 "pid", (int)pi.last_pid,
				 "uid", (json_int_t)pi.last_uid,
				 "seconds", pi.last_seconds,
				 "outcome", json_text(pi.last));
	ps = json_pack("{s:o, s:o, s:I, s:I, s:I}",
		       "open", cur ? cur : json_null(),
		       "last", last ? last : json_null(),
		       "opened", (json_int_t)pi.opened,
		       "committed", (json_int_t)pi.committed,
		       "aborted", (json_int_t)pi.aborted);
	if (ps && cur && json_is_object(cur))
		json_object_set_new(cur, "in_place", json_boolean(pi.in_place));
	/* in place: engines paused, and the served version's state */
	if (ps)
		json_object_update_missing_new(ps, json_pack("{s:I, s:I, s:o, s:o}",
			"paused", (json_int_t)pi.paused,
			"leased", (json_int_t)pi.leased,
			"incomplete", pi.incomplete ?
				json_integer((json_int_t)pi.incomplete) :
				json_null(),
			"incomplete_why", pi.incomplete ?
				json_text(pi.incomplete_why) : json_null()));
	/* the spare a keep_spare session left (model/versions.h) */
	if (ps)
		json_object_set_new(ps, "spare_bytes",
				    json_integer((json_int_t)version_spare_bytes(d)));
	if (ps)
		json_object_set_new(o, "push", ps);
}

char *status_json(struct wcd *d)
{
	struct wcd_version *v = wcd_current(d);
	pid_t *pids = malloc(STATUS_CLIENTS_MAX * sizeof(pid_t));
	unsigned *leases = malloc(STATUS_CLIENTS_MAX * sizeof(unsigned));
	char hex[BASE_HASH_HEX_LEN];
	json_t *o = NULL, *cl, *vs;
	char *s = NULL;
	unsigned n;

	if (!pids || !leases)
		goto out_free;
	base_hash_hex(v->digest, hex);
	n = server_clients(d, pids, leases, STATUS_CLIENTS_MAX);
	cl = json_array();
	for (unsigned i = 0; i < n; i++)
		json_array_append_new(cl, json_pack("{s:i, s:i}", "pid",
						    (int)pids[i], "leases",
						    (int)leases[i]));
	vs = json_array();
	for (int i = 0; i < WCD_VERSIONS; i++) {
		const struct wcd_version *x = &wcd_model(d)->ver[i];

		if (!x->used)
			continue;
		json_array_append_new(vs, json_pack(
			"{s:I, s:I, s:I, s:i, s:b, s:o}", "version",
			(json_int_t)x->number, "bytes",
			(json_int_t)x->plan.total_bytes, "tensors",
			(json_int_t)x->plan.ntensors, "leases", (int)x->leases,
			"current", i == wcd_model(d)->cur,
			"pids", version_pids(d, i)));
	}
	/* paths are bytes, JSON is UTF-8: json_text shows what is not UTF-8
	 * as U+FFFD (a "s" of such bytes failed the whole STATUS) */
	o = json_pack("{s:s, s:o, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:o,"
		      " s:I, s:I, s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:o,"
		      " s:b, s:o}",
		      "state", wcd_state_name(d->state),
		      "model", json_text(v->model.path ? v->model.path : ""),
		      "identity", hex, "version", (json_int_t)v->number,
		      "tensors", (json_int_t)v->plan.ntensors,
		      "bytes", (json_int_t)v->plan.total_bytes,
		      "load_seconds", v->load_seconds,
		      "load_gbps", v->load_gbps,
		      "uptime_seconds",
		      (double)(rx_now_ns() - d->start_ns) / 1e9,
		      "clients", cl,
		      "requests", (json_int_t)d->srv->requests,
		      "mismatches", (json_int_t)d->srv->mismatches,
		      "device", d->dev.name,
		      "tp_size", (int)d->o.tp_size, "tp_rank", (int)d->o.tp_rank,
		      "pp_size", (int)d->o.pp_size, "pp_rank", (int)d->o.pp_rank,
		      "pid", (int)getpid(),
		      "backend", d->dev.be ? d->dev.be->name : "",
		      "socket", json_text(d->paths.sock),
		      "hashed", v->hashed,
		      "versions", vs);
	if (o) {
		json_t *ph = json_pack("{s:f, s:f, s:f, s:f, s:f, s:I, s:s, s:b}",
				       "parse", v->phases.parse_s,
				       "read", v->phases.read_s,
				       "copy", v->phases.copy_s,
				       "hash", v->phases.hash_s,
				       "publish", v->phases.publish_s,
				       "read_bytes",
				       (json_int_t)v->phases.read_bytes,
				       "path", v->phases.staged ? "staged" : "direct",
				       "o_direct", v->phases.direct_io);

		json_object_set_new(o, "phases", ph);
		json_object_set_new(o, "connections", json_pack(
			"{s:I, s:I, s:I}",
			"fd_shortages", (json_int_t)d->srv->fd_shortages,
			"shed", (json_int_t)d->srv->shed,
			"frame_timeouts", (json_int_t)d->srv->frame_timeouts));
		life_status(d, o);
		push_status(d, o);
		s = json_dumps(o, JSON_COMPACT);
	}
	json_decref(o);
out_free:
	free(pids);
	free(leases);
	return s;
}

int status_write_ready(struct wcd *d, char *err)
{
	struct wcd_version *v = wcd_current(d);
	static struct ready_info r;
	char dead[PATHS_MAX + 8];
	int ret;

	memset(&r, 0, sizeof(r));
	r.pid = (int)getpid();
	snprintf(r.socket, sizeof(r.socket), "%s", d->paths.sock);
	snprintf(r.device, sizeof(r.device), "%s", d->dev.name);
	base_hash_hex(v->digest, r.identity);
	r.version = v->number;
	r.tensors = v->plan.ntensors;
	r.bytes = v->plan.total_bytes;
	r.load_seconds = v->load_seconds;
	snprintf(r.model, sizeof(r.model), "%s", v->model.path);
	r.tp_size = (int)d->o.tp_size;
	r.tp_rank = (int)d->o.tp_rank;
	r.pp_size = (int)d->o.pp_size;
	r.pp_rank = (int)d->o.pp_rank;
	snprintf(r.state, sizeof(r.state), "%s", wcd_state_name(d->state));
	/* what a handover's new daemon must be given again (wcctl restart) */
	if (d->o.metrics_listen)
		snprintf(r.metrics_listen, sizeof(r.metrics_listen), "%s",
			 metrics_http_addr(d)[0] ? metrics_http_addr(d) :
			 d->o.metrics_listen);
	if (d->o.log_format == LOG_JSON)
		snprintf(r.log_format, sizeof(r.log_format), "json");
	if (d->o.log_file)
		snprintf(r.log_file, sizeof(r.log_file), "%s", d->o.log_file);
	/* every option a restart must keep (serve_args.c) */
	if (serve_args_format(d, r.serve_args, sizeof(r.serve_args)) < 0)
		return base_errf(err, E2BIG,
			       "the daemon's options do not fit in the ready file's serve_args (%d bytes): shorten the paths of --rules, --layout or --log-file",
			       READY_ARGS_MAX);
	snprintf(r.reloaded, sizeof(r.reloaded), "%s", d->reloaded);
	/* the device serves again: wcctl clean's record of a daemon that
	 * died on it (<device>.dead, wcctl status's DEAD row) is over. Gone
	 * before the ready file appears, since whoever waits for that file
	 * (wcctl start) reads the device's state as soon as it does */
	if ((size_t)snprintf(dead, sizeof(dead), "%s.dead", d->paths.prefix) <
	    sizeof(dead))
		unlink(dead);
	ret = ready_write_file(&r, d->paths.ready, err);
	if (!ret && fault_str(FAULT_READY_GATE)) {
		fault_gate(FAULT_READY_GATE, NULL, NULL);
		fault_clear(FAULT_READY_GATE);   /* the first ready file only */
	}
	return ret;
}
