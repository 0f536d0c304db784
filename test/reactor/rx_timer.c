// SPDX-License-Identifier: MIT
/* A one-shot timer fires no earlier than asked; a stopped one reports
 * -ECANCELED; the loop is left with nothing active. */
#include "rx_util.h"

static int fired_res = 1;
static uint64_t fired_ns;

static void on_timer(struct rx_timer *t, int res)
{
	fired_res = res;
	fired_ns = rx_now_ns();
}

static int stopped_res = 1;

static void on_stopped(struct rx_timer *t, int res)
{
	stopped_res = res;
}

int main(void)
{
	struct rx_timer t = { 0 }, t2 = { 0 };
	struct rx_loop loop;
	uint64_t start;

	T_OK(rx_loop_init(&loop, 0));
	start = rx_now_ns();
	T_OK(rx_timer_start(&loop, &t, 20 * 1000000ull, on_timer));
	T_ASSERT(rx_op_busy(&t.op));
	T_OK(rx_timer_start(&loop, &t2, 60ull * 1000000000ull, on_stopped));
	RX_RUN_UNTIL(&loop, fired_res != 1, 5000);
	T_EQ_INT(fired_res, 0);
	T_CMP_INT(fired_ns - start, >=, 20 * 1000000ull);
	T_ASSERT(!rx_op_busy(&t.op));

	T_OK(rx_timer_stop(&t2));
	RX_RUN_UNTIL(&loop, stopped_res != 1, 5000);
	T_EQ_INT(stopped_res, -ECANCELED);
	T_EQ_INT(loop.active, 0);
	/* stopping an idle timer says so */
	T_EQ_INT(rx_timer_stop(&t2), -ENOENT);
	T_EQ_INT(rx_run(&loop), 0); /* nothing active: returns at once */
	T_OK(rx_loop_close(&loop));
	return 0;
}
