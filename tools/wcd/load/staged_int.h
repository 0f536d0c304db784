/* SPDX-License-Identifier: MIT */
/* load/staged.c's state: its slots, lanes and struct staged (L->priv).
 * Private to staged.c (staged.c's top has the design). */
#ifndef WCD_STAGED_INT_H
#define WCD_STAGED_INT_H

#include "load/hashpool.h"
#include "load/ld.h"

#define LD_COPY_STREAMS 4
#define LD_DEV_HASH_LANES 8   /* tensors in flight when the device hashes */

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

struct slot {                 /* one staging buffer */
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

/* A lane streams one tensor at a time; pieces of one tensor per lane are
 * interleaved so that the hash workers have one each. */
struct lane {
	uint32_t ti;
	uint64_t tpos;            /* next byte of the destination */
	bool active;
};

/* The staged path's state (L->priv). */
struct staged {
	struct ld *L;
	unsigned inflight;        /* slots not free */
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

#endif
