/* SPDX-License-Identifier: MIT */
/*
 * wcd's lifecycle (issue 7): SLEEP, WAKE and versioned UPDATE.
 *
 *   lifecycle.c  the requests, the state machine, the jobs
 *   requests.c   hands SLEEP, WAKE, UPDATE to life_request and asks
 *                life_refusal before HELLO and ATTACH
 *   server.c     tells life_lease_dropped and life_client_gone
 *   status.c     adds life_status and life_version_pids to STATUS
 *   main.c       runs a pending job between turns of the loop (serve())
 *
 * A job (WAKE, UPDATE) runs the load pipeline, which drives the reactor
 * itself (rx_run_once); the reactor is not re-entrant, so a request's
 * callback only queues the job and stops the loop, and serve() runs it at
 * the top level. Other clients are served meanwhile by the load's own turns
 * of the loop; the requester gets its reply when the job ends.
 */
#ifndef WCD_LIFECYCLE_H
#define WCD_LIFECYCLE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu.h"
#include "wire.h"

#define LIFE_PIDS_SHOWN 32            /* pids named in one message */
#define LIFE_VERIFY_CHUNK (8u << 20)  /* bounce buffer for device hashes */

struct wcd;
struct wcd_client;
struct wire_notice;
struct wire_life_reply;
struct wcd_version;

enum life_job { LIFE_JOB_NONE, LIFE_JOB_WAKE, LIFE_JOB_UPDATE };

/* The lifecycle state, d->life (allocated at the first lifecycle request). */
struct wcd_life {
	unsigned level;               /* 0 awake; 1 or 2 while sleeping */
	bool waking, updating;        /* a job is running */
	/* sleep level 1: a host copy (backend staging: pinned on CUDA) of
	 * each pool's first pools[i].size bytes */
	void *host[GPU_POOLS_MAX];
	uint64_t host_len[GPU_POOLS_MAX];
	uint32_t nhost;
	uint64_t host_bytes;
	/* the queued job and whom to answer (NULL once it went away) */
	enum life_job job;
	struct wcd_client *who;
	uint64_t id;
	char model[WIRE_PATH_MAX + 1];    /* UPDATE: "" for the same dir */
	char model_served[WIRE_PATH_MAX + 1]; /* d->o.model after an update */
	int loading;                  /* version index an update fills, -1 */
	/* for STATUS */
	uint64_t sleeps, wakes, updates, failures;
	double wake_copy_s, wake_copy_gbps, wake_verify_s, sleep_copy_s;
	char last[WIRE_MSG_MAX + 1];  /* the last outcome, one line */
};

/* --- lifecycle.c: hooks -------------------------------------------------- */

/* SLEEP, WAKE, UPDATE (p, n: the payload of request id). */
void life_request(struct wcd *d, struct wcd_client *c, uint64_t id,
		  unsigned type, const uint8_t *p, uint32_t n);
/* Non-NULL (the message to send with WIRE_E_SLEEPING) while a request of
 * this type must be refused because the daemon sleeps or is waking. */
const char *life_refusal(struct wcd *d, unsigned type);
/* A lease on version index vi ended: frees an old version that has no
 * lease left. */
void life_lease_dropped(struct wcd *d, int vi);
/* Client c is being freed: a pending reply to it is dropped. */
void life_client_gone(struct wcd *d, struct wcd_client *c);
/* Runs a queued job, if any; true when the loop must run again. */
bool life_run_job(struct wcd *d);
/* Releases the CUDA context while the daemon only serves (awake, no job
 * queued or running): the pools live on through their exported fds (gpu.h
 * idle) and the next job maps them again. A no-op on the host backend,
 * with --ipc legacy or --keep-context. */
void life_device_idle(struct wcd *d);
/* Adds the lifecycle fields to the STATUS object (a json_t *). */
void life_status(struct wcd *d, void *json_obj);
/* A JSON array (json_t *) of the pids holding leases on version index vi. */
void *life_version_pids(struct wcd *d, int vi);
/* Frees host copies and state at exit. */
void life_free(struct wcd *d);

/* --- internals shared by lifecycle.c and life_job.c --------------------- */

struct wcd_life *life_get(struct wcd *d);
/* Answers the queued job's requester (if still there) and clears it. */
void life_reply(struct wcd *d, unsigned type, const struct wire_life_reply *r);
void life_fail(struct wcd *d, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Free bytes on the device: the backend's mem_info, or MemAvailable of
 * /proc/meminfo on the host backend. WCD_MEMINFO names another file in
 * /proc/meminfo's format (tests use it to make memory short); it is read
 * for the level-1 host copy too. */
int life_mem_free(struct wcd *d, uint64_t *free_b);
/* Bytes the pools of every resident version take on the device. */
uint64_t life_resident_bytes(struct wcd *d);
/* Bytes the pools of a plan take on the device (granularity-rounded). */
uint64_t life_plan_need(struct wcd *d, const struct wcd_version *v);
void life_host_free(struct wcd *d);
void life_run_wake(struct wcd *d);
void life_run_update(struct wcd *d);

/* lifecycle.c, over conn.h's clients */
void life_send(struct wcd_client *c, uint64_t id, struct wire_put *w);
/* Sends nt to every client that holds a lease; returns how many. */
unsigned life_notice_leased(struct wcd *d, const struct wire_notice *nt);
/* Pids of the clients holding a lease on version index vi (at most max). */
unsigned life_version_pids_get(struct wcd *d, int vi, pid_t *pids,
			       unsigned max);

#endif
