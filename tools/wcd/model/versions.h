/* SPDX-License-Identifier: MIT */
/*
 * wcd's model/ folder, one model's resident versions:
 *
 *   versions.c  publish, retire, lease counts, memory (this header)
 *
 * The versions (struct wcd_version, m->ver[], m->cur): which one
 * serves, the leases counted on each, publishing a new one and retiring an
 * old one, and the memory they take.
 *
 *   find a version          version_find() (by number; 0: the current)
 *   take a lease            version_attach() (the client's record and the
 *                           version's count, together)
 *   a lease ended           version_lease_ended() (server_hooks: counts
 *                           down, retires an old version at zero)
 *   publish N+1             version_slot_free(), then version_publish()
 *   retire                  version_retire() (into the spare when the
 *                           version's keep_spare is set)
 *   the spare               version_spare_take(), version_spare_free()
 *   the planned             version_planned(), version_planned_free()
 *
 * Invariant (WC_ASSERT): ver[i].leases equals the number of client leases
 * on i; only a version that is not current and has no lease is retired.
 */
#ifndef WCD_VERSIONS_H
#define WCD_VERSIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

struct wcd;
struct wcd_client;
struct wcd_model;
struct wcd_version;
struct plan;

/* Index of m's resident version with this number (0: the current one),
 * or -1. */
int version_find(const struct wcd_model *m, uint64_t number);
/* Gives c a lease on version index vi; returns the lease id. The caller
 * checked c's lease limit (WCD_LEASES_PER_CLIENT). */
uint64_t version_attach(struct wcd_client *c, int vi);
/* server_hooks.lease_ended: one lease on vi fewer. */
void version_lease_ended(struct wcd *d, int vi);
/* A version index an update may fill (not used, not current), or -1. */
int version_slot_free(struct wcd *d);

struct version_published {
	uint64_t old_number;          /* the version that served before */
	bool old_freed;               /* it had no lease and is gone */
	unsigned told;                /* lease holders sent a NOTICE */
	/* the old version when no lease holds it: retired by
	 * version_publish, left to version_publish_defer's caller */
	struct wcd_version *retire;
};
/* Makes the loaded version index vi current as the current number + 1 in
 * one step (new HELLO/ATTACH get it), tells every lease holder (the
 * NOTICE leaves at the next turn of the loop), and retires the old version
 * at once if no lease holds it (else its last lease does). The caller
 * rewrites the ready file (status_write_ready) before the loop turns. */
void version_publish(struct wcd *d, int vi, struct version_published *out);
/* version_publish, but a leaseless old version is left to the caller
 * (out->retire; old_freed says it will be): freeing 16 GB of pools took
 * 4.5-10 ms on an H200, which a trainer's commit need not wait for. */
void version_publish_defer(struct wcd *d, int vi,
			   struct version_published *out);
/* Frees version v's pools (no lease may hold it) and keeps its model,
 * rules and plan as the planned (below); with v->keep_spare its device
 * pools become the model's spare instead. */
void version_retire(struct wcd *d, struct wcd_version *v);

/*
 * The spare: an update session opened with WIRE_PUSH_KEEP_SPARE marks the
 * version it replaces (or its own N+1, should it abort) keep_spare, and
 * that version's retirement keeps its device pools for the next session,
 * which takes them as its N+1 instead of creating 16 GB of pools (and
 * the retirement skips their free): on an H200 both are milliseconds a
 * trainer's loop pays per update. The cost is memory: a second copy of
 * the weights stays on the device between updates (STATUS spare_bytes).
 * At most one spare; host pools are never kept (a pool lent writable is
 * sealed for good: gpu/host.c). Anything else that needs the device's
 * memory frees it first: a disk update, a sleep; so does the exit.
 */
/* Whether v's pools could be kept (device pools, not host memfds). */
bool version_can_spare(const struct wcd *d);
/* Moves the spare's pools into nv (pools unsealed, to be lent writable)
 * when they are exactly nv's plan's pools (count and sizes): true. Else
 * frees a spare that does not fit (logged) and returns false. The
 * caller zeroes nv's padding either way (load_zero_padding). */
bool version_spare_take(struct wcd *d, struct wcd_version *nv);
/* The spare's bytes on the device (0: none). */
uint64_t version_spare_bytes(const struct wcd *d);
/* Frees the spare, if any; why names the reason, for the log. */
void version_spare_free(struct wcd *d, const char *why);

/*
 * The planned: a version's retirement keeps its model (the headers read),
 * rules and plan, freeing the last ones kept. An update session's open
 * hands them to load_prepare_again, which moves them into N+1 when the
 * files and the layout they were read from are as they were (a few stat
 * calls and the layout files read again), instead of reading every shard
 * header and planning again: 3-5 ms of llama-8b's open on the H200's host,
 * more the more shards and tensors.
 */
/* The planned version (only its model, rules and plan are set), or NULL. */
struct wcd_version *version_planned(struct wcd *d);
/* Frees the planned model, rules and plan, if any. */
void version_planned_free(struct wcd *d);

/* Free bytes on the device: the backend's mem_info, or MemAvailable of
 * /proc/meminfo on the host backend. WCD_MEMINFO names another file in
 * /proc/meminfo's format (tests use it to make memory short). */
int version_mem_free(struct wcd *d, uint64_t *free_b);
/* MemAvailable of /proc/meminfo (or of the file WCD_MEMINFO names). */
int version_host_available(uint64_t *free_b);
/* Bytes the pools of every resident version take on the device. */
uint64_t version_resident_bytes(struct wcd *d);
/* Bytes the pools of v's plan take on the device (granularity-rounded). */
uint64_t version_plan_need(struct wcd *d, const struct wcd_version *v);

/* Tensors named in one layout refusal (version_layout_diff). */
#define VERSION_DIFFS_SHOWN 4
/* Lists in out the first VERSION_DIFFS_SHOWN tensors whose name, dtype or
 * shape differ between plans a (the served) and b (both sorted by name:
 * one merge walk, O(n)): "x is gone", "y is new", "z: BF16[4,8] ->
 * BF16[4,16]"; returns how many differ in all. For an UPDATE's and an
 * update session's refusal alike. */
unsigned version_layout_diff(const struct plan *a, const struct plan *b,
			     char *out, size_t cap);

#endif
