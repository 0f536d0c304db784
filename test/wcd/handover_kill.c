/* SPDX-License-Identifier: MIT */
/*
 * Hot handover killed at every step (WCD_HANDOVER_KILL=new:K|old:K stops
 * that side with SIGKILL at step K), an engine attached throughout:
 *   new:1..5  (after ASK, BEGIN, the checks, COMMIT, DONE) and
 *   new:6     (set up to serve: the lock taken under its pid, the clients
 *             told its pid, the ready file written; SERVING not sent):
 *             the old daemon serves on: the engine's next request on the
 *             same connection is answered by it, its lease is intact, the
 *             ready file, /proc/locks and the lock file name the old pid,
 *             the engine's daemon fd watches the old daemon again (at
 *             new:6 it had followed the new one's notice first), and once
 *             the old daemon has seen the dead one's connection end it
 *             holds exactly the descriptors it held before (the engine
 *             too);
 *   the same when the new daemon's set-up fails before SERVING
 *             (WCD_TEST_HO_READY_FAIL=1: its ready file cannot be
 *             written): it aborts and exits 1;
 *   then the old daemon is killed: the engine's daemon fd reports it;
 *   new:7     (SERVING sent: not a handover step but a crash of the daemon
 *             that serves, before its loop turns; the old daemon held
 *             after DONE until the new one ended, WCD_TEST_HO_WAIT_PEER_EXIT,
 *             so that SERVING and the pidfd's event reach it together):
 *             the old daemon reads SERVING and exits 0, none serves, the lock is free and the
 *             ready file names the dead new pid (the leftovers of any
 *             crash), the engine's daemon fd reports the death and the
 *             mapping stays valid;
 *   old:1,2   (after the pause; after BEGIN: not everything handed over):
 *             the new daemon loads from disk (it was given --model) and
 *             serves; the engine's mapping stays valid;
 *   old:3..6  (everything handed over; after COMMIT; after DONE; after
 *             SERVING): the new daemon serves the same connection.
 * Also: a new daemon of another handover protocol is refused, naming both
 * ranges (protocol 1, a build before big layers were packed whole, with
 * that reason), and the old daemon serves on. Every wait is on an event (a
 * pidfd, a notice, a reply), bounded.
 */
#include <stdio.h>

#include "err.h"
#include "handover_util.h"
#include "ready.h"
#include "t_wait.h"
#include "wire_handover.h"

static pid_t spawn_takeover_env(struct e2e *x, const char *kill_at,
				const char *proto, bool with_model,
				const char *env)
{
	char wcd[600];
	char *argv[] = { wcd, "--takeover", "--device", x->device,
			 "--runtime-dir", x->rundir, "--model", x->model, NULL };
	pid_t p;

	if (!with_model)
		argv[6] = NULL;
	snprintf(wcd, sizeof(wcd), "%s/wcd", x->bin);
	p = fork();
	T_ASSERT(p >= 0);
	if (!p) {
		int fd = open(x->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (kill_at)
			setenv("WCD_HANDOVER_KILL", kill_at, 1);
		if (proto)
			setenv("WCD_TEST_HO_PROTO", proto, 1);
		if (env)
			putenv((char *)env);
		execv(argv[0], argv);
		_exit(127);
	}
	return p;
}

static pid_t spawn_takeover(struct e2e *x, const char *kill_at,
			    const char *proto, bool with_model)
{
	return spawn_takeover_env(x, kill_at, proto, with_model, NULL);
}

/* Waits up to ms for pid (our child) to end, without reaping it: a zombie
 * keeps its pid, so an engine can still follow a notice that names it. */
static siginfo_t wait_dead(struct e2e *x, pid_t pid, int ms, const char *what)
{
	return wait_end(x, pid, ms, what, true);
}

static int self_fds(void)
{
	return e2e_fd_count(getpid());
}

/* The pid written in the lock file. */
static pid_t lock_text_pid(const struct e2e *x)
{
	char path[300], buf[32] = "";
	int fd;
	ssize_t n;

	lock_path(x, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	T_ASSERT(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	T_ASSERT(n > 0);
	buf[n] = 0;
	return (pid_t)atoi(buf);
}

static pid_t ready_pid(const struct e2e *x, char *state, size_t cap)
{
	struct ready_info ri;
	char rerr[BASE_ERR_LEN];

	if (ready_read_file(&ri, x->ready, rerr))
		T_FAIL("ready file %s: %s", x->ready, rerr);
	if (state)
		snprintf(state, cap, "%s", ri.state);
	return ri.pid;
}

static void start_old(struct e2e *x, const char *kill_at)
{
	if (kill_at)
		setenv("WCD_HANDOVER_KILL", kill_at, 1);
	e2e_start_wcd(x, NULL);
	unsetenv("WCD_HANDOVER_KILL");
}

struct engine {
	struct wc_conn *c;
	struct wc_model *m;
};

static void engine_attach(struct e2e *x, struct engine *g)
{
	struct wc_expect ex = { .model_dir = x->model, .tp_size = 1 };
	struct wc_error e;

	g->c = e2e_connect(x);
	if (wc_hello(g->c, &ex, NULL, &e) || wc_attach(g->c, 0, &g->m, NULL, &e))
		T_FAIL("engine: %s", e.msg);
}

static void engine_close(struct engine *g)
{
	wc_detach(g->m, NULL);
	wc_close(g->c);
}

static int wait_status(pid_t p)
{
	int st;

	T_EQ_INT(waitpid(p, &st, 0), p);
	return st;
}

/* After a handover that did not happen (the new daemon nw is dead): the
 * old one serves on, same connection, same lease; the ready file, the
 * flock and the lock file name it; the engine's daemon fd watches it; no
 * descriptor more in the old daemon (fds before) or the engine (mine). */
static void old_serves_on(struct e2e *x, struct engine *g, pid_t nw,
			  int fds, int mine, const char *at)
{
	uint64_t end = e2e_now_ms() + 10000;
	char state[32];
	struct wc_error e;
	struct wc_notice n;
	bool listed = true;
	int st, leases;

	if (wc_ping(g->c, 1, &e)) {
		e2e_show_log(x->log);
		T_FAIL("%s: the old daemon does not answer the engine: %s", at,
		       e.msg);
	}
	T_EQ_INT(waitpid(x->wcd, &st, WNOHANG), 0);
	/* the old daemon has closed the dead one's connection once STATUS
	 * stops listing it (an event seen through replies; bounded) */
	while (listed) {
		T_EQ_INT(status_on(x, g->c, &leases, at, nw, &listed), x->wcd);
		T_EQ_INT(leases, 1);
		if (listed && e2e_now_ms() > end)
			T_FAIL("%s: the old daemon still lists the dead new one", at);
	}
	T_EQ_INT(ready_pid(x, state, sizeof(state)), x->wcd);
	T_EQ_STR(state, "ready");
	T_EQ_INT(lock_holder_pid(x, false), x->wcd);
	T_EQ_INT(lock_text_pid(x), x->wcd);
	T_EQ_INT(wc_daemon_pid(g->c), x->wcd);
	if (fd_readable(wc_daemon_fd(g->c), 0))
		T_FAIL("%s: the engine's daemon fd reports a death; the old daemon pid %d lives",
		       at, (int)x->wcd);
	if (e2e_fd_count_settled(x->wcd, fds, 2000) != fds) {
		e2e_show_log(x->log);
		T_FAIL("%s: the old daemon holds %d descriptors for 2 s, %d before",
		       at, e2e_fd_count(x->wcd), fds);
	}
	while (wc_notice_read(g->c, &n, &e) == 1)
		;
	T_EQ_INT(self_fds(), mine);
	T_EQ_U64(e2e_compare_all(x, g->m), x->m.ntensors);
}

/* The new daemon is killed at step k (1..5, nothing of the old daemon's
 * touched; 6, set up to serve): the old one serves on. */
static void new_killed(struct e2e *x, struct engine *g, int k)
{
	char at[16];
	int fds = e2e_fd_count(x->wcd), mine = self_fds();
	struct wc_notice n;
	siginfo_t si;
	pid_t nw;

	snprintf(at, sizeof(at), "new:%d", k);
	nw = spawn_takeover(x, at, NULL, false);
	si = wait_dead(x, nw, 10000, at);
	if (si.si_code != CLD_KILLED || si.si_status != SIGKILL) {
		e2e_show_log(x->log);
		T_FAIL("%s: the new daemon ended with code %d status %d, not SIGKILL",
		       at, si.si_code, si.si_status);
	}
	if (k == 6) {
		/* it told the engine its pid before it died (a zombie now, not
		 * reaped: the notice can be followed), then the old daemon
		 * resumed and pointed the engine back at itself */
		next_notice(x, g->c, WC_NOTICE_HANDOVER, 10000, at, &n, NULL);
		T_EQ_INT(wc_daemon_pid(g->c), nw);
		T_ASSERT(fd_readable(wc_daemon_fd(g->c), 0));
		next_notice(x, g->c, WC_NOTICE_HANDOVER, 10000, at, &n, NULL);
		T_EQ_INT(wc_daemon_pid(g->c), x->wcd);
		T_ASSERT(strstr(n.msg, "did not happen"));
	}
	T_EQ_INT(waitpid(nw, NULL, 0), nw);
	old_serves_on(x, g, nw, fds, mine, at);
}

/* The new daemon's set-up before SERVING fails (its ready file cannot be
 * written): it aborts, exits 1, and the old one serves on. */
static void new_setup_fails(struct e2e *x, struct engine *g)
{
	static const char at[] = "WCD_TEST_HO_READY_FAIL";
	int fds = e2e_fd_count(x->wcd), mine = self_fds();
	char cmd[800];
	siginfo_t si;
	pid_t nw;

	nw = spawn_takeover_env(x, NULL, NULL, false,
				"WCD_TEST_HO_READY_FAIL=1");
	si = wait_dead(x, nw, 10000, at);
	T_EQ_INT(waitpid(nw, NULL, 0), nw);
	if (si.si_code != CLD_EXITED || si.si_status != 1) {
		e2e_show_log(x->log);
		T_FAIL("%s: the new daemon ended with code %d status %d, not exit 1",
		       at, si.si_code, si.si_status);
	}
	snprintf(cmd, sizeof(cmd),
		 "grep -q 'the ready file .* cannot be written; aborted before serving: wcd pid %d serves on' '%s' && "
		 "grep -q 'the new daemon aborted after the commit' '%s'",
		 (int)x->wcd, x->log, x->log);
	if (system(cmd)) {
		e2e_show_log(x->log);
		T_FAIL("%s: the logs do not say why the handover was aborted",
		       at);
	}
	old_serves_on(x, g, nw, fds, mine, at);
}

/* The ready file at path names pid *arg (t_wait_until's test). */
static bool ready_names(const char *path, void *arg)
{
	struct ready_info ri;
	char err[BASE_ERR_LEN];

	return !ready_read_file(&ri, path, err) && ri.pid == *(pid_t *)arg;
}

/* The old daemon is killed at step k. */
static void old_killed(struct e2e *x, int k)
{
	char at[16];
	struct engine g;
	struct wc_error e;
	int st, leases, r;
	bool listed;
	pid_t nw, old;

	snprintf(at, sizeof(at), "old:%d", k);
	start_old(x, at);
	old = x->wcd;
	engine_attach(x, &g);
	nw = spawn_takeover(x, NULL, NULL, true);
	st = wait_status(old);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
		e2e_show_log(x->log);
		T_FAIL("%s: the old daemon ended with status 0x%x, not SIGKILL",
		       at, st);
	}
	x->wcd = nw;
	if (k >= 3) {
		/* everything was handed over: the same connection goes on */
		if (wc_ping(g.c, 2, &e))
			T_FAIL("%s: the new daemon does not answer the engine: %s",
			       at, e.msg);
		T_EQ_INT(status_on(x, g.c, &leases, at, 0, &listed), nw);
		T_EQ_INT(leases, 1);
	} else {
		/* loaded from disk: ready once its ready file names it */
		r = t_wait_until(x->ready, ready_names, &nw, nw, 30000);
		if (r == -ESRCH && waitpid(nw, &st, 0) == nw) {
			x->wcd = 0;
			e2e_show_log(x->log);
			T_FAIL("%s: the new daemon exited (0x%x) instead of loading",
			       at, st);
		}
		if (r)
			T_FAIL("%s: the new daemon is not ready after 30 s (%s)",
			       at, strerror(-r));
		T_ASSERT(wc_ping(g.c, 1, &e) != 0);   /* its daemon died */
		{
			struct engine h;

			engine_attach(x, &h);
			T_EQ_INT(status_on(x, h.c, &leases, at, 0, &listed), nw);
			engine_close(&h);
		}
	}
	T_EQ_U64(e2e_compare_all(x, g.m), x->m.ntensors);
	engine_close(&g);
	kill(nw, SIGTERM);
	st = wait_status(nw);
	x->wcd = 0;
	T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A new daemon that speaks handover protocol `proto` (WCD_TEST_HO_PROTO)
 * is refused: it exits 1, the old daemon's log names both ranges (ending
 * in `takes`; else the test fails saying `why`), and the old daemon still
 * answers the engine g. */
static void proto_refused(struct e2e *x, struct engine *g, const char *proto,
			  const char *takes, const char *why)
{
	struct wc_error e;
	char cmd[400];
	pid_t nw;
	int st;

	nw = spawn_takeover(x, NULL, proto, false);
	st = wait_status(nw);
	T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	snprintf(cmd, sizeof(cmd),
		 "grep -q 'protocol versions %d to %d and the new one takes %s' '%s'",
		 WIRE_HO_PROTO_MIN, WIRE_HO_PROTO, takes, x->log);
	if (system(cmd)) {
		e2e_show_log(x->log);
		T_FAIL("%s", why);
	}
	T_OK(wc_ping(g->c, 1, &e));
}

int main(void)
{
	static struct e2e x;
	struct engine g;
	struct wc_error e;
	int st;
	pid_t nw;

	e2e_init(&x, "hokill");
	start_old(&x, NULL);
	engine_attach(&x, &g);

	/* another protocol: refused, the old daemon untouched */
	proto_refused(&x, &g, "9:9", "9 to 9;",
		      "the refusal does not name both protocol ranges");
	/* a build of protocol 1 (before big layers were packed whole) */
	proto_refused(&x, &g, "1:1",
		      "1 to 1 (protocol 2 packs big layers whole: the pools differ)",
		      "the refusal of protocol 1 does not say why");
	/* a build of protocol 2 (before the allowed groups were handed over) */
	proto_refused(&x, &g, "2:2",
		      "2 to 2 (protocol 3 carries the groups the daemon serves, --allow-gid)",
		      "the refusal of protocol 2 does not say why");

	for (int k = 1; k <= 6; k++)
		new_killed(&x, &g, k);

	new_setup_fails(&x, &g);

	/* the engine watches the old daemon: its death is reported */
	kill(x.wcd, SIGKILL);
	if (!fd_readable(wc_daemon_fd(g.c), 10000))
		T_FAIL("the old daemon pid %d was killed and the engine's daemon fd does not say so",
		       (int)x.wcd);
	T_EQ_INT(waitpid(x.wcd, &st, 0), x.wcd);
	x.wcd = 0;
	T_EQ_U64(e2e_compare_all(&x, g.m), x.m.ntensors);
	engine_close(&g);

	/* new:7: a crash of the daemon that serves (SERVING sent). The old
	 * daemon, held after DONE until the new one has ended
	 * (WCD_TEST_HO_WAIT_PEER_EXIT), meets its SERVING and its pidfd's
	 * event at once: it must read what was sent before deciding, so it
	 * exits 0 and never takes the clients back from a daemon that
	 * served; none serves after (a crash), never two */
	setenv("WCD_TEST_HO_WAIT_PEER_EXIT", "1", 1);
	start_old(&x, NULL);
	unsetenv("WCD_TEST_HO_WAIT_PEER_EXIT");
	engine_attach(&x, &g);
	{
		struct wc_notice n;
		siginfo_t si;
		char cmd[700];

		nw = spawn_takeover(&x, "new:7", NULL, false);
		si = wait_dead(&x, nw, 10000, "new:7");
		T_EQ_INT(waitpid(nw, NULL, 0), nw);
		T_ASSERT(si.si_code == CLD_KILLED && si.si_status == SIGKILL);
		si = wait_dead(&x, x.wcd, 10000, "new:7: the old daemon");
		T_EQ_INT(waitpid(x.wcd, NULL, 0), x.wcd);
		if (si.si_code != CLD_EXITED || si.si_status != 0) {
			e2e_show_log(x.log);
			T_FAIL("new:7: the old daemon ended with code %d status %d, not exit 0 after SERVING",
			       si.si_code, si.si_status);
		}
		snprintf(cmd, sizeof(cmd),
			 "grep -q 'handover: done in .* pid %d serves device' '%s' && ! grep -q 'taken back from pid %d' '%s'",
			 (int)nw, x.log, (int)nw, x.log);
		if (system(cmd)) {
			e2e_show_log(x.log);
			T_FAIL("new:7: the old daemon took the clients back from pid %d, which had sent SERVING",
			       (int)nw);
		}
		/* the leftovers of a crash: a stale ready file */
		T_EQ_INT(ready_pid(&x, NULL, 0), nw);
		T_EQ_INT(lock_holder_pid(&x, false), 0);
		while (wc_notice_read(g.c, &n, &e) == 1)
			;
		T_ASSERT(fd_readable(wc_daemon_fd(g.c), 0));
	}
	x.wcd = 0;
	T_EQ_U64(e2e_compare_all(&x, g.m), x.m.ntensors);
	engine_close(&g);

	for (int k = 1; k <= 6; k++)
		old_killed(&x, k);
	printf("killed at every step of either side: one daemon served each time (new:7, after SERVING, is a crash of the serving daemon)\n");
	return 0;
}
