/* SPDX-License-Identifier: MIT */
/*
 * wcd's lifecycle requests: SLEEP, WAKE, UPDATE, and what HELLO and ATTACH
 * see of them. The jobs (WAKE, UPDATE) are in life_job.c.
 *
 * States (d->state, wcd.h; its name in STATUS and the ready file):
 *   ready     serving one version, or two while an old one still has
 *             leases after an update
 *   sleeping  level 1: every pool copied to host memory (the backend's
 *             staging memory: pinned on CUDA), then released; level 2:
 *             released, WAKE reloads from disk. HELLO and ATTACH are
 *             refused ("wake it first"), so is a second SLEEP; UPDATE at
 *             level 1 too (the host copy is version N), while at level 2
 *             it wakes the daemon straight from the new checkpoint (one
 *             load: life_run_update_asleep)
 *   waking    a WAKE job (or such an UPDATE) runs; HELLO/ATTACH refused,
 *             SLEEP/UPDATE busy
 *   updating  an UPDATE job loads version N+1 beside N; N keeps serving
 *
 * Rules: SLEEP is refused while any engine holds a lease (freeing shared
 * weights would corrupt every attached engine); an old version is freed
 * when its last lease ends; SLEEP, WAKE and UPDATE are accepted from the
 * daemon's own uid only (as SHUTDOWN).
 *
 * Known costs: SLEEP level 1 copies synchronously on the loop's thread (the
 * backend's copy_from_pool), so other clients wait for the copy (about
 * bytes / D2H rate); the jobs do not block the loop.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "wcd.h"
#include "conn.h"
#include "lifecycle.h"
#include "versions.h"
#include "wire_life.h"

/* Why the daemon cannot start another lifecycle request now, or NULL. */
static const char *life_busy(struct wcd *d, char *buf, size_t cap)
{
	if (d->state == WCD_UPDATING)
		snprintf(buf, cap,
			 "an update to version %" PRIu64 " is loading: wait for it to finish (wcctl status shows the state), then try again",
			 wcd_current(d)->number + 1);
	else if (d->state == WCD_WAKING)
		snprintf(buf, cap,
			 "the daemon is waking up from sleep level %u: wait for it to finish (wcctl status shows the state), then try again",
			 d->life.level);
	else
		return NULL;
	return buf;
}

/* Lists up to LIFE_PIDS_SHOWN pids "1, 2, 3" (", and N more" past that). */
static void pids_list(char *buf, size_t cap, const pid_t *pids, unsigned n)
{
	size_t off = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < n && i < LIFE_PIDS_SHOWN && off < cap; i++)
		off += (size_t)snprintf(buf + off, cap - off, "%s%d",
					i ? ", " : "", (int)pids[i]);
	if (n > LIFE_PIDS_SHOWN && off < cap)
		snprintf(buf + off, cap - off, ", and %u more",
			 n - LIFE_PIDS_SHOWN);
}

/* The host buffers of the pools, allocated on threads while the pool
 * before them is copied: on CUDA an allocation (faulting fresh pages in on
 * threads, then cudaHostRegister) costs about as much as the copy or more
 * (bench/RESULTS.md, issue 17), so one after the other halves the rate.
 * SLEEP_AHEAD pools are in the making at the top of each copy: 2 is the
 * pool being copied and the next one; 3 (two allocations at once) was no
 * faster on the H200 (0.85-0.88 s against 0.81-0.93 s for 16 GB, the
 * allocations slowing each other down). */
#define SLEEP_AHEAD 2

struct arena_job {
	struct gpu_dev *dev;
	uint64_t len;
	uint32_t pool;
	void *p;
	int ret;
	bool pending;             /* started, not waited for */
	bool thread;              /* on a thread (else done when started) */
	pthread_t th;
	uint64_t ns;              /* the allocation's own time */
	char err[WC_ERR_LEN];
};

static void *arena_job_fn(void *arg)
{
	struct arena_job *j = arg;
	const char *fail = getenv("WCD_TEST_SLEEP_ALLOC_FAIL");
	uint64_t t = rx_now_ns();

	/* the tests' hook: the host buffer of pool N cannot be had */
	if (fail && *fail && strtoul(fail, NULL, 10) == j->pool)
		j->ret = wc_errf(j->err, ENOMEM,
				 "WCD_TEST_SLEEP_ALLOC_FAIL: no host buffer for pool %u",
				 j->pool);
	else
		j->ret = j->dev->be->staging_alloc(j->dev, j->len, &j->p,
						   j->err);
	j->ns = rx_now_ns() - t;
	return NULL;
}

/* Starts allocating len bytes for pool; on a thread when one can be made. */
static void arena_job_start(struct arena_job *j, struct gpu_dev *dev,
			    uint32_t pool, uint64_t len)
{
	*j = (struct arena_job){ .dev = dev, .len = len, .pool = pool,
				 .pending = true };
	j->thread = !pthread_create(&j->th, NULL, arena_job_fn, j);
	if (!j->thread)
		arena_job_fn(j);
}

static int arena_job_wait(struct arena_job *j)
{
	if (j->thread)
		pthread_join(j->th, NULL);
	j->thread = false;
	j->pending = false;
	return j->ret;
}

/* Waits for every allocation still running and frees what it got. */
static void arena_jobs_drop(struct gpu_dev *dev, struct arena_job *jobs,
			    unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		if (jobs[k].pending && !arena_job_wait(&jobs[k]))
			dev->be->staging_free(dev, jobs[k].p, jobs[k].len);
}

/* Whether the kept arena (--sleep-arena keep) fits v's pools as they are. */
static bool arena_fits(const struct wcd_life *L, const struct wcd_version *v)
{
	if (!L->arena_bytes || L->nhost != v->npools)
		return false;
	for (uint32_t i = 0; i < v->npools; i++)
		if (L->host_len[i] != v->pools[i].size ||
		    (v->pools[i].size && !L->host[i]))
			return false;
	return true;
}

/* Level 1: copies every pool of v to host memory from the backend's
 * staging allocator (pinned on CUDA, so that WAKE copies at full speed):
 * into the kept arena when there is one that fits, else into buffers
 * allocated up to SLEEP_AHEAD pools ahead of the copy (arena_job). *reused
 * says which. */
static int sleep_copy(struct wcd *d, struct wcd_version *v, bool *reused,
		      char *err)
{
	const struct gpu_backend *be = d->dev.be;
	struct wcd_life *L = &d->life;
	struct arena_job jobs[SLEEP_AHEAD] = { 0 };
	uint64_t need = 0, have;
	uint32_t next = 0;         /* the next pool whose buffer to start */
	int ret = 0;

	*reused = arena_fits(L, v);
	if (!*reused)
		life_host_free(d);
	L->arena_bytes = 0;
	L->host_bytes = 0;
	for (uint32_t i = 0; i < v->npools; i++)
		need += v->pools[i].size;
	if (!*reused && version_host_available(&have) == 0 && need > have)
		return wc_errf(err, ENOMEM,
			       "the host copy needs %" PRIu64 " bytes but only %" PRIu64 " bytes of host memory are available (MemAvailable)",
			       need, have);
	L->nhost = v->npools;
	for (uint32_t i = 0; i < v->npools; i++) {
		uint64_t len = v->pools[i].size, tw, tc, job_ns = 0;
		struct arena_job *j = &jobs[i % SLEEP_AHEAD];

		/* pools i .. i + SLEEP_AHEAD - 1 allocating: the slot of
		 * pool n is n % SLEEP_AHEAD, free once pool n - SLEEP_AHEAD
		 * (< i) took its buffer */
		for (; !*reused && next < v->npools && next < i + SLEEP_AHEAD;
		     next++)
			if (v->pools[next].size)
				arena_job_start(&jobs[next % SLEEP_AHEAD],
						&d->dev, next,
						v->pools[next].size);
		if (!len)
			continue;
		tw = rx_now_ns();
		if (!*reused) {
			WC_ASSERT(j->pending && j->pool == i);
			ret = arena_job_wait(j);
			if (ret) {
				wc_errf(err, -ret, "%s", j->err);
				break;
			}
			L->host[i] = j->p;
			L->host_len[i] = len;
			job_ns = j->ns;
		}
		tc = rx_now_ns();
		ret = be->copy_from_pool(&d->dev, &v->pools[i], 0, L->host[i],
					 len);
		log_debug("sleep: pool %u (%" PRIu64 " bytes): host buffer allocated in %.3f s (%.3f s of it waited for), copied in %.3f s",
			  i, len, (double)job_ns / 1e9, (double)(tc - tw) / 1e9,
			  (double)(rx_now_ns() - tc) / 1e9);
		if (ret) {
			wc_errf(err, -ret,
				"copying pool %u (%" PRIu64 " bytes) to host memory failed: %s",
				i, len, strerror(-ret));
			break;
		}
		L->host_bytes += len;
	}
	arena_jobs_drop(&d->dev, jobs, SLEEP_AHEAD);
	return ret;
}

static void do_sleep(struct wcd *d, struct wcd_client *c, uint64_t id,
		     uint32_t level)
{
	struct wcd_version *v = wcd_current(d);
	struct wcd_life *L = &d->life;
	struct wire_life_reply r = { .level = level };
	char err[WC_ERR_LEN], busy[WIRE_MSG_MAX + 1], list[512];
	uint64_t released = 0, t0 = rx_now_ns();
	bool reused = false;
	pid_t *pids;
	unsigned n;
	int ret;

	if (life_busy(d, busy, sizeof(busy))) {
		reply_error(c, id, WIRE_E_BUSY, false, "%s", busy);
		return;
	}
	if (d->state == WCD_SLEEPING) {
		snprintf(busy, sizeof(busy),
			 "the daemon is already sleeping (level %u): wake it first (wcctl wake)",
			 L->level);
		reply_error(c, id, WIRE_E_STATE, false, "%s", busy);
		return;
	}
	if (level != 1 && level != 2) {
		snprintf(busy, sizeof(busy),
			 "sleep level %u does not exist: use --level 1 (keep a host copy, wake at copy speed) or --level 2 (drop the weights, wake reloads from disk)",
			 level);
		reply_error(c, id, WIRE_E_STATE, false, "%s", busy);
		return;
	}
	pids = malloc(WCD_CLIENTS_MAX * sizeof(*pids));
	n = pids ? server_lease_pids(d, -1, pids, WCD_CLIENTS_MAX) : 0;
	if (n) {
		pids_list(list, sizeof(list), pids, n);
		snprintf(busy, sizeof(busy),
			 "sleep of model weights is not supported while %u engine(s) are attached (pids: %s): the weights are shared zero-copy, so freeing them would corrupt every attached engine. Detach them first.",
			 n, list);
		free(pids);
		reply_error(c, id, WIRE_E_BUSY, false, "%s", busy);
		return;
	}
	if (!pids) {
		reply_error(c, id, WIRE_E_INTERNAL, false, "out of memory");
		return;
	}
	free(pids);
	if (level == 1) {
		ret = sleep_copy(d, v, &reused, err);
		if (ret) {
			life_host_free(d);
			snprintf(busy, sizeof(busy),
				 "cannot sleep at level 1: %s; the daemon keeps serving (try --level 2, which needs no host memory)",
				 err);
			L->failures++;
			metrics_life(&d->m, METRICS_SLEEP, false, 0, 0);
			reply_error(c, id, ret == -ENOMEM ? WIRE_E_LIMIT :
				    WIRE_E_INTERNAL, false, "%s", busy);
			return;
		}
		L->sleep_copy_s = (double)(rx_now_ns() - t0) / 1e9;
	}
	for (uint32_t i = 0; i < v->npools; i++) {
		released += v->pools[i].alloc_size;
		d->dev.be->pool_release(&d->dev, &v->pools[i]);
	}
	v->npools = 0;
	L->level = level;
	L->sleeps++;
	wcd_enter(d, WCD_SLEEPING);
	if (status_write_ready(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r.version = v->number;
	r.bytes = level == 1 ? L->host_bytes : released;
	r.ns = rx_now_ns() - t0;
	metrics_life(&d->m, METRICS_SLEEP, true, r.ns, r.bytes);
	if (level == 1)
		snprintf(r.msg, sizeof(r.msg),
			 "sleeping (level 1): %" PRIu64 " bytes copied to host memory in %.3f s (%s), %" PRIu64 " bytes of device %s released; wake with wcctl wake",
			 L->host_bytes, (double)r.ns / 1e9,
			 reused ? "into the arena kept since the last sleep" :
			 "into host memory allocated for it",
			 released, d->dev.name);
	else
		snprintf(r.msg, sizeof(r.msg),
			 "sleeping (level 2): %" PRIu64 " bytes of device %s released; wcctl wake reloads version %" PRIu64 " from %s",
			 released, d->dev.name, v->number, d->o.model);
	log_info("%s", r.msg);
	snprintf(L->last, sizeof(L->last), "%s", r.msg);
	life_reply_frame(c, WIRE_SLEEP, id, &r);
}

/* Queues a job (WIRE_WAKE or WIRE_UPDATE) and stops the loop so that
 * serve() runs it. */
static void queue_job(struct wcd *d, struct wcd_client *c, uint64_t id,
		      unsigned job)
{
	struct wcd_life *L = &d->life;

	WC_ASSERT(!L->job && !L->who.held);
	L->job = job;
	waiter_hold(&L->who, c, id);
	/* an UPDATE while asleep (level 2) wakes the daemon from the new
	 * checkpoint: it is a wake as far as the state goes */
	wcd_enter(d, job == WIRE_WAKE || d->state == WCD_SLEEPING ?
		  WCD_WAKING : WCD_UPDATING);
	rx_loop_stop(&d->loop);
}

static void do_wake(struct wcd *d, struct wcd_client *c, uint64_t id)
{
	char msg[WIRE_MSG_MAX + 1];

	if (life_busy(d, msg, sizeof(msg))) {
		reply_error(c, id, WIRE_E_BUSY, false, "%s", msg);
		return;
	}
	if (d->state != WCD_SLEEPING) {
		snprintf(msg, sizeof(msg),
			 "the daemon is not sleeping (state %s): there is nothing to wake",
			 wcd_state_name(d->state));
		reply_error(c, id, WIRE_E_STATE, false, "%s", msg);
		return;
	}
	queue_job(d, c, id, WIRE_WAKE);
}

static void do_update(struct wcd *d, struct wcd_client *c, uint64_t id,
		      const char *model, uint32_t flags)
{
	struct wcd_life *L = &d->life;
	char msg[WIRE_MSG_MAX + 1], list[512];
	pid_t pids[LIFE_PIDS_SHOWN];
	int free_slot;

	if (d->state == WCD_SLEEPING && L->level == 1) {
		/* the host copy is version N: waking restores it; an update
		 * would load N+1 beside it. Level 2 keeps nothing, so there
		 * an update wakes straight from the new checkpoint. */
		snprintf(msg, sizeof(msg),
			 "Cannot update weights while the daemon sleeps at level 1: it keeps version %" PRIu64 "'s host copy to wake from. Run 'wcctl wake --device %s', then 'wcctl update --device %s%s%s'; to update a sleeping daemon in one load, sleep at level 2 ('wcctl sleep --level 2': an update then wakes it from the new checkpoint)",
			 wcd_current(d)->number, d->dev.name, d->dev.name,
			 model[0] ? " --model " : "", model);
		reply_error(c, id, WIRE_E_SLEEPING, false, "%s", msg);
		return;
	}
	if (life_busy(d, msg, sizeof(msg))) {
		reply_error(c, id, WIRE_E_BUSY, false, "%s", msg);
		return;
	}
	if (model[0] && model[0] != '/') {
		snprintf(msg, sizeof(msg),
			 "UPDATE needs an absolute model directory, got '%s' (wcctl update resolves it for you)",
			 model);
		reply_error(c, id, WIRE_E_STATE, false, "%s", msg);
		return;
	}
	free_slot = version_slot_free(d);
	if (free_slot < 0) {
		int old = d->cur == 0 ? 1 : 0;
		unsigned n = server_lease_pids(d, old, pids, LIFE_PIDS_SHOWN);

		pids_list(list, sizeof(list), pids, n);
		snprintf(msg, sizeof(msg),
			 "versions %" PRIu64 " and %" PRIu64 " are both resident (version %" PRIu64 " is still attached by pids %s) and a daemon holds at most %d: those engines were told to re-attach; once they detach, update again",
			 d->ver[old].number, wcd_current(d)->number,
			 d->ver[old].number, list, WCD_VERSIONS);
		reply_error(c, id, WIRE_E_BUSY, false, "%s", msg);
		return;
	}
	snprintf(L->model, sizeof(L->model), "%s", model);
	L->update_flags = flags;
	queue_job(d, c, id, WIRE_UPDATE);
}

void life_request(struct wcd *d, struct wcd_client *c, uint64_t id,
		  unsigned type, const uint8_t *p, uint32_t n)
{
	char err[WC_ERR_LEN], msg[WIRE_MSG_MAX + 1];
	char *model = NULL;
	uint32_t level = 0, uflags = 0;
	int ret;

	switch (type) {
	case WIRE_SLEEP:
		ret = wire_sleep_get(p, n, &level, err);
		break;
	case WIRE_WAKE:
		ret = wire_empty_get(p, n, "WAKE", err);
		break;
	default:
		model = malloc(WIRE_PATH_MAX + 1);
		ret = model ? wire_update_get(p, n, model, &uflags, err) :
			      -ENOMEM;
		if (!model)
			snprintf(err, sizeof(err), "out of memory");
		break;
	}
	if (ret) {
		free(model);
		reply_error(c, id, wire_errcode(ret), true, "%s", err);
		return;
	}
	if (c->uid != geteuid()) {
		snprintf(msg, sizeof(msg),
			 "%s is only accepted from the daemon's own uid %u (you are uid %u)",
			 wire_type_name(type), (unsigned)geteuid(),
			 (unsigned)c->uid);
		reply_error(c, id, WIRE_E_PERM, false, "%s", msg);
	} else if (wcd_stopping(d)) {
		reply_error(c, id, WIRE_E_STATE, false,
				   "the daemon is stopping");
	} else if (type == WIRE_SLEEP) {
		do_sleep(d, c, id, level);
	} else if (type == WIRE_WAKE) {
		do_wake(d, c, id);
	} else {
		do_update(d, c, id, model, uflags);
	}
	free(model);
}

const char *life_refusal(struct wcd *d, unsigned type)
{
	static char msg[160];
	const struct wcd_life *L = &d->life;

	if (!L->level || (type != WIRE_HELLO && type != WIRE_ATTACH))
		return NULL;
	if (d->state != WCD_WAKING)
		return "the daemon is sleeping: wake it first (wcctl wake)";
	snprintf(msg, sizeof(msg),
		 "the daemon is waking up from sleep level %u: try again in a moment (wcctl status shows the state)",
		 L->level);
	return msg;
}

void life_device_idle(struct wcd *d)
{
	struct gpu_pool *pools[WCD_VERSIONS * GPU_POOLS_MAX];
	char err[WC_ERR_LEN];
	unsigned n = 0;
	uint64_t t0;
	int ret;

	/* a kept sleep arena (--sleep-arena keep) is registered in the
	 * context: releasing it would unpin the arena */
	if (!d->dev.be->idle || d->o.keep_context || d->o.ipc_legacy ||
	    d->state != WCD_READY || d->life.arena_bytes)
		return;
	for (int i = 0; i < WCD_VERSIONS; i++)
		for (uint32_t k = 0; d->ver[i].used && k < d->ver[i].npools; k++)
			pools[n++] = &d->ver[i].pools[k];
	t0 = rx_now_ns();
	ret = d->dev.be->idle(&d->dev, pools, n, err);
	if (ret)
		log_warn("keeping the CUDA context: %s", err);
	else
		log_info("device idle: CUDA context released in %.3f s; %u pools live on through their fds (--keep-context keeps it)",
			 (double)(rx_now_ns() - t0) / 1e9, n);
}

bool life_run_job(struct wcd *d)
{
	struct wcd_life *L = &d->life;
	unsigned job = L->job;

	if (!job)
		return false;
	/* a job drives the loop (the load's own turns): serve() runs it
	 * between turns, never a callback */
	WC_ASSERT(!rx_loop_in_callback(&d->loop));
	L->job = 0;
	if (wcd_stopping(d)) {            /* SIGTERM or SHUTDOWN came first */
		life_fail(d, WIRE_E_STATE, "the daemon is stopping: %s not run",
			  job == WIRE_WAKE ? "WAKE" : "UPDATE");
		return true;
	}
	if (job == WIRE_WAKE)
		life_run_wake(d);
	else if (d->state == WCD_WAKING)
		life_run_update_asleep(d);
	else
		life_run_update(d);
	return true;
}

void life_free(struct wcd *d)
{
	life_host_free(d);
}
