/* SPDX-License-Identifier: MIT */
/*
 * The splice fill's read-ahead (fill.c): one job of the worker pool that
 * reads the pieces into the page cache ahead of the fill's workers, with a
 * reader of its own (fill_ahead's comment says why), or POSIX_FADV_WILLNEED
 * where that reader cannot work.
 *
 * Bounds: at most --read-ahead bytes past the workers' claims; one pipe
 * (FILL_PIPE bytes), one more description of each shard.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load/fill_int.h"
#include "log.h"

/* The read-ahead's reader: its own open file description of each
 * shard (through /proc/self/fd, so the very file open_shards checked),
 * marked POSIX_FADV_SEQUENTIAL, read with splice into /dev/null (pages
 * move by reference: no copy). */
struct ra {
	int *fd;                  /* per shard, or -1 */
	uint32_t nfd;
	int pipe[2];
	int null;
	uint64_t pipe_size;
	bool fail_drain;          /* WCD_TEST_RA_FAIL=drain */
};

static void ra_close(struct ra *ra)
{
	for (uint32_t i = 0; ra->fd && i < ra->nfd; i++)
		if (ra->fd[i] >= 0)
			close(ra->fd[i]);
	free(ra->fd);
	ra->fd = NULL;
	if (ra->pipe[0] >= 0) {
		close(ra->pipe[0]);
		close(ra->pipe[1]);
	}
	ra->pipe[0] = ra->pipe[1] = -1;
	if (ra->null >= 0)
		close(ra->null);
	ra->null = -1;
}

/* 0, or -errno with *what naming the part that could not be had (the
 * caller closes ra either way). */
static int ra_open(struct ra *ra, struct ld *L, int fail, const char **what)
{
	uint32_t n = L->v->model.nshards;
	char path[64];
	int sz;

	*ra = (struct ra){ .pipe = { -1, -1 }, .null = -1,
			   .pipe_size = 65536,
			   .fail_drain = fail == RA_FAIL_DRAIN };
	*what = "its descriptor table";
	ra->fd = malloc((n ? n : 1) * sizeof(int));
	if (!ra->fd)
		return -ENOMEM;
	ra->nfd = n;
	for (uint32_t i = 0; i < n; i++)
		ra->fd[i] = -1;
	*what = "WCD_TEST_RA_FAIL=open";
	if (fail == RA_FAIL_OPEN)
		return -EMFILE;
	*what = "a pipe";
	if (pipe2(ra->pipe, O_CLOEXEC)) {
		ra->pipe[0] = ra->pipe[1] = -1;
		return -errno;
	}
	sz = fcntl(ra->pipe[1], F_SETPIPE_SZ, FILL_PIPE);
	if (sz > 0)
		ra->pipe_size = (uint64_t)sz;
	*what = "/dev/null";
	ra->null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (ra->null < 0)
		return -errno;
	for (uint32_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", L->fd[i]);
		*what = ld_shard_name(L, i);
		ra->fd[i] = open(path, O_RDONLY | O_CLOEXEC);
		if (ra->fd[i] < 0)
			return -errno;
		posix_fadvise(ra->fd[i], 0, 0, POSIX_FADV_SEQUENTIAL);
	}
	return 0;
}

/* Reads len bytes at off of shard i into the page cache: 0, or -errno
 * (-ENODATA where the file ends first; the caller falls back to
 * POSIX_FADV_WILLNEED, since the pipe may now hold bytes). */
static int ra_read(struct ra *ra, uint32_t i, uint64_t off, uint64_t len)
{
	while (len) {
		loff_t o = (loff_t)off;
		ssize_t k = splice(ra->fd[i], &o, ra->pipe[1], NULL,
				   len < ra->pipe_size ? (size_t)len :
							 (size_t)ra->pipe_size,
				   0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -ENODATA;
		for (ssize_t m = 0; m < k;) {
			ssize_t d;

			if (ra->fail_drain) {
				d = -1;
				errno = EIO;
			} else {
				d = splice(ra->pipe[0], NULL, ra->null, NULL,
					   (size_t)(k - m), 0);
			}
			if (d < 0 && errno == EINTR)
				continue;
			if (d <= 0)
				return d < 0 ? -errno : -EIO;
			m += d;
		}
		off += (uint64_t)k;
		len -= (uint64_t)k;
	}
	return 0;
}

/* The read-ahead job: walks the pieces in claim order and reads each
 * contiguous one into the page cache (FILL_CHUNK at a time) while it is
 * less than f->ahead bytes past what the workers have claimed, so that
 * the disk always has reads queued however the workers' own reads land.
 * Why a reader of its own: two workers splicing neighbouring chunks
 * through one file description defeat the kernel's sequential read-ahead
 * (a queue depth of 3-5), and POSIX_FADV_WILLNEED alone queues requests of
 * about 1.3 MiB where one sequential reader's read-ahead asks for 2.5 MiB
 * (bench/RESULTS.md: about 12% faster cold on the 2-core box). Where the
 * reader cannot be set up, or one of its reads fails, it is closed and
 * POSIX_FADV_WILLNEED on the workers' descriptors does for the rest of the
 * fill (one log line: the load itself is the workers'). Rows of a dim-1
 * split are left to the kernel: their spans hold other ranks' bytes. */
static void fill_ahead(struct rx_work *w)
{
	struct fill *f = container_of(w, struct fill, ra);
	const struct plan *p = &f->L->v->plan;
	uint64_t pos = 0;           /* bytes of the pieces walked so far */
	const char *what;
	struct ra ra;
	int ret = ra_open(&ra, f->L, f->ra_fail, &what);
	bool reader = !ret;

	if (ret) {
		log_info("read-ahead: cannot set up its reader (%s: %s): POSIX_FADV_WILLNEED instead",
			 what, strerror(-ret));
		ra_close(&ra);
	}
	for (uint32_t i = 0; i < p->npieces; i++) {
		const struct plan_piece *pc = &p->pc[i];
		bool flat = pc->height <= 1 || pc->src_pitch == pc->width;

		for (uint64_t o = 0; o < pc->size; o += FILL_CHUNK) {
			uint64_t len = pc->size - o < FILL_CHUNK ?
				       pc->size - o : FILL_CHUNK;
			bool over;

			pthread_mutex_lock(&f->mu);
			while (!f->over && pos > f->claimed + f->ahead)
				pthread_cond_wait(&f->cv, &f->mu);
			over = f->over;
			pthread_mutex_unlock(&f->mu);
			if (over)
				goto out;
			pos += len;
			if (flat && reader) {
				ret = ra_read(&ra, pc->shard, pc->file_off + o,
					      len);
				if (ret) {
					log_info("read-ahead: reading %s at offset %" PRIu64 " failed (%s): POSIX_FADV_WILLNEED for the rest of the load",
						 ld_shard_name(f->L, pc->shard),
						 pc->file_off + o,
						 strerror(-ret));
					ra_close(&ra);
					reader = false;
				}
			}
			if (flat && !reader)
				posix_fadvise(f->L->fd[pc->shard],
					      (off_t)(pc->file_off + o),
					      (off_t)len, POSIX_FADV_WILLNEED);
			__atomic_store_n(&f->ra_gate, 1, __ATOMIC_RELEASE);
		}
	}
out:
	__atomic_store_n(&f->ra_gate, 1, __ATOMIC_RELEASE);
	ra_close(&ra);
}

/* On the loop: the read-ahead has ended (or never ran). */
static void fill_ahead_after(struct rx_work *w, int status)
{
	struct fill *f = container_of(w, struct fill, ra);

	(void)status;
	if (status == -ECANCELED)   /* never ran: the workers may wait */
		__atomic_store_n(&f->ra_gate, 1, __ATOMIC_RELEASE);
	f->due--;
}

void fill_ahead_start(struct fill *f)
{
	int ret;

	if (!f->ahead)
		return;
	ret = f->ra_fail == RA_FAIL_THREAD ? -EAGAIN :
	      rx_queue_work(&f->L->d->work, &f->ra, fill_ahead,
			    fill_ahead_after);
	if (ret) {
		/* no job: the kernel's read-ahead only */
		log_info("read-ahead: its job cannot be queued on the worker pool (%s): the kernel's read-ahead only",
			 strerror(-ret));
		f->ahead = 0;
		f->ra_gate = 1;
		return;
	}
	f->due++;
}

void fill_ahead_end(struct fill *f)
{
	if (!f->ahead)
		return;
	pthread_mutex_lock(&f->mu);
	f->over = true;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
}
