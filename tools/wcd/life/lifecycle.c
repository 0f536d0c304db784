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
 * Known costs: SLEEP level 1 runs on the loop's thread (it pins the host
 * buffers a thread maps, queues each pool's copy, and waits for the last),
 * so other clients wait for it (bench/RESULTS.md, issue 17, has the
 * figures); the jobs do not block the loop.
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
#include "life/lifecycle.h"
#include "life/life_job.h"
#include "serve/server.h"
#include "model/versions.h"
#include "wire_life.h"
#include "daemon/fault.h"

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
			 d->model.life.level);
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

/* A level-1 sleep's host buffers come in three stages that overlap (issue
 * 17; bench/RESULTS.md measured each on the H200, per 16 GiB): a mapper
 * thread maps and first-touches every pool's buffer in order (host_map:
 * faulting fresh memory in, 0.3 s with 16 threads, no device call); the
 * calling thread pins each one (staging_pin: cudaHostRegister, 0.37 s,
 * serialised by the driver whatever the threads) and queues its copy
 * (copy_from_pool_async, 0.31 s at the D2H rate) right after, so that a
 * copy is never called while a register holds the driver (a cudaMemcpy
 * then waits for it) and the device copies pool i while pool i+1 is
 * pinned. The mapper runs ahead freely: every buffer is needed anyway. */
struct host_mapper {
	struct gpu_dev *dev;
	const struct wcd_version *v;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t done;            /* pools [0, done) are mapped, or failed */
	bool stop;                /* the sleep failed: map no more */
	bool thread;              /* on a thread (else ran when started) */
	pthread_t th;
	void *p[GPU_POOLS_MAX];   /* until the sleep takes it */
	bool have[GPU_POOLS_MAX]; /* held already (taken back): not mapped */
	int ret[GPU_POOLS_MAX];
	uint64_t ns[GPU_POOLS_MAX];
	char err[BASE_ERR_LEN];     /* of the failed pool */
};

static void *host_mapper_fn(void *arg)
{
	struct host_mapper *M = arg;
	const struct wcd_version *v = M->v;
	char err[BASE_ERR_LEN];

	for (uint32_t i = 0; i < v->npools; i++) {
		uint64_t t = rx_now_ns(), len = v->pools[i].size;
		void *p = NULL;
		bool stop;
		int ret = 0;

		pthread_mutex_lock(&M->mu);
		stop = M->stop;
		pthread_mutex_unlock(&M->mu);
		if (stop)
			break;
		/* the tests' hook: the host buffer of pool N cannot be had */
		if (len && fault_num(FAULT_SLEEP_ALLOC_FAIL, -1) == i)
			ret = base_errf(err, ENOMEM,
				      "WCD_TEST_SLEEP_ALLOC_FAIL: no host buffer for pool %u",
				      i);
		else if (len && !M->have[i])
			ret = M->dev->be->host_map(M->dev, len, &p, err);
		pthread_mutex_lock(&M->mu);
		M->p[i] = p;
		M->ret[i] = ret;
		M->ns[i] = rx_now_ns() - t;
		if (ret)
			snprintf(M->err, sizeof(M->err), "%s", err);
		M->done = i + 1;
		pthread_cond_broadcast(&M->cv);
		pthread_mutex_unlock(&M->mu);
		if (ret)
			break;
	}
	return NULL;
}

static void host_mapper_start(struct host_mapper *M, struct gpu_dev *dev,
			      const struct wcd_version *v, void *const *have)
{
	memset(M, 0, sizeof(*M));
	M->dev = dev;
	M->v = v;
	for (uint32_t i = 0; i < v->npools; i++)
		M->have[i] = have[i] != NULL;
	pthread_mutex_init(&M->mu, NULL);
	pthread_cond_init(&M->cv, NULL);
	M->thread = !pthread_create(&M->th, NULL, host_mapper_fn, M);
	if (!M->thread)
		host_mapper_fn(M);
}

/* Waits for pool i's buffer: 0 and *p (now the caller's), or the mapping's
 * error (in err). */
static int host_mapper_take(struct host_mapper *M, uint32_t i, void **p,
			    uint64_t *ns, char *err)
{
	int ret;

	pthread_mutex_lock(&M->mu);
	while (M->done <= i)
		pthread_cond_wait(&M->cv, &M->mu);
	ret = M->ret[i];
	*p = M->p[i];
	*ns = M->ns[i];
	M->p[i] = NULL;
	if (ret)
		snprintf(err, BASE_ERR_LEN, "%s", M->err);
	pthread_mutex_unlock(&M->mu);
	return ret;
}

/* The tests' hook: pinning pool N fails (WCD_TEST_SLEEP_PIN_FAIL=N), once
 * the mapper has mapped every pool, so that buffers mapped ahead of the
 * failure are there for the drain (host_mapper_end) to free. */
static int test_pin_fail(struct host_mapper *M, uint32_t i, char *err)
{
	if (fault_num(FAULT_SLEEP_PIN_FAIL, -1) != i)
		return 0;
	pthread_mutex_lock(&M->mu);
	while (M->done < M->v->npools && !M->ret[M->done - 1])
		pthread_cond_wait(&M->cv, &M->mu);
	pthread_mutex_unlock(&M->mu);
	return base_errf(err, ENOMEM,
		       "WCD_TEST_SLEEP_PIN_FAIL: pool %u cannot be pinned", i);
}

/* Stops the mapper, waits for it and unmaps what it mapped that the sleep
 * did not take. */
static void host_mapper_end(struct host_mapper *M)
{
	pthread_mutex_lock(&M->mu);
	M->stop = true;
	pthread_mutex_unlock(&M->mu);
	if (M->thread)
		pthread_join(M->th, NULL);
	for (uint32_t i = 0; i < M->done; i++)
		if (M->p[i])
			M->dev->be->host_unmap(M->dev, M->p[i],
					       M->v->pools[i].size);
	pthread_mutex_destroy(&M->mu);
	pthread_cond_destroy(&M->cv);
}

static uint32_t life_host_reclaim(struct wcd *d, const struct wcd_version *v,
				  uint64_t *bytes);

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
 * staging memory (pinned on CUDA, so that WAKE copies at full speed): into
 * the kept arena when there is one that fits, else into buffers mapped
 * ahead by a thread and pinned here (host_mapper). *reused says which.
 * A sleep right after a wake takes back the buffers of that wake's host
 * copy that its free has not reached yet (still mapped and pinned: *took
 * of them), and maps and pins only the others. Every queued copy is
 * waited for before anything is freed, failure or not. */
static int sleep_copy(struct wcd *d, struct wcd_version *v, bool *reused,
		      uint32_t *took, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	struct wcd_life *L = &d->model.life;
	struct host_mapper M;
	uint64_t need = 0, have, t0 = rx_now_ns(), pin_ns = 0, wait_ns = 0;
	uint64_t tw, tp;
	char werr[BASE_ERR_LEN];
	bool queued = false;
	uint64_t back = 0;
	int ret = 0, wret;

	/* the last wake's copy: what is not freed yet comes back */
	*took = life_host_reclaim(d, v, &back);
	*reused = arena_fits(L, v);
	if (!*reused && !*took)
		life_host_free(d);
	L->arena_bytes = 0;
	L->host_bytes = 0;
	for (uint32_t i = 0; i < v->npools; i++)
		need += v->pools[i].size;
	need -= back;
	if (!*reused && version_host_available(&have) == 0 && need > have)
		return base_errf(err, ENOMEM,
			       "the host copy needs %" PRIu64 " bytes but only %" PRIu64 " bytes of host memory are available (MemAvailable)",
			       need, have);
	L->nhost = v->npools;
	if (!*reused)
		host_mapper_start(&M, &d->dev, v, L->host);
	for (uint32_t i = 0; i < v->npools; i++) {
		uint64_t len = v->pools[i].size, map_ns = 0;
		void *p;

		if (!len)
			continue;
		tw = tp = rx_now_ns();
		if (!*reused && !L->host[i]) {
			ret = host_mapper_take(&M, i, &p, &map_ns, err);
			if (ret)
				break;
			tp = rx_now_ns();
			ret = test_pin_fail(&M, i, err);
			if (!ret)
				ret = be->staging_pin(&d->dev, p, len, err);
			if (ret) {
				be->host_unmap(&d->dev, p, len);
				break;
			}
			L->host[i] = p;
			L->host_len[i] = len;
			pin_ns += rx_now_ns() - tp;
			wait_ns += tp - tw;
		}
		ret = be->copy_from_pool_async(&d->dev, &v->pools[i], 0,
					       L->host[i], len);
		log_debug("sleep: pool %u (%" PRIu64 " bytes): host buffer mapped in %.3f s (%.3f s of it waited for), pinned and its copy queued in %.3f s",
			  i, len, (double)map_ns / 1e9, (double)(tp - tw) / 1e9,
			  (double)(rx_now_ns() - tp) / 1e9);
		if (ret) {
			base_errf(err, -ret,
				"copying pool %u (%" PRIu64 " bytes) to host memory failed: %s",
				i, len, strerror(-ret));
			break;
		}
		queued = true;
		L->host_bytes += len;
	}
	tw = rx_now_ns();
	wret = queued ? be->copy_wait(&d->dev, werr) : 0;
	if (wret && !ret) {
		ret = wret;
		snprintf(err, BASE_ERR_LEN, "%s", werr);
	}
	if (!*reused)
		host_mapper_end(&M);
	log_debug("sleep: %" PRIu64 " bytes in %.3f s: mappings waited for %.3f s, pinning %.3f s, the last copies %.3f s",
		  L->host_bytes, (double)(rx_now_ns() - t0) / 1e9,
		  (double)wait_ns / 1e9, (double)pin_ns / 1e9,
		  (double)(rx_now_ns() - tw) / 1e9);
	return ret;
}

static void do_sleep(struct wcd *d, struct wcd_client *c, uint64_t id,
		     uint32_t level)
{
	struct wcd_version *v = wcd_current(d);
	struct wcd_life *L = &d->model.life;
	struct wire_life_reply r = { .level = level };
	char err[BASE_ERR_LEN], busy[WIRE_MSG_MAX + 1], list[512], how[160];
	uint64_t released = 0, t0 = rx_now_ns();
	bool reused = false;
	uint32_t took = 0, npools = v->npools;
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
		ret = sleep_copy(d, v, &reused, &took, err);
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
	if (d->ready_write(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r.version = v->number;
	r.bytes = level == 1 ? L->host_bytes : released;
	r.ns = rx_now_ns() - t0;
	metrics_life(&d->m, METRICS_SLEEP, true, r.ns, r.bytes);
	if (reused)
		snprintf(how, sizeof(how), "into the arena kept since the last sleep");
	else if (took)
		snprintf(how, sizeof(how),
			 "%u of %u buffers into the last wake's host memory, taken back from its free",
			 took, npools);
	else
		snprintf(how, sizeof(how), "into host memory allocated for it");
	if (level == 1)
		snprintf(r.msg, sizeof(r.msg),
			 "sleeping (level 1): %" PRIu64 " bytes copied to host memory in %.3f s (%s), %" PRIu64 " bytes of device %s released; wake with wcctl wake",
			 L->host_bytes, (double)r.ns / 1e9, how,
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
	struct wcd_life *L = &d->model.life;

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
	struct wcd_life *L = &d->model.life;
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
		int old = d->model.cur == 0 ? 1 : 0;
		unsigned n = server_lease_pids(d, old, pids, LIFE_PIDS_SHOWN);

		pids_list(list, sizeof(list), pids, n);
		snprintf(msg, sizeof(msg),
			 "versions %" PRIu64 " and %" PRIu64 " are both resident (version %" PRIu64 " is still attached by pids %s) and a daemon holds at most %d: those engines were told to re-attach; once they detach, update again",
			 d->model.ver[old].number, wcd_current(d)->number,
			 d->model.ver[old].number, list, WCD_VERSIONS);
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
	char err[BASE_ERR_LEN], msg[WIRE_MSG_MAX + 1];
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
	const struct wcd_life *L = &d->model.life;

	if (!L->level || (type != WIRE_HELLO && type != WIRE_ATTACH))
		return NULL;
	if (d->state != WCD_WAKING)
		return "the daemon is sleeping: wake it first (wcctl wake)";
	snprintf(msg, sizeof(msg),
		 "the daemon is waking up from sleep level %u: try again in a moment (wcctl status shows the state)",
		 L->level);
	return msg;
}

/* --- the host copy's free after a wake ------------------------------------ */

/* The host copy a level-1 wake restored from, freed on a thread after the
 * wake's reply: the unpinning of 16 GiB takes 0.26-0.30 s on the H200 and
 * the munmap 0.05 s, no faster from more threads (bench/RESULTS.md, issue
 * 17). One per wake, allocated: d->model.life.freeing points to it until it is
 * joined (freer_done); it frees itself when its rx_wake has closed, which
 * may be after a later wake made the next one. */
struct host_freer {
	struct wcd *d;
	void *p[GPU_POOLS_MAX];
	uint64_t len[GPU_POOLS_MAX];
	uint32_t n;
	uint64_t bytes;
	uint64_t t0, ns;              /* ns: the thread's, read after join */
	int stop;                     /* atomic: a sleep takes the rest back */
	pthread_t th;
	bool closing;
	struct rx_wake wake;
	struct rx_wake_node node;
};

/* The tests' hook (WCD_TEST_WAKE_FREE_GATE=PATH): the free waits, up to
 * 60 s, for PATH to exist (and removes it) or for a sleep to stop it, so
 * that a test can act while a free is pending; before the first buffer, or
 * before buffer K with WCD_TEST_WAKE_FREE_GATE_AT=K. */
static void test_free_gate(struct host_freer *F, uint32_t i)
{
	const char *gate = fault_str(FAULT_WAKE_FREE_GATE);

	if (!gate || !*gate || fault_num(FAULT_WAKE_FREE_GATE_AT, 0) != i)
		return;
	for (int k = 0; k < 6000 && access(gate, F_OK) &&
	     !__atomic_load_n(&F->stop, __ATOMIC_ACQUIRE); k++)
		usleep(10000);
	unlink(gate);
}

static void *freer_fn(void *arg)
{
	struct host_freer *F = arg;
	struct gpu_dev *dev = &F->d->dev;

	for (uint32_t i = 0; i < F->n; i++) {
		test_free_gate(F, i);
		if (__atomic_load_n(&F->stop, __ATOMIC_ACQUIRE))
			break;
		if (F->p[i])
			dev->be->staging_free(dev, F->p[i], F->len[i]);
		F->p[i] = NULL;
	}
	F->ns = rx_now_ns() - F->t0;
	/* the last thing this thread does with F: the loop joins it next */
	rx_wake_post(&F->wake, &F->node);
	return NULL;
}

/* Joins the running free: its bytes are gone. */
static void freer_done(struct wcd *d, const char *how)
{
	struct host_freer *F = d->model.life.freeing;

	pthread_join(F->th, NULL);
	log_info("the host copy of the last wake (%" PRIu64 " bytes in %u buffers) was freed %.3f s after the wake's reply%s",
		 F->bytes, F->n, (double)F->ns / 1e9, how);
	d->model.life.freeing = NULL;
	d->model.life.freeing_bytes = 0;
}

static void freer_wake_cb(struct rx_wake *w, struct rx_wake_node *node)
{
	struct host_freer *F = container_of(w, struct host_freer, wake);
	struct wcd *d = F->d;

	if (!node) {
		free(F);
		/* skipped while the free was pending; not in the middle of a
		 * handover (the old daemon exits after it, or resumes with
		 * the context it has) */
		if (!d->srv->pausing)
			life_device_idle(d);
		return;
	}
	if (d->model.life.freeing == F)
		freer_done(d, "");
	if (!F->closing) {
		F->closing = true;
		rx_wake_close(w);
	}
}

/* A level-1 sleep while the last wake's host copy is being freed: the
 * free stops at its next buffer (on the H200 it unpins 16 GiB in 0.3 s,
 * and the sleep would pin as much again in 0.37 s) and the buffers it has
 * not freed come back into d->model.life.host[] for v's pools they fit (those of
 * the version that woke, unless an update came between: then none fit
 * and they are freed here). Returns how many came back, their bytes in
 * *bytes. */
static uint32_t life_host_reclaim(struct wcd *d, const struct wcd_version *v,
				  uint64_t *bytes)
{
	struct host_freer *F = d->model.life.freeing;
	struct wcd_life *L = &d->model.life;
	uint32_t took = 0, freed = 0;

	*bytes = 0;
	if (!F)
		return 0;
	__atomic_store_n(&F->stop, 1, __ATOMIC_RELEASE);
	pthread_join(F->th, NULL);
	d->model.life.freeing = NULL;
	d->model.life.freeing_bytes = 0;
	for (uint32_t i = 0; i < F->n; i++) {
		if (!F->p[i]) {
			freed += F->len[i] != 0;
			continue;
		}
		if (F->n == v->npools && F->len[i] == v->pools[i].size &&
		    !L->host[i]) {
			L->host[i] = F->p[i];
			L->host_len[i] = F->len[i];
			*bytes += F->len[i];
			took++;
		} else {
			d->dev.be->staging_free(&d->dev, F->p[i], F->len[i]);
		}
		F->p[i] = NULL;
	}
	if (took)
		L->nhost = v->npools;
	log_info("sleep: %u of the last wake's host buffers (%" PRIu64 " bytes) taken back from their free, still pinned; %u had been freed",
		 took, *bytes, freed);
	return took;
}

void life_host_settle(struct wcd *d)
{
	if (!d->model.life.freeing)
		return;
	log_info("waiting for the host copy of the last wake (%" PRIu64 " bytes) to be freed",
		 d->model.life.freeing_bytes);
	freer_done(d, " (waited for)");
}

static bool life_host_freeing(const struct wcd *d)
{
	return d->model.life.freeing != NULL;
}

/* Hands the host copy (L->host[]) to a thread that frees it (CUDA:
 * cudaHostUnregister and munmap), so that the wake's reply, queued
 * before, goes out without waiting for it; the thread posts to the loop
 * when it is done. Where no thread can be had (the tests' hook:
 * WCD_TEST_WAKE_FREE_NO_THREAD), frees it here. */
static void host_free_later(struct wcd *d)
{
	struct wcd_life *L = &d->model.life;
	bool nothread = fault_on(FAULT_WAKE_FREE_NO_THREAD);
	struct host_freer *F;
	int ret;

	WC_ASSERT(!L->freeing);
	F = calloc(1, sizeof(*F));
	ret = F ? rx_wake_init(&d->loop, &F->wake, freer_wake_cb) : -ENOMEM;
	if (ret) {
		log_warn("freeing the host copy now, on the loop's thread: %s",
			 strerror(-ret));
		free(F);
		life_host_free(d);
		return;
	}
	F->d = d;
	F->n = L->nhost;
	for (uint32_t i = 0; i < L->nhost; i++) {
		F->p[i] = L->host[i];
		F->len[i] = L->host_len[i];
		F->bytes += L->host[i] ? L->host_len[i] : 0;
		L->host[i] = NULL;
		L->host_len[i] = 0;
	}
	L->nhost = 0;
	L->host_bytes = 0;
	L->arena_bytes = 0;
	F->t0 = rx_now_ns();
	/* the tests' hook: as if no thread could be made */
	ret = nothread ? EAGAIN :
	      pthread_create(&F->th, NULL, freer_fn, F);
	if (ret) {
		log_warn("freeing the host copy now, on the loop's thread: no thread for it: %s",
			 strerror(ret));
		freer_fn(F);          /* posts: the callback closes the wake */
		log_info("the host copy (%" PRIu64 " bytes) was freed in %.3f s before the wake's reply went out",
			 F->bytes, (double)F->ns / 1e9);
		return;
	}
	L->freeing = F;
	L->freeing_bytes = F->bytes;
}

void life_device_idle(struct wcd *d)
{
	struct gpu_pool *pools[WCD_VERSIONS * GPU_POOLS_MAX];
	char err[BASE_ERR_LEN];
	unsigned n = 0;
	uint64_t t0;
	int ret;

	/* a kept sleep arena (--sleep-arena keep) is registered in the
	 * context: releasing it would unpin the arena */
	/* nor while a thread frees the last wake's host copy (registered in
	 * it): its end calls this again */
	if (!d->dev.be->idle || d->o.keep_context || d->o.ipc_legacy ||
	    d->state != WCD_READY || d->model.life.arena_bytes ||
	    life_host_freeing(d))
		return;
	for (int i = 0; i < WCD_VERSIONS; i++)
		for (uint32_t k = 0; d->model.ver[i].used && k < d->model.ver[i].npools; k++)
			pools[n++] = &d->model.ver[i].pools[k];
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
	struct wcd_life *L = &d->model.life;
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
	if (job == WIRE_WAKE) {
		life_run_wake(d);
		/* the reply is queued: the host copy is freed after it */
		if (d->state == WCD_READY && L->nhost && !L->arena_bytes)
			host_free_later(d);
	} else if (d->state == WCD_WAKING) {
		life_run_update_asleep(d);
	} else {
		life_host_settle(d); /* its host memory checks count it freed */
		life_run_update(d);
	}
	return true;
}

void life_free(struct wcd *d)
{
	life_host_settle(d);
	life_host_free(d);
}
