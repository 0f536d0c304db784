/* SPDX-License-Identifier: MIT */
/*
 * Liveness: how long after a child's exit does its owner know? Each child
 * writes its CLOCK_MONOTONIC time into its slot of a shared memfd mapping
 * just before _exit; the latency is from that stamp to the moment the exit
 * callback runs (reactor) or the wait call that finds it returns.
 *
 *   rx_liveness [-n CHILDREN] [-m POLLED_CHILDREN]
 *
 * Children are this program exec'd again in child mode (--child), so they
 * are real spawned processes, as wcctl's are. All of a row's children are
 * spawned first and block on a pipe; closing its write end releases them
 * together, and each exits after 100 ms plus a random delay (up to 1 s).
 * Rows:
 *   reactor, IORING_OP_WAITID / poll pidfd + waitid: n children (default
 *     1000) started with rx_spawn and watched by the loop, with each of the
 *     two ways the reactor has to learn of an exit;
 *   floor: the same children (posix_spawn) and a process that does nothing
 *     but block in waitid(P_ALL) -- what the reactor adds is its row minus
 *     this one; the rest is the child's own exit and the scheduler;
 *   poll every 2 s: m children (default 20, delays up to 6 s) and a loop that
 *     sweeps waitpid(WNOHANG) every 2 s -- actually run, not computed.
 * Target: reactor p99 <= 1 ms. Bounds: n <= 10000, m <= 1000.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "wcreactor.h"

#define N_MAX 10000
#define HEAD_NS 100000000ull          /* every child lives at least 100 ms */
#define SPREAD_NS 1000000000ull       /* plus up to 1 s */
#define POLL_SPREAD_NS 6000000000ull  /* polled children: up to 6 s */
#define POLL_TICK_NS 2000000000ull
#define SELF "/proc/self/exe"

extern char **environ;

struct slot {
	volatile uint64_t exit_ns;
	uint64_t pad[7]; /* one cache line each */
};

static struct slot *slots;
static int slots_fd;
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

/* --child MEMFD GOFD SLOT DELAY_NS: wait for the go, sleep, stamp, exit. */
static int child_main(char **argv)
{
	int memfd = atoi(argv[2]), gofd = atoi(argv[3]), i = atoi(argv[4]);
	uint64_t delay = strtoull(argv[5], NULL, 10);
	struct slot *s;
	char c;

	s = mmap(NULL, sizeof(*s) * N_MAX, PROT_READ | PROT_WRITE, MAP_SHARED,
		 memfd, 0);
	if (s == MAP_FAILED || i < 0 || i >= N_MAX)
		_exit(2);
	while (read(gofd, &c, 1) < 0 && errno == EINTR)
		;
	sleep_until(rx_now_ns() + delay);
	s[i].exit_ns = rx_now_ns();
	_exit(0);
}

/* A row's children: their argv, and the pipe that releases them. */
struct batch {
	int n;
	int go[2];
	char (*args)[5][24];
	char *(*argv)[8];
};

static void batch_init(struct batch *b, int n, uint64_t spread_ns)
{
	int i;

	b->n = n;
	b->args = calloc((size_t)n, sizeof(*b->args));
	b->argv = calloc((size_t)n, sizeof(*b->argv));
	if (!b->args || !b->argv)
		die("out of memory for %d children", n);
	/* the read end is inherited, the write end is not: closing it is the
	 * go for every child at once */
	if (pipe2(b->go, O_CLOEXEC) < 0 || fcntl(b->go[0], F_SETFD, 0) < 0)
		die("pipe: %s", strerror(errno));
	memset(slots, 0, sizeof(*slots) * (size_t)n);
	for (i = 0; i < n; i++) {
		uint64_t delay = HEAD_NS +
				 (uint64_t)(drand48() * (double)spread_ns);

		snprintf(b->args[i][0], 24, "%d", slots_fd);
		snprintf(b->args[i][1], 24, "%d", b->go[0]);
		snprintf(b->args[i][2], 24, "%d", i);
		snprintf(b->args[i][3], 24, "%" PRIu64, delay);
		b->argv[i][0] = "rx_liveness";
		b->argv[i][1] = "--child";
		b->argv[i][2] = b->args[i][0];
		b->argv[i][3] = b->args[i][1];
		b->argv[i][4] = b->args[i][2];
		b->argv[i][5] = b->args[i][3];
		b->argv[i][6] = NULL;
	}
}

static void batch_go(struct batch *b)
{
	close(b->go[0]);
	close(b->go[1]);
}

static void batch_free(struct batch *b)
{
	free(b->args);
	free(b->argv);
}

/* posix_spawn'd children (for the rows without a reactor) */
static pid_t *spawn_plain(struct batch *b)
{
	pid_t *pids = calloc((size_t)b->n, sizeof(*pids));
	int i, ret;

	if (!pids)
		die("out of memory for %d pids", b->n);
	for (i = 0; i < b->n; i++) {
		ret = posix_spawn(&pids[i], SELF, NULL, NULL, b->argv[i],
				  environ);
		if (ret)
			die("posix_spawn child %d of %d: %s (lower -n or raise ulimit -u)",
			    i, b->n, strerror(ret));
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
	struct rx_spawn_opts o = { .path = SELF, .stdin_fd = -1,
				   .stdout_fd = -1, .stderr_fd = -1 };
	struct rx_loop loop;
	struct batch b;
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
	batch_init(&b, n, SPREAD_NS);
	n_done = 0;
	for (i = 0; i < n; i++) {
		o.argv = b.argv[i];
		kids[i].op.data = (void *)(intptr_t)i;
		ret = rx_spawn(&loop, &kids[i], &o, on_exit_cb);
		if (ret < 0)
			die("rx_spawn child %d of %d: %s (lower -n or raise ulimit -u)",
			    i, n, strerror(-ret));
	}
	batch_go(&b);
	ret = rx_run(&loop);
	if (ret < 0 || n_done != n)
		die("rx_run: %d, %d of %d children seen", ret, n_done, n);
	rx_loop_close(&loop);
	print_row(name, lat_ns, n);
	batch_free(&b);
	free(kids);
}

static void run_blocking(int n)
{
	struct batch b;
	siginfo_t si;
	pid_t *pids;
	int left = n, i;

	batch_init(&b, n, SPREAD_NS);
	pids = spawn_plain(&b);
	batch_go(&b);
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
	batch_free(&b);
	free(pids);
}

static void run_polling(int m)
{
	struct batch b;
	uint64_t tick;
	pid_t *pids;
	int left = m, i, st;

	batch_init(&b, m, POLL_SPREAD_NS);
	pids = spawn_plain(&b);
	batch_go(&b);
	tick = rx_now_ns();
	while (left) {
		tick += POLL_TICK_NS;
		sleep_until(tick);
		for (i = 0; i < m; i++) {
			if (!pids[i] ||
			    waitpid(pids[i], &st, WNOHANG) != pids[i])
				continue;
			lat_ns[i] = rx_now_ns() - slots[i].exit_ns;
			pids[i] = 0;
			left--;
		}
	}
	print_row("poll every 2 s (waitpid WNOHANG)", lat_ns, m);
	batch_free(&b);
	free(pids);
}

int main(int argc, char **argv)
{
	size_t slots_len = sizeof(*slots) * N_MAX;
	int n = 1000, m = 20, opt;

	if (argc == 6 && !strcmp(argv[1], "--child"))
		return child_main(argv);
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
	/* not close-on-exec: the children map it */
	slots_fd = memfd_create("rx_liveness", 0);
	if (slots_fd < 0 || ftruncate(slots_fd, (off_t)slots_len) < 0)
		die("memfd for %d slots: %s", N_MAX, strerror(errno));
	slots = mmap(NULL, slots_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		     slots_fd, 0);
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
