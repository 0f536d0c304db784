/* SPDX-License-Identifier: MIT */
/*
 * Waiting on events instead of sleeping: a file that appears, goes, or
 * comes to hold a text (inotify on its directory, or the nearest one that
 * exists) while a process lives (its pidfd), and a process's end (its
 * pidfd). The code is in t_wait.c (libwctest); test/lib/bin/wc_waitfor is
 * the same for the shell tests.
 *
 * Each returns 0 once what it waits for holds, -ESRCH when pid (when > 0)
 * ended first, -ETIMEDOUT after ms, or another -errno (inotify or
 * pidfd_open failed). What is waited for is looked at again after every
 * change in the directory, so a condition that only a change there can
 * make true is seen at once, and no change is missed between a look and
 * the wait (the watch is set up before the look).
 */
#ifndef WC_TEST_T_WAIT_H
#define WC_TEST_T_WAIT_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

/* Waits up to ms for path to exist while pid lives. */
int t_wait_file(const char *path, pid_t pid, int ms);
/* Waits up to ms for path not to exist while pid lives. */
int t_wait_gone(const char *path, pid_t pid, int ms);
/* Waits up to ms for path to hold text (a fixed string) while pid lives. */
int t_wait_text(const char *path, const char *text, pid_t pid, int ms);
/* Waits up to ms for done(path, arg) while pid lives, looking again at
 * each change in path's directory: what the three above are made of, for
 * a test's own condition on a file (a count of lines, say). */
int t_wait_until(const char *path, bool (*done)(const char *path, void *arg),
		 void *arg, pid_t pid, int ms);
/* Waits up to ms for pid to end (a zombie has ended): 0, -ETIMEDOUT, or
 * -errno. A pid that is gone already is 0. */
int t_wait_exit(pid_t pid, int ms);
/* 1 when path holds text, 0 when not (or it cannot be read). */
bool t_file_has(const char *path, const char *text);

/* A count that one thread waits on while others add to it (a backend's
 * completions): a mutex and a condition variable on CLOCK_MONOTONIC. */
struct t_count {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int n;
};
void t_count_init(struct t_count *c);
void t_count_set(struct t_count *c, int n);
void t_count_add(struct t_count *c, int k);
int t_count_get(struct t_count *c);
/* Waits up to ms for the count to reach at least n: 0 or -ETIMEDOUT. */
int t_count_wait(struct t_count *c, int n, int ms);

#endif
