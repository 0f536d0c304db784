/* SPDX-License-Identifier: MIT */
/*
 * wcd's push/ folder: version N+1 written from a trainer's memory (an
 * update session; the wire side is proto/wire/wire_push.h).
 *
 *   push.c       the requests' dispatch, the folder's API (this header)
 *   push_open.c  PUSH_OPEN and the job that opens (push_open.h)
 *   push_commit.c PUSH_COMMIT: coverage, the two halves (push_commit.h)
 *   push_session.c the session's state and its ends: abort, deadline,
 *                the trainer's end (push_session.h)
 *   push_keep.c  a commit's bytes: a partial update's kept tensors, the
 *                hashes (push_keep.h)
 *   push_plan.c  the PUSH_PLAN reply: where each checkpoint tensor's
 *                pieces go (push_plan.h)
 *   push_asleep.c a session while the daemon sleeps at level 2: the
 *                commit wakes it into N+1 (push_asleep.h)
 *   push_inplace.c an in-place session's commit: the served version's
 *                bytes rewritten, its number bumped (push_inplace.h)
 *   push_pause.c engines' PAUSE, and what an in-place session refuses
 *                (push_pause.h)
 *
 * The life of a session, one per daemon at a time (d->push):
 *
 *   IDLE --PUSH_OPEN--> OPENING --job--> WRITING --PUSH_COMMIT--> IDLE
 *                          |                | \  (N+1 published)     ^
 *                          |                |  COMMIT(prepare)       |
 *                          |                |   \--> PREPARED --COMMIT
 *                          +--refused-------+--PUSH_ABORT, deadline,
 *                                              connection closed--> IDLE
 *                                              (N+1 freed, N serves on)
 *
 * HASHING (host pools): a COMMIT's first half on the worker pool, from
 * WRITING; at its end the commit goes on (published or PREPARED), or, if
 * the trainer's connection closed or the deadline passed meanwhile, the
 * session aborts. PLAN, COMMIT and ABORT are refused as busy meanwhile.
 *
 * PREPARED (a commit in two halves, for several ranks committed
 * together): coverage checked, sealed, hashed, not yet published; the
 * second COMMIT only publishes, which cannot fail, so a trainer that
 * prepared every rank before publishing any publishes all of them or, if
 * a prepare failed and it aborts the others, none.
 *
 * One at a time because the daemon holds two versions (WCD_VERSIONS): the
 * served one and the one being written; a disk update is refused while a
 * session is open, and a session while an update loads, both through the
 * daemon's UPDATING state, which the session holds from its open to its
 * end (life_busy words the refusal of UPDATE and SLEEP then).
 *
 * Open: N+1's plan is made from the served directory's headers as a load
 * makes it (load_prepare: a few small reads, no tensor bytes), or is the
 * plan of the version retired last while those files are unchanged
 * (load_prepare_again, version_planned), and must
 * equal N's layout (names, dtypes, shapes) unless the trainer allows a
 * layout change; its pools are created as a load creates them
 * (load_pools_alloc; fresh memfds read as zeros, device pools' padded
 * rows are zeroed: load_zero_padding)
 * and sent to the trainer's connection alone, writable, unsealed. Engines
 * see none of it: N+1 is no resident version (not used) until commit, so
 * HELLO, MANIFEST and ATTACH serve N throughout.
 *
 * Commit: the trainer says which tensors it wrote; every checkpoint tensor
 * of the plan must be written exactly once (the missing and the doubled
 * are named); the pools are sealed (host: F_SEAL_WRITE, refused while the
 * trainer still maps them writable), hashed from the pools (cuda: on
 * the device, every tensor side by side, only the hashes read back; host
 * pools: XXH3-128 over the mapping, about 10 GB/s, on the worker pool
 * (HASHING: the loop serves meanwhile); cuda --hash-on cpu: on the loop
 * through staging memory), and
 * published as a disk update publishes (version_publish: the notice, N
 * freed with its last lease; the ready file rewritten).
 *
 * In place (WIRE_PUSH_IN_PLACE; push_inplace.c, push_pause.c): the same
 * life, with N's pools rewritten instead of N+1 beside: opened only while
 * every engine holding a lease has paused; HELLO, MANIFEST, ATTACH and
 * resumes refused while it is open; commit rehashes N's pools and
 * renumbers them N+1; every other end marks N incomplete (refusals until
 * a complete update). push_inplace.c says where the bytes go per backend.
 *
 * Partial (WIRE_PUSH_PARTIAL): the trainer writes some tensors; at commit
 * the others get N's bytes (a copy on the host: the layouts are equal, so
 * each keeps its place; the backend's pool_copy, on the device for cuda,
 * one copy per run of neighbours) and N's hashes, and only the written
 * tensors and the views over them are hashed.
 */
#ifndef WCD_PUSH_H
#define WCD_PUSH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/daemon.h"
#include "push/push_session.h"

struct wcd_client;

/* PUSH_OPEN, PUSH_PLAN, PUSH_COMMIT, PUSH_ABORT, PAUSE (requests.c). */
void push_request(struct wcd_client *c, const uint8_t *p, uint32_t n);
/* Runs a queued open (serve() calls it between turns of the loop, as a
 * lifecycle job); true when one ran. */
bool push_run_job(struct wcd *d);
/* server_hooks.client_gone: a trainer's connection ends its session. */
void push_client_gone(struct wcd *d, struct wcd_client *c);
/* Frees the session state at exit, after the loop closed (a session
 * still open is freed with it: its connection's end normally ended it). */
void push_free(struct wcd *d);

/* The refusal of HELLO, MANIFEST, ATTACH while an in-place session
 * writes or the served version is incomplete (push_pause.h), or NULL. */
const char *push_refusal(struct wcd *d, unsigned type);

/* For STATUS (struct push_info: push_session.h). */
void push_info(struct wcd *d, struct push_info *out);

#endif
