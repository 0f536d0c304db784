// SPDX-License-Identifier: MIT
/* rx_spawn's options: stdin and stdout redirected (a child that reads a line
 * and echoes it), an explicit path and environment, a new session; and the
 * other ways in: a pidfd handed over (rx_child_watch_pidfd), a signal to a
 * child that is gone (-ESRCH). */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compat.h"
#include "rx_util.h"

extern char **environ;

static int done_res = 1;

static void on_exit_cb(struct rx_child *c, int res)
{
	done_res = res;
}

static void wait_exit(struct rx_loop *loop, struct rx_child *c, int code)
{
	RX_RUN_UNTIL(loop, done_res != 1, 10000);
	T_EQ_INT(done_res, 0);
	T_EQ_INT(c->exit_code, code);
	done_res = 1;
}

/* Session id: field 6 of /proc/PID/stat (the name in field 2 has no
 * spaces for the programs used here). */
static int session_of(pid_t pid)
{
	char path[64];
	int sid = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	T_ASSERT(f);
	T_EQ_INT(fscanf(f, "%*d %*s %*c %*d %*d %d", &sid), 1);
	fclose(f);
	return sid;
}

int main(void)
{
	char *echo[] = { "sh", "-c", "read x; echo \"got:$x:$WC_T\"; exit 4",
			 NULL };
	char *env[] = { "WC_T=env-ok", NULL };
	char *sleeper[] = { "sleep", "30", NULL };
	struct rx_child c = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), in[2], out[2], pidfd;
	struct rx_spawn_opts o = { .path = "/bin/sh", .argv = echo,
				   .envp = env, .stderr_fd = -1 };
	char buf[64] = "";
	pid_t pid;
	ssize_t n;

	T_OK(rx_loop_init(&loop, 0));

	T_ASSERT(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
	o.stdin_fd = in[0];
	o.stdout_fd = out[1];
	T_OK(rx_spawn(&loop, &c, &o, on_exit_cb));
	close(in[0]);
	close(out[1]);
	T_ASSERT(write(in[1], "hello\n", 6) == 6);
	close(in[1]);
	n = read(out[0], buf, sizeof(buf) - 1);
	T_CMP_INT(n, >, 0);
	buf[n] = 0;
	T_EQ_STR(buf, "got:hello:env-ok\n");
	close(out[0]);
	wait_exit(&loop, &c, 4);
	T_EQ_INT(rx_child_kill(&c, SIGTERM), -ESRCH);
	rx_child_close(&c);
	T_EQ_INT(rx_child_kill(&c, SIGTERM), -EBADF);

	/* a new session: the child leads it */
	o = (struct rx_spawn_opts){ .argv = sleeper, .stdin_fd = -1,
				    .stdout_fd = -1, .stderr_fd = -1,
				    .new_session = true };
	T_OK(rx_spawn(&loop, &c, &o, on_exit_cb));
	T_EQ_INT(session_of(c.pid), c.pid);
	T_OK(rx_child_kill(&c, SIGKILL));
	RX_RUN_UNTIL(&loop, done_res != 1, 10000);
	T_EQ_INT(c.term_signal, SIGKILL);
	done_res = 1;
	rx_child_close(&c);

	/* a pidfd handed over: the watch owns and reaps it */
	T_EQ_INT(posix_spawnp(&pid, "sh", NULL, NULL,
			      (char *[]){ "sh", "-c", "exit 6", NULL },
			      environ), 0);
	pidfd = rx_pidfd_open(pid);
	T_CMP_INT(pidfd, >=, 0);
	T_OK(rx_child_watch_pidfd(&loop, &c, pidfd, on_exit_cb));
	wait_exit(&loop, &c, 6);
	rx_child_close(&c);

	T_EQ_INT(loop.active, 0);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
