/* SPDX-License-Identifier: MIT */
/*
 * The hot handover (issue 17) of the wire protocol: a new wcd takes the
 * device over from the running one without a reload and without closing a
 * single engine connection. Pure codec, like wire.h.
 *
 * Every frame is of type WIRE_HANDOVER; its payload starts with a u32 part
 * (enum wire_ho_part). The new daemon connects to the old one's socket as a
 * client of the daemon's own uid, and the conversation is:
 *
 *   new -> old   ASK      request id N: the handover versions it can take
 *   old -> new   ERROR    refused (another version, asleep, busy ...): the
 *                         old daemon serves on, untouched; or:
 *   old -> new   BEGIN    reply id N; fds: the lock file, the listening
 *                         socket. The old daemon has stopped accepting and
 *                         has drained every client to a frame boundary
 *   old -> new   VERSION  one per resident model version; fds: its pools
 *   old -> new   CLIENTS  zero or more, up to 253 connections each; fds:
 *                         the connections
 *   new -> old   COMMIT   request id N+1: verified, ready to serve; or
 *   new -> old   ABORT    request id N+1: verification failed (or the old
 *                         daemon's END never came); the old one resumes
 *   old -> new   DONE     reply id N+1: the old daemon has let go of
 *                         everything; it touches no client from now on
 *   new -> old   SERVING  request id N+2 (no reply): the new daemon has
 *                         taken everything, set itself up to serve (the
 *                         lock under its pid, the clients told its pid,
 *                         the ready file) and serves from now on; the
 *                         old one exits at once; or:
 *   new -> old   ABORT    request id N+1 (no reply but an ERROR and the
 *                         connection's end): that set-up failed. On it, or
 *                         when the new one dies before SERVING, the old one
 *                         resumes and takes the lock's pid, the ready file
 *                         and the clients (a HANDOVER notice) back
 *
 * Every reply part carries WIRE_F_REPLY; the state's frames but the last
 * also WIRE_F_MORE. Counts are checked against the bytes left before anything
 * is allocated; fd indexes are checked against the descriptors that came
 * with the frame (nfds).
 *
 * Payloads after the part (u32):
 *   ASK      u16 ho_min, u16 ho_max, u32 pid
 *   BEGIN    u16 ho_version, u32 pid, u32 nversions, u32 cur (slot of the
 *            current version), u32 nclients, u64 next_lease, u64 requests,
 *            u64 mismatches, u32 lock_fd, u32 listen_fd (fd indexes),
 *            u8 hash, u64 pool_size, str rules, str allow_quant, u32
 *            nallow_uid, that many x u32 uid, u32 nallow_gid, that many
 *            x u32 gid (the options that decide the plan and whom the
 *            daemon serves)
 *   VERSION  u32 slot, u64 number, str model, u32 tp_size, u32 tp_rank,
 *            u32 pp_size, u32 pp_rank, blob identity (canonical), hash
 *            digest, u32 flags (WIRE_HO_V_*), u32 ntensors, that many x
 *            hash (only with WIRE_HO_V_HASHED), u32 npools, that many x
 *            (u64 size, u64 alloc_size, u32 flags (WIRE_POOL_*), u32
 *            fd_index)
 *   CLIENTS  u32 count, count x (u32 fd_index, u32 pid, u32 uid, u32
 *            flags (WIRE_HO_C_*), u64 requests, u32 nleases, that many x
 *            (u64 lease id, u64 version number))
 *   COMMIT, DONE, SERVING  nothing
 *   ABORT    str why
 */
#ifndef WC_WIRE_HANDOVER_H
#define WC_WIRE_HANDOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* The handover versions this build speaks. Bump WIRE_HO_PROTO whenever
 * what a part carries or what the daemon state means changes.
 *   1  the first
 *   2  plan_pack places layers of PLAN_LAYER_MIN bytes or more whole, on
 *      PLAN_LAYER_ALIGN: a model of big layers lies in other pools than
 *      under 1, so a daemon of 1 and one of 2 refuse each other at ASK
 *      (the pool check of VERSION would refuse most such models later;
 *      this names the reason, and up front)
 *   3  BEGIN carries --allow-gid (with --socket-group's gid): a daemon of 2
 *      would drop the groups it serves */
#define WIRE_HO_PROTO 3
#define WIRE_HO_PROTO_MIN 3

#define WIRE_HO_VERSIONS_MAX 2        /* = WCD_VERSIONS */
#define WIRE_HO_POOLS_MAX 64          /* = GPU_POOLS_MAX */
#define WIRE_HO_TENSORS_MAX (1u << 20) /* hashes in one VERSION */
#define WIRE_HO_CLIENTS_PER_FRAME WIRE_FDS_PER_FRAME
#define WIRE_HO_LEASES_MAX 64         /* = WCD_LEASES_PER_CLIENT */
#define WIRE_HO_UIDS_MAX 16           /* = WCD_ALLOW_UID_MAX */
#define WIRE_HO_GIDS_MAX 16           /* = WCD_ALLOW_GID_MAX */

enum wire_ho_part {
	WIRE_HO_ASK = 1,
	WIRE_HO_BEGIN = 2,
	WIRE_HO_VERSION = 3,
	WIRE_HO_CLIENTS = 4,
	WIRE_HO_COMMIT = 5,
	WIRE_HO_ABORT = 6,
	WIRE_HO_DONE = 7,
	WIRE_HO_SERVING = 8,
	WIRE_HO_PART_MAX = 8,
};

const char *wire_ho_part_name(unsigned part);   /* "ASK", "?" if unknown */
/* The part of a HANDOVER payload: 0 and -EBADMSG when shorter than a u32
 * or of an unknown part. */
int wire_ho_part_get(const void *p, size_t n, uint32_t *part, char *err);

struct wire_ho_ask {
	uint16_t ho_min, ho_max;
	uint32_t pid;
};

struct wire_ho_begin {
	uint16_t ho_version;
	uint32_t pid;
	uint32_t nversions;           /* <= WIRE_HO_VERSIONS_MAX */
	uint32_t cur;                 /* slot of the current version */
	uint32_t nclients;
	uint64_t next_lease, requests, mismatches;
	uint32_t lock_fd, listen_fd;  /* fd indexes in the frame */
	uint8_t hash;                 /* the daemon hashes (not --no-hash) */
	uint64_t pool_size;           /* --pool-size: packs the plan */
	char rules[WIRE_PATH_MAX + 1];
	char allow_quant[WIRE_LABEL_MAX + 1];
	uint32_t nallow_uid;
	uint32_t allow_uid[WIRE_HO_UIDS_MAX];
	uint32_t nallow_gid;
	uint32_t allow_gid[WIRE_HO_GIDS_MAX];
};

#define WIRE_HO_V_HASHED 0x1u         /* hashes follow */
#define WIRE_HO_V_CURRENT 0x2u        /* new attaches get this one */

struct wire_ho_pool {
	uint64_t size, alloc_size;
	uint32_t flags;               /* WIRE_POOL_* */
	uint32_t fd_index;
};

struct wire_ho_version {
	uint32_t slot;                /* < WIRE_HO_VERSIONS_MAX */
	uint64_t number;
	char model[WIRE_PATH_MAX + 1];
	uint32_t tp_size, tp_rank, pp_size, pp_rank;
	const void *identity;         /* decode: points into the payload */
	size_t identity_len;
	uint8_t digest[WIRE_HASH_LEN];
	uint32_t flags;               /* WIRE_HO_V_* */
	uint32_t ntensors;
	const uint8_t *hashes;        /* ntensors x 16 bytes (HASHED), or NULL;
					 decode: into the payload */
	uint32_t npools;
	struct wire_ho_pool pools[WIRE_HO_POOLS_MAX];
};

#define WIRE_HO_C_HELLO 0x1u          /* the client's HELLO succeeded */

struct wire_ho_lease {
	uint64_t id;
	uint64_t version;             /* model version number */
};

struct wire_ho_client {
	uint32_t fd_index;
	uint32_t pid, uid;
	uint32_t flags;               /* WIRE_HO_C_* */
	uint64_t requests;
	uint32_t nleases;
	struct wire_ho_lease leases[WIRE_HO_LEASES_MAX];
};

/* Encoders append the part and its payload to a frame begun with
 * wire_frame_begin(WIRE_HANDOVER, ...); a value over a bound sets -E2BIG
 * (sticky, reported by wire_frame_end). */
void wire_ho_ask_put(struct wire_put *w, const struct wire_ho_ask *a);
void wire_ho_begin_put(struct wire_put *w, const struct wire_ho_begin *b);
void wire_ho_version_put(struct wire_put *w, const struct wire_ho_version *v);
void wire_ho_clients_put(struct wire_put *w, const struct wire_ho_client *c,
			 uint32_t count);
/* COMMIT, DONE and SERVING: the part alone. */
void wire_ho_empty_put(struct wire_put *w, uint32_t part);
void wire_ho_abort_put(struct wire_put *w, const char *why);

/* Decoders take the whole payload (part included) and check the part;
 * nfds: descriptors that came with the frame, for the fd indexes. */
int wire_ho_ask_get(const void *p, size_t n, struct wire_ho_ask *a, char *err);
int wire_ho_begin_get(const void *p, size_t n, unsigned nfds,
		      struct wire_ho_begin *b, char *err);
int wire_ho_version_get(const void *p, size_t n, unsigned nfds,
			struct wire_ho_version *v, char *err);
/* Fills c[0..*count) (room for max); each fd_index distinct. */
int wire_ho_clients_get(const void *p, size_t n, unsigned nfds,
			struct wire_ho_client *c, uint32_t max,
			uint32_t *count, char *err);
int wire_ho_empty_get(const void *p, size_t n, uint32_t part, char *err);
int wire_ho_abort_get(const void *p, size_t n, char *why, char *err);

#endif
