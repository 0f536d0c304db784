/* SPDX-License-Identifier: MIT */
/* load/fill.c and load/fill_ahead.c: what the splice fill's workers (fill.c)
 * and its read-ahead (fill_ahead.c) share. See fill.c for the design. */
#ifndef WCD_FILL_INT_H
#define WCD_FILL_INT_H

#include <pthread.h>

#include "load/ld.h"

#define FILL_THREADS_MAX 8
#define FILL_CHUNK (8u << 20)
#define FILL_PIPE (1u << 20)

enum { RA_FAIL_NONE, RA_FAIL_OPEN, RA_FAIL_DRAIN, RA_FAIL_THREAD };

/* One fill in progress (fill_run's, on its stack). */
struct fill {
	struct ld *L;
	pthread_mutex_t mu;       /* the cursor and the first error */
	uint32_t ti;              /* next claim: piece ti at byte tpos */
	uint64_t tpos;
	uint64_t *left;           /* atomic, per entry: bytes still to land */
	uint32_t *gleft;          /* atomic, per group: members to land */
	int32_t *gview;           /* per group: its first view, or -1 */
	int32_t *vnext;           /* per entry: the group's next view, or -1 */
	int failed;               /* atomic: a worker failed */
	int stop;                 /* atomic: the loop asks them to stop */
	int refused;              /* atomic: splice was refused once */
	uint64_t done;            /* atomic: bytes landed */
	uint64_t hash_ns;         /* atomic: hashing inside the workers */
	unsigned running;         /* atomic: workers not yet done */
	int efd;                  /* written by the last worker */
	bool no_splice;           /* WCD_TEST_NO_SPLICE=1 */
	int64_t fail_piece;       /* WCD_TEST_FILL_FAIL: piece, or -1 */
	int fail_errno;           /* its errno (0: nothing moves) */
	bool fail_shard;          /* on splice's shard side */
	unsigned threads_max;     /* WCD_TEST_FILL_THREADS, else n */
	bool poll_fail;           /* WCD_TEST_FILL_POLL_FAIL=1 */
	bool efd_fail;            /* WCD_TEST_FILL_EVENTFD_FAIL=1 */
	int pipe_fail;            /* WCD_TEST_FILL_PIPE_FAIL: worker, or -1 */
	char nowatch[96];         /* why the loop cannot watch ("": it can) */
	int ra_fail;              /* WCD_TEST_RA_FAIL: RA_FAIL_* */
	int ra_gate;              /* atomic: with drain, the workers wait
				   * for the read-ahead's first chunk */
	unsigned n;
	unsigned due;             /* loop thread: jobs whose after is to come */
	pthread_cond_t done_cv;   /* under mu: running came to 0 */
	/* read-ahead (fill_ahead.c): at most `ahead` bytes past the claims,
	 * as a job of the worker pool */
	uint64_t ahead;
	uint64_t claimed;         /* under mu: bytes claimed so far */
	pthread_cond_t cv;        /* claimed moved, or the fill is over */
	bool over;                /* under mu */
	struct rx_work ra;
};


/* One claim: nrows rows of width bytes, the first at src in the shard,
 * each src_pitch after the previous one, landing contiguously at dst in
 * the pool. */
struct claim {
	uint32_t entry, shard;
	int in, out;
	uint64_t src, src_pitch, width, nrows, dst;
	bool inject;              /* WCD_TEST_FILL_FAIL: fail this one */
};

struct worker {
	struct rx_work work;      /* its job on the worker pool */
	struct fill *f;
	unsigned k;               /* 0 .. n - 1 */
	int pipe[2];
	uint64_t pipe_size;
	bool use_pread;
	bool inject;              /* the claim's WCD_TEST_FILL_FAIL, unspent */
	/* the last failure: the shard's offset, and whether the pool's side
	 * (the memfd) failed or took nothing */
	uint64_t fail_off;
	bool fail_dst, fail_zero;
};

/* fill_move.c: moves len bytes of claim c from the shard at src to the
 * pool at dst (base: its mapping), by splice or, once splice was refused,
 * pread: 0, -ENODATA where the file ends first, or -errno (w->fail_* say
 * where). */
int fill_move_range(struct worker *w, const struct claim *c, uint8_t *base,
		    uint64_t src, uint64_t dst, uint64_t len);
/* A pipe's contents after a failed splice are of no use: closes it. */
void fill_pipe_close(struct worker *w);
/* Fails the fill for claim c's move that answered ret, in one sentence
 * that names the shard, the offset, the tensor and the errno. */
void fill_fail_move(struct worker *w, const struct claim *c, int ret);

/* fill_ahead.c: queues the read-ahead on the worker pool where f->ahead
 * asks for it (else, or where it cannot be queued, f->ahead becomes 0,
 * one log line); fill_ahead_end tells it the fill is over (its after,
 * which counts f->due down, comes on the loop). */
void fill_ahead_start(struct fill *f);
void fill_ahead_end(struct fill *f);
#endif
