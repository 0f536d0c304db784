/* SPDX-License-Identifier: MIT */
/* wcd's loader: what its files share (struct ld, one load in progress)
 * and ld.c's helpers over it. See load.c for the design. */
#ifndef WCD_LD_H
#define WCD_LD_H

#include <stdbool.h>
#include <stdint.h>

#include "base.h"
#include "err.h"
#include "load/hashpool.h"
#include "daemon/daemon.h"

#define LD_DIO_ALIGN 4096u
#define LD_COPY_STREAMS 4
#define LD_DEV_HASH_LANES 8   /* tensors in flight when the device hashes */

struct ld;

struct dread {                /* direct path: one read in flight */
	struct rx_read r;
	struct ld *L;
	uint64_t len;
	uint32_t shard;           /* for the messages */
};

/* A staging slot goes round FREE -> READING -> READ -> BUSY -> FREE
 * (slot_to asserts it): READING while its read (or its parts) is in
 * flight, READ once it is back (or failed), BUSY while its copy and hash
 * run. */
enum slot_state { SLOT_FREE, SLOT_READING, SLOT_READ, SLOT_BUSY };

/* A buffered (page-cache) read of a slot is split into parts of at most
 * --read-part bytes (o.read_part, WCD_READ_PART_DEFAULT; at most
 * LD_PARTS_MAX parts, larger ones when the slot needs more), read at once
 * by as many io-wq workers: the copy out
 * of the page cache is the warm load's CPU work, and more copiers on a
 * smaller staging ring kept in cache beat fewer on a larger one
 * (bench/RESULTS.md). O_DIRECT reads stay whole. */
#define LD_PARTS_MAX 16

struct part {
	struct rx_read r;
	struct slot *s;
	uint64_t len;             /* asked; all of it must come back */
};

struct slot {                 /* staged path: one staging buffer */
	struct rx_read r;         /* the O_DIRECT read */
	struct part part[LD_PARTS_MAX]; /* the buffered read's parts */
	unsigned parts_left;
	int part_err;
	struct rx_wake_node node; /* copy done */
	struct hjob hjob;         /* hash done (hash workers) */
	struct ld *L;
	int idx;
	uint8_t *buf;
	enum slot_state state;
	unsigned busy;            /* copy and hash still running */
	uint64_t seq;
	unsigned lane;
	uint32_t ti;              /* plan entry the piece belongs to */
	uint32_t shard;
	bool direct;              /* read with O_DIRECT */
	uint64_t read_off, read_len;
	uint64_t delta;           /* first wanted byte in the slot */
	uint64_t need;            /* bytes the read must deliver */
	uint64_t dst_off;         /* in the pool */
	uint64_t width, height, src_pitch;
	bool first, last;         /* of its piece */
	bool stream;              /* hash it on the way (ld_streamed) */
	int copy_res;
};

static inline void slot_to(struct slot *s, enum slot_state to)
{
	WC_ASSERT(s->state == (to == SLOT_FREE ? SLOT_BUSY : to - 1));
	s->state = to;
}

/* A lane streams one tensor at a time; the staged path interleaves pieces
 * of one tensor per lane so that the hash workers have one each. */
struct lane {
	uint32_t ti;
	uint64_t tpos;            /* next byte of the destination */
	bool active;
};

struct ld {
	struct wcd *d;
	struct wcd_version *v;
	const struct gpu_backend *be;
	int *fd;                  /* per shard: buffered */
	int *dfd;                 /* per shard: O_DIRECT, or -1 */
	uint64_t total, done_bytes, read_bytes;
	uint64_t start_ns, last_progress_ns;
	uint64_t hash_ns, copy_ns;
	int err;
	char errbuf[BASE_ERR_LEN];
	unsigned inflight;        /* reads, or slots not free */
	bool finished;
	/* direct: the next read is of piece ti at byte tpos */
	uint32_t ti;
	uint64_t tpos;
	struct dread reads[WCD_READ_DEPTH];
	struct dread *free_reads[WCD_READ_DEPTH];
	unsigned nfree_reads;
	/* direct, splice fill (fill.c): entries hashed by its workers */
	uint8_t *hashed;
	uint64_t fill_hash_ns;
	/* staged */
	unsigned nslots;
	uint64_t slot_size;
	uint8_t *ring;            /* nslots * slot_size: one staging_alloc */
	struct slot *slots;
	struct slot *pending[WCD_SLOTS_MAX]; /* by seq % nslots */
	uint64_t next_seq, hash_seq;
	unsigned nlanes, rr;
	struct lane lanes[HASHPOOL_MAX];
	uint32_t next_ti;         /* next piece a lane takes */
	struct base_hasher hasher;  /* hashing on the loop thread */
	struct hashpool hp;
	bool hp_started;
	struct rx_wake wake, hwake;
	bool wake_open, hwake_open;
	bool fixed;
	/* hashes on the device (backend hash_*) */
	bool dev_hash, dev_hash_begun;
	uint64_t dev_hash_steps, hash_tail_ns;
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
#endif
