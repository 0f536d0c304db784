/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "load/hashpool.h"

static void *hworker_main(void *arg)
{
	struct hworker *w = arg;

	for (;;) {
		struct hjob *j;
		uint64_t t0;

		pthread_mutex_lock(&w->mu);
		while (!w->head && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		j = w->head;
		if (j) {
			w->head = j->next;
			if (!w->head)
				w->tail = NULL;
		}
		pthread_mutex_unlock(&w->mu);
		if (!j)
			return NULL;      /* stop, and nothing left */
		t0 = rx_now_ns();
		if (j->first)
			base_hasher_init(&w->hasher);
		for (uint64_t r = 0; r < j->height; r++)
			base_hasher_update(&w->hasher, j->p + r * j->pitch,
					 j->width);
		if (j->last)
			base_hasher_final(&w->hasher, j->out);
		j->ns = rx_now_ns() - t0;
		rx_wake_post(w->done, &j->node);
	}
}

int hashpool_start(struct hashpool *hp, unsigned n, struct rx_wake *done)
{
	int ret;

	memset(hp, 0, sizeof(*hp));
	if (n < 1 || n > HASHPOOL_MAX)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		struct hworker *w = &hp->w[i];

		pthread_mutex_init(&w->mu, NULL);
		pthread_cond_init(&w->cv, NULL);
		w->done = done;
		ret = pthread_create(&w->thread, NULL, hworker_main, w);
		if (ret) {
			pthread_mutex_destroy(&w->mu);
			pthread_cond_destroy(&w->cv);
			hashpool_stop(hp);
			return -ret;
		}
		w->started = true;
		hp->n = i + 1;
	}
	return 0;
}

void hashpool_submit(struct hashpool *hp, unsigned k, struct hjob *j)
{
	struct hworker *w = &hp->w[k];

	j->next = NULL;
	pthread_mutex_lock(&w->mu);
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void hashpool_stop(struct hashpool *hp)
{
	for (unsigned i = 0; i < hp->n; i++) {
		struct hworker *w = &hp->w[i];

		pthread_mutex_lock(&w->mu);
		w->stop = true;
		pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&w->mu);
	}
	for (unsigned i = 0; i < hp->n; i++) {
		struct hworker *w = &hp->w[i];

		if (w->started)
			pthread_join(w->thread, NULL);
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
	}
	hp->n = 0;
}
