/* SPDX-License-Identifier: MIT */
/*
 * Liveness: how long after a child's exit does its owner know? Each child
 * writes its CLOCK_MONOTONIC time into a slot of a shared anonymous mapping
 * just before _exit; the latency is from that stamp to the moment the exit
 * callback runs (reactor) or the waitpid(WNOHANG) that finds it returns
 * (a loop that polls every 2 s, the baseline it replaces).
 *
 *   rx_liveness [-n CHILDREN] [-m POLLED_CHILDREN]
 *
 * Reactor: n children (default 1000) are forked at once, each sleeps until a
 * common start plus a random delay of up to 1 s, and is watched through its
 * pidfd (rx_child_watch_pidfd): once with IORING_OP_WAITID (where the kernel
 * has it), once with the poll + waitid(P_PIDFD) fallback. Polling: m children
 * (default 20), delays up to 6 s, one waitpid(WNOHANG) sweep every 2 s --
 * actually run, so the numbers are measured, not computed. Children are
 * forked (not exec'd) so that they can write into the shared mapping.
 * The floor row is a process blocked in waitid(P_ALL) doing nothing else.
 * Target: reactor p99 <= 1 ms. Bounds: n <= 10000, m <= 1000.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "wcreactor.h"

#define N_MAX 10000
#define SPREAD_NS 1000000000ull       /* reactor children: delays up to 1 s */
#define POLL_SPREAD_NS 6000000000ull  /* polled children: up to 6 s */
#define POLL_TICK_NS 2000000000ull

struct slot {
	volatile uint64_t exit_ns;
	uint64_t pad[7]; /* one cache line each */
};

static struct slot *slots;
static uint64_t *lat_ns;
static int n_done;

static void sleep_until(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
			       .tv_nsec = (long)(ns % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* Forks n children that exit at start_ns + a random delay below spread_ns;
 * returns their pids. */
static pid_t *fork_children(int n, uint64_t start_ns, uint64_t spread_ns)
{
	pid_t *pids = calloc((size_t)n, sizeof(*pids));
	int i;

	if (!pids)
		die("out of memory for %d pids", n);
	for (i = 0; i < n; i++) {
		uint64_t at = start_ns + (uint64_t)(drand48() * (double)spread_ns);

		pids[i] = fork();
		if (pids[i] < 0)
			die("fork child %d of %d: %s (lower -n or raise ulimit -u)",
			    i, n, strerror(errno));
		if (pids[i] == 0) {
			sleep_until(at);
			slots[i].exit_ns = rx_now_ns();
			_exit(0);
		}
	}
	return pids;
}

static void on_exit_cb(struct rx_child *c, int res)
{
	uint64_t now = rx_now_ns();
	int i = (int)(intptr_t)c->op.data;

	if (res < 0 || c->exit_code != 0)
		die("child %d: res %d exit code %d", i, res, c->exit_code);
	lat_ns[i] = now - slots[i].exit_ns;
	rx_child_close(c);
	n_done++;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void print_row(const char *name, uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	printf("%-34s %6d %10.1f %10.1f %10.1f\n", name, n,
	       v[n / 2] / 1e3, v[(n * 99 + 99) / 100 - 1] / 1e3,
	       v[n - 1] / 1e3);
}

static void run_reactor(int n, bool waitid_op, const char *name)
{
	struct rx_child *kids = calloc((size_t)n, sizeof(*kids));
	struct rx_loop loop;
	pid_t *pids;
	int i, ret;

	if (!kids)
		die("out of memory for %d children", n);
	ret = rx_loop_init(&loop, 0);
	if (ret < 0)
		die("rx_loop_init: %s", strerror(-ret));
	if (waitid_op && !loop.has_waitid) {
		printf("%-34s (kernel lacks IORING_OP_WAITID)\n", name);
		rx_loop_close(&loop);
		free(kids);
		return;
	}
	loop.has_waitid = waitid_op;
	memset(slots, 0, sizeof(*slots) * (size_t)n);
	n_done = 0;
	/* all forked well before the first exit */
	pids = fork_children(n, rx_now_ns() + 500000000ull + (uint64_t)n * 200000,
			     SPREAD_NS);
	for (i = 0; i < n; i++) {
		int pidfd = (int)syscall(SYS_pidfd_open, pids[i], 0);

		if (pidfd < 0)
			die("pidfd_open %d: %s", pids[i], strerror(errno));
		kids[i].pid = pids[i];
		kids[i].op.data = (void *)(intptr_t)i;
		ret = rx_child_watch_pidfd(&loop, &kids[i], pidfd, on_exit_cb);
		if (ret < 0)
			die("rx_child_watch_pidfd: %s", strerror(-ret));
	}
	ret = rx_run(&loop);
	if (ret < 0 || n_done != n)
		die("rx_run: %d, %d of %d children seen", ret, n_done, n);
	rx_loop_close(&loop);
	print_row(name, lat_ns, n);
	free(pids);
	free(kids);
}

/* The floor: a thread that does nothing but block in waitid(P_ALL). What
 * the reactor adds is its row minus this one; the rest is the child's own
 * exit (unmapping, closing, notifying the parent) and the scheduler. */
static void run_blocking(int n)
{
	pid_t *pids;
	siginfo_t si;
	int left = n, i;

	memset(slots, 0, sizeof(*slots) * (size_t)n);
	pids = fork_children(n, rx_now_ns() + 500000000ull + (uint64_t)n * 200000,
			     SPREAD_NS);
	while (left) {
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED) < 0) {
			if (errno == EINTR)
				continue;
			die("waitid: %s", strerror(errno));
		}
		for (i = 0; i < n && pids[i] != si.si_pid; i++)
			;
		if (i == n)
			continue;
		lat_ns[i] = rx_now_ns() - slots[i].exit_ns;
		left--;
	}
	print_row("floor: blocking waitid(P_ALL)", lat_ns, n);
	free(pids);
}

static void run_polling(int m)
{
	uint64_t tick;
	pid_t *pids;
	int left = m, i, st;

	memset(slots, 0, sizeof(*slots) * (size_t)m);
	tick = rx_now_ns();
	pids = fork_children(m, tick + 100000000ull, POLL_SPREAD_NS);
	while (left) {
		tick += POLL_TICK_NS;
		sleep_until(tick);
		for (i = 0; i < m; i++) {
			if (!pids[i] || waitpid(pids[i], &st, WNOHANG) != pids[i])
				continue;
			lat_ns[i] = rx_now_ns() - slots[i].exit_ns;
			pids[i] = 0;
			left--;
		}
	}
	print_row("poll every 2 s (waitpid WNOHANG)", lat_ns, m);
	free(pids);
}

int main(int argc, char **argv)
{
	int n = 1000, m = 20, opt;

	log_init("rx_liveness", LOG_INFO);
	while ((opt = getopt(argc, argv, "n:m:")) != -1) {
		if (opt == 'n')
			n = atoi(optarg);
		else if (opt == 'm')
			m = atoi(optarg);
		else
			die("usage: rx_liveness [-n CHILDREN] [-m POLLED_CHILDREN]");
	}
	if (n < 1 || n > N_MAX || m < 1 || m > 1000)
		die("-n %d / -m %d out of range: use 1..%d children and 1..1000 polled",
		    n, m, N_MAX);
	slots = mmap(NULL, sizeof(*slots) * N_MAX, PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	lat_ns = calloc(N_MAX, sizeof(*lat_ns));
	if (slots == MAP_FAILED || !lat_ns)
		die("out of memory for %d slots", N_MAX);
	srand48((long)rx_now_ns());
	printf("child exit -> owner knows (us); target: reactor p99 <= 1000\n");
	printf("%-34s %6s %10s %10s %10s\n", "method", "n", "p50", "p99",
	       "max");
	run_reactor(n, true, "reactor, IORING_OP_WAITID");
	run_reactor(n, false, "reactor, poll pidfd + waitid");
	run_blocking(n);
	run_polling(m);
	return 0;
}
