/* SPDX-License-Identifier: MIT */
/*
 * The raw O_DIRECT read rate of a set of files: the limit a cold load is
 * measured against. io_uring, QD reads of CHUNK bytes in flight, the files
 * one after another in order (as a loader walks shards), into one aligned
 * buffer per slot; the data is not looked at.
 *
 *   gpu_dread [--qd N] [--chunk MiB] [--buffered] FILE...
 *
 * --buffered reads through the page cache instead (IOSQE_ASYNC: each read
 * runs on an io-wq worker, so QD reads copy out of the cache in parallel):
 * the read limit of a warm load.
 *
 * Prints bytes, seconds and GB/s (1e9 bytes per second). Drop the page
 * cache first for a cold number (O_DIRECT bypasses it anyway, but a file
 * system may still serve from cache on some setups).
 * Bounds: QD at most 256, chunk at most 256 MiB, 4096 files.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define QD_MAX 256
#define FILES_MAX 4096

int main(int argc, char **argv)
{
	unsigned qd = 32, chunk_mib = 8, nfiles = 0, cur = 0, inflight = 0, i;
	int oflags = O_RDONLY | O_DIRECT | O_CLOEXEC;
	static int fds[FILES_MAX];
	static uint64_t sizes[FILES_MAX];
	uint64_t off = 0, total = 0, done = 0;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	unsigned char *buf;
	size_t chunk;
	double t0, dt;
	int a, ret;

	for (a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--qd") && a + 1 < argc) {
			qd = (unsigned)atoi(argv[++a]);
		} else if (!strcmp(argv[a], "--chunk") && a + 1 < argc) {
			chunk_mib = (unsigned)atoi(argv[++a]);
		} else if (!strcmp(argv[a], "--buffered")) {
			oflags &= ~O_DIRECT;
		} else if (nfiles < FILES_MAX) {
			struct stat st;

			fds[nfiles] = open(argv[a], oflags);
			if (fds[nfiles] < 0 || fstat(fds[nfiles], &st)) {
				fprintf(stderr, "gpu_dread: %s: %s\n", argv[a], strerror(errno));
				return 1;
			}
			sizes[nfiles++] = (uint64_t)st.st_size;
			total += (uint64_t)st.st_size;
		}
	}
	if (!nfiles || !qd || qd > QD_MAX || !chunk_mib || chunk_mib > 256) {
		fprintf(stderr, "usage: gpu_dread [--qd 1..%d] [--chunk 1..256 MiB] FILE...\n", QD_MAX);
		return 2;
	}
	chunk = (size_t)chunk_mib << 20;
	if (posix_memalign((void **)&buf, 4096, chunk * qd))
		return 1;
	ret = io_uring_queue_init(qd, &ring, 0);
	if (ret < 0) {
		fprintf(stderr, "gpu_dread: io_uring: %s\n", strerror(-ret));
		return 1;
	}
	t0 = clock_secs();
	for (;;) {
		/* fill every free slot with the next chunk */
		while (inflight < qd && cur < nfiles) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			unsigned slot = (unsigned)((done + inflight) % qd);

			io_uring_prep_read(sqe, fds[cur], buf + (size_t)slot * chunk,
					   (unsigned)chunk, off);
			if (!(oflags & O_DIRECT))
				sqe->flags |= IOSQE_ASYNC;
			inflight++;
			off += chunk;
			if (off >= sizes[cur]) {
				cur++;
				off = 0;
			}
		}
		if (!inflight)
			break;
		io_uring_submit_and_wait(&ring, 1);
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			if (cqe->res < 0) {
				fprintf(stderr, "gpu_dread: read: %s\n", strerror(-cqe->res));
				return 1;
			}
			io_uring_cqe_seen(&ring, cqe);
			inflight--;
			done++;
		}
	}
	dt = clock_secs() - t0;
	printf("%s read, %u files, QD %u x %u MiB: %llu bytes in %.3f s: %.2f GB/s\n",
	       oflags & O_DIRECT ? "O_DIRECT" : "buffered", nfiles, qd, chunk_mib, (unsigned long long)total, dt, total / dt / 1e9);
	for (i = 0; i < nfiles; i++)
		close(fds[i]);
	io_uring_queue_exit(&ring);
	free(buf);
	return 0;
}
