/* SPDX-License-Identifier: MIT */
/*
 * The lifecycle replies of the wire protocol: what the daemon
 * answers to SLEEP, WAKE and UPDATE (the requests' own payloads are in
 * wire.h: SLEEP u32 level, WAKE empty, UPDATE str model path).
 *
 * Reply payload, the same for all three:
 *   u64 version     the version served to new attaches after the request
 *   u32 level       SLEEP/WAKE: the sleep level; UPDATE: 0
 *   u64 bytes       bytes moved: copied to host (SLEEP 1), released
 *                   (SLEEP 2), restored or reloaded (WAKE), loaded (UPDATE)
 *   u64 ns          the main phase: the copy, the restore, the load
 *   u64 verify_ns   WAKE: re-checking every tensor's hash; else 0
 *   str message     one line for people (at most WIRE_MSG_MAX bytes)
 */
#ifndef WC_WIRE_LIFE_H
#define WC_WIRE_LIFE_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define WIRE_LIFE_REPLY_MIN 40  /* encoded bytes with an empty message */

struct wire_life_reply {
	uint64_t version;
	uint32_t level;
	uint64_t bytes;
	uint64_t ns;
	uint64_t verify_ns;
	char msg[WIRE_MSG_MAX + 1];
};

/* Appends the payload to a frame begun with wire_frame_begin; a message
 * over WIRE_MSG_MAX is cut (it is for people). */
void wire_life_reply_put(struct wire_put *w, const struct wire_life_reply *r);
/* Strict: every field present, no trailing bytes. */
int wire_life_reply_get(const void *p, size_t n, struct wire_life_reply *r,
			char *err);

#endif
