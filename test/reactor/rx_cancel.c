// SPDX-License-Identifier: MIT
/* Cancellation: rx_cancel on one pending read gives -ECANCELED; closing the
 * loop with one pending operation of every kind runs each callback with
 * -ECANCELED (accept: final; wake: the NULL node) and leaves the fd count
 * where it started once the test's own fds are closed. */
#include <errno.h>
#include <poll.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rx_util.h"

static int n_cancelled, n_other;

static void count(int res)
{
	if (res == -ECANCELED)
		n_cancelled++;
	else
		n_other++;
}

static void on_read(struct rx_read *r, int res) { count(res); }
static void on_recv(struct rx_recv *r, int res) { count(res); }
static void on_poll(struct rx_poll *p, int res) { count(res); }
static void on_timer(struct rx_timer *t, int res) { count(res); }
static void on_signal(struct rx_signal *s, int signo) { count(signo); }

static void on_child(struct rx_child *c, int res)
{
	count(res);
	rx_child_kill(c, SIGKILL);
}

static void on_accept(struct rx_accept *a, int fd, bool final)
{
	if (final)
		count(fd);
	else
		n_other++;
}

static void on_wake(struct rx_wake *w, struct rx_wake_node *node)
{
	count(node ? 0 : -ECANCELED);
}

static int listen_unix(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	T_ASSERT(fd >= 0);
	/* abstract name: nothing to clean up on disk */
	snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "rx_cancel.%d",
		 (int)getpid());
	T_ASSERT(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	T_ASSERT(listen(fd, 16) == 0);
	return fd;
}

int main(void)
{
	char *sleeper[] = { "sleep", "30", NULL };
	struct rx_spawn_opts o = { .argv = sleeper, .stdin_fd = -1,
				   .stdout_fd = -1, .stderr_fd = -1 };
	struct rx_read r = { 0 }, r1 = { 0 };
	struct rx_recv rv = { 0 };
	struct rx_poll p = { 0 };
	struct rx_timer t = { 0 };
	struct rx_child c = { 0 };
	struct rx_accept a = { 0 };
	struct rx_wake w = { 0 };
	struct rx_signal s = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), pfd[2], sv[2], lfd;
	char buf[16], buf2[16];
	sigset_t mask;
	siginfo_t si;

	T_ASSERT(pipe(pfd) == 0);
	T_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	lfd = listen_unix();
	T_OK(rx_loop_init(&loop, 0));

	/* one op, cancelled by hand */
	T_OK(rx_read_start(&loop, &r1, pfd[0], buf, sizeof(buf), 0, -1, 0,
			   on_read));
	T_EQ_INT(rx_run_once(&loop, 0), 0);
	T_OK(rx_cancel(&r1.op));
	RX_RUN_UNTIL(&loop, n_cancelled == 1, 5000);
	T_EQ_INT(loop.active, 0);
	T_EQ_INT(rx_cancel(&r1.op), -ENOENT);

	/* one of each kind, cancelled by rx_loop_close */
	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	T_OK(rx_read_start(&loop, &r, pfd[0], buf, sizeof(buf), 0, -1, 0,
			   on_read));
	T_OK(rx_recv_start(&loop, &rv, sv[0], buf2, sizeof(buf2), 0, 4,
			   on_recv));
	T_OK(rx_poll_start(&loop, &p, sv[1], POLLIN, on_poll));
	T_OK(rx_timer_start(&loop, &t, 60ull * 1000000000ull, on_timer));
	T_OK(rx_spawn(&loop, &c, &o, on_child));
	T_OK(rx_accept_start(&loop, &a, lfd, on_accept));
	T_OK(rx_wake_init(&loop, &w, on_wake));
	T_OK(rx_signal_start(&loop, &s, &mask, on_signal));
	T_EQ_INT(loop.active, 8);
	T_EQ_INT(rx_run_once(&loop, 10), 0);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(n_cancelled, 1 + 8);
	T_EQ_INT(n_other, 0);
	/* the sleeper was killed from its callback; reap it */
	T_ASSERT(waitid((idtype_t)P_PIDFD, (id_t)c.pidfd, &si, WEXITED) == 0);
	rx_child_close(&c);
	T_EQ_INT(rx_timer_start(&loop, &t, 1, on_timer), -ESHUTDOWN);
	close(pfd[0]);
	close(pfd[1]);
	close(sv[0]);
	close(sv[1]);
	close(lfd);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
