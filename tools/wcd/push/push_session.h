/* SPDX-License-Identifier: MIT */
/*
 * push_session.c: an update session's state (d->push) and every way a
 * session ends (push.h has the folder's map). The files above it open and
 * commit sessions; this one frees them.
 */
#ifndef WCD_PUSH_SESSION_H
#define WCD_PUSH_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/daemon.h"

#define PUSH_TIMEOUT_MS_DEFAULT 60000   /* open to commit, unless asked */

/* For STATUS: the open session and the last one. */
struct push_info {
	bool open;                    /* OPENING or WRITING */
	bool writing;
	bool prepared;                /* sealed and hashed, not published */
	uint64_t session, version, bytes;
	pid_t pid;
	uid_t uid;
	double seconds;               /* since open */
	uint32_t timeout_ms;
	uint64_t opened, committed, aborted;
	/* the last session that ended */
	bool last_ok;
	uint64_t last_version, last_bytes;
	pid_t last_pid;
	uid_t last_uid;
	double last_seconds;
	char last[WIRE_MSG_MAX + 1];  /* its outcome, one line; "" if none */
	/* in place (push_inplace.c) */
	bool in_place;                /* the open session is */
	uint64_t incomplete;          /* the served version, when incomplete */
	unsigned paused, leased;      /* clients paused; holding a lease */
	char incomplete_why[WIRE_MSG_MAX + 1];
};

/* PUSH_HASHING: a commit's first half runs on the worker pool (host
 * pools: push_commit.c), from WRITING, back to it or on at its end. */
enum push_phase { PUSH_IDLE, PUSH_OPENING, PUSH_WRITING, PUSH_PREPARED,
		  PUSH_HASHING };

struct push_commit_job;

/* The deadline's timer, allocated per session: a stopped timer still
 * completes later (-ECANCELED), so it outlives the session that armed it
 * and frees itself in its callback. */
struct push_timer {
	struct rx_timer t;
	struct wcd *d;                /* NULL once its session has ended */
};

struct wcd_push {
	enum push_phase phase;
	bool queued;                  /* OPENING: the job has yet to run */
	bool asleep;                  /* opened asleep (push_asleep.c) */
	struct wcd_client *c;         /* WRITING: the trainer's connection */
	struct wcd_waiter who;        /* OPENING: whom to answer */
	uint64_t session, next_session;
	uint32_t flags, timeout_ms;
	uint64_t base;                /* N */
	int vi;                       /* N+1's slot in d->model.ver */
	uint32_t ntensors;
	uint64_t bytes;
	uint64_t t0;                  /* the open request */
	uint64_t t_seal;              /* the commit's first half began */
	uint64_t prepared_ns;         /* PREPARED: that half took */
	uint64_t kept;                /* partial: bytes kept from N */
	uint64_t copied;              /* in place, host: bytes copied in */
	pid_t pid;
	uid_t uid;
	struct push_timer *timer;
	/* HASHING: the job (push_commit.c's); expired: the deadline passed
	 * meanwhile, which the job's end acts on */
	struct push_commit_job *job;
	bool expired;
	struct push_info last;        /* the last_* fields and counts */
	/* pools of an aborted session whose open reply (their fd numbers)
	 * may still be unsent to parked_for: released once that connection
	 * is freed (no send in flight then), so that no reused number goes
	 * out in their place */
	struct gpu_pool parked[GPU_POOLS_MAX];
	uint32_t nparked;
	struct wcd_client *parked_for;
	/* in place (WIRE_PUSH_IN_PLACE): the session rewrites the served
	 * version (number base); direct: its pools themselves (a device:
	 * vi is the served slot), else (host) fresh pools in slot vi that
	 * the commit copies into the served ones */
	bool in_place, direct;
	/* the open took the model's spare as N+1's pools (versions.h) */
	bool spare;
	/* the open took the plan kept from before (version_planned) */
	bool plan_kept;
	/* the trainer sent ABORT (its pools unmapped): a beside N+1 that
	 * came from the spare, or whose session asked to keep one, goes back
	 * to the spare; any other end frees it (a trainer past its deadline
	 * may still map it writable) */
	bool let_go;
	/* the served version whose in-place session ended without a commit
	 * (0: none): incomplete while it is still the one served */
	uint64_t incomplete;
	char incomplete_why[WIRE_MSG_MAX + 1];
	char refusal[WIRE_MSG_MAX + 1];   /* push_refusal's sentence */
};

double push_secs(uint64_t ns);
/* d->push, made at the first use (NULL: out of memory). */
struct wcd_push *push_get(struct wcd *d);
/* Stops the deadline (its timer frees itself). */
void push_timer_disarm(struct wcd_push *p);
/* Arms the deadline: p->timeout_ms from now the session aborts. */
int push_deadline_arm(struct wcd *d, struct wcd_push *p);
/* Ends the session: records how (ok: published), leaves UPDATING. */
void push_session_end(struct wcd *d, struct wcd_push *p, bool ok,
		      const char *msg);
/* Aborts the open session: N+1 freed (or parked, push_session.c says
 * when), N serves on, why logged and kept for STATUS. In place: N is
 * marked incomplete instead, and every client holding a lease is told
 * (WIRE_NOTICE_INCOMPLETE). */
void push_session_abort(struct wcd *d, struct wcd_push *p, const char *why);
/* Connection c is being freed: parked pools go, its session aborts. */
void push_session_gone(struct wcd *d, struct wcd_client *c);
/* The served version is incomplete (an in-place session ended without a
 * commit, and no update has replaced it since). */
bool push_incomplete(struct wcd *d);
/* Sends a NOTICE of kind to every client holding a lease; how many. */
unsigned push_notify_leased(struct wcd *d, uint32_t kind, uint64_t version,
			    const char *msg);
/* At exit, after the loop closed. */
void push_session_free(struct wcd *d);

#endif
