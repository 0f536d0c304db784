/* SPDX-License-Identifier: MIT */
/*
 * wcbench attach: the whole attach cycle an engine goes through -- connect,
 * HELLO, MANIFEST, ATTACH, map every pool and resolve every tensor -- timed
 * end to end and per phase (libwcache's struct wc_attach_times), N times in
 * all from M processes started together. Detach and close follow each cycle
 * and are timed apart ("detach"), so leases do not pile up.
 *
 * Each process writes its samples into its rows of a shared anonymous
 * mapping (no pipes to drain); the parent reads them once all have exited.
 * A process's first `warmup` cycles are not counted; the first of them is
 * reported apart ("first cycle of a process"): it is what a freshly started
 * engine pays, including computing its identity (libwcache then keeps it
 * for the process, identcache.c).
 *
 * Bounds: AT_PROCS_MAX processes, AT_CYCLES_MAX cycles in all.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "ready.h"
#include "wcache.h"
#include "wcbench.h"

#define AT_PROCS_MAX 256
#define AT_CYCLES_MAX 1000000

enum { AT_TOTAL, AT_CONNECT, AT_HELLO, AT_MANIFEST, AT_ATTACH, AT_MAP,
       AT_DETACH, AT_NPHASE };
static const char *at_names[AT_NPHASE] = {
	"cycle (total)", "connect", "hello", "manifest", "attach", "map",
	"detach+close",
};

struct at_opts {
	const char *socket;
	const char *runtime_dir;
	const char *device;
	const char *model;      /* expected model dir for HELLO, or NULL */
	unsigned cycles;
	unsigned procs;
	unsigned warmup;
	bool touch;
};

struct at_row {
	uint64_t ns[AT_NPHASE];
	uint64_t tensors;
};

/* One attach cycle; returns 0 or dies with the library's message. */
static void at_cycle(const struct at_opts *o, struct at_row *row,
		     volatile uint64_t *sink)
{
	struct wc_connect_opts co = {
		.device = o->device, .runtime_dir = o->runtime_dir,
		.socket = o->socket, .label = "wcbench attach",
	};
	struct wc_expect x = { .model_dir = o->model };
	struct wc_attach_times t = { 0 };
	struct wc_conn *c;
	struct wc_model *m;
	struct wc_error e;
	uint64_t t0, t1, t2, n;

	t0 = clock_ns();
	if (wc_connect(&co, &c, &e) < 0)
		die("attach: connect: %s", e.msg);
	if (wc_hello(c, o->model ? &x : NULL, NULL, &e) < 0)
		die("attach: hello: %s", e.msg);
	if (wc_attach(c, 0, &m, &t, &e) < 0)
		die("attach: attach: %s", e.msg);
	n = wc_tensor_count(m);
	for (uint64_t i = 0; i < n; i++) {
		const struct wc_tensor *tn = wc_tensor_at(m, i);

		if (!tn || (tn->bytes && !tn->ptr))
			die("attach: tensor %llu of %llu has no "
			    "mapping", (unsigned long long)i,
			    (unsigned long long)n);
		if (o->touch && tn->bytes)
			*sink += *(const volatile uint8_t *)tn->ptr;
	}
	t1 = clock_ns();
	wc_times(c, &t);
	if (wc_detach(m, &e) < 0)
		die("attach: detach: %s", e.msg);
	wc_close(c);
	t2 = clock_ns();
	row->ns[AT_TOTAL] = t1 - t0;
	row->ns[AT_CONNECT] = t.connect_ns;
	row->ns[AT_HELLO] = t.hello_ns;
	row->ns[AT_MANIFEST] = t.manifest_ns;
	row->ns[AT_ATTACH] = t.attach_ns;
	row->ns[AT_MAP] = t.map_ns;
	row->ns[AT_DETACH] = t2 - t1;
	row->tensors = n;
}

/* A worker process: waits on the start pipe, runs its cycles, exits. */
static void at_worker(const struct at_opts *o, unsigned idx, int start_fd,
		      struct at_row *rows, unsigned count, struct at_row *first)
{
	volatile uint64_t sink = 0;
	struct at_row scratch;
	char b;

	if (read(start_fd, &b, 1) < 0)
		_exit(1);
	for (unsigned i = 0; i < o->warmup; i++)
		at_cycle(o, i ? &scratch : first, &sink);
	for (unsigned i = 0; i < count; i++)
		at_cycle(o, &rows[i], &sink);
	(void)idx;
	_exit(0);
}

/* With --socket and no --device, the device comes from the daemon's ready
 * file beside the socket (<prefix>.sock -> <prefix>.ready): the identity
 * HELLO checks names the device. "host-NAME" is the file name of the spec
 * "host:NAME"; other names are their own spec. */
static const char *device_from_ready(const char *sock, char *buf, size_t size)
{
	static struct ready_info ri;
	char path[4096], err[BASE_ERR_LEN];
	size_t n = strlen(sock);

	if (n < 5 || n >= sizeof(path) || strcmp(sock + n - 5, ".sock"))
		return NULL;
	snprintf(path, sizeof(path), "%.*s.ready", (int)(n - 5), sock);
	if (ready_read_file(&ri, path, err) < 0)
		return NULL;
	if (!strncmp(ri.device, "host-", 5))
		snprintf(buf, size, "host:%.40s", ri.device + 5);
	else
		snprintf(buf, size, "%.63s", ri.device);
	return buf;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: wcbench attach [--socket PATH | --runtime-dir DIR --device D] [options]\n\n"
"Times the whole attach cycle of an engine (connect, hello, manifest, attach,\n"
"map every tensor) against a running wcd, N times from M processes started\n"
"together: p50/p99 of the cycle and of each phase.\n\n"
WB_HELP_SOCKET
"  --device D             host, host:NAME, host-NAME (as wcctl status prints\n"
"                         it), an index or GPU-<uuid> (default: from the\n"
"                         ready file beside --socket, else host)\n"
"  --model DIR            send the identity of DIR in HELLO (what an engine\n"
"                         does; costs reading its config and headers); without\n"
"                         it HELLO accepts whatever the daemon serves\n"
"  -n, --cycles N         timed cycles in all (default 1000, at most %d)\n"
"  -p, --procs M          processes, started together (default 1, at most %d)\n"
"  --warmup N             untimed cycles per process first (default 2)\n"
"  --touch                read one byte of every tensor (fault a page each)\n"
WB_HELP_OUT
"\n"
"Examples:\n"
"  wcbench attach --device host:demo --runtime-dir DIR -n 200\n"
"  wcbench attach --device 0 --model /models/llama -n 1000 -p 4 --svg attach.svg\n"
"\n"
"Exit status: 0 measured, 1 a failure (the daemon, a bound, a bad value),\n"
"2 usage.\n", AT_CYCLES_MAX, AT_PROCS_MAX);
}

/* One of attach's own options into ctx (struct at_opts). */
static bool at_opt(void *ctx, int c, const char *arg)
{
	struct at_opts *o = ctx;

	switch (c) {
	case 'n':
		o->cycles = (unsigned)wb_parse_count("--cycles", arg, 1,
						     AT_CYCLES_MAX);
		return true;
	case 'p':
		o->procs = (unsigned)wb_parse_count("--procs", arg, 1,
						    AT_PROCS_MAX);
		return true;
	case 'w':
		o->warmup = (unsigned)wb_parse_count("--warmup", arg, 0, 1000);
		return true;
	case 'T':
		o->touch = true;
		return true;
	}
	return false;
}

static const struct option at_longopts[] = {
	{ "cycles", required_argument, NULL, 'n' },
	{ "procs", required_argument, NULL, 'p' },
	{ "warmup", required_argument, NULL, 'w' },
	{ "touch", no_argument, NULL, 'T' },
	{ NULL, 0, NULL, 0 },
};

static const struct wb_cmd at_cmd = {
	"wcbench attach", WB_TAKES_TARGET | WB_TAKES_MODEL, "n:p:",
	at_longopts, usage, at_opt,
};

/* Forks the worker processes (their rows: cycles first, then each one's
 * first cycle), starts them together and waits for them all; dies when
 * one failed. Returns when they started (the clock of cycles_per_s). */
static uint64_t at_run(const struct at_opts *o, const struct wb_out *out,
		       struct at_row *rows)
{
	pid_t *pids = calloc(o->procs, sizeof(*pids));
	unsigned failed = 0;
	int start[2];
	uint64_t t0;

	if (!pids)
		die("attach: no memory for %u processes", o->procs);
	if (pipe2(start, O_CLOEXEC) < 0)
		die("attach: pipe: %s", strerror(errno));
	fflush(NULL);
	for (unsigned i = 0, first = 0; i < o->procs; i++) {
		unsigned count = o->cycles / o->procs +
				 (i < o->cycles % o->procs ? 1 : 0);

		pids[i] = fork();
		if (pids[i] < 0)
			die("attach: fork: %s", strerror(errno));
		if (pids[i] == 0) {
			close(start[1]);
			at_worker(o, i, start[0], rows + first, count,
				  rows + o->cycles + i);
		}
		first += count;
	}
	close(start[0]);
	t0 = clock_ns();
	close(start[1]); /* go */
	for (unsigned i = 0; i < o->procs; i++) {
		int status;

		while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			failed++;
		wb_progress(out, "processes done", i + 1, o->procs);
	}
	free(pids);     /* before any die() below: LSan saw it leak there */
	wb_progress_end(out);
	if (failed)
		die("attach: %u of %u processes failed (their error is "
		    "above)", failed, o->procs);
	return t0;
}

int wb_attach(int argc, char **argv)
{
	struct at_opts o = { .cycles = 1000, .procs = 1, .warmup = 2 };
	char devbuf[80];
	struct wb_args a;
	struct wb_series *ser[AT_NPHASE];
	struct wb_report r;
	struct at_row *rows;
	size_t map_len;
	uint64_t t0, tensors = 0;
	int rc;

	wb_parse(argc, argv, &at_cmd, &o, &a);
	o.socket = a.socket;
	o.runtime_dir = a.runtime_dir;
	o.device = a.device;
	o.model = a.model;
	if (o.procs > o.cycles)
		o.procs = o.cycles;
	if (!o.device && o.socket)
		o.device = device_from_ready(o.socket, devbuf, sizeof(devbuf));
	if (!o.device)
		o.device = "host";

	map_len = ((size_t)o.cycles + o.procs) * sizeof(*rows);
	rows = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (rows == MAP_FAILED)
		die("attach: no memory for %u cycles", o.cycles);
	t0 = at_run(&o, &a.out, rows);

	wb_report_init(&r, "attach");
	for (unsigned k = 0; k < AT_NPHASE; k++)
		ser[k] = wb_series_add(&r, at_names[k], o.cycles);
	for (unsigned i = 0; i < o.cycles; i++) {
		for (unsigned k = 0; k < AT_NPHASE; k++)
			wb_series_push(ser[k], rows[i].ns[k]);
		tensors = rows[i].tensors;
	}
	if (o.warmup) {
		struct wb_series *fs = wb_series_add(&r, "first cycle of a process",
						     o.procs);

		for (unsigned i = 0; fs && i < o.procs; i++)
			wb_series_push(fs, rows[o.cycles + i].ns[AT_TOTAL]);
	}
	snprintf(r.params, sizeof(r.params), "%u cycles from %u process%s "
		 "(+%u warm-up each), %llu tensors, identity %s%s", o.cycles,
		 o.procs, o.procs == 1 ? "" : "es", o.warmup,
		 (unsigned long long)tensors, o.model ? "checked" : "not sent",
		 o.touch ? ", one byte of each tensor read" : "");
	wb_metric_add(&r, "tensors", (double)tensors, "");
	wb_metric_add(&r, "cycles_per_s", (double)o.cycles /
		      ((double)(clock_ns() - t0) / 1e9), "1/s");
	rc = wb_report_emit(&r, &a.out);
	wb_report_free(&r);
	munmap(rows, map_len);
	return rc;
}
