/* SPDX-License-Identifier: MIT */
/*
 * A level-1 wake answers before its host copy is freed (issue 17: on the
 * H200 the unpinning of 16 GiB took 0.3 s after the copy, all of it before
 * the reply). Against a real wcd (host backend, --pool-size 1M: several
 * buffers), with the free held pending by WCD_TEST_WAKE_FREE_GATE (the free
 * waits for a file to exist):
 *
 * - the wake returns while the free is pending; STATUS says ready, no host
 *   copy, host_freeing_bytes the copy's bytes (still in wcd's RssAnon); an
 *   engine attaches and reads the files' bytes meanwhile; once the gate
 *   opens, the bytes go (STATUS 0, RssAnon back) and so does every
 *   descriptor the free took;
 * - a SLEEP that arrives while the free is pending stops it and takes back
 *   the buffers it has not freed (still pinned on CUDA): it waits for
 *   nothing, one host copy is held, not two, and the next wake serves the
 *   files' bytes; with the free stopped after its first two buffers
 *   (WCD_TEST_WAKE_FREE_GATE_AT=2) the rest come back and those two are
 *   mapped again;
 * - an UPDATE likewise waits, then publishes version 2;
 * - SIGTERM while it is pending: wcd finishes the free and exits 0;
 * - the free cannot be queued on wcd's worker pool
 *   (WCD_TEST_WAKE_FREE_NO_THREAD): freed on the loop's thread before the
 *   reply, as before, nothing left behind;
 * - a wake whose check fails (WCD_TEST_WAKE_CORRUPT) frees nothing and
 *   keeps the host copy; the next wake succeeds;
 * - --sleep-arena keep: nothing is freed, no free is waited for.
 */
#include "client_util.h"
#include "t_wait.h"

static struct e2e x;
static char gate[200];

static void on_alarm(int sig)
{
	fprintf(stderr, "life_wakefree: timed out (a request waited for the gated free?)\n");
	e2e_show_log(x.log);
	e2e_on_signal(sig);
}

static json_int_t status_int(const char *key)
{
	json_t *j = e2e_status(&x);
	json_int_t n = json_integer_value(json_object_get(j, key));

	json_decref(j);
	return n;
}

static const char *status_state(char *buf, size_t cap)
{
	json_t *j = e2e_status(&x);

	snprintf(buf, cap, "%s", json_string_value(json_object_get(j, "state")));
	json_decref(j);
	return buf;
}

static long rss_anon_kb(void)
{
	long kb = e2e_rss_anon_kb(x.wcd);

	T_ASSERT(kb >= 0);
	return kb;
}

/* Occurrences of needle in wcd's log. */
static int log_count(const char *needle)
{
	FILE *f = fopen(x.log, "r");
	char line[4096];
	int n = 0;

	T_ASSERT(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

struct log_more {
	const char *needle;
	int had;
};

static bool log_has_more(const char *path, void *arg)
{
	const struct log_more *m = arg;

	(void)path;
	return log_count(m->needle) > m->had;
}

/* Waits (up to 10 s, on each write to it) for the log to hold more than
 * `had` lines with needle. */
static void log_wait(const char *needle, int had)
{
	struct log_more m = { needle, had };

	if (t_wait_until(x.log, log_has_more, &m, x.wcd, 10000)) {
		e2e_show_log(x.log);
		T_FAIL("no new '%s' in wcd's log", needle);
	}
}

static void open_gate(void)
{
	int fd = open(gate, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

	T_ASSERT(fd >= 0);
	close(fd);
}

/* Waits (up to 10 s) for the pending free to end: STATUS 0 and the gate
 * taken. */
static void wait_freed(void)
{
	for (int i = 0; i < 1000 && status_int("host_freeing_bytes"); i++)
		usleep(10000);
	T_EQ_INT(status_int("host_freeing_bytes"), 0);
	T_ASSERT(access(gate, F_OK));
}

/* Waits (up to 5 s) for wcd's descriptor count to be n again (a closed
 * connection's socket and pidfd go when wcd sees its end). */
static void fds_back(int n)
{
	for (int k = 0; k < 500 && e2e_fd_count(x.wcd) != n; k++)
		usleep(10000);
	T_EQ_INT(e2e_fd_count(x.wcd), n);
}

static void do_sleep(void)
{
	struct wc_conn *c = e2e_connect(&x);
	struct wc_life_result r;
	struct wc_error e;

	if (wc_sleep(c, 1, &r, &e))
		T_FAIL("sleep: %s", e.msg);
	wc_close(c);
}

static void do_wake(struct wc_life_result *r)
{
	struct wc_conn *c = e2e_connect(&x);
	struct wc_error e;

	if (wc_wake(c, r, &e))
		T_FAIL("wake: %s", e.msg);
	wc_close(c);
}

/* A child that runs one lifecycle request (sleep level 1, or an update)
 * and exits 0 when it succeeded. */
static pid_t request_child(bool update)
{
	pid_t p = fork();

	T_ASSERT(p >= 0);
	if (!p) {
		struct wc_conn *c = e2e_connect(&x);
		struct wc_life_result r;
		struct wc_error e;
		int ret = update ? wc_update(c, x.model, &r, &e) :
				   wc_sleep(c, 1, &r, &e);

		if (ret)
			fprintf(stderr, "child's %s: %s\n",
				update ? "update" : "sleep", e.msg);
		_exit(ret ? 1 : 0);
	}
	return p;
}

static void child_ok(pid_t p)
{
	int st;

	T_EQ_INT(waitpid(p, &st, 0), p);
	T_ASSERT(WIFEXITED(st));
	T_EQ_INT(WEXITSTATUS(st), 0);
}

static const char *const pools_args[] = { "--pool-size", "1M", NULL };

/* The wake's reply comes while its free is pending, which the daemon
 * reports truly, serving meanwhile; the free then leaves nothing. */
static void pending_free(long *held_kb)
{
	struct wc_life_result r;
	char st[32];
	long rss0, rss;
	int fds0;

	fds0 = e2e_fd_count(x.wcd);
	rss0 = rss_anon_kb();
	do_sleep();
	do_wake(&r);
	T_HAS(r.msg, "hashes re-checked");
	T_EQ_STR(status_state(st, sizeof(st)), "ready");
	T_EQ_INT(status_int("host_copy_bytes"), 0);
	T_EQ_U64(status_int("host_freeing_bytes"), x.m.total_bytes);
	rss = rss_anon_kb() - rss0;
	T_CMP_INT(rss, >=, (long)(x.m.total_bytes >> 10) * 9 / 10);
	e2e_attach_verify(&x, "while the free runs or after it");
	open_gate();
	wait_freed();
	log_wait("after the wake's reply", 0);
	/* the sleep's mapper and the wake's free both ran on the pool */
	T_EQ_INT(log_count("cannot be queued"), 0);
	T_CMP_INT(rss_anon_kb() - rss0, <, (long)(x.m.total_bytes >> 10) / 4);
	fds_back(fds0);
	*held_kb = rss;
	printf("ok  wake answered with its free pending (%lld bytes being freed, RssAnon +%ld kB), an engine attached meanwhile; then freed, RssAnon and %d descriptors back\n",
	       (long long)x.m.total_bytes, rss, fds0);
}

/* A SLEEP right after the wake takes back what the free has not reached
 * (all of it here: the free waits at its gate before the first buffer),
 * without waiting for the gate: one copy held; the next wake's bytes are
 * the files'; then the same sleep again, for the tests that follow. */
static void sleep_while_freeing(void)
{
	const char *back = "host buffers (";
	struct wc_life_result r;
	long rss0 = rss_anon_kb(), rss;
	int had = log_count(back);
	char st[32];
	const char *q;
	unsigned got, of;

	for (int round = 0; round < 2; round++) {
		struct wc_conn *c;
		struct wc_error e;

		do_wake(&r);               /* from the sleep before */
		if (round)
			e2e_attach_verify(&x, "after a sleep into taken-back buffers");
		T_EQ_U64(status_int("host_freeing_bytes"), x.m.total_bytes);
		c = e2e_connect(&x);
		if (wc_sleep(c, 1, &r, &e))
			T_FAIL("sleep: %s", e.msg);
		wc_close(c);
		T_HAS(r.msg, "into the last wake's host memory, taken back from its free");
		/* all of them: the free waited at its gate before the first */
		T_ASSERT((q = strstr(r.msg, " s (")) != NULL);
		q += 3;
		T_EQ_INT(sscanf(q, "(%u of %u buffers", &got, &of), 2);
		T_CMP_INT(of, >, 1);
		T_EQ_INT(got, of);
		T_EQ_INT(log_count(back), had + round + 1);
		T_EQ_STR(status_state(st, sizeof(st)), "sleeping");
		T_EQ_U64(status_int("host_copy_bytes"), x.m.total_bytes);
		T_EQ_INT(status_int("host_freeing_bytes"), 0);
		rss = rss_anon_kb() - rss0;
		/* one copy held: the wake's, taken back */
		T_CMP_INT(rss, <, (long)(x.m.total_bytes >> 10) / 4);
		T_ASSERT(access(gate, F_OK));   /* never opened */
	}
	printf("ok  sleep during the pending free took its buffers back, waiting for nothing: one copy held (RssAnon %+ld kB against the copy before), the next wake's bytes the files': %.140s\n",
	       rss, r.msg);
}

/* The free stopped half-way (its gate before buffer 2): the sleep takes
 * back the rest and maps the two freed ones again; the wake after it
 * serves the files' bytes. */
static void sleep_after_part_freed(void)
{
	struct wc_life_result r;
	struct wc_conn *c;
	struct wc_error e;

	char held[sizeof(gate) + 8];
	int ret;

	snprintf(held, sizeof(held), "%s.held", gate);
	unlink(held);
	setenv("WCD_TEST_WAKE_FREE_GATE_AT", "2", 1);
	e2e_start_wcd(&x, pools_args);
	unsetenv("WCD_TEST_WAKE_FREE_GATE_AT");
	do_sleep();
	do_wake(&r);
	/* the free's first two buffers gone: it waits at its gate (held) */
	ret = t_wait_file(held, x.wcd, 10000);
	if (ret)
		T_FAIL("the free did not reach its gate before buffer 2 in 10 s: %s",
		       strerror(-ret));
	c = e2e_connect(&x);
	if (wc_sleep(c, 1, &r, &e))
		T_FAIL("sleep: %s", e.msg);
	wc_close(c);
	T_HAS(r.msg, "taken back from its free");
	T_EQ_INT(log_count("taken back from their free, still pinned; 2 had been freed"), 1);
	T_EQ_U64(status_int("host_copy_bytes"), x.m.total_bytes);
	do_wake(&r);
	e2e_attach_verify(&x, "after a sleep into part taken-back buffers");
	open_gate();
	wait_freed();
	e2e_kill_wcd(&x);
	printf("ok  sleep after the free's first two buffers: the rest taken back, those two mapped again; the wake after it serves the files' bytes\n");
}

/* SIGTERM while the free is pending: the free ends, wcd exits 0. */
static void shutdown_while_freeing(void)
{
	const char *waiting = "waiting for the host copy of the last wake";
	struct wc_life_result r;
	int st, had = log_count(waiting), clean = log_count("exiting cleanly");

	do_wake(&r);                       /* from the sleep before */
	T_EQ_U64(status_int("host_freeing_bytes"), x.m.total_bytes);
	T_OK(kill(x.wcd, SIGTERM) ? -errno : 0);
	log_wait(waiting, had);
	T_EQ_INT(waitpid(x.wcd, &st, WNOHANG), 0); /* held by the free */
	T_EQ_INT(log_count("exiting cleanly"), clean);
	open_gate();
	T_EQ_INT(waitpid(x.wcd, &st, 0), x.wcd);
	x.wcd = 0;
	T_ASSERT(WIFEXITED(st));
	T_EQ_INT(WEXITSTATUS(st), 0);
	T_ASSERT(access(gate, F_OK));
	T_EQ_INT(log_count("exiting cleanly"), clean + 1);
	printf("ok  SIGTERM during the pending free: freed, then exit 0\n");
}

/* An UPDATE right after the wake waits for the free, then publishes. */
static void update_while_freeing(void)
{
	const char *waiting = "waiting for the host copy of the last wake";
	char wcgen[600], st[32];
	char *seed2[] = { wcgen, "tiny", "--seed", "2", "--force", "--out",
			  x.model, NULL };
	struct wc_life_result r;
	int had;
	pid_t p;

	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x.bin);
	e2e_start_wcd(&x, pools_args);
	do_sleep();
	do_wake(&r);
	T_EQ_U64(status_int("host_freeing_bytes"), x.m.total_bytes);
	T_EQ_INT(e2e_run(x.log, seed2), 0);
	had = log_count(waiting);
	p = request_child(true);
	log_wait(waiting, had);
	T_EQ_INT(waitpid(p, NULL, WNOHANG), 0);
	open_gate();
	child_ok(p);
	T_EQ_STR(status_state(st, sizeof(st)), "ready");
	T_EQ_INT(status_int("host_freeing_bytes"), 0);
	printf("ok  update during the pending free waited for it, then published version 2\n");
	e2e_kill_wcd(&x);
	{
		char *seed0[] = { wcgen, "tiny", "--force", "--out", x.model,
				  NULL };

		T_EQ_INT(e2e_run(x.log, seed0), 0);
	}
}

/* The free cannot be queued: freed before the reply, nothing left
 * behind. */
static void no_queue(void)
{
	struct wc_life_result r;
	long rss0;
	int fds0;

	setenv("WCD_TEST_WAKE_FREE_NO_THREAD", "1", 1);
	e2e_start_wcd(&x, pools_args);
	unsetenv("WCD_TEST_WAKE_FREE_NO_THREAD");
	fds0 = e2e_fd_count(x.wcd);
	rss0 = rss_anon_kb();
	do_sleep();
	do_wake(&r);
	T_HAS(r.msg, "hashes re-checked");
	T_EQ_INT(status_int("host_freeing_bytes"), 0);
	T_EQ_INT(status_int("host_copy_bytes"), 0);
	T_CMP_INT(rss_anon_kb() - rss0, <, (long)(x.m.total_bytes >> 10) / 4);
	T_EQ_INT(log_count("before the wake's reply went out"), 1);
	T_EQ_INT(log_count("it cannot be queued on the worker pool"), 1);
	fds_back(fds0);
	e2e_attach_verify(&x, "while the free runs or after it");
	e2e_kill_wcd(&x);
	printf("ok  the free cannot be queued: freed before the reply, RssAnon and %d descriptors back\n",
	       fds0);
}

/* A wake whose check fails (WCD_TEST_WAKE_CORRUPT: a byte of the host
 * copy flipped for one wake) frees nothing: still asleep with the whole
 * copy, none being freed; the next wake succeeds. */
static void failed_wake(void)
{
	struct wc_life_result r;
	struct wc_conn *c;
	struct wc_error e;
	char st[32];

	setenv("WCD_TEST_WAKE_CORRUPT", "1", 1);
	e2e_start_wcd(&x, pools_args);
	unsetenv("WCD_TEST_WAKE_CORRUPT");
	do_sleep();
	c = e2e_connect(&x);
	T_EQ_INT(wc_wake(c, &r, &e), -EIO);
	wc_close(c);
	T_HAS(e.msg, "wake failed: 1 of ");
	T_HAS(e.msg, "do not match their manifest hash after the restore from host memory");
	T_EQ_STR(status_state(st, sizeof(st)), "sleeping");
	T_EQ_U64(status_int("host_copy_bytes"), x.m.total_bytes);
	T_EQ_INT(status_int("host_freeing_bytes"), 0);
	do_wake(&r);
	T_HAS(r.msg, "hashes re-checked");
	open_gate();
	wait_freed();
	e2e_attach_verify(&x, "while the free runs or after it");
	e2e_kill_wcd(&x);
	printf("ok  a wake whose check failed kept the host copy, freed nothing; the next one woke: %.120s\n",
	       e.msg);
}

/* --sleep-arena keep: the wake frees nothing and no sleep waits. */
static void arena_keep(void)
{
	static const char *const args[] = { "--pool-size", "1M",
					    "--sleep-arena", "keep", NULL };
	const char *waiting = "waiting for the host copy of the last wake";
	struct wc_life_result r;
	int had = log_count(waiting);

	e2e_start_wcd(&x, args);
	do_sleep();
	do_wake(&r);
	T_HAS(r.msg, "the host arena is kept for the next sleep");
	T_EQ_INT(status_int("host_freeing_bytes"), 0);
	T_CMP_INT(status_int("sleep_arena_bytes"), >=,
		  (json_int_t)x.m.total_bytes);
	do_sleep();                        /* into the arena, no wait */
	do_wake(&r);
	T_EQ_INT(log_count(waiting), had);
	e2e_attach_verify(&x, "while the free runs or after it");
	e2e_kill_wcd(&x);
	printf("ok  --sleep-arena keep: nothing freed at the wake, nothing waited for\n");
}

int main(void)
{
	long held;

	e2e_init(&x, "life_wakefree");
	signal(SIGALRM, on_alarm);
	alarm(120);
	snprintf(gate, sizeof(gate), "%s/free-gate", x.dir);
	setenv("WCD_TEST_WAKE_FREE_GATE", gate, 1);
	e2e_start_wcd(&x, pools_args);
	pending_free(&held);
	do_sleep();
	sleep_while_freeing();
	shutdown_while_freeing();
	update_while_freeing();
	sleep_after_part_freed();
	failed_wake();
	arena_keep();
	unsetenv("WCD_TEST_WAKE_FREE_GATE");
	no_queue();
	printf("life_wakefree: ok\n");
	return 0;
}
