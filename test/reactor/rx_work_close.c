// SPDX-License-Identifier: MIT
/* Closing a worker pool: with two jobs running and five queued,
 * rx_pool_close cancels the five (their afters come first, -ECANCELED),
 * serves the loop's timer while the running two finish (the timer lets
 * them go), runs their afters with 0, refuses new work from an after
 * (-ESHUTDOWN), joins the threads and leaves no thread or fd behind. An
 * open pool makes rx_loop_close -EBUSY; a pool closed before any job
 * started none. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>

#include "rx_util.h"

#define RUNNING 2
#define QUEUED 5

struct job {
	struct rx_work w; /* first */
	int ran, afters, status;
	int seq;          /* order of its after */
};

static struct rx_loop loop;
static struct rx_pool pool;
static pthread_t loop_thread;
static sem_t gate, started;
static int seq, closing, refused, tick_seq;
static struct job extra;

static int thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	T_ASSERT(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void held_work(struct rx_work *w)
{
	struct job *j = (struct job *)w;

	sem_post(&started);
	while (sem_wait(&gate) < 0)
		;
	j->ran++;
}

static void job_after(struct rx_work *w, int status)
{
	struct job *j = (struct job *)w;

	T_ASSERT(pthread_equal(pthread_self(), loop_thread));
	j->afters++;
	j->status = status;
	j->seq = ++seq;
	if (closing &&
	    rx_queue_work(&pool, &extra.w, held_work, job_after) == -ESHUTDOWN)
		refused++;
}

/* Fires inside rx_pool_close (which drives the loop while it waits) and
 * lets the running jobs return. */
static void on_tick(struct rx_timer *t, int res)
{
	int i;

	T_EQ_INT(res, 0);
	tick_seq = ++seq;
	for (i = 0; i < RUNNING; i++)
		sem_post(&gate);
}

int main(void)
{
	struct job jobs[RUNNING + QUEUED] = { 0 };
	int fds0 = rx_test_fd_count(), threads0 = thread_count(), threads1, i;
	struct rx_timer t = { 0 };
	struct rx_pool idle;

	loop_thread = pthread_self();
	T_ASSERT(sem_init(&gate, 0, 0) == 0 && sem_init(&started, 0, 0) == 0);
	T_OK(rx_loop_init(&loop, 0));

	/* a pool that never ran a job: no thread, nothing pending */
	T_OK(rx_pool_init(&idle, &loop, 4, 4));
	T_EQ_INT(rx_loop_close(&loop), -EBUSY);
	rx_pool_close(&idle);
	T_EQ_INT(idle.threads, 0);
	T_EQ_INT(rx_queue_work(&idle, &extra.w, held_work, job_after),
		 -ESHUTDOWN);

	T_OK(rx_pool_init(&pool, &loop, RUNNING, RUNNING + QUEUED));
	for (i = 0; i < RUNNING + QUEUED; i++)
		T_OK(rx_queue_work(&pool, &jobs[i].w, held_work, job_after));
	for (i = 0; i < RUNNING; i++)
		while (sem_wait(&started) < 0)
			;
	T_EQ_INT(pool.threads, RUNNING);
	/* (a sanitizer may start a thread of its own with the first) */
	threads1 = thread_count();
	T_CMP_INT(threads1, >=, threads0 + RUNNING);
	T_EQ_INT(rx_loop_close(&loop), -EBUSY);
	T_OK(rx_timer_start(&loop, &t, 20 * 1000000ull, on_tick));
	closing = 1;
	rx_pool_close(&pool);
	closing = 0;
	T_CMP_INT(tick_seq, >, 0);
	for (i = 0; i < RUNNING + QUEUED; i++) {
		T_EQ_INT(jobs[i].afters, 1);
		if (i < RUNNING) {
			/* they returned after the tick let them */
			T_EQ_INT(jobs[i].status, 0);
			T_EQ_INT(jobs[i].ran, 1);
			T_CMP_INT(jobs[i].seq, >, tick_seq);
		} else {
			/* cancelled, delivered before anything else */
			T_EQ_INT(jobs[i].status, -ECANCELED);
			T_EQ_INT(jobs[i].ran, 0);
			T_CMP_INT(jobs[i].seq, <, tick_seq);
		}
	}
	T_EQ_INT(refused, RUNNING + QUEUED);
	T_EQ_INT(extra.afters, 0);
	T_EQ_INT(thread_count(), threads1 - RUNNING);
	T_EQ_INT(loop.unref, 0);
	T_ASSERT(!rx_loop_alive(&loop));
	T_OK(rx_loop_close(&loop));
	T_EQ_INT(rx_test_fd_count(), fds0);
	sem_destroy(&gate);
	sem_destroy(&started);
	printf("rx_work_close: %d cancelled, %d waited for, threads joined\n",
	       QUEUED, RUNNING);
	return 0;
}
