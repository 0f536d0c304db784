/* SPDX-License-Identifier: MIT */
/*
 * The engine's identity in the first HELLO of a fresh process: what
 * wc_hello spends in wc__ident_get before it sends anything, computed from
 * the model's files (config.json, the index, every shard header, the
 * presets) against read from the disk entry (identdisk.c).
 *
 *   ident_start --model DIR [-n N] [--device SPEC] [--runtime-dir DIR]
 *               [--json]
 *
 * Each round runs three fresh processes (this program again, exec'd), in
 * turn: "build" (WCACHE_IDENT_CACHE=off: what every fresh process paid
 * before the disk entry), "write" (an empty cache directory: the first
 * start ever pays the build and the write) and "disk" (the entry written
 * before the first round). Each times one wc__ident_get (the device is
 * opened before the clock starts) and checks that the path it meant to
 * time ran (built, written, read). With --runtime-dir each times a whole
 * wc_hello instead (connected before the clock starts) to the daemon of
 * --device there, serving the model: the identity plus the round trip and
 * the daemon's compare. Prints the median, min and max of each
 * and the build/disk ratio. The model's files must be older than 2 s (an
 * entry is not written sooner: identdisk.c). Bounds: N <= 1000.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "gpu.h"
#include "identity.h"
#include "clock.h"

#define IS_N_MAX 1000

enum { M_BUILD, M_WRITE, M_DISK, M_N };
static const char *const mode_name[M_N] = { "build", "write", "disk" };

static void die(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "ident_start: ");
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
	exit(1);
}

/* The child: one wc__ident_get in mode m (with rundir: a whole wc_hello
 * to the daemon of device spec there); prints its ns. */
static int child(const char *model, const char *spec, int m,
		 const char *rundir)
{
	struct wc_expect x = { .model_dir = model };
	struct wc__idc_counts c;
	struct gpu_dev dev;
	struct wc_error e;
	struct ident id;
	char err[BASE_ERR_LEN];
	uint64_t t0, t1;
	bool ok;

	if (rundir) {
		struct wc_connect_opts o = { .device = spec,
					     .runtime_dir = rundir };
		struct wc_conn *conn;

		if (wc_connect(&o, &conn, &e))
			die("cannot connect to %s: %s", spec, e.msg);
		t0 = clock_ns();
		if (wc_hello(conn, &x, NULL, &e))
			die("HELLO with %s: %s", model, e.msg);
		t1 = clock_ns();
		wc_close(conn);
		goto out_check;
	}
	if (gpu_dev_open(&dev, spec, err))
		die("cannot open device %s: %s", spec, err);
	t0 = clock_ns();
	if (wc__ident_get(&id, &x, &dev, &e))
		die("the identity of %s: %s", model, e.msg);
	t1 = clock_ns();
	gpu_dev_close(&dev);
out_check:
	wc__ident_cache_counts(&c);
	ok = m == M_BUILD ? c.built == 1 && !c.disk_writes :
	     m == M_WRITE ? c.built == 1 && c.disk_writes == 1 :
			    !c.built && c.disk_hits == 1;
	if (!ok)
		die("the %s run did not take its path (%s): check that the model's files are older than 2 s and the cache directory is this user's",
		    mode_name[m], c.disk_why[0] ? c.disk_why : "no reason");
	printf("%llu\n", (unsigned long long)(t1 - t0));
	return 0;
}

/* Runs this program as a child in mode m with WCACHE_IDENT_CACHE=cache;
 * returns its ns. */
static const char *rundir;      /* --runtime-dir: time wc_hello */

static uint64_t run(const char *self, const char *model, const char *spec,
		    int m, const char *cache)
{
	char mode[8], buf[64] = "";
	int pfd[2], st;
	ssize_t n;
	pid_t p;

	snprintf(mode, sizeof(mode), "%d", m);
	if (pipe(pfd))
		die("pipe: %s%s", strerror(errno), "");
	p = fork();
	if (p < 0)
		die("fork: %s%s", strerror(errno), "");
	if (!p) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		setenv("WCACHE_IDENT_CACHE", cache, 1);
		execl(self, self, "--child", model, spec, mode, rundir,
		      (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	n = read(pfd[0], buf, sizeof(buf) - 1);
	close(pfd[0]);
	if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) ||
	    n <= 0)
		die("the %s child failed (see above)%s", mode_name[m], "");
	return strtoull(buf, NULL, 10);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	static uint64_t t[M_N][IS_N_MAX];
	const char *model = NULL, *spec = "host", *n_arg = "10";
	char self[4096], tmp[] = "/tmp/ident_start.XXXXXX", cache[128],
	     fresh[160], cmd[400];
	uint64_t med[M_N];
	bool json = false;
	long n = 10;
	ssize_t l;

	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "--child"))
		return child(argv[2], argv[3], atoi(argv[4]), argv[5]);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--model") && i + 1 < argc)
			model = argv[++i];
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = strtol(n_arg = argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			spec = argv[++i];
		else if (!strcmp(argv[i], "--runtime-dir") && i + 1 < argc)
			rundir = argv[++i];
		else if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: ident_start --model DIR [-n N] [--device SPEC] [--runtime-dir DIR] [--json]\n\n"
			       "The first HELLO's identity of fresh processes, alternated: built from the\n"
			       "model's files (WCACHE_IDENT_CACHE=off), built and written to an empty cache\n"
			       "directory, and read from the disk entry. N rounds (default 10, at most\n"
			       "1000); DIR absolute, its files older than 2 s. --runtime-dir: a whole\n"
			       "wc_hello to the daemon of --device there instead. Prints the median, min\n"
			       "and max of each and the build/disk ratio (--json: one JSON object).\n");
			return 0;
		} else
			die("usage: ident_start --model DIR [-n N] [--device SPEC] [--runtime-dir DIR] [--json] (%s%s?)",
			    argv[i], "");
	}
	if (!model || model[0] != '/')
		die("--model %s: give the model directory as an absolute path%s",
		    model ? model : "(none)", "");
	if (n < 1 || n > IS_N_MAX)
		die("-n %s: use 1..1000%s", n_arg, "");
	l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (l <= 0)
		die("cannot read /proc/self/exe%s%s", "", "");
	self[l] = '\0';
	if (!mkdtemp(tmp))
		die("mkdtemp %s: %s", tmp, strerror(errno));
	snprintf(cache, sizeof(cache), "%s/disk", tmp);
	run(self, model, spec, M_WRITE, cache);        /* the entry "disk" reads */
	for (long r = 0; r < n; r++) {
		t[M_BUILD][r] = run(self, model, spec, M_BUILD, "off");
		snprintf(fresh, sizeof(fresh), "%s/w%ld", tmp, r);
		t[M_WRITE][r] = run(self, model, spec, M_WRITE, fresh);
		t[M_DISK][r] = run(self, model, spec, M_DISK, cache);
	}
	for (int m = 0; m < M_N; m++) {
		qsort(t[m], (size_t)n, sizeof(t[m][0]), cmp_u64);
		med[m] = t[m][n / 2];
	}
	if (json) {
		printf("{\"model\": \"%s\", \"timed\": \"%s\", \"n\": %ld", model,
		       rundir ? "wc_hello" : "wc__ident_get", n);
		for (int m = 0; m < M_N; m++)
			printf(", \"%s_ns\": {\"p50\": %llu, \"min\": %llu, \"max\": %llu}",
			       mode_name[m], (unsigned long long)med[m],
			       (unsigned long long)t[m][0],
			       (unsigned long long)t[m][n - 1]);
		printf(", \"build_over_disk\": %.1f}\n",
		       (double)med[M_BUILD] / (double)med[M_DISK]);
	} else {
		printf("%s, %s, %ld fresh processes each, alternated:\n", model,
		       rundir ? "wc_hello" : "wc__ident_get", n);
		for (int m = 0; m < M_N; m++)
			printf("  %-6s p50 %8.3f ms  min %8.3f  max %8.3f\n",
			       mode_name[m], med[m] / 1e6, t[m][0] / 1e6,
			       t[m][n - 1] / 1e6);
		printf("  build / disk: %.1fx\n",
		       (double)med[M_BUILD] / (double)med[M_DISK]);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) ? 1 : 0;
}
