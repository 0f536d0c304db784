/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the hot handover tests that kill or stop a daemon mid-way
 * (test/wcd/handover_kill.c, test/wcd/handover_stop.c): waiting on a child's end
 * through a pidfd, the flock of the lock file as /proc/locks names it, the
 * engine's notices and STATUS on its own connection. Every wait is bounded
 * by the caller's ms and fails naming what it waited for. On top of
 * client_util.h; the code is in handover_util.c (libwctest).
 */
#ifndef WC_TEST_HANDOVER_UTIL_H
#define WC_TEST_HANDOVER_UTIL_H

#include <poll.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include "client_util.h"
#include "compat.h"

/* Whether fd is readable within ms. */
bool fd_readable(int fd, int ms);

/* Waits up to ms for pid (our child) to end; its siginfo. Reaped unless
 * keep: a zombie keeps its pid, so an engine can still follow a notice
 * that names it. One that does not end is killed, and the test fails. */
siginfo_t wait_end(struct e2e *x, pid_t pid, int ms,
		   const char *what, bool keep);

/* The lock file's path: the ready file's, ending in .lock. */
void lock_path(const struct e2e *x, char *buf, size_t cap);

/* The pid /proc/locks names for the lock file's flock; 0 when free. A
 * lock file that is gone gives 0 where gone_ok (a daemon that stopped
 * removed it), else fails the test. Reads all of /proc/locks: O(locks). */
pid_t lock_holder_pid(const struct e2e *x, bool gone_ok);

/* The next notice of kind `kind` on the engine's connection, within ms;
 * the HANDOVER notices on the way are followed (libwcache moves its daemon
 * fd) and, with saw_pid, the pid of the last one is kept there. */
void next_notice(struct e2e *x, struct wc_conn *c, int kind,
		 int ms, const char *what, struct wc_notice *n,
		 pid_t *saw_pid);

/* STATUS on the engine's own connection: the answering pid and our
 * leases (-1 when we are not listed); with other_listed, whether pid
 * `other` is still listed as a client. */
pid_t status_on(struct e2e *x, struct wc_conn *c, int *leases,
		const char *what, pid_t other,
		bool *other_listed);

#endif
