// SPDX-License-Identifier: MIT
/* The worker pool: work runs on pool threads and every after function on
 * the loop's thread; rx_run returns once the pool is idle; jobs finish in
 * any order (one job waits for a later one's after); 10,000 jobs through 4
 * threads each run once; the queue bound (-EAGAIN); cancel before start
 * (-ECANCELED, delivered later on the loop) and of a running job (-EBUSY);
 * an after that queues more work; a job that runs while the loop serves a
 * timer. Closing with jobs queued and running: rx_work_close.c. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>

#include "rx_util.h"

struct job {
	struct rx_work w; /* first: the callbacks cast back */
	int id;
	int ran;          /* times work ran */
	int afters;       /* times after ran */
	int status;
	pthread_t worker;
	sem_t *gate;      /* work waits for it, when set */
	sem_t *started;   /* work posts it first, when set */
};

static struct rx_loop loop;
static pthread_t loop_thread;
static int afters_total, wrong_thread;

static void job_work(struct rx_work *w)
{
	struct job *j = (struct job *)w;

	j->worker = pthread_self();
	if (j->started)
		sem_post(j->started);
	if (j->gate)
		while (sem_wait(j->gate) < 0)
			;
	j->ran++;
}

static void job_after(struct rx_work *w, int status)
{
	struct job *j = (struct job *)w;

	if (!pthread_equal(pthread_self(), loop_thread))
		wrong_thread++;
	j->afters++;
	j->status = status;
	afters_total++;
}

/* Each job's work on a pool thread, its after on the loop's; rx_run
 * returns by itself once nothing is pending (an idle pool is no live
 * handle), and it does not return before. */
static void test_threads(void)
{
	struct job jobs[8] = { 0 };
	struct rx_pool pool;
	int i;

	T_OK(rx_pool_init(&pool, &loop, 4, 8));
	T_ASSERT(!rx_loop_alive(&loop));
	for (i = 0; i < 8; i++)
		T_OK(rx_queue_work(&pool, &jobs[i].w, job_work, job_after));
	T_ASSERT(rx_loop_alive(&loop));
	T_EQ_INT(pool.pending, 8);
	afters_total = 0;
	T_OK(rx_run(&loop));
	T_EQ_INT(afters_total, 8);
	T_EQ_INT(wrong_thread, 0);
	for (i = 0; i < 8; i++) {
		T_EQ_INT(jobs[i].ran, 1);
		T_EQ_INT(jobs[i].afters, 1);
		T_EQ_INT(jobs[i].status, 0);
		T_ASSERT(!pthread_equal(jobs[i].worker, loop_thread));
	}
	T_CMP_INT(pool.threads, <=, 4);
	T_CMP_INT(pool.threads, >=, 1);
	T_ASSERT(!rx_loop_alive(&loop));
	/* a job pending cannot be queued twice; a NULL work is refused */
	T_OK(rx_queue_work(&pool, &jobs[0].w, job_work, NULL));
	T_EQ_INT(rx_queue_work(&pool, &jobs[0].w, job_work, job_after), -EBUSY);
	T_EQ_INT(rx_queue_work(&pool, &jobs[1].w, NULL, job_after), -EINVAL);
	T_OK(rx_run(&loop));
	T_EQ_INT(jobs[0].ran, 2);
	T_EQ_INT(jobs[0].afters, 1); /* no after: none called */
	rx_pool_close(&pool);
}

/* Job 0 waits until job 1's after has run: completions come in any order,
 * and a job that blocks does not hold the others up. */
static sem_t order_gate;
static int order_seen[2], order_n;

static void order_after(struct rx_work *w, int status)
{
	struct job *j = (struct job *)w;

	T_EQ_INT(status, 0);
	order_seen[order_n++] = j->id;
	if (j->id == 1)
		sem_post(&order_gate);
}

static void test_order(void)
{
	struct job jobs[2] = { { .id = 0, .gate = &order_gate }, { .id = 1 } };
	struct rx_pool pool;

	T_ASSERT(sem_init(&order_gate, 0, 0) == 0);
	T_OK(rx_pool_init(&pool, &loop, 2, 2));
	T_OK(rx_queue_work(&pool, &jobs[0].w, job_work, order_after));
	T_OK(rx_queue_work(&pool, &jobs[1].w, job_work, order_after));
	RX_RUN_UNTIL(&loop, order_n == 2, 10000);
	T_EQ_INT(order_seen[0], 1);
	T_EQ_INT(order_seen[1], 0);
	rx_pool_close(&pool);
	sem_destroy(&order_gate);
}

#define MANY 10000

struct sum_job {
	struct rx_work w;
	uint64_t in, out;
	int afters;
};

static uint64_t many_sum;
static int many_done;

static void sum_work(struct rx_work *w)
{
	struct sum_job *j = (struct sum_job *)w;
	uint64_t x = j->in | 1, i;

	for (i = 0; i < 64; i++)
		t_xorshift(&x);
	j->out = x;
}

static void sum_after(struct rx_work *w, int status)
{
	struct sum_job *j = (struct sum_job *)w;

	T_EQ_INT(status, 0);
	T_ASSERT(pthread_equal(pthread_self(), loop_thread));
	j->afters++;
	many_sum += j->out;
	many_done++;
}

/* 10,000 jobs through 4 threads: each runs once, and its result (not its
 * order) is checked against the same work done here. */
static void test_many(void)
{
	struct sum_job *jobs = calloc(MANY, sizeof(*jobs));
	struct rx_pool pool;
	uint64_t want = 0;
	int i;

	T_ASSERT(jobs);
	T_OK(rx_pool_init(&pool, &loop, 4, MANY));
	for (i = 0; i < MANY; i++) {
		jobs[i].in = (uint64_t)i * 2654435761u;
		T_OK(rx_queue_work(&pool, &jobs[i].w, sum_work, sum_after));
	}
	T_OK(rx_run(&loop));
	T_EQ_INT(many_done, MANY);
	for (i = 0; i < MANY; i++) {
		struct sum_job ref = { .in = jobs[i].in };

		T_EQ_INT(jobs[i].afters, 1);
		sum_work(&ref.w);
		want += ref.out;
	}
	T_EQ_U64(many_sum, want);
	T_CMP_INT(pool.threads, <=, 4);
	rx_pool_close(&pool);
	free(jobs);
}

/* One thread, room for two waiting: a third waiting job is -EAGAIN. A job
 * cancelled before it starts never runs, and its after comes later from the
 * loop with -ECANCELED; a running one cannot be cancelled. */
static void test_bound_cancel(void)
{
	sem_t gate, started;
	struct job a = { .gate = &gate, .started = &started };
	struct job b = { 0 }, c = { 0 }, d = { 0 }, never = { 0 };
	struct rx_pool pool;

	T_ASSERT(sem_init(&gate, 0, 0) == 0 && sem_init(&started, 0, 0) == 0);
	T_OK(rx_pool_init(&pool, &loop, 1, 2));
	T_EQ_INT(rx_cancel_work(&never.w), -ENOENT);
	T_OK(rx_queue_work(&pool, &a.w, job_work, job_after));
	while (sem_wait(&started) < 0)
		;
	T_OK(rx_queue_work(&pool, &b.w, job_work, job_after));
	T_OK(rx_queue_work(&pool, &c.w, job_work, job_after));
	T_EQ_INT(rx_queue_work(&pool, &d.w, job_work, job_after), -EAGAIN);
	T_EQ_INT(pool.pending, 3);
	T_EQ_INT(rx_cancel_work(&a.w), -EBUSY);  /* running */
	T_OK(rx_cancel_work(&b.w));
	T_EQ_INT(b.afters, 0);                    /* not inside the cancel */
	T_EQ_INT(rx_cancel_work(&b.w), -EBUSY);  /* its after is due */
	/* the cancelled job freed its place in the queue */
	T_OK(rx_queue_work(&pool, &d.w, job_work, job_after));
	afters_total = 0;
	RX_RUN_UNTIL(&loop, b.afters == 1, 5000);
	T_EQ_INT(b.status, -ECANCELED);
	T_EQ_INT(b.ran, 0);
	T_EQ_INT(a.afters, 0);                    /* still held by its gate */
	sem_post(&gate);
	T_OK(rx_run(&loop));
	T_EQ_INT(afters_total, 4);
	T_EQ_INT(a.status, 0);
	T_EQ_INT(c.status, 0);
	T_EQ_INT(d.status, 0);
	T_EQ_INT(a.ran + b.ran + c.ran + d.ran, 3);
	T_EQ_INT(rx_cancel_work(&c.w), -ENOENT); /* done and after'd */
	T_EQ_INT(pool.threads, 1);
	T_EQ_INT(wrong_thread, 0);
	rx_pool_close(&pool);
	sem_destroy(&gate);
	sem_destroy(&started);
}

/* An after that queues its own job again, 100 times, and a new one. */
static struct rx_pool chain_pool;
static struct job chain, chain_extra;
static int chain_n;

static void chain_after(struct rx_work *w, int status)
{
	T_EQ_INT(status, 0);
	if (++chain_n < 100)
		T_OK(rx_queue_work(&chain_pool, w, job_work, chain_after));
	else
		T_OK(rx_queue_work(&chain_pool, &chain_extra.w, job_work,
				   job_after));
}

static void test_chain(void)
{
	T_OK(rx_pool_init(&chain_pool, &loop, 2, 1));
	T_OK(rx_queue_work(&chain_pool, &chain.w, job_work, chain_after));
	afters_total = 0;
	T_OK(rx_run(&loop));
	T_EQ_INT(chain_n, 100);
	T_EQ_INT(chain.ran, 100);
	T_EQ_INT(chain_extra.ran, 1);
	T_EQ_INT(afters_total, 1);
	rx_pool_close(&chain_pool);
}

/* A job that runs until the loop's timer has fired five times: the loop
 * keeps serving while a pool thread is busy (a fill worker for a load). */
static sem_t long_gate;
static int ticks;

static void on_tick(struct rx_timer *t, int res)
{
	T_EQ_INT(res, 0);
	if (++ticks < 5)
		T_OK(rx_timer_start(&loop, t, 2 * 1000000ull, on_tick));
	else
		sem_post(&long_gate);
}

static void test_long(void)
{
	struct job j = { .gate = &long_gate };
	struct rx_timer t = { 0 };
	struct rx_pool pool;

	T_ASSERT(sem_init(&long_gate, 0, 0) == 0);
	T_OK(rx_pool_init(&pool, &loop, 1, 1));
	T_OK(rx_queue_work(&pool, &j.w, job_work, job_after));
	T_OK(rx_timer_start(&loop, &t, 2 * 1000000ull, on_tick));
	afters_total = 0;
	RX_RUN_UNTIL(&loop, j.afters == 1, 10000);
	T_EQ_INT(ticks, 5);
	T_EQ_INT(j.status, 0);
	rx_pool_close(&pool);
	sem_destroy(&long_gate);
}

int main(void)
{
	int fds0 = rx_test_fd_count();
	struct rx_pool pool;

	loop_thread = pthread_self();
	T_OK(rx_loop_init(&loop, 0));
	T_EQ_INT(rx_pool_init(&pool, &loop, 0, 1), -EINVAL);
	T_EQ_INT(rx_pool_init(&pool, &loop, RX_POOL_THREADS_MAX + 1, 1),
		 -EINVAL);
	T_EQ_INT(rx_pool_init(&pool, &loop, 1, 0), -EINVAL);
	test_threads();
	test_order();
	test_many();
	test_bound_cancel();
	test_chain();
	test_long();
	T_EQ_INT(loop.unref, 0);
	T_EQ_INT(loop.active, 0);
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	printf("rx_work: threads, order, %d jobs, bound and cancel, chain, "
	       "long job beside a timer\n", MANY);
	return 0;
}
