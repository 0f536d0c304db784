/* SPDX-License-Identifier: MIT */
/*
 * life/verify.c: every tensor's hash computed again from a version's
 * pools and compared with its manifest: on the device where the backend
 * can (its hash_* calls), else read back through a bounce buffer. A wake
 * checks so (overlapped with its copies: life_hash_pool_steps, then
 * life_verify_end), and a handover's --takeover-verify hash.
 */
#ifndef WCD_LIFE_VERIFY_H
#define WCD_LIFE_VERIFY_H

#include <stdint.h>

#include "daemon/daemon.h"

#define LIFE_VERIFY_CHUNK (8u << 20)  /* bounce buffer for device hashes */

/* Hashes every tensor from v's pools (on the device where the backend
 * can: 16 hash chains, nothing copied back but the hashes) and compares
 * with v->hash; the number that differ (the first named in err), or
 * -errno. */
int life_verify_pools(struct wcd *d, struct wcd_version *v, char *err);
/* Queues the device hash of every tensor of pool p (every pool: p ==
 * UINT32_MAX) longer than GPU_HASH_MIN_LEN, after what copy stream
 * `stream` has queued so far, on a device hash begun (be->hash_begin) over
 * v's tensors. 0, or -errno with err set. */
int life_hash_pool_steps(struct wcd *d, struct wcd_version *v, uint32_t p,
			 unsigned stream, char *err);
/* Ends such a hash (those of at most GPU_HASH_MIN_LEN bytes are read back
 * and hashed here) and compares with v's manifest: the number of tensors
 * that differ (the first named in err), or -errno; on a failure the hash
 * is abandoned. */
int life_verify_end(struct wcd *d, struct wcd_version *v, char *err);

#endif
