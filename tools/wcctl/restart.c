/* SPDX-License-Identifier: MIT */
/*
 * wcctl restart: hot handover of one rank daemon to a new wcd (possibly a
 * new build, --wcd), without a reload and without closing an engine's
 * connection (tools/wcd/handover/handover.c has the protocol). It finds the daemon
 * as stop does (the ready file's pid must hold the device's lock), starts
 * `wcd --takeover` in its own session with the old daemon's model and rank
 * (from the ready file; the new daemon also gets the plan-deciding options
 * from the old one), its output appended to the device's .log, and waits
 * on both pidfds: the new daemon exiting first is a failure (the old one
 * serves on, or, if the old one died too, nothing does: both said); the
 * old one exiting, then a STATUS answered by the new pid, is success.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "compat.h"
#include "cli.h"
#include "err.h"
#include "gpus.h"
#include "log.h"
#include "ready.h"
#include "rundir.h"
#include "utf8.h"
#include "wcache.h"
#include "wcctl.h"
#include "clock.h"

extern char **environ;

static void restart_usage(FILE *f)
{
	fprintf(f,
"usage: wcctl restart (--device D | --all) [--runtime-dir DIR] [--wcd PATH]\n"
"                     [--verify none|hash] [--timeout SEC] [--json]\n"
"\n"
"Hands a running rank daemon over to a new wcd (wcd --takeover): the lock,\n"
"the socket, every pool and every engine connection move to the new\n"
"process; nothing is reloaded, engines keep their mappings and see no\n"
"error. A new wcd that cannot take over (another handover protocol, a\n"
"model directory that changed, a sleeping daemon) leaves the old one\n"
"serving. The new wcd gets the old one's model, rank and every option\n"
"that shapes what it serves or who may attach (--rules, --layout,\n"
"--allow-uid, --ep-size/--ep-rank, --vocab-pad, metrics and log options:\n"
"the ready file's serve_args); if the old daemon dies in the middle of the\n"
"handover, the new one loads from disk with them, and this says\n"
"\"reloaded (<why>)\" instead of \"handed over\".\n"
"\n"
"  --device D        host, host:NAME, host-NAME, a CUDA ordinal or GPU-<uuid>\n"
"  --all             every daemon with a ready file, one after the other\n"
"  --runtime-dir DIR as given to wcctl start / wcd (default: the environment's)\n"
"  --wcd PATH        the new daemon (default: the wcd next to this wcctl)\n"
"  --verify hash     the new daemon hashes every tensor again first\n"
"  --timeout SEC     how long to wait for the new daemon (default 60)\n"
"  --json            the outcome as one JSON object on stdout\n"
"\n"
"Examples:\n"
"  wcctl restart --device 0\n"
"  wcctl restart --device host-0 --wcd /opt/wcache-new/bin/wcd --verify hash\n"
"  wcctl restart --device GPU-5a3f0c1e-... --timeout 120 --json\n"
"\n"
"Exit status: 0 the new daemon serves (handed over, or reloaded), 1 failed\n"
"(the log says which daemon serves; with --all: any of them), 2 usage, 3 no\n"
"daemon was running.\n");
}

/* The wcd spec of a device's file name: host-X is host:X. */
static void device_spec(const char *name, char *out, size_t len)
{
	if (!strncmp(name, "host-", 5))
		snprintf(out, len, "host:%s", name + 5);
	else
		snprintf(out, len, "%s", name);
}

/* The pid that answers STATUS on the device's socket, or -1. */
static pid_t status_pid(const char *sock)
{
	struct wc_connect_opts o = { .socket = sock, .timeout_ms = 10000,
				     .label = "wcctl restart" };
	struct wc_conn *c;
	struct wc_error e;
	json_error_t je;
	json_t *j;
	char *s;
	pid_t pid = -1;

	if (wc_connect(&o, &c, &e))
		return -1;
	if (wc_status(c, &s, &e) == 0) {
		j = json_loads(s, 0, &je);
		if (j)
			pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
		json_decref(j);
		free(s);
	}
	wc_close(c);
	return pid;
}

/* After the new daemon's death: what became of the old one. It resumes
 * (takes the clients back, rewrites the ready file, answers STATUS under
 * its own pid) when the new one died before SERVING, and exits when SERVING
 * had reached it. 1: it serves on (it answered STATUS); 0: it exited;
 * -1: neither within RESTART_FATE_MS. */
#define RESTART_FATE_MS 5000

static int old_fate(int old_fd, const char *sock, pid_t old)
{
	for (int i = 0; i < RESTART_FATE_MS / 10; i++) {
		struct pollfd pf = { old_fd, POLLIN, 0 };

		if (poll(&pf, 1, 0) > 0)
			return 0;
		if (status_pid(sock) == old)
			return 1;
		if (poll(&pf, 1, 10) > 0)
			return 0;
	}
	return -1;
}

static pid_t spawn_new(const char *wcd, char *const argv[], const char *log)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	pid_t pid;
	int ret;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, log,
					 O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	posix_spawnattr_init(&at);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
	ret = posix_spawnp(&pid, wcd, &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (ret) {
		errno = ret;
		return -1;
	}
	return pid;
}

static void tail_log(const char *log)
{
	char line[1024];
	FILE *f = fopen(log, "re");
	long n = 0;

	if (!f)
		return;
	/* the last 10 lines: count, then skip */
	while (fgets(line, sizeof(line), f))
		n++;
	rewind(f);
	for (long i = 0; fgets(line, sizeof(line), f); i++)
		if (i >= n - 10)
			fprintf(stderr, "  %s", line);
	fclose(f);
}

/* The new daemon's words after the fixed ones: every option of the old
 * daemon's that a restart keeps (its ready file's serve_args; a daemon of
 * a build before serve_args: its metrics and log keys). Appends to
 * argv[*na], at most max words in all; store holds the decoded words. */
static int kept_args(const struct ready_info *ri, char **argv, int *na,
		     int max, char *store, size_t cap, const char *name)
{
	int n;

	if (!ri->serve_args[0]) {
		if (ri->metrics_listen[0]) {
			argv[(*na)++] = "--metrics-listen";
			argv[(*na)++] = (char *)ri->metrics_listen;
		}
		if (ri->log_format[0]) {
			argv[(*na)++] = "--log-format";
			argv[(*na)++] = (char *)ri->log_format;
		}
		if (ri->log_file[0]) {
			argv[(*na)++] = "--log-file";
			argv[(*na)++] = (char *)ri->log_file;
		}
		return 0;
	}
	n = ready_args_split(ri->serve_args, store, cap, argv + *na,
			     (unsigned)(max - *na));
	if (n < 0) {
		log_error("device %s: the ready file's serve_args cannot be read (%s): it is damaged or from another build; not restarting (restart with a reload: wcctl stop, then wcctl start with the daemon's options)",
			  name, strerror(-n));
		return n;
	}
	*na += n;
	return 0;
}

/* The ready file of the new daemon that serves: a reload (its reloaded
 * key says why) or a handover; what the log and --json say. */
static void report_served(const char *name, const struct ready_info *old,
			  const char *ready, pid_t nw, double serve_ms,
			  double exit_ms, char *reason, size_t cap)
{
	struct ready_info ri;
	char err[BASE_ERR_LEN];

	reason[0] = '\0';
	if (ready_read_file(&ri, ready, err) == 0 && ri.pid == nw &&
	    ri.reloaded[0])
		snprintf(reason, cap, "%s", ri.reloaded);
	if (!reason[0]) {
		log_info("device %s: wcd pid %d handed over to pid %d: serving %.1f ms after the restart began (the old daemon exited at %.1f ms)",
			 name, old->pid, (int)nw, serve_ms, exit_ms);
		return;
	}
	log_warn("device %s: reloaded (%s): wcd pid %d serves what it loaded from disk with the old daemon's options, %.1f ms after the restart began; engines attached to pid %d saw it exit and must attach again",
		 name, reason, (int)nw, serve_ms, old->pid);
	if (strcmp(ri.identity, old->identity))
		log_warn("device %s: the reloaded identity %s differs from the old daemon's %s (the model directory or a rules or layout file changed since it started): engines that expect the old one are refused with a MISMATCH",
			 name, ri.identity, old->identity);
}

/* The new daemon's fixed words: at most RESTART_FIXED_WORDS. */
#define RESTART_FIXED_WORDS 32

/* wcctl restart's options. */
struct restart_opts {
	const char *device, *runtime_dir, *wcd;
	double timeout_s;
	bool json, rehash, all;
};

/* One restart: the old daemon (its ready file ri, watched by old_fd), the
 * new one (nw, new_fd) and the clock_ns times the restart began (t0), the
 * old one exited (t_exit, 0 until then) and the new one answered STATUS
 * (t_served). */
struct restart {
	const char *name;
	struct paths p;
	struct ready_info ri;
	pid_t nw;
	int old_fd, new_fd;
	uint64_t t0, t_exit, t_served;
	double timeout_s;
};

/* Parses argv into *o. Returns -1 to go on, else the exit status. */
static int restart_parse(int argc, char **argv, struct restart_opts *o)
{
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "all", no_argument, NULL, 'a' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "wcd", required_argument, NULL, 'w' },
		{ "verify", required_argument, NULL, 'v' },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct restart_opts){ .timeout_s = 60 };
	optind = 1;
	while ((c = cli_getopt(argc, argv, "h", lo, "wcctl restart")) != -1) {
		switch (c) {
		case 'd': o->device = optarg; break;
		case 'r': o->runtime_dir = optarg; break;
		case 'w': o->wcd = optarg; break;
		case 'v':
			if (!strcmp(optarg, "hash"))
				o->rehash = true;
			else if (strcmp(optarg, "none")) {
				fprintf(stderr, "wcctl restart: --verify '%s' is not none or hash\n",
					optarg);
				return 2;
			}
			break;
		case 't':
			if (cli_parse_secs(optarg, 0.001, 86400, &o->timeout_s)) {
				fprintf(stderr, "wcctl restart: --timeout '%s' is not a number of seconds above 0\n",
					optarg);
				return 2;
			}
			break;
		case 'j': o->json = true; break;
		case 'a': o->all = true; break;
		case 'h': restart_usage(stdout); return 0;
		default: restart_usage(stderr); return 2;
		}
	}
	return -1;
}

/* The new daemon: --wcd's, else the wcd next to this wcctl if there is
 * one (self holds its path), else "wcd" from PATH. */
static const char *wcd_path(const char *wcd, char *self, size_t len)
{
	ssize_t n;
	char *slash;

	if (wcd)
		return wcd;
	n = readlink("/proc/self/exe", self, len - 5);
	if (n <= 0)
		return "wcd";
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return "wcd";
	strcpy(slash + 1, "wcd");
	return access(self, X_OK) == 0 ? self : "wcd";
}

/* The new daemon's argv (max words, the NULL included): wcd --takeover
 * with the old daemon's device, model and rank (for the old daemon dying
 * mid-handover: it loads instead), then kept_args's. num holds the rank's
 * numbers, kept the decoded serve_args. 0, or -errno (said). */
static int restart_argv(const struct restart *r, const struct restart_opts *o,
			const char *wcd, char *spec, size_t spec_len,
			char num[4][16], char *kept, size_t cap,
			char **nargv, int max)
{
	const struct ready_info *ri = &r->ri;
	int na = 0;

	device_spec(r->name, spec, spec_len);
	snprintf(num[0], 16, "%d", ri->tp_size);
	snprintf(num[1], 16, "%d", ri->tp_rank);
	snprintf(num[2], 16, "%d", ri->pp_size);
	snprintf(num[3], 16, "%d", ri->pp_rank);
	nargv[na++] = (char *)wcd;
	nargv[na++] = "--takeover";
	nargv[na++] = "--device";
	nargv[na++] = spec;
	if (o->runtime_dir) {
		nargv[na++] = "--runtime-dir";
		nargv[na++] = (char *)o->runtime_dir;
	}
	nargv[na++] = "--model";
	nargv[na++] = (char *)ri->model;
	nargv[na++] = "--tp-size";
	nargv[na++] = num[0];
	nargv[na++] = "--tp-rank";
	nargv[na++] = num[1];
	nargv[na++] = "--pp-size";
	nargv[na++] = num[2];
	nargv[na++] = "--pp-rank";
	nargv[na++] = num[3];
	if (o->rehash) {
		nargv[na++] = "--takeover-verify";
		nargv[na++] = "hash";
	}
	WC_ASSERT(na <= RESTART_FIXED_WORDS && na < max);
	/* every option of the old daemon's that shapes what it serves, to
	 * whom, how it logs: for the handover's checks and for a reload */
	if (kept_args(ri, nargv, &na, max - 1, kept, cap, r->name))
		return -EINVAL;
	WC_ASSERT(na < max);
	nargv[na] = NULL;
	return 0;
}

/* The new daemon died: says what became of the old one (old_fate) with
 * the new one's exit status st, and the log's last lines. */
static void new_died(const struct restart *r, int st)
{
	/* the old one may have read SERVING and be exiting, or be taking the
	 * clients back: wait for which (an old daemon seen alive here is not
	 * yet one that serves) */
	int fate = r->t_exit ? 0 : old_fate(r->old_fd, r->p.sock, r->ri.pid);
	const char *how = WIFSIGNALED(st) ? "signal" : "code";
	int code = WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st);

	if (fate == 0)
		log_error("device %s: the new wcd pid %d exited (%s %d) after the old daemon pid %d had handed over and exited: none serves (start one with wcctl start)",
			  r->name, (int)r->nw, how, code, r->ri.pid);
	else
		log_error("device %s: the new wcd pid %d exited (%s %d) before serving; %s",
			  r->name, (int)r->nw, how, code,
			  fate == 1 ? "the old daemon serves on" :
			  "the old daemon neither exited nor answered within 5 s (see wcctl status)");
	tail_log(r->p.log);
}

/* Waits on both pidfds until the old daemon has exited and the new one
 * answers STATUS (0: r->t_exit and r->t_served set), or the new one dies,
 * or timeout_s passes (1, said). */
static int restart_wait(struct restart *r)
{
	uint64_t end = r->t0 + (uint64_t)(r->timeout_s * 1e9);
	int st;

	for (;;) {
		struct pollfd pf[2] = { { r->t_exit ? -1 : r->old_fd, POLLIN, 0 },
					{ r->new_fd, POLLIN, 0 } };
		uint64_t now = clock_ns();
		int k;

		if (now >= end) {
			log_error("device %s: the handover from pid %d to pid %d did not finish within %g s (see %s)",
				  r->name, r->ri.pid, (int)r->nw, r->timeout_s,
				  r->p.log);
			return 1;
		}
		k = poll(pf, 2, r->t_exit ? 10 :
			 (int)((end - now) / 1000000) + 1);
		if (k < 0 && errno != EINTR)
			return 1;
		if (pf[1].revents) {
			waitpid(r->nw, &st, 0);
			new_died(r, st);
			return 1;
		}
		if (pf[0].revents && !r->t_exit)
			r->t_exit = clock_ns();
		if (r->t_exit && status_pid(r->p.sock) == r->nw) {
			r->t_served = clock_ns();
			WC_ASSERT(r->t_served >= r->t_exit &&
				  r->t_exit >= r->t0);
			return 0;
		}
	}
}

/* --json: the outcome as one object on stdout. */
static void restart_json(const struct restart *r, int rc, const char *reason)
{
	json_t *o = json_pack("{s:s, s:b, s:s, s:i, s:i, s:f, s:f, s:s, s:o, s:i}",
			      "command", "restart", "ok", rc == 0,
			      "device", r->name, "old_pid", r->ri.pid,
			      "new_pid", (int)r->nw,
			      "serving_ms", rc ? 0.0 :
			      (double)(r->t_served - r->t0) / 1e6,
			      "old_exit_ms", r->t_exit ?
			      (double)(r->t_exit - r->t0) / 1e6 : 0.0,
			      "outcome", rc ? "failed" :
			      reason[0] ? "reloaded" : "handed over",
			      "reason", json_text(reason),
			      "exit", rc);
	char *s = json_dumps(o, JSON_PRESERVE_ORDER);

	printf("%s\n", s ? s : "{}");
	free(s);
	json_decref(o);
}

/* Finds the device's daemon as stop does: its ready file into r->ri, its
 * pidfd into r->old_fd. -1 to go on, else the exit status (said). */
static int restart_find(struct restart *r, const struct restart_opts *o,
			char *name, size_t len)
{
	char err[BASE_ERR_LEN];
	struct rundir rd;
	pid_t holder;

	if (rundir_init(&rd, o->runtime_dir, err) ||
	    gpus_device_name(o->device, name, len, err) ||
	    rundir_paths(&rd, name, &r->p, err)) {
		log_error("%s", err);
		return 2;
	}
	r->name = name;
	if (lock_holder(r->p.lock, &holder, err) <= 0 ||
	    ready_read_file(&r->ri, r->p.ready, err)) {
		log_error("no daemon serves device %s (nothing holds %s, or it has no ready file yet): start one with wcctl start",
			  name, r->p.lock);
		return 3;
	}
	if (holder > 0 && r->ri.pid != holder) {
		log_error("device %s: its ready file names pid %d but pid %d holds the lock; not restarting (check the holder with 'fuser %s')",
			  name, r->ri.pid, (int)holder, r->p.lock);
		return 1;
	}
	r->old_fd = rx_pidfd_open(r->ri.pid);
	if (r->old_fd < 0) {
		log_error("cannot watch wcd pid %d on %s: %s", r->ri.pid, name,
			  strerror(errno));
		return 1;
	}
	return -1;
}

int wcctl_restart(int argc, char **argv)
{
	static char kept[READY_ARGS_MAX];
	char name[128], spec[160], self[4096], num[4][16];
	char *nargv[RESTART_FIXED_WORDS + READY_ARGS_WORDS_MAX + 1];
	char reason[READY_REASON_MAX] = "";
	struct restart r = { .old_fd = -1, .new_fd = -1 };
	struct restart_opts o;
	const char *wcd;
	int rc;

	rc = restart_parse(argc, argv, &o);
	if (rc >= 0)
		return rc;
	if (optind == argc && o.all && !o.device)
		return wcctl_each_daemon(o.runtime_dir, argc, argv,
					 wcctl_restart);
	if (optind < argc || !o.device == !o.all) {
		fprintf(stderr, "wcctl restart: give exactly one of --device D or --all\n");
		restart_usage(stderr);
		return 2;
	}
	rc = restart_find(&r, &o, name, sizeof(name));
	if (rc >= 0)
		return rc;
	r.timeout_s = o.timeout_s;
	wcd = wcd_path(o.wcd, self, sizeof(self));
	if (restart_argv(&r, &o, wcd, spec, sizeof(spec), num, kept,
			 sizeof(kept), nargv,
			 (int)(sizeof(nargv) / sizeof(nargv[0])))) {
		close(r.old_fd);
		return 1;
	}
	r.t0 = clock_ns();
	r.nw = spawn_new(wcd, nargv, r.p.log);
	if (r.nw < 0) {
		log_error("cannot start %s: %s; pass the daemon's path with --wcd",
			  wcd, strerror(errno));
		close(r.old_fd);
		return 1;
	}
	r.new_fd = rx_pidfd_open(r.nw);
	rc = restart_wait(&r);
	if (rc == 0)
		report_served(name, &r.ri, r.p.ready, r.nw,
			      (double)(r.t_served - r.t0) / 1e6,
			      (double)(r.t_exit - r.t0) / 1e6, reason,
			      sizeof(reason));
	if (o.json)
		restart_json(&r, rc, reason);
	close(r.old_fd);
	if (r.new_fd >= 0)
		close(r.new_fd);
	return rc;
}
