/* SPDX-License-Identifier: MIT */
/*
 * Hot handover on the host backend (issue 17's done-when): three engines
 * attach to a real wcd and issue requests (PING at depths 1 to 4, STATUS,
 * MANIFEST pages, a tensor's bytes hashed from the mapping) without pause
 * while the daemon is handed over 100 times in a row, each time to a fresh
 * `wcd --takeover`. Then:
 *   - no engine saw an error or lost a request (every call returned, and
 *     each engine counts its requests; the daemons count theirs too);
 *   - every engine still reads the right bytes (every tensor against the
 *     safetensors files, and by hash) through the mapping it got from the
 *     first daemon;
 *   - each engine's daemon fd followed the handovers (it names the last
 *     daemon and is not readable while that one lives);
 *   - after every handover the new daemon's STATUS lists the same clients
 *     with the same leases, and it holds as many descriptors (/proc/PID/fd)
 *     as the first daemon did: none leaks, on either side (an old daemon's
 *     count was checked when it was the new one);
 *   - each old daemon exited 0 by itself.
 * Event-driven: each step waits for a process exit or a reply, not a time.
 */
#include <dirent.h>
#include <poll.h>

#include "client_util.h"

#define NENG 3
#define HANDOVERS 100

struct engine_report {
	uint64_t requests;
	pid_t daemon_pid;
	int pidfd_readable;
};

/* An engine: attach, then requests until the stop byte; report. */
static int engine_main(const struct e2e *x, int ready_fd, int stop_fd,
		       int report_fd)
{
	struct wc_expect ex = { .model_dir = x->model, .tp_size = 1 };
	struct wc_conn *c = e2e_connect(x);
	struct engine_report r = { 0 };
	struct wc_notice n;
	struct wc_model *m;
	struct wc_error e;
	uint64_t i;

	if (wc_hello(c, &ex, NULL, &e))
		T_FAIL("engine %d: hello: %s", (int)getpid(), e.msg);
	if (wc_attach(c, 0, &m, NULL, &e))
		T_FAIL("engine %d: attach: %s", (int)getpid(), e.msg);
	e2e_compare_all(x, m);
	T_EQ_INT(write(ready_fd, "a", 1), 1);
	for (i = 0;; i++) {
		struct pollfd p = { stop_fd, POLLIN, 0 };
		const struct wc_tensor *t = wc_tensor_at(m, i % wc_tensor_count(m));
		uint8_t h[BASE_HASH_LEN];
		char *json;

		if (poll(&p, 1, 0) > 0)
			break;
		if (wc_ping(c, 1 + i % 4, &e))
			T_FAIL("engine %d: PING %" PRIu64 " failed: %s",
			       (int)getpid(), i, e.msg);
		r.requests += 1 + i % 4;
		if (i % 8 == 0) {
			if (wc_status(c, &json, &e))
				T_FAIL("engine %d: STATUS failed: %s",
				       (int)getpid(), e.msg);
			free(json);
			r.requests++;
		}
		if (i % 16 == 0) {
			struct wc_model *mm;

			if (wc_manifest(c, &mm, &e))
				T_FAIL("engine %d: MANIFEST failed: %s",
				       (int)getpid(), e.msg);
			T_EQ_U64(wc_tensor_count(mm), wc_tensor_count(m));
			wc_detach(mm, NULL);
			r.requests++;
		}
		base_hash128(t->ptr, t->bytes, h);
		if (memcmp(h, t->hash, BASE_HASH_LEN))
			T_FAIL("engine %d: tensor %s no longer hashes to its manifest hash",
			       (int)getpid(), t->name);
		while (wc_notice_read(c, &n, &e) == 1)
			if (n.kind != WC_NOTICE_HANDOVER)
				T_FAIL("engine %d: unexpected notice: %s",
				       (int)getpid(), n.msg);
	}
	while (wc_notice_read(c, &n, &e) == 1)
		;
	e2e_compare_all(x, m);
	r.daemon_pid = wc_daemon_pid(c);
	{
		struct pollfd p = { wc_daemon_fd(c), POLLIN, 0 };

		r.pidfd_readable = poll(&p, 1, 0);
	}
	T_EQ_INT(write(report_fd, &r, sizeof(r)), (ssize_t)sizeof(r));
	T_OK(wc_detach(m, &e));
	wc_close(c);
	return 0;
}

/* STATUS over conn c: the daemon's pid, its requests, and the clients. */
struct snap {
	pid_t pid;
	uint64_t requests;
	unsigned n;
	pid_t pids[NENG + 2];
	int leases[NENG + 2];
};

static void snap_take(struct wc_conn *c, struct snap *s)
{
	json_t *j, *cl, *v;
	json_error_t je;
	struct wc_error e;
	char *txt;
	size_t i;

	if (wc_status(c, &txt, &e))
		T_FAIL("STATUS on the held connection: %s", e.msg);
	j = json_loads(txt, 0, &je);
	free(txt);
	T_ASSERT(j);
	memset(s, 0, sizeof(*s));
	s->pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
	s->requests = (uint64_t)json_integer_value(json_object_get(j, "requests"));
	cl = json_object_get(j, "clients");
	T_ASSERT(json_is_array(cl));
	json_array_foreach(cl, i, v) {
		T_ASSERT(s->n < NENG + 2);
		s->pids[s->n] = (pid_t)json_integer_value(json_object_get(v, "pid"));
		s->leases[s->n] = (int)json_integer_value(json_object_get(v, "leases"));
		s->n++;
	}
	json_decref(j);
}

static int snap_leases(const struct snap *s, pid_t pid)
{
	for (unsigned i = 0; i < s->n; i++)
		if (s->pids[i] == pid)
			return s->leases[i];
	return -1;
}

int main(void)
{
	static struct e2e x;
	int ready[2], stop[2], report[2], fds0, fds;
	pid_t eng[NENG], old;
	struct snap s0, s;
	struct wc_conn *admin;
	uint64_t total = 0, before;
	char b;

	e2e_init(&x, "handover");
	e2e_start_wcd(&x, NULL);
	T_OK(pipe2(ready, O_CLOEXEC) ? -errno : 0);
	T_OK(pipe2(stop, O_CLOEXEC) ? -errno : 0);
	T_OK(pipe2(report, O_CLOEXEC) ? -errno : 0);
	for (int i = 0; i < NENG; i++) {
		eng[i] = fork();
		T_ASSERT(eng[i] >= 0);
		if (!eng[i]) {
			close(ready[0]);
			close(stop[1]);
			close(report[0]);
			_exit(engine_main(&x, ready[1], stop[0], report[1]));
		}
	}
	close(ready[1]);
	close(stop[0]);
	close(report[1]);
	for (int i = 0; i < NENG; i++)
		if (read(ready[0], &b, 1) != 1)
			T_FAIL("only %d of %d engines attached", i, NENG);

	admin = e2e_connect(&x);
	snap_take(admin, &s0);
	T_EQ_INT(s0.pid, x.wcd);
	T_EQ_INT(s0.n, NENG + 1);          /* the engines and us */
	for (int i = 0; i < NENG; i++)
		T_EQ_INT(snap_leases(&s0, eng[i]), 1);
	fds0 = e2e_fd_count(x.wcd);
	before = s0.requests;

	for (int k = 0; k < HANDOVERS; k++) {
		pid_t nw = e2e_spawn_takeover(&x);
		int st;

		old = x.wcd;
		/* the old daemon exits once the new one serves */
		T_EQ_INT(waitpid(old, &st, 0), old);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			e2e_show_log(x.log);
			T_FAIL("handover %d: the old daemon pid %d ended with status 0x%x",
			       k, (int)old, st);
		}
		x.wcd = nw;
		if (waitpid(nw, &st, WNOHANG) == nw) {
			x.wcd = 0;
			e2e_show_log(x.log);
			T_FAIL("handover %d: the new daemon exited (status 0x%x)",
			       k, st);
		}
		snap_take(admin, &s);
		T_EQ_INT(s.pid, nw);
		T_EQ_INT(s.n, s0.n);
		for (unsigned i = 0; i < s0.n; i++)
			if (snap_leases(&s, s0.pids[i]) != s0.leases[i])
				T_FAIL("handover %d: client pid %d has %d lease(s), had %d",
				       k, (int)s0.pids[i],
				       snap_leases(&s, s0.pids[i]), s0.leases[i]);
		T_CMP_INT(s.requests, >, before);
		before = s.requests;
		fds = e2e_fd_count_settled(nw, fds0, 2000);
		if (fds != fds0) {
			char cmd[96];

			snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)nw);
			if (system(cmd))
				fprintf(stderr, "(no fd listing)\n");
			T_FAIL("handover %d: the new daemon holds %d descriptors for 2 s, the first held %d",
			       k, fds, fds0);
		}
	}

	for (int i = 0; i < NENG; i++)
		T_EQ_INT(write(stop[1], "s", 1), 1);
	for (int i = 0; i < NENG; i++) {
		struct engine_report r;

		T_EQ_INT(read(report[0], &r, sizeof(r)), (ssize_t)sizeof(r));
		T_EQ_INT(r.daemon_pid, x.wcd);
		T_EQ_INT(r.pidfd_readable, 0);
		T_CMP_INT(r.requests, >, 0);
		total += r.requests;
	}
	for (int i = 0; i < NENG; i++) {
		int st;

		T_EQ_INT(waitpid(eng[i], &st, 0), eng[i]);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			T_FAIL("engine %d failed (status 0x%x)", (int)eng[i], st);
	}
	/* every request the engines made reached a daemon and was counted */
	snap_take(admin, &s);
	T_CMP_INT(s.requests, >=, total);
	wc_close(admin);
	kill(x.wcd, SIGTERM);
	{
		int st;

		T_EQ_INT(waitpid(x.wcd, &st, 0), x.wcd);
		x.wcd = 0;
		T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	printf("%d handovers, %d engines, %" PRIu64 " engine requests: none lost, bytes intact, leases kept, %d descriptors throughout\n",
	       HANDOVERS, NENG, total, fds0);
	return 0;
}
