/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): the hot handover tests' helpers (handover_util.h). */
#include "handover_util.h"

bool fd_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) > 0;
}

siginfo_t wait_end(struct e2e *x, pid_t pid, int ms,
		   const char *what, bool keep)
{
	siginfo_t si = { 0 };
	int fd = rx_pidfd_open(pid);

	T_ASSERT(fd >= 0);
	if (!fd_readable(fd, ms)) {
		e2e_show_log(x->log);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		T_FAIL("%s: pid %d has not ended after %d ms", what, (int)pid, ms);
	}
	close(fd);
	T_OK(waitid(P_PID, pid, &si, WEXITED | (keep ? WNOWAIT : 0)) ?
	     -errno : 0);
	return si;
}

void lock_path(const struct e2e *x, char *buf, size_t cap)
{
	size_t n = strlen(x->ready) - strlen(".ready");

	T_ASSERT(n + sizeof(".lock") <= cap);
	memcpy(buf, x->ready, n);
	strcpy(buf + n, ".lock");
}

pid_t lock_holder_pid(const struct e2e *x, bool gone_ok)
{
	char path[300], line[256];
	struct stat st;
	pid_t pid = 0;
	FILE *f;

	lock_path(x, path, sizeof(path));
	if (gone_ok && stat(path, &st))
		return 0;
	T_OK(stat(path, &st) ? -errno : 0);
	f = fopen("/proc/locks", "re");
	T_ASSERT(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long long ino;
		long long p;

		if (strstr(line, "->") ||
		    sscanf(line, "%*d: FLOCK %*s %*s %lld %x:%x:%llu", &p, &maj,
			   &min, &ino) != 4)
			continue;
		if (ino == (unsigned long long)st.st_ino &&
		    maj == major(st.st_dev) && min == minor(st.st_dev))
			pid = (pid_t)p;
	}
	fclose(f);
	return pid;
}

void next_notice(struct e2e *x, struct wc_conn *c, int kind,
		 int ms, const char *what, struct wc_notice *n,
		 pid_t *saw_pid)
{
	uint64_t end = e2e_now_ms() + (uint64_t)ms;
	struct wc_error e;
	int r;

	for (;;) {
		r = wc_notice_read(c, n, &e);
		if (r < 0) {
			e2e_show_log(x->log);
			T_FAIL("%s: reading notices: %s", what, e.msg);
		}
		if (r == 1 && n->kind == WC_NOTICE_HANDOVER && saw_pid)
			*saw_pid = (pid_t)wc_daemon_pid(c);
		if (r == 1 && (int)n->kind == kind)
			return;
		if (r == 1)
			continue;
		if (e2e_now_ms() >= end ||
		    !fd_readable(wc_notice_fd(c), (int)(end - e2e_now_ms()))) {
			e2e_show_log(x->log);
			T_FAIL("%s: no %s notice (kind %d) within %d ms", what,
			       kind == WC_NOTICE_HANDOVER ? "HANDOVER" :
			       kind == WC_NOTICE_SHUTDOWN ? "SHUTDOWN" : "other",
			       kind, ms);
		}
	}
}

pid_t status_on(struct e2e *x, struct wc_conn *c, int *leases,
		const char *what, pid_t other,
		bool *other_listed)
{
	json_t *j, *cl, *v;
	json_error_t je;
	struct wc_error e;
	char *txt;
	pid_t pid;
	size_t i;

	if (wc_status(c, &txt, &e)) {
		e2e_show_log(x->log);
		T_FAIL("%s: STATUS on the engine's connection: %s", what, e.msg);
	}
	j = json_loads(txt, 0, &je);
	free(txt);
	T_ASSERT(j);
	pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
	cl = json_object_get(j, "clients");
	*leases = -1;
	if (other_listed)
		*other_listed = false;
	json_array_foreach(cl, i, v) {
		pid_t p = (pid_t)json_integer_value(json_object_get(v, "pid"));

		if (p == getpid())
			*leases = (int)json_integer_value(json_object_get(v, "leases"));
		if (other_listed && p == other)
			*other_listed = true;
	}
	json_decref(j);
	return pid;
}
