/* SPDX-License-Identifier: MIT */
/*
 * wcbench liveness: how long after a child process exits does its parent
 * know? Children (this binary, re-executed as `__liveness-child`) sleep to a
 * random deadline, write CLOCK_MONOTONIC into their slot of a shared memfd
 * (their stdout) just before _exit, and the parent subtracts that stamp from
 * the moment it reports the exit:
 *   - reactor: rx_spawn + the pidfd watch of libwcreactor, in rounds of
 *     `concurrency` children, the callback is the report;
 *   - floor: the same rounds, alternating with the reactor's, the parent
 *     blocked in waitpid(-1): the tail it shares with the reactor is the
 *     machine's, not the loop's;
 *   - poll: posix_spawn + a loop that sleeps `interval` and then calls
 *     waitpid(WNOHANG) on every child, as SGLang's launcher watches its
 *     workers (every 2 s). Its latency is uniform over [0, interval], so its
 *     sample count is smaller by default (the run takes about delay-max +
 *     interval seconds).
 * The stamp is taken before the kernel tears the process down, so the
 * figure includes exit itself: it is what a supervisor would see.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "wcbench.h"
#include "wcreactor.h"

#define LV_CHILDREN_MAX 100000
#define LV_CONC_MAX 1024

extern char **environ;

struct lv_opts {
	unsigned children;
	unsigned concurrency;
	uint64_t delay_min_ns;
	uint64_t delay_max_ns;
	unsigned poll_children;
	uint64_t poll_interval_ns;
	uint64_t poll_delay_max_ns;
	bool poll;
	bool floor;             /* also the blocking-waitpid floor */
	unsigned seed;
};

/* Shared state of one run: the stamps memfd and its mapping. */
struct lv_run {
	const struct lv_opts *o;
	const struct wb_out *out;
	int memfd;
	volatile uint64_t *stamps;      /* [slots] */
	unsigned slots;
	char exe[4096];
};

/* The child: argv = __liveness-child SLOT DELAY_NS; fd 0 is the start
 * pipe (EOF means go), fd 1 the stamps memfd. */
int wb_liveness_child(int argc, char **argv)
{
	struct timespec ts;
	uint64_t slot, deadline, now;
	char b;

	if (argc != 3)
		return 2;
	slot = strtoull(argv[1], NULL, 10);
	while (read(STDIN_FILENO, &b, 1) > 0)
		;
	deadline = clock_ns() + strtoull(argv[2], NULL, 10);
	ts.tv_sec = (time_t)(deadline / 1000000000ull);
	ts.tv_nsec = (long)(deadline % 1000000000ull);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
	now = clock_ns();
	if (pwrite(STDOUT_FILENO, &now, sizeof(now), (off_t)(slot * 8)) != 8)
		_exit(3);
	_exit(0);
}

static uint64_t rand_delay(const struct lv_opts *o, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return lo;
	return lo + (uint64_t)((double)rand() / ((double)RAND_MAX + 1) *
			       (double)(hi - lo));
}

/* --- the reactor side ----------------------------------------------------- */

struct lv_child {
	struct rx_child c;
	struct lv_reactor *lr;
	unsigned slot;
};

struct lv_reactor {
	struct lv_run *run;
	struct rx_loop loop;
	struct lv_child *kids;  /* [concurrency] */
	struct wb_series *lat;
	unsigned spawned;
	unsigned reported;
	unsigned round_left;    /* children of this round not yet reported */
	unsigned bad_exits;
};

static void lv_child_exited(struct rx_child *c, int res);

static void lv_spawn_one(struct lv_reactor *lr, struct lv_child *k,
			 int start_fd)
{
	const struct lv_opts *o = lr->run->o;
	char slot[24], delay[24];
	char *argv[] = { "wcbench", "__liveness-child", slot, delay, NULL };
	struct rx_spawn_opts so = {
		.path = lr->run->exe, .argv = argv, .stdin_fd = start_fd,
		.stdout_fd = lr->run->memfd, .stderr_fd = -1,
	};
	int rc;

	k->slot = lr->spawned++;
	k->lr = lr;
	lr->run->stamps[k->slot] = 0;
	snprintf(slot, sizeof(slot), "%u", k->slot);
	snprintf(delay, sizeof(delay), "%llu", (unsigned long long)
		 rand_delay(o, o->delay_min_ns, o->delay_max_ns));
	memset(&k->c, 0, sizeof(k->c));
	rc = rx_spawn(&lr->loop, &k->c, &so, lv_child_exited);
	if (rc < 0)
		die("liveness: rx_spawn of %s failed: %s", so.path,
		    strerror(-rc));
}

static void lv_child_exited(struct rx_child *c, int res)
{
	uint64_t now = rx_now_ns();
	struct lv_child *k = (struct lv_child *)c;
	struct lv_reactor *lr = k->lr;
	uint64_t stamp = lr->run->stamps[k->slot];

	if (res < 0)
		die("liveness: the pidfd watch of child %d failed: %s",
		    (int)c->pid, strerror(-res));
	if (c->exit_code != 0 || !stamp)
		lr->bad_exits++;
	else
		wb_series_push(lr->lat, now > stamp ? now - stamp : 0);
	lr->reported++;
	rx_child_close(c);
	if (--lr->round_left == 0)
		rx_loop_stop(&lr->loop);
}

/* Rounds of `concurrency` children: all of a round are spawned while none
 * can exit (they wait for EOF on the start pipe), then the pipe is closed
 * and the loop does nothing but wait, as a supervisor's loop would; so
 * spawning (an exec costs about a millisecond here) never delays a report. */
static void lv_reactor_init(struct lv_reactor *lr, struct lv_run *run,
			    struct wb_report *r, unsigned conc)
{
	int rc;

	lr->run = run;
	lr->lat = wb_series_add(r, "reactor (pidfd)", run->o->children);
	lr->kids = calloc(conc, sizeof(*lr->kids));
	if (!lr->kids)
		die("liveness: no memory for %u children", conc);
	rc = rx_loop_init(&lr->loop, 0);
	if (rc < 0)
		die("liveness: rx_loop_init failed: %s", strerror(-rc));
}

static void lv_reactor_round(struct lv_reactor *lr, unsigned conc)
{
	const struct lv_opts *o = lr->run->o;
	int start[2], rc;

	if (pipe2(start, O_CLOEXEC) < 0)
		die("liveness: pipe: %s", strerror(errno));
	lr->round_left = 0;
	for (unsigned i = 0; i < conc && lr->spawned < o->children;
	     i++, lr->round_left++)
		lv_spawn_one(lr, &lr->kids[i], start[0]);
	close(start[0]);
	close(start[1]); /* go */
	rc = rx_run(&lr->loop);
	if (rc < 0)
		die("liveness: rx_run failed: %s", strerror(-rc));
}

static void lv_reactor_end(struct lv_reactor *lr, struct wb_report *r)
{
	int rc = rx_loop_close(&lr->loop);

	if (rc < 0)
		die("liveness: rx_loop_close failed: %s", strerror(-rc));
	if (lr->bad_exits)
		wb_note_add(r, "%u reactor children exited without a stamp or "
			    "with a non-zero code (not counted)", lr->bad_exits);
	free(lr->kids);
}

/* --- the floor: a parent doing nothing but block in waitpid ------------------ */

/* posix_spawns the child for stamp `slot` with its start pipe and stamps
 * memfd; returns its pid. */
static pid_t lv_posix_spawn(struct lv_run *run, int start_fd, unsigned slot,
			    uint64_t delay_ns)
{
	posix_spawn_file_actions_t fa;
	char s[24], d[24];
	char *argv[] = { "wcbench", "__liveness-child", s, d, NULL };
	pid_t pid;
	int rc;

	run->stamps[slot] = 0;
	snprintf(s, sizeof(s), "%u", slot);
	snprintf(d, sizeof(d), "%llu", (unsigned long long)delay_ns);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, start_fd, STDIN_FILENO);
	posix_spawn_file_actions_adddup2(&fa, run->memfd, STDOUT_FILENO);
	rc = posix_spawn(&pid, run->exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		die("liveness: posix_spawn of %s failed: %s", run->exe,
		    strerror(rc));
	return pid;
}

/* The same rounds as the reactor side, but the parent blocks in
 * waitpid(-1): no loop at all between the exit and the report. What the
 * reactor adds is its row minus this one; a tail both rows share is the
 * machine's (the child's exit, the scheduler), not the loop's. Its rounds
 * alternate with the reactor's, so that both meet the same weather; no
 * reactor child is alive during a floor round (waitpid(-1) takes no one
 * else's). */
struct lv_floor {
	struct wb_series *lat;
	pid_t *pids;            /* [concurrency] */
	unsigned base;          /* first stamp slot */
	unsigned spawned;
	unsigned bad;
};

static void lv_floor_round(struct lv_run *run, struct lv_floor *fl,
			   unsigned conc)
{
	const struct lv_opts *o = run->o;
	unsigned first = fl->spawned, k, left = 0;
	int start[2];

	if (pipe2(start, O_CLOEXEC) < 0)
		die("liveness: pipe: %s", strerror(errno));
	for (k = 0; k < conc && fl->spawned < o->children; k++, left++)
		fl->pids[k] = lv_posix_spawn(run, start[0],
			fl->base + fl->spawned++,
			rand_delay(o, o->delay_min_ns, o->delay_max_ns));
	close(start[0]);
	close(start[1]); /* go */
	while (left) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		uint64_t now = clock_ns(), stamp;

		if (pid < 0) {
			if (errno == EINTR)
				continue;
			die("liveness: waitpid: %s", strerror(errno));
		}
		for (k = 0; k < conc && fl->pids[k] != pid; k++)
			;
		if (k == conc)
			continue; /* not one of this round's */
		left--;
		stamp = run->stamps[fl->base + first + k];
		if (!WIFEXITED(status) || WEXITSTATUS(status) || !stamp)
			fl->bad++;
		else
			wb_series_push(fl->lat, now > stamp ? now - stamp : 0);
	}
}

/* Reactor rounds, each followed by a floor round when asked for. */
static void lv_rounds_run(struct lv_run *run, struct wb_report *r)
{
	const struct lv_opts *o = run->o;
	unsigned conc = o->concurrency < o->children ? o->concurrency
						      : o->children;
	struct lv_reactor lr = { 0 };
	struct lv_floor fl = { .base = o->children + o->poll_children };
	uint64_t t0 = clock_ns();

	lv_reactor_init(&lr, run, r, conc);
	if (o->floor) {
		fl.lat = wb_series_add(r, "floor: blocking waitpid",
				       o->children);
		fl.pids = calloc(conc, sizeof(*fl.pids));
		if (!fl.pids)
			die("liveness: no memory for %u children", conc);
	}
	while (lr.spawned < o->children) {
		lv_reactor_round(&lr, conc);
		if (o->floor)
			lv_floor_round(run, &fl, conc);
		wb_progress(run->out, "reactor (and floor) children",
			    lr.reported, o->children);
	}
	wb_progress_end(run->out);
	lv_reactor_end(&lr, r);
	wb_metric_add(r, "rounds_seconds", (double)(clock_ns() - t0) / 1e9,
		      "s");
	if (fl.bad)
		wb_note_add(r, "%u floor children exited without a stamp or "
			    "with a non-zero code (not counted)", fl.bad);
	free(fl.pids);
}

/* --- the polling side (SGLang's launcher) --------------------------------- */

static void lv_poll_run(struct lv_run *run, struct wb_report *r)
{
	const struct lv_opts *o = run->o;
	unsigned n = o->poll_children, alive = 0, bad = 0;
	struct wb_series *lat = wb_series_add(r, "poll every 2 s", n);
	pid_t *pids = calloc(n, sizeof(*pids));
	struct timespec ts = {
		.tv_sec = (time_t)(o->poll_interval_ns / 1000000000ull),
		.tv_nsec = (long)(o->poll_interval_ns % 1000000000ull),
	};
	uint64_t t0 = clock_ns();
	int start[2];

	if (o->poll_interval_ns != 2000000000ull)
		snprintf(lat->name, sizeof(lat->name), "poll every %.3g s",
			 (double)o->poll_interval_ns / 1e9);
	if (!pids)
		die("liveness: no memory for %u children", n);
	if (pipe2(start, O_CLOEXEC) < 0)
		die("liveness: pipe: %s", strerror(errno));
	for (unsigned i = 0; i < n; i++, alive++)
		pids[i] = lv_posix_spawn(run, start[0], o->children + i,
			rand_delay(o, o->delay_min_ns, o->poll_delay_max_ns));
	close(start[0]);
	close(start[1]); /* go */
	while (alive) {
		nanosleep(&ts, NULL);
		for (unsigned i = 0; i < n; i++) {
			int status;
			uint64_t now, stamp;

			if (!pids[i] || waitpid(pids[i], &status, WNOHANG) <= 0)
				continue;
			now = clock_ns();
			stamp = run->stamps[o->children + i];
			pids[i] = 0;
			alive--;
			if (!WIFEXITED(status) || WEXITSTATUS(status) || !stamp)
				bad++;
			else
				wb_series_push(lat, now > stamp ? now - stamp : 0);
		}
		wb_progress(run->out, "polled children", n - alive, n);
	}
	wb_progress_end(run->out);
	wb_metric_add(r, "poll_seconds", (double)(clock_ns() - t0) / 1e9, "s");
	if (bad)
		wb_note_add(r, "%u polled children exited without a stamp or "
			    "with a non-zero code (not counted)", bad);
	free(pids);
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: wcbench liveness [options]\n\n"
"Measures the time from a child process's exit to its parent's report of\n"
"it: through pidfds in the wcache reactor, and through a loop that polls\n"
"every 2 s (as SGLang's launcher watches its workers), beside the floor: a\n"
"parent doing nothing but block in waitpid. Children sleep a random delay,\n"
"stamp the clock and exit.\n\n"
"  -n, --children N       reactor children in all (default 1000)\n"
"  -c, --concurrency N    reactor children per round (default 32)\n"
"  --delay-ms MIN,MAX     reactor children's delays (default 5,50)\n"
"  --poll-children N      polled children (default 100; 0 skips polling)\n"
"  --poll-interval S      polling period in seconds (default 2)\n"
"  --no-poll              skip the polling side\n"
"  --no-floor             skip the floor (a parent blocked in waitpid)\n"
"  --seed N               random seed (default 1)\n"
WB_HELP_OUT
"\n"
"Examples:\n"
"  wcbench liveness\n"
"  wcbench liveness -n 200 --svg liveness.svg --json\n"
"\n"
"Exit status: 0 measured, 1 a failure (the daemon, a bound, a bad value),\n"
"2 usage.\n");
}

/* One of liveness's own options into ctx (struct lv_opts). */
static bool lv_opt(void *ctx, int c, const char *arg)
{
	struct lv_opts *o = ctx;
	double dmin, dmax;

	switch (c) {
	case 'n':
		o->children = (unsigned)wb_parse_count("--children", arg, 1,
						       LV_CHILDREN_MAX);
		return true;
	case 'c':
		o->concurrency = (unsigned)wb_parse_count("--concurrency", arg,
							  1, LV_CONC_MAX);
		return true;
	case 'D':
		if (sscanf(arg, "%lf,%lf", &dmin, &dmax) != 2 ||
		    !(dmin >= 0 && dmax >= dmin && dmax <= 60000))
			die("liveness: --delay-ms '%s' is not "
			    "MIN,MAX milliseconds with 0 <= MIN <= MAX "
			    "<= 60000 (e.g. 5,50)", arg);
		o->delay_min_ns = (uint64_t)(dmin * 1e6);
		o->delay_max_ns = (uint64_t)(dmax * 1e6);
		return true;
	case 'P':
		o->poll_children = (unsigned)wb_parse_count("--poll-children",
							    arg, 0,
							    LV_CHILDREN_MAX);
		return true;
	case 'I':
		o->poll_interval_ns = (uint64_t)(wb_parse_double(
			"--poll-interval", arg, 0.001, 60) * 1e9);
		return true;
	case 'N':
		o->poll = false;
		return true;
	case 'F':
		o->floor = false;
		return true;
	case 's':
		o->seed = (unsigned)wb_parse_count("--seed", arg, 0,
						   UINT32_MAX);
		return true;
	}
	return false;
}

static const struct option lv_longopts[] = {
	{ "children", required_argument, NULL, 'n' },
	{ "concurrency", required_argument, NULL, 'c' },
	{ "delay-ms", required_argument, NULL, 'D' },
	{ "poll-children", required_argument, NULL, 'P' },
	{ "poll-interval", required_argument, NULL, 'I' },
	{ "no-poll", no_argument, NULL, 'N' },
	{ "no-floor", no_argument, NULL, 'F' },
	{ "seed", required_argument, NULL, 's' },
	{ NULL, 0, NULL, 0 },
};

static const struct wb_cmd lv_cmd = {
	"wcbench liveness", 0, "n:c:", lv_longopts, usage, lv_opt,
};

int wb_liveness(int argc, char **argv)
{
	struct lv_opts o = {
		.children = 1000, .concurrency = 32,
		.delay_min_ns = 5000000, .delay_max_ns = 50000000,
		.poll_children = 100, .poll_interval_ns = 2000000000ull,
		.poll = true, .floor = true, .seed = 1,
	};
	struct wb_args a;
	struct lv_run run = { .o = &o, .out = &a.out };
	struct wb_report r;
	ssize_t n;
	int rc;

	wb_parse(argc, argv, &lv_cmd, &o, &a);
	if (!o.poll)
		o.poll_children = 0;
	/* Polled delays span two periods so exits fall at every phase. */
	o.poll_delay_max_ns = o.delay_min_ns + 2 * o.poll_interval_ns;
	srand(o.seed);
	n = readlink("/proc/self/exe", run.exe, sizeof(run.exe) - 1);
	if (n <= 0)
		die("liveness: cannot read /proc/self/exe: %s",
		    strerror(errno));
	run.exe[n] = 0;
	run.slots = o.children * (o.floor ? 2 : 1) + o.poll_children;
	run.memfd = memfd_create("wcbench-liveness", MFD_CLOEXEC);
	if (run.memfd < 0 || ftruncate(run.memfd, (off_t)run.slots * 8) < 0)
		die("liveness: memfd for %u stamps failed: %s",
		    run.slots, strerror(errno));
	run.stamps = mmap(NULL, (size_t)run.slots * 8, PROT_READ | PROT_WRITE,
			  MAP_SHARED, run.memfd, 0);
	if (run.stamps == MAP_FAILED)
		die("liveness: mmap of the stamps failed: %s",
		    strerror(errno));

	wb_report_init(&r, "liveness");
	snprintf(r.params, sizeof(r.params), "reactor%s: %u children, %u per "
		 "round, delays %.0f-%.0f ms; poll: %u children, every %.3g s",
		 o.floor ? " and floor" : "", o.children, o.concurrency,
		 (double)o.delay_min_ns / 1e6, (double)o.delay_max_ns / 1e6,
		 o.poll_children, (double)o.poll_interval_ns / 1e9);
	lv_rounds_run(&run, &r);
	if (o.poll_children)
		lv_poll_run(&run, &r);
	rc = wb_report_emit(&r, &a.out);
	wb_report_free(&r);
	munmap((void *)run.stamps, (size_t)run.slots * 8);
	close(run.memfd);
	return rc;
}
