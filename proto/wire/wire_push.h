/* SPDX-License-Identifier: MIT */
/*
 * The update session of the wire protocol (prefix wire_push_): a trainer
 * pushes version N+1 from its own memory, no file in between. Pure codec,
 * as wire.h; the daemon's side is tools/wcd/push/, the client's
 * tools/libwcache/push.c.
 *
 * The conversation, one session per connection:
 *
 *   PUSH_OPEN    u32 flags (WIRE_PUSH_*: allow a layout change; partial;
 *                in place; keep the replaced version's pools as a spare),
 *                u64 base (the version the session
 *                replaces; 0: whichever is current), u32 timeout_ms (0:
 *                the daemon's default; at most WIRE_PUSH_TIMEOUT_MAX_MS).
 *     reply      u64 session, u64 version (N+1), u64 base (N), u32 tensors
 *                (checkpoint tensors to write), u64 bytes (their bytes on
 *                this rank), u32 timeout_ms (the bound in force), u32
 *                npools (<= WIRE_PUSH_POOLS_MAX), then npools x pool (the
 *                92 bytes of ATTACH's: wire.h), their descriptors as
 *                SCM_RIGHTS on the frame's first byte, in fd_index order,
 *                mapped read-write by this connection alone.
 *   PUSH_PLAN    u32 first, u32 max (0: as many as fit): where each
 *                checkpoint tensor's bytes go.
 *     reply      u32 total, u32 first, u32 count, then count x tensor: str
 *                name, str dtype, u8 ndim, ndim x u64 dims (the whole
 *                checkpoint tensor's shape, as the trainer holds it), u32
 *                pool, u64 offset (the rank's part in the pool), u64 size
 *                (its bytes), u32 npieces (<= WIRE_PUSH_PIECES_MAX), then
 *                npieces x piece: u64 src (byte offset in the source
 *                tensor), u64 width, u64 height, u64 pitch (source bytes
 *                between rows), u64 dst (offset inside the part). WIRE_F_MORE
 *                when first + count < total. Rows past the pieces (padded
 *                vocabularies) stay zero.
 *   PUSH_COMMIT  u64 session, u32 flags (WIRE_PUSH_COMMIT_PREPARE: check,
 *                seal and hash only; a second COMMIT, with no runs,
 *                publishes), u32 nruns (<= WIRE_PUSH_RUNS_MAX), then nruns
 *                x (u32 first, u32 count): the plan indices written, as
 *                runs; an index written twice is in two runs. The daemon
 *                checks that every tensor was written exactly once (naming
 *                the missing and the doubled; partial: at most once, the
 *                others keep N's bytes), seals, hashes and publishes.
 *     reply      the lifecycle reply (wire_life.h): the version now served,
 *                bytes, ns from open to publish, a line for people.
 *   PUSH_ABORT   u64 session. reply: empty. N+1 is freed.
 *
 * In place (WIRE_PUSH_IN_PLACE on PUSH_OPEN, for colocated RL where two
 * copies do not fit): the session rewrites the served version N's bytes,
 * and commit makes them version N+1 on the same pools (hashes recomputed),
 * so engines keep their mappings. Opened only while no client holding a
 * lease reads: every one has sent PAUSE (else refused, naming the pids).
 * The open reply's version is N+1 and its base N, as beside; its pools
 * are where the trainer writes (the served pools on a device; on the host
 * backend fresh memfds that commit copies into the served ones: their
 * F_SEAL_FUTURE_WRITE seal leaves only the daemon's own mapping
 * writable). Commit sends WIRE_NOTICE_IN_PLACE to every client holding a
 * lease; an abort, a deadline or the trainer's end marks N incomplete
 * (WIRE_NOTICE_INCOMPLETE): HELLO, MANIFEST and ATTACH are refused with a
 * sentence until a complete in-place session or a disk update.
 *
 *   PAUSE        u32 op (WIRE_PAUSE_ON: "I will not read the pools until
 *                I resume"; WIRE_PAUSE_OFF: resume). Per connection; a
 *                connection that closes is no longer counted.
 *     reply      the lifecycle reply (wire_life.h): the version the
 *                served pools hold, a line for people. A resume is
 *                refused (WIRE_E_BUSY) while an in-place session writes,
 *                and (WIRE_E_STATE) while the served version is
 *                incomplete: the connection stays paused.
 *
 * Bounds: every count is checked against its maximum and against the bytes
 * left before anything is allocated; strings as in wire.h.
 */
#ifndef WC_WIRE_PUSH_H
#define WC_WIRE_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define WIRE_PUSH_ALLOW_LAYOUT 0x1u   /* = WIRE_UPDATE_ALLOW_LAYOUT */
/* a partial update: tensors not written keep N's bytes (COMMIT may leave
 * them out) */
#define WIRE_PUSH_PARTIAL 0x2u
/* in place: rewrite the served version's pools (above) */
#define WIRE_PUSH_IN_PLACE 0x4u
/* keep the replaced version's device pools, once retired, as the next
 * session's N+1 (beside only: in place replaces no pools) */
#define WIRE_PUSH_KEEP_SPARE 0x8u
#define WIRE_PUSH_KNOWN (WIRE_PUSH_ALLOW_LAYOUT | WIRE_PUSH_PARTIAL | \
			 WIRE_PUSH_IN_PLACE | WIRE_PUSH_KEEP_SPARE)
#define WIRE_PUSH_TIMEOUT_MAX_MS (3600u * 1000) /* an hour */
#define WIRE_PUSH_POOLS_MAX 64        /* = GPU_POOLS_MAX (< one fd frame) */
#define WIRE_PUSH_TENSORS_MAX (1u << 20)  /* = WC_TENSORS_MAX */
#define WIRE_PUSH_PIECES_MAX 4096     /* pieces of one tensor */
/* COMMIT's runs: 8 bytes each, a request stays under the daemon's 64 KiB
 * request buffer (WCD_REQ_MAX) */
#define WIRE_PUSH_RUNS_MAX 8000      /* 8 + 64000 + 16 bytes */
#define WIRE_PUSH_PIECE_LEN 40
#define WIRE_PUSH_TENSOR_MIN 33       /* encoded bytes: empty strings, ndim 0 */

struct wire_push_open {
	uint32_t flags;
	uint64_t base;
	uint32_t timeout_ms;
};
void wire_push_open_put(struct wire_put *w, const struct wire_push_open *q);
int wire_push_open_get(const void *p, size_t n, struct wire_push_open *q,
		       char *err);

struct wire_push_opened {
	uint64_t session;
	uint64_t version;
	uint64_t base;
	uint32_t tensors;
	uint64_t bytes;
	uint32_t timeout_ms;
	uint32_t npools;
	struct wire_get cur;    /* decode: at the next pool */
	uint32_t seen;
};
void wire_push_opened_put(struct wire_put *w, const struct wire_push_opened *r);
int wire_push_opened_get(const void *p, size_t n, struct wire_push_opened *r,
			 char *err);
/* Decodes the next pool (call r->npools times; the last checks for
 * trailing bytes); nfds: descriptors that came with the frame. */
int wire_push_opened_next(struct wire_push_opened *r, unsigned nfds,
			  struct wire_pool *pl, char *err);

/* PLAN request: as MANIFEST's (wire_manifest_req). */
void wire_push_plan_req_put(struct wire_put *w, uint32_t first, uint32_t max);
int wire_push_plan_req_get(const void *p, size_t n, uint32_t *first,
			   uint32_t *max, char *err);

struct wire_push_piece {
	uint64_t src, width, height, pitch, dst;
};
struct wire_push_tensor {
	char name[WIRE_NAME_MAX + 1];
	char dtype[WIRE_DTYPE_MAX + 1];
	uint32_t ndim;
	uint64_t shape[WIRE_NDIM_MAX];
	uint32_t pool;
	uint64_t offset;
	uint64_t size;
	uint32_t npieces;
	const struct wire_push_piece *pieces; /* put: npieces of them */
};
struct wire_push_plan {
	uint32_t total;
	uint32_t first;
	uint32_t count;
	struct wire_get cur;
	uint32_t seen;
};
void wire_push_plan_head_put(struct wire_put *w,
			     const struct wire_push_plan *m);
/* -E2BIG (sticky) over a bound. */
void wire_push_tensor_put(struct wire_put *w, const struct wire_push_tensor *t);
size_t wire_push_tensor_size(const struct wire_push_tensor *t);
int wire_push_plan_get(const void *p, size_t n, struct wire_push_plan *m,
		       char *err);
/* The next tensor into t, its pieces into pc (room for
 * WIRE_PUSH_PIECES_MAX; t->pieces points at pc). */
int wire_push_plan_next(struct wire_push_plan *m, struct wire_push_tensor *t,
			struct wire_push_piece *pc, char *err);

struct wire_push_run {
	uint32_t first, count;
};
#define WIRE_PUSH_COMMIT_PREPARE 0x1u
#define WIRE_PUSH_COMMIT_KNOWN WIRE_PUSH_COMMIT_PREPARE
/* COMMIT: -E2BIG (sticky) for more than WIRE_PUSH_RUNS_MAX runs. */
void wire_push_commit_put(struct wire_put *w, uint64_t session,
			  uint32_t flags, const struct wire_push_run *runs,
			  uint32_t nruns);
/* *runs points into the payload (unaligned: read them with
 * wire_push_run_at); unknown flags are malformed. */
int wire_push_commit_get(const void *p, size_t n, uint64_t *session,
			 uint32_t *flags, const uint8_t **runs,
			 uint32_t *nruns, char *err);
struct wire_push_run wire_push_run_at(const uint8_t *runs, uint32_t i);

/* ABORT: u64 session. */
void wire_push_abort_put(struct wire_put *w, uint64_t session);
int wire_push_abort_get(const void *p, size_t n, uint64_t *session,
			char *err);

/* PAUSE: u32 op, WIRE_PAUSE_OFF or WIRE_PAUSE_ON (others malformed). */
#define WIRE_PAUSE_OFF 0u
#define WIRE_PAUSE_ON 1u
void wire_pause_put(struct wire_put *w, uint32_t op);
int wire_pause_get(const void *p, size_t n, uint32_t *op, char *err);

#endif
