/* SPDX-License-Identifier: MIT */
/*
 * wcd, the rank daemon: internals shared by its files.
 *
 *   main.c    options, start-up order, signals, shutdown
 *   own.c     ownership of the device's files: flock, --force, stale files
 *   load.c    the loader: model -> plan -> pools, through the reactor
 *   server.c  the socket: connections, framing, leases (conn.h)
 *   requests.c  what each request does
 *   status.c  STATUS JSON, the ready file, identity comparison
 */
#ifndef WCD_H
#define WCD_H

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

#define WCD_ALLOW_UID_MAX 16
#define WCD_CLIENTS_MAX 1024          /* connections at once */
#define WCD_LEASES_PER_CLIENT 64
#define WCD_REQ_MAX (1u << 20)        /* request payload bytes we accept */
#define WCD_OUTQ_MAX 16               /* frames queued per client */
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
#define WCD_FORCE_WAIT_MS 10000       /* --force: SIGTERM, then SIGKILL */

enum wcd_load_path { WCD_LOAD_AUTO, WCD_LOAD_DIRECT, WCD_LOAD_STAGED };
enum wcd_direct_io { WCD_DIO_AUTO, WCD_DIO_ON, WCD_DIO_OFF };
/* Where tensor hashes are computed: on the device from the pools where the
 * backend can (cuda), else on CPU threads from the staging slots. */
enum wcd_hash_on { WCD_HASH_AUTO, WCD_HASH_DEVICE, WCD_HASH_CPU };

struct wcd_opts {
	const char *model;
	uint32_t tp_size, tp_rank, pp_size, pp_rank;
	const char *device;
	const char *runtime_dir;
	bool force;
	bool hash;
	uid_t allow_uid[WCD_ALLOW_UID_MAX];
	unsigned nallow_uid;
	const char *allow_quant;
	const char *rules;
	const char *layout;           /* --layout FILE: instead of the preset */
	uint32_t ep_size, ep_rank;    /* expert parallelism (1, 0) */
	int32_t vocab_pad;            /* --vocab-pad; -1: the layout's (64) */
	uint64_t pool_size;
	bool ipc_legacy;
	bool keep_context;            /* no gpu idle while serving */
	enum wcd_load_path load_path;
	unsigned slots;
	uint64_t slot_size;
	uint64_t read_part;           /* buffered reads: bytes per part, 0 whole */
	unsigned hash_threads;        /* 0: hash on the loop thread */
	enum wcd_hash_on hash_on;
	enum wcd_direct_io direct_io;
};

/* Phase timings of one load, for the log and STATUS. */
struct wcd_phases {
	double parse_s, read_s, copy_s, hash_s, publish_s, total_s;
	uint64_t read_bytes;          /* bytes read from files (supersets) */
	bool staged, direct_io;
};

/* One resident model version: its pools, manifest and leases. The daemon
 * holds up to WCD_VERSIONS so that an update (issue 7) can load N+1 beside
 * N; new attaches get `current`, N is freed when its last lease ends. */
struct wcd_version {
	bool used;
	uint64_t number;              /* 1, 2, ... */
	struct model model;
	struct plan_rules rules;
	struct plan plan;
	struct ident ident;
	uint8_t digest[WC_HASH_LEN];  /* ident_digest */
	uint8_t ident_enc[IDENT_ENC_MAX];
	size_t ident_len;
	uint32_t npools;
	struct gpu_pool pools[GPU_POOLS_MAX];
	uint8_t (*hash)[WC_HASH_LEN]; /* per plan tensor */
	bool hashed;
	unsigned leases;              /* leases held on this version */
	struct wcd_phases phases;
	double load_seconds, load_gbps;
};

struct wcd_client;
struct wcd_life;

struct wcd {
	struct wcd_opts o;
	struct gpu_dev dev;
	struct paths paths;
	int lock_fd;
	struct rx_loop loop;
	const char *state;            /* "loading", "ready", "stopping" */
	struct wcd_version ver[WCD_VERSIONS];
	int cur;                      /* index of the current version */
	uint64_t start_ns;

	/* server */
	int listen_fd;
	struct rx_accept accept;
	struct rx_signal sig;
	struct rx_timer stop_timer;
	struct wcd_client *clients;
	unsigned nclients;
	uint64_t next_lease;
	uint64_t requests;
	uint64_t mismatches;
	bool stopping;
	int exit_code;

	struct wcd_life *life;        /* lifecycle.c: sleep, wake, update */
};

static inline struct wcd_version *wcd_current(struct wcd *d)
{
	return &d->ver[d->cur];
}

/* own.c */
int own_acquire(struct wcd *d, char *err);
void own_release(struct wcd *d);
void own_remove_published(struct wcd *d);

/* load.c: parse + plan (no I/O on tensor data), then the load. */
int load_prepare(struct wcd *d, struct wcd_version *v, char *err);
int load_run(struct wcd *d, struct wcd_version *v, char *err);
/* Creates v's pools as planned (v->npools counts those made); no check of
 * free memory (the callers word that differently). */
int load_pools_alloc(struct wcd *d, struct wcd_version *v, char *err);
void load_version_free(struct wcd *d, struct wcd_version *v);

/* server.c */
int server_listen(struct wcd *d, char *err);
void server_start(struct wcd *d);
void server_stop(struct wcd *d);
/* The live clients' pids and lease counts (at most max). */
unsigned server_clients(struct wcd *d, pid_t *pids, unsigned *leases,
			unsigned max);

/* status.c */
char *status_json(struct wcd *d);       /* malloc'ed, NUL-terminated */
int status_write_ready(struct wcd *d, char *err);
/* Fills mm[] with every differing identity field; returns the count. */
unsigned status_ident_diff(const struct ident *a, const struct ident *b,
			   struct wire_mismatch *mm, unsigned max);

#endif
