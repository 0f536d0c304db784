/* SPDX-License-Identifier: MIT */
/*
 * wcctl status: every ready file in the runtime directory, each daemon
 * asked for STATUS (libwcache), printed as a table or as JSON. A daemon
 * that does not answer is shown as UNREACHABLE with what its ready file
 * says; a device that is locked but has no ready file yet is STARTING.
 * Costs one connection per daemon, each bounded by --timeout.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "cli.h"
#include "err.h"
#include "gpus.h"
#include "log.h"
#include "rundir.h"
#include "wcache.h"
#include "wcctl.h"
#include "utf8.h"

struct row {
	char device[PATHS_DEVICE_MAX + 1];
	char ready_path[PATHS_MAX];
	struct ready_info ri;
	bool have_ready;
	bool dead;                /* ri is from wcctl clean's .dead record */
	json_t *status;           /* the daemon's answer, or NULL */
	char why[WC_ERR_MSG_LEN]; /* why not */
	pid_t lock_pid;           /* STARTING rows */
};

static void status_usage(FILE *f)
{
	fprintf(f,
"usage: wcctl status [--device D | --all] [--backend cuda|host] [--json]\n"
"                    [--runtime-dir DIR] [--timeout SEC]\n"
"\n"
"Asks every daemon that has a ready file for its STATUS and prints a table:\n"
"device, rank, state, model, version, GB, tensors, clients, uptime. A daemon\n"
"that does not answer shows as UNREACHABLE with what its ready file says;\n"
"a device locked by a daemon that is still loading shows as STARTING; one\n"
"whose daemon died serving and whose files wcctl clean removed shows as\n"
"DEAD (its <device>.dead record) until a daemon serves it again.\n"
"\n"
"  --json            a JSON array: each daemon's STATUS object plus\n"
"                    \"reachable\": true and \"ready_file\"; unreachable ones\n"
"                    carry \"reachable\": false, \"error\" and their ready file\n"
"  --device D        only this device: host, host:NAME, host-NAME (as the\n"
"                    table prints it), a CUDA ordinal or GPU-<uuid>\n"
"  --all             every daemon (the default)\n"
"  --backend B       only the daemons of wcctl start --backend B: host\n"
"                    (devices host, host-NAME) or cuda (GPU-<uuid>, N)\n"
"  --runtime-dir DIR as given to wcctl start / wcd (default: the environment's)\n"
"  --timeout SEC     per daemon (default 2; decimals allowed; --timeout-ms MS\n"
"                    is the old spelling)\n"
"\n"
"Examples:\n"
"  wcctl status\n"
"  wcctl status --device 0 --json\n"
"  wcctl status --runtime-dir /run/wcache --timeout 0.5 || echo degraded\n"
"\n"
"Exit status: 0 every daemon found answered, 3 none was found, 4 at least\n"
"one is UNREACHABLE or DEAD, 5 none is unreachable but one is still STARTING,\n"
"2 usage.\n");
}

static void row_ask(struct row *r, int timeout_ms)
{
	struct wc_connect_opts o = { .socket = r->ri.socket,
				     .timeout_ms = timeout_ms,
				     .label = "wcctl status" };
	struct wc_conn *c = NULL;
	struct wc_error e;
	json_error_t je;
	char *text = NULL;

	if (wc_connect(&o, &c, &e) || wc_status(c, &text, &e)) {
		snprintf(r->why, sizeof(r->why), "%s", e.msg);
		goto out_close;
	}
	r->status = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!r->status || !json_is_object(r->status)) {
		snprintf(r->why, sizeof(r->why),
			 "its STATUS reply is not a JSON object (%s)", je.text);
		json_decref(r->status);
		r->status = NULL;
	}
out_close:
	free(text);
	wc_close(c);
}

static const char *jstr(json_t *o, const char *k, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : dflt;
}

static double jnum(json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

/* Clients other than this wcctl status itself (it is one while asking). */
static size_t other_clients(json_t *s)
{
	json_t *cl = json_object_get(s, "clients"), *c;
	size_t i, n = 0;

	json_array_foreach(cl, i, c)
		n += json_integer_value(json_object_get(c, "pid")) != getpid();
	return n;
}

static void fmt_uptime(double s, char *out, size_t len)
{
	long t = (long)s;

	if (t < 60)
		snprintf(out, len, "%lds", t);
	else if (t < 3600)
		snprintf(out, len, "%ldm%02lds", t / 60, t % 60);
	else if (t < 86400)
		snprintf(out, len, "%ldh%02ldm", t / 3600, t % 3600 / 60);
	else
		snprintf(out, len, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
}

static void print_table(const struct row *rows, int n)
{
	int w = 20; /* the DEVICE column fits the longest name (GPU UUIDs) */

	for (int i = 0; i < n; i++)
		if ((int)strlen(rows[i].device) > w)
			w = (int)strlen(rows[i].device);
	printf("%-*s %-10s %-12s %-20s %7s %8s %8s %7s %8s\n", w, "DEVICE",
	       "RANK", "STATE", "MODEL", "VERSION", "GB", "TENSORS",
	       "CLIENTS", "UPTIME");
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		char rank[24], up[24];

		if (r->status) {
			json_t *s = r->status;

			snprintf(rank, sizeof(rank), "pp%d/tp%d",
				 (int)jnum(s, "pp_rank"),
				 (int)jnum(s, "tp_rank"));
			fmt_uptime(jnum(s, "uptime_seconds"), up, sizeof(up));
			printf("%-*s %-10s %-12s %-20s %7.0f %8.3f %8.0f %7zu %8s\n",
			       w, r->device, rank, jstr(s, "state", "?"),
			       base_name(jstr(s, "model", "?")),
			       jnum(s, "version"), jnum(s, "bytes") / 1e9,
			       jnum(s, "tensors"), other_clients(s), up);
		} else if (r->have_ready) {
			snprintf(rank, sizeof(rank), "pp%d/tp%d",
				 r->ri.pp_rank, r->ri.tp_rank);
			printf("%-*s %-10s %-12s %-20s %7llu %8.3f %8llu %7s %8s\n",
			       w, r->device, rank, r->dead ? "DEAD" : "UNREACHABLE",
			       base_name(r->ri.model),
			       (unsigned long long)r->ri.version,
			       r->ri.bytes / 1e9,
			       (unsigned long long)r->ri.tensors, "-", "-");
		} else {
			printf("%-*s %-10s %-12s %-20s %7s %8s %8s %7s %8s\n",
			       w, r->device, "-", r->lock_pid ? "STARTING" :
			       "UNREACHABLE", "-", "-", "-", "-", "-", "-");
		}
	}
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];

		if (r->status)
			continue;
		if (!r->have_ready && r->lock_pid)
			printf("%s: wcd pid %d holds the device and is still loading (no ready file yet)\n",
			       r->device, (int)r->lock_pid);
		else if (r->dead)
			printf("%s: DEAD: %s\n", r->device, r->why);
		else if (r->have_ready)
			printf("%s: UNREACHABLE: %s; its ready file %s says pid %d, socket %s, state %s\n",
			       r->device, r->why, r->ready_path, r->ri.pid,
			       r->ri.socket, r->ri.state[0] ? r->ri.state : "?");
		else
			printf("%s: UNREACHABLE: %s\n", r->device, r->why);
	}
}

static json_t *row_json(const struct row *r)
{
	json_t *o;

	if (r->status) {
		o = json_deep_copy(r->status);
		json_object_set_new(o, "reachable", json_true());
		json_object_set_new(o, "ready_file",
				    json_text(r->ready_path));
		return o;
	}
	o = json_pack("{s:s, s:b, s:s, s:o}", "device", r->device,
		      "reachable", 0, "state",
		      !r->have_ready && r->lock_pid ? "STARTING" :
		      r->dead ? "DEAD" : "UNREACHABLE", "error", json_text(r->why));
	if (!r->have_ready) {
		if (r->lock_pid)
			json_object_set_new(o, "pid",
					    json_integer(r->lock_pid));
		return o;
	}
	json_object_set_new(o, r->dead ? "dead_file" : "ready_file",
			    json_text(r->ready_path));
	json_object_set_new(o, "ready", json_pack(
		"{s:i, s:o, s:s, s:s, s:I, s:I, s:I, s:f, s:o,"
		" s:i, s:i, s:i, s:i, s:s}",
		"pid", r->ri.pid, "socket", json_text(r->ri.socket),
		"device", r->ri.device, "identity", r->ri.identity,
		"version", (json_int_t)r->ri.version,
		"tensors", (json_int_t)r->ri.tensors,
		"bytes", (json_int_t)r->ri.bytes,
		"load_seconds", r->ri.load_seconds, "model", json_text(r->ri.model),
		"tp_size", r->ri.tp_size, "tp_rank", r->ri.tp_rank,
		"pp_size", r->ri.pp_size, "pp_rank", r->ri.pp_rank,
		"state", r->ri.state));
	return o;
}

/* Whether the device file name is asked for: only (NULL: any) and the
 * backend (1 host: "host", "host-NAME"; 0 cuda: the others; -1 any). */
static bool wanted(const char *name, const char *only, int backend)
{
	bool host = !strcmp(name, "host") || !strncmp(name, "host-", 5);

	if (only && strcmp(only, name))
		return false;
	return backend < 0 || host == (backend == 1);
}

/* A row for the record wcctl clean left of a daemon that died serving
 * (<device>.dead), unless the device has a row (it serves again, or is
 * starting); 1 when added, else 0. */
static int dead_row(const struct rundir *rd, const char *name,
		    const char *only, int backend, struct row *rows, int n)
{
	struct row *r = &rows[n];
	char e[BASE_ERR_LEN], when[32] = "?", line[256];
	struct paths p;
	long at = 0;
	pid_t pid;
	FILE *f;

	WC_ASSERT(n >= 0 && n < RUNDIR_DEVICES_MAX);   /* collect's bound */
	if (!wanted(name, only, backend))
		return 0;
	for (int j = 0; j < n; j++)
		if (!strcmp(rows[j].device, name))
			return 0;
	if (rundir_paths(rd, name, &p, e) ||
	    lock_holder(p.lock, &pid, e) > 0)
		return 0;
	memset(r, 0, sizeof(*r));
	memcpy(r->device, name, sizeof(r->device));
	if ((size_t)snprintf(r->ready_path, sizeof(r->ready_path), "%s.dead",
			     p.prefix) >= sizeof(r->ready_path) ||
	    ready_read_file(&r->ri, r->ready_path, e))
		return 0;
	f = fopen(r->ready_path, "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "cleaned_at=%ld", &at) == 1)
			break;
	if (f)
		fclose(f);
	if (at > 0)
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ",
			 gmtime(&(time_t){ at }));
	r->have_ready = true;
	r->dead = true;
	snprintf(r->why, sizeof(r->why),
		 "its daemon (pid %d, pp%d/tp%d of %.700s) died serving; wcctl clean removed its files at %s and left %.700s; start it again with wcctl start, or run 'wcctl clean --forget' if the rank is gone for good",
		 r->ri.pid, r->ri.pp_rank, r->ri.tp_rank, r->ri.model, when,
		 r->ready_path);
	return 1;
}

/* Rows for ready files, then for locked devices without one, then for
 * the records of dead daemons. */
static int collect(const struct rundir *rd, const char *only, int backend,
		   struct row *rows, int timeout_ms, char *err)
{
	static rundir_name names[RUNDIR_DEVICES_MAX];
	int n = 0, k;

	k = rundir_scan(rd, ".ready", names, RUNDIR_DEVICES_MAX, err);
	if (k < 0)
		return k;
	for (int i = 0; i < k; i++) {
		if (!wanted(names[i], only, backend))
			continue;
		struct row *r = &rows[n++];
		struct paths p;
		char e[BASE_ERR_LEN];

		memcpy(r->device, names[i], sizeof(r->device));
		if (rundir_paths(rd, names[i], &p, e)) {
			snprintf(r->why, sizeof(r->why), "%s", e);
			continue;
		}
		snprintf(r->ready_path, sizeof(r->ready_path), "%s", p.ready);
		if (ready_read_file(&r->ri, p.ready, e)) {
			snprintf(r->why, sizeof(r->why), "%s", e);
			continue;
		}
		r->have_ready = true;
		if (!r->ri.socket[0])
			snprintf(r->ri.socket, sizeof(r->ri.socket), "%s",
				 p.sock);
		row_ask(r, timeout_ms);
	}
	k = rundir_scan(rd, ".lock", names, RUNDIR_DEVICES_MAX, err);
	if (k < 0)
		return k;
	for (int i = 0; i < k && n < RUNDIR_DEVICES_MAX; i++) {
		struct row *r = &rows[n];
		struct paths p;
		pid_t pid;
		char e[BASE_ERR_LEN];
		bool dup = false;

		if (!wanted(names[i], only, backend))
			continue;
		for (int j = 0; j < n && !dup; j++)
			dup = !strcmp(rows[j].device, names[i]);
		if (dup || rundir_paths(rd, names[i], &p, e) ||
		    lock_holder(p.lock, &pid, e) <= 0)
			continue;
		memset(r, 0, sizeof(*r));
		memcpy(r->device, names[i], sizeof(r->device));
		r->lock_pid = pid > 0 ? pid : -1;
		snprintf(r->why, sizeof(r->why),
			 "no ready file yet (still loading)");
		n++;
	}
	k = rundir_scan(rd, ".dead", names, RUNDIR_DEVICES_MAX, err);
	if (k < 0)
		return k;
	for (int i = 0; i < k && n < RUNDIR_DEVICES_MAX; i++)
		n += dead_row(rd, names[i], only, backend, rows, n);
	WC_ASSERT(n <= RUNDIR_DEVICES_MAX);   /* rows has that many */
	return n;
}

int wcctl_status(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'd' },
		{ "all", no_argument, NULL, 'a' },
		{ "backend", required_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct row rows[RUNDIR_DEVICES_MAX];
	int backend = -1;   /* 0 cuda, 1 host, -1 both */
	bool all = false;
	const char *runtime_dir = NULL, *device = NULL;
	int c, n, answered = 0, starting = 0, timeout_ms = 2000;
	char err[BASE_ERR_LEN], *end, only[PATHS_DEVICE_MAX + 1];
	double secs;
	bool json = false;
	struct rundir rd;

	optind = 1;
	while ((c = cli_getopt(argc, argv, "h", lo, "wcctl status")) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'r': runtime_dir = optarg; break;
		case 't':
			timeout_ms = (int)strtol(optarg, &end, 10);
			if (*end || timeout_ms < 1 || timeout_ms > 600000) {
				fprintf(stderr, "wcctl status: --timeout-ms '%s' is not 1..600000\n",
					optarg);
				return 2;
			}
			break;
		case 'T':
			if (cli_parse_secs(optarg, 0.001, 600, &secs)) {
				fprintf(stderr, "wcctl status: --timeout '%s' is not a number of seconds in 0.001..600 (e.g. 2 or 0.5)\n",
					optarg);
				return 2;
			}
			timeout_ms = (int)(secs * 1000 + 0.5);
			if (timeout_ms < 1)
				timeout_ms = 1;
			break;
		case 'd': device = optarg; break;
		case 'a': all = true; break;
		case 'b':
			if (strcmp(optarg, "cuda") && strcmp(optarg, "host")) {
				fprintf(stderr, "wcctl status: --backend '%s' is not cuda or host\n",
					optarg);
				return 2;
			}
			backend = !strcmp(optarg, "host");
			break;
		case 'h': status_usage(stdout); return 0;
		default: status_usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		status_usage(stderr);
		return 2;
	}
	if (all && device) {
		fprintf(stderr, "wcctl status: give --device D or --all, not both\n");
		return 2;
	}
	if (rundir_init(&rd, runtime_dir, err)) {
		log_error("%s", err);
		return 2;
	}
	if (device && gpus_device_name(device, only, sizeof(only), err)) {
		log_error("%s", err);
		return 2;
	}
	n = collect(&rd, device ? only : NULL, backend, rows, timeout_ms,
		    err);
	if (n < 0) {
		log_error("%s", err);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		answered += rows[i].status != NULL;
		starting += !rows[i].status && !rows[i].have_ready &&
			    rows[i].lock_pid;
	}
	if (json) {
		json_t *a = json_array();
		char *s;

		for (int i = 0; i < n; i++)
			json_array_append_new(a, row_json(&rows[i]));
		s = json_dumps(a, JSON_INDENT(2));
		printf("%s\n", s ? s : "[]");
		free(s);
		json_decref(a);
	} else if (n) {
		print_table(rows, n);
	} else if (device) {
		printf("no wcache daemon found for device %s in %s (start one with 'wcctl start')\n",
		       only, rd.dir);
	} else if (backend >= 0) {
		printf("no wcache daemon of the %s backend found in %s (start them with 'wcctl start --backend %s')\n",
		       backend ? "host" : "cuda", rd.dir,
		       backend ? "host" : "cuda");
	} else {
		printf("no wcache daemon found in %s (start one with 'wcctl start')\n",
		       rd.dir);
	}
	for (int i = 0; i < n; i++)
		json_decref(rows[i].status);
	if (!n)
		return 3;
	if (answered + starting < n)
		return 4;
	return starting ? 5 : 0;
}
