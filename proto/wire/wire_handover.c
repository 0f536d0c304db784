/* SPDX-License-Identifier: MIT */
/* The hot handover parts of the wire protocol: see wire_handover.h. */
#include <errno.h>
#include <string.h>

#include "err.h"
#include "wire_handover.h"

#define HO_POOL_LEN 24                /* encoded bytes per pool */
#define HO_LEASE_LEN 16
#define HO_CLIENT_MIN 28              /* a client without leases */

static const char *const part_names[] = {
	[WIRE_HO_ASK] = "ASK",
	[WIRE_HO_BEGIN] = "BEGIN",
	[WIRE_HO_VERSION] = "VERSION",
	[WIRE_HO_CLIENTS] = "CLIENTS",
	[WIRE_HO_COMMIT] = "COMMIT",
	[WIRE_HO_ABORT] = "ABORT",
	[WIRE_HO_DONE] = "DONE",
	[WIRE_HO_SERVING] = "SERVING",
};

const char *wire_ho_part_name(unsigned part)
{
	if (part == 0 || part > WIRE_HO_PART_MAX)
		return "?";
	return part_names[part];
}

int wire_ho_part_get(const void *p, size_t n, uint32_t *part, char *err)
{
	struct wire_get g;
	int ret;

	wire_get_init(&g, p, n);
	*part = wire_get_u32(&g);
	ret = wire_get_end(&g, "HANDOVER", false, err);
	if (ret)
		return ret;
	if (*part == 0 || *part > WIRE_HO_PART_MAX)
		return base_errf(err, EBADMSG,
			       "malformed HANDOVER payload: part %u is unknown (1 to %d)",
			       *part, WIRE_HO_PART_MAX);
	return 0;
}

/* Starts decoding a payload that must be of part `want`. */
static int get_part(struct wire_get *g, const void *p, size_t n,
		    uint32_t want, char *err)
{
	uint32_t part;
	int ret = wire_ho_part_get(p, n, &part, err);

	if (ret)
		return ret;
	if (part != want)
		return base_errf(err, EBADMSG,
			       "malformed HANDOVER payload: expected part %s, got %s",
			       wire_ho_part_name(want), wire_ho_part_name(part));
	wire_get_init(g, p, n);
	wire_get_u32(g);
	return 0;
}

static int bad_fd(char *err, const char *what, uint32_t idx, unsigned nfds)
{
	return base_errf(err, EBADMSG,
		       "malformed HANDOVER %s: descriptor index %u, but %u descriptor(s) came with the frame",
		       what, idx, nfds);
}

/* --- ASK ------------------------------------------------------------------ */

void wire_ho_ask_put(struct wire_put *w, const struct wire_ho_ask *a)
{
	wire_put_u32(w, WIRE_HO_ASK);
	wire_put_u16(w, a->ho_min);
	wire_put_u16(w, a->ho_max);
	wire_put_u32(w, a->pid);
}

int wire_ho_ask_get(const void *p, size_t n, struct wire_ho_ask *a, char *err)
{
	struct wire_get g;
	int ret = get_part(&g, p, n, WIRE_HO_ASK, err);

	if (ret)
		return ret;
	a->ho_min = wire_get_u16(&g);
	a->ho_max = wire_get_u16(&g);
	a->pid = wire_get_u32(&g);
	ret = wire_get_end(&g, "HANDOVER ASK", true, err);
	if (ret)
		return ret;
	if (a->ho_min > a->ho_max)
		return base_errf(err, EBADMSG,
			       "malformed HANDOVER ASK: versions %u to %u are an empty range",
			       a->ho_min, a->ho_max);
	return 0;
}

/* --- BEGIN ---------------------------------------------------------------- */

void wire_ho_begin_put(struct wire_put *w, const struct wire_ho_begin *b)
{
	wire_put_u32(w, WIRE_HO_BEGIN);
	wire_put_u16(w, b->ho_version);
	wire_put_u32(w, b->pid);
	wire_put_u32(w, b->nversions);
	wire_put_u32(w, b->cur);
	wire_put_u32(w, b->nclients);
	wire_put_u64(w, b->next_lease);
	wire_put_u64(w, b->requests);
	wire_put_u64(w, b->mismatches);
	wire_put_u32(w, b->lock_fd);
	wire_put_u32(w, b->listen_fd);
	wire_put_u8(w, b->hash);
	wire_put_u64(w, b->pool_size);
	wire_put_str(w, b->rules, WIRE_PATH_MAX);
	wire_put_str(w, b->allow_quant, WIRE_LABEL_MAX);
	if (b->nallow_uid > WIRE_HO_UIDS_MAX && !w->err)
		w->err = -E2BIG;
	wire_put_u32(w, b->nallow_uid);
	for (uint32_t i = 0; i < b->nallow_uid && i < WIRE_HO_UIDS_MAX; i++)
		wire_put_u32(w, b->allow_uid[i]);
	if (b->nallow_gid > WIRE_HO_GIDS_MAX && !w->err)
		w->err = -E2BIG;
	wire_put_u32(w, b->nallow_gid);
	for (uint32_t i = 0; i < b->nallow_gid && i < WIRE_HO_GIDS_MAX; i++)
		wire_put_u32(w, b->allow_gid[i]);
}

int wire_ho_begin_get(const void *p, size_t n, unsigned nfds,
		      struct wire_ho_begin *b, char *err)
{
	struct wire_get g;
	int ret = get_part(&g, p, n, WIRE_HO_BEGIN, err);

	if (ret)
		return ret;
	b->ho_version = wire_get_u16(&g);
	b->pid = wire_get_u32(&g);
	b->nversions = wire_get_u32(&g);
	b->cur = wire_get_u32(&g);
	b->nclients = wire_get_u32(&g);
	b->next_lease = wire_get_u64(&g);
	b->requests = wire_get_u64(&g);
	b->mismatches = wire_get_u64(&g);
	b->lock_fd = wire_get_u32(&g);
	b->listen_fd = wire_get_u32(&g);
	b->hash = wire_get_u8(&g);
	b->pool_size = wire_get_u64(&g);
	wire_get_str(&g, b->rules, WIRE_PATH_MAX);
	wire_get_str(&g, b->allow_quant, WIRE_LABEL_MAX);
	b->nallow_uid = wire_get_count(&g, WIRE_HO_UIDS_MAX, 4);
	for (uint32_t i = 0; i < b->nallow_uid; i++)
		b->allow_uid[i] = wire_get_u32(&g);
	b->nallow_gid = wire_get_count(&g, WIRE_HO_GIDS_MAX, 4);
	for (uint32_t i = 0; i < b->nallow_gid; i++)
		b->allow_gid[i] = wire_get_u32(&g);
	ret = wire_get_end(&g, "HANDOVER BEGIN", true, err);
	if (ret)
		return ret;
	if (b->nversions == 0 || b->nversions > WIRE_HO_VERSIONS_MAX ||
	    b->cur >= WIRE_HO_VERSIONS_MAX)
		return base_errf(err, EBADMSG,
			       "malformed HANDOVER BEGIN: %u version(s), current slot %u (1 to %d versions, slots below %d)",
			       b->nversions, b->cur, WIRE_HO_VERSIONS_MAX,
			       WIRE_HO_VERSIONS_MAX);
	if (b->lock_fd >= nfds)
		return bad_fd(err, "BEGIN lock", b->lock_fd, nfds);
	if (b->listen_fd >= nfds)
		return bad_fd(err, "BEGIN socket", b->listen_fd, nfds);
	if (b->lock_fd == b->listen_fd)
		return base_errf(err, EBADMSG,
			       "malformed HANDOVER BEGIN: the lock and the socket share descriptor index %u",
			       b->lock_fd);
	return 0;
}

/* --- VERSION -------------------------------------------------------------- */

void wire_ho_version_put(struct wire_put *w, const struct wire_ho_version *v)
{
	bool hashed = v->flags & WIRE_HO_V_HASHED;

	wire_put_u32(w, WIRE_HO_VERSION);
	wire_put_u32(w, v->slot);
	wire_put_u64(w, v->number);
	wire_put_str(w, v->model, WIRE_PATH_MAX);
	wire_put_u32(w, v->tp_size);
	wire_put_u32(w, v->tp_rank);
	wire_put_u32(w, v->pp_size);
	wire_put_u32(w, v->pp_rank);
	wire_put_blob(w, v->identity, v->identity_len, WIRE_IDENTITY_MAX);
	wire_put_bytes(w, v->digest, WIRE_HASH_LEN);
	wire_put_u32(w, v->flags);
	if ((v->ntensors > WIRE_HO_TENSORS_MAX ||
	     v->npools > WIRE_HO_POOLS_MAX || (hashed && !v->hashes)) &&
	    !w->err)
		w->err = -E2BIG;
	wire_put_u32(w, v->ntensors);
	if (hashed && v->hashes && v->ntensors <= WIRE_HO_TENSORS_MAX)
		wire_put_bytes(w, v->hashes, (size_t)v->ntensors * WIRE_HASH_LEN);
	wire_put_u32(w, v->npools);
	for (uint32_t i = 0; i < v->npools && i < WIRE_HO_POOLS_MAX; i++) {
		wire_put_u64(w, v->pools[i].size);
		wire_put_u64(w, v->pools[i].alloc_size);
		wire_put_u32(w, v->pools[i].flags);
		wire_put_u32(w, v->pools[i].fd_index);
	}
}

int wire_ho_version_get(const void *p, size_t n, unsigned nfds,
			struct wire_ho_version *v, char *err)
{
	struct wire_get g;
	const void *blob;
	size_t bl;
	int ret = get_part(&g, p, n, WIRE_HO_VERSION, err);

	if (ret)
		return ret;
	v->slot = wire_get_u32(&g);
	v->number = wire_get_u64(&g);
	wire_get_str(&g, v->model, WIRE_PATH_MAX);
	v->tp_size = wire_get_u32(&g);
	v->tp_rank = wire_get_u32(&g);
	v->pp_size = wire_get_u32(&g);
	v->pp_rank = wire_get_u32(&g);
	wire_get_blob(&g, &blob, &bl, WIRE_IDENTITY_MAX);
	v->identity = blob;
	v->identity_len = bl;
	wire_get_bytes(&g, v->digest, WIRE_HASH_LEN);
	v->flags = wire_get_u32(&g);
	v->hashes = NULL;
	v->ntensors = wire_get_count(&g, WIRE_HO_TENSORS_MAX,
				     (v->flags & WIRE_HO_V_HASHED) ?
				     WIRE_HASH_LEN : 0);
	if ((v->flags & WIRE_HO_V_HASHED) && !g.err) {
		/* the count was checked against the bytes left */
		v->hashes = g.p + g.off;
		g.off += (size_t)v->ntensors * WIRE_HASH_LEN;
	}
	v->npools = wire_get_count(&g, WIRE_HO_POOLS_MAX, HO_POOL_LEN);
	for (uint32_t i = 0; i < v->npools; i++) {
		v->pools[i].size = wire_get_u64(&g);
		v->pools[i].alloc_size = wire_get_u64(&g);
		v->pools[i].flags = wire_get_u32(&g);
		v->pools[i].fd_index = wire_get_u32(&g);
	}
	ret = wire_get_end(&g, "HANDOVER VERSION", true, err);
	if (ret)
		return ret;
	if (v->slot >= WIRE_HO_VERSIONS_MAX || v->number == 0)
		return base_errf(err, EBADMSG,
			       "malformed HANDOVER VERSION: slot %u, number %llu (slots below %d, numbers from 1)",
			       v->slot, (unsigned long long)v->number,
			       WIRE_HO_VERSIONS_MAX);
	if (!v->npools)
		return base_errf(err, EBADMSG,
			       "malformed HANDOVER VERSION: version %llu has no pool",
			       (unsigned long long)v->number);
	for (uint32_t i = 0; i < v->npools; i++) {
		if (v->pools[i].fd_index >= nfds)
			return bad_fd(err, "VERSION pool", v->pools[i].fd_index,
				      nfds);
		for (uint32_t k = 0; k < i; k++)
			if (v->pools[k].fd_index == v->pools[i].fd_index)
				return base_errf(err, EBADMSG,
					       "malformed HANDOVER VERSION: pools %u and %u share descriptor index %u",
					       k, i, v->pools[i].fd_index);
		if (v->pools[i].alloc_size < v->pools[i].size ||
		    !v->pools[i].size)
			return base_errf(err, EBADMSG,
				       "malformed HANDOVER VERSION: pool %u of %llu bytes in an allocation of %llu",
				       i, (unsigned long long)v->pools[i].size,
				       (unsigned long long)v->pools[i].alloc_size);
	}
	return 0;
}

/* --- CLIENTS -------------------------------------------------------------- */

void wire_ho_clients_put(struct wire_put *w, const struct wire_ho_client *c,
			 uint32_t count)
{
	if (count > WIRE_HO_CLIENTS_PER_FRAME && !w->err)
		w->err = -E2BIG;
	wire_put_u32(w, WIRE_HO_CLIENTS);
	wire_put_u32(w, count);
	for (uint32_t i = 0; i < count && i < WIRE_HO_CLIENTS_PER_FRAME; i++) {
		if (c[i].nleases > WIRE_HO_LEASES_MAX && !w->err)
			w->err = -E2BIG;
		wire_put_u32(w, c[i].fd_index);
		wire_put_u32(w, c[i].pid);
		wire_put_u32(w, c[i].uid);
		wire_put_u32(w, c[i].flags);
		wire_put_u64(w, c[i].requests);
		wire_put_u32(w, c[i].nleases);
		for (uint32_t k = 0; k < c[i].nleases && k < WIRE_HO_LEASES_MAX;
		     k++) {
			wire_put_u64(w, c[i].leases[k].id);
			wire_put_u64(w, c[i].leases[k].version);
		}
	}
}

int wire_ho_clients_get(const void *p, size_t n, unsigned nfds,
			struct wire_ho_client *c, uint32_t max,
			uint32_t *count, char *err)
{
	struct wire_get g;
	uint32_t cnt;
	int ret = get_part(&g, p, n, WIRE_HO_CLIENTS, err);

	if (ret)
		return ret;
	*count = 0;
	cnt = wire_get_count(&g, max < WIRE_HO_CLIENTS_PER_FRAME ? max :
			     WIRE_HO_CLIENTS_PER_FRAME, HO_CLIENT_MIN);
	for (uint32_t i = 0; i < cnt && !g.err; i++) {
		struct wire_ho_client *x = &c[i];

		x->fd_index = wire_get_u32(&g);
		x->pid = wire_get_u32(&g);
		x->uid = wire_get_u32(&g);
		x->flags = wire_get_u32(&g);
		x->requests = wire_get_u64(&g);
		x->nleases = wire_get_count(&g, WIRE_HO_LEASES_MAX,
					    HO_LEASE_LEN);
		for (uint32_t k = 0; k < x->nleases; k++) {
			x->leases[k].id = wire_get_u64(&g);
			x->leases[k].version = wire_get_u64(&g);
		}
	}
	ret = wire_get_end(&g, "HANDOVER CLIENTS", true, err);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < cnt; i++) {
		if (c[i].fd_index >= nfds)
			return bad_fd(err, "CLIENTS connection", c[i].fd_index,
				      nfds);
		for (uint32_t k = 0; k < i; k++)
			if (c[k].fd_index == c[i].fd_index)
				return base_errf(err, EBADMSG,
					       "malformed HANDOVER CLIENTS: connections %u and %u share descriptor index %u",
					       k, i, c[i].fd_index);
	}
	*count = cnt;
	return 0;
}

/* --- COMMIT, DONE, ABORT -------------------------------------------------- */

void wire_ho_empty_put(struct wire_put *w, uint32_t part)
{
	wire_put_u32(w, part);
}

int wire_ho_empty_get(const void *p, size_t n, uint32_t part, char *err)
{
	struct wire_get g;
	int ret = get_part(&g, p, n, part, err);

	if (ret)
		return ret;
	return wire_get_end(&g, "HANDOVER", true, err);
}

void wire_ho_abort_put(struct wire_put *w, const char *why)
{
	wire_put_u32(w, WIRE_HO_ABORT);
	wire_put_blob(w, why, strnlen(why, WIRE_MSG_MAX), WIRE_MSG_MAX);
}

int wire_ho_abort_get(const void *p, size_t n, char *why, char *err)
{
	struct wire_get g;
	int ret = get_part(&g, p, n, WIRE_HO_ABORT, err);

	if (ret)
		return ret;
	wire_get_str(&g, why, WIRE_MSG_MAX);
	return wire_get_end(&g, "HANDOVER ABORT", true, err);
}
