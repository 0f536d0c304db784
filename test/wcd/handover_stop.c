/* SPDX-License-Identifier: MIT */
/*
 * A stop (SIGTERM) that reaches the old daemon of a hot handover after it
 * answered DONE and before it read SERVING, an engine attached throughout.
 * The new daemon is held there, set up to serve (the lock, the clients
 * told its pid, the ready file), by WCD_TEST_HO_SERVE_GATE; the test waits
 * until the old daemon has taken the signal (it leaves /proc/PID/status's
 * pending set), then:
 *   serve    lets the new daemon go on (SERVING): the old one exits 0
 *            without touching the clients; the engine's next request on
 *            the same connection is answered by the new daemon, its lease
 *            intact, its bytes right, no end of file; the ready file and
 *            the flock name the new pid; the new daemon holds as many
 *            descriptors as the old one did, the engine as many as before;
 *   abort    the new daemon's set-up failed (WCD_TEST_HO_READY_FAIL=1) and
 *            it sends ABORT once let go: the old one takes the clients back
 *            (a HANDOVER notice naming it), then stops as it was asked: a
 *            SHUTDOWN notice, the connection closed, exit 0, socket and
 *            ready file removed, the lock free; the new daemon exits 1;
 *   killed   the new daemon is killed at the gate: the same, the new one
 *            dead by SIGKILL;
 *   timeout  the new daemon is never let go: after its bound
 *            (WCD_HANDOVER_SERVING_MS) the old daemon kills it, takes the
 *            clients back and stops the same way;
 *   sent     the stop comes earlier, before the commit (the new daemon
 *            held before COMMIT by WCD_TEST_HO_COMMIT_GATE): it wins, the
 *            old daemon stops as usual; the new one, let go, takes nothing
 *            over and exits 1 (stop_in_sent).
 * And with no stop at all (hang_in_done), the new daemon hangs between
 * DONE and SERVING: held at the gate (gate), or stopped there with
 * SIGSTOP (sigstop). After its bound (WCD_HANDOVER_SERVING_MS) the old
 * daemon kills it, takes the clients back and serves on: the engine's
 * next request on the same connection is answered by the old pid, its
 * lease intact, its daemon fd back on the old pid (a HANDOVER notice),
 * the ready file and the flock name the old pid, no descriptor leaked;
 * the same when the kill does not end it (unkillable: the old daemon
 * takes the clients back a second later); a kill refused (refused) makes
 * the old daemon exit untouched, and the new one serves: never two.
 * The other side (old_hangs_at_commit): the old daemon is stopped with
 * SIGSTOP before the new one sends COMMIT; the new one waits for DONE
 * its bound at most (WCD_HANDOVER_IO_MS), takes nothing over and exits
 * 1; the old one, continued, serves on: the same checks.
 * Every wait is on an event (a pidfd, a notice, a reply, the signal taken),
 * bounded.
 */
#include <stdio.h>

#include "err.h"
#include "handover_util.h"
#include "ready.h"
#include "t_wait.h"

enum ending { END_SERVE, END_ABORT, END_KILLED, END_TIMEOUT };

static const char *const ending_name[] = { "serve", "abort", "killed",
					   "timeout" };

/* Starts `wcd --takeover` held at its gate (gate_env=gate) and, with
 * ready_fail, WCD_TEST_HO_READY_FAIL=1: set while it forks, for it alone. */
static pid_t spawn_new(struct e2e *x, const char *gate_env, const char *gate,
		       bool ready_fail)
{
	pid_t p;

	setenv(gate_env, gate, 1);
	if (ready_fail)
		setenv("WCD_TEST_HO_READY_FAIL", "1", 1);
	p = e2e_spawn_takeover(x);
	unsetenv(gate_env);
	if (ready_fail)
		unsetenv("WCD_TEST_HO_READY_FAIL");
	return p;
}

/* Lets a new daemon held at its gate go on: creates the gate file. */
static void open_gate(const char *gate)
{
	int fd = open(gate, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

	T_ASSERT(fd >= 0);
	close(fd);
}

/* Waits up to ms for our child pid to end; reaps it; its siginfo. */
static siginfo_t reap(struct e2e *x, pid_t pid, int ms, const char *what)
{
	return wait_end(x, pid, ms, what, false);
}

/* Whether signal sig is pending for process pid (/proc/PID/status). */
static bool sig_pending(pid_t pid, int sig)
{
	char path[64], line[256];
	unsigned long long mask, bit = 1ull << (sig - 1);
	bool pending = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	T_ASSERT(f);
	while (fgets(line, sizeof(line), f))
		if ((sscanf(line, "ShdPnd: %llx", &mask) == 1 ||
		     sscanf(line, "SigPnd: %llx", &mask) == 1) && (mask & bit))
			pending = true;
	fclose(f);
	return pending;
}

/* Sends sig to pid and waits (10 s at most) until its loop has read it
 * from its signalfd: the signal leaves the pending set. */
static void signal_taken(struct e2e *x, pid_t pid, int sig, const char *what)
{
	uint64_t end = e2e_now_ms() + 10000;

	T_OK(kill(pid, sig) ? -errno : 0);
	while (sig_pending(pid, sig)) {
		if (e2e_now_ms() > end) {
			e2e_show_log(x->log);
			T_FAIL("%s: pid %d has not taken signal %d in 10 s", what,
			       (int)pid, sig);
		}
		usleep(1000);
	}
}

/* Whether pid is stopped (state T in /proc/PID/stat). */
static bool proc_stopped(pid_t pid)
{
	char path[64], st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	T_ASSERT(f);
	if (fscanf(f, "%*d (%*[^)]) %c", &st) != 1)
		st = 0;
	fclose(f);
	return st == 'T';
}

/* Whether the daemons' log has a line matching re (grep's). */
static bool log_has(const struct e2e *x, const char *re)
{
	char cmd[1600];

	snprintf(cmd, sizeof(cmd), "grep -q '%s' '%s'", re, x->log);
	return system(cmd) == 0;
}

/* The engine: a connection to x's daemon, HELLO with the model's
 * identity, ATTACH (its mapping in *m). */
static struct wc_conn *engine_attach(struct e2e *x, struct wc_model **m,
				     const char *what)
{
	struct wc_expect ex = { .model_dir = x->model, .tp_size = 1 };
	struct wc_conn *c = e2e_connect(x);
	struct wc_error e;

	if (wc_hello(c, &ex, NULL, &e) || wc_attach(c, 0, m, NULL, &e))
		T_FAIL("%s: engine: %s", what, e.msg);
	return c;
}

/* The engine's connection c is served by pid: its next request is
 * answered (else the test fails saying `req`), STATUS comes from pid with
 * our one lease, and its daemon fd watches pid and reports no death. */
static void served_by(struct e2e *x, struct wc_conn *c, pid_t pid,
		      const char *what, const char *req)
{
	struct wc_error e;
	int leases;

	if (wc_ping(c, 1, &e)) {
		e2e_show_log(x->log);
		T_FAIL("%s: %s: %s", what, req, e.msg);
	}
	T_EQ_INT(status_on(x, c, &leases, what, 0, NULL), pid);
	T_EQ_INT(leases, 1);
	T_EQ_INT(wc_daemon_pid(c), pid);
	if (fd_readable(wc_daemon_fd(c), 0))
		T_FAIL("%s: the engine's daemon fd reports a death; pid %d serves",
		       what, (int)pid);
}

/* The ready file and the lock file's flock name pid. */
static void names_pid(struct e2e *x, pid_t pid, const char *what)
{
	char rerr[BASE_ERR_LEN];
	struct ready_info ri;

	if (ready_read_file(&ri, x->ready, rerr))
		T_FAIL("%s: ready file %s: %s", what, x->ready, rerr);
	T_EQ_INT(ri.pid, pid);
	T_EQ_INT(lock_holder_pid(x, true), pid);
}

/* Stops the daemon that serves, pid (SIGTERM): it exits 0 (reaped naming
 * what). */
static void stop_serving(struct e2e *x, pid_t pid, const char *what)
{
	siginfo_t si;

	T_OK(kill(pid, SIGTERM) ? -errno : 0);
	si = reap(x, pid, 10000, what);
	x->wcd = 0;
	T_ASSERT(si.si_code == CLD_EXITED && si.si_status == 0);
}

/* Starts a new daemon held before its COMMIT (WCD_TEST_HO_COMMIT_GATE at
 * gate, x's ready file's path with .gate) and waits, 10 s at most, until
 * it is there (its file gate.held). */
static pid_t spawn_held_at_commit(struct e2e *x, char gate[600],
				  char held[700], const char *what)
{
	int r;
	pid_t nw;

	snprintf(gate, 600, "%s.gate", x->ready);
	snprintf(held, 700, "%s.held", gate);
	unlink(gate);
	unlink(held);
	nw = spawn_new(x, "WCD_TEST_HO_COMMIT_GATE", gate, false);
	r = t_wait_file(held, nw, 10000);
	if (r) {
		e2e_show_log(x->log);
		T_FAIL("%s: the new daemon did not reach its COMMIT in 10 s (%s)",
		       what, r == -ESRCH ? "it exited" : strerror(-r));
	}
	return nw;
}

/* Lets the new daemon nw go from its COMMIT gate: it must give up, exit 1
 * (reaped naming `waiting`) and say why in the log (a line matching re;
 * else the test fails: "its log does not say `why`"). */
static void new_gives_up(struct e2e *x, const char *gate, pid_t nw,
			 const char *what, const char *waiting, const char *re,
			 const char *why)
{
	siginfo_t si;

	open_gate(gate);
	si = reap(x, nw, 10000, waiting);
	if (si.si_code != CLD_EXITED || si.si_status != 1) {
		e2e_show_log(x->log);
		T_FAIL("%s: the new daemon ended with code %d status %d, not exit 1",
		       what, si.si_code, si.si_status);
	}
	if (!log_has(x, re)) {
		e2e_show_log(x->log);
		T_FAIL("%s: the new daemon's log does not say %s", what, why);
	}
}

/* A handover held after DONE: the old daemon, the engine attached to it
 * (the descriptors both held then), the new daemon held at its SERVING
 * gate, the engine told its pid. */
struct held_in_done {
	pid_t old, nw;
	struct wc_conn *c;
	struct wc_model *m;
	int mine, fds_old;
	char gate[600];
};

/* Starts the old daemon (serving_ms, kill_sig: its WCD_HANDOVER_SERVING_MS
 * and WCD_TEST_HO_KILL_SIG where not NULL), attaches the engine, and
 * starts the new daemon held at its SERVING gate (ready_fail: its set-up
 * fails, WCD_TEST_HO_READY_FAIL) until its notice reaches the engine. */
static void hold_in_done(struct e2e *x, struct held_in_done *h,
			 const char *serving_ms, const char *kill_sig,
			 bool ready_fail, const char *what)
{
	struct wc_notice n;

	if (serving_ms)
		setenv("WCD_HANDOVER_SERVING_MS", serving_ms, 1);
	if (kill_sig)
		setenv("WCD_TEST_HO_KILL_SIG", kill_sig, 1);
	e2e_start_wcd(x, NULL);
	unsetenv("WCD_HANDOVER_SERVING_MS");
	unsetenv("WCD_TEST_HO_KILL_SIG");
	h->old = x->wcd;
	h->c = engine_attach(x, &h->m, what);
	h->mine = e2e_fd_count(getpid());
	h->fds_old = e2e_fd_count(h->old);
	snprintf(h->gate, sizeof(h->gate), "%s.gate", x->ready);
	unlink(h->gate);
	h->nw = spawn_new(x, "WCD_TEST_HO_SERVE_GATE", h->gate, ready_fail);
	next_notice(x, h->c, WC_NOTICE_HANDOVER, 10000, what, &n, NULL);
	T_EQ_INT(wc_daemon_pid(h->c), h->nw);
}

static void stop_in_done(struct e2e *x, enum ending how)
{
	const char *what = ending_name[how];
	int mine0 = e2e_fd_count(getpid());
	struct held_in_done h;
	struct wc_notice n;
	struct wc_error e;
	pid_t told = 0;
	siginfo_t si;

	/* the new daemon has its DONE and is set up (held at the gate); the
	 * old one waits in DONE */
	hold_in_done(x, &h, how == END_TIMEOUT ? "300" : NULL, NULL,
		     how == END_ABORT, what);
	signal_taken(x, h.old, SIGTERM, what);

	if (how == END_SERVE) {
		open_gate(h.gate);
		si = reap(x, h.old, 10000, "serve: the old daemon");
		x->wcd = h.nw;
		if (si.si_code != CLD_EXITED || si.si_status != 0) {
			e2e_show_log(x->log);
			T_FAIL("serve: the old daemon ended with code %d status %d, not exit 0",
			       si.si_code, si.si_status);
		}
		served_by(x, h.c, h.nw, what,
			  "the engine's connection did not survive the old daemon's stop");
		while (wc_notice_read(h.c, &n, &e) == 1)
			if (n.kind == WC_NOTICE_SHUTDOWN)
				T_FAIL("serve: the engine was told of a shutdown: %s",
				       n.msg);
		names_pid(x, h.nw, what);
		if (e2e_fd_count_settled(h.nw, h.fds_old, 2000) != h.fds_old) {
			e2e_show_log(x->log);
			T_FAIL("serve: the new daemon holds %d descriptors, the old one %d",
			       e2e_fd_count(h.nw), h.fds_old);
		}
		T_EQ_INT(e2e_fd_count(getpid()), h.mine);
		T_EQ_U64(e2e_compare_all(x, h.m), x->m.ntensors);
		wc_detach(h.m, NULL);
		wc_close(h.c);
		stop_serving(x, h.nw, "serve: the new daemon's stop");
		T_EQ_INT(e2e_fd_count(getpid()), mine0);
		return;
	}

	if (how == END_ABORT) {
		open_gate(h.gate);
	} else if (how == END_KILLED) {
		T_OK(kill(h.nw, SIGKILL) ? -errno : 0);
	}
	/* the old daemon takes the clients back (a HANDOVER notice naming
	 * it), then stops as it was asked */
	next_notice(x, h.c, WC_NOTICE_SHUTDOWN, 10000, what, &n, &told);
	if (told != h.old) {
		e2e_show_log(x->log);
		T_FAIL("%s: the engine was not pointed back at the old daemon pid %d before its stop (last HANDOVER notice: pid %d)",
		       what, (int)h.old, (int)told);
	}
	si = reap(x, h.nw, 10000, "the new daemon");
	if (how == END_ABORT ?
	    si.si_code != CLD_EXITED || si.si_status != 1 :
	    si.si_code != CLD_KILLED || si.si_status != SIGKILL) {
		e2e_show_log(x->log);
		T_FAIL("%s: the new daemon ended with code %d status %d", what,
		       si.si_code, si.si_status);
	}
	si = reap(x, h.old, 10000, "the old daemon");
	x->wcd = 0;
	if (si.si_code != CLD_EXITED || si.si_status != 0) {
		e2e_show_log(x->log);
		T_FAIL("%s: the old daemon ended with code %d status %d, not exit 0",
		       what, si.si_code, si.si_status);
	}
	T_EQ_INT(wc_ping(h.c, 1, &e), -EPIPE);
	T_ASSERT(access(x->sock, F_OK) && errno == ENOENT);
	T_ASSERT(access(x->ready, F_OK) && errno == ENOENT);
	T_EQ_INT(lock_holder_pid(x, true), 0);
	T_EQ_U64(e2e_compare_all(x, h.m), x->m.ntensors);
	if (how == END_TIMEOUT) {
		if (!log_has(x, "has not served within 0.3 s of its commit")) {
			e2e_show_log(x->log);
			T_FAIL("timeout: the old daemon's log does not say why it killed pid %d",
			       (int)h.nw);
		}
	}
	unlink(h.gate);
	T_EQ_INT(e2e_fd_count(getpid()), h.mine);
	wc_detach(h.m, NULL);
	wc_close(h.c);
	T_EQ_INT(e2e_fd_count(getpid()), mine0);
}

/* The stop comes before the commit (the new daemon held before COMMIT,
 * the old one in SENT): it wins, the old daemon stops as usual, and the
 * new one, let go, must see that it stopped (its SHUTDOWN notice on the
 * handover connection) and take nothing over: not the clients the stop
 * shut down, nor the lock it released, nor a socket whose path is gone;
 * it exits 1 and none serves, as asked. */
static void stop_in_sent(struct e2e *x)
{
	char gate[600], held[700], re[200];
	struct wc_notice n;
	struct wc_model *m;
	struct wc_conn *c;
	struct wc_error e;
	siginfo_t si;
	pid_t old, nw;

	e2e_start_wcd(x, NULL);
	old = x->wcd;
	c = engine_attach(x, &m, "sent");
	nw = spawn_held_at_commit(x, gate, held, "sent");
	signal_taken(x, old, SIGTERM, "sent");
	next_notice(x, c, WC_NOTICE_SHUTDOWN, 10000, "sent", &n, NULL);
	si = reap(x, old, 10000, "sent: the old daemon");
	x->wcd = 0;
	T_ASSERT(si.si_code == CLD_EXITED && si.si_status == 0);
	snprintf(re, sizeof(re),
		 "wcd pid %d was stopped (SIGTERM or SHUTDOWN) before the commit",
		 (int)old);
	new_gives_up(x, gate, nw, "sent",
		     "sent: the new daemon let go after the old one stopped", re,
		     "that the old one stopped");
	T_EQ_INT(wc_ping(c, 1, &e), -EPIPE);
	T_ASSERT(access(x->sock, F_OK) && errno == ENOENT);
	T_ASSERT(access(x->ready, F_OK) && errno == ENOENT);
	T_EQ_INT(lock_holder_pid(x, true), 0);
	T_EQ_U64(e2e_compare_all(x, m), x->m.ntensors);
	unlink(held);
	wc_detach(m, NULL);
	wc_close(c);
}

enum hang { HANG_GATE, HANG_SIGSTOP, HANG_UNKILLABLE, HANG_REFUSED };

static const char *const hang_name[] = { "gate", "sigstop", "unkillable",
					 "refused" };

/* No stop: the new daemon hangs after DONE (held at the gate; sigstop:
 * stopped there by SIGSTOP); the old one must kill it after the bound and
 * serve on. unkillable: the old daemon's kill does not end it (it sends
 * SIGSTOP instead, WCD_TEST_HO_KILL_SIG, as a process stuck in a driver
 * call does not end): the old one takes the clients back all the same,
 * HO_KILL_WAIT_NS later. refused: the kill is refused (an invalid
 * signal): the old daemon exits 0 untouched, and the new one, let go,
 * serves: never two. */
static void hang_in_done(struct e2e *x, enum hang how)
{
	const char *what = hang_name[how];
	struct held_in_done h;
	pid_t told = 0, serves;
	struct wc_notice n;
	char re[200];
	siginfo_t si;

	/* the new daemon is set up and held; the old one in DONE */
	hold_in_done(x, &h, "300",
		     how == HANG_UNKILLABLE ? "19" :          /* SIGSTOP */
		     how == HANG_REFUSED ? "127" : NULL,      /* EINVAL */
		     false, what);
	if (how == HANG_SIGSTOP)
		T_OK(kill(h.nw, SIGSTOP) ? -errno : 0);
	/* no stop is sent: the old daemon acts on its own */
	if (how == HANG_REFUSED) {
		si = reap(x, h.old, 10000, "refused: the old daemon");
		x->wcd = h.nw;
		T_ASSERT(si.si_code == CLD_EXITED && si.si_status == 0);
		T_EQ_INT(lock_holder_pid(x, true), h.nw);
		open_gate(h.gate);
		serves = h.nw;
		h.fds_old = -1;   /* another process: not compared */
	} else {
		if (how == HANG_UNKILLABLE) {
			/* taken back while the new daemon still lives */
			next_notice(x, h.c, WC_NOTICE_HANDOVER, 10000, what, &n,
				    &told);
			T_ASSERT(proc_stopped(h.nw));
			T_OK(kill(h.nw, SIGKILL) ? -errno : 0);
		}
		si = reap(x, h.nw, 10000, "the hung new daemon");
		if (si.si_code != CLD_KILLED || si.si_status != SIGKILL) {
			e2e_show_log(x->log);
			T_FAIL("%s: the hung new daemon ended with code %d status %d, not SIGKILL",
			       what, si.si_code, si.si_status);
		}
		/* the take-back notice points the engine back at the old one */
		if (how != HANG_UNKILLABLE)
			next_notice(x, h.c, WC_NOTICE_HANDOVER, 10000, what, &n,
				    &told);
		T_EQ_INT(told, h.old);
		serves = h.old;
	}
	served_by(x, h.c, serves, what, "the engine's next request");
	names_pid(x, serves, what);
	if (h.fds_old >= 0 &&
	    e2e_fd_count_settled(h.old, h.fds_old, 2000) != h.fds_old) {
		e2e_show_log(x->log);
		T_FAIL("%s: the old daemon holds %d descriptors after the take-back, %d before",
		       what, e2e_fd_count(h.old), h.fds_old);
	}
	T_EQ_INT(e2e_fd_count(getpid()), h.mine);
	T_EQ_U64(e2e_compare_all(x, h.m), x->m.ntensors);
	snprintf(re, sizeof(re),
		 "new daemon pid %d has not served within 0.3 s of its commit.*serve on",
		 (int)h.nw);
	if (!log_has(x, re) ||
	    (how == HANG_UNKILLABLE &&
	     !log_has(x, "has not ended within 1000 ms of its SIGKILL")) ||
	    (how == HANG_REFUSED && !log_has(x, "cannot kill pid .*never two"))) {
		e2e_show_log(x->log);
		T_FAIL("%s: the old daemon's log does not say what it did to pid %d",
		       what, (int)h.nw);
	}
	unlink(h.gate);
	wc_detach(h.m, NULL);
	wc_close(h.c);
	stop_serving(x, serves, "the serving daemon's stop");
}

/* The old daemon hangs (SIGSTOP) while the new one is about to COMMIT:
 * the new one must give up within its bound and leave the old one, once
 * continued, serving. */
static void old_hangs_at_commit(struct e2e *x)
{
	char gate[600], held[700], re[200];
	uint64_t end;
	int mine, fds_old;
	struct wc_model *m;
	struct wc_conn *c;
	pid_t old, nw;

	e2e_start_wcd(x, NULL);
	old = x->wcd;
	c = engine_attach(x, &m, "old-hangs");
	mine = e2e_fd_count(getpid());
	fds_old = e2e_fd_count(old);
	setenv("WCD_HANDOVER_IO_MS", "300", 1);
	nw = spawn_held_at_commit(x, gate, held, "old-hangs");
	unsetenv("WCD_HANDOVER_IO_MS");
	end = e2e_now_ms() + 10000;
	T_OK(kill(old, SIGSTOP) ? -errno : 0);
	while (!proc_stopped(old)) {
		if (e2e_now_ms() > end)
			T_FAIL("old-hangs: pid %d did not stop in 10 s", (int)old);
		usleep(1000);
	}
	snprintf(re, sizeof(re), "wcd pid %d did not answer COMMIT within 0.3 s",
		 (int)old);
	new_gives_up(x, gate, nw, "old-hangs",
		     "old-hangs: the new daemon waiting for DONE", re,
		     "why it gave up");
	/* it took nothing over, while the old one was stopped */
	names_pid(x, old, "old-hangs");
	T_ASSERT(access(x->sock, F_OK) == 0);
	T_OK(kill(old, SIGCONT) ? -errno : 0);
	served_by(x, c, old, "old-hangs",
		  "the engine's request once the old daemon resumed");
	T_EQ_INT(lock_holder_pid(x, true), old);
	if (e2e_fd_count_settled(old, fds_old, 2000) != fds_old) {
		e2e_show_log(x->log);
		T_FAIL("old-hangs: the old daemon holds %d descriptors after the handover failed, %d before",
		       e2e_fd_count(old), fds_old);
	}
	T_EQ_INT(e2e_fd_count(getpid()), mine);
	T_EQ_U64(e2e_compare_all(x, m), x->m.ntensors);
	unlink(held);
	unlink(gate);
	wc_detach(m, NULL);
	wc_close(c);
	stop_serving(x, old, "old-hangs: the old daemon's stop");
}

int main(void)
{
	static struct e2e x;

	e2e_init(&x, "hostop");
	for (int k = END_SERVE; k <= END_TIMEOUT; k++) {
		stop_in_done(&x, (enum ending)k);
		printf("%s: a stop after DONE: exactly one daemon served, the engine kept its connection%s\n",
		       ending_name[k], k == END_SERVE ? "" :
		       " until the old daemon took it back and stopped as asked");
	}
	stop_in_sent(&x);
	printf("sent: a stop before the commit won; the new daemon took nothing over and exited 1\n");
	for (int k = HANG_GATE; k <= HANG_REFUSED; k++) {
		hang_in_done(&x, (enum hang)k);
		printf("%s: %s\n", hang_name[k], k == HANG_REFUSED ?
		       "a new daemon hung after DONE that could not be killed: the old one exited untouched, the new one served once let go, never two" :
		       "a new daemon hung after DONE was killed after its bound; the old one served on, same connection, same lease");
	}
	old_hangs_at_commit(&x);
	printf("old-hangs: a new daemon whose old one hung at COMMIT gave up within its bound, took nothing; the old one, continued, served on\n");
	return 0;
}
