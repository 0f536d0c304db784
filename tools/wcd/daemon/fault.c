// SPDX-License-Identifier: MIT
/*
 * The table of wcd's fault points (fault.h) and the one getenv that reads
 * them. Each entry: the variable, its type, and one line of what it does;
 * tools/wcd/README.md's table is checked against these lines by
 * test/wcd/wcd_faults.sh, so keep each entry in this form.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "daemon/fault.h"

struct fault_def {
	const char *name;
	enum fault_type type;
	const char *what;
};

#define F(p, n, t, w) [FAULT_##p] = { n, FAULT_##t, w }

static const struct fault_def faults[FAULT_NPOINTS] = {
	F(HANDOVER_KILL, "WCD_HANDOVER_KILL", STR,
	  "old:K or new:K: that side of a handover SIGKILLs itself at step K"),
	F(HANDOVER_IO_MS, "WCD_HANDOVER_IO_MS", NUM,
	  "the new daemon's bound on each handover frame, ms (10 at least)"),
	F(HANDOVER_DRAIN_MS, "WCD_HANDOVER_DRAIN_MS", NUM,
	  "the old daemon's bound on draining its clients, ms"),
	F(HANDOVER_SERVING_MS, "WCD_HANDOVER_SERVING_MS", NUM,
	  "the old daemon's bound on the new one's SERVING after DONE, ms"),
	F(HO_PROTO, "WCD_TEST_HO_PROTO", STR,
	  "MIN:MAX: the handover versions the new daemon asks for"),
	F(HO_READY_FAIL, "WCD_TEST_HO_READY_FAIL", FLAG,
	  "the new daemon cannot write the ready file after the set-up"),
	F(HO_COMMIT_GATE, "WCD_TEST_HO_COMMIT_GATE", STR,
	  "PATH: the new daemon waits before COMMIT until PATH exists"),
	F(HO_SERVE_GATE, "WCD_TEST_HO_SERVE_GATE", STR,
	  "PATH: the new daemon waits before SERVING until PATH exists"),
	F(HO_KILL_SIG, "WCD_TEST_HO_KILL_SIG", NUM,
	  "the signal that kills an overdue new daemon (SIGKILL)"),
	F(HO_WAIT_PEER_EXIT, "WCD_TEST_HO_WAIT_PEER_EXIT", FLAG,
	  "after DONE the old daemon waits until the new one has ended"),
	F(STALL_FIFO, "WCD_TEST_STALL_FIFO", STR,
	  "FIFO: where a load stalled by WCD_TEST_STALL_AT reads (writes)"),
	F(STALL_DIR, "WCD_TEST_STALL_DIR", STR,
	  "DIR: the model whose load WCD_TEST_STALL_AT stalls"),
	F(STALL_AT, "WCD_TEST_STALL_AT", STR,
	  "open (default), parsed, plan, opened, filled or fill: where"),
	F(FILL_FAIL, "WCD_TEST_FILL_FAIL", STR,
	  "P:E[:shard]: the fill's move of piece P fails with errno E"),
	F(FILL_FAIL_DIR, "WCD_TEST_FILL_FAIL_DIR", STR,
	  "DIR: WCD_TEST_FILL_FAIL applies to loads of this model only"),
	F(FILL_THREADS, "WCD_TEST_FILL_THREADS", NUM,
	  "K: the fill's worker threads from the K-th on cannot be made"),
	F(FILL_POLL_FAIL, "WCD_TEST_FILL_POLL_FAIL", FLAG,
	  "the loop cannot watch the fill workers' eventfd"),
	F(FILL_EVENTFD_FAIL, "WCD_TEST_FILL_EVENTFD_FAIL", FLAG,
	  "the fill has no eventfd (EMFILE)"),
	F(FILL_PIPE_FAIL, "WCD_TEST_FILL_PIPE_FAIL", NUM,
	  "K: the fill's worker K cannot make its pipe (EMFILE)"),
	F(RA_FAIL, "WCD_TEST_RA_FAIL", STR,
	  "open, thread or drain: the fill's read-ahead fails there"),
	F(NO_SPLICE, "WCD_TEST_NO_SPLICE", FLAG,
	  "splice into a memfd is refused (EINVAL): pread takes over"),
	F(NO_CACHESTAT, "WCD_TEST_NO_CACHESTAT", FLAG,
	  "the page-cache probe uses mincore, as without cachestat"),
	F(PACK, "WCD_TEST_PACK", STR,
	  "flat: pack tensor by tensor, as before whole-layer packing"),
	F(DIRTY_POOLS, "WCD_TEST_DIRTY_POOLS", FLAG,
	  "device pools are filled with 0xa5 before padding is zeroed"),
	F(HASH_THREADS, "WCD_HASH_THREADS", NUM,
	  "the default of --hash-threads (bench scripts)"),
	F(SLEEP_ALLOC_FAIL, "WCD_TEST_SLEEP_ALLOC_FAIL", NUM,
	  "N: a level-1 sleep gets no host buffer for pool N"),
	F(SLEEP_PIN_FAIL, "WCD_TEST_SLEEP_PIN_FAIL", NUM,
	  "N: a level-1 sleep cannot pin pool N's host buffer"),
	F(WAKE_CORRUPT, "WCD_TEST_WAKE_CORRUPT", FLAG,
	  "the next wake's host copy has one byte flipped (once)"),
	F(WAKE_FREE_GATE, "WCD_TEST_WAKE_FREE_GATE", STR,
	  "PATH: the free of a wake's host copy waits until PATH exists"),
	F(WAKE_FREE_GATE_AT, "WCD_TEST_WAKE_FREE_GATE_AT", NUM,
	  "K: WCD_TEST_WAKE_FREE_GATE waits before buffer K (0)"),
	F(WAKE_FREE_NO_THREAD, "WCD_TEST_WAKE_FREE_NO_THREAD", FLAG,
	  "the free of a wake's host copy runs on the loop, no thread"),
	F(MEMINFO, "WCD_MEMINFO", STR,
	  "FILE: read instead of /proc/meminfo (an update's memory check)"),
	F(PUSH_HASH_GATE, "WCD_TEST_PUSH_HASH_GATE", STR,
	  "PATH: a commit's host hash writes PATH.held, waits for PATH"),
	F(READY_GATE, "WCD_TEST_READY_GATE", STR,
	  "PATH: after its first ready file wcd waits until PATH exists"),
};

/* value[p]: the point's value, NULL when off; copy[p] keeps the string
 * that fault_clear lets go of (reachable: no leak at exit) */
static const char *value[FAULT_NPOINTS];
static char *copy[FAULT_NPOINTS];
static pthread_once_t read_once = PTHREAD_ONCE_INIT;

/* Copies every point's variable (a later setenv may move the
 * environment's strings); an empty one is off. */
static void fault_read(void)
{
	for (int i = 0; i < FAULT_NPOINTS; i++) {
		const char *v;

		WC_ASSERT(faults[i].name);
		v = getenv(faults[i].name);
		if (!v || !*v)
			continue;
		copy[i] = strdup(v);
		value[i] = copy[i] ? copy[i] : v;
	}
}

static const char *fault_get(enum fault_point p)
{
	WC_ASSERT((unsigned)p < FAULT_NPOINTS);
	pthread_once(&read_once, fault_read);
	return __atomic_load_n(&value[p], __ATOMIC_ACQUIRE);
}

const char *fault_name(enum fault_point p)
{
	WC_ASSERT((unsigned)p < FAULT_NPOINTS);
	return faults[p].name;
}

const char *fault_str(enum fault_point p)
{
	return fault_get(p);
}

bool fault_on(enum fault_point p)
{
	const char *v = fault_get(p);

	WC_ASSERT(faults[p].type == FAULT_FLAG);
	return v && strcmp(v, "0");
}

long long fault_num(enum fault_point p, long long def)
{
	const char *v = fault_get(p);

	WC_ASSERT(faults[p].type == FAULT_NUM);
	return v ? strtoll(v, NULL, 0) : def;
}

void fault_clear(enum fault_point p)
{
	fault_get(p);
	__atomic_store_n(&value[p], NULL, __ATOMIC_RELEASE);
}

void fault_gate(enum fault_point p, bool (*stop)(void *arg), void *arg)
{
	const char *gate = fault_str(p);
	char held[4096];
	int fd;

	if (!gate || !*gate)
		return;
	snprintf(held, sizeof(held), "%s.held", gate);
	fd = open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	for (int k = 0; k < 6000 && access(gate, F_OK) && !(stop && stop(arg));
	     k++)
		usleep(10000);
	unlink(gate);
	unlink(held);
}
