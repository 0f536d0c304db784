// SPDX-License-Identifier: MIT
/* 1000 spawn/exit cycles (8 children at a time) leave the number of open fds
 * (/proc/self/fd) unchanged: pidfds, exec-error pipes and /dev/null all
 * closed, every child reaped. */
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rx_util.h"

#define CYCLES 1000
#define WIDTH 8

static struct rx_loop loop;
static int started, finished, bad;
static char *argv_true[] = { "true", NULL };

static void on_exit_cb(struct rx_child *c, int res);

static void spawn_one(struct rx_child *c)
{
	struct rx_spawn_opts o = { .argv = argv_true, .stdin_fd = -1,
				   .stdout_fd = -1, .stderr_fd = -1 };

	T_OK(rx_spawn(&loop, c, &o, on_exit_cb));
	started++;
}

static void on_exit_cb(struct rx_child *c, int res)
{
	if (res != 0 || c->exit_code != 0)
		bad++;
	rx_child_close(c);
	finished++;
	if (started < CYCLES)
		spawn_one(c);
}

int main(void)
{
	static struct rx_child kids[WIDTH];
	int fds0 = rx_test_fd_count(), i;

	T_OK(rx_loop_init(&loop, 0));
	for (i = 0; i < WIDTH; i++)
		spawn_one(&kids[i]);
	T_OK(rx_run(&loop));
	T_EQ_INT(finished, CYCLES);
	T_EQ_INT(bad, 0);
	T_EQ_INT(rx_test_fd_count(), fds0 + 1); /* the ring */
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	/* no zombie left behind */
	T_EQ_INT(waitpid(-1, NULL, WNOHANG), -1);
	return 0;
}
