/* SPDX-License-Identifier: MIT */
/*
 * test/lib's t_count (t_wait.h), what the GPU tests wait on for a
 * backend's completions: a wait ends when other threads' additions reach
 * the count (not on a clock), and after its bound when they do not.
 */
#include <errno.h>
#include <pthread.h>

#include "clock.h"
#include "t.h"
#include "t_wait.h"

#define ADDERS 4
#define ADDS 1000

static struct t_count count;

static void *adder(void *arg)
{
	(void)arg;
	for (int i = 0; i < ADDS; i++)
		t_count_add(&count, 1);
	return NULL;
}

int main(void)
{
	pthread_t th[ADDERS];
	uint64_t t0;

	t_count_init(&count);
	for (int i = 0; i < ADDERS; i++)
		T_EQ_INT(pthread_create(&th[i], NULL, adder, NULL), 0);
	T_EQ_INT(t_count_wait(&count, ADDERS * ADDS, 10000), 0);
	T_EQ_INT(t_count_get(&count), ADDERS * ADDS);
	for (int i = 0; i < ADDERS; i++)
		pthread_join(th[i], NULL);
	/* a count that is not reached: the bound, and no sooner */
	t_count_set(&count, 0);
	t0 = clock_ns();
	T_EQ_INT(t_count_wait(&count, 1, 100), -ETIMEDOUT);
	T_CMP_INT((int)((clock_ns() - t0) / 1000000), >=, 99);
	/* reached already: at once */
	t_count_add(&count, 2);
	T_EQ_INT(t_count_wait(&count, 2, 0), 0);
	printf("ok\n");
	return 0;
}
