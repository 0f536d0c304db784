/* SPDX-License-Identifier: MIT */
/*
 * The wire protocol between wcd and its clients (prefix wire_): pure codec,
 * no I/O -- it works on buffers; the daemon and libwcache do the socket work.
 *
 * Transport: a SOCK_STREAM unix socket. Every message is one frame:
 *
 *   offset size  field
 *   0      4     magic     WIRE_MAGIC (bytes "WCAC" on the wire)
 *   4      2     version   WIRE_VERSION
 *   6      2     type      enum wire_type
 *   8      4     flags     WIRE_F_*
 *   12     4     length    payload bytes that follow, <= WIRE_PAYLOAD_MAX
 *   16     8     id        request id; a reply carries its request's id
 *   24     ...   payload
 *
 * All integers are little-endian. Inside payloads:
 *   u8/u16/u32/u64  little-endian
 *   str   u32 byte length + bytes (UTF-8, no NUL inside, no terminator)
 *   blob  u32 byte length + bytes
 *   hash  16 raw bytes (XXH3-128, canonical big-endian form, see hash.h)
 *
 * Conversation: the client sends requests (WIRE_F_REPLY clear) with ids it
 * chooses; the daemon answers every request with exactly one reply frame of
 * the same type and id with WIRE_F_REPLY set (ATTACH may add ATTACH_MORE
 * frames, see below), or with an ERROR frame (WIRE_F_REPLY set, same id).
 * The daemon may send NOTICE frames (id 0) at any time. A client must send
 * HELLO (and get an OK) before MANIFEST or ATTACH; PING, STATUS and SHUTDOWN
 * need no HELLO.
 *
 * Decoding is strict: the header is checked (magic, then version, then the
 * payload length against WIRE_PAYLOAD_MAX, then the type) before the payload
 * is received or anything is allocated, and every count and length inside a
 * payload is checked against the bytes that remain; a payload with trailing
 * bytes is malformed. A malformed frame gets an ERROR reply, then the daemon
 * closes that connection. A frame of another protocol version gets an ERROR
 * (WIRE_E_VERSION) naming both versions; magic and the version field keep
 * their place in every future version so that this stays possible.
 *
 * Errors: functions return 0 or -errno and write one sentence into err
 * (BASE_ERR_LEN bytes, may be NULL):
 *   -EBADMSG          bad magic, or a malformed payload
 *   -EPROTONOSUPPORT  another protocol version
 *   -EMSGSIZE         payload length over WIRE_PAYLOAD_MAX
 *   -EOPNOTSUPP       unknown frame type
 *   -E2BIG            an encoder's input over a stated bound
 *   -ENOMEM           the put buffer could not grow
 * wire_errcode() maps these to the WIRE_E_* code the daemon sends back.
 */
#ifndef WC_WIRE_H
#define WC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WIRE_MAGIC 0x43414357u        /* "WCAC" as little-endian bytes */
#define WIRE_VERSION 2               /* 2: manifest entries carry padded_rows */
#define WIRE_HDR_LEN 24
#define WIRE_PAYLOAD_MAX (256u << 20) /* bytes after the header */

/* Bounds on what payloads carry (each checked by encoder and decoder). */
#define WIRE_NAME_MAX 1024            /* tensor name bytes (= ST_NAME_MAX) */
#define WIRE_DTYPE_MAX 15             /* dtype name bytes ("BF16") */
#define WIRE_NDIM_MAX 8               /* dims per tensor (= ST_NDIM_MAX) */
#define WIRE_IDENTITY_MAX (64u << 10) /* canonical identity encoding bytes */
#define WIRE_MISMATCH_MAX 64          /* differing fields in a HELLO reply */
#define WIRE_FIELD_MAX 63             /* identity field name bytes */
#define WIRE_VALUE_MAX 1023           /* identity value bytes, per side */
#define WIRE_MSG_MAX 4095             /* ERROR / NOTICE message bytes */
#define WIRE_LABEL_MAX 255            /* HELLO client label bytes */
#define WIRE_PATH_MAX 4095            /* UPDATE model path bytes */
#define WIRE_POOLS_MAX 4096           /* pools in one ATTACH (all frames) */
#define WIRE_FDS_PER_FRAME 253        /* SCM_RIGHTS limit (= RX_FDS_MAX) */
#define WIRE_IPC_HANDLE_LEN 64        /* = GPU_IPC_HANDLE_LEN */
#define WIRE_HASH_LEN 16              /* = BASE_HASH_LEN */
#define WIRE_PING_MAX 256             /* PING payload bytes, echoed */

enum wire_type {
	WIRE_HELLO = 1,
	WIRE_MANIFEST = 2,
	WIRE_ATTACH = 3,
	WIRE_DETACH = 4,
	WIRE_PING = 5,          /* its reply is the PONG */
	WIRE_STATUS = 6,
	WIRE_SHUTDOWN = 7,
	WIRE_NOTICE = 8,        /* daemon -> client, unsolicited, id 0 */
	WIRE_ERROR = 9,         /* a reply to any request */
	WIRE_ATTACH_MORE = 10,  /* further pools of one ATTACH reply */
	/* the lifecycle (tools/wcd/life/lifecycle.c) and the metrics */
	WIRE_SLEEP = 11,
	WIRE_WAKE = 12,
	WIRE_UPDATE = 13,
	WIRE_METRICS = 14,
	WIRE_HANDOVER = 15,     /* wcd -> wcd: hot handover (wire_handover.h) */
	/* an update session from a trainer's memory (wire_push.h) */
	WIRE_PUSH_OPEN = 16,
	WIRE_PUSH_PLAN = 17,
	WIRE_PUSH_COMMIT = 18,
	WIRE_PUSH_ABORT = 19,
	WIRE_PAUSE = 20,        /* an engine's pause or resume (wire_push.h) */
	WIRE_TYPE_MAX = 20,
};

/* Frame flags. */
#define WIRE_F_REPLY 0x1u       /* a reply (or ERROR) to request `id` */
#define WIRE_F_MORE 0x2u        /* further frames of this reply follow */
#define WIRE_F_KNOWN (WIRE_F_REPLY | WIRE_F_MORE)

/* ERROR codes. */
enum wire_errcode {
	WIRE_E_MALFORMED = 1,   /* bad magic, truncated, counts past payload */
	WIRE_E_VERSION = 2,     /* another protocol version */
	WIRE_E_TOO_LARGE = 3,   /* payload length over the cap */
	WIRE_E_TYPE = 4,        /* unknown or unexpected frame type */
	WIRE_E_PERM = 5,        /* uid not allowed, or request not allowed */
	WIRE_E_STATE = 6,       /* e.g. ATTACH before HELLO, not ready */
	WIRE_E_MISMATCH = 7,    /* identity mismatch (see the HELLO reply) */
	WIRE_E_NOT_IMPLEMENTED = 8,
	WIRE_E_NO_LEASE = 9,    /* DETACH of a lease this client does not hold */
	WIRE_E_LIMIT = 10,      /* too many clients / leases */
	WIRE_E_INTERNAL = 11,
	WIRE_E_SLEEPING = 12,   /* the daemon sleeps: wake it first */
	WIRE_E_BUSY = 13,       /* refused while leases are held */
	WIRE_E_READONLY = 14,   /* read-write attach of sealed pools */
	WIRE_E_MAX = 14,
};

/* --- frame header ------------------------------------------------------- */

struct wire_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t flags;
	uint32_t len;           /* payload bytes */
	uint64_t id;
};

/* Writes h into buf[0..WIRE_HDR_LEN). */
void wire_hdr_encode(const struct wire_hdr *h, void *buf);
/* Reads buf[0..len) (len >= WIRE_HDR_LEN, else -EBADMSG "truncated") into
 * h, then checks magic, version, length cap, type and flags in that order.
 * h is filled even on error, so the id can be echoed in the ERROR reply. */
int wire_hdr_decode(const void *buf, size_t len, struct wire_hdr *h,
		    char *err);

const char *wire_type_name(unsigned type);     /* "HELLO", "?" if unknown */
const char *wire_errcode_name(unsigned code);  /* "MALFORMED", ... */
/* Maps a codec return (-EBADMSG ...) to the ERROR code to send back. */
enum wire_errcode wire_errcode(int rc);

/* --- cursors -------------------------------------------------------------- */

/* A growable output buffer holding one whole frame (header + payload),
 * capped at WIRE_HDR_LEN + WIRE_PAYLOAD_MAX. Errors are sticky: after a
 * failed put every later put is a no-op and wire_frame_end reports it. */
struct wire_put {
	uint8_t *buf;
	size_t len;
	size_t cap;
	int err;                /* 0 or the first -errno */
};

void wire_put_init(struct wire_put *w);
void wire_put_free(struct wire_put *w);
/* Starts a frame: resets the buffer and reserves the header. */
void wire_frame_begin(struct wire_put *w, unsigned type, uint32_t flags,
		      uint64_t id);
/* Patches the header's payload length; 0, or the sticky error (with a
 * sentence in err). w->buf[0..w->len) is then the frame to send. */
int wire_frame_end(struct wire_put *w, char *err);

void wire_put_u8(struct wire_put *w, uint8_t v);
void wire_put_u16(struct wire_put *w, uint16_t v);
void wire_put_u32(struct wire_put *w, uint32_t v);
void wire_put_u64(struct wire_put *w, uint64_t v);
void wire_put_bytes(struct wire_put *w, const void *p, size_t n);
/* str/blob: u32 length + bytes; -E2BIG (sticky) when n > max. */
void wire_put_str(struct wire_put *w, const char *s, size_t max);
void wire_put_blob(struct wire_put *w, const void *p, size_t n, size_t max);

/* A bounds-checked reader over one payload. The first failure is sticky:
 * later gets return 0 / empty and wire_get_end reports the first. */
struct wire_get {
	const uint8_t *p;
	size_t len;
	size_t off;
	int err;                /* 0 or -EBADMSG */
	const char *why;        /* what failed, for the message */
	size_t why_off;         /* where */
};

void wire_get_init(struct wire_get *g, const void *p, size_t len);
uint8_t wire_get_u8(struct wire_get *g);
uint16_t wire_get_u16(struct wire_get *g);
uint32_t wire_get_u32(struct wire_get *g);
uint64_t wire_get_u64(struct wire_get *g);
void wire_get_bytes(struct wire_get *g, void *dst, size_t n);
/* A str into dst (dst_size >= max + 1, NUL-terminated); a length over max,
 * past the payload, or a NUL inside fails. */
void wire_get_str(struct wire_get *g, char *dst, size_t max);
/* A blob by reference into the payload: *p, *n. */
void wire_get_blob(struct wire_get *g, const void **p, size_t *n, size_t max);
/* A u32 count, checked against max and against the bytes left, given that
 * each element takes at least elem_min bytes: rejects counts past the
 * payload before the caller allocates anything. */
uint32_t wire_get_count(struct wire_get *g, uint32_t max, size_t elem_min);
/* Ends decoding of a `what` payload: 0, or -EBADMSG with a sentence for the
 * first failure or for trailing bytes (when all is true). */
int wire_get_end(struct wire_get *g, const char *what, bool all, char *err);

/* --- payloads ------------------------------------------------------------- *
 * Each request/reply has an encoder that appends its payload to a frame
 * begun with wire_frame_begin, and a decoder over the payload bytes.
 * Decoders of lists decode a head, then each element with _next(); the
 * head's count was checked against the payload before any element. */

/* HELLO request: u16 proto_version, u16 flags, blob identity (the engine's
 * identity in the canonical encoding of proto/plan/identity.h), str label. */
#define WIRE_HELLO_NO_IDENTITY 0x1u  /* admin tools (wcctl manifest,
					wcattach): skip the identity check */
struct wire_hello {
	uint16_t proto_version;
	uint16_t flags;
	const void *identity;   /* decode: points into the payload */
	size_t identity_len;
	char label[WIRE_LABEL_MAX + 1]; /* free text, e.g. "vllm rank 0" */
};
void wire_hello_put(struct wire_put *w, const struct wire_hello *h);
int wire_hello_get(const void *p, size_t n, struct wire_hello *h, char *err);

/* HELLO reply: u32 status, hash digest, u64 version, u64 tensors,
 * u64 bytes, u32 daemon_pid, blob identity (the daemon's canonical
 * encoding), u32 nmismatch, then nmismatch x (str field, str daemon value,
 * str client value). status OK has no mismatches. */
enum wire_hello_status { WIRE_HELLO_OK = 0, WIRE_HELLO_MISMATCH = 1 };
struct wire_hello_reply {
	uint32_t status;
	uint8_t digest[WIRE_HASH_LEN];  /* XXH3-128 of the daemon's identity */
	uint64_t version;       /* model version served to new attaches */
	uint64_t tensors;
	uint64_t bytes;
	uint32_t daemon_pid;
	const void *identity;
	size_t identity_len;
	uint32_t nmismatch;
	struct wire_get cur;    /* decode: positioned at the next mismatch */
	uint32_t seen;          /* decode: mismatches decoded so far */
};
struct wire_mismatch {
	char field[WIRE_FIELD_MAX + 1];
	char daemon[WIRE_VALUE_MAX + 1];
	char client[WIRE_VALUE_MAX + 1];
};
void wire_hello_reply_put(struct wire_put *w, const struct wire_hello_reply *r,
			  const struct wire_mismatch *mm);
int wire_hello_reply_get(const void *p, size_t n, struct wire_hello_reply *r,
			 char *err);
/* Decodes the next mismatch (call r->nmismatch times); the last call also
 * checks that no bytes trail. */
int wire_hello_reply_next(struct wire_hello_reply *r, struct wire_mismatch *m,
			  char *err);

/* MANIFEST request: u32 first, u32 max (0: as many as fit). */
struct wire_manifest_req {
	uint32_t first;
	uint32_t max;
};
void wire_manifest_req_put(struct wire_put *w, const struct wire_manifest_req *q);
int wire_manifest_req_get(const void *p, size_t n, struct wire_manifest_req *q,
			  char *err);

/* MANIFEST reply: u64 version, u32 total, u32 first, u32 count, then count
 * x tensor: str name, str dtype, u8 ndim, ndim x u64 dims, u32 pool,
 * u64 offset, u64 nbytes, hash, u32 flags, u64 padded_rows. A reply with
 * first + count < total has WIRE_F_MORE: ask again from first + count.
 * A view (a fused tensor over its parts' bytes, or an alias) lists the
 * same pool bytes as other entries; its hash is of its own bytes. */
#define WIRE_T_HASHED 0x1u      /* hash is valid (the daemon hashed) */
#define WIRE_T_VIEW 0x2u        /* covers other entries' bytes (no own) */
#define WIRE_T_ALIAS 0x4u       /* the same bytes as another entry (tied) */
#define WIRE_TENSOR_MIN 57      /* encoded bytes of the smallest tensor */
struct wire_tensor {
	char name[WIRE_NAME_MAX + 1];
	char dtype[WIRE_DTYPE_MAX + 1];
	uint32_t ndim;
	uint64_t shape[WIRE_NDIM_MAX];
	uint32_t pool;
	uint64_t offset;        /* in the pool */
	uint64_t nbytes;
	uint8_t hash[WIRE_HASH_LEN];
	uint32_t flags;         /* WIRE_T_* */
	/* 0, or rows of the padded tensor the same pointer holds (>= shape[0],
	 * zero rows after the real ones): vocabularies padded as engines do */
	uint64_t padded_rows;
};
struct wire_manifest {
	uint64_t version;
	uint32_t total;
	uint32_t first;
	uint32_t count;
	struct wire_get cur;
	uint32_t seen;
};
void wire_manifest_head_put(struct wire_put *w, const struct wire_manifest *m);
/* Sets -E2BIG (sticky) for a tensor over the name/dtype/ndim bounds. */
void wire_tensor_put(struct wire_put *w, const struct wire_tensor *t);
/* Encoded size of t, to page a manifest under WIRE_PAYLOAD_MAX. */
size_t wire_tensor_size(const struct wire_tensor *t);
int wire_manifest_get(const void *p, size_t n, struct wire_manifest *m,
		      char *err);
/* Also checks ndim <= WIRE_NDIM_MAX; the last call checks for trailing
 * bytes. */
int wire_manifest_next(struct wire_manifest *m, struct wire_tensor *t,
		       char *err);

/* ATTACH request: u32 flags, u64 version (0: the current one). */
#define WIRE_ATTACH_WRITABLE 0x1u  /* ask for read-write (refused on sealed
					pools with WIRE_E_READONLY) */
struct wire_attach_req {
	uint32_t flags;
	uint64_t version;
};
void wire_attach_req_put(struct wire_put *w, const struct wire_attach_req *q);
int wire_attach_req_get(const void *p, size_t n, struct wire_attach_req *q,
			char *err);

/* ATTACH reply and ATTACH_MORE: u64 lease, u64 version, u32 total pools,
 * u32 first, u32 count (<= WIRE_FDS_PER_FRAME), then count x pool: u64 size,
 * u64 alloc_size, u32 export kind (enum gpu_export), u32 flags, u32
 * fd_index, handle (64 raw bytes). The file descriptors of the frame's
 * pools ride as SCM_RIGHTS on the frame's first byte, in fd_index order;
 * fd_index is WIRE_NO_FD for a pool without an fd (legacy IPC handle).
 * total > first + count: WIRE_F_MORE is set and ATTACH_MORE frames follow,
 * same id, until all pools are sent. */
#define WIRE_NO_FD 0xffffffffu
#define WIRE_POOL_SEALED 0x1u
#define WIRE_POOL_LEN 92        /* encoded bytes per pool */
struct wire_pool {
	uint64_t size;
	uint64_t alloc_size;
	uint32_t export_kind;
	uint32_t flags;         /* WIRE_POOL_* */
	uint32_t fd_index;
	uint8_t handle[WIRE_IPC_HANDLE_LEN];
};
struct wire_attach {
	uint64_t lease;
	uint64_t version;
	uint32_t total;
	uint32_t first;
	uint32_t count;
	struct wire_get cur;
	uint32_t seen;
};
void wire_attach_head_put(struct wire_put *w, const struct wire_attach *a);
void wire_pool_put(struct wire_put *w, const struct wire_pool *pl);
/* nfds: descriptors that arrived with the frame; every fd_index is
 * checked against it. */
int wire_attach_get(const void *p, size_t n, struct wire_attach *a, char *err);
int wire_attach_next(struct wire_attach *a, unsigned nfds,
		     struct wire_pool *pl, char *err);

/* DETACH request: u64 lease. Reply: empty. */
void wire_detach_put(struct wire_put *w, uint64_t lease);
int wire_detach_get(const void *p, size_t n, uint64_t *lease, char *err);

/* PING: up to WIRE_PING_MAX opaque bytes; the reply echoes them. STATUS
 * request, SHUTDOWN request and reply, DETACH reply: empty payloads
 * (wire_empty_get checks that). */
int wire_empty_get(const void *p, size_t n, const char *what, char *err);
int wire_ping_get(const void *p, size_t n, char *err);

/* STATUS reply: str json (the object tools/wcd/status.c builds; wcctl
 * status --json prints it), at most
 * WIRE_PAYLOAD_MAX - 4 bytes. */
void wire_status_put(struct wire_put *w, const char *json, size_t n);
/* *json points into the payload (not NUL-terminated), *n its length. */
int wire_status_get(const void *p, size_t n, const char **json, size_t *jn,
		    char *err);

/* ERROR: u32 code, str message. */
struct wire_error {
	uint32_t code;          /* enum wire_errcode */
	char msg[WIRE_MSG_MAX + 1];
};
/* Messages over WIRE_MSG_MAX are cut (errors are for people). */
void wire_error_put(struct wire_put *w, uint32_t code, const char *msg);
int wire_error_get(const void *p, size_t n, struct wire_error *e, char *err);
/* Builds a whole ERROR reply frame for request id. */
int wire_error_frame(struct wire_put *w, uint64_t id, uint32_t code,
		     const char *msg, char *err);

/* NOTICE: u32 kind, u64 version, str message; kind HANDOVER adds u32 pid
 * (the daemon that serves the connection from now on). */
enum wire_notice_kind {
	WIRE_NOTICE_SHUTDOWN = 1,     /* the daemon is going away */
	WIRE_NOTICE_NEW_VERSION = 2,  /* a new model version can be attached */
	WIRE_NOTICE_HANDOVER = 3,     /* another wcd serves this connection */
	/* an in-place update session ended (wire_push.h), sent to every
	 * client holding a lease: the same mappings now hold `version`
	 * (complete), or version `version` is incomplete (its bytes were
	 * partly rewritten; wait for a complete update) */
	WIRE_NOTICE_IN_PLACE = 4,
	WIRE_NOTICE_INCOMPLETE = 5,
};
struct wire_notice {
	uint32_t kind;
	uint64_t version;
	char msg[WIRE_MSG_MAX + 1];
	uint32_t pid;                 /* HANDOVER: the new daemon's pid */
};
void wire_notice_put(struct wire_put *w, const struct wire_notice *nt);
int wire_notice_get(const void *p, size_t n, struct wire_notice *nt,
		    char *err);

/* SLEEP u32 level; WAKE empty; UPDATE str model path (empty: the same
 * directory) + u32 flags (WIRE_UPDATE_*); METRICS empty, reply str text. */
#define WIRE_UPDATE_ALLOW_LAYOUT 0x1u  /* names, dtypes, shapes may change */
#define WIRE_UPDATE_KNOWN WIRE_UPDATE_ALLOW_LAYOUT
void wire_sleep_put(struct wire_put *w, uint32_t level);
int wire_sleep_get(const void *p, size_t n, uint32_t *level, char *err);
void wire_update_put(struct wire_put *w, const char *model, uint32_t flags);
int wire_update_get(const void *p, size_t n, char *model, uint32_t *flags,
		    char *err);

#endif
