/* SPDX-License-Identifier: MIT */
/*
 * The device hash's rounds (hash_plan.h): parts found, rounds cut.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash_plan.h"
#include "xxh3_split.h"

#define NONE UINT32_MAX

/* For qsort_r: by first byte, the longer first at the same one (ties:
 * the earlier index). */
static int base_cmp(const void *a, const void *b, void *arg)
{
	const struct hash_pjob *j = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (j[x].base != j[y].base)
		return j[x].base < j[y].base ? -1 : 1;
	if (j[x].len != j[y].len)
		return j[x].len > j[y].len ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* For qsort_r: more blocks left first (ties: the earlier index). */
static int left_cmp(const void *a, const void *b, void *arg)
{
	const uint64_t *left = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (left[x] != left[y])
		return left[x] < left[y] ? 1 : -1;
	return x < y ? -1 : x > y;
}

/* Job k is a part of parent[k] (the outermost job holding its bytes, at
 * at[k] blocks from its start) or NONE; each holder's parts listed from
 * first[holder] through next[], by first byte. idx: n entries of
 * scratch. */
static void parts_find(const struct hash_pjob *j, uint32_t n, uint32_t *idx,
		       uint32_t *parent, uint64_t *at, uint32_t *first,
		       uint32_t *next)
{
	uint32_t top = NONE;
	uint64_t top_end = 0;

	for (uint32_t k = 0; k < n; k++) {
		idx[k] = k;
		parent[k] = first[k] = next[k] = NONE;
		at[k] = 0;
	}
	qsort_r(idx, n, sizeof(*idx), base_cmp, (void *)j);
	for (uint32_t o = 0; o < n; o++) {
		uint32_t k = idx[o];
		uint64_t end = j[k].base + j[k].len;

		if (top != NONE && end <= top_end) {
			uint64_t d = j[k].base - j[top].base;

			if (d % XS_BLOCK == 0 &&
			    xs_nblocks(j[k].len) >= HASH_PART_MIN_BLOCKS) {
				parent[k] = top;
				at[k] = d / XS_BLOCK;
			}
			continue;
		}
		/* one that runs past the holder's end is no holder */
		if (top == NONE || j[k].base >= top_end) {
			top = k;
			top_end = end;
		}
	}
	for (uint32_t o = n; o-- > 0;) {
		uint32_t k = idx[o];

		if (parent[k] != NONE) {
			next[k] = first[parent[k]];
			first[parent[k]] = k;
		}
	}
}

int hash_plan_rounds(const struct hash_pjob *j, uint32_t n,
		     uint64_t seg_blocks, uint64_t round_blocks,
		     struct hash_seg *segs, uint32_t room, uint32_t *nsegs,
		     struct hash_round **rounds, uint32_t *nrounds)
{
	uint32_t nn = n ? n : 1;
	/* per job: blocks left, done, its offset in its holder; the order of
	 * a round (and parts_find's scratch), its holder, its first and next
	 * part, the first part not yet passed */
	uint64_t *left = malloc(sizeof(uint64_t) * 3 * nn), *done, *at;
	uint32_t *order = malloc(sizeof(uint32_t) * 5 * nn), *parent, *first,
		 *next, *cur;
	struct hash_seg *tmp = malloc(sizeof(*tmp) * nn);
	struct hash_round *rd = NULL;
	uint64_t cnt = 0;
	uint32_t s = 0, nrd = 0, unfinished = 0;
	int ret = -ENOMEM;

	if (!seg_blocks || seg_blocks > round_blocks) {
		ret = -EINVAL;
		goto out;
	}
	if (!left || !order || !tmp)
		goto out;
	done = left + nn;
	at = done + nn;
	parent = order + nn;
	first = parent + nn;
	next = first + nn;
	cur = next + nn;
	parts_find(j, n, order, parent, at, first, next);
	for (uint32_t k = 0; k < n; k++) {
		left[k] = xs_nblocks(j[k].len);
		done[k] = 0;
		cur[k] = first[k];
		/* a part: at most one segment more than its length's */
		cnt += left[k] ? (left[k] + seg_blocks - 1) / seg_blocks : 1;
		cnt += parent[k] != NONE;
		unfinished += parent[k] == NONE;
	}
	if (cnt > room) {
		ret = 1;
		goto out;
	}
	rd = malloc(sizeof(*rd) * (cnt ? cnt : 1));
	if (!rd)
		goto out;
	while (unfinished) {
		uint64_t cap = round_blocks;
		uint32_t m = 0, nt = 0;

		for (uint32_t k = 0; k < n; k++)
			if (parent[k] == NONE && (left[k] || !done[k]))
				order[m++] = k;
		qsort_r(order, m, sizeof(*order), left_cmp, left);
		rd[nrd] = (struct hash_round){ .first = s };
		for (uint32_t o = 0; o < m; o++) {
			uint32_t k = order[o];
			uint64_t take = left[k] < seg_blocks ? left[k] : seg_blocks;
			uint64_t c0 = done[k], c1 = c0 + take;
			uint64_t flat0 = round_blocks - cap;

			if (take > cap)
				continue;
			segs[s++] = (struct hash_seg){
				.base = j[k].base, .len = j[k].len,
				.b0 = c0, .nblk = take, .flat0 = flat0,
				.state = j[k].state, .out = j[k].out,
				.flags = (c0 ? 0 : HASH_SEG_INIT) |
					 (take == left[k] ? HASH_SEG_FIN : 0),
			};
			/* the parts among these blocks: those ended before
			 * c0 passed for good (cur), those from c1 on left
			 * to a later segment */
			while (cur[k] != NONE &&
			       at[cur[k]] + xs_nblocks(j[cur[k]].len) <= c0)
				cur[k] = next[cur[k]];
			for (uint32_t p = cur[k]; p != NONE && at[p] < c1;
			     p = next[p]) {
				uint64_t end = at[p] + xs_nblocks(j[p].len);
				uint64_t lo = c0 > at[p] ? c0 : at[p];
				uint64_t hi = c1 < end ? c1 : end;

				if (lo >= hi)
					continue;
				tmp[nt++] = (struct hash_seg){
					.base = j[p].base, .len = j[p].len,
					.b0 = lo - at[p], .nblk = hi - lo,
					.flat0 = flat0 + (lo - c0),
					.state = j[p].state, .out = j[p].out,
					.flags = (lo == at[p] ? HASH_SEG_INIT : 0) |
						 (hi == end ? HASH_SEG_FIN : 0),
				};
			}
			cap -= take;
			left[k] -= take;
			done[k] += take ? take : 1;   /* a 0-block job: done */
			if (!left[k])
				unfinished--;
		}
		rd[nrd].nseg = s - rd[nrd].first;
		memcpy(segs + s, tmp, sizeof(*tmp) * nt);
		s += nt;
		rd[nrd].nchain = s - rd[nrd].first;
		rd[nrd++].nblocks = round_blocks - cap;
	}
	*nsegs = s;
	*rounds = rd;
	*nrounds = nrd;
	rd = NULL;
	ret = 0;
out:
	free(rd);
	free(tmp);
	free(order);
	free(left);
	return ret;
}
