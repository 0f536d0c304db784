/* SPDX-License-Identifier: MIT */
/*
 * The floor under `wcbench rtt`: two processes ping-pong a message of the
 * size of a PING frame over a unix socketpair (SOCK_STREAM, the transport
 * wcd uses), with blocking write/read on both sides. Nothing a daemon does
 * per request can be cheaper than this, so a daemon's PING p50 over one
 * connection is judged against this p50.
 *
 *   pingpong_floor [-n N] [-s BYTES] [--warmup N] [--cpus A,B] [--json]
 *
 * --cpus A,B pins the timing side to CPU A and the echoing side to CPU B
 * (the same CPU: a context switch per hop; two CPUs: a cross-CPU wake-up,
 * which costs several times more in a VM), so that a daemon's figure can be
 * paired with the floor of the same placement.
 * Prints the p50/p90/p99/p99.9/max of the round trip and round trips per
 * second; --json prints one object shaped like `wcbench rtt --json`.
 * Bounds: N <= 100 M, BYTES <= 4096.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define PP_N_MAX 100000000ull
#define PP_SIZE_MAX 4096

/* Reads exactly n bytes; 0, or -1 on EOF or error. */
static int read_full(int fd, char *buf, size_t n)
{
	while (n) {
		ssize_t r = read(fd, buf, n);

		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return -1;
		}
		buf += r;
		n -= (size_t)r;
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *v, size_t n, double p)
{
	size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return (double)v[rank - 1] / 1e3;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: pingpong_floor [-n ROUND_TRIPS] [-s BYTES] "
		   "[--warmup N] [--cpus A,B] [--json]\n\nTwo processes "
		   "ping-pong BYTES (default 24, one PING frame) over a unix\n"
		   "socketpair with blocking write/read: the floor under wcbench "
		   "rtt.\n--cpus A,B pins the timing process to CPU A and the "
		   "echoing one to CPU B.\n");
}

/* Pins the calling process to one CPU; exits on failure. */
static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0) {
		fprintf(stderr, "pingpong_floor: cannot pin to CPU %d: %s\n",
			cpu, strerror(errno));
		exit(1);
	}
}

static unsigned long long parse(const char *opt, const char *s,
				unsigned long long max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || *end || errno || v > max) {
		fprintf(stderr, "pingpong_floor: %s '%s' is not a number in "
			"[0, %llu]\n", opt, s, max);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	unsigned long long n = 100000, warmup = 1000, size = 24;
	char buf[PP_SIZE_MAX] = { 0 };
	uint64_t *lat, t_start = 0, t_end;
	bool json = false;
	int sv[2], status, cpu_a = -1, cpu_b = -1;
	pid_t pid;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = parse("-n", argv[++i], PP_N_MAX);
		else if (!strcmp(argv[i], "-s") && i + 1 < argc)
			size = parse("-s", argv[++i], PP_SIZE_MAX);
		else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
			warmup = parse("--warmup", argv[++i], PP_N_MAX);
		else if (!strcmp(argv[i], "--cpus") && i + 1 < argc) {
			if (sscanf(argv[++i], "%d,%d", &cpu_a, &cpu_b) != 2 ||
			    cpu_a < 0 || cpu_b < 0 || cpu_a >= CPU_SETSIZE ||
			    cpu_b >= CPU_SETSIZE) {
				fprintf(stderr, "pingpong_floor: --cpus '%s' is "
					"not A,B (two CPU numbers)\n", argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (n < 1 || size < 1) {
		fprintf(stderr, "pingpong_floor: -n and -s must be at least 1\n");
		return 2;
	}
	lat = malloc(n * sizeof(*lat));
	if (!lat || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		perror("pingpong_floor: setup");
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		perror("pingpong_floor: fork");
		return 1;
	}
	if (pid == 0) {
		pin(cpu_b);
		close(sv[0]);
		while (read_full(sv[1], buf, size) == 0)
			if (write(sv[1], buf, size) != (ssize_t)size)
				_exit(1);
		_exit(0);
	}
	close(sv[1]);
	pin(cpu_a);
	for (unsigned long long i = 0; i < warmup + n; i++) {
		uint64_t t0 = clock_ns();

		if (i == warmup)
			t_start = t0;
		if (write(sv[0], buf, size) != (ssize_t)size ||
		    read_full(sv[0], buf, size) < 0) {
			perror("pingpong_floor: round trip");
			kill(pid, SIGKILL);
			return 1;
		}
		if (i >= warmup)
			lat[i - warmup] = clock_ns() - t0;
	}
	t_end = clock_ns();
	close(sv[0]);
	waitpid(pid, &status, 0);

	qsort(lat, n, sizeof(*lat), cmp_u64);
	double secs = (double)(t_end - t_start) / 1e9, sum = 0;

	for (unsigned long long i = 0; i < n; i++)
		sum += (double)lat[i];
	if (json) {
		/* as wcbench's "cdf_us": 1% .. 99%, 99.5, 99.9, 99.99, 100% */
		static const double tail[] = { 99.5, 99.9, 99.99, 100 };
		char cdf[103 * 16];
		size_t off = 0;

		for (int i = 1; i <= 103; i++)
			off += (size_t)snprintf(cdf + off, sizeof(cdf) - off,
				"%s%.3f", i > 1 ? ", " : "",
				pct_us(lat, n, i <= 99 ? i : tail[i - 100]));
		printf("{\"bench\": \"pingpong_floor\", \"params\": \"%llu round "
		       "trips (+%llu warm-up) of %llu B over a unix socketpair, "
		       "two processes, blocking, CPUs %d,%d\", \"series\": {\"ping\": "
		       "{\"n\": %llu, \"min_us\": %.3f, \"p50_us\": %.3f, "
		       "\"p90_us\": %.3f, \"p99_us\": %.3f, \"p999_us\": %.3f, "
		       "\"max_us\": %.3f, \"mean_us\": %.3f, \"cdf_us\": [%s]}}, "
		       "\"metrics\": "
		       "{\"requests_per_s\": %.1f, \"seconds\": %.6f}}\n", n,
		       warmup, size, cpu_a, cpu_b, n, pct_us(lat, n, 0), pct_us(lat, n, 50),
		       pct_us(lat, n, 90), pct_us(lat, n, 99),
		       pct_us(lat, n, 99.9), pct_us(lat, n, 100),
		       sum / (double)n / 1e3, cdf, (double)n / secs, secs);
	} else {
		printf("pingpong_floor: %llu round trips of %llu B over a unix "
		       "socketpair\n  p50 %.1f us  p90 %.1f us  p99 %.1f us  "
		       "p99.9 %.1f us  max %.1f us  %.0f round trips/s\n", n,
		       size, pct_us(lat, n, 50), pct_us(lat, n, 90),
		       pct_us(lat, n, 99), pct_us(lat, n, 99.9),
		       pct_us(lat, n, 100), (double)n / secs);
	}
	free(lat);
	return 0;
}
