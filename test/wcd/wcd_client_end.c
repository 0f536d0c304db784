/* SPDX-License-Identifier: MIT */
/*
 * Every client's end is logged once, with its cause (a real wcd, host
 * backend, --log-level debug):
 *  - SIGKILLed while attached: its socket's end of file reaches the daemon
 *    before its pidfd does (the kernel closes a dying process's files
 *    first), and the line must still say "killed by signal 9 (SIGKILL)";
 *  - exited with code 3 while connected: "exited with code 3";
 *  - disconnected and still alive: "closed (disconnected)", and nothing
 *    more when it exits later.
 * Each child is held on a pipe; the test waits for the daemon's lines (the
 * log, read until the line is there), then stops the daemon and counts.
 * The test reaps a dead child only after its line (its zombie tells the
 * daemon on any kernel; a status reaped first comes from the pidfd on
 * 6.15+, which rx_child tests).
 */
#include "client_util.h"
#include "t_wait.h"

/* The log's text (at most cap - 1 bytes). */
static size_t read_log(const struct e2e *x, char *buf, size_t cap)
{
	int fd = open(x->log, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	T_CMP_INT(fd, >=, 0);
	n = read(fd, buf, cap - 1);
	close(fd);
	T_CMP_INT(n, >=, 0);
	buf[n] = '\0';
	return (size_t)n;
}

/* Waits (up to 10 s, on each write to it) until the log holds line. */
static void wait_line(const struct e2e *x, const char *line)
{
	int r = t_wait_text(x->log, line, x->wcd, 10000);

	if (r) {
		e2e_show_log(x->log);
		T_FAIL("the log has no '%s' after 10 s (%s)", line,
		       r == -ESRCH ? "wcd exited" : strerror(-r));
	}
}

/* How many lines end client pid's connection: closed, killed, exited. */
static int end_lines(const char *log, pid_t pid)
{
	const char *what[] = { ": closed (", " was killed by signal ",
			       " exited with code ", " exited (its status" };
	char pat[64];
	int n = 0;

	for (unsigned i = 0; i < sizeof(what) / sizeof(what[0]); i++) {
		snprintf(pat, sizeof(pat), "client pid %d%s", (int)pid, what[i]);
		for (const char *p = log; (p = strstr(p, pat)); p++)
			n++;
	}
	return n;
}

enum how { KILLED, EXITS, DISCONNECTS };

/* A child that attaches, says so on ready, then on go (a byte) ends as
 * told; DISCONNECTS closes its connection first and says so again. */
static pid_t client(struct e2e *x, enum how how, int *go_w, int *ready_r)
{
	int ready[2], go[2];
	pid_t k;
	char b;

	T_OK(pipe2(ready, O_CLOEXEC) ? -errno : 0);
	T_OK(pipe2(go, O_CLOEXEC) ? -errno : 0);
	k = fork();
	T_ASSERT(k >= 0);
	if (!k) {
		struct wc_conn *c;
		struct wc_model *m;
		struct wc_error e;

		close(go[1]);
		close(ready[0]);
		c = e2e_connect(x);
		if (wc_hello(c, NULL, NULL, &e) || wc_attach(c, 0, &m, NULL, &e))
			T_FAIL("attach: %s", e.msg);
		T_EQ_INT(write(ready[1], "a", 1), 1);
		if (read(go[0], &b, 1) != 1)
			_exit(1);
		if (how == EXITS)
			_exit(3);
		wc_detach(m, &e);
		wc_close(c);
		T_EQ_INT(write(ready[1], "c", 1), 1);
		if (read(go[0], &b, 1) < 0)   /* held until the test is done */
			_exit(1);
		_exit(0);
	}
	close(ready[1]);
	close(go[0]);
	T_EQ_INT(read(ready[0], &b, 1), 1);
	*go_w = go[1];
	*ready_r = ready[0];
	return k;
}

int main(void)
{
	static struct e2e x;   /* outlives main for the atexit cleanup */
	static char log[1 << 20];
	const char *extra[] = { "--log-level", "debug", NULL };
	int go[3], ready[3], st;
	pid_t k[3];
	char line[128], b;

	e2e_init(&x, "clend");
	e2e_start_wcd(&x, extra);

	/* SIGKILLed while attached: end of file first, then the pidfd */
	k[0] = client(&x, KILLED, &go[0], &ready[0]);
	kill(k[0], SIGKILL);
	snprintf(line, sizeof(line), "client pid %d was killed by signal 9 (SIGKILL)", (int)k[0]);
	wait_line(&x, line);
	T_EQ_INT(waitpid(k[0], &st, 0), k[0]);

	/* exits with code 3 */
	k[1] = client(&x, EXITS, &go[1], &ready[1]);
	T_EQ_INT(write(go[1], "g", 1), 1);
	snprintf(line, sizeof(line), "client pid %d exited with code 3", (int)k[1]);
	wait_line(&x, line);
	T_EQ_INT(waitpid(k[1], &st, 0), k[1]);
	T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 3);

	/* disconnects and lives on; its exit later says nothing more */
	k[2] = client(&x, DISCONNECTS, &go[2], &ready[2]);
	T_EQ_INT(write(go[2], "g", 1), 1);
	T_EQ_INT(read(ready[2], &b, 1), 1);
	snprintf(line, sizeof(line), "client pid %d: closed (disconnected)", (int)k[2]);
	wait_line(&x, line);
	close(go[2]);
	go[2] = -1;
	T_EQ_INT(waitpid(k[2], &st, 0), k[2]);
	T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* stop the daemon: every line is out; each client ended once */
	kill(x.wcd, SIGTERM);
	T_EQ_INT(waitpid(x.wcd, &st, 0), x.wcd);
	x.wcd = 0;
	read_log(&x, log, sizeof(log));
	for (int i = 0; i < 3; i++) {
		if (end_lines(log, k[i]) != 1) {
			e2e_show_log(x.log);
			T_FAIL("client %d (pid %d): %d end lines, want 1", i,
			       (int)k[i], end_lines(log, k[i]));
		}
		if (go[i] >= 0)
			close(go[i]);
		close(ready[i]);
	}
	printf("killed, exited and disconnected clients: one end line each\n");
	return 0;
}
