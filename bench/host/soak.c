/* SPDX-License-Identifier: MIT */
/*
 * The soak (issue 15): N client processes send a mix of requests to one
 * running wcd for S seconds while the driver SIGKILLs a random client every
 * --kill-ms (and starts a new one) and, with --restart-s, hands the daemon
 * over to a new process (wcctl restart) every so often. Reports requests,
 * errors, p50/p99 per request kind, the kills and handovers, and the
 * daemon's RSS and descriptor count sampled every second, as one JSON
 * object (bench/host/soak runs it and draws the plot).
 *
 * Request mix per client, by a per-process xorshift: 60% PING, 15% STATUS,
 * 10% MANIFEST (HELLO first), 10% ATTACH+DETACH (a lease, pools mapped and
 * unmapped), 5% a new connection (close, connect, HELLO). Latencies go into
 * shared log-linear histograms (8 buckets per power of two: p50/p99 within
 * 9%). An error is any call that fails; its message is counted, the first
 * few printed. Time is spent in wcd and the clients alike: 256 processes on
 * a 2-CPU machine measure the daemon under CPU contention, not its floor.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "wcache.h"
#include "clock.h"

#define CLIENTS_MAX 1024
#define NBUCKETS 512
#define SAMPLES_MAX 4096

enum kind { K_PING, K_STATUS, K_MANIFEST, K_ATTACH, K_CONNECT, K_N };
static const char *const kind_name[K_N] = {
	"PING", "STATUS", "MANIFEST", "ATTACH+DETACH", "CONNECT+HELLO",
};

struct shared {
	uint64_t hist[K_N][NBUCKETS];   /* __atomic adds */
	uint64_t count[K_N];
	uint64_t errors[K_N];
	uint64_t printed;
};

struct sample {
	double t;
	long rss_kb;
	int fds;
	int pid;
};

static struct shared *sh;
static const char *sock, *device, *rundir;
static volatile sig_atomic_t stop_flag;

static unsigned bucket(uint64_t ns)
{
	int e;
	double f;
	long b;

	if (ns < 1)
		ns = 1;
	f = frexp((double)ns, &e);              /* ns = f * 2^e, f in [0.5, 1) */
	b = (long)(e - 1) * 8 + (long)((f - 0.5) * 16);
	return b < 0 ? 0 : b >= NBUCKETS ? NBUCKETS - 1 : (unsigned)b;
}

static double bucket_ns(unsigned b)
{
	return ldexp(0.5 + ((double)(b % 8) + 0.5) / 16, (int)(b / 8) + 1);
}

static void record(enum kind k, uint64_t t0, int ret, const char *msg)
{
	__atomic_add_fetch(&sh->count[k], 1, __ATOMIC_RELAXED);
	if (ret < 0) {
		__atomic_add_fetch(&sh->errors[k], 1, __ATOMIC_RELAXED);
		if (__atomic_add_fetch(&sh->printed, 1, __ATOMIC_RELAXED) <= 10)
			fprintf(stderr, "soak: %s failed: %s\n", kind_name[k], msg);
		return;
	}
	__atomic_add_fetch(&sh->hist[k][bucket(clock_ns() - t0)], 1,
			   __ATOMIC_RELAXED);
}

static int connect_hello(struct wc_conn **c, struct wc_error *e)
{
	struct wc_connect_opts o = { .socket = sock, .device = device,
				     .timeout_ms = 30000, .label = "soak" };
	int ret = wc_connect(&o, c, e);

	if (!ret)
		ret = wc_hello(*c, NULL, NULL, e);
	if (ret) {
		wc_close(*c);
		*c = NULL;
	}
	return ret;
}

static void client(unsigned seed)
{
	uint64_t x = 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed << 17 | 1);
	struct wc_conn *c = NULL;
	struct wc_model *m;
	struct wc_error e;
	char *js;
	int ret;

	while (!stop_flag) {
		uint64_t t0 = clock_ns();
		unsigned r;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		r = (unsigned)(x % 100);
		if (!c || r >= 95) {
			wc_close(c);
			c = NULL;
			ret = connect_hello(&c, &e);
			record(K_CONNECT, t0, ret, e.msg);
			if (ret)
				usleep(10000);
			continue;
		}
		if (r < 60) {
			ret = wc_ping(c, 1, &e);
			record(K_PING, t0, ret, e.msg);
		} else if (r < 75) {
			ret = wc_status(c, &js, &e);
			if (!ret)
				free(js);
			record(K_STATUS, t0, ret, e.msg);
		} else if (r < 85) {
			ret = wc_manifest(c, &m, &e);
			if (!ret)
				wc_detach(m, NULL);
			record(K_MANIFEST, t0, ret, e.msg);
		} else {
			ret = wc_attach(c, 0, &m, NULL, &e);
			if (!ret)
				ret = wc_detach(m, &e);
			record(K_ATTACH, t0, ret, e.msg);
		}
		if (ret) {              /* a broken connection: start again */
			wc_close(c);
			c = NULL;
		}
	}
	wc_close(c);
	_exit(0);
}

static void on_term(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static pid_t spawn(unsigned seed)
{
	pid_t p = fork();

	if (p == 0) {
		signal(SIGTERM, on_term);
		client(seed);
	}
	return p;
}

/* The daemon's pid from its ready file (it changes at each handover). */
static int daemon_pid(void)
{
	char path[512], line[600];
	int pid = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%.*s.ready", (int)(strlen(sock) - 5), sock);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "pid=%d", &pid) == 1)
			break;
	fclose(f);
	return pid;
}

static void sample_daemon(struct sample *s)
{
	char path[64], line[256];
	struct dirent *de;
	DIR *d;
	FILE *f;

	s->pid = daemon_pid();
	s->rss_kb = -1;
	s->fds = -1;
	if (s->pid <= 0)
		return;
	snprintf(path, sizeof(path), "/proc/%d/status", s->pid);
	f = fopen(path, "re");
	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "VmRSS: %ld kB", &s->rss_kb) == 1)
				break;
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/fd", s->pid);
	d = opendir(path);
	if (d) {
		s->fds = 0;
		while ((de = readdir(d)))
			s->fds += de->d_name[0] != '.';
		closedir(d);
	}
}

/* wcctl restart --device D --runtime-dir R: 0 or its exit status. */
static int restart(const char *wcctl, double *secs)
{
	uint64_t t0 = clock_ns();
	pid_t p = fork();
	int st;

	if (p == 0) {
		freopen("/dev/null", "w", stdout);
		execl(wcctl, wcctl, "restart", "--device", device,
		      "--runtime-dir", rundir, "--timeout", "60", (char *)NULL);
		_exit(127);
	}
	waitpid(p, &st, 0);
	*secs = (double)(clock_ns() - t0) / 1e9;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static double pct(const uint64_t *h, uint64_t n, double q)
{
	uint64_t want = (uint64_t)ceil(q * (double)n), seen = 0;

	for (unsigned b = 0; b < NBUCKETS; b++) {
		seen += h[b];
		if (seen >= want && h[b])
			return bucket_ns(b);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "device", required_argument, NULL, 'D' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "clients", required_argument, NULL, 'c' },
		{ "seconds", required_argument, NULL, 'S' },
		{ "kill-ms", required_argument, NULL, 'k' },
		{ "restart-s", required_argument, NULL, 'R' },
		{ "wcctl", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	static pid_t kids[CLIENTS_MAX];
	static struct sample samples[SAMPLES_MAX];
	unsigned nclients = 256, seed = 1, kills = 0, restarts = 0,
		 restart_fail = 0, nsamples = 0;
	double seconds = 60, kill_ms = 200, restart_s = 0, rs, rs_max = 0,
	       rs_sum = 0;
	const char *wcctl = NULL;
	uint64_t t0, next_kill, next_restart, next_sample;
	int ch;

	while ((ch = cli_getopt(argc, argv, "", lo, "soak")) != -1) {
		switch (ch) {
		case 's': sock = optarg; break;
		case 'D': device = optarg; break;
		case 'r': rundir = optarg; break;
		case 'c': nclients = (unsigned)atoi(optarg); break;
		case 'S': seconds = atof(optarg); break;
		case 'k': kill_ms = atof(optarg); break;
		case 'R': restart_s = atof(optarg); break;
		case 'w': wcctl = optarg; break;
		default:
			fprintf(stderr, "usage: soak --socket S --device D --runtime-dir R [--clients N] [--seconds S] [--kill-ms MS] [--restart-s S --wcctl PATH]\n");
			return 2;
		}
	}
	if (!sock || !device || !rundir || !nclients || nclients > CLIENTS_MAX ||
	    (restart_s > 0 && !wcctl)) {
		fprintf(stderr, "soak: give --socket, --device, --runtime-dir (and --wcctl with --restart-s); at most %d clients\n",
			CLIENTS_MAX);
		return 2;
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	for (unsigned i = 0; i < nclients; i++)
		kids[i] = spawn(seed++);
	t0 = clock_ns();
	next_kill = t0 + (uint64_t)(kill_ms * 1e6);
	next_restart = restart_s > 0 ? t0 + (uint64_t)(restart_s * 1e9) : UINT64_MAX;
	next_sample = t0;
	while (clock_ns() - t0 < (uint64_t)(seconds * 1e9)) {
		uint64_t t = clock_ns();

		if (t >= next_sample && nsamples < SAMPLES_MAX) {
			struct sample *s = &samples[nsamples++];

			s->t = (double)(t - t0) / 1e9;
			sample_daemon(s);
			next_sample += 1000000000ull;
		}
		if (kill_ms > 0 && t >= next_kill) {
			unsigned i = (unsigned)(rand_r(&seed) % nclients);

			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
			kids[i] = spawn(seed++);
			kills++;
			next_kill += (uint64_t)(kill_ms * 1e6);
		}
		if (t >= next_restart) {
			if (restart(wcctl, &rs))
				restart_fail++;
			restarts++;
			rs_sum += rs;
			rs_max = rs > rs_max ? rs : rs_max;
			next_restart = clock_ns() + (uint64_t)(restart_s * 1e9);
		}
		usleep(10000);
	}
	for (unsigned i = 0; i < nclients; i++)
		kill(kids[i], SIGTERM);
	for (unsigned i = 0; i < nclients; i++)
		waitpid(kids[i], NULL, 0);
	if (nsamples < SAMPLES_MAX) {
		struct sample *s = &samples[nsamples++];

		s->t = (double)(clock_ns() - t0) / 1e9;
		sample_daemon(s);
	}

	printf("{\"clients\":%u,\"seconds\":%.1f,\"kill_ms\":%.0f,\"kills\":%u,"
	       "\"restarts\":%u,\"restart_failures\":%u,\"restart_s_mean\":%.3f,"
	       "\"restart_s_max\":%.3f,\"requests\":{", nclients, seconds,
	       kill_ms, kills, restarts, restart_fail,
	       restarts ? rs_sum / restarts : 0.0, rs_max);
	for (int k = 0; k < K_N; k++) {
		uint64_t n = 0;

		for (unsigned b = 0; b < NBUCKETS; b++)
			n += sh->hist[k][b];
		printf("%s\"%s\":{\"count\":%" PRIu64 ",\"errors\":%" PRIu64
		       ",\"p50_us\":%.1f,\"p99_us\":%.1f}", k ? "," : "",
		       kind_name[k], sh->count[k], sh->errors[k],
		       pct(sh->hist[k], n, 0.5) / 1e3,
		       pct(sh->hist[k], n, 0.99) / 1e3);
	}
	printf("},\"samples\":[");
	for (unsigned i = 0; i < nsamples; i++)
		printf("%s{\"t\":%.1f,\"pid\":%d,\"rss_kb\":%ld,\"fds\":%d}",
		       i ? "," : "", samples[i].t, samples[i].pid,
		       samples[i].rss_kb, samples[i].fds);
	printf("]}\n");
	return 0;
}
