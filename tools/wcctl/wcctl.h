/* SPDX-License-Identifier: MIT */
/* wcctl: one file per command; each returns the process exit status. */
#ifndef WCCTL_H
#define WCCTL_H

#include <stdint.h>

#include "rundir.h"

/* Defined by each command's file (argv[0] is the command's name), listed
 * in main.c's table of struct cli_cmd (cli.h). */
int wcctl_start(int argc, char **argv);
int wcctl_status(int argc, char **argv);
int wcctl_stop(int argc, char **argv);
int wcctl_restart(int argc, char **argv);
int wcctl_clean(int argc, char **argv);
int wcctl_inspect(int argc, char **argv);

struct model;
/* wcctl inspect --tp-size/--ep-size/--rank: the per-rank plan. */
struct wcctl_plan_opts {
	uint32_t tp_size, ep_size;
	int rank;                 /* -1: every rank, 0..max(tp, ep)-1 */
	int32_t vocab_pad;        /* -1: the layout's */
	const char *layout, *rules;
	uint64_t pool_size;
};
int wcctl_inspect_plan(const struct model *m, const struct wcctl_plan_opts *o);
int wcctl_manifest(int argc, char **argv);

struct wc_connect_opts;
struct wc_conn;
struct wc_model;
/* The commands that talk to one daemon (--device D [--runtime-dir DIR] or
 * --socket PATH): wcctl_need_target prints "<co->label>: give --device D
 * ..." and returns 2 (the usage exit status) when no daemon is named or
 * extra words follow the options, else 0. wcctl_get_manifest connects,
 * says hello and fetches the served manifest into *c and *m (release with
 * wc_detach(*m, NULL) then wc_close(*c)); on failure it prints
 * "<co->label>: <error>" and returns 1. */
int wcctl_need_target(const struct wc_connect_opts *co, int extra_args);
int wcctl_get_manifest(const struct wc_connect_opts *co, struct wc_conn **c,
		       struct wc_model **m);
int wcctl_verify(int argc, char **argv);
int wcctl_sleep(int argc, char **argv);
int wcctl_wake(int argc, char **argv);
int wcctl_update(int argc, char **argv);
int wcctl_metrics(int argc, char **argv);

/* --all (each.c): runs run(argc, argv) once per daemon with a ready file
 * in the runtime directory (runtime_dir, NULL: the environment's), with
 * "--all" left out and "--device NAME" added; wcctl_all_device is NAME
 * meanwhile (NULL otherwise), for the command to name the daemon in its
 * text output. Returns 0 when every run returned 0, 2 at the first usage
 * error, 3 (said) when no daemon has a ready file, else 1. */
extern const char *wcctl_all_device;
/* The devices with a ready file in rd (set up from runtime_dir), sorted:
 * the count, or -2 (a runtime directory that cannot be used) or -1 (it
 * cannot be read), said on stderr: the exit status negated. */
int wcctl_ready_devices(struct rundir *rd, const char *runtime_dir,
			rundir_name *names);
int wcctl_each_daemon(const char *runtime_dir, int argc, char **argv,
		      int (*run)(int argc, char **argv));

#endif
