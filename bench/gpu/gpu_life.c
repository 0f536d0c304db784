/* SPDX-License-Identifier: MIT */
/*
 * Sleep level 1 / wake on the GPU against the pinned host-to-device copy
 * ceiling, measured in the same run on the same device:
 *
 *   gpu_life [--model DIR | --preset NAME] [--reps N] [--keep]
 *
 * Starts wcd on device 0 with the model (default: a wcgen llama-1b written
 * to a temp dir, removed afterwards unless --keep). Each repetition:
 *   1. SLEEP level 1; the device's free bytes (cudaMemGetInfo through the
 *      CUDA backend's mem_info) before and after: the daemon's pools must
 *      be freed;
 *   2. while the daemon sleeps, the ceiling in this process: the backend's
 *      pinned staging (staging_alloc) copied into a VMM pool with
 *      copy_to_pool -- the daemon's own path -- as one copy of 2 GiB, and
 *      as 64 MiB chunks over 4 streams; the better one is the ceiling;
 *   3. WAKE; the daemon's reply gives the restore copy time (pools created
 *      before it, hashes re-checked after it; both reported apart).
 * Prints each repetition and a verdict: the median wake copy rate against
 * the median ceiling, target >= 0.8. Exit 0 when met, 1 when not (or on an
 * error), 77 without CUDA or a GPU. Rates are 1e9 bytes per second.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu.h"
#include "wcache.h"
#include "clock.h"

#define REPS_MAX 16
#define CEIL_BYTES (2ull << 30)
#define CEIL_CHUNK (64ull << 20)
#define TARGET 0.8

extern char **environ;

static struct gpu_dev dev;
static char bindir[PATH_MAX], tmp[] = "/tmp/wcbench-life.XXXXXX";
static pid_t wcd_pid;
static atomic_long done_n;

static void die_msg(const char *what, const char *msg)
{
	fprintf(stderr, "gpu_life: %s: %s\n", what, msg);
	if (wcd_pid > 0)
		kill(wcd_pid, SIGKILL);
	exit(1);
}

static pid_t spawn(char **argv, const char *log)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ))
		die_msg("spawn", argv[0]);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

static int run_wait(char **argv, const char *log)
{
	pid_t pid = spawn(argv, log);
	int st;

	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void on_done(void *arg, int res)
{
	(void)arg;
	(void)res;
	atomic_fetch_add(&done_n, 1);
}

/* total bytes from pinned staging into pool, chunk bytes per copy over
 * streams; GB/s. */
static double h2d(struct gpu_pool *pool, const unsigned char *stage,
		  uint64_t total, uint64_t chunk, unsigned streams)
{
	struct gpu_copy c = { .height = 1 };
	uint64_t n = total / chunk;
	double t0;

	atomic_store(&done_n, 0);
	t0 = clock_secs();
	for (uint64_t i = 0; i < n; i++) {
		c.dst_off = i * chunk;
		c.src = stage + i * chunk;
		c.width = chunk;
		c.src_pitch = c.dst_pitch = chunk;
		if (dev.be->copy_to_pool(&dev, pool, &c, (unsigned)(i % streams),
					 on_done, NULL))
			die_msg("copy_to_pool", "failed");
	}
	while (atomic_load(&done_n) < (long)n)
		;
	return (double)(n * chunk) / (clock_secs() - t0) / 1e9;
}

static double ceiling(double *one, double *chunked)
{
	char err[BASE_ERR_LEN];
	struct gpu_pool pool;
	unsigned char *stage;

	if (dev.be->staging_alloc(&dev, CEIL_BYTES, (void **)&stage, err))
		die_msg("staging_alloc", err);
	memset(stage, 0x5a, CEIL_BYTES);
	if (dev.be->pool_create(&dev, &pool, CEIL_BYTES, err))
		die_msg("pool_create", err);
	h2d(&pool, stage, CEIL_BYTES, CEIL_CHUNK, 4);      /* warm up */
	*one = h2d(&pool, stage, CEIL_BYTES, CEIL_BYTES, 1);
	*chunked = h2d(&pool, stage, CEIL_BYTES, CEIL_CHUNK, 4);
	dev.be->pool_release(&dev, &pool);
	dev.be->staging_free(&dev, stage, CEIL_BYTES);
	return *one > *chunked ? *one : *chunked;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void start_wcd(const char *model, const char *rundir)
{
	char wcd[PATH_MAX + 8], ready[PATH_MAX + 80], log[PATH_MAX + 16];
	char *argv[] = { wcd, "--model", (char *)model, "--device", "0",
			 "--runtime-dir", (char *)rundir, NULL };
	int st;

	snprintf(wcd, sizeof(wcd), "%.3500s/wcd", bindir);
	snprintf(ready, sizeof(ready), "%s/%s.ready", rundir, dev.name);
	snprintf(log, sizeof(log), "%s/wcd.log", tmp);
	wcd_pid = spawn(argv, log);
	for (int i = 0; i < 6000; i++) {
		if (access(ready, F_OK) == 0)
			return;
		if (waitpid(wcd_pid, &st, WNOHANG) == wcd_pid) {
			wcd_pid = 0;
			die_msg("wcd exited before it was ready; see", log);
		}
		usleep(50000);
	}
	die_msg("wcd not ready after 300 s; see", log);
}

int main(int argc, char **argv)
{
	const char *model = NULL, *preset = "llama-1b";
	double wake[REPS_MAX], ceil_v[REPS_MAX], m_wake, m_ceil;
	char err[BASE_ERR_LEN], exe[PATH_MAX], mdir[PATH_MAX], rundir[PATH_MAX];
	struct wc_connect_opts co = { .device = "0", .timeout_ms = 600000,
				      .label = "bench gpu_life" };
	bool keep = false;
	int reps = 3, st;
	ssize_t n;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--model") && i + 1 < argc)
			model = argv[++i];
		else if (!strcmp(argv[i], "--preset") && i + 1 < argc)
			preset = argv[++i];
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--keep"))
			keep = true;
		else {
			fprintf(stderr, "usage: gpu_life [--model DIR | --preset NAME] [--reps N] [--keep]\n");
			return 2;
		}
	}
	if (reps < 1 || reps > REPS_MAX)
		reps = 3;
	if (!gpu_cuda_backend()) {
		printf("skip: built without CUDA\n");
		return 77;
	}
	if (gpu_dev_open(&dev, "0", err)) {
		printf("skip: no GPU: %s\n", err);
		return 77;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		die_msg("readlink", strerror(errno));
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	snprintf(bindir, sizeof(bindir), "%.3000s/../bin", exe);
	if (!mkdtemp(tmp))
		die_msg("mkdtemp", strerror(errno));
	snprintf(rundir, sizeof(rundir), "%s/run", tmp);
	if (!model) {
		char wcgen[PATH_MAX + 8], log[PATH_MAX + 16];
		char *gen[] = { wcgen, (char *)preset, "--out", mdir, NULL };

		snprintf(wcgen, sizeof(wcgen), "%.3500s/wcgen", bindir);
		snprintf(mdir, sizeof(mdir), "%s/model", tmp);
		snprintf(log, sizeof(log), "%s/wcgen.log", tmp);
		if (run_wait(gen, log))
			die_msg("wcgen failed; see", log);
		model = mdir;
	}
	start_wcd(model, rundir);
	co.runtime_dir = rundir;
	printf("# device %s, model %s\n", dev.name, model);
	printf("# rep  freed_bytes  sleep_s  ceiling_gbps(1x2GiB, 64MiBx4)  wake_copy_gbps  ratio  pools+copy+verify_s\n");
	for (int r = 0; r < reps; r++) {
		struct wc_life_result lr;
		struct wc_error e;
		struct wc_conn *c;
		uint64_t f0, f1, tot;
		double one, chunked, t0, wall;

		if (wc_connect(&co, &c, &e))
			die_msg("connect", e.msg);
		dev.be->mem_info(&dev, &f0, &tot);
		if (wc_sleep(c, 1, &lr, &e))
			die_msg("sleep", e.msg);
		dev.be->mem_info(&dev, &f1, &tot);
		ceil_v[r] = ceiling(&one, &chunked);
		t0 = clock_secs();
		if (wc_wake(c, &lr, &e))
			die_msg("wake", e.msg);
		wall = clock_secs() - t0;
		wake[r] = lr.seconds > 0 ? lr.bytes / lr.seconds / 1e9 : 0;
		printf("%5d  %11lld  %7.3f  %6.2f (%6.2f, %6.2f)  %14.2f  %5.2f  %.3f (verify %.3f)\n",
		       r, (long long)(f1 - f0), lr.seconds, ceil_v[r], one,
		       chunked, wake[r], wake[r] / ceil_v[r], wall,
		       lr.verify_seconds);
		printf("#      %s\n", lr.msg);
		wc_close(c);
	}
	m_wake = median(wake, reps);
	m_ceil = median(ceil_v, reps);
	printf("level-1 wake: median %.2f GB/s = %.2f x the pinned H2D ceiling %.2f GB/s measured in the same run (target >= %.1f): %s\n",
	       m_wake, m_wake / m_ceil, m_ceil, TARGET,
	       m_wake >= TARGET * m_ceil ? "PASS" : "FAIL");
	kill(wcd_pid, SIGTERM);
	waitpid(wcd_pid, &st, 0);
	if (!keep) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
		if (system(cmd))
			fprintf(stderr, "could not remove %s\n", tmp);
	}
	gpu_dev_close(&dev);
	return m_wake >= TARGET * m_ceil ? 0 : 1;
}
