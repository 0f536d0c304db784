// SPDX-License-Identifier: MIT
/*
 * The worker pool (wcreactor.h, libuv's uv_queue_work): a mutex-guarded
 * doubly linked queue of jobs not yet started, threads that take its head,
 * and one rx_wake that carries each finished (or cancelled) job back to the
 * loop's thread, where its after function runs. A job moves
 * IDLE -> QUEUED -> RUNNING -> DUE -> IDLE, or QUEUED -> DUE when cancelled;
 * the mutex guards every change but the last, which only the loop's thread
 * makes, after the wake-up has handed the job over (the push is a release,
 * the take an acquire: nothing of a pool thread touches the job after it).
 *
 * Liveness: the wake-up is an active operation of the loop like any other;
 * while no job is pending it is counted in loop->unref, so that rx_run
 * returns when nothing else is active (libuv unrefs its async handle so).
 *
 * Costs: two lock round-trips per job on its thread, one on the loop's;
 * the eventfd is written once per batch of completions, not per job.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "base.h"
#include "internal.h"

enum {
	RX_WORK_IDLE,    /* not queued, or its after has run */
	RX_WORK_QUEUED,  /* waiting in the queue */
	RX_WORK_RUNNING, /* its work runs on a pool thread */
	RX_WORK_DUE,     /* posted to the loop: after(w, status) comes */
};

/* Whether the pool's wake-up keeps rx_run going (loop thread only). */
static void rx_pool_ref(struct rx_pool *p, bool ref)
{
	if (p->reffed == ref)
		return;
	p->reffed = ref;
	if (ref)
		p->loop->unref--;
	else
		p->loop->unref++;
}

/* The wake-up's callback, on the loop's thread: one job's after, or the
 * wake-up's end (node NULL) during rx_pool_close. */
static void rx_pool_deliver(struct rx_wake *wk, struct rx_wake_node *node)
{
	struct rx_pool *p = container_of(wk, struct rx_pool, wake);
	struct rx_work *w;
	rx_after_work_fn after;
	int status;

	if (!node) {
		p->wake_closed = true;
		return;
	}
	w = container_of(node, struct rx_work, node);
	WC_ASSERT(w->state == RX_WORK_DUE && w->pool == p && p->pending > 0);
	after = w->after;
	status = w->status;
	w->state = RX_WORK_IDLE;
	if (--p->pending == 0 && !p->closing)
		rx_pool_ref(p, false);
	if (after)
		after(w, status); /* may free w or queue it again */
}

/* Under p->mu. */
static void rx_pool_unlink(struct rx_pool *p, struct rx_work *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		p->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		p->tail = w->prev;
	w->next = w->prev = NULL;
	p->queued--;
}

/* A pool thread: takes the queue's head until the pool closes. */
static void *rx_pool_thread(void *arg)
{
	struct rx_pool *p = arg;
	struct rx_work *w;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->head && !p->closing) {
			p->idle++;
			pthread_cond_wait(&p->cond, &p->mu);
			p->idle--;
		}
		w = p->head;
		if (!w)
			break; /* closing, and the close emptied the queue */
		rx_pool_unlink(p, w);
		w->state = RX_WORK_RUNNING;
		pthread_mutex_unlock(&p->mu);
		w->work(w);
		pthread_mutex_lock(&p->mu);
		w->status = 0;
		w->state = RX_WORK_DUE;
		pthread_mutex_unlock(&p->mu);
		rx_wake_post(&p->wake, &w->node); /* w is the loop's from here */
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* Starts one more thread (under p->mu), with every signal blocked: a
 * process-directed signal then goes to a thread that has it unblocked, or
 * waits for the loop's signalfd, and never kills the process through a
 * worker that took it. */
static int rx_pool_spawn(struct rx_pool *p)
{
	sigset_t all, old;
	int ret;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&p->tids[p->threads], NULL, rx_pool_thread, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		return -ret;
	p->threads++;
	return 0;
}

int rx_pool_init(struct rx_pool *p, struct rx_loop *loop,
		 unsigned threads_max, unsigned queue_max)
{
	int ret;

	if (!threads_max || threads_max > RX_POOL_THREADS_MAX || !queue_max)
		return -EINVAL;
	if (loop->closing)
		return -ESHUTDOWN;
	memset(p, 0, sizeof(*p));
	p->loop = loop;
	p->threads_max = threads_max;
	p->queue_max = queue_max;
	ret = pthread_mutex_init(&p->mu, NULL);
	if (ret)
		return -ret;
	ret = -pthread_cond_init(&p->cond, NULL);
	if (ret)
		goto out_mutex;
	ret = rx_wake_init(loop, &p->wake, rx_pool_deliver);
	if (ret < 0)
		goto out_cond;
	p->reffed = true;
	rx_pool_ref(p, false);
	loop->pools++;
	return 0;

out_cond:
	pthread_cond_destroy(&p->cond);
out_mutex:
	pthread_mutex_destroy(&p->mu);
	return ret;
}

int rx_queue_work(struct rx_pool *p, struct rx_work *w, rx_work_fn work,
		  rx_after_work_fn after)
{
	int ret = 0;

	if (!work)
		return -EINVAL;
	if (p->closing)
		return -ESHUTDOWN;
	pthread_mutex_lock(&p->mu);
	if (w->state != RX_WORK_IDLE)
		ret = -EBUSY;
	else if (p->queued >= p->queue_max)
		ret = -EAGAIN;
	if (ret)
		goto out_unlock;
	w->pool = p;
	w->work = work;
	w->after = after;
	w->status = 0;
	w->state = RX_WORK_QUEUED;
	w->next = NULL;
	w->prev = p->tail;
	if (p->tail)
		p->tail->next = w;
	else
		p->head = w;
	p->tail = w;
	p->queued++;
	if (p->idle < p->queued && p->threads < p->threads_max) {
		ret = rx_pool_spawn(p);
		if (ret < 0 && !p->threads) {
			rx_pool_unlink(p, w);
			w->state = RX_WORK_IDLE;
			goto out_unlock;
		}
		ret = 0; /* the threads there are will take it */
	}
	p->pending++;
	rx_pool_ref(p, true);
	pthread_cond_signal(&p->cond);
out_unlock:
	pthread_mutex_unlock(&p->mu);
	return ret;
}

int rx_cancel_work(struct rx_work *w)
{
	struct rx_pool *p = w->pool;
	int ret;

	if (!p)
		return -ENOENT;
	pthread_mutex_lock(&p->mu);
	switch (w->state) {
	case RX_WORK_QUEUED:
		rx_pool_unlink(p, w);
		w->status = -ECANCELED;
		w->state = RX_WORK_DUE;
		ret = 0;
		break;
	case RX_WORK_IDLE:
		ret = -ENOENT;
		break;
	default:
		ret = -EBUSY;
		break;
	}
	pthread_mutex_unlock(&p->mu);
	if (!ret)
		rx_wake_post(&p->wake, &w->node);
	return ret;
}

/* Cancels the queue, then drives the loop until every job's after has run
 * (the cancelled ones first, then the running ones as they return: the loop
 * serves its other operations meanwhile), joins the threads, which leave as
 * soon as they find the queue empty, and ends the wake-up. */
void rx_pool_close(struct rx_pool *p)
{
	struct rx_loop *loop = p->loop;
	struct rx_work *w, *cancelled;
	unsigned i;
	int ret;

	WC_ASSERT(!rx_loop_in_callback(loop) && !p->closing);
	pthread_mutex_lock(&p->mu);
	p->closing = true;
	cancelled = p->head;
	for (w = cancelled; w; w = w->next) {
		w->status = -ECANCELED;
		w->state = RX_WORK_DUE;
	}
	p->head = p->tail = NULL;
	p->queued = 0;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
	rx_pool_ref(p, true); /* an ordinary operation until it ends */
	while (cancelled) {
		w = cancelled;
		cancelled = w->next;
		w->next = w->prev = NULL;
		rx_wake_post(&p->wake, &w->node);
	}
	while (p->pending) {
		ret = rx_run_once(loop, -1);
		WC_ASSERT(ret >= 0);
	}
	for (i = 0; i < p->threads; i++)
		pthread_join(p->tids[i], NULL);
	p->threads = 0;
	while (rx_wake_close(&p->wake) == -EBUSY)
		rx_run_once(loop, 0); /* no SQE: the CQ was backed up */
	while (!p->wake_closed) {
		ret = rx_run_once(loop, -1);
		WC_ASSERT(ret >= 0);
	}
	p->reffed = false; /* its operation has ended */
	loop->pools--;
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->mu);
}
