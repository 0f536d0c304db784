/* SPDX-License-Identifier: MIT */
/*
 * One model's resident versions (struct wcd_model, reached through
 * wcd_model(d)): lease counts, publish, retire, memory (versions.h). An
 * update loads N+1 beside N; new attaches get N+1 once it is published; N
 * is freed when its last lease ends.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "model/versions.h"
#include "serve/server.h"
#include "load/load.h"
#include "load/prep.h"
#include "daemon/fault.h"

int version_find(const struct wcd_model *m, uint64_t number)
{
	if (number == 0)
		return m->cur;
	for (int i = 0; i < WCD_VERSIONS; i++)
		if (m->ver[i].used && m->ver[i].number == number)
			return i;
	return -1;
}

uint64_t version_attach(struct wcd_client *c, int vi)
{
	uint64_t id = client_lease_add(c, vi);

	wcd_model(c->d)->ver[vi].leases++;
	return id;
}

void version_lease_ended(struct wcd *d, int vi)
{
	struct wcd_model *m = wcd_model(d);
	struct wcd_version *v;

	WC_ASSERT(vi >= 0 && vi < WCD_VERSIONS);
	v = &m->ver[vi];
	WC_ASSERT(v->used && v->leases > 0);
	v->leases--;
	if (vi == m->cur || v->leases)
		return;
	log_info("version %" PRIu64 ": its last lease ended; freeing its %" PRIu64 " bytes (version %" PRIu64 " serves)",
		 v->number, v->plan.total_bytes, model_current(m)->number);
	version_retire(d, v);
}

int version_slot_free(struct wcd *d)
{
	const struct wcd_model *m = wcd_model(d);

	for (int i = 0; i < WCD_VERSIONS; i++)
		if (!m->ver[i].used && i != m->cur)
			return i;
	return -1;
}

bool version_can_spare(const struct wcd *d)
{
	return d->dev.be != &gpu_host_backend;
}

uint64_t version_spare_bytes(const struct wcd *d)
{
	const struct wcd_model *m = &d->model;
	uint64_t n = 0;

	for (uint32_t i = 0; i < m->nspare; i++)
		n += m->spare[i].alloc_size;
	return n;
}

/* The spare gone (its pools moved or released). */
static void spare_clear(struct wcd_model *m)
{
	memset(m->spare, 0, sizeof(m->spare[0]) * m->nspare);
	m->nspare = 0;
	m->spare_of = 0;
}

void version_spare_free(struct wcd *d, const char *why)
{
	struct wcd_model *m = wcd_model(d);

	if (!m->nspare)
		return;
	log_info("the spare (version %" PRIu64 "'s %u pools, %" PRIu64 " bytes) freed: %s",
		 m->spare_of, m->nspare, version_spare_bytes(d), why);
	for (uint32_t i = 0; i < m->nspare; i++)
		d->dev.be->pool_release(&d->dev, &m->spare[i]);
	spare_clear(m);
}

/* v's device pools into the spare (a spare already there is freed
 * first: at most one); v keeps no pool. */
static void spare_keep(struct wcd *d, struct wcd_version *v)
{
	struct wcd_model *m = wcd_model(d);

	if (!v->npools || !version_can_spare(d))
		return;
	version_spare_free(d, "another version's pools are kept instead");
	memcpy(m->spare, v->pools, sizeof(v->pools[0]) * v->npools);
	m->nspare = v->npools;
	m->spare_of = v->number;
	memset(v->pools, 0, sizeof(v->pools[0]) * v->npools);
	v->npools = 0;
	log_info("version %" PRIu64 "'s %u pools (%" PRIu64 " bytes) kept as the spare for the next update session (keep_spare)",
		 m->spare_of, m->nspare, version_spare_bytes(d));
}

bool version_spare_take(struct wcd *d, struct wcd_version *nv)
{
	struct wcd_model *m = wcd_model(d);
	bool fits = m->nspare && m->nspare == nv->plan.npools;

	for (uint32_t i = 0; fits && i < m->nspare; i++)
		fits = m->spare[i].size == nv->plan.pool_size[i];
	if (!fits) {
		version_spare_free(d, "its pools are not the new version's");
		return false;
	}
	WC_ASSERT(!nv->npools);
	memcpy(nv->pools, m->spare, sizeof(m->spare[0]) * m->nspare);
	nv->npools = m->nspare;
	for (uint32_t i = 0; i < nv->npools; i++) {
		nv->pools[i].sealed = false;
		nv->pools[i].lent_writable = false;
	}
	log_debug("the spare (version %" PRIu64 "'s %u pools) taken for a new version",
		  m->spare_of, m->nspare);
	spare_clear(m);
	return true;
}

struct wcd_version *version_planned(struct wcd *d)
{
	struct wcd_version *pv = &wcd_model(d)->planned;

	return pv->model.path ? pv : NULL;
}

void version_planned_free(struct wcd *d)
{
	wcd_model(d)->planned_gen++;
	load_version_free(d, &wcd_model(d)->planned);
}

/* v's model, rules and plan become the planned (the last ones freed). */
static void plan_keep(struct wcd *d, struct wcd_version *v)
{
	struct wcd_version *pv = &wcd_model(d)->planned;

	if (!v->model.path)
		return;
	version_planned_free(d);
	load_plan_move(pv, v);
}

void version_retire(struct wcd *d, struct wcd_version *v)
{
	WC_ASSERT(v != wcd_current(d) || !v->used);
	WC_ASSERT(!v->leases);
	if (v->keep_spare)
		spare_keep(d, v);
	plan_keep(d, v);
	load_version_free(d, v);
}

void version_publish_defer(struct wcd *d, int vi,
			   struct version_published *out)
{
	struct wcd_model *m = wcd_model(d);
	struct wcd_version *nv = &m->ver[vi], *old = model_current(m);
	struct wire_notice nt = { .kind = WIRE_NOTICE_NEW_VERSION };

	WC_ASSERT(vi != m->cur && !nv->used);
	nv->used = true;
	nv->number = old->number + 1;
	m->cur = vi;
	nt.version = nv->number;
	snprintf(nt.msg, sizeof(nt.msg),
		 "model version %" PRIu64 " (%s) is now served: re-attach (HELLO, ATTACH) to use it; your lease on version %" PRIu64 " stays valid until you detach",
		 nv->number, nv->model.path, old->number);
	out->told = server_notify(d, &nt, SERVER_NOTIFY_LEASED);
	out->old_number = old->number;
	out->old_freed = !old->leases;
	out->retire = old->leases ? NULL : old;
	if (out->told)
		log_info("told %u attached client(s) about version %" PRIu64,
			 out->told, nv->number);
}

void version_publish(struct wcd *d, int vi, struct version_published *out)
{
	version_publish_defer(d, vi, out);
	if (out->retire)
		version_retire(d, out->retire);
}

/* --- memory ---------------------------------------------------------------- */

int version_host_available(uint64_t *free_b)
{
	const char *path = fault_str(FAULT_MEMINFO);
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

int version_mem_free(struct wcd *d, uint64_t *free_b)
{
	uint64_t total;

	if (d->dev.be == &gpu_host_backend)
		return version_host_available(free_b);
	return d->dev.be->mem_info ?
	       d->dev.be->mem_info(&d->dev, free_b, &total) : -ENOTSUP;
}

uint64_t version_resident_bytes(struct wcd *d)
{
	const struct wcd_model *m = wcd_model(d);
	uint64_t n = 0;

	for (int i = 0; i < WCD_VERSIONS; i++) {
		const struct wcd_version *v = &m->ver[i];

		for (uint32_t k = 0; v->used && k < v->npools; k++)
			n += v->pools[k].alloc_size;
	}
	return n + version_spare_bytes(d);
}

uint64_t version_plan_need(struct wcd *d, const struct wcd_version *v)
{
	uint64_t need = 0;

	for (uint32_t i = 0; i < v->plan.npools; i++)
		need += gpu_align_up(v->plan.pool_size[i], d->dev.granularity);
	return need;
}

static void shape_str(const struct plan_tensor *t, char *out, size_t cap)
{
	size_t off = (size_t)snprintf(out, cap, "%s[", st_dtype_name(t->dtype));

	for (uint32_t i = 0; i < t->ndim && off < cap; i++)
		off += (size_t)snprintf(out + off, cap - off, "%s%" PRIu64,
					i ? "," : "", t->shape[i]);
	if (off < cap)
		snprintf(out + off, cap - off, "]");
}

unsigned version_layout_diff(const struct plan *a, const struct plan *b,
			     char *out, size_t cap)
{
	uint32_t i = 0, j = 0;
	unsigned n = 0;
	size_t off = 0;
	char sa[96], sb[96];

	out[0] = '\0';
	while (i < a->ntensors || j < b->ntensors) {
		const struct plan_tensor *x = i < a->ntensors ? &a->t[i] : NULL;
		const struct plan_tensor *y = j < b->ntensors ? &b->t[j] : NULL;
		int c = !x ? 1 : !y ? -1 : strcmp(x->name, y->name);
		bool same = false;

		if (c == 0) {
			same = x->dtype == y->dtype && x->ndim == y->ndim &&
			       !memcmp(x->shape, y->shape,
				       x->ndim * sizeof(x->shape[0]));
			if (!same) {
				shape_str(x, sa, sizeof(sa));
				shape_str(y, sb, sizeof(sb));
			}
		}
		if (!same && n < VERSION_DIFFS_SHOWN && off < cap)
			off += (size_t)(c < 0 ?
				snprintf(out + off, cap - off, "%s%s is gone",
					 n ? "; " : "", x->name) :
				c > 0 ?
				snprintf(out + off, cap - off, "%s%s is new",
					 n ? "; " : "", y->name) :
				snprintf(out + off, cap - off, "%s%s: %s -> %s",
					 n ? "; " : "", x->name, sa, sb));
		n += !same;
		i += c <= 0;
		j += c >= 0;
	}
	return n;
}
