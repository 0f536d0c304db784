/* SPDX-License-Identifier: MIT */
/*
 * wcctl start's loop: one io_uring (the reactor) waits for every rank's
 * ready file (inotify on the runtime directory), every rank's exit (pidfd),
 * the deadline, a progress tick and SIGTERM/SIGINT. A rank that exits before
 * it is ready is reported in the callback that sees the exit, then every
 * sibling is stopped (SIGTERM, a grace period, SIGKILL) and the ranks'
 * files are removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "launch.h"
#include "log.h"
#include "sdnotify.h"
#include "sys_compat.h"

#define say(l, lvl, ...)                                                     \
	do {                                                                 \
		progress_clear(l);                                           \
		log_msg(lvl, __VA_ARGS__);                                   \
	} while (0)

#define INOTIFY_BUF (64 * (sizeof(struct inotify_event) + NAME_MAX + 1))

/* The signals a daemon meets most; sigabbrev_np needs glibc 2.32, which
 * the GPU machines may lack. */
static const char *sig_name(int sig)
{
	switch (sig) {
	case SIGTERM: return "SIGTERM";
	case SIGINT: return "SIGINT";
	case SIGKILL: return "SIGKILL";
	case SIGSEGV: return "SIGSEGV";
	case SIGABRT: return "SIGABRT";
	case SIGBUS: return "SIGBUS";
	case SIGILL: return "SIGILL";
	case SIGFPE: return "SIGFPE";
	case SIGHUP: return "SIGHUP";
	case SIGQUIT: return "SIGQUIT";
	case SIGPIPE: return "SIGPIPE";
	default: return "a signal";
	}
}

static uint64_t secs_to_ns(double s)
{
	return s <= 0 ? 1 : (uint64_t)(s * 1e9);
}

/* Stops the timers that drive the start phase; their callbacks see
 * -ECANCELED and do nothing. */
static void launch_stop_timers(struct launch *l)
{
	if (rx_op_busy(&l->deadline.op))
		rx_timer_stop(&l->deadline);
	if (rx_op_busy(&l->tick.op))
		rx_timer_stop(&l->tick);
}

/* Every child has exited: remove the ranks' files (never those of a
 * daemon that holds the lock, e.g. one that was already running) and end
 * the loop. */
static void launch_done(struct launch *l)
{
	char err[BASE_ERR_LEN];

	l->phase = LAUNCH_DONE;
	launch_stop_timers(l);
	if (rx_op_busy(&l->grace.op))
		rx_timer_stop(&l->grace);
	for (int i = 0; i < l->n; i++) {
		struct rank *r = &l->ranks[i];

		if (!r->spawned)
			continue;
		if (l->o->foreground)
			progress_scan(r);   /* the daemons' last lines */
		if (rundir_remove(&l->rd, &r->paths, l->o->keep_logs, err) < 0)
			log_warn("left the files of %s: %s", r->paths.device,
				 err);
	}
	rx_loop_stop(&l->loop);
}

static void grace_cb(struct rx_timer *t, int res)
{
	struct launch *l = container_of(t, struct launch, grace);

	if (res < 0 || l->phase != LAUNCH_STOPPING)
		return;
	for (int i = 0; i < l->n; i++) {
		struct rank *r = &l->ranks[i];

		if (!r->running)
			continue;
		say(l, LOG_WARN,
		    "wcd pid=%d (pp_rank=%d tp_rank=%d) did not stop within %g s; sending SIGKILL",
		    (int)r->child.pid, r->lr.pp_rank, r->lr.tp_rank,
		    l->o->grace_s);
		rx_child_kill(&r->child, SIGKILL);
	}
}

/* Sends sig to every running rank and waits (grace period, then SIGKILL)
 * for all of them; status is what wcctl will exit with. */
static void launch_teardown(struct launch *l, int sig, int status)
{
	if (l->phase == LAUNCH_STOPPING || l->phase == LAUNCH_DONE)
		return;
	l->phase = LAUNCH_STOPPING;
	l->status = status;
	launch_stop_timers(l);
	progress_clear(l);
	for (int i = 0; i < l->n; i++)
		if (l->ranks[i].running)
			rx_child_kill(&l->ranks[i].child, sig);
	if (!l->nrunning) {
		launch_done(l);
		return;
	}
	if (rx_timer_start(&l->loop, &l->grace, secs_to_ns(l->o->grace_s),
			   grace_cb) < 0)
		for (int i = 0; i < l->n; i++)
			if (l->ranks[i].running)
				rx_child_kill(&l->ranks[i].child, SIGKILL);
}

static void report_exit(struct launch *l, struct rank *r)
{
	const struct rx_child *c = &r->child;
	const char *when = r->ready ? "" : " prematurely";
	uint64_t reported_ns;

	if (c->exit_code >= 0)
		say(l, LOG_ERROR,
		    "Weight cache daemon for pp_rank=%d tp_rank=%d (pid=%d) exited%s with code %d",
		    r->lr.pp_rank, r->lr.tp_rank, (int)c->pid, when,
		    c->exit_code);
	else if (c->term_signal == SIGKILL)
		say(l, LOG_ERROR,
		    "Weight cache daemon for pp_rank=%d tp_rank=%d (pid=%d) was killed by signal %d (SIGKILL); this is often the kernel's OOM killer: look for 'Out of memory' in 'dmesg' or 'journalctl -k'",
		    r->lr.pp_rank, r->lr.tp_rank, (int)c->pid,
		    c->term_signal);
	else if (c->term_signal > 0)
		say(l, LOG_ERROR,
		    "Weight cache daemon for pp_rank=%d tp_rank=%d (pid=%d) was killed by signal %d (%s)",
		    r->lr.pp_rank, r->lr.tp_rank, (int)c->pid,
		    c->term_signal, sig_name(c->term_signal));
	else
		say(l, LOG_ERROR,
		    "Weight cache daemon for pp_rank=%d tp_rank=%d (pid=%d) exited%s (its status could not be collected)",
		    r->lr.pp_rank, r->lr.tp_rank, (int)c->pid, when);
	reported_ns = rx_now_ns();
	if (l->debug_times)
		fprintf(stderr,
			"wcctl: debug: pid=%d exit_seen_ns=%llu reported_ns=%llu\n",
			(int)c->pid, (unsigned long long)c->exit_seen_ns,
			(unsigned long long)reported_ns);
	progress_log_tail(r);
}

static void child_cb(struct rx_child *c, int res)
{
	struct rank *r = container_of(c, struct rank, child);
	struct launch *l = r->l;

	if (res == -ECANCELED || !r->running)
		return;
	if (res < 0)
		say(l, LOG_ERROR,
		    "lost the watch on wcd pid=%d (pp_rank=%d tp_rank=%d): %s",
		    (int)c->pid, r->lr.pp_rank, r->lr.tp_rank,
		    strerror(-res));
	r->running = false;
	l->nrunning--;
	switch (l->phase) {
	case LAUNCH_STARTING:
	case LAUNCH_RUNNING:
		if (res == 0)
			report_exit(l, r);
		if (l->nrunning)
			say(l, LOG_INFO, "stopping the other %d daemon%s",
			    l->nrunning, l->nrunning == 1 ? "" : "s");
		launch_teardown(l, SIGTERM, 1);
		break;
	case LAUNCH_STOPPING:
		if (!l->nrunning)
			launch_done(l);
		break;
	case LAUNCH_DONE:
		break;
	}
}

/* Tells a service manager (sdnotify.h); a refusal is logged, not fatal. */
static void notify_manager(const char *msg)
{
	int ret = sdnotify_send("%s", msg);

	if (ret)
		log_warn("cannot notify systemd ($NOTIFY_SOCKET): %s",
			 strerror(-ret));
}

static void launch_all_ready(struct launch *l)
{
	const struct layout *y = &l->lay;

	if (l->o->foreground) {
		/* the tick keeps running: it relays the logs */
		if (rx_op_busy(&l->deadline.op))
			rx_timer_stop(&l->deadline);
	} else {
		launch_stop_timers(l);
	}
	say(l, LOG_INFO,
	    "All %d weight cache daemons on node %d are ready (pp_ranks=%d..%d, tp_ranks=%d..%d)",
	    l->n, l->o->lp.node_rank, y->pp_first,
	    y->pp_first + y->pp_count - 1, y->tp_first,
	    y->tp_first + y->tp_count - 1);
	/* systemd's Type=notify (the node unit runs --foreground) */
	notify_manager("READY=1\nSTATUS=all weight cache daemons are ready");
	if (l->o->foreground) {
		l->phase = LAUNCH_RUNNING;
		log_info("staying in the foreground: SIGTERM or Ctrl-C stops the daemons");
		return;
	}
	l->phase = LAUNCH_DONE;
	l->status = 0;
	rx_loop_stop(&l->loop);
}

/* A ready file for r exists: it counts only if it names our child (a
 * stale file from an earlier daemon names another pid). */
static void rank_check_ready(struct launch *l, struct rank *r)
{
	struct ready_info ri;
	char err[BASE_ERR_LEN];

	if (!r->running || r->ready || l->phase != LAUNCH_STARTING)
		return;
	if (ready_read_file(&ri, r->paths.ready, err))
		return;
	if (ri.pid != r->child.pid) {
		log_debug("ignoring %s: pid %d is not our wcd %d",
			  r->paths.ready, ri.pid, (int)r->child.pid);
		return;
	}
	r->ready = true;
	l->nready++;
	say(l, LOG_INFO,
	    "pp_rank=%d tp_rank=%d (pid=%d) is ready on %s: %llu tensors, %.2f GB in %.2f s",
	    r->lr.pp_rank, r->lr.tp_rank, ri.pid, r->paths.device,
	    (unsigned long long)ri.tensors, ri.bytes / 1e9, ri.load_seconds);
	if (l->nready == l->n)
		launch_all_ready(l);
}

static void inotify_cb(struct rx_poll *p, int res)
{
	struct launch *l = container_of(p, struct launch, ipoll);
	char buf[INOTIFY_BUF] __attribute__((aligned(8)));
	ssize_t n;

	if (res == -ECANCELED || l->phase != LAUNCH_STARTING)
		return;
	while ((n = read(l->ifd, buf, sizeof(buf))) > 0) {
		for (char *q = buf; q < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)q;

			q += sizeof(*ev) + ev->len;
			for (int i = 0; i < l->n; i++) {
				struct rank *r = &l->ranks[i];
				const char *base = strrchr(r->paths.ready, '/');

				base = base ? base + 1 : r->paths.ready;
				if ((ev->mask & IN_Q_OVERFLOW) ||
				    (ev->len && !strcmp(ev->name, base)))
					rank_check_ready(l, r);
			}
		}
	}
	if (l->phase != LAUNCH_STARTING)
		return;
	res = rx_poll_start(&l->loop, &l->ipoll, l->ifd, POLLIN, inotify_cb);
	if (res < 0) {
		say(l, LOG_ERROR, "cannot watch %s any more: %s", l->rd.dir,
		    strerror(-res));
		launch_teardown(l, SIGTERM, 1);
	}
}

static void deadline_cb(struct rx_timer *t, int res)
{
	struct launch *l = container_of(t, struct launch, deadline);

	if (res < 0 || l->phase != LAUNCH_STARTING)
		return;
	for (int i = 0; i < l->n; i++) {
		struct rank *r = &l->ranks[i];

		if (!r->running || r->ready)
			continue;
		say(l, LOG_ERROR,
		    "Weight cache daemon for pp_rank=%d tp_rank=%d did not become ready within %g s",
		    r->lr.pp_rank, r->lr.tp_rank, l->o->timeout_s);
		progress_log_tail(r);
	}
	launch_teardown(l, SIGTERM, 1);
}

static void tick_cb(struct rx_timer *t, int res)
{
	struct launch *l = container_of(t, struct launch, tick);

	if (res < 0)
		return;
	if (l->phase == LAUNCH_RUNNING || l->phase == LAUNCH_STOPPING) {
		/* --foreground: keep relaying the logs */
		for (int i = 0; i < l->n; i++)
			progress_scan(&l->ranks[i]);
	} else if (l->phase == LAUNCH_STARTING) {
		for (int i = 0; i < l->n; i++)
			if (l->ranks[i].running &&
			    (!l->ranks[i].ready || l->o->foreground))
				progress_scan(&l->ranks[i]);
		progress_show(l);
	} else {
		return;
	}
	rx_timer_start(&l->loop, &l->tick, LAUNCH_TICK_NS, tick_cb);
}

static void signal_cb(struct rx_signal *s, int signo)
{
	struct launch *l = container_of(s, struct launch, sig);

	if (signo < 0)
		return;
	switch (l->phase) {
	case LAUNCH_STARTING:
		say(l, LOG_WARN, "got %s while starting; stopping %d daemon%s",
		    sig_name(signo), l->nrunning,
		    l->nrunning == 1 ? "" : "s");
		launch_teardown(l, signo, 128 + signo);
		break;
	case LAUNCH_RUNNING:
		say(l, LOG_INFO, "got %s; stopping %d daemon%s",
		    sig_name(signo), l->nrunning,
		    l->nrunning == 1 ? "" : "s");
		notify_manager("STOPPING=1");
		launch_teardown(l, signo, 0);
		break;
	case LAUNCH_STOPPING:
		say(l, LOG_WARN, "got %s again; killing the daemons",
		    sig_name(signo));
		for (int i = 0; i < l->n; i++)
			if (l->ranks[i].running)
				rx_child_kill(&l->ranks[i].child, SIGKILL);
		break;
	case LAUNCH_DONE:
		break;
	}
}

/* The daemon to run: --wcd, else the wcd next to this wcctl, else PATH. */
const char *launch_wcd_path(const struct launch_opts *o, char *buf,
			    size_t len)
{
	ssize_t n;
	char *slash;

	if (o->wcd)
		return o->wcd;
	n = readlink("/proc/self/exe", buf, len - 5);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (!slash)
		return NULL;
	strcpy(slash + 1, "wcd");
	return access(buf, X_OK) ? NULL : buf;
}

int launch_ep_rank(const struct launch_opts *o, const struct rank *r)
{
	return (o->ep_rank + r->lr.tp_rank) % o->ep_size;
}

/* --ep-size/--ep-rank go out only with expert parallelism (ep size > 1),
 * so a plain start's command lines stay as they were. */
int launch_argv(const struct launch *l, const struct rank *r,
		const char *wcd, char *argv[LAUNCH_ARGV_MAX],
		char num[LAUNCH_NUMS][16])
{
	const struct launch_opts *o = l->o;
	int a = 0;

	snprintf(num[0], sizeof(num[0]), "%d", o->lp.tp);
	snprintf(num[1], sizeof(num[1]), "%d", r->lr.tp_rank);
	snprintf(num[2], sizeof(num[2]), "%d", o->lp.pp);
	snprintf(num[3], sizeof(num[3]), "%d", r->lr.pp_rank);
	argv[a++] = (char *)(wcd ? wcd : "wcd");
	argv[a++] = "--model";
	argv[a++] = (char *)o->model;
	argv[a++] = "--device";
	argv[a++] = (char *)r->device;
	if (o->runtime_dir) {
		argv[a++] = "--runtime-dir";
		argv[a++] = (char *)o->runtime_dir;
	}
	argv[a++] = "--tp-size";
	argv[a++] = num[0];
	argv[a++] = "--tp-rank";
	argv[a++] = num[1];
	argv[a++] = "--pp-size";
	argv[a++] = num[2];
	argv[a++] = "--pp-rank";
	argv[a++] = num[3];
	if (o->ep_size > 1) {
		snprintf(num[4], sizeof(num[4]), "%d", o->ep_size);
		snprintf(num[5], sizeof(num[5]), "%d", launch_ep_rank(o, r));
		argv[a++] = "--ep-size";
		argv[a++] = num[4];
		argv[a++] = "--ep-rank";
		argv[a++] = num[5];
	}
	if (o->force)
		argv[a++] = "--force";
	if (r->metrics[0]) {
		argv[a++] = "--metrics-listen";
		argv[a++] = (char *)r->metrics;
	}
	if (o->socket_group) {
		argv[a++] = "--socket-group";
		argv[a++] = (char *)o->socket_group;
	}
	for (int i = 0; i < o->wcd_nargs; i++)
		argv[a++] = o->wcd_args[i];
	WC_ASSERT(a < LAUNCH_ARGV_MAX);
	argv[a] = NULL;
	return a;
}

/* Returns 0, -errno when the daemon could not be spawned, or 1 when its
 * log could not be created (said here: the runtime directory's fault,
 * not the binary's). */
static int rank_spawn(struct launch *l, struct rank *r, const char *wcd)
{
	const struct launch_opts *o = l->o;
	char num[LAUNCH_NUMS][16], *argv[LAUNCH_ARGV_MAX];
	struct rx_spawn_opts so = { 0 };
	int wfd, ret;
	struct stat st;

	/* Never through a link: a fresh log (O_EXCL after removing the old
	 * one), or with --force the old one appended to, if it is a file. */
	if (!o->force && unlink(r->paths.log) && errno != ENOENT)
		wfd = -1;
	else
		wfd = open(r->paths.log, O_WRONLY | O_CREAT | O_NOFOLLOW |
			   O_NONBLOCK | O_CLOEXEC |
			   (o->force ? O_APPEND : O_EXCL), 0600);
	if (wfd < 0) {
		say(l, LOG_ERROR,
		    "cannot create the log %s for pp_rank=%d tp_rank=%d: %s; make the runtime directory writable or pick another with --runtime-dir",
		    r->paths.log, r->lr.pp_rank, r->lr.tp_rank,
		    errno == ELOOP ? "it is a symbolic link, never followed" :
		    strerror(errno));
		return 1;
	}
	if (fstat(wfd, &st) || !S_ISREG(st.st_mode)) {
		say(l, LOG_ERROR,
		    "the log %s for pp_rank=%d tp_rank=%d is not a regular file: remove it",
		    r->paths.log, r->lr.pp_rank, r->lr.tp_rank);
		close(wfd);
		return 1;
	}
	r->log_rfd = open(r->paths.log, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	r->log_off = fstat(wfd, &st) ? 0 : (uint64_t)st.st_size;
	launch_argv(l, r, wcd, argv, num);
	so.path = wcd;
	so.argv = argv;
	so.stdin_fd = -1;
	so.stdout_fd = wfd;
	so.stderr_fd = wfd;
	so.new_session = true;          /* outlives wcctl and its terminal */
	so.parent_death_sigterm = o->foreground;
	r->l = l;
	ret = rx_spawn(&l->loop, &r->child, &so, child_cb);
	close(wfd);
	if (ret) {
		close(r->log_rfd);
		r->log_rfd = -1;
		if (!o->force) /* the log is ours only when we truncated it */
			unlink(r->paths.log);
		return ret;
	}
	r->spawned = r->running = true;
	l->nrunning++;
	log_info("started wcd pid=%d for pp_rank=%d tp_rank=%d on device %s (log: %s)",
		 (int)r->child.pid, r->lr.pp_rank, r->lr.tp_rank, r->device,
		 r->paths.log);
	return 0;
}

/* Watches first, then spawns, then looks for ready files that were
 * written before the watch could see them; runs until every rank is ready
 * (or, with --foreground, until the daemons are gone). */
static int launch_arm(struct launch *l)
{
	char wcd_buf[PATH_MAX];
	const char *wcd = launch_wcd_path(l->o, wcd_buf, sizeof(wcd_buf));
	sigset_t mask;
	int ret;

	l->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (l->ifd < 0) {
		log_error("cannot create an inotify instance: %s (raise fs.inotify.max_user_instances)",
			  strerror(errno));
		return 1;
	}
	if (inotify_add_watch(l->ifd, l->rd.dir, IN_MOVED_TO |
			      IN_CLOSE_WRITE | IN_ONLYDIR) < 0) {
		log_error("cannot watch the runtime directory %s: %s",
			  l->rd.dir, strerror(errno));
		return 1;
	}
	ret = rx_poll_start(&l->loop, &l->ipoll, l->ifd, POLLIN, inotify_cb);
	if (ret < 0) {
		log_error("cannot poll inotify: %s", strerror(-ret));
		return 1;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	ret = rx_signal_start(&l->loop, &l->sig, &mask, signal_cb);
	if (ret < 0) {
		log_error("cannot watch SIGTERM/SIGINT: %s", strerror(-ret));
		return 1;
	}
	for (int i = 0; i < l->n && l->phase == LAUNCH_STARTING; i++) {
		struct rank *r = &l->ranks[i];

		ret = rank_spawn(l, r, wcd);
		if (ret > 0) {
			launch_teardown(l, SIGTERM, 1);
		} else if (ret) {
			say(l, LOG_ERROR,
			    "cannot start %s for pp_rank=%d tp_rank=%d: %s; pass the daemon's path with --wcd",
			    wcd ? wcd : "wcd (from PATH)", r->lr.pp_rank,
			    r->lr.tp_rank, strerror(-ret));
			launch_teardown(l, SIGTERM, 1);
		}
	}
	for (int i = 0; i < l->n && l->phase == LAUNCH_STARTING; i++)
		rank_check_ready(l, &l->ranks[i]);
	if (l->phase == LAUNCH_STARTING) {
		rx_timer_start(&l->loop, &l->deadline,
			       secs_to_ns(l->o->timeout_s), deadline_cb);
		rx_timer_start(&l->loop, &l->tick, LAUNCH_TICK_NS, tick_cb);
	}
	return 0;
}

/* Descriptors wcctl inherited (past stdin/out/err) must not reach the
 * daemons: a caller's pipe held open by a long-lived wcd would make a
 * `$(wcctl start ...)` or a CI step wait forever. close_range (5.11+), else
 * one fcntl per entry of /proc/self/fd. */
static void launch_cloexec_inherited(void)
{
	struct dirent *de;
	DIR *d;

	if (syscall(SYS_close_range, 3u, ~0u, WCCTL_CLOSE_RANGE_CLOEXEC) == 0)
		return;
	d = opendir("/proc/self/fd");
	if (!d)
		return;
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);

		if (fd > 2 && fd != dirfd(d))
			fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
	}
	closedir(d);
}

int launch_run(struct launch *l)
{
	int ret;

	launch_cloexec_inherited();
	sdnotify_init();        /* before any rank is spawned: ours alone */
	ret = rx_loop_init(&l->loop, 0);
	if (ret < 0) {
		log_error("cannot set up io_uring: %s (a kernel with io_uring is required; check /proc/sys/kernel/io_uring_disabled)",
			  strerror(-ret));
		return 1;
	}
	l->ifd = -1;
	l->phase = LAUNCH_STARTING;
	l->t0_ns = rx_now_ns();
	l->debug_times = getenv("WCCTL_DEBUG") &&
			 strstr(getenv("WCCTL_DEBUG"), "times");
	l->tty = isatty(STDERR_FILENO) && !l->o->foreground;
	if (launch_arm(l))
		launch_teardown(l, SIGTERM, 1);
	if (l->phase != LAUNCH_DONE) {
		ret = rx_run(&l->loop);
		if (ret < 0 && l->phase != LAUNCH_DONE) {
			log_error("the event loop failed: %s", strerror(-ret));
			l->status = 1;
		}
	}
	progress_clear(l);
	rx_loop_close(&l->loop);
	for (int i = 0; i < l->n; i++) {
		if (l->ranks[i].spawned)
			rx_child_close(&l->ranks[i].child);
		if (l->ranks[i].log_rfd >= 0)
			close(l->ranks[i].log_rfd);
	}
	if (l->ifd >= 0)
		close(l->ifd);
	return l->status;
}
