/* SPDX-License-Identifier: MIT */
/*
 * wcd's lifecycle requests (issue 7): SLEEP, WAKE, UPDATE, and what HELLO,
 * ATTACH and STATUS see of them. The jobs (WAKE, UPDATE) are in life_job.c.
 *
 * States (d->state in STATUS and the ready file):
 *   ready     serving one version, or two while an old one still has
 *             leases after an update
 *   sleeping  level 1: every pool copied to host memory (the backend's
 *             staging memory: pinned on CUDA), then released; level 2:
 *             released, WAKE reloads from disk. HELLO and ATTACH are
 *             refused ("wake it first"), so are UPDATE and a second SLEEP.
 *   waking    a WAKE job runs; HELLO/ATTACH refused, SLEEP/UPDATE busy
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
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "wcd.h"
#include "conn.h"
#include "lifecycle.h"
#include "wire_life.h"

struct wcd_life *life_get(struct wcd *d)
{
	if (!d->life) {
		d->life = calloc(1, sizeof(*d->life));
		if (d->life)
			d->life->loading = -1;
	}
	return d->life;
}

void life_reply(struct wcd *d, unsigned type, const struct wire_life_reply *r)
{
	struct wcd_life *L = d->life;
	struct wire_put w;

	snprintf(L->last, sizeof(L->last), "%s", r->msg);
	if (!L->who)
		return;
	wire_put_init(&w);
	wire_frame_begin(&w, type, WIRE_F_REPLY, L->id);
	wire_life_reply_put(&w, r);
	life_send(L->who, L->id, &w);
	L->who = NULL;
}

void life_fail(struct wcd *d, uint32_t code, const char *fmt, ...)
{
	struct wcd_life *L = d->life;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(L->last, sizeof(L->last), fmt, ap);
	va_end(ap);
	L->failures++;
	log_warn("%s", L->last);
	if (L->who)
		reply_error(L->who, L->id, code, false, "%s", L->last);
	L->who = NULL;
}

/* MemAvailable of /proc/meminfo (or of the file WCD_MEMINFO names). */
static int host_available(uint64_t *free_b)
{
	const char *path = getenv("WCD_MEMINFO");
	char line[256];
	FILE *f;
	int ret = -ENOENT;

	f = fopen(path && *path ? path : "/proc/meminfo", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kb;

		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
			*free_b = (uint64_t)kb << 10;
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

int life_mem_free(struct wcd *d, uint64_t *free_b)
{
	uint64_t total;

	if (d->dev.be == &gpu_host_backend)
		return host_available(free_b);
	return d->dev.be->mem_info ?
	       d->dev.be->mem_info(&d->dev, free_b, &total) : -ENOTSUP;
}

uint64_t life_resident_bytes(struct wcd *d)
{
	uint64_t n = 0;

	for (int i = 0; i < WCD_VERSIONS; i++) {
		const struct wcd_version *v = &d->ver[i];

		for (uint32_t k = 0; v->used && k < v->npools; k++)
			n += v->pools[k].alloc_size;
	}
	return n;
}

uint64_t life_plan_need(struct wcd *d, const struct wcd_version *v)
{
	uint64_t need = 0;

	for (uint32_t i = 0; i < v->plan.npools; i++)
		need += gpu_align_up(v->plan.pool_size[i], d->dev.granularity);
	return need;
}

void life_host_free(struct wcd *d)
{
	struct wcd_life *L = d->life;

	for (uint32_t i = 0; L && i < L->nhost; i++) {
		if (L->host[i])
			d->dev.be->staging_free(&d->dev, L->host[i],
						L->host_len[i]);
		L->host[i] = NULL;
		L->host_len[i] = 0;
	}
	if (L) {
		L->nhost = 0;
		L->host_bytes = 0;
	}
}

/* Why the daemon cannot start another lifecycle request now, or NULL. */
static const char *life_busy(struct wcd *d, char *buf, size_t cap)
{
	struct wcd_life *L = d->life;

	if (L->updating || L->job == LIFE_JOB_UPDATE)
		snprintf(buf, cap,
			 "an update to version %" PRIu64 " is loading: wait for it to finish (wcctl status shows the state), then try again",
			 wcd_current(d)->number + 1);
	else if (L->waking || L->job == LIFE_JOB_WAKE)
		snprintf(buf, cap,
			 "the daemon is waking up from sleep level %u: wait for it to finish (wcctl status shows the state), then try again",
			 L->level);
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

/* The pids of the clients holding any lease; returns how many. */
static unsigned engines_attached(struct wcd *d, pid_t *out, unsigned max)
{
	pid_t *pids = malloc(WCD_CLIENTS_MAX * sizeof(*pids));
	unsigned *leases = malloc(WCD_CLIENTS_MAX * sizeof(*leases));
	unsigned n, k = 0;

	if (!pids || !leases) {
		free(pids);
		free(leases);
		return 0;
	}
	n = server_clients(d, pids, leases, WCD_CLIENTS_MAX);
	for (unsigned i = 0; i < n; i++)
		if (leases[i] && k < max)
			out[k++] = pids[i];
	free(pids);
	free(leases);
	return k;
}

/* Level 1: copies every pool of v to host memory from the backend's
 * staging allocator (pinned on CUDA, so that WAKE copies at full speed). */
static int sleep_copy(struct wcd *d, struct wcd_version *v, char *err)
{
	const struct gpu_backend *be = d->dev.be;
	struct wcd_life *L = d->life;
	uint64_t need = 0, have;
	int ret;

	for (uint32_t i = 0; i < v->npools; i++)
		need += v->pools[i].size;
	if (host_available(&have) == 0 && need > have)
		return wc_errf(err, ENOMEM,
			       "the host copy needs %" PRIu64 " bytes but only %" PRIu64 " bytes of host memory are available (MemAvailable)",
			       need, have);
	for (uint32_t i = 0; i < v->npools; i++) {
		uint64_t len = v->pools[i].size;

		L->nhost = i + 1;
		if (!len)
			continue;
		ret = be->staging_alloc(&d->dev, len, &L->host[i], err);
		if (ret)
			return ret;
		L->host_len[i] = len;
		ret = be->copy_from_pool(&d->dev, &v->pools[i], 0, L->host[i],
					 len);
		if (ret)
			return wc_errf(err, -ret,
				       "copying pool %u (%" PRIu64 " bytes) to host memory failed: %s",
				       i, len, strerror(-ret));
		L->host_bytes += len;
	}
	return 0;
}

static void do_sleep(struct wcd *d, struct wcd_client *c, uint64_t id,
		     uint32_t level)
{
	struct wcd_version *v = wcd_current(d);
	struct wcd_life *L = d->life;
	struct wire_life_reply r = { .level = level };
	char err[WC_ERR_LEN], busy[WIRE_MSG_MAX + 1], list[512];
	uint64_t released = 0, t0 = rx_now_ns();
	pid_t *pids;
	unsigned n;
	int ret;

	if (life_busy(d, busy, sizeof(busy))) {
		reply_error(c, id, WIRE_E_BUSY, false, "%s", busy);
		return;
	}
	if (L->level) {
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
	n = pids ? engines_attached(d, pids, WCD_CLIENTS_MAX) : 0;
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
		ret = sleep_copy(d, v, err);
		if (ret) {
			life_host_free(d);
			snprintf(busy, sizeof(busy),
				 "cannot sleep at level 1: %s; the daemon keeps serving (try --level 2, which needs no host memory)",
				 err);
			L->failures++;
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
	d->state = "sleeping";
	if (status_write_ready(d, err))
		log_warn("cannot rewrite the ready file: %s", err);
	r.version = v->number;
	r.bytes = level == 1 ? L->host_bytes : released;
	r.ns = rx_now_ns() - t0;
	if (level == 1)
		snprintf(r.msg, sizeof(r.msg),
			 "sleeping (level 1): %" PRIu64 " bytes copied to host memory in %.3f s, %" PRIu64 " bytes of device %s released; wake with wcctl wake",
			 L->host_bytes, (double)r.ns / 1e9, released,
			 d->dev.name);
	else
		snprintf(r.msg, sizeof(r.msg),
			 "sleeping (level 2): %" PRIu64 " bytes of device %s released; wcctl wake reloads version %" PRIu64 " from %s",
			 released, d->dev.name, v->number, d->o.model);
	log_info("%s", r.msg);
	snprintf(L->last, sizeof(L->last), "%s", r.msg);
	{
		struct wire_put w;

		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_SLEEP, WIRE_F_REPLY, id);
		wire_life_reply_put(&w, &r);
		life_send(c, id, &w);
	}
}

/* Queues a job and stops the loop so that serve() runs it. */
static void queue_job(struct wcd *d, struct wcd_client *c, uint64_t id,
		      enum life_job job)
{
	struct wcd_life *L = d->life;

	L->job = job;
	L->who = c;
	L->id = id;
	if (job == LIFE_JOB_WAKE) {
		L->waking = true;
		d->state = "waking";
	} else {
		L->updating = true;
		d->state = "updating";
	}
	rx_loop_stop(&d->loop);
}

static void do_wake(struct wcd *d, struct wcd_client *c, uint64_t id)
{
	struct wcd_life *L = d->life;
	char msg[WIRE_MSG_MAX + 1];

	if (life_busy(d, msg, sizeof(msg))) {
		reply_error(c, id, WIRE_E_BUSY, false, "%s", msg);
		return;
	}
	if (!L->level) {
		snprintf(msg, sizeof(msg),
			 "the daemon is not sleeping (state %s): there is nothing to wake",
			 d->state);
		reply_error(c, id, WIRE_E_STATE, false, "%s", msg);
		return;
	}
	queue_job(d, c, id, LIFE_JOB_WAKE);
}

static void do_update(struct wcd *d, struct wcd_client *c, uint64_t id,
		      const char *model)
{
	struct wcd_life *L = d->life;
	char msg[WIRE_MSG_MAX + 1], list[512];
	pid_t pids[LIFE_PIDS_SHOWN];
	int free_slot = -1;

	if (L->level && !L->waking) {
		reply_error(c, id, WIRE_E_SLEEPING, false,
				   "Cannot update weights while the daemon is sleeping. Wake it first (wcctl wake), then update.");
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
	for (int i = 0; i < WCD_VERSIONS; i++)
		if (!d->ver[i].used)
			free_slot = i;
	if (free_slot < 0) {
		int old = d->cur == 0 ? 1 : 0;
		unsigned n = life_version_pids_get(d, old, pids,
						   LIFE_PIDS_SHOWN);

		pids_list(list, sizeof(list), pids, n);
		snprintf(msg, sizeof(msg),
			 "versions %" PRIu64 " and %" PRIu64 " are both resident (version %" PRIu64 " is still attached by pids %s) and a daemon holds at most %d: those engines were told to re-attach; once they detach, update again",
			 d->ver[old].number, wcd_current(d)->number,
			 d->ver[old].number, list, WCD_VERSIONS);
		reply_error(c, id, WIRE_E_BUSY, false, "%s", msg);
		return;
	}
	snprintf(L->model, sizeof(L->model), "%s", model);
	queue_job(d, c, id, LIFE_JOB_UPDATE);
}

void life_request(struct wcd *d, struct wcd_client *c, uint64_t id,
		  unsigned type, const uint8_t *p, uint32_t n)
{
	struct wcd_life *L = life_get(d);
	char err[WC_ERR_LEN], msg[WIRE_MSG_MAX + 1];
	char *model = NULL;
	uint32_t level = 0;
	int ret;

	if (!L) {
		reply_error(c, id, WIRE_E_INTERNAL, false,
				   "out of memory for the lifecycle state");
		return;
	}
	switch (type) {
	case WIRE_SLEEP:
		ret = wire_sleep_get(p, n, &level, err);
		break;
	case WIRE_WAKE:
		ret = wire_empty_get(p, n, "WAKE", err);
		break;
	default:
		model = malloc(WIRE_PATH_MAX + 1);
		ret = model ? wire_update_get(p, n, model, err) : -ENOMEM;
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
	} else if (d->stopping) {
		reply_error(c, id, WIRE_E_STATE, false,
				   "the daemon is stopping");
	} else if (type == WIRE_SLEEP) {
		do_sleep(d, c, id, level);
	} else if (type == WIRE_WAKE) {
		do_wake(d, c, id);
	} else {
		do_update(d, c, id, model);
	}
	free(model);
}

const char *life_refusal(struct wcd *d, unsigned type)
{
	static char msg[160];
	struct wcd_life *L = d->life;

	if (!L || !L->level || (type != WIRE_HELLO && type != WIRE_ATTACH))
		return NULL;
	if (!L->waking)
		return "the daemon is sleeping: wake it first (wcctl wake)";
	snprintf(msg, sizeof(msg),
		 "the daemon is waking up from sleep level %u: try again in a moment (wcctl status shows the state)",
		 L->level);
	return msg;
}

void life_lease_dropped(struct wcd *d, int vi)
{
	struct wcd_version *v = &d->ver[vi];
	int loading = d->life ? d->life->loading : -1;

	if (vi == d->cur || vi == loading || !v->used || v->leases)
		return;
	log_info("version %" PRIu64 ": its last lease ended; freeing its %" PRIu64 " bytes (version %" PRIu64 " serves)",
		 v->number, v->plan.total_bytes, wcd_current(d)->number);
	load_version_free(d, v);
}

void life_client_gone(struct wcd *d, struct wcd_client *c)
{
	if (d->life && d->life->who == c)
		d->life->who = NULL;
}

void life_device_idle(struct wcd *d)
{
	const struct wcd_life *L = d->life;
	struct gpu_pool *pools[WCD_VERSIONS * GPU_POOLS_MAX];
	char err[GPU_ERR_LEN];
	unsigned n = 0;
	uint64_t t0;
	int ret;

	if (!d->dev.be->idle || d->o.keep_context || d->o.ipc_legacy ||
	    d->stopping)
		return;
	if (L && (L->level || L->waking || L->updating || L->job != LIFE_JOB_NONE))
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
	struct wcd_life *L = d->life;
	enum life_job job;

	if (!L || L->job == LIFE_JOB_NONE)
		return false;
	job = L->job;
	L->job = LIFE_JOB_NONE;
	if (d->stopping) {            /* SIGTERM or SHUTDOWN came first */
		L->waking = L->updating = false;
		life_fail(d, WIRE_E_STATE, "the daemon is stopping: %s not run",
			  job == LIFE_JOB_WAKE ? "WAKE" : "UPDATE");
		return true;
	}
	if (job == LIFE_JOB_WAKE)
		life_run_wake(d);
	else
		life_run_update(d);
	return true;
}

void *life_version_pids(struct wcd *d, int vi)
{
	pid_t *pids = malloc(WCD_CLIENTS_MAX * sizeof(*pids));
	json_t *a = json_array();
	unsigned n = 0;

	if (pids)
		n = life_version_pids_get(d, vi, pids, WCD_CLIENTS_MAX);

	for (unsigned i = 0; a && i < n; i++)
		json_array_append_new(a, json_integer(pids[i]));
	free(pids);
	return a;
}

void life_status(struct wcd *d, void *json_obj)
{
	json_t *o = json_obj, *lc;
	struct wcd_life *L = d->life;
	uint64_t resident = life_resident_bytes(d);

	json_object_set_new(o, "sleep_level", json_integer(L ? L->level : 0));
	json_object_set_new(o, "resident_bytes", json_integer((json_int_t)resident));
	json_object_set_new(o, "host_copy_bytes",
			    json_integer(L ? (json_int_t)L->host_bytes : 0));
	if (!L)
		return;
	lc = json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:s}",
		       "sleeps", (json_int_t)L->sleeps,
		       "wakes", (json_int_t)L->wakes,
		       "updates", (json_int_t)L->updates,
		       "failures", (json_int_t)L->failures,
		       "sleep_copy_seconds", L->sleep_copy_s,
		       "wake_copy_seconds", L->wake_copy_s,
		       "wake_copy_gbps", L->wake_copy_gbps,
		       "wake_verify_seconds", L->wake_verify_s,
		       "last", L->last);
	if (lc)
		json_object_set_new(o, "lifecycle", lc);
}

void life_free(struct wcd *d)
{
	if (!d->life)
		return;
	life_host_free(d);
	free(d->life);
	d->life = NULL;
}

/* --- clients (conn.h) ---------------------------------------------------- */

void life_send(struct wcd_client *c, uint64_t id, struct wire_put *w)
{
	char err[WC_ERR_LEN];

	if (wire_frame_end(w, err)) {
		wire_put_free(w);
		reply_error(c, id, WIRE_E_INTERNAL, false,
			    "cannot build the reply: %s", err);
		return;
	}
	client_queue(c, w, NULL, 0, false);
}

unsigned life_notice_leased(struct wcd *d, const struct wire_notice *nt)
{
	unsigned n = 0;

	for (struct wcd_client *c = d->clients; c; c = c->next) {
		struct wire_put w;

		if (c->closing || !c->nleases)
			continue;
		wire_put_init(&w);
		wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
		wire_notice_put(&w, nt);
		if (wire_frame_end(&w, NULL)) {
			wire_put_free(&w);
			continue;
		}
		client_queue(c, &w, NULL, 0, false);
		n++;
	}
	return n;
}

unsigned life_version_pids_get(struct wcd *d, int vi, pid_t *pids,
			       unsigned max)
{
	unsigned n = 0;

	for (struct wcd_client *c = d->clients; c && n < max; c = c->next) {
		if (c->closing)
			continue;
		for (unsigned i = 0; i < c->nleases; i++) {
			if (c->leases[i].ver == vi) {
				pids[n++] = c->pid;
				break;
			}
		}
	}
	return n;
}
