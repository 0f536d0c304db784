/* SPDX-License-Identifier: MIT */
/*
 * Sleep/wake round trips against a real wcd (host backend):
 * at level 1 and level 2 (and with the staged load path, the one the CUDA
 * backend uses), every tensor's manifest hash after WAKE equals the one
 * before SLEEP, and an engine attached after WAKE reads the files' bytes
 * (byte compare) and verifies. While asleep STATUS says so (state, level,
 * no resident bytes; level 1: the host copy's bytes) and the ready file's
 * state is "sleeping".
 *
 * Level 1 with less host memory available than the copy needs is refused
 * (MemAvailable read from the file WCD_MEMINFO names) and the daemon keeps
 * serving.
 *
 * A level-2 wake whose files changed on disk while the daemon slept (the
 * model rewritten with another seed) fails with the tensor named and the
 * daemon stays asleep; with the files restored, the wake succeeds.
 *
 * More pools than a sleep allocates host buffers ahead for: the bytes
 * come back; a host buffer that cannot be had for one pool refuses the
 * sleep and leaves no buffer behind (wcd's RssAnon).
 *
 * wcd --sleep-arena keep: the wake keeps the host copy's buffers (STATUS:
 * sleep_arena_bytes) and the next level-1 sleep copies into them, needing
 * no host memory (it succeeds with MemAvailable short) and saying so;
 * after an update to other bytes of the same layout, the sleep into the
 * kept arena holds the new version's bytes (the wake re-checks every
 * hash against version 2's manifest, the engine byte-compares the files).
 */
#include "client_util.h"

static struct e2e x;

/* Every tensor's name and hash, from MANIFEST. */
static char *manifest_hashes(void)
{
	struct wc_conn *c = e2e_connect(&x);
	struct wc_model *m;
	struct wc_error e;
	size_t cap = 1 << 16, off = 0;
	char *s = malloc(cap);

	T_ASSERT(s);
	if (wc_hello(c, NULL, NULL, &e) || wc_manifest(c, &m, &e))
		T_FAIL("manifest: %s", e.msg);
	for (uint64_t i = 0; i < wc_tensor_count(m); i++) {
		const struct wc_tensor *t = wc_tensor_at(m, i);
		char hex[WC_HEX_LEN];

		T_ASSERT(t->flags & WC_TENSOR_HASHED);
		base_hash_hex(t->hash, hex);
		off += (size_t)snprintf(s + off, cap - off, "%s %s\n", t->name, hex);
		T_ASSERT(off < cap);
	}
	T_EQ_U64(e2e_stored_count(m), x.m.ntensors);
	wc_detach(m, NULL);
	wc_close(c);
	return s;
}

static void check_asleep(unsigned level)
{
	json_t *j = e2e_status(&x);
	char ready[2048];
	FILE *f;
	size_t n;

	T_EQ_STR(json_string_value(json_object_get(j, "state")), "sleeping");
	T_EQ_INT(json_integer_value(json_object_get(j, "sleep_level")), level);
	T_EQ_INT(json_integer_value(json_object_get(j, "resident_bytes")), 0);
	T_EQ_U64(json_integer_value(json_object_get(j, "host_copy_bytes")),
		 level == 1 ? x.m.total_bytes : 0);
	json_decref(j);
	f = fopen(x.ready, "r");
	T_ASSERT(f);
	n = fread(ready, 1, sizeof(ready) - 1, f);
	fclose(f);
	ready[n] = '\0';
	T_HAS(ready, "\nstate=sleeping\n");
}

static int sleep_level(unsigned level, struct wc_life_result *r)
{
	struct wc_conn *c = e2e_connect(&x);
	struct wc_error e;
	int ret = wc_sleep(c, level, r, &e);

	if (ret)
		T_FAIL("sleep %u: %s", level, e.msg);
	wc_close(c);
	return ret;
}

static int wake(struct wc_life_result *r, char *msg)
{
	struct wc_conn *c = e2e_connect(&x);
	struct wc_error e;
	int ret = wc_wake(c, r, &e);

	snprintf(msg, WC_ERR_MSG_LEN, "%s", ret ? e.msg : r->msg);
	wc_close(c);
	return ret;
}

static void round_trip(unsigned level, const char *how)
{
	char *before = manifest_hashes(), *after;
	char msg[WC_ERR_MSG_LEN];
	struct wc_life_result r;

	sleep_level(level, &r);
	T_EQ_INT(r.level, level);
	T_EQ_U64(r.version, 1);
	check_asleep(level);
	if (wake(&r, msg))
		T_FAIL("wake from level %u: %s", level, msg);
	T_HAS(msg, "hashes re-checked");
	T_EQ_U64(r.bytes, x.m.total_bytes);
	after = manifest_hashes();
	T_EQ_STR(after, before);
	e2e_attach_verify(&x, "after wake");
	printf("ok  %s: level %u round trip, %llu tensor hashes equal: %s\n",
	       how, level, (unsigned long long)x.m.ntensors, msg);
	free(before);
	free(after);
}

static void changed_files_level2(void)
{
	char wcgen[600], msg[WC_ERR_MSG_LEN];
	char *seed2[] = { wcgen, "tiny", "--seed", "2", "--force", "--out",
			  x.model, NULL };
	char *seed0[] = { wcgen, "tiny", "--force", "--out", x.model, NULL };
	struct wc_life_result r;
	struct wc_conn *c;
	struct wc_error e;

	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x.bin);
	sleep_level(2, &r);
	T_EQ_INT(e2e_run(x.log, seed2), 0);       /* other bytes, same shapes */
	T_EQ_INT(wake(&r, msg), -EIO);
	T_HAS(msg, "changed while the daemon slept");
	T_HAS(msg, "do not match their manifest hash");
	T_HAS(msg, "the daemon stays asleep (level 2)");
	check_asleep(2);
	c = e2e_connect(&x);
	T_EQ_INT(wc_hello(c, NULL, NULL, &e), -EAGAIN);
	T_HAS(e.msg, "the daemon is sleeping: wake it first (wcctl wake)");
	wc_close(c);
	printf("ok  level 2 wake with changed files refused: %.160s\n", msg);

	T_EQ_INT(e2e_run(x.log, seed0), 0);       /* the original bytes */
	if (wake(&r, msg))
		T_FAIL("wake with the files restored: %s", msg);
	e2e_attach_verify(&x, "after wake");
}

/* wcd --no-hash has no manifest hashes to re-check: wake says so. */
static void no_hash(void)
{
	static const char *const args[] = { "--no-hash", NULL };
	char msg[WC_ERR_MSG_LEN];
	struct wc_life_result r;

	e2e_kill_wcd(&x);
	e2e_start_wcd(&x, args);
	for (unsigned level = 1; level <= 2; level++) {
		sleep_level(level, &r);
		if (wake(&r, msg))
			T_FAIL("wake (--no-hash, level %u): %s", level, msg);
		T_HAS(msg, "not re-checked (wcd --no-hash)");
	}
	printf("ok  --no-hash: %s\n", msg);
}

static void write_meminfo(const char *path, unsigned long long kb);

static json_int_t arena_bytes(void)
{
	json_t *j = e2e_status(&x);
	json_int_t n = json_integer_value(json_object_get(j, "sleep_arena_bytes"));

	json_decref(j);
	return n;
}

static void arena_keep(const char *meminfo)
{
	static const char *const args[] = { "--sleep-arena", "keep", NULL };
	char wcgen[600], msg[WC_ERR_MSG_LEN];
	char *seed3[] = { wcgen, "tiny", "--seed", "3", "--force", "--out",
			  x.model, NULL };
	char *seed0[] = { wcgen, "tiny", "--force", "--out", x.model, NULL };
	struct wc_life_result r;
	struct wc_conn *c;
	struct wc_error e;

	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x.bin);
	e2e_kill_wcd(&x);
	e2e_start_wcd(&x, args);
	T_EQ_INT(arena_bytes(), 0);
	sleep_level(1, &r);
	T_HAS(r.msg, "into host memory allocated for it");
	check_asleep(1);
	if (wake(&r, msg))
		T_FAIL("wake (--sleep-arena keep): %s", msg);
	T_HAS(msg, "the host arena is kept for the next sleep");
	T_CMP_INT(arena_bytes(), >=, (json_int_t)x.m.total_bytes);

	/* the second sleep allocates nothing: 1 MiB "available" is enough */
	write_meminfo(meminfo, 1024);
	sleep_level(1, &r);
	T_HAS(r.msg, "into the arena kept since the last sleep");
	write_meminfo(meminfo, 64ull << 20);     /* the wake's pools need it */
	T_EQ_INT(arena_bytes(), 0);
	check_asleep(1);
	if (wake(&r, msg))
		T_FAIL("wake from the kept arena: %s", msg);
	T_HAS(msg, "hashes re-checked");
	T_EQ_U64(r.bytes, x.m.total_bytes);
	e2e_attach_verify(&x, "after wake");

	/* other bytes, same layout: the kept arena must hold the new ones */
	T_EQ_INT(e2e_run(x.log, seed3), 0);
	c = e2e_connect(&x);
	if (wc_update(c, x.model, &r, &e))
		T_FAIL("update to seed 3: %s", e.msg);
	wc_close(c);
	T_EQ_U64(r.version, 2);
	sleep_level(1, &r);
	T_HAS(r.msg, "into the arena kept since the last sleep");
	T_EQ_U64(r.version, 2);
	if (wake(&r, msg))
		T_FAIL("wake of version 2 from the kept arena: %s", msg);
	T_HAS(msg, "hashes re-checked");
	e2e_attach_verify(&x, "after wake");
	printf("ok  --sleep-arena keep: second sleep into the kept arena, version 2's bytes after an update: %s\n",
	       msg);
	T_EQ_INT(e2e_run(x.log, seed0), 0);
}

static void write_meminfo(const char *path, unsigned long long kb)
{
	FILE *f = fopen(path, "w");

	T_ASSERT(f);
	fprintf(f, "MemTotal: %llu kB\nMemAvailable: %llu kB\n", 2 * kb, kb);
	T_ASSERT(fclose(f) == 0);
}

/* Level 1 with too little host memory for the copy: refused, both sizes
 * named, the daemon keeps serving; level 2 needs no host copy. */
static void short_host_memory(const char *meminfo)
{
	struct wc_conn *c = e2e_connect(&x);
	struct wc_life_result r;
	struct wc_error e;
	char want[256];
	json_t *j;

	write_meminfo(meminfo, 1000);
	T_EQ_INT(wc_sleep(c, 1, &r, &e), -EAGAIN);
	/* the copy's size: the pools' bytes, at least the tensors' */
	snprintf(want, sizeof(want), "cannot sleep at level 1: the host copy needs %llu",
		 (unsigned long long)x.m.total_bytes / 1000);
	T_HAS(e.msg, want);
	snprintf(want, sizeof(want), " bytes but only 1024000 bytes of host memory are available (MemAvailable); the daemon keeps serving");
	T_HAS(e.msg, want);
	j = e2e_status(&x);
	T_EQ_STR(json_string_value(json_object_get(j, "state")), "ready");
	T_EQ_INT(json_integer_value(json_object_get(j, "host_copy_bytes")), 0);
	json_decref(j);
	e2e_attach_verify(&x, "after wake");
	T_OK(wc_sleep(c, 2, &r, &e));
	write_meminfo(meminfo, 64ull << 20);
	T_OK(wc_wake(c, &r, &e));
	wc_close(c);
	printf("ok  level 1 refused with short host memory: %.160s\n", want);
}

/* wcd's resident anonymous memory, in kB: the host backend's sleep
 * buffers are anonymous (MAP_POPULATE), the pools memfd (shmem). */
static long rss_anon_kb(void)
{
	long kb = e2e_rss_anon_kb(x.wcd);

	T_ASSERT(kb >= 0);
	return kb;
}

/* Refuses the sleep the failure hook hook=2 makes (its message msg), and
 * checks that the daemon keeps serving with nothing left behind: no host
 * buffer (RssAnon within half of one pool, less_kb) and no descriptor.
 * Returns the RssAnon change across the refusal. */
static long refused_sleep(const char *const *args, const char *hook,
			  const char *msg, long less_kb)
{
	struct wc_life_result r;
	struct wc_error e;
	struct wc_conn *c;
	long before, left;
	int fds;

	e2e_kill_wcd(&x);
	setenv(hook, "2", 1);
	e2e_start_wcd(&x, args);
	unsetenv(hook);
	fds = e2e_fd_count(x.wcd);
	before = rss_anon_kb();
	c = e2e_connect(&x);
	T_EQ_INT(wc_sleep(c, 1, &r, &e), -EAGAIN);
	T_HAS(e.msg, msg);
	T_HAS(e.msg, "the daemon keeps serving");
	wc_close(c);
	left = rss_anon_kb() - before;
	T_CMP_INT(left, <, less_kb);
	/* the connection's socket and pidfd go when wcd sees its end */
	for (int k = 0; k < 500 && e2e_fd_count(x.wcd) != fds; k++)
		usleep(10000);
	T_EQ_INT(e2e_fd_count(x.wcd), fds);
	{
		json_t *j = e2e_status(&x);

		T_EQ_STR(json_string_value(json_object_get(j, "state")), "ready");
		T_EQ_INT(json_integer_value(json_object_get(j, "host_copy_bytes")), 0);
		json_decref(j);
	}
	e2e_attach_verify(&x, "after wake");
	return left;
}

/* More pools than one at a time: every pool's bytes come back. A host
 * buffer that cannot be had for pool 2 (WCD_TEST_SLEEP_ALLOC_FAIL: the
 * mapping fails) refuses the sleep with the reason, the daemon keeps
 * serving the same bytes, and no buffer is left behind (pools 0, 1,
 * already copied); so does a buffer that cannot be pinned
 * (WCD_TEST_SLEEP_PIN_FAIL, once every pool's buffer is mapped): then
 * the buffers mapped ahead (pools 3 on) are not left either. */
static void many_pools(void)
{
	static const char *const args[] = { "--pool-size", "1M", NULL };
	struct wc_conn *c;
	struct wc_model *m;
	struct wc_life_result r;
	struct wc_error e;
	struct wc_pool_view pv;
	uint32_t pools;
	long before, asleep, left, pinned;
	uint64_t ahead;

	e2e_kill_wcd(&x);
	e2e_start_wcd(&x, args);
	c = e2e_connect(&x);
	if (wc_hello(c, NULL, NULL, &e) || wc_attach(c, 0, &m, NULL, &e))
		T_FAIL("attach: %s", e.msg);
	pools = wc_pool_count(m);
	T_CMP_INT(pools, >, 4);
	T_OK(wc_pool_at(m, 3, &pv));
	ahead = pv.size;                      /* what pool 2's failure finds mapped */
	wc_detach(m, NULL);
	wc_close(c);
	round_trip(1, "more pools than one at a time");
	/* while asleep each pool's host buffer is a mapping of its own (what
	 * the failure below must not leave behind) */
	before = rss_anon_kb();
	sleep_level(1, &r);
	asleep = rss_anon_kb() - before;
	T_CMP_INT(asleep, >=, (long)(x.m.total_bytes >> 10) * 9 / 10);
	if (wake(&r, e.msg))
		T_FAIL("wake: %s", e.msg);
	left = refused_sleep(args, "WCD_TEST_SLEEP_ALLOC_FAIL",
			     "cannot sleep at level 1: WCD_TEST_SLEEP_ALLOC_FAIL: no host buffer for pool 2",
			     (long)(ahead >> 10) / 2);
	pinned = refused_sleep(args, "WCD_TEST_SLEEP_PIN_FAIL",
			       "cannot sleep at level 1: WCD_TEST_SLEEP_PIN_FAIL: pool 2 cannot be pinned",
			       (long)(ahead >> 10) / 2);
	printf("ok  %u pools: sleep/wake round trip; a failed host buffer for pool 2 refused the sleep, nothing left behind (RssAnon %+ld kB across it, %+ld kB when pinning pool 2 failed with pools 3-%u mapped, %+ld kB while asleep; pool 3: %llu bytes)\n",
	       pools, left, pinned, pools - 1, asleep, (unsigned long long)ahead);
	e2e_kill_wcd(&x);
}

int main(void)
{
	static const char *const staged[] = { "--load-path", "staged",
					      "--slot-size", "1M", NULL };

	char meminfo[200];

	e2e_init(&x, "life_sleep");
	snprintf(meminfo, sizeof(meminfo), "%s/meminfo", x.dir);
	write_meminfo(meminfo, 64ull << 20);
	setenv("WCD_MEMINFO", meminfo, 1);
	e2e_start_wcd(&x, NULL);
	short_host_memory(meminfo);
	round_trip(1, "direct");
	round_trip(2, "direct");
	round_trip(1, "direct, again");
	changed_files_level2();
	many_pools();
	e2e_start_wcd(&x, staged);
	round_trip(1, "staged");
	round_trip(2, "staged");
	no_hash();
	arena_keep(meminfo);
	printf("life_sleep: ok\n");
	return 0;
}
