/* SPDX-License-Identifier: MIT */
/*
 * wcctl start's state: the ranks this node runs, one wcd each, all watched
 * by one reactor loop (pidfds, inotify on the runtime directory, the
 * deadline, a progress tick, SIGTERM/SIGINT). Private to tools/wcctl.
 */
#ifndef WCCTL_LAUNCH_H
#define WCCTL_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "layout.h"
#include "rundir.h"
#include "wcreactor.h"

#define LAUNCH_WCD_ARGS_MAX 64   /* options passed through after -- */
#define LAUNCH_LOG_TAIL_LINES 12 /* log lines shown when a rank dies */
#define LAUNCH_TICK_NS 500000000ull
#define LAUNCH_PROGRESS_LEN 160

struct launch_opts {
	const char *model;
	const char *runtime_dir;  /* NULL: the environment's default */
	const char *wcd;          /* NULL: next to wcctl, else PATH */
	bool host;                /* --backend host */
	const char *device_prefix;/* host devices: host:<prefix><gpu> */
	struct layout_params lp;
	double timeout_s;
	double grace_s;           /* SIGTERM -> SIGKILL */
	bool foreground, force, keep_logs;
	bool dry_run, json;       /* --dry-run, --json */
	const char *metrics_listen; /* --metrics-listen: rank k gets port + k */
	const char *socket_group; /* --socket-group: every wcd's, or NULL */
	int ep_size, ep_rank;     /* --ep-size, --ep-rank (1, 0: no EP) */
	char **wcd_args;
	int wcd_nargs;
};

enum launch_phase {
	LAUNCH_STARTING,  /* waiting for ready files */
	LAUNCH_RUNNING,   /* --foreground, all ready */
	LAUNCH_STOPPING,  /* tearing down: waiting for every child to exit */
	LAUNCH_DONE,
};

struct launch;

struct rank {
	struct launch *l;
	struct layout_rank lr;
	char device[96];          /* what wcd --device gets */
	char metrics[160];        /* wcd --metrics-listen, or "" */
	struct paths paths;
	struct rx_child child;
	bool spawned, running, ready;
	int log_rfd;              /* our read side of the .log, or -1 */
	uint64_t log_off;         /* bytes of the log already scanned */
	char progress[LAUNCH_PROGRESS_LEN]; /* last "progress:" text */
	bool progress_new;
	uint64_t progress_printed_ns;
};

struct launch {
	struct rx_loop loop;
	const struct launch_opts *o;
	struct rundir rd;
	struct layout lay;
	struct rank *ranks;
	int n;
	enum launch_phase phase;
	int nready, nrunning;
	int status;               /* the exit status once done */
	int ifd;                  /* inotify */
	struct rx_poll ipoll;
	struct rx_timer deadline, tick, grace;
	struct rx_signal sig;
	bool tty;                 /* progress block on stderr */
	int drawn;                /* lines of the progress block on screen */
	bool debug_times;         /* WCCTL_DEBUG=times */
	uint64_t t0_ns;
};

/* launch.c */
int launch_run(struct launch *l);
/* The wcd command line of rank r into argv (NULL-terminated; at most
 * LAUNCH_ARGV_MAX entries); num holds its numbers. Returns the count. */
#define LAUNCH_ARGV_MAX (26 + LAUNCH_WCD_ARGS_MAX)
#define LAUNCH_NUMS 6
int launch_argv(const struct launch *l, const struct rank *r,
		const char *wcd, char *argv[LAUNCH_ARGV_MAX],
		char num[LAUNCH_NUMS][16]);
/* Rank r's expert-parallel rank: (--ep-rank + tp_rank) % --ep-size. */
int launch_ep_rank(const struct launch_opts *o, const struct rank *r);
const char *launch_wcd_path(const struct launch_opts *o, char *buf,
			    size_t len);

/* plan.c: --dry-run and --json */
void launch_print_plan(const struct launch *l);
void launch_print_outcome(const struct launch *l, int status);

/* progress.c: the .log files, read on the tick */
void progress_scan(struct rank *r);
void progress_show(struct launch *l);
void progress_clear(struct launch *l);
void progress_log_tail(const struct rank *r);

#endif
