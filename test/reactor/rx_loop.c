// SPDX-License-Identifier: MIT
/* The loop itself: bad sizes refused, more operations than SQ entries
 * (the SQ is flushed and refilled), rx_run returning when nothing is active,
 * rx_loop_stop, and no re-entry from a callback. */
#include <errno.h>

#include "rx_util.h"

#define NTIMERS 100

static int fired;
static struct rx_loop loop;
static int reenter_res = 1;

static void on_timer(struct rx_timer *t, int res)
{
	T_EQ_INT(res, 0);
	fired++;
	if (fired == 1)
		reenter_res = rx_run_once(&loop, 0);
}

static int late_res = 1;

static void on_late(struct rx_timer *t, int res)
{
	late_res = res;
}

static void on_stop(struct rx_timer *t, int res)
{
	rx_loop_stop(t->op.loop);
}

int main(void)
{
	static struct rx_timer timers[NTIMERS], stopper, late;
	int fds0 = rx_test_fd_count(), i;

	T_EQ_INT(rx_loop_init(&loop, 1u << 20), -EINVAL);
	T_OK(rx_loop_init(&loop, 4));
	T_EQ_INT(loop.entries, 4);
	T_CMP_INT(loop.cq_entries, >=, 16);
	/* 100 timers through a 4-entry SQ */
	for (i = 0; i < NTIMERS; i++)
		T_OK(rx_timer_start(&loop, &timers[i],
				    (uint64_t)(i % 7) * 1000000, on_timer));
	T_EQ_INT(rx_run(&loop), 0);
	T_EQ_INT(fired, NTIMERS);
	T_EQ_INT(reenter_res, -EBUSY);
	T_EQ_INT(loop.active, 0);
	T_CMP_INT(loop.completions, >=, NTIMERS);
	T_OK(rx_loop_set_iowq_workers(&loop, 2, 0));
	T_EQ_INT(loop.iowq_bounded, 2);

	/* rx_loop_stop ends rx_run with work still active */
	T_OK(rx_timer_start(&loop, &stopper, 1000000, on_stop));
	T_OK(rx_timer_start(&loop, &late, 60ull * 1000000000ull, on_late));
	T_EQ_INT(rx_run(&loop), 0);
	T_EQ_INT(loop.active, 1);
	/* run_once(0) does not wait */
	T_EQ_INT(rx_run_once(&loop, 0), 0);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(late_res, -ECANCELED);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
