/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "base.h"
#include "load/hashpool.h"

/* Under hp->mu: the head of a lane no runner works, or NULL. */
static struct hjob *take(struct hashpool *hp, struct hlane **out)
{
	for (unsigned i = 0; i < hp->n; i++) {
		struct hlane *l = &hp->lane[i];
		struct hjob *j = l->head;

		if (!j || l->busy)
			continue;
		l->head = j->next;
		if (!l->head)
			l->tail = NULL;
		l->busy = true;
		*out = l;
		return j;
	}
	return NULL;
}

/* A runner, on a pool thread: hashes jobs until stopped with none left. */
static void runner_main(struct rx_work *work)
{
	struct hashpool *hp = container_of(work, struct hrunner, work)->hp;
	struct hlane *l;

	pthread_mutex_lock(&hp->mu);
	for (;;) {
		struct hjob *j = take(hp, &l);
		uint64_t t0;

		if (!j) {
			if (hp->stop)
				break;
			pthread_cond_wait(&hp->cv, &hp->mu);
			continue;
		}
		pthread_mutex_unlock(&hp->mu);
		t0 = rx_now_ns();
		if (j->first)
			base_hasher_init(&l->hasher);
		for (uint64_t r = 0; r < j->height; r++)
			base_hasher_update(&l->hasher, j->p + r * j->pitch,
					 j->width);
		if (j->last)
			base_hasher_final(&l->hasher, j->out);
		j->ns = rx_now_ns() - t0;
		rx_wake_post(hp->done, &j->node);
		pthread_mutex_lock(&hp->mu);
		l->busy = false;
		pthread_cond_broadcast(&hp->cv);  /* its next job is free */
	}
	pthread_mutex_unlock(&hp->mu);
}

/* On the loop: a runner has ended (or was cancelled: the others, or
 * hashpool_stop's caller, finish the lanes). */
static void runner_after(struct rx_work *work, int status)
{
	struct hashpool *hp = container_of(work, struct hrunner, work)->hp;

	(void)status;
	if (--hp->runners == 0) {
		pthread_cond_destroy(&hp->cv);
		pthread_mutex_destroy(&hp->mu);
	}
}

int hashpool_start(struct hashpool *hp, struct rx_pool *pool, unsigned n,
		   struct rx_wake *done)
{
	int ret = 0;

	memset(hp, 0, sizeof(*hp));
	if (n < 1 || n > HASHPOOL_MAX)
		return -EINVAL;
	hp->n = n;
	hp->done = done;
	pthread_mutex_init(&hp->mu, NULL);
	pthread_cond_init(&hp->cv, NULL);
	for (unsigned i = 0; i < n; i++) {
		hp->r[i] = (struct hrunner){ .hp = hp };
		ret = rx_queue_work(pool, &hp->r[i].work, runner_main,
				    runner_after);
		if (ret)
			break;
		hp->runners++;
	}
	if (hp->runners)
		return 0;
	pthread_cond_destroy(&hp->cv);
	pthread_mutex_destroy(&hp->mu);
	return ret;
}

void hashpool_submit(struct hashpool *hp, unsigned k, struct hjob *j)
{
	struct hlane *l = &hp->lane[k];

	j->next = NULL;
	pthread_mutex_lock(&hp->mu);
	if (l->tail)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
	pthread_cond_signal(&hp->cv);
	pthread_mutex_unlock(&hp->mu);
}

void hashpool_stop(struct hashpool *hp)
{
	if (!hp->runners)
		return;
	pthread_mutex_lock(&hp->mu);
	hp->stop = true;
	pthread_cond_broadcast(&hp->cv);
	pthread_mutex_unlock(&hp->mu);
}

bool hashpool_stopped(void *arg)
{
	return ((struct hashpool *)arg)->runners == 0;
}
