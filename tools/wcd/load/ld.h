/* SPDX-License-Identifier: MIT */
/* wcd's loader: what its files share (struct ld, one load in progress;
 * struct ld_path, one way of filling the pools) and ld.c's helpers over
 * them. See load.c for the design. */
#ifndef WCD_LD_H
#define WCD_LD_H

#include <stdbool.h>
#include <stdint.h>

#include "base.h"
#include "err.h"
#include "daemon/daemon.h"

#define LD_DIO_ALIGN 4096u

struct ld;

/* One load path: what load_run calls, in this order, for the path it
 * chose (load.c: choose_path). setup: the path's state (L->priv), before
 * the pools are made (the device's context may still be in the making);
 * start: the fill begins, the pools made, and load_run turns the loop
 * until L->finished; finish: after the fill, the hashes the fill left,
 * then ld_fill_over; teardown: frees the state, whatever came before
 * (also after a failed setup); describe: the read, copy and hash phases'
 * log lines, read_ns being the read phase. */
struct ld_path {
	const char *name;         /* "staged", "splice", "read" */
	bool o_direct;            /* shards also opened O_DIRECT */
	bool hash_in_read;        /* the hashes overlap the read phase */
	int (*setup)(struct ld *L, char *err);
	int (*start)(struct ld *L, char *err);
	void (*finish)(struct ld *L);
	void (*teardown)(struct ld *L);
	void (*describe)(struct ld *L, uint64_t read_ns);
};

/* One load in progress: what every path shares. */
struct ld {
	struct wcd *d;
	struct wcd_version *v;
	const struct gpu_backend *be;
	const struct ld_path *path;
	void *priv;               /* the path's state */
	int *fd;                  /* per shard: buffered */
	int *dfd;                 /* per shard: O_DIRECT, or -1 */
	uint32_t ndirect;         /* shards read with O_DIRECT */
	uint64_t total, done_bytes, read_bytes;
	uint64_t start_ns, last_progress_ns;
	uint64_t read_ns;         /* the read phase (ld_fill_over) */
	uint64_t copy_ns;         /* copy submissions (staged), else 0 */
	uint64_t hash_ns;         /* time spent hashing */
	uint64_t hash_phase_ns;   /* the hash phase as reported (finish) */
	int err;
	char errbuf[BASE_ERR_LEN];
	bool finished;            /* the fill is done: load_run's wait ends */
	uint8_t *hashed;          /* per entry: hashed by the fill, or NULL */
};

/* ld.c */
void ld_fail(struct ld *L, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void ld_progress(struct ld *L);
/* Turns d's loop until fd is readable or ns have passed: 0 with *res the
 * poll's result (> 0 readable, -ETIME past the deadline, -ECANCELED: the
 * loop failed, or the daemon is stopping and stopping(arg), asked each
 * turn while it is, said to give up), or rx_poll_start's error. */
int ld_wait_readable(struct wcd *d, int fd, uint64_t ns,
		     bool (*stopping)(void *arg), void *arg, int *res);
const char *ld_shard_name(struct ld *L, uint32_t shard);
/* After the fill: every shard is checked against what model_open saw
 * before its header read (model.h: inode, size, times) and its header
 * bytes are read and hashed again; the path must still name that file.
 * The first one that changed fails the load (ld_fail), naming the file,
 * what changed and both values. Costs per shard a stat, an fstat per
 * descriptor and a read of its header (usually in the page cache), on
 * the calling thread. */
void ld_check_shards(struct ld *L);
/* An alias's hash is its target's (the same bytes). */
void ld_alias_hashes(struct wcd_version *v);
/* The fill is over: the read phase ends here (L->read_ns, from
 * L->start_ns), and a stopping daemon fails the load. */
void ld_fill_over(struct ld *L);
/* The direct paths' hash phase: every entry not hashed yet (not marked in
 * L->hashed) from the pools' mappings, on --hash-threads jobs of the
 * worker pool (this thread does one share; with 0 or 1 it does all), the
 * loop turning meanwhile; adds to L->hash_ns. Outside every callback. */
void ld_hash_rest(struct ld *L);
/* The read phase's log line; what says which path filled the pools. */
void ld_log_read(struct ld *L, uint64_t read_ns, const char *what);
double ld_gbps(uint64_t bytes, uint64_t ns);
/* cachestat(2) (Linux 6.5) where the C library's headers predate it:
 * the same number on every architecture (load.c's cached_fraction) */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

#endif
