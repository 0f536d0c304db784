/* SPDX-License-Identifier: MIT */
/*
 * wcd: the rank daemon. Loads one rank's share of a checkpoint once, into
 * pools on one device, and serves it zero-copy to any number of engines.
 *
 * Start-up order: options (opts.c) -> device -> runtime paths ->
 * ownership (flock) -> parse + quantization gate + plan -> pools + load +
 * hash + seal -> listen (0600) -> ready file (atomic) -> serve. SIGTERM/SIGINT: stop
 * accepting, notify clients, remove .sock/.ready, release the lock, exit 0.
 * Exit codes: 0 clean shutdown, 1 error, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "err.h"
#include "cli.h"
#include "log.h"
#include "wcd.h"
#include "serve/server.h"
#include "serve/own.h"
#include "serve/access.h"
#include "load/load.h"
#include "load/hashpool.h"
#include "model/versions.h"
#include "life/lifecycle.h"
#include "push/push.h"
#include "handover/handover.h"
#include "metrics/metrics.h"
#include "base.h"
#include "sdnotify.h"

static void signal_cb(struct rx_signal *s, int signo)
{
	struct wcd *d = container_of(s, struct wcd, sig);

	if (signo < 0)
		return;
	if (signo == SIGHUP) {
		int ret = log_reopen();

		if (ret)
			log_warn("SIGHUP: cannot reopen the log file %s: %s; still writing to the old one",
				 d->o.log_file, strerror(-ret));
		else
			log_info("SIGHUP: %s", d->o.log_file ?
				 "reopened the log file" :
				 "no --log-file to reopen (logging to stderr)");
		return;
	}
	log_info("got %s", strsignal(signo));
	if (d->state == WCD_LOADING)
		wcd_enter(d, WCD_STOPPING); /* the loader stops issuing reads */
	else
		server_stop(d);
}

/* Runs the queued job (a lifecycle job, or an update session's open), if
 * any, then lets the device idle again. */
static bool next_job(struct wcd *d)
{
	if (!life_run_job(d) && !push_run_job(d))
		return false;
	life_device_idle(d);
	return true;
}

/* Runs the loop until the closing sequence is done; a lifecycle job (wake,
 * update) stops the loop and runs here, outside every callback, because it
 * drives the loop itself (lifecycle.h). */
static int serve(struct wcd *d)
{
	int ret;

	do {
		ret = wcd_serve(d);
		if (ret < 0) {
			log_error("event loop: %s", strerror(-ret));
			break;
		}
	} while (next_job(d));
	return 0;
}

/* A client is being freed: its update session ends, a handover forgets
 * it. */
static void client_gone(struct wcd *d, struct wcd_client *c)
{
	push_client_gone(d, c);
	handover_client_gone(d, c);
}

/* What serve/ calls upwards (it knows no file above it). */
static const struct server_hooks hooks = {
	.dispatch = client_dispatch,
	.lease_ended = version_lease_ended,
	.pause_poke = handover_poke,
	.client_gone = client_gone,
	.stop_hold = handover_stop_hold,
	.read_to_end = handover_read_to_end,
};

/* Start-up's first phase: the device (its context made on a thread while
 * the model is parsed and planned, where the load's first CUDA call waits
 * for it; a takeover adopts parked pools and makes one only if it needs
 * it), the runtime paths, the loop, the worker pool and the signals.
 * Returns 0, or 1 having said why. */
static int start_device(struct wcd *d)
{
	char err[BASE_ERR_LEN], tmpl[PATHS_MAX];
	sigset_t mask;
	uint64_t t0;
	int ret;

	log_debug("starting: pid %d, opening device %s", (int)getpid(),
		  d->o.device);
	t0 = rx_now_ns();
	ret = gpu_dev_open_ctx(&d->dev, d->o.device, d->o.takeover ?
			       GPU_CTX_LAZY : GPU_CTX_ASYNC, err);
	if (ret) {
		log_error("%s", err);
		return 1;
	}
	log_set_device(d->dev.name);
	log_info("device open: %.3f s (context %s)",
		  clock_ns_secs(rx_now_ns() - t0),
		  d->o.takeover ? "at first use" : "made on a thread");
	if (d->o.ipc_legacy) {
		if (d->dev.be == &gpu_host_backend) {
			log_error("--ipc legacy needs a CUDA device; device %s is a host device",
				  d->o.device);
			return 1;
		}
		d->dev.export_kind = GPU_EXPORT_IPC_HANDLE;
	}
	if (paths_template_env(tmpl, sizeof(tmpl), d->o.runtime_dir, err) ||
	    paths_resolve(&d->paths, tmpl, d->dev.name, err)) {
		log_error("%s", err);
		return 1;
	}
	ret = rx_loop_init(&d->loop, 256);
	if (ret) {
		log_error("cannot set up io_uring: %s (is io_uring disabled by sysctl kernel.io_uring_disabled?)",
			  strerror(-ret));
		return 1;
	}
	ret = rx_pool_init(&d->work, &d->loop, WCD_WORK_THREADS_MAX,
			   WCD_WORK_QUEUE_MAX);
	if (ret) {
		log_error("cannot set up the worker pool: %s", strerror(-ret));
		return 1;
	}
	d->work_open = true;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	ret = rx_signal_start(&d->loop, &d->sig, &mask, signal_cb);
	if (ret) {
		log_error("signalfd: %s", strerror(-ret));
		return 1;
	}
	return 0;
}

/* --takeover: takes the running daemon's pools, socket and clients and
 * serves them (*rc, the exit code, when it returns true). Returns false,
 * options restored, when the old daemon died in the middle and --model
 * was given: then the start loads from disk and d->reloaded says why. */
static bool start_takeover(struct wcd *d, int *rc)
{
	struct wcd_opts given = d->o;
	char err[BASE_ERR_LEN];
	int ret;

	wcd_enter(d, WCD_TAKING_OVER);
	ret = handover_take(d, &hooks, err);
	if (ret == 0) {
		log_info("ready: serving device %s after a handover; socket %s",
			 d->dev.name, d->paths.sock);
		/* the old daemon may still hold the port for a moment */
		if (d->o.metrics_listen &&
		    metrics_http_start(d, d->o.metrics_listen, 5000, err))
			log_warn("%s; serving without --metrics-listen", err);
		*rc = serve(d);
		return true;
	}
	if (ret != -ECONNRESET || !given.model) {
		log_error("%s", err);
		*rc = 1;
		return true;
	}
	log_warn("%s; the old daemon died in the middle of the handover: loading %s from disk",
		 err, given.model);
	d->o = given;
	/* wcctl restart reports it (the ready file's reloaded) */
	snprintf(d->reloaded, sizeof(d->reloaded), "%s%.*s",
		 "the old daemon died in the middle of the handover: ",
		 (int)sizeof(d->reloaded) - 64, err);
	for (char *c = d->reloaded; *c; c++)
		if (*c == '\n')
			*c = ' ';
	return false;
}

/* The last phase: publishes the loaded version 1 (listen, ready file,
 * systemd), then serves. */
static int start_serving(struct wcd *d, struct wcd_version *v)
{
	char err[BASE_ERR_LEN];
	uint64_t t0 = rx_now_ns();
	int ret;

	wcd_enter(d, WCD_READY);
	ret = server_listen(d, err);
	if (!ret)
		ret = status_write_ready(d, err);
	if (ret) {
		log_error("%s", err);
		return 1;
	}
	v->phases.publish_s += clock_ns_secs(rx_now_ns() - t0);
	log_info("phase publish: %.3f s (seal, listen, ready file)",
		 v->phases.publish_s);
	log_info("ready: %u tensors, %" PRIu64 " bytes in %u pools, loaded in %.3f s (%.2f GB/s); socket %s",
		 v->plan.ntensors, v->plan.total_bytes, v->npools,
		 v->load_seconds, v->load_gbps, d->paths.sock);
	ret = sdnotify_send("READY=1\nSTATUS=serving %u tensors on %s",
			    v->plan.ntensors, d->dev.name);
	if (ret)
		log_warn("cannot tell systemd that wcd is ready ($NOTIFY_SOCKET): %s",
			 strerror(-ret));
	server_start(d, &hooks);
	life_device_idle(d);
	return serve(d);
}

/* Start-up in its phases (the order at the top of this file); returns the
 * exit code. */
static int start(struct wcd *d)
{
	struct wcd_model *m = wcd_model(d);
	char err[BASE_ERR_LEN];
	struct wcd_version *v;
	int ret, rc;

	if (start_device(d))
		return 1;
	if (d->o.takeover && start_takeover(d, &rc))
		return rc;

	ret = own_acquire(d, err);
	if (ret) {
		log_error("%s", err);
		return 1;
	}
	log_info("wcd pid %d owns device %s (%s backend); files %s.*",
		 (int)getpid(), d->dev.name, d->dev.be->name, d->paths.prefix);
	/* Scrapes are served from here on: while loading too. */
	if (d->o.metrics_listen &&
	    metrics_http_start(d, d->o.metrics_listen, 0, err)) {
		log_error("%s", err);
		return 1;
	}

	v = &m->ver[0];
	m->cur = 0;
	v->used = true;
	v->number = 1;
	wcd_enter(d, WCD_LOADING);
	ret = load_prepare(d, v, err);
	if (!ret)
		ret = load_run(d, v, err);
	if (ret == -ECANCELED || wcd_stopping(d)) {
		log_info("stopped while loading");
		return 0;
	}
	if (ret) {
		log_error("%s", err);
		return 1;
	}
	return start_serving(d, v);
}

/* Every connection costs two descriptors (socket, pidfd): take the hard
 * limit, not the 1024 a shell usually gives. wcd never uses select(). */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		log_warn("cannot raise the descriptor limit to %llu: %s",
			 (unsigned long long)rl.rlim_max, strerror(errno));
}

int main(int argc, char **argv)
{
	static struct wcd d;
	static struct wcd_server srv;
	enum log_level lvl;
	sigset_t mask;
	int rc;

	if (cli_version(argc, argv, "wcd"))
		return 0;
	log_init("wcd", LOG_INFO);
	d.ready_write = status_write_ready;
	lvl = opts_parse(&d.o, argc, argv);
	log_init("wcd", lvl);
	sdnotify_init();
	log_set_format(d.o.log_format);
	if (d.o.log_file) {
		char lerr[BASE_ERR_LEN];

		if (log_open_file(d.o.log_file, lerr, sizeof(lerr))) {
			log_error("%s", lerr);
			return 1;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	/* Block SIGTERM/SIGINT before any thread exists (CUDA's, the hash
	 * workers'): threads inherit the mask, so the signals can only be
	 * taken by the loop's signalfd, which also picks up one that arrived
	 * before it was set up. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);  /* reopens --log-file; never kills us */
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	/* One hardware queue carries the copies and the hash kernels as fast
	 * as CUDA's default eight (a warm load measured 48.2 GB/s with 1 and
	 * 46.6 with 8), and each queue costs about 10 MiB of host memory that
	 * the driver maps into the process. A value set by the user wins. */
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 0);
	d.lock_fd = -1;
	server_init(&d, &srv);
	d.state = WCD_STARTING;
	d.start_ns = rx_now_ns();

	rc = start(&d);

	/* Closing: unpublish (if not yet), free, release the lock last. */
	if (d.srv->listen_fd >= 0) {
		close(d.srv->listen_fd);
		d.srv->listen_fd = -1;
	}
	if (d.lock_fd >= 0)
		own_remove_published(&d);
	/* a wake's host copy still being freed: its thread posts to the loop
	 * when done, so it ends before the loop closes */
	life_host_settle(&d);
	if (d.work_open)
		rx_pool_close(&d.work);
	d.work_open = false;
	if (d.loop.ring.ring_fd > 0)
		rx_loop_close(&d.loop);
	metrics_http_stop(&d);
	log_limit_flush(&d.m.malformed_log, LOG_INFO, "malformed frames");
	life_free(&d);
	push_free(&d);
	handover_free(&d);
	for (int i = 0; i < WCD_VERSIONS; i++)
		if (wcd_model(&d)->ver[i].used)
			load_version_free(&d, &wcd_model(&d)->ver[i]);
	version_planned_free(&d);
	if (d.dev.be)
		version_spare_free(&d, "the daemon exits");
	if (d.dev.be)
		gpu_dev_close(&d.dev);
	own_release(&d);
	if (rc == 0)
		log_info("exiting cleanly");
	return rc;
}
