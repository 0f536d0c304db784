/* SPDX-License-Identifier: MIT */
/*
 * libwcache: attach an inference engine to a wcache rank daemon (wcd) and use
 * its weights zero-copy. The one public header; it includes only libc headers.
 *
 *   struct wc_conn *c;  struct wc_model *m;  struct wc_error e;
 *   struct wc_connect_opts o = { .device = "0" };       // or "host:NAME"
 *   struct wc_expect x = { .model_dir = "/models/llama", .tp_size = 1 };
 *   if (wc_connect(&o, &c, &e) || wc_hello(c, &x, NULL, &e) ||
 *       wc_attach(c, 0, &m, NULL, &e))
 *           fprintf(stderr, "wcache: %s\n", e.msg);     // show it, fall back
 *   const struct wc_tensor *t = wc_tensor_find(m, "model.norm.weight");
 *   ... t->ptr, t->bytes, t->shape ...
 *   struct pollfd p = { wc_daemon_fd(c), POLLIN };      // daemon died?
 *   wc_detach(m, NULL); wc_close(c);
 *
 * Errors. Every call that can fail returns 0 or a negative errno and, when
 * err is not NULL, fills it: err->code is the positive errno and err->msg one
 * sentence an engine can show (what happened, the value, what to do next).
 * On success err->code is 0 and err->msg is "". Codes with a fixed meaning:
 *   ENOENT           no daemon for the device (no socket / ready file)
 *   ECONNREFUSED     a socket file but no daemon listening (stale)
 *   EACCES           the daemon refused this process (uid not allowed)
 *   EPROTONOSUPPORT  the daemon speaks another protocol version
 *   ESTALE           identity mismatch: msg lists each field, both values
 *   EROFS            a read-write attach the backend refuses
 *   EBADMSG          a malformed or unexpected reply from the daemon
 *   EPIPE            the daemon closed the connection (it exited)
 *   ETIMEDOUT        no reply within the request timeout
 *   E2BIG            a bound below was exceeded (tensors, pools, message)
 *   EILSEQ           wc_verify: a tensor's bytes do not match its hash
 * The daemon's own refusals keep its message and map to: EACCES (not
 * allowed), EINVAL (request out of order), EAGAIN (the daemon is sleeping or
 * at its client limit), EBUSY (refused while leases are held), EROFS (read-
 * write attach of sealed pools), ESRCH (no such lease), ENOSYS (not
 * implemented), EIO (daemon internal error).
 *
 * Threads: a wc_conn is used by one thread at a time (and, after fork, by
 * one of the two processes). A model's tensor table is read-only after
 * wc_attach and may be read from any thread.
 *
 * Lifetime: tensor pointers stay valid until wc_detach (or wc_close). With the
 * host backend (memfd) and the CUDA VMM backend the mapping keeps the memory
 * alive even after the daemon dies: the engine is told (wc_daemon_fd), not
 * killed. All descriptors are close-on-exec.
 */
#ifndef WCACHE_H
#define WCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: struct wc_expect (layout_file, ep_size, ep_rank, vocab_pad) and
 * struct wc_tensor (padded_rows) grew at their ends, WC_TENSOR_VIEW and
 * WC_TENSOR_ALIAS were added (wire protocol 2). Fields kept their offsets,
 * but a program built with API 1's header passes a shorter wc_expect than
 * the library reads: rebuild it. */
#define WC_API_VERSION 2

#define WC_ERR_MSG_LEN 2048          /* fits an identity mismatch list */
#define WC_DIMS_MAX 8                /* dimensions per tensor */
#define WC_TENSORS_MAX (1u << 20)    /* tensors per model */
#define WC_POOLS_MAX 64              /* pools per model */
#define WC_HASH_LEN 16               /* XXH3-128, canonical (big-endian) */
#define WC_HEX_LEN 33                /* 32 hex digits + NUL */
#define WC_DEVICE_LEN 64
#define WC_PATH_LEN 4096

struct wc_error {
	int code;                    /* positive errno, 0 on success */
	char msg[WC_ERR_MSG_LEN];
};

struct wc_conn;                      /* one connection to one daemon */
struct wc_model;                     /* one attached model version (a lease) */

/* --- connect ------------------------------------------------------------ */

#define WC_DAEMON_USER "wcache"

struct wc_connect_opts {
	/* "host", "host:NAME" (host backend), a CUDA index "0" or "GPU-<uuid>".
	 * Ignored when socket is set. */
	const char *device;
	/* The socket is DIR/<device name>.sock; NULL: WCACHE_SOCKET_TEMPLATE,
	 * else $XDG_RUNTIME_DIR/wcache, else /tmp/wcache-$UID. */
	const char *runtime_dir;
	const char *socket;          /* a socket path; overrides the above */
	int timeout_ms;              /* per request; 0: 30000; <0: none */
	const char *label;           /* shown in the daemon's log ("vllm tp0") */
	/* The daemon must run as this process's uid, as root or as the
	 * system account "wcache" (WC_DAEMON_USER: the shipped systemd units'
	 * user, which only root can create); a daemon of any other uid is
	 * refused (EACCES) before a byte is exchanged, so an impostor that
	 * planted a socket cannot feed us weights. trust_uid names one more
	 * uid to accept (0: none more), and so does $WCACHE_TRUST_UID (a
	 * number: for containers, where the daemon's user has no name). */
	unsigned int trust_uid;
};

/* Connects (blocking), reads the peer's pid and uid with SO_PEERCRED,
 * refuses a daemon of another uid (see trust_uid), and opens a pidfd on the
 * daemon. The connection is not usable for attach until
 * wc_hello. With socket set, also set device when wc_hello is given an
 * expected identity (the identity names the device). */
int wc_connect(const struct wc_connect_opts *o, struct wc_conn **out,
	       struct wc_error *err);

/* Detaches every model still attached on c (their pointers become invalid),
 * closes the socket and the daemon fd, frees c. NULL is allowed. */
void wc_close(struct wc_conn *c);

/* --- hello: identity ----------------------------------------------------- */

/* What the engine expects to be served. The library computes the full
 * identity from these (the model directory's real path, config, shard
 * headers; the device) and the daemon compares it field by field; any
 * difference fails wc_hello with ESTALE and a message naming each field with
 * the engine's and the daemon's values. Zero fields mean tp/pp 1/0. */
struct wc_expect {
	const char *model_dir;
	int tp_size, tp_rank;
	int pp_size, pp_rank;
	const char *rules_file;      /* sharding rules; NULL: the preset */
	/* The identity is the content (checkpoint digest, config facts,
	 * layout); the model's path is shown but not compared, so the same
	 * checkpoint through a bind mount or a copy (with its mtimes) is
	 * served. Set to also require the daemon's path to equal ours. */
	int same_path;
	/* Added with protocol 2 (wcd --layout/--ep-size/--ep-rank/--vocab-pad;
	 * zero-initialise the struct and these mean: the preset, no expert
	 * parallelism, the layout's padding). */
	const char *layout_file;     /* NULL: the architecture's preset */
	int ep_size, ep_rank;        /* 0 or 1: no expert parallelism */
	int vocab_pad;               /* 0: the layout's (64); -1: off; N */
};

enum wc_mem {
	WC_MEM_HOST = 1,             /* pointers are CPU pointers (PROT_READ) */
	WC_MEM_CUDA = 2,             /* pointers are CUDA device pointers */
};

/* What the daemon serves (the HELLO reply). */
struct wc_info {
	pid_t pid;                   /* the daemon's pid */
	char identity[WC_HEX_LEN];   /* identity digest, 32 hex */
	uint64_t version;            /* model version (updates bump it) */
	uint64_t tensors;
	uint64_t bytes;              /* tensor bytes on this rank */
	char device[WC_DEVICE_LEN];  /* "host-NAME", "GPU-<uuid>" */
	char model[WC_PATH_LEN];
	int tp_size, tp_rank, pp_size, pp_rank;
	uint32_t protocol;           /* the daemon's protocol version */
	enum wc_mem mem;
};

/* Sends HELLO. expect NULL accepts whatever the daemon serves (tools that
 * only inspect); an engine should always pass what it expects. info, when
 * not NULL, receives the daemon's description. */
int wc_hello(struct wc_conn *c, const struct wc_expect *expect,
	     struct wc_info *info, struct wc_error *err);

/* --- attach -------------------------------------------------------------- */

enum wc_attach_flags {
	/* Map read-write. Refused (EROFS) by the host backend, whose pools are
	 * sealed; only ask when the engine really writes weights in place. */
	WC_ATTACH_WRITABLE = 1u << 0,
};

/* Nanoseconds spent in each phase of the last connect/hello/attach on the
 * connection (CLOCK_MONOTONIC): what wcbench reports. */
struct wc_attach_times {
	uint64_t connect_ns;         /* socket, connect, peer credentials */
	uint64_t hello_ns;           /* HELLO round trip (with identity) */
	uint64_t manifest_ns;        /* MANIFEST round trip and decode */
	uint64_t attach_ns;          /* ATTACH round trip, fds received */
	uint64_t map_ns;             /* importing (mapping) every pool */
	/* Opening the device backend, not counted above (each connection
	 * opens it once; the CUDA driver's start-up, about 0.1 s, is paid by
	 * the first in a process). Near 0 for host devices. */
	uint64_t device_ns;
};

/* Fetches the manifest, asks for a lease, receives the pools (file
 * descriptors over SCM_RIGHTS) and maps them read-only (flags: read-write).
 * Requires a successful wc_hello. times, when not NULL, is filled. One
 * exception to read-only: pools a daemon exports as legacy CUDA IPC handles
 * (wcd --ipc legacy) can only be opened read-write; wc_pool_at reports it
 * (writable 1). */
int wc_attach(struct wc_conn *c, unsigned flags, struct wc_model **out,
	      struct wc_attach_times *times, struct wc_error *err);

/* wc_hello(c, expect, info) then, when it succeeds, wc_attach(c, flags,
 * out, times): one call for a binding whose thread must not come back to
 * its interpreter between the two (a Python thread waits up to the GIL's
 * switch interval, 5 ms, for each return while another thread runs
 * Python). Returns wc_hello's error (out untouched) or wc_attach's. */
int wc_hello_attach(struct wc_conn *c, const struct wc_expect *expect,
		    struct wc_info *info, unsigned flags, struct wc_model **out,
		    struct wc_attach_times *times, struct wc_error *err);

/* Fetches the manifest only (tools that list tensors): no lease, no pools,
 * every tensor's ptr is NULL. Free it with wc_detach. */
int wc_manifest(struct wc_conn *c, struct wc_model **out,
		struct wc_error *err);

/* Ends the lease (DETACH, unless the daemon is gone), unmaps the pools and
 * frees m. m is freed even when an error is returned. */
int wc_detach(struct wc_model *m, struct wc_error *err);

/* --- tensors ------------------------------------------------------------- */

struct wc_tensor {
	const char *name;            /* valid until detach */
	const char *dtype;           /* safetensors spelling: "BF16", "F32" */
	uint32_t ndim;
	uint64_t shape[WC_DIMS_MAX]; /* this rank's shape (after any split) */
	uint64_t bytes;
	const void *ptr;             /* host: CPU pointer; cuda: device pointer */
	uint32_t pool;               /* index of the pool holding it */
	uint64_t offset;             /* byte offset inside the pool */
	uint8_t hash[WC_HASH_LEN];   /* XXH3-128 of the bytes, canonical */
	uint32_t flags;              /* WC_TENSOR_* */
	/* 0, or P >= shape[0]: a padded vocabulary (wcd pads as vLLM does).
	 * shape[0] real rows, then zero rows up to P at the same ptr: bind
	 * [P, shape[1..]] over ptr with no copy. bytes and hash cover the
	 * real rows only. Added in protocol 2 (at the end: the offsets of
	 * the fields above did not move). */
	uint64_t padded_rows;
};

/* hash is valid (the daemon hashed while loading; not with wcd --no-hash) */
#define WC_TENSOR_HASHED 0x1u
/* a view: a fused tensor (vLLM's qkv_proj, gate_up_proj, experts.w13_weight
 * ...) over bytes that other entries (its parts, the checkpoint's names)
 * also list; nothing is stored twice. Its hash is of its own bytes. */
#define WC_TENSOR_VIEW 0x2u
/* an alias (with WC_TENSOR_VIEW): the same bytes as another entry, e.g.
 * lm_head.weight over model.embed_tokens.weight for tied embeddings */
#define WC_TENSOR_ALIAS 0x4u

struct wc_pool_view {
	const void *ptr;             /* base (host or device, as wc_info.mem) */
	uint64_t size;
	int writable;
};

const struct wc_info *wc_model_info(const struct wc_model *m);
uint64_t wc_tensor_count(const struct wc_model *m);
/* i < wc_tensor_count(m), in manifest order; NULL past the end. */
const struct wc_tensor *wc_tensor_at(const struct wc_model *m, uint64_t i);
/* O(1) average; NULL when the name is not in the model. */
const struct wc_tensor *wc_tensor_find(const struct wc_model *m,
				       const char *name);
/* As wc_tensor_find, but an unknown name is an error (ENOENT) whose message
 * names it. */
int wc_lookup(const struct wc_model *m, const char *name,
	      const struct wc_tensor **out, struct wc_error *err);
uint32_t wc_pool_count(const struct wc_model *m);
int wc_pool_at(const struct wc_model *m, uint32_t i, struct wc_pool_view *out);
/* m's layout as bytes that depend on nothing but the layout: every entry
 * of the table (struct wc_tensor) with its name and dtype as offsets into
 * the names block, no data pointer and no hash, then the names block (the
 * names and dtypes, NUL-terminated, in table order). Equal bytes: the same
 * names, dtypes, shapes, pools, offsets, flags and padded rows, in the
 * same order. Returns the length; writes only when len is at least that
 * (buf NULL: just the length). */
size_t wc_model_layout(const struct wc_model *m, void *buf, size_t len);
/* 1 when m's layout bytes are the len bytes at buf, else 0: the compare
 * without the copy. */
int wc_model_layout_eq(const struct wc_model *m, const void *buf, size_t len);
/* Every pool of m in one stretch: where the pools were mapped back to back
 * (libwcache asks for that; the address space may not allow it), out
 * covers them all, pool_off[i] (i < n; pool_off may be NULL) gets pool i's
 * offset in it, and the return is the pool count. -ENOENT where they are
 * not back to back (or differ in writability): use wc_pool_at. */
int wc_model_span(const struct wc_model *m, struct wc_pool_view *out,
		  uint64_t *pool_off, uint32_t n);

/* Recomputes every tensor's XXH3-128 from the mapped bytes (host: straight
 * from the mapping; cuda: copied to host in chunks) and compares it with the
 * manifest. EILSEQ names the first bad tensor and the number of bad ones;
 * ENODATA when the daemon did not hash (wcd --no-hash). Costs one full read
 * of the model, spread over up to 8 threads (one per CPU) when it is over
 * 64 MiB; bad, when not NULL, gets the count. */
int wc_verify(const struct wc_model *m, uint64_t *bad, struct wc_error *err);
int wc_verify_tensor(const struct wc_model *m, const struct wc_tensor *t,
		     struct wc_error *err);

/* Formats a hash as 32 lowercase hex digits (as `xxhsum -H2` prints). */
void wc_hash_hex(const uint8_t hash[WC_HASH_LEN], char out[WC_HEX_LEN]);

/* --- liveness and notices ------------------------------------------------ */

/* The daemon's pidfd: becomes readable (POLLIN) when the daemon exits.
 * Owned by c; do not close it. -1 when the daemon's pid is not visible here
 * (another pid namespace) or the kernel lacks pidfd_open (before 5.3): then
 * EOF on wc_notice_fd is the sign. After a hot handover (wcctl restart) the
 * old daemon exits and a WC_NOTICE_HANDOVER waits on wc_notice_fd: reading
 * it (wc_notice_read, or any request) moves this same descriptor number to
 * the new daemon (dup2) and wc_daemon_pid to its pid. So, when it polls
 * readable, read the notices first; still readable after that: the daemon
 * is gone. */
int wc_daemon_fd(const struct wc_conn *c);
pid_t wc_daemon_pid(const struct wc_conn *c);

enum wc_notice_kind {
	WC_NOTICE_SHUTDOWN = 1,      /* the daemon is stopping */
	WC_NOTICE_VERSION = 2,       /* a new model version; re-attach for it */
	WC_NOTICE_OTHER = 3,
	WC_NOTICE_HANDOVER = 4,      /* another wcd serves on (wcctl restart);
					nothing to do: same connection, same
					mappings, wc_daemon_fd follows */
	/* an in-place update session ended (wc_pause): */
	WC_NOTICE_IN_PLACE = 5,      /* complete: the same mappings now hold
					version (new hashes: MANIFEST);
					wc_resume, no re-attach */
	WC_NOTICE_INCOMPLETE = 6,    /* version's bytes are partly rewritten:
					stay paused until a complete update
					(an IN_PLACE or VERSION notice) */
};

struct wc_notice {
	enum wc_notice_kind kind;
	uint64_t version;            /* WC_NOTICE_VERSION: the new version */
	char msg[WC_ERR_MSG_LEN];
};

/* The connection's socket: readable when a notice (or EOF) is waiting. */
int wc_notice_fd(const struct wc_conn *c);
/* Returns 1 and fills n when a notice is queued or readable now, 0 when
 * none (never blocks), or -errno (EPIPE once the daemon has closed the
 * connection and every queued notice has been read). */
int wc_notice_read(struct wc_conn *c, struct wc_notice *n,
		   struct wc_error *err);

/* --- low-level requests (tools, benchmarks) ------------------------------ */

/* Sends depth PINGs back to back (depth 0 means 1), then waits for every
 * reply. */
int wc_ping(struct wc_conn *c, unsigned depth, struct wc_error *err);
/* STATUS: the daemon's JSON object as text; *json is malloc'd, free() it. */
int wc_status(struct wc_conn *c, char **json, struct wc_error *err);
/* METRICS: the daemon's metrics in the Prometheus text format, as its
 * --metrics-listen endpoint serves them; *text is malloc'd, free() it. */
int wc_metrics(struct wc_conn *c, char **text, struct wc_error *err);
/* SHUTDOWN: asks the daemon to stop (same as SIGTERM). */
int wc_shutdown(struct wc_conn *c, struct wc_error *err);
/* --- lifecycle (admin: the daemon's own uid) ---------------------------- */

/* What SLEEP, WAKE and UPDATE did. */
struct wc_life_result {
	uint64_t version;            /* the version new attaches get now */
	unsigned level;              /* SLEEP/WAKE: the sleep level */
	uint64_t bytes;              /* copied, released, restored or loaded */
	double seconds;              /* the copy, restore or load itself */
	double verify_seconds;       /* WAKE: re-checking every tensor hash */
	char msg[WC_ERR_MSG_LEN];    /* one line for people */
};

/* SLEEP level 1 (keep a host copy; wake at copy speed) or 2 (drop the
 * weights; wake reloads from disk). Refused (EBUSY) while any engine holds
 * a lease, naming the pids. r may be NULL. */
int wc_sleep(struct wc_conn *c, unsigned level, struct wc_life_result *r,
	     struct wc_error *err);
/* WAKE: restores the weights and re-checks every tensor's hash; on a
 * mismatch the daemon stays asleep and the error says so. */
int wc_wake(struct wc_conn *c, struct wc_life_result *r,
	    struct wc_error *err);
/* UPDATE: loads the checkpoint in model_dir (NULL or "": the directory
 * served now, re-read) as version N+1 beside N and publishes it; engines
 * attached to N get a WC_NOTICE_VERSION. Refused (EAGAIN) while the daemon
 * sleeps; a failed update leaves N serving. Waits for the load: set
 * wc_connect_opts.timeout_ms to cover it. */
int wc_update(struct wc_conn *c, const char *model_dir,
	      struct wc_life_result *r, struct wc_error *err);
/* wc_update with flags. An update must keep the layout the engines bound:
 * every tensor's name, dtype and shape (else refused with ESTALE, the
 * message listing the first differences); WC_UPDATE_ALLOW_LAYOUT_CHANGE
 * lets the operator publish another layout anyway (engines following
 * updates then bind tensors they do not know). */
#define WC_UPDATE_ALLOW_LAYOUT_CHANGE 0x1u
int wc_update_flags(struct wc_conn *c, const char *model_dir,
		    unsigned flags, struct wc_life_result *r,
		    struct wc_error *err);

/* --- update from memory (a trainer; the daemon's uid or --allow-uid) ---- */

/* An update session: the trainer writes version N+1 from its own memory,
 * beside N, no file in between. Open gets N+1's pools (writable, this
 * connection's alone; N serves engines throughout and nobody sees N+1
 * before commit) and the plan of where each checkpoint tensor's pieces go
 * (tensor-parallel slices, fused views' parts, padded rows left zero);
 * each wc_push_write copies one whole checkpoint tensor, in the
 * checkpoint's name, dtype and shape, from host memory (or CUDA memory:
 * wc_push_write_dev); commit checks
 * that every checkpoint tensor was written exactly once, then the daemon
 * seals, hashes and publishes N+1 as an update from disk would (engines
 * get WC_NOTICE_VERSION). A session not committed within timeout_ms, or
 * whose connection closes, is aborted: N+1 is freed, N serves on.
 * Refusals: EACCES (uid not allowed), EAGAIN (the daemon sleeps: wake it
 * first), EBUSY (another session or update runs, or the old version is
 * still held), ESTALE (the layout changed), EINVAL (out of order). */
struct wc_push;
#define WC_PUSH_ALLOW_LAYOUT_CHANGE 0x1u  /* as WC_UPDATE_ALLOW_LAYOUT_CHANGE */
/* A partial update: write only the tensors that changed; at commit every
 * other checkpoint tensor keeps version N's bytes (and hash), copied on
 * the device (cuda) or in memory (host); not with a layout change. */
#define WC_PUSH_PARTIAL 0x2u
/* In place, for colocated RL where two copies do not fit: the session
 * rewrites the served version N's pools, and commit makes them version
 * N+1 (hashes recomputed) on the same mappings. Opened only while every
 * engine holding a lease has paused (wc_pause), else EBUSY naming the
 * pids; while it is open HELLO, MANIFEST, ATTACH and wc_resume are
 * refused (EBUSY, with a sentence). A session aborted, past its deadline
 * or whose trainer dies leaves N incomplete: attaches and resumes are
 * refused (EBUSY) until a complete update (another in-place session, a
 * beside one, or wc_update), and leased engines get WC_NOTICE_INCOMPLETE.
 * The same layout (not with WC_PUSH_ALLOW_LAYOUT_CHANGE); partial on the
 * host backend only. tools/wcd/README.md says what it costs where. */
#define WC_PUSH_IN_PLACE 0x4u
/* For a trainer that updates again and again (an RL loop): once the
 * version this session replaces is retired (at commit when no engine
 * holds it, else at its last detach), the daemon keeps its device pools
 * and the next session (flagged or not) takes them as its N+1, instead of
 * freeing 16 GB now and creating 16 GB then. Costs a second copy of the
 * weights on the device between updates (STATUS push.spare_bytes); a
 * session without the flag, a disk update and a sleep free it. Beside
 * sessions on a GPU only: EINVAL with WC_PUSH_IN_PLACE; on the host
 * backend nothing is kept (the reply says so). */
#define WC_PUSH_KEEP_SPARE 0x8u

struct wc_push_tensor {
	const char *name;            /* valid until commit or abort */
	const char *dtype;           /* safetensors spelling */
	uint32_t ndim;
	uint64_t shape[WC_DIMS_MAX]; /* the whole checkpoint tensor's shape */
	uint64_t bytes;              /* its bytes, as the trainer holds it */
	int written;                 /* 1 once wc_push_write took it */
};

/* Opens a session replacing base_version (0: whichever serves; another
 * number is refused, EINVAL, when it no longer serves). timeout_ms: 0 for
 * the daemon's default (60 s), at most an hour. */
int wc_push_open(struct wc_conn *c, unsigned flags, uint64_t base_version,
		 unsigned timeout_ms, struct wc_push **out,
		 struct wc_error *err);
/* The version the session will publish (N+1). */
uint64_t wc_push_version(const struct wc_push *p);
/* The checkpoint tensors to write, in the daemon's plan order. */
uint64_t wc_push_tensor_count(const struct wc_push *p);
int wc_push_tensor_at(const struct wc_push *p, uint64_t i,
		      struct wc_push_tensor *out);
/* Copies checkpoint tensor `name` (dtype, ndim, shape as the checkpoint
 * has it; bytes contiguous, row-major, at src) into this rank's pools.
 * ENOENT: no such checkpoint tensor; EINVAL: another dtype, shape or byte
 * count (named, both values; nothing is cast); EEXIST: written before. */
int wc_push_write(struct wc_push *p, const char *name, const char *dtype,
		  uint32_t ndim, const uint64_t *shape, const void *src,
		  uint64_t bytes, struct wc_error *err);
/* wc_push_write from CUDA memory, or from host memory into a CUDA
 * daemon's pools (issue 29): src_device is the CUDA ordinal (in this
 * process) of the GPU that holds src, any GPU of the host (another than
 * the daemon's: a peer copy), or -1 for host memory; stream a
 * cudaStream_t of the caller's (torch.cuda.current_stream().cuda_stream;
 * NULL: the legacy default stream). One 2-D copy per piece is queued on
 * that stream and the call returns: src must stay as it is until commit
 * or prepare, which wait for every stream used (a pageable host source
 * is staged before the call returns). Host daemons: src_device -1 and
 * no stream (ENOTSUP for a device source, EINVAL for a stream). */
int wc_push_write_dev(struct wc_push *p, const char *name, const char *dtype,
		      uint32_t ndim, const uint64_t *shape, const void *src,
		      uint64_t bytes, int src_device, void *stream,
		      struct wc_error *err);
/* Commits: the daemon publishes N+1 (r->version; r->seconds from open to
 * publish; r->bytes those written). Missing tensors refuse it (EINVAL,
 * named) unless the session is partial. p is freed in every
 * case; a refused commit aborts the session. */
int wc_push_commit(struct wc_push *p, struct wc_life_result *r,
		   struct wc_error *err);
/* The first half of a commit, for several ranks committed together
 * (prepare every rank's session, then commit each; a failed prepare:
 * abort them all, and no rank publishes): the daemon checks, seals and
 * hashes N+1 without publishing it; r->version is the version a commit
 * will publish. p stays the caller's either way: wc_push_commit (which
 * then only publishes, and cannot be refused but by a dead daemon) or
 * wc_push_abort. */
int wc_push_prepare(struct wc_push *p, struct wc_life_result *r,
		    struct wc_error *err);
/* Aborts: N+1 is freed, N serves on. p is freed (NULL is allowed). */
int wc_push_abort(struct wc_push *p, struct wc_error *err);

/* Nanoseconds of the connection's last update session, from its open to
 * its commit or abort (CLOCK_MONOTONIC), as the trainer's side spent
 * them: what bench/gpu/push_bench.py reports beside the daemon's seal
 * and hash. Zero until a session opens; each open starts them again. */
struct wc_push_times {
	uint64_t open_ns;            /* PUSH_OPEN round trip, pools received */
	uint64_t plan_ns;            /* PUSH_PLAN pages read and checked */
	uint64_t map_ns;             /* pools imported writable (first writes) */
	uint64_t copy_ns;            /* the writes' copies: queued on CUDA
				      * streams, made on host pools */
	uint64_t sync_ns;            /* the commit's wait for those copies */
	uint64_t commit_ns;          /* PUSH_COMMIT sent to its reply (for
				      * CUDA pools the unmap runs inside;
				      * a prepare's and its commit's summed) */
	uint64_t unmap_ns;           /* the pools unmapped */
	uint32_t maps;               /* pools imported */
	uint32_t copies;             /* copy calls: one a piece written */
};
void wc_push_times(const struct wc_conn *c, struct wc_push_times *out);

/* An engine's pause: "I will not read my pools until wc_resume", so that
 * an in-place update session (WC_PUSH_IN_PLACE) may rewrite them. The
 * promise is the connection's, and ends with it. r->version: the version
 * the served pools hold; r->msg a line. */
int wc_pause(struct wc_conn *c, struct wc_life_result *r,
	     struct wc_error *err);
/* Resumes reading: r->version is what the same mappings hold now (after
 * an in-place update, N+1: no re-attach; the models attached to N take
 * N+1's number and hashes, one MANIFEST, so that wc_verify checks the new
 * bytes). EBUSY while an in-place
 * session writes, or while the served version is incomplete (the
 * sentence says which; the connection stays paused). A connection that
 * never paused gets 0. */
int wc_resume(struct wc_conn *c, struct wc_life_result *r,
	      struct wc_error *err);

/* The times of the phases run so far on c (see struct wc_attach_times). */
void wc_times(const struct wc_conn *c, struct wc_attach_times *out);

/* --- DLPack hand-off (dlpack.c): for FFI users such as the Python package */

/* The CUDA ordinal (in this process) that an attached model's pointers
 * belong to, or -1 when they are host pointers. */
int wc_model_device(const struct wc_model *m);

/* sizeof(struct wc_tensor) in this library: an FFI user that mirrors the
 * struct steps through wc_tensor_at's table by it and reads fields added
 * at its end (newer libraries) only when they are there. */
size_t wc_tensor_size(void);

/* A reference count that keeps an attachment's memory in use: it starts at
 * 1 (the caller's, dropped with wc_dl_owner_put); each tensor wc_dl_tensor
 * builds holds one more until its deleter runs. When the count reaches 0,
 * release(arg) runs once, on the thread that dropped the last reference
 * (an FFI user detaches there), and the owner is freed. NULL: no memory. */
struct wc_dl_owner;
struct wc_dl_owner *wc_dl_owner_new(void (*release)(void *arg), void *arg);
void wc_dl_owner_put(struct wc_dl_owner *o);
long wc_dl_owner_refs(const struct wc_dl_owner *o);

/* Builds a DLManagedTensor (dlpack.h 0.6; returned as void * so that this
 * header needs only libc) over data: device_type 1 (kDLCPU) or 2 (kDLCUDA)
 * with device_id, DLPack dtype code and bits (one lane), ndim dimensions of
 * shape, row-major strides, byte_offset 0. It holds a reference on o; its
 * deleter (called by the framework that imported it) frees it and drops
 * the reference. data must stay mapped while o lives: the caller detaches
 * only from release. */
int wc_dl_tensor(struct wc_dl_owner *o, const void *data, int device_type,
		 int device_id, unsigned code, unsigned bits, uint32_t ndim,
		 const int64_t *shape, void **out, struct wc_error *err);
/* Calls the deleter of a DLManagedTensor that no framework took. */
void wc_dl_drop(void *managed);
/* DLManagedTensors built and not yet deleted, in this process (tests). */
long wc_dl_live(void);

/* PyCapsule support without linking libpython: wc_dl_python hands in
 * PyCapsule_IsValid and PyCapsule_GetPointer; wc_dl_capsule_destructor is a
 * PyCapsule destructor for capsules named "dltensor" (an unconsumed one has
 * its tensor deleted); after wc_dl_shutdown (the interpreter is exiting)
 * no release callback runs any more. */
void wc_dl_python(int (*is_valid)(void *capsule, const char *name),
		  void *(*get_pointer)(void *capsule, const char *name));
void wc_dl_capsule_destructor(void *capsule);
void wc_dl_shutdown(void);

int wc_api_version(void);

#ifdef __cplusplus
}
#endif

#endif
