// SPDX-License-Identifier: MIT
/* Children: exit code 3 is reported as code 3, SIGKILL (sent through the
 * pidfd) as signal 9, with IORING_OP_WAITID and with the poll + waitid
 * fallback; a process that is not our child is reported with the status
 * its zombie holds (SIGKILL while its parent has not reaped it), or once
 * its parent reaped it the status the pidfd keeps (6.15+); an exec failure is returned by rx_spawn; the exit is
 * stamped when the loop sees it. */
#include <errno.h>
#include <stdio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rx_util.h"

static int done_res = 1;

static void on_exit_cb(struct rx_child *c, int res)
{
	done_res = res;
}

static void run_child(struct rx_loop *loop, char *const argv[], int kill_sig,
		      int want_code, int want_sig)
{
	struct rx_spawn_opts o = { .argv = argv, .stdin_fd = -1,
				   .stdout_fd = -1, .stderr_fd = -1 };
	struct rx_child c = { 0 };
	uint64_t before;

	done_res = 1;
	T_OK(rx_spawn(loop, &c, &o, on_exit_cb));
	T_CMP_INT(c.pid, >, 0);
	T_ASSERT(rx_test_cloexec(c.pidfd));
	if (kill_sig)
		T_OK(rx_child_kill(&c, kill_sig));
	before = rx_now_ns();
	RX_RUN_UNTIL(loop, done_res != 1, 10000);
	T_EQ_INT(done_res, 0);
	T_ASSERT(c.exited);
	T_EQ_INT(c.exit_code, want_code);
	T_EQ_INT(c.term_signal, want_sig);
	T_CMP_INT(c.exit_seen_ns, >=, before);
	/* the child was reaped: the pid is gone */
	T_EQ_INT(kill(c.pid, 0), -1);
	rx_child_close(&c);
	T_EQ_INT(c.pidfd, -1);
}

/* A grandchild that outlives its parent: not ours to reap. It waits on a
 * pipe (EOF when we close our end) until the watch is in place, so no
 * timing decides whether its pidfd can still be opened. */
static void run_stranger(struct rx_loop *loop)
{
	struct rx_child c = { 0 };
	int p[2], go[2], st;
	char b;
	pid_t mid, gc;

	T_ASSERT(pipe(p) == 0);
	T_ASSERT(pipe(go) == 0);
	mid = fork();
	T_ASSERT(mid >= 0);
	if (mid == 0) {
		gc = fork();
		if (gc == 0) {
			close(go[1]);
			while (read(go[0], &b, 1) < 0 && errno == EINTR)
				;
			_exit(5);
		}
		if (write(p[1], &gc, sizeof(gc)) != sizeof(gc))
			_exit(1);
		_exit(0);
	}
	close(go[0]);
	T_ASSERT(read(p[0], &gc, sizeof(gc)) == sizeof(gc));
	T_ASSERT(waitpid(mid, &st, 0) == mid);
	close(p[0]);
	close(p[1]);
	done_res = 1;
	T_OK(rx_child_watch_pid(loop, &c, gc, on_exit_cb));
	close(go[1]);   /* the grandchild exits now */
	RX_RUN_UNTIL(loop, done_res != 1, 10000);
	T_EQ_INT(done_res, 0);
	T_ASSERT(c.exited);
	/* reparented: its new parent may or may not have reaped it yet */
	if (!(c.exit_code == 5 && c.term_signal == 0))
		T_ASSERT(c.exit_code == -1 && c.term_signal == -1);
	rx_child_close(&c);
}

/* Forks a middle process whose child (a pauser: someone else's child
 * for our loop) it reaps once go_fd is readable (-1: as soon as it dies).
 * *gc is the grandchild's pid; returns the middle one's. */
static pid_t fork_stranger(int go_fd, pid_t *gc)
{
	int p[2], st;
	pid_t mid;
	char b = 0;

	T_ASSERT(pipe(p) == 0);
	mid = fork();
	T_ASSERT(mid >= 0);
	if (mid == 0) {
		pid_t g = fork();

		if (g == 0) {
			pause();
			_exit(0);
		}
		if (write(p[1], &g, sizeof(g)) != sizeof(g))
			_exit(1);
		if (go_fd >= 0 && read(go_fd, &b, 1) < 0)
			_exit(1);
		waitpid(g, &st, 0);
		_exit(0);
	}
	T_ASSERT(read(p[0], gc, sizeof(*gc)) == sizeof(*gc));
	close(p[0]);
	close(p[1]);
	return mid;
}

/* Someone else's child, killed by a signal while its parent (alive, not
 * reaping) keeps the zombie: the status is read from the zombie. */
static void run_zombie(struct rx_loop *loop)
{
	struct rx_child c = { 0 };
	int go[2], st;
	pid_t mid, gc;
	char b = 0;

	T_ASSERT(pipe(go) == 0);
	/* the middle one keeps the zombie until the test has seen the exit */
	mid = fork_stranger(go[0], &gc);
	done_res = 1;
	T_OK(rx_child_watch_pid(loop, &c, gc, on_exit_cb));
	T_OK(rx_child_kill(&c, SIGKILL));
	RX_RUN_UNTIL(loop, done_res != 1, 10000);
	T_EQ_INT(done_res, 0);
	T_ASSERT(c.exited);
	T_EQ_INT(c.term_signal, SIGKILL);
	T_EQ_INT(c.exit_code, -1);
	T_ASSERT(write(go[1], &b, 1) == 1);
	T_ASSERT(waitpid(mid, &st, 0) == mid);
	close(go[0]);
	close(go[1]);
	rx_child_close(&c);
}

/* Someone else's child, killed and reaped by its parent before our loop
 * looks: the status comes from the pidfd (PIDFD_INFO_EXIT, 6.15+); an
 * older kernel leaves it unknown, said here. */
static void run_reaped(struct rx_loop *loop)
{
	struct rx_child c = { 0 };
	int st, major = 0, minor = 0;
	struct utsname u;
	pid_t mid, gc;

	mid = fork_stranger(-1, &gc);   /* reaps gc as soon as it dies */
	done_res = 1;
	T_OK(rx_child_watch_pid(loop, &c, gc, on_exit_cb));
	T_OK(rx_child_kill(&c, SIGKILL));
	T_ASSERT(waitpid(mid, &st, 0) == mid);  /* so gc is reaped */
	RX_RUN_UNTIL(loop, done_res != 1, 10000);
	T_EQ_INT(done_res, 0);
	T_ASSERT(c.exited);
	if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
	    major * 100 + minor < 615 && c.term_signal == -1 && c.exit_code == -1)
		printf("note: kernel %s has no PIDFD_INFO_EXIT: a reaped stranger's status is unknown\n",
		       u.release);
	else
		T_EQ_INT(c.term_signal, SIGKILL);
	rx_child_close(&c);
}

int main(void)
{
	char *exit3[] = { "sh", "-c", "exit 3", NULL };
	char *sleeper[] = { "sleep", "30", NULL };
	char *self_int[] = { "sh", "-c", "kill -INT $$; exit 7", NULL };
	char *self_term[] = { "sh", "-c", "kill -TERM $$; exit 7", NULL };
	sigset_t term, old;
	char *missing[] = { "/nonexistent/wc-no-such-program", NULL };
	struct rx_spawn_opts o = { .argv = missing, .stdin_fd = -1,
				   .stdout_fd = -1, .stderr_fd = -1 };
	struct rx_child c = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), mode;

	for (mode = 0; mode < 2; mode++) {
		T_OK(rx_loop_init(&loop, 0));
		if (mode == 1)
			loop.has_waitid = false; /* the poll + waitid path */
		else if (!loop.has_waitid)
			printf("no IORING_OP_WAITID: poll path only\n");
		run_child(&loop, exit3, 0, 3, 0);
		run_child(&loop, sleeper, SIGKILL, -1, 9);
		run_stranger(&loop);
		run_zombie(&loop);
		run_reaped(&loop);
		/* a child starts clean of our blocked and ignored signals */
		sigemptyset(&term);
		sigaddset(&term, SIGTERM);
		sigprocmask(SIG_BLOCK, &term, &old);
		signal(SIGINT, SIG_IGN);
		run_child(&loop, self_int, 0, -1, SIGINT);
		run_child(&loop, self_term, 0, -1, SIGTERM);
		signal(SIGINT, SIG_DFL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		T_EQ_INT(rx_spawn(&loop, &c, &o, on_exit_cb), -ENOENT);
		T_EQ_INT(rx_child_watch_pid(&loop, &c, 0, on_exit_cb), -EINVAL);
		T_EQ_INT(loop.active, 0);
		T_OK(rx_loop_close(&loop));
	}
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
