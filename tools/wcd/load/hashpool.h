/* SPDX-License-Identifier: MIT */
/*
 * Hash workers for the loader: XXH3-128 off the loop's thread, as jobs of
 * the daemon's worker pool (reactor/work.c).
 *
 * One XXH3 stream is sequential, so a tensor is hashed in one lane, its
 * pieces in order; parallelism comes from hashing several tensors at once
 * (the staged loader keeps one tensor in flight per lane). Each lane owns
 * one hasher state and a FIFO of jobs; a job is a piece of rows (first/last
 * of its tensor marked). Up to n runners (pool jobs that last until
 * hashpool_stop) take the head of any lane no other runner is working, so
 * that pieces of a lane stay in order and a runner the pool could not start
 * yet holds up no lane. When a job is done the runner posts its node
 * through the rx_wake given at start (thread-safe), and the loop's callback
 * gets it.
 *
 * Bounds: at most HASHPOOL_MAX lanes and runners; jobs are caller-owned
 * (the queues are intrusive), so nothing is allocated per job. Costs: one
 * mutex over every lane, taken twice per job.
 */
#ifndef WCD_HASHPOOL_H
#define WCD_HASHPOOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "hash.h"
#include "wcreactor.h"

#define HASHPOOL_MAX 16

struct hjob {
	struct hjob *next;
	struct rx_wake_node node;     /* posted when done */
	const uint8_t *p;
	uint64_t width, height, pitch; /* rows of width bytes, pitch apart */
	bool first, last;             /* of its tensor */
	uint8_t *out;                 /* BASE_HASH_LEN bytes, written on last */
	uint64_t ns;                  /* set by the runner: time spent */
};

struct hlane {
	struct hjob *head, *tail;
	bool busy;                    /* a runner hashes its head */
	struct base_hasher hasher;    /* the lane's tensor in progress */
};

struct hrunner {
	struct rx_work work;
	struct hashpool *hp;
};

struct hashpool {
	unsigned n;                   /* lanes */
	unsigned runners;             /* jobs queued whose after is to come */
	pthread_mutex_t mu;
	pthread_cond_t cv;            /* a job was queued, a lane freed, stop */
	bool stop;                    /* under mu */
	struct rx_wake *done;
	struct hlane lane[HASHPOOL_MAX];
	struct hrunner r[HASHPOOL_MAX];
};

/* Sets up n lanes (1..HASHPOOL_MAX) and queues n runners on pool, that
 * post finished jobs to done. Loop thread only. 0, or -errno when not one
 * runner could be queued (fewer runners hash all n lanes, more slowly). */
int hashpool_start(struct hashpool *hp, struct rx_pool *pool, unsigned n,
		   struct rx_wake *done);
/* Queues j on lane k (k < n). Loop thread only. */
void hashpool_submit(struct hashpool *hp, unsigned k, struct hjob *j);
/* Lets queued jobs finish and asks the runners to end; the caller then
 * turns the loop until hashpool_stopped (their after functions run on it),
 * never from a callback. */
void hashpool_stop(struct hashpool *hp);
/* wcd_turn_until's test: every runner's after has run (hp may be freed). */
bool hashpool_stopped(void *hp);

#endif
