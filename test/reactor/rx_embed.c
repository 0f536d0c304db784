// SPDX-License-Identifier: MIT
/* Embedding the reactor in an engine's own poll() loop: rx_loop_fd polls
 * readable when completions wait, rx_run_once(0) handles them. The marked
 * region is quoted verbatim in reactor/README.md (checked by
 * test/reactor/rx_readme.sh). */
#include <poll.h>
#include <unistd.h>

#include "t.h"
#include "wcreactor.h"

/* --- README: embedding --- */
static int ticks;

static void on_tick(struct rx_timer *t, int res)
{
	if (res == 0 && ++ticks < 3)
		rx_timer_start(t->op.loop, t, 10 * 1000000ull, on_tick);
}

static int engine_main(void)
{
	struct rx_timer tick = { 0 };
	struct rx_loop loop;
	int ret = rx_loop_init(&loop, 0);

	if (ret < 0)
		return ret;
	rx_timer_start(&loop, &tick, 10 * 1000000ull, on_tick);
	while (loop.active) {
		/* the engine's own fds would sit beside the reactor's */
		struct pollfd pfd = { rx_loop_fd(&loop), POLLIN, 0 };

		rx_run_once(&loop, 0);          /* submit what was queued */
		if (poll(&pfd, 1, 1000) < 0)
			break;
		if (pfd.revents & POLLIN)
			rx_run_once(&loop, 0);  /* handle the batch, no wait */
	}
	return rx_loop_close(&loop);
}
/* --- end --- */

int main(void)
{
	struct pollfd pfd;
	struct rx_timer t = { 0 };
	struct rx_loop loop;

	T_OK(engine_main());
	T_EQ_INT(ticks, 3);

	/* the fd is not readable before a completion, readable after */
	T_OK(rx_loop_init(&loop, 0));
	T_OK(rx_timer_start(&loop, &t, 20 * 1000000ull, on_tick));
	T_EQ_INT(rx_run_once(&loop, 0), 0);
	pfd = (struct pollfd){ .fd = rx_loop_fd(&loop), .events = POLLIN };
	T_EQ_INT(poll(&pfd, 1, 0), 0);
	T_EQ_INT(poll(&pfd, 1, 5000), 1);
	T_ASSERT(pfd.revents & POLLIN);
	T_EQ_INT(rx_run_once(&loop, 0), 1);
	T_EQ_INT(ticks, 4);
	T_OK(rx_loop_close(&loop));
	return 0;
}
