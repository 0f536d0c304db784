/* SPDX-License-Identifier: MIT */
/*
 * wcd's state machine (tools/wcd/daemon/state.c, compiled in here): every state
 * has its STATUS name, the allowed transitions pass, STOPPING is final (a
 * job that ends after SIGTERM leaves the daemon stopping), and a transition
 * the table does not allow aborts through WC_ASSERT, in a child, with the
 * condition, file and line on stderr; a bare WC_ASSERT does the same.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../tools/wcd/daemon/state.c"
#include "t.h"

/* Runs fn in a child with stderr into a pipe; returns the signal that
 * ended it (0 if it exited) and its stderr in out. */
static int in_child(void (*fn)(void), char *out, size_t cap)
{
	int p[2], st = 0;
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	T_OK(pipe(p));
	pid = fork();
	T_ASSERT(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 2);
		close(p[0]);
		signal(SIGABRT, SIG_DFL);
		fn();
		_exit(0);
	}
	close(p[1]);
	while (n + 1 < cap && (r = read(p[0], out + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	out[n] = '\0';
	close(p[0]);
	T_ASSERT(waitpid(pid, &st, 0) == pid);
	return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void bad_transition(void)
{
	struct wcd d = { .state = WCD_READY };

	wcd_enter(&d, WCD_WAKING);      /* READY -> WAKING: not allowed */
}

static void leave_loading_for_sleep(void)
{
	struct wcd d = { .state = WCD_LOADING };

	wcd_enter(&d, WCD_SLEEPING);
}

static void bare_assert(void)
{
	int leases = 0;

	WC_ASSERT(leases > 0);
}

static void good_transition(void)
{
	struct wcd d = { .state = WCD_READY };

	wcd_enter(&d, WCD_SLEEPING);
}

int main(void)
{
	static const char *const names[] = {
		"starting", "loading", "ready", "sleeping", "waking",
		"updating", "stopping", "taking-over",
	};
	struct wcd d = { .state = WCD_STARTING };
	char err[4096];

	T_EQ_INT(sizeof(names) / sizeof(names[0]), WCD_NSTATES);
	for (int s = 0; s < WCD_NSTATES; s++)
		T_EQ_STR(wcd_state_name((enum wcd_state)s), names[s]);
	T_EQ_STR(wcd_state_name(WCD_NSTATES), "unknown");

	/* the daemon's life: start, load, serve, sleep, a failed wake, a
	 * wake, an update */
	T_ASSERT(wcd_enter(&d, WCD_LOADING));
	T_ASSERT(wcd_enter(&d, WCD_READY));
	T_ASSERT(wcd_enter(&d, WCD_SLEEPING));
	T_ASSERT(wcd_enter(&d, WCD_WAKING));
	T_ASSERT(wcd_enter(&d, WCD_SLEEPING));
	T_ASSERT(wcd_enter(&d, WCD_WAKING));
	T_ASSERT(wcd_enter(&d, WCD_READY));
	T_ASSERT(wcd_enter(&d, WCD_UPDATING));
	T_ASSERT(wcd_enter(&d, WCD_READY));
	T_ASSERT(!wcd_stopping(&d));

	/* STOPPING from a job, and nothing leaves it */
	T_ASSERT(wcd_enter(&d, WCD_UPDATING));
	T_ASSERT(wcd_enter(&d, WCD_STOPPING));
	T_ASSERT(wcd_stopping(&d));
	T_ASSERT(!wcd_enter(&d, WCD_READY));
	T_ASSERT(!wcd_enter(&d, WCD_SLEEPING));
	T_ASSERT(wcd_enter(&d, WCD_STOPPING));
	T_EQ_INT(d.state, WCD_STOPPING);
	/* SIGTERM while loading */
	d.state = WCD_LOADING;
	T_ASSERT(wcd_enter(&d, WCD_STOPPING));
	/* wcd --takeover: a handover, or a load when the old daemon died
	 * before it handed everything over */
	d.state = WCD_STARTING;
	T_ASSERT(wcd_enter(&d, WCD_TAKING_OVER));
	T_ASSERT(wcd_enter(&d, WCD_READY));
	d.state = WCD_STARTING;
	T_ASSERT(wcd_enter(&d, WCD_TAKING_OVER));
	T_ASSERT(wcd_enter(&d, WCD_LOADING));
	d.state = WCD_TAKING_OVER;
	T_ASSERT(wcd_enter(&d, WCD_STOPPING));

	/* a transition outside the table aborts */
	T_EQ_INT(in_child(bad_transition, err, sizeof(err)), SIGABRT);
	printf("%s", err);
	T_HAS(err, "state.c:");
	T_HAS(err, "wcd_enter: assertion failed: allowed[from] & TO(to)");
	T_EQ_INT(in_child(leave_loading_for_sleep, err, sizeof(err)), SIGABRT);
	T_HAS(err, "assertion failed");
	/* a bare WC_ASSERT: condition, file, line, function */
	T_EQ_INT(in_child(bare_assert, err, sizeof(err)), SIGABRT);
	printf("%s", err);
	T_HAS(err, "wcd_state.c:");
	T_HAS(err, "bare_assert: assertion failed: leases > 0");
	/* and an allowed one in the same harness does not */
	T_EQ_INT(in_child(good_transition, err, sizeof(err)), 0);
	T_EQ_STR(err, "");
	printf("ok\n");
	return 0;
}
