/* SPDX-License-Identifier: MIT */
/*
 * wcd's daemon/ folder, the bottom of the daemon: what every subsystem
 * shares and nothing else (test/wcd/wcd_deps.sh: no file here calls or
 * includes a file above it).
 *
 *   daemon.h    this file: options, struct wcd (the daemon, with a
 *               pointer to each subsystem's own state), struct wcd_model
 *               (one model: its versions, its path, its lifecycle), the
 *               state enum
 *   state.c     the daemon's state machine: names and transitions
 *   turn.c      the one place the loop is turned (wcd_serve,
 *               wcd_turn_until)
 *   counters.h  the metrics' counters, bumped inline by the subsystems
 *               (rendered by metrics/metrics.c)
 *   fault.h     the fault points (the tests' hooks) and their accessors
 *   fault.c     their table and the one getenv that reads them
 *               (README.md's "Fault points" lists them)
 */
#ifndef WCD_DAEMON_H
#define WCD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu.h"
#include "hash.h"
#include "identity.h"
#include "model.h"
#include "paths.h"
#include "plan.h"
#include "quant.h"
#include "wcreactor.h"
#include "wire.h"

#include "daemon/counters.h"

#define WCD_ALLOW_UID_MAX 16
#define WCD_ALLOW_GID_MAX 16          /* --allow-gid, --socket-group among them */
/* A connection must send its first frame within --frame-timeout, and finish
 * each frame it has begun within it (a silent or half-sent client holds a
 * slot and a buffer); idle between frames is fine. */
#define WCD_FRAME_MS 10000           /* --frame-timeout's default */
/* The header reads of a load (config.json, index, shard headers: a few
 * small reads per shard) must finish within --read-timeout. */
#define WCD_READ_TIMEOUT_MS 60000
#define WCD_VERSIONS 2                /* resident model versions (N, N+1) */
#define WCD_POOL_SIZE_DEFAULT (2ull << 30)
/* Staging: 12 x 8 MiB (96 MiB), page-cache reads in 1 MiB parts. Measured
 * on the H200 (warm llama-8b, hashes on the device; bench/RESULTS.md):
 * 47.4 GB/s, against 45.5 for 16 x 4 MiB and 43.8 for 32 x 4 MiB; a ring
 * small enough to stay in the CPU's cache while the DMA reads it, with
 * copies large enough for PCIe. */
#define WCD_SLOTS_DEFAULT 12
#define WCD_SLOT_SIZE_DEFAULT (8u << 20)
#define WCD_SLOTS_MAX 64
#define WCD_READ_PART_DEFAULT (1u << 20)
#define WCD_READ_CHUNK (8u << 20)     /* direct path: bytes per read */
#define WCD_READ_DEPTH 32             /* direct path: reads in flight */
#define WCD_READ_AHEAD_DEFAULT (256ull << 20) /* splice fill: --read-ahead */
#define WCD_READ_AHEAD_MAX (16ull << 30)
#define WCD_FORCE_WAIT_MS 10000       /* --force: SIGTERM, then SIGKILL */
#define WCD_FORCE_WAIT_MS_MAX 3600000 /* --force-wait: at most an hour */
/* The daemon's worker pool (reactor/work.c), which every thread wcd starts
 * goes through: the most threads at once (a load's fill workers and
 * read-ahead, its hash workers, a plan's preparation, a sleep's host
 * mapping, a freer) and the most jobs waiting to start. */
#define WCD_WORK_THREADS_MAX RX_POOL_THREADS_MAX
#define WCD_WORK_QUEUE_MAX 256

enum wcd_load_path { WCD_LOAD_AUTO, WCD_LOAD_DIRECT, WCD_LOAD_STAGED };
enum wcd_direct_io { WCD_DIO_AUTO, WCD_DIO_ON, WCD_DIO_OFF };
/* How the direct path fills the pools: splice(2) into the memfds on
 * worker threads, hashing as tensors land (fill.c), or io_uring reads into
 * their mappings, then a hash phase (load.c). */
enum wcd_direct_fill { WCD_FILL_SPLICE, WCD_FILL_READ };
/* Where tensor hashes are computed: on the device from the pools where the
 * backend can (cuda), else on CPU threads from the staging slots. */
enum wcd_hash_on { WCD_HASH_AUTO, WCD_HASH_DEVICE, WCD_HASH_CPU };

struct wcd_opts {
	const char *model;
	uint32_t tp_size, tp_rank, pp_size, pp_rank;
	const char *device;
	const char *runtime_dir;
	bool force;
	uint32_t force_wait_ms;       /* --force: SIGTERM to SIGKILL */
	uint32_t frame_timeout_ms;    /* --frame-timeout (WCD_FRAME_MS) */
	uint32_t read_timeout_ms;     /* --read-timeout (WCD_READ_TIMEOUT_MS) */
	bool hash;
	uid_t allow_uid[WCD_ALLOW_UID_MAX];
	unsigned nallow_uid;
	gid_t allow_gid[WCD_ALLOW_GID_MAX];
	unsigned nallow_gid;
	uid_t allow_updater[WCD_ALLOW_UID_MAX];   /* --allow-updater */
	unsigned nallow_updater;
	const char *socket_group;     /* --socket-group NAME|GID, or NULL */
	gid_t socket_gid;             /* its gid (access_resolve) */
	int socket_mode;              /* --socket-mode; -1: from the options */
	const char *allow_quant;
	const char *rules;
	const char *layout;           /* --layout FILE: instead of the preset */
	uint32_t ep_size, ep_rank;    /* expert parallelism (1, 0) */
	int32_t vocab_pad;            /* --vocab-pad; -1: the layout's (64) */
	uint64_t pool_size;
	bool ipc_legacy;
	bool keep_context;            /* no gpu idle while serving */
	bool sleep_arena_keep;        /* --sleep-arena keep */
	enum wcd_load_path load_path;
	unsigned slots;
	uint64_t slot_size;
	uint64_t read_part;           /* buffered reads: bytes per part, 0 whole */
	unsigned hash_threads;        /* 0: hash on the loop thread */
	bool hash_threads_given;      /* --hash-threads (not the default) */
	enum wcd_hash_on hash_on;
	enum wcd_direct_io direct_io;
	enum wcd_direct_fill direct_fill;
	uint64_t read_ahead;          /* splice fill: bytes past the workers */
	bool takeover;                /* --takeover: ask the running wcd */
	bool ho_rehash;               /* --takeover-verify hash */
	const char *metrics_listen;   /* --metrics-listen ADDR, or NULL */
	const char *log_file;         /* --log-file PATH, or NULL: stderr */
	enum log_format log_format;
	enum log_level log_level;     /* --log-level */
};

/* Phase timings of one load, for the log and STATUS. */
struct wcd_phases {
	double parse_s, read_s, copy_s, hash_s, publish_s, total_s;
	uint64_t read_bytes;          /* bytes read from files (supersets) */
	bool staged, direct_io;
};

/* One resident model version: its pools, manifest and leases. The daemon
 * holds up to WCD_VERSIONS so that an update can load N+1 beside
 * N; new attaches get `current`, N is freed when its last lease ends. */
struct wcd_version {
	bool used;
	uint64_t number;              /* 1, 2, ... */
	struct model model;
	struct plan_rules rules;
	struct plan plan;
	struct ident ident;
	uint8_t digest[BASE_HASH_LEN];  /* ident_digest */
	uint8_t ident_enc[IDENT_ENC_MAX];
	size_t ident_len;
	uint32_t npools;
	struct gpu_pool pools[GPU_POOLS_MAX];
	uint8_t (*hash)[BASE_HASH_LEN]; /* per plan tensor */
	bool hashed;
	unsigned leases;              /* leases held on this version */
	/* retired into the model's spare, not freed (an update session
	 * asked: WIRE_PUSH_KEEP_SPARE; model/versions.c) */
	bool keep_spare;
	struct wcd_phases phases;
	double load_seconds, load_gbps;
};

struct wcd;
struct wcd_client;
struct wcd_push;
struct wcd_server;
struct server_hooks;

/*
 * The daemon's state: one value, changed only by wcd_enter() (state.c),
 * which holds the table of allowed transitions. STATUS and the ready file
 * show wcd_state_name(). STOPPING is final: a job that ends after a
 * SIGTERM or SHUTDOWN leaves the daemon stopping.
 *
 *   STARTING -> LOADING -> READY <-> UPDATING
 *      \           ^         ^
 *       TAKING_OVER ---------/  (wcd --takeover; LOADING when the old
 *                                daemon died before it handed over)
 *                            |  \
 *                            |   SLEEPING -> WAKING -> READY (or SLEEPING
 *                            |                        when the wake failed)
 *   any state -> STOPPING
 */
enum wcd_state {
	WCD_STARTING,   /* options, device, ownership */
	WCD_LOADING,    /* the first load */
	WCD_READY,      /* serving one version (two after an update) */
	WCD_SLEEPING,   /* pools released; life.level says how */
	WCD_WAKING,     /* a WAKE job is queued or running */
	WCD_UPDATING,   /* an UPDATE job is queued or running; N serves */
	WCD_STOPPING,   /* no new connections; ends when the clients are gone */
	WCD_TAKING_OVER, /* --takeover: receiving and checking a handover */
	WCD_NSTATES
};

/* A request answered later (a lifecycle job): serve/ forgets the client
 * (c = NULL) if it goes away before the answer. */
struct wcd_waiter {
	struct wcd_waiter *next;      /* serve/'s list of held waiters */
	struct wcd_client *c;
	uint64_t id;
	uint16_t type;                /* the request's (for the metrics) */
	bool held;
};

/* One model's lifecycle (life/, lifecycle.h): d->model.life; the state
 * is d->state. */
struct wcd_life {
	/* 1 or 2 while SLEEPING or WAKING (and STOPPING after them), else 0 */
	unsigned level;
	/* sleep level 1: a host copy (backend staging: pinned on CUDA) of
	 * each pool's first pools[i].size bytes */
	void *host[GPU_POOLS_MAX];
	uint64_t host_len[GPU_POOLS_MAX];
	uint32_t nhost;
	uint64_t host_bytes;
	/* --sleep-arena keep: host[] outlives the wake (arena_bytes held
	 * while awake, 0 otherwise) and the next sleep copies into it */
	uint64_t arena_bytes;
	/* the host copy a level-1 wake restored from, being freed on the
	 * worker pool after the wake's reply (life/host_free.c), and its
	 * bytes (STATUS host_freeing_bytes); NULL and 0 when none is.
	 * SLEEP takes it back, UPDATE and exit wait for it. */
	struct host_freer *freeing;
	uint64_t freeing_bytes;
	/* the job queued (WIRE_WAKE or WIRE_UPDATE, 0 for none) and whom to
	 * answer */
	unsigned job;
	struct wcd_waiter who;
	char model[WIRE_PATH_MAX + 1];    /* UPDATE: "" for the same dir */
	uint32_t update_flags;            /* UPDATE: WIRE_UPDATE_* */
	/* for STATUS */
	uint64_t sleeps, wakes, updates, failures;
	double wake_copy_s, wake_copy_gbps, wake_verify_s, sleep_copy_s;
	char last[WIRE_MSG_MAX + 1];  /* the last outcome, one line */
};

/*
 * One model the daemon serves (d->model, wcd_model()): its resident
 * versions, the directory it is served from, and its lifecycle. Sleep,
 * wake and update act on one model's pools, so all of struct wcd_life is
 * the model's: its sleep level, the host copy of its pools, the job queued
 * on it and its counts. The daemon holds one today; code that works on a
 * model reaches it through wcd_model(), so that a second one is a loop.
 */
struct wcd_model {
	struct wcd_version ver[WCD_VERSIONS];
	int cur;                      /* index of the current version */
	/* the directory served after an update (d->o.model points here) */
	char path[WIRE_PATH_MAX + 1];
	struct wcd_life life;         /* life/: sleep, wake, update */
	/* the spare (model/versions.c): the device pools of a retired
	 * version that an update session asked to keep, for the next
	 * session's N+1 (no allocation, no free); nspare 0 when none */
	struct gpu_pool spare[GPU_POOLS_MAX];
	uint32_t nspare;
	uint64_t spare_of;            /* the version whose pools they were */
	/* the plan of the last version retired (its model's headers, rules
	 * and plan; no pools), which the next update session takes for its
	 * N+1 instead of reading the headers again when the files have not
	 * changed since (model/versions.c); planned.model.path NULL: none */
	struct wcd_version planned;
	uint64_t planned_gen;         /* counts the changes of planned */
};

struct wcd {
	struct wcd_opts o;
	struct gpu_dev dev;
	struct paths paths;
	int lock_fd;
	struct rx_loop loop;
	/* work off the loop: every thread wcd starts (rx_queue_work), its
	 * after functions on the loop; open from rx_loop_init to exit */
	struct rx_pool work;
	bool work_open;
	enum wcd_state state;         /* change with wcd_enter() only */
	struct wcd_model model;       /* the one model served (wcd_model) */
	uint64_t start_ns;
	struct rx_signal sig;         /* main.c: SIGTERM, SIGINT, SIGHUP */
	int exit_code;

	/* Each subsystem's own state, behind its own header: */
	struct wcd_server *srv;       /* serve/server.h (server_init) */
	struct wcd_ho *ho;            /* handover/handover.h (on first use) */
	struct mhttp *mhttp;          /* metrics/metrics.h (http_start) */
	/* status_write_ready (status.c, above every subsystem), set by
	 * main.c: how the files below rewrite the ready file */
	int (*ready_write)(struct wcd *d, char *err);
	struct wcd_metrics m;         /* counters (counters.h: bumped inline) */
	/* push/: the update session from a trainer's memory (its own
	 * struct, made at the first PUSH_OPEN; NULL before) */
	struct wcd_push *push;
	/* why a --takeover loaded from disk instead (the ready file's
	 * reloaded key), "" after a load or a handover */
	char reloaded[512];
};

/* The model the daemon serves: the one place that says there is one. */
static inline struct wcd_model *wcd_model(struct wcd *d)
{
	return &d->model;
}

/* m's current version: what new attaches get. */
static inline struct wcd_version *model_current(struct wcd_model *m)
{
	return &m->ver[m->cur];
}

static inline struct wcd_version *wcd_current(struct wcd *d)
{
	return model_current(wcd_model(d));
}

/* state.c */
const char *wcd_state_name(enum wcd_state s);
/* Moves d to state `to`. Returns false, changing nothing, when d is
 * STOPPING (final) and `to` is another state; aborts (WC_ASSERT) on a
 * transition the table does not allow. */
bool wcd_enter(struct wcd *d, enum wcd_state to);

/* turn.c. wcd_serve runs the loop until it has nothing left (rx_run),
 * past -EINTR; wcd_turn_until turns it until done(arg) holds, for a job
 * that waits on its own completions outside every callback. Both return 0
 * or the loop's negative errno (then done(arg) may still be false). */
int wcd_serve(struct wcd *d);
int wcd_turn_until(struct wcd *d, bool (*done)(void *arg), void *arg);

static inline bool wcd_stopping(const struct wcd *d)
{
	return d->state == WCD_STOPPING;
}

#endif
