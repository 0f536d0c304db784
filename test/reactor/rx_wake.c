// SPDX-License-Identifier: MIT
/* 100,000 wake-ups handed from other threads (two producers, 50,000 each)
 * arrive in the loop's thread with none lost and in push order per thread;
 * rx_wake_close delivers what is left, then a final NULL. */
#include <pthread.h>
#include <stdlib.h>

#include "rx_util.h"

#define PRODUCERS 2
#define PER_THREAD 50000

struct item {
	struct rx_wake_node node; /* first: the callback casts back */
	int thread;
	int seq;
};

static struct rx_wake w;
static struct item *items[PRODUCERS];
static int next_seq[PRODUCERS];
static int received, out_of_order, closed;

static void on_wake(struct rx_wake *wk, struct rx_wake_node *node)
{
	struct item *it = (struct item *)node;

	if (!node) {
		closed++;
		return;
	}
	if (it->seq != next_seq[it->thread])
		out_of_order++;
	next_seq[it->thread] = it->seq + 1;
	received++;
}

static void *producer(void *arg)
{
	int t = (int)(intptr_t)arg, i;

	for (i = 0; i < PER_THREAD; i++) {
		items[t][i].thread = t;
		items[t][i].seq = i;
		rx_wake_post(&w, &items[t][i].node);
	}
	return NULL;
}

int main(void)
{
	pthread_t th[PRODUCERS];
	struct item last = { .thread = 0, .seq = PER_THREAD };
	struct rx_loop loop;
	int fds0 = rx_test_fd_count(), t;

	T_OK(rx_loop_init(&loop, 0));
	T_OK(rx_wake_init(&loop, &w, on_wake));
	for (t = 0; t < PRODUCERS; t++) {
		items[t] = calloc(PER_THREAD, sizeof(struct item));
		T_ASSERT(items[t]);
		T_ASSERT(pthread_create(&th[t], NULL, producer,
					(void *)(intptr_t)t) == 0);
	}
	RX_RUN_UNTIL(&loop, received == PRODUCERS * PER_THREAD, 30000);
	for (t = 0; t < PRODUCERS; t++)
		pthread_join(th[t], NULL);
	T_EQ_INT(received, PRODUCERS * PER_THREAD);
	T_EQ_INT(out_of_order, 0);
	for (t = 0; t < PRODUCERS; t++)
		T_EQ_INT(next_seq[t], PER_THREAD);

	/* a node posted just before close is still delivered, then NULL */
	rx_wake_post(&w, &last.node);
	T_OK(rx_wake_close(&w));
	RX_RUN_UNTIL(&loop, closed, 5000);
	T_EQ_INT(received, PRODUCERS * PER_THREAD + 1);
	T_EQ_INT(closed, 1);
	T_EQ_INT(w.efd, -1);
	T_OK(rx_loop_close(&loop));
	for (t = 0; t < PRODUCERS; t++)
		free(items[t]);
	T_EQ_INT(rx_test_fd_count(), fds0);
	return 0;
}
