/* SPDX-License-Identifier: MIT */
/*
 * wcctl stop: SIGTERM through a pidfd to each daemon's pid, but only when
 * that pid holds the device's lock (flock, as wcd takes it; read from
 * /proc/locks), so a stale ready file whose pid was reused by another
 * process never gets that process signalled. Waits for all of them at
 * once (poll on the pidfds), SIGKILLs those still alive after the timeout.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "compat.h"
#include "cli.h"
#include "err.h"
#include "gpus.h"
#include "log.h"
#include "rundir.h"
#include "wcctl.h"
#include "clock.h"

#define STOP_KILL_WAIT_MS 5000

struct victim {
	struct paths paths;
	pid_t pid;
	int pidfd;
	bool gone, killed;
};

static void stop_usage(FILE *f)
{
	fprintf(f,
"usage: wcctl stop [--device D | --all] [--runtime-dir DIR] [--timeout SEC]\n"
"                  [--json]\n"
"\n"
"Stops rank daemons: SIGTERM through a pidfd to the pid in the device's\n"
"ready file (or, while it is still loading, to its lock's holder), only if\n"
"that pid holds the device's lock; waits, and SIGKILLs after the timeout.\n"
"\n"
"  --device D        host, host:NAME, host-NAME (as status prints it), a CUDA\n"
"                    ordinal or GPU-<uuid>\n"
"  --all             every daemon in the runtime directory\n"
"  --runtime-dir DIR as given to wcctl start / wcd (default: the environment's)\n"
"  --timeout SEC     SIGTERM -> SIGKILL (default 10; decimals allowed)\n"
"  --json            the outcome as one JSON object on stdout\n"
"\n"
"Examples:\n"
"  wcctl stop --device 0\n"
"  wcctl stop --device host-3 --timeout 2.5\n"
"  wcctl stop --all --json\n"
"\n"
"Exit status: 0 stopped, 1 a daemon could not be stopped, 2 usage,\n"
"3 no daemon was running.\n");
}

/* Finds the device's daemon and opens a pidfd on it. Returns 1 when there
 * is one to stop, 0 when none runs, -1 on an error (printed). */
static int stop_find(struct victim *v)
{
	struct ready_info ri;
	char err[BASE_ERR_LEN];
	pid_t holder, again;
	int ret, rr;

	ret = lock_holder(v->paths.lock, &holder, err);
	if (ret < 0) {
		log_error("%s", err);
		return -1;
	}
	if (!ret)
		return 0;
	rr = ready_read_file(&ri, v->paths.ready, err);
	if (rr == 0 && holder > 0 && ri.pid != holder) {
		log_error("device %s: its ready file names pid %d but pid %d holds the lock; not signalling pid %d (check the holder with 'fuser %s')",
			  v->paths.device, ri.pid, (int)holder, ri.pid,
			  v->paths.lock);
		return -1;
	}
	v->pid = rr == 0 ? ri.pid : holder;
	if (v->pid <= 0) {
		log_error("device %s is locked but its owner's pid is unknown; find it with 'fuser %s'",
			  v->paths.device, v->paths.lock);
		return -1;
	}
	v->pidfd = rx_pidfd_open(v->pid);
	if (v->pidfd < 0 && errno == ESRCH)
		return 0;   /* exited just now */
	if (v->pidfd < 0) {
		log_error("cannot open a pidfd for wcd pid %d on %s: %s",
			  (int)v->pid, v->paths.device, strerror(errno));
		return -1;
	}
	/* The pidfd now names the process that was pid; confirm it still
	 * holds the lock (a holder that died in between frees the lock). */
	ret = lock_holder(v->paths.lock, &again, err);
	if (ret <= 0 || (again > 0 && again != v->pid)) {
		close(v->pidfd);
		v->pidfd = -1;
		return 0;
	}
	return 1;
}

/* Polls the pidfds of the victims not yet gone until all are or ms pass. */
static void stop_wait(struct victim *vs, int n, uint64_t ms)
{
	uint64_t end = clock_ns() / 1000000 + ms;
	struct pollfd *p = calloc((size_t)n, sizeof(*p));

	if (!p)
		return;
	for (;;) {
		int k = 0, left = 0;
		uint64_t now = clock_ns() / 1000000;

		for (int i = 0; i < n; i++) {
			p[i].fd = vs[i].gone || vs[i].pidfd < 0 ? -1 :
				  vs[i].pidfd;
			p[i].events = POLLIN;
			p[i].revents = 0;
			left += p[i].fd >= 0;
		}
		if (!left || now >= end)
			break;
		k = poll(p, (nfds_t)n, (int)(end - now));
		if (k < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++)
			if (p[i].fd >= 0 && p[i].revents)
				vs[i].gone = true;
	}
	free(p);
}

/* --json: {"command": "stop", "ok", "stopped": [{device, pid, killed}],
 * "failed": N, "exit": rc}; the reasons stay on stderr. */
static void stop_json(json_t *stopped, int failed, int rc)
{
	json_t *o = json_pack("{s:s, s:b, s:O, s:i, s:i}", "command", "stop",
			      "ok", rc == 0, "stopped", stopped, "failed",
			      failed, "exit", rc);
	char *s = json_dumps(o, JSON_PRESERVE_ORDER);

	printf("%s\n", s ? s : "{}");
	fflush(stdout);
	free(s);
	json_decref(o);
}

/* The devices to stop: the one named (device), or every one with a lock
 * file in rd. The count, or the exit status negated (said). */
static int stop_names(struct rundir *rd, const char *device,
		      rundir_name *names)
{
	char err[BASE_ERR_LEN];
	int n;

	if (device) {
		if (gpus_device_name(device, names[0], sizeof(names[0]), err)) {
			log_error("%s", err);
			return -2;
		}
		return 1;
	}
	n = rundir_scan(rd, ".lock", names, RUNDIR_DEVICES_MAX, err);
	if (n < 0) {
		log_error("%s", err);
		return -1;
	}
	return n;
}

/* Finds each named device's daemon and sends it SIGTERM through its pidfd;
 * vs gets the ones signalled, in order. The count; *failed counts the
 * devices that could not be looked at or signalled (said). */
static int stop_signal(struct rundir *rd, rundir_name *names, int n,
		       struct victim *vs, int *failed)
{
	char err[BASE_ERR_LEN];
	int nv = 0;

	for (int i = 0; i < n; i++) {
		struct victim *v = &vs[nv];
		int ret;

		v->pidfd = -1;
		if (rundir_paths(rd, names[i], &v->paths, err)) {
			log_error("%s", err);
			(*failed)++;
			continue;
		}
		ret = stop_find(v);
		if (ret < 0)
			(*failed)++;
		if (ret <= 0)
			continue;
		WC_ASSERT(v->pidfd >= 0 && v->pid > 0);
		if (rx_pidfd_send_signal(v->pidfd, SIGTERM) && errno != ESRCH) {
			log_error("cannot signal wcd pid %d on %s: %s (is it another user's?)",
				  (int)v->pid, v->paths.device,
				  strerror(errno));
			close(v->pidfd);
			(*failed)++;
			continue;
		}
		log_info("sent SIGTERM to wcd pid %d on device %s",
			 (int)v->pid, v->paths.device);
		nv++;
	}
	WC_ASSERT(nv <= n);
	return nv;
}

/* After the wait: each victim that exited is logged, what it left behind
 * removed (a killed daemon leaves its socket and ready file; so does one
 * that did not shut down cleanly after SIGTERM) and added to stopped. The
 * count of those still alive after SIGKILL (said). Closes every pidfd. */
static int stop_reap(struct rundir *rd, struct victim *vs, int nv,
		     json_t *stopped)
{
	char err[BASE_ERR_LEN];
	int failed = 0;

	for (int i = 0; i < nv; i++) {
		struct victim *v = &vs[i];

		WC_ASSERT(v->pidfd >= 0);
		close(v->pidfd);
		if (!v->gone) {
			log_error("wcd pid %d on %s is still alive after SIGKILL (stuck in the kernel?)",
				  (int)v->pid, v->paths.device);
			failed++;
			continue;
		}
		if (!v->killed && access(v->paths.ready, F_OK) == 0)
			log_warn("wcd pid %d on %s exited without removing its ready file (not a clean shutdown; see %s); removing what it left",
				 (int)v->pid, v->paths.device, v->paths.log);
		if ((v->killed || access(v->paths.ready, F_OK) == 0 ||
		     access(v->paths.sock, F_OK) == 0) &&
		    rundir_remove(rd, &v->paths, 1, err) < 0)
			log_warn("%s", err);
		log_info("stopped wcd pid %d on device %s%s", (int)v->pid,
			 v->paths.device, v->killed ? " (SIGKILL)" : "");
		json_array_append_new(stopped, json_pack("{s:s, s:i, s:b}",
			"device", v->paths.device, "pid", (int)v->pid,
			"killed", v->killed));
	}
	return failed;
}

int wcctl_stop(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "all", no_argument, NULL, 'a' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static rundir_name names[RUNDIR_DEVICES_MAX];
	const char *device = NULL, *runtime_dir = NULL;
	char err[BASE_ERR_LEN];
	double timeout_s = 10;
	struct victim *vs;
	struct rundir rd;
	bool all = false, json = false;
	int c, n, nv, failed = 0, rc;
	json_t *stopped;

	optind = 1;
	while ((c = cli_getopt(argc, argv, "h", lo, "wcctl stop")) != -1) {
		switch (c) {
		case 'd': device = optarg; break;
		case 'a': all = true; break;
		case 'r': runtime_dir = optarg; break;
		case 't':
			if (cli_parse_secs(optarg, 0.001, 86400, &timeout_s)) {
				fprintf(stderr, "wcctl stop: --timeout '%s' is not a number of seconds above 0\n",
					optarg);
				return 2;
			}
			break;
		case 'j': json = true; break;
		case 'h': stop_usage(stdout); return 0;
		default: stop_usage(stderr); return 2;
		}
	}
	if (optind < argc || !!device == all) {
		fprintf(stderr, "wcctl stop: give exactly one of --device D or --all\n");
		stop_usage(stderr);
		return 2;
	}
	if (rundir_init(&rd, runtime_dir, err)) {
		log_error("%s", err);
		return 2;
	}
	n = stop_names(&rd, device, names);
	if (n < 0)
		return -n;
	vs = calloc((size_t)(n ? n : 1), sizeof(*vs));
	stopped = json_array();
	if (!vs || !stopped)
		die("out of memory");
	nv = stop_signal(&rd, names, n, vs, &failed);
	stop_wait(vs, nv, (uint64_t)(timeout_s * 1000));
	for (int i = 0; i < nv; i++) {
		if (vs[i].gone)
			continue;
		log_warn("wcd pid %d on %s did not stop within %g s; sending SIGKILL",
			 (int)vs[i].pid, vs[i].paths.device, timeout_s);
		rx_pidfd_send_signal(vs[i].pidfd, SIGKILL);
		vs[i].killed = true;
	}
	stop_wait(vs, nv, STOP_KILL_WAIT_MS);
	failed += stop_reap(&rd, vs, nv, stopped);
	free(vs);
	rc = failed ? 1 : 0;
	if (!failed && !nv) {
		log_info(device ? "no daemon is running on device %s" :
			 "no daemon is running in %s",
			 device ? names[0] : rd.dir);
		rc = 3;
	}
	if (json)
		stop_json(stopped, failed, rc);
	json_decref(stopped);
	return rc;
}
