/* SPDX-License-Identifier: MIT */
/*
 * Hash workers for the loader: XXH3-128 off the loop's thread.
 *
 * One XXH3 stream is sequential, so a tensor is hashed by one worker, its
 * pieces in order; parallelism comes from hashing several tensors at once
 * (the staged loader keeps one tensor in flight per worker: its "lanes").
 * Each worker owns one hasher state and a FIFO of jobs; a job is a piece of
 * rows (first/last of its tensor marked). When a job is done the worker
 * posts its node through the rx_wake given at start (thread-safe), and the
 * loop's callback gets it.
 *
 * Bounds: at most HASHPOOL_MAX workers; jobs are caller-owned (the queue
 * is intrusive), so the queue needs no allocation.
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
	uint64_t ns;                  /* set by the worker: time spent */
};

struct hworker {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hjob *head, *tail;
	bool stop;
	bool started;
	struct rx_wake *done;
	struct base_hasher hasher;      /* the worker's tensor in progress */
};

struct hashpool {
	unsigned n;
	struct hworker w[HASHPOOL_MAX];
};

/* Starts n workers (1..HASHPOOL_MAX) that post finished jobs to done. */
int hashpool_start(struct hashpool *hp, unsigned n, struct rx_wake *done);
/* Queues j on worker k (k < n). Loop thread only. */
void hashpool_submit(struct hashpool *hp, unsigned k, struct hjob *j);
/* Lets queued jobs finish, then joins the workers. */
void hashpool_stop(struct hashpool *hp);

#endif
