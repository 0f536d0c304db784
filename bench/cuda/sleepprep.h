/* SPDX-License-Identifier: MIT */
/*
 * sleepprep's two files: sleepprep.c (the ways of sleeping, main) and
 * sleepprep_steps.c (each step alone, the warm-up, the D2H ceiling), and
 * what they share: the pieces, their host buffers and the threaded ops on
 * a range.
 */
#ifndef SLEEPPREP_H
#define SLEEPPREP_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define PIECE (2ull << 30)      /* one host buffer (wcd's pools: 1916 MiB) */
#define HUGE (2ull << 20)
#define NMAX 64                 /* pieces at most: 128 GiB */
#define SUBMAX 16               /* sub-registrations of a piece at most */

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); fflush(stdout); exit(1); } } while (0)

/* what on_threads runs on each range */
enum { OP_TOUCH, OP_POPULATE, OP_REG, OP_UNREG, OP_UNMAP };

/* One piece's host buffer. */
struct buf {
	char *p;
	int split;
	int vmm;
	CUmemGenericAllocationHandle h;
	double t_map, t_touch, t_reg;   /* phases of its preparation */
};

extern size_t total;            /* bytes: npieces x PIECE */
extern int npieces;
extern char *dev;               /* total bytes on the device, all 7 */
extern double ceil_s;           /* the best D2H into registered memory */
extern struct buf bufs[NMAX];

/* Runs op on p[0..n) split into k ranges (2 MiB aligned), one thread each
 * (inline when k is 1): 0, or the last range's error. */
int on_threads(char *p, size_t n, int k, int op);
/* One piece's copy, one cudaMemcpy per range of a piece registered as
 * split ranges (one may not cross two registrations). */
void copy_sub(char *dst, char *src, int split, enum cudaMemcpyKind kind);

/* sleepprep_steps.c */
void components(void);
void warm(size_t gib);
void ceiling(char *h);

/* madvise's populate (Linux 5.14) where the C library's headers predate it */
#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#endif
