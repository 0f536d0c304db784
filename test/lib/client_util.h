/* SPDX-License-Identifier: MIT */
/*
 * Helpers for the end-to-end client tests (test/client_e2e_*.c): a temp
 * directory, a wcgen model, a real wcd on a host device of its own (so the
 * tests can run in parallel), its ready file, STATUS as JSON, and the
 * model's file bytes read straight from the safetensors shards (proto/model)
 * to compare with what a client maps. Everything is undone at exit.
 * The code is in client_util.c (libwctest, linked into every test).
 */
#ifndef WC_TEST_CLIENT_UTIL_H
#define WC_TEST_CLIENT_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "model.h"
#include "t.h"
#include "wcache.h"

struct e2e {
	char dir[64];            /* /tmp/wct-NAME.XXXXXX */
	char bin[512];           /* $WC_TOP/$BUILD/bin */
	char model[128];
	char rundir[128];
	char device[64];         /* host:NAME-PID */
	char sock[256];
	char ready[256];
	char log[128];
	pid_t wcd;
	struct model m;          /* the model as parsed from its files */
	bool m_open;
};

/* When set, e2e_start_wcd's child sets RLIMIT_NOFILE (soft and hard) to it
 * before it runs wcd. */
extern unsigned long e2e_wcd_nofile;

uint64_t e2e_now_ms(void);

void e2e_kill_wcd(struct e2e *x);

/* The SIGTERM and SIGINT handler e2e_init installs: cleans up (kills wcd,
 * removes the temp dir), then dies of sig. */
void e2e_on_signal(int sig);

/* Runs argv (NULL-terminated) to completion, output to log; returns its
 * exit status (or 128 + signal). */
int e2e_run(const char *log, char *const argv[]);

void e2e_show_log(const char *log);

/* Creates the temp dir, generates a tiny model with wcgen and parses it.
 * Skips (77) when the tools are not built. */
void e2e_init(struct e2e *x, const char *name);

/* Starts wcd on the model with extra arguments (NULL-terminated list, may
 * be NULL) and waits up to 30 s for its ready file. */
void e2e_start_wcd(struct e2e *x, const char *const *extra);

/* A plain connection to the unix socket at path (frames written by hand:
 * the malformed-input, slow-client and handover tests). */
int e2e_raw_connect(const char *path);

/* Appends text to path, 20 ms after the last change (so that its mtime
 * moves on file systems of coarse clocks). */
void e2e_append(const char *path, const char *text);

/* A "Key: N kB" line of /proc/PID/status (VmRSS, RssAnon), -1 without
 * one: the memory checks of the reliability and lifecycle tests. */
long e2e_status_kb(pid_t pid, const char *key);
/* pid's RssAnon (kB) less what an AddressSanitizer build maps as its
 * shadow (a byte for every 8 of memory the process ever touched, which
 * stays after a free): the process's own anonymous memory in either
 * build. */
long e2e_rss_anon_kb(pid_t pid);

/* Open descriptors of process pid (its /proc/PID/fd entries): the leak
 * checks of the reliability and handover tests. */
int e2e_fd_count(pid_t pid);

/* e2e_fd_count once it is want, or after ms: a daemon holds a descriptor
 * for a moment while it answers (a STATUS connection it has not yet seen
 * close, the old daemon's handover socket), so a leak check reads the
 * count that stays, not one taken mid-request. */
int e2e_fd_count_settled(pid_t pid, int want, int ms);

/* Starts `wcd --takeover` for x's device, its output appended to x's log;
 * returns its pid (the caller waits for it). */
pid_t e2e_spawn_takeover(struct e2e *x);

struct wc_conn *e2e_connect(const struct e2e *x);

/* STATUS as a jansson object (the caller json_decref's it). */
json_t *e2e_status(const struct e2e *x);

/* Whether STATUS lists a client with this pid (and how many leases). */
bool e2e_status_has_pid(const struct e2e *x, pid_t pid,
			int *leases);

/* The file bytes of tensor name (read from its shard), malloc'd. */
uint8_t *e2e_file_bytes(const struct e2e *x, const char *name,
			uint64_t *len);

/* Served entries that are not views: the checkpoint's tensors. */
uint64_t e2e_stored_count(const struct wc_model *m);

/* A view (fused tensor or alias) covers other served entries exactly:
 * the stored entries of its pool inside its byte range tile it (an alias:
 * it is its target's range), and its hash is of its own mapped bytes. */
void e2e_check_view(const struct wc_model *m,
		    const struct wc_tensor *v);

/* Every tensor of the model is served, and every served tensor's bytes
 * equal the file's (byte compare) and its hash the file bytes' hash; views
 * cover served tensors exactly. Returns the number of checkpoint tensors
 * checked. */
uint64_t e2e_compare_all(const struct e2e *x,
			 const struct wc_model *m);

/* An engine's whole check of the served model: HELLO with the model's
 * identity, ATTACH, e2e_compare_all, wc_verify with no bad tensor; the
 * failure messages say when (e.g. "after wake"). */
void e2e_attach_verify(const struct e2e *x, const char *when);

#endif
