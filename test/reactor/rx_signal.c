// SPDX-License-Identifier: MIT
/* SIGTERM and SIGINT arrive through the signalfd as callbacks, in the loop's
 * thread, instead of killing the process; closing ends with -ECANCELED and
 * closes the signalfd. */
#include <errno.h>
#include <unistd.h>

#include "rx_util.h"

static int got[3], ended = 1;

static void on_signal(struct rx_signal *s, int signo)
{
	if (signo < 0) {
		ended = signo;
		return;
	}
	if (signo == SIGTERM)
		got[0]++;
	else if (signo == SIGINT)
		got[1]++;
	else
		got[2]++;
}

int main(void)
{
	struct rx_signal s = { 0 };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count();
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	T_OK(rx_loop_init(&loop, 0));
	T_OK(rx_signal_start(&loop, &s, &mask, on_signal));
	T_ASSERT(rx_test_cloexec(s.sfd));
	T_ASSERT(kill(getpid(), SIGTERM) == 0);
	RX_RUN_UNTIL(&loop, got[0] == 1, 5000);
	T_ASSERT(kill(getpid(), SIGINT) == 0);
	RX_RUN_UNTIL(&loop, got[1] == 1, 5000);
	T_EQ_INT(got[2], 0);
	T_OK(rx_signal_close(&s));
	RX_RUN_UNTIL(&loop, ended != 1, 5000);
	T_EQ_INT(ended, -ECANCELED);
	T_EQ_INT(s.sfd, -1);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
