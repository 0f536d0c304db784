/* SPDX-License-Identifier: MIT */
/*
 * push_keep.c: the bytes and hashes a commit makes (push.h has the
 * folder's map): a partial update's tensors kept from version N, and the
 * hashes of N+1.
 */
#ifndef WCD_PUSH_KEEP_H
#define WCD_PUSH_KEEP_H

#include <stdint.h>

#include "daemon/daemon.h"

/* A partial update, before the seal: every checkpoint tensor i < nck not
 * written (written[i] == 0) gets N's bytes (d's current version's entry
 * of the same index: the layouts are equal, push_open.c checked) through
 * the backend's pool_copy (cuda: on the device), and keep[] (nv's
 * entries) marks the entries whose hash is N's: those copied, and the
 * views over none of the written bytes. *kept: the bytes kept. In place
 * nothing is copied: the served pools hold the kept bytes (on a device
 * the trainer wrote them, nv is N; on the host the commit copies in what
 * was written alone, push_inplace.c). 0 or -errno with err set. */
int push_keep(struct wcd *d, struct wcd_version *nv, uint32_t nck,
	      const uint8_t *written, bool in_place, uint8_t *keep,
	      uint64_t *kept, char *err);
/* Every entry's XXH3-128 from v's sealed pools (entries with keep[i] take
 * cur's; keep may be NULL), aliases their target's: on the device where
 * the backend hashes (cuda, unless --hash-on cpu), else the CPU over the
 * host mapping or through a bounce buffer of staging memory. 0 or -errno
 * with err set. */
int push_hash(struct wcd *d, struct wcd_version *v,
	      const struct wcd_version *cur, const uint8_t *keep, char *err);

#endif
