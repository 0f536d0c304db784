/* SPDX-License-Identifier: MIT */
/*
 * wcbench load: starts a wcd on a model in a private runtime directory,
 * waits for its ready file, and reports the time from spawn to ready, the
 * daemon's own load time and GB/s, and each phase it reports (its log's
 * "phase NAME: X s, Y GB/s" lines, else STATUS "phases"); then stops it with
 * SIGTERM. --drop-caches empties the page cache first (a cold start; needs
 * root). --repeat runs it several times; every run is one sample.
 *
 * Bounds: LD_REPEAT_MAX runs, LD_PHASES_MAX phases, log lines read up to
 * LD_LINE_MAX bytes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "paths.h"
#include "ready.h"
#include "wcache.h"
#include "wcbench.h"

#define LD_REPEAT_MAX 100
#define LD_PHASES_MAX 12
#define LD_LINE_MAX 1024
#define LD_WAIT_S 600

extern char **environ;

struct ld_opts {
	const char *model;
	const char *device;
	const char *wcd;
	char **extra;           /* after "--": passed to wcd */
	int nextra;
	unsigned repeat;
	bool drop_caches;
	bool keep_dir;
};

struct ld_phase {
	char name[32];
	double seconds_sum;
	double gbps_sum;
	unsigned n;
};

static void drop_caches(void)
{
	int fd;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "3\n", 2) != 2)
		die("load: --drop-caches: cannot write "
		    "/proc/sys/vm/drop_caches: %s; run as root or leave the "
		    "option out (a warm start)", strerror(errno));
	close(fd);
}

static void phase_add(struct ld_phase *ph, unsigned *nph, const char *name,
		      double secs, double gbps)
{
	unsigned i;

	for (i = 0; i < *nph; i++)
		if (!strcmp(ph[i].name, name))
			break;
	if (i == *nph) {
		if (*nph >= LD_PHASES_MAX)
			return;
		snprintf(ph[i].name, sizeof(ph[i].name), "%s", name);
		(*nph)++;
	}
	ph[i].seconds_sum += secs;
	ph[i].gbps_sum += gbps;
	ph[i].n++;
}

/* Phases from STATUS when the log has none: "phases": {"read": seconds,
 * ...} (numbers are phase seconds; read_bytes and other non-number keys are
 * not phases), or {"read": {"seconds": x, "gbps": y}}. GB/s of a phase
 * given in seconds only is bytes / seconds (read: read_bytes). Returns how
 * many phases were found. */
static unsigned phases_from_status(json_t *st, uint64_t bytes,
				   struct ld_phase *ph, unsigned *nph)
{
	json_t *p = json_object_get(st, "phases"), *v;
	json_t *rb = json_object_get(p, "read_bytes");
	const char *k;
	unsigned found = 0;

	json_object_foreach(p, k, v) {
		double secs, b = (double)bytes;

		if (json_is_object(v)) {
			phase_add(ph, nph, k, json_number_value(
				  json_object_get(v, "seconds")),
				  json_number_value(json_object_get(v, "gbps")));
			found++;
			continue;
		}
		if (!json_is_real(v) || !strcmp(k, "read_bytes"))
			continue;
		secs = json_real_value(v);
		if (!strcmp(k, "read") && json_is_integer(rb))
			b = (double)json_integer_value(rb);
		phase_add(ph, nph, k, secs, secs > 0 && strcmp(k, "parse") &&
			  strcmp(k, "publish") ? b / secs / 1e9 : 0);
		found++;
	}
	return found;
}

/* Phases from the log (what wcd reports for people): lines holding
 * "phase NAME: X s" and optionally "Y GB/s". Returns how many. */
static unsigned phases_from_log(const char *path, struct ld_phase *ph,
				unsigned *nph)
{
	unsigned found = 0;
	char line[LD_LINE_MAX], name[32];
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "phase ");
		double secs = 0, gbps = 0;
		const char *g;

		if (!p || sscanf(p, "phase %31[^:]: %lf s", name, &secs) != 2)
			continue;
		g = strstr(p, " GB/s");
		if (g) {
			while (g > p && g[-1] != ' ' && g[-1] != ',')
				g--;
			gbps = strtod(g, NULL);
		}
		phase_add(ph, nph, name, secs, gbps);
		found++;
	}
	fclose(f);
	return found;
}

/* One run: spawn, wait for ready, read STATUS, stop. Fills the samples. */
static void ld_run(const struct ld_opts *o, const char *dir,
		   struct wb_series *ready_s, struct wb_series *load_s,
		   double *gbps, uint64_t *bytes, uint64_t *tensors,
		   struct ld_phase *ph, unsigned *nph)
{
	char tmpl[PATHS_MAX], name[PATHS_DEVICE_MAX + 1], err[BASE_ERR_LEN];
	char logpath[PATHS_MAX + 16], *json = NULL;
	static struct paths p;
	static struct ready_info ri;
	posix_spawn_file_actions_t fa;
	char *argv[64 + 16];
	struct wc_connect_opts co = { 0 };
	struct wc_conn *c = NULL;
	struct wc_error e;
	json_t *st;
	uint64_t t0, t1;
	int argc = 0, rc, status;
	pid_t pid;

	if (paths_template(tmpl, sizeof(tmpl), dir, NULL, NULL, getuid(),
			   err) < 0 ||
	    paths_device_name(o->device, name, sizeof(name), err) < 0 ||
	    paths_resolve(&p, tmpl, name, err) < 0)
		die("load: %s", err);
	snprintf(logpath, sizeof(logpath), "%s/wcd.log", dir);
	argv[argc++] = (char *)o->wcd;
	argv[argc++] = "--model";
	argv[argc++] = (char *)o->model;
	argv[argc++] = "--device";
	argv[argc++] = (char *)o->device;
	argv[argc++] = "--runtime-dir";
	argv[argc++] = (char *)dir;
	for (int i = 0; i < o->nextra; i++)
		argv[argc++] = o->extra[i];
	argv[argc] = NULL;

	if (o->drop_caches)
		drop_caches();
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, logpath,
					 O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
	posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
	t0 = clock_ns();
	rc = posix_spawn(&pid, o->wcd, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		die("load: cannot start %s: %s; build it (make "
		    "build/bin/wcd) or give --wcd PATH", o->wcd, strerror(rc));
	for (;;) {
		struct timespec ts = { 0, 1000000 };

		if (access(p.ready, F_OK) == 0 &&
		    ready_read_file(&ri, p.ready, err) == 0)
			break;
		if (waitpid(pid, &status, WNOHANG) == pid)
			die("load: wcd exited before it was ready "
			    "(status %d); its log is %s", status, logpath);
		if (clock_ns() - t0 > LD_WAIT_S * 1000000000ull) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			die("load: wcd not ready after %d s; its log is "
			    "%s", LD_WAIT_S, logpath);
		}
		nanosleep(&ts, NULL);
	}
	t1 = clock_ns();
	wb_series_push(ready_s, t1 - t0);
	wb_series_push(load_s, (uint64_t)(ri.load_seconds * 1e9));
	*bytes = ri.bytes;
	*tensors = ri.tensors;
	*gbps += ri.load_seconds > 0 ? (double)ri.bytes / ri.load_seconds / 1e9
				     : 0;

	if (!phases_from_log(logpath, ph, nph)) {
		co.socket = p.sock;
		if (wc_connect(&co, &c, &e) == 0 &&
		    wc_status(c, &json, &e) == 0) {
			st = json_loads(json, 0, NULL);
			if (st)
				phases_from_status(st, ri.bytes, ph, nph);
			json_decref(st);
			free(json);
		} else {
			log_warn("load: STATUS failed: %s", e.msg);
		}
		wc_close(c);
	}
	kill(pid, SIGTERM);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		log_warn("load: wcd did not exit cleanly on SIGTERM "
			 "(status %d); its log is %s", status, logpath);
}

/* Removes our private runtime directory and the files wcd left in it (its
 * lock file, our copy of its log). */
static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.' || (de->d_name[1] &&
		    strcmp(de->d_name, "..")))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	if (rmdir(dir) < 0)
		log_warn("load: %s not removed: %s", dir,
			 strerror(errno));
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: wcbench load --model DIR [options] [-- WCD-OPTIONS...]\n\n"
"Starts a wcd on DIR in a private runtime directory, waits until it is\n"
"ready, reports the time to ready, the daemon's load time and GB/s and each\n"
"load phase it reports, then stops it (SIGTERM).\n\n"
"  --model DIR            the model directory (required)\n"
"  --device D             host, host:NAME, host-NAME, an index or GPU-<uuid>\n"
"                         (default host)\n"
"  --wcd PATH             the daemon (default: wcd next to this wcbench)\n"
"  --drop-caches          drop the page cache before each run (cold; root)\n"
"  -r, --repeat N         runs (default 1, at most %d)\n"
"  --keep                 keep the runtime directory (and wcd's log)\n"
WB_HELP_OUT
"\n"
"Examples:\n"
"  wcbench load --model /models/llama --device host\n"
"  wcbench load --model /models/llama --device 0 --drop-caches -r 3 --json\n"
"\n"
"Exit status: 0 measured, 1 a failure (the daemon, a bound, a bad value),\n"
"2 usage.\n", LD_REPEAT_MAX);
}

/* One of load's own options into ctx (struct ld_opts). */
static bool ld_opt(void *ctx, int c, const char *arg)
{
	struct ld_opts *o = ctx;

	switch (c) {
	case 'W':
		o->wcd = arg;
		return true;
	case 'C':
		o->drop_caches = true;
		return true;
	case 'r':
		o->repeat = (unsigned)wb_parse_count("--repeat", arg, 1,
						     LD_REPEAT_MAX);
		return true;
	case 'K':
		o->keep_dir = true;
		return true;
	}
	return false;
}

static const struct option ld_longopts[] = {
	{ "wcd", required_argument, NULL, 'W' },
	{ "drop-caches", no_argument, NULL, 'C' },
	{ "repeat", required_argument, NULL, 'r' },
	{ "keep", no_argument, NULL, 'K' },
	{ NULL, 0, NULL, 0 },
};

static const struct wb_cmd ld_cmd = {
	"wcbench load", WB_TAKES_DEVICE | WB_TAKES_MODEL | WB_TAKES_OPERANDS,
	"r:", ld_longopts, usage, ld_opt,
};

int wb_load(int argc, char **argv)
{
	struct ld_opts o = { .repeat = 1 };
	struct ld_phase ph[LD_PHASES_MAX] = { 0 };
	struct wb_series *ready_s, *load_s;
	struct wb_args a;
	struct wb_report r;
	char wcd[4096], dir[] = "/tmp/wcbench-load.XXXXXX";
	uint64_t bytes = 0, tensors = 0;
	unsigned nph = 0;
	double gbps = 0;
	ssize_t n;
	int rc;

	wb_parse(argc, argv, &ld_cmd, &o, &a);
	o.model = a.model;
	o.device = a.device ? a.device : "host";
	o.extra = a.operands;
	o.nextra = a.noperands;
	if (o.nextra > 64)
		die("load: %d options for wcd after '--'; at most 64",
		    o.nextra);
	if (!o.model) {
		fprintf(stderr, "wcbench load: --model DIR is required\n");
		usage(stderr);
		return 2;
	}
	if (!o.wcd) {
		n = readlink("/proc/self/exe", wcd, sizeof(wcd) - 5);
		if (n <= 0)
			die("load: cannot read /proc/self/exe: %s; give "
			    "--wcd PATH", strerror(errno));
		wcd[n] = 0;
		snprintf(strrchr(wcd, '/') + 1, 4, "wcd");
		o.wcd = wcd;
	}
	if (!mkdtemp(dir))
		die("load: mkdtemp %s: %s", dir, strerror(errno));

	wb_report_init(&r, "load");
	ready_s = wb_series_add(&r, "spawn to ready", o.repeat);
	load_s = wb_series_add(&r, "load (wcd's own)", o.repeat);
	for (unsigned i = 0; i < o.repeat; i++) {
		ld_run(&o, dir, ready_s, load_s, &gbps, &bytes, &tensors, ph,
		       &nph);
		wb_progress(&a.out, "runs", i + 1, o.repeat);
	}
	wb_progress_end(&a.out);
	snprintf(r.params, sizeof(r.params), "%s on %s, %u run%s, %s page "
		 "cache, %llu tensors, %.3f GB", o.model, o.device, o.repeat,
		 o.repeat == 1 ? "" : "s", o.drop_caches ? "cold (dropped)" :
		 "warm", (unsigned long long)tensors, (double)bytes / 1e9);
	wb_metric_add(&r, "bytes", (double)bytes, "B");
	wb_metric_add(&r, "load_gbps", gbps / o.repeat, "GB/s");
	wb_metric_add(&r, "ready_gbps", (double)bytes /
		      ((double)wb_series_pct(ready_s, 50)), "GB/s");
	for (unsigned i = 0; i < nph; i++) {
		char k[WB_NAME_LEN];

		snprintf(k, sizeof(k), "%.30s_seconds", ph[i].name);
		wb_metric_add(&r, k, ph[i].seconds_sum / ph[i].n, "s");
		if (ph[i].gbps_sum > 0) {
			snprintf(k, sizeof(k), "%.30s_gbps", ph[i].name);
			wb_metric_add(&r, k, ph[i].gbps_sum / ph[i].n, "GB/s");
		}
	}
	if (!nph)
		wb_note_add(&r, "wcd reported no per-phase times (neither in "
			    "STATUS nor in its log)");
	rc = wb_report_emit(&r, &a.out);
	wb_report_free(&r);
	if (o.keep_dir) {
		fprintf(stderr, "wcbench load: kept %s\n", dir);
	} else {
		rm_dir(dir);
	}
	return rc;
}
