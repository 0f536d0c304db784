/* SPDX-License-Identifier: MIT */
/*
 * wcd's fault points: the hooks through which the tests (and a bench
 * script) reach paths that no real event reaches on demand (a worker that
 * cannot start, a handover side killed at step K, a gate a test opens).
 * Each is an environment variable, all of them in one table (fault.c,
 * which is the only place in tools/wcd that calls getenv); their list with
 * what each does is in tools/wcd/README.md ("Fault points"), which
 * test/wcd/wcd_faults.sh checks against the table and against the names
 * the tests set.
 *
 * The environment is read once, on the first call of any accessor (a
 * pthread_once: callable from any thread); a daemon's environment is fixed
 * from its exec on, so that is the value each site read before. A point is
 * off when its variable is unset or empty. fault_clear turns one off for
 * the rest of the process (a hook that acts once).
 */
#ifndef WCD_FAULT_H
#define WCD_FAULT_H

#include <stdbool.h>

enum fault_point {
	/* handover (handover/) */
	FAULT_HANDOVER_KILL,
	FAULT_HANDOVER_IO_MS,
	FAULT_HANDOVER_DRAIN_MS,
	FAULT_HANDOVER_SERVING_MS,
	FAULT_HO_PROTO,
	FAULT_HO_READY_FAIL,
	FAULT_HO_COMMIT_GATE,
	FAULT_HO_SERVE_GATE,
	FAULT_HO_KILL_SIG,
	FAULT_HO_WAIT_PEER_EXIT,
	/* load (load/) */
	FAULT_STALL_FIFO,
	FAULT_STALL_DIR,
	FAULT_STALL_AT,
	FAULT_FILL_FAIL,
	FAULT_FILL_FAIL_DIR,
	FAULT_FILL_THREADS,
	FAULT_FILL_POLL_FAIL,
	FAULT_FILL_EVENTFD_FAIL,
	FAULT_FILL_PIPE_FAIL,
	FAULT_RA_FAIL,
	FAULT_NO_SPLICE,
	FAULT_NO_CACHESTAT,
	FAULT_PACK,
	FAULT_DIRTY_POOLS,
	FAULT_HASH_THREADS,
	/* sleep and wake (life/) */
	FAULT_SLEEP_ALLOC_FAIL,
	FAULT_SLEEP_PIN_FAIL,
	FAULT_WAKE_CORRUPT,
	FAULT_WAKE_FREE_GATE,
	FAULT_WAKE_FREE_GATE_AT,
	FAULT_WAKE_FREE_NO_THREAD,
	/* update (model/) */
	FAULT_MEMINFO,
	/* update sessions (push/) */
	FAULT_PUSH_HASH_GATE,
	/* the ready file (status.c) */
	FAULT_READY_GATE,
	FAULT_NPOINTS
};

/* What a point's value is: a flag (on when set to anything but 0), a
 * number (C notation: 300, 0x7f; -1 allowed) or a string (a path, a step,
 * a list the site parses). */
enum fault_type { FAULT_FLAG, FAULT_NUM, FAULT_STR };

/* The variable's name ("WCD_TEST_HO_PROTO"), for messages. */
const char *fault_name(enum fault_point p);
/* The value, or NULL when the point is off; any type. */
const char *fault_str(enum fault_point p);
/* A flag point: whether it is on. */
bool fault_on(enum fault_point p);
/* A number point: its value, or def when it is off. */
long long fault_num(enum fault_point p, long long def);
/* Turns p off for the rest of the process. */
void fault_clear(enum fault_point p);
/* A gate (a string point naming PATH): when p is set, makes PATH.held
 * (the test's sign that the daemon waits there), then waits up to 60 s,
 * polling every 10 ms, for PATH to exist or stop(arg) to hold (stop may be
 * NULL), and removes PATH and PATH.held. Nothing when p is off. For the
 * tests' hooks only: it blocks the calling thread. */
void fault_gate(enum fault_point p, bool (*stop)(void *arg), void *arg);

#endif
