/* SPDX-License-Identifier: MIT */
/*
 * Helpers for the end-to-end client tests (test/client_e2e_*.c): a temp
 * directory, a wcgen model, a real wcd on a host device of its own (so the
 * tests can run in parallel), its ready file, STATUS as JSON, and the
 * model's file bytes read straight from the safetensors shards (proto/model)
 * to compare with what a client maps. Everything is undone at exit.
 * Header-only: each test includes it once.
 */
#ifndef WC_TEST_CLIENT_UTIL_H
#define WC_TEST_CLIENT_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "model.h"
#include "t.h"
#include "wcache.h"

struct e2e {
	char dir[64];            /* /tmp/wct-NAME.XXXXXX */
	char bin[512];           /* $WC_TOP/$BUILD/bin */
	char model[128];
	char rundir[128];
	char device[64];         /* host:NAME-PID */
	char sock[256];
	char ready[256];
	char log[128];
	pid_t wcd;
	struct model m;          /* the model as parsed from its files */
	bool m_open;
};

static struct e2e *e2e_g;
/* When set, e2e_start_wcd's child sets RLIMIT_NOFILE (soft and hard) to it
 * before it runs wcd. */
static unsigned long e2e_wcd_nofile;
static pid_t e2e_parent;       /* forked children do not clean up */

static inline uint64_t e2e_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void e2e_kill_wcd(struct e2e *x)
{
	if (x->wcd > 0) {
		kill(x->wcd, SIGKILL);
		waitpid(x->wcd, NULL, 0);
		x->wcd = 0;
	}
}

static inline void e2e_cleanup(void)
{
	struct e2e *x = e2e_g;
	char cmd[128];

	if (!x || getpid() != e2e_parent)
		return;
	e2e_kill_wcd(x);
	if (x->m_open)
		model_close(&x->m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", x->dir);
	if (x->dir[0] && system(cmd))
		fprintf(stderr, "could not remove %s\n", x->dir);
}

static inline void e2e_on_signal(int sig)
{
	e2e_cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Runs argv (NULL-terminated) to completion, output to log; returns its
 * exit status (or 128 + signal). */
static inline int e2e_run(const char *log, char *const argv[])
{
	pid_t p = fork();
	int st;

	T_ASSERT(p >= 0);
	if (!p) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	T_EQ_INT(waitpid(p, &st, 0), p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline void e2e_show_log(const char *log)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "tail -n 30 '%s' >&2", log);
	if (system(cmd))
		fprintf(stderr, "(no log at %s)\n", log);
}

/* Creates the temp dir, generates a tiny model with wcgen and parses it.
 * Skips (77) when the tools are not built. */
static inline void e2e_init(struct e2e *x, const char *name)
{
	const char *top = getenv("WC_TOP"), *build = getenv("BUILD");
	char wcgen[600], wcd[600], e[512];
	char *gen[] = { wcgen, "tiny", "--out", x->model, NULL };

	memset(x, 0, sizeof(*x));
	snprintf(x->bin, sizeof(x->bin), "%s/%s/bin", top ? top : ".",
		 build ? build : "build");
	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x->bin);
	snprintf(wcd, sizeof(wcd), "%s/wcd", x->bin);
	T_SKIP_IF(access(wcd, X_OK) || access(wcgen, X_OK),
		  "%s or %s is not built", wcd, wcgen);
	snprintf(x->dir, sizeof(x->dir), "/tmp/wct-%s.XXXXXX", name);
	T_ASSERT(mkdtemp(x->dir));
	/* chmod so that a test running a client under another uid can reach
	 * the socket's directory (the socket itself stays 0600) */
	chmod(x->dir, 0711);
	e2e_parent = getpid();
	e2e_g = x;
	atexit(e2e_cleanup);
	signal(SIGTERM, e2e_on_signal);
	signal(SIGINT, e2e_on_signal);
	signal(SIGPIPE, SIG_IGN);
	snprintf(x->model, sizeof(x->model), "%s/model", x->dir);
	snprintf(x->rundir, sizeof(x->rundir), "%s/run", x->dir);
	snprintf(x->log, sizeof(x->log), "%s/test.log", x->dir);
	snprintf(x->device, sizeof(x->device), "host:%.16s-%d", name, (int)getpid());
	snprintf(x->sock, sizeof(x->sock), "%s/host-%.16s-%d.sock", x->rundir, name, (int)getpid());
	snprintf(x->ready, sizeof(x->ready), "%s/host-%.16s-%d.ready", x->rundir, name, (int)getpid());
	if (e2e_run(x->log, gen)) {
		e2e_show_log(x->log);
		T_FAIL("wcgen tiny --out %s failed", x->model);
	}
	if (model_open(&x->m, x->model, e))
		T_FAIL("model_open %s: %s", x->model, e);
	x->m_open = true;
}

/* Starts wcd on the model with extra arguments (NULL-terminated list, may
 * be NULL) and waits up to 30 s for its ready file. */
static inline void e2e_start_wcd(struct e2e *x, const char *const *extra)
{
	char wcd[600];
	char *argv[32];
	int n = 0;
	uint64_t end = e2e_now_ms() + 30000;

	snprintf(wcd, sizeof(wcd), "%s/wcd", x->bin);
	argv[n++] = wcd;
	argv[n++] = "--model";
	argv[n++] = x->model;
	argv[n++] = "--device";
	argv[n++] = x->device;
	argv[n++] = "--runtime-dir";
	argv[n++] = x->rundir;
	for (; extra && *extra && n < 30; extra++)
		argv[n++] = (char *)*extra;
	argv[n] = NULL;
	unlink(x->ready);
	x->wcd = fork();
	T_ASSERT(x->wcd >= 0);
	if (!x->wcd) {
		int fd = open(x->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (e2e_wcd_nofile) {
			struct rlimit rl = { e2e_wcd_nofile, e2e_wcd_nofile };

			if (setrlimit(RLIMIT_NOFILE, &rl))
				_exit(126);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	while (access(x->ready, F_OK)) {
		int st;

		if (waitpid(x->wcd, &st, WNOHANG) == x->wcd) {
			x->wcd = 0;
			e2e_show_log(x->log);
			T_FAIL("wcd exited (status 0x%x) before it was ready", st);
		}
		if (e2e_now_ms() > end) {
			e2e_show_log(x->log);
			T_FAIL("wcd not ready after 30 s (no %s)", x->ready);
		}
		usleep(10000);
	}
	/* the mode the contract promises */
	{
		struct stat st;

		T_OK(stat(x->sock, &st) ? -errno : 0);
		T_EQ_INT(st.st_mode & 0777, 0600);
	}
}

/* A plain connection to the unix socket at path (frames written by hand:
 * the malformed-input, slow-client and handover tests). */
static inline int e2e_raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	T_ASSERT(fd >= 0);
	T_ASSERT(strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	T_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0);
	return fd;
}

/* A "Key: N kB" line of /proc/PID/status (VmRSS, RssAnon), -1 without
 * one: the memory checks of the reliability and lifecycle tests. */
/* Appends text to path, 20 ms after the last change (so that its mtime
 * moves on file systems of coarse clocks). */
static inline void e2e_append(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_APPEND);

	usleep(20000);
	T_CMP_INT(fd, >=, 0);
	T_EQ_INT(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static inline long e2e_status_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	size_t n = strlen(key);
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	T_ASSERT(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':' &&
		    sscanf(line + n + 1, "%ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Open descriptors of process pid (its /proc/PID/fd entries): the leak
 * checks of the reliability and handover tests. */
static inline int e2e_fd_count(pid_t pid)
{
	char path[64];
	struct dirent *de;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	T_ASSERT(dir);
	while ((de = readdir(dir)))
		n += de->d_name[0] != '.';
	closedir(dir);
	return n;
}

/* e2e_fd_count once it is want, or after ms: a daemon holds a descriptor
 * for a moment while it answers (a STATUS connection it has not yet seen
 * close, the old daemon's handover socket), so a leak check reads the
 * count that stays, not one taken mid-request. */
static inline int e2e_fd_count_settled(pid_t pid, int want, int ms)
{
	int n = e2e_fd_count(pid);

	for (int k = 0; k < ms && n != want; k += 10) {
		usleep(10000);
		n = e2e_fd_count(pid);
	}
	return n;
}

/* Starts `wcd --takeover` for x's device, its output appended to x's log;
 * returns its pid (the caller waits for it). */
static inline pid_t e2e_spawn_takeover(struct e2e *x)
{
	char wcd[600];
	char *argv[] = { wcd, "--takeover", "--device", x->device,
			 "--runtime-dir", x->rundir, NULL };
	pid_t p;

	snprintf(wcd, sizeof(wcd), "%s/wcd", x->bin);
	p = fork();
	T_ASSERT(p >= 0);
	if (!p) {
		int fd = open(x->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	return p;
}

static inline struct wc_conn *e2e_connect(const struct e2e *x)
{
	struct wc_connect_opts o = { .device = x->device,
				     .runtime_dir = x->rundir,
				     .timeout_ms = 10000 };
	struct wc_conn *c;
	struct wc_error e;

	if (wc_connect(&o, &c, &e))
		T_FAIL("wc_connect %s: %s", x->device, e.msg);
	return c;
}

/* STATUS as a jansson object (the caller json_decref's it). */
static inline json_t *e2e_status(const struct e2e *x)
{
	struct wc_conn *c = e2e_connect(x);
	json_error_t je;
	struct wc_error e;
	json_t *j;
	char *s;

	if (wc_status(c, &s, &e))
		T_FAIL("STATUS: %s", e.msg);
	j = json_loads(s, 0, &je);
	if (!j || !json_is_object(j))
		T_FAIL("STATUS is not a JSON object: %s", s);
	free(s);
	wc_close(c);
	return j;
}

/* Whether STATUS lists a client with this pid (and how many leases). */
static inline bool e2e_status_has_pid(const struct e2e *x, pid_t pid,
				      int *leases)
{
	json_t *j = e2e_status(x), *cl = json_object_get(j, "clients"), *v;
	bool found = false;
	size_t i;

	if (!json_is_array(cl))
		T_FAIL("STATUS has no clients array");
	json_array_foreach(cl, i, v) {
		if (json_integer_value(json_object_get(v, "pid")) == pid) {
			found = true;
			if (leases)
				*leases = (int)json_integer_value(json_object_get(v, "leases"));
		}
	}
	json_decref(j);
	return found;
}

/* The file bytes of tensor name (read from its shard), malloc'd. */
static inline uint8_t *e2e_file_bytes(const struct e2e *x, const char *name,
				      uint64_t *len)
{
	const struct model_tensor *mt = model_find(&x->m, name);
	uint8_t *buf;
	int fd;

	if (!mt)
		T_FAIL("tensor %s served by the daemon is not in the model files", name);
	*len = mt->t->nbytes;
	buf = malloc(*len ? *len : 1);
	T_ASSERT(buf);
	fd = open(x->m.shards[mt->shard].path, O_RDONLY | O_CLOEXEC);
	T_ASSERT(fd >= 0);
	T_EQ_INT(pread(fd, buf, *len, (off_t)mt->t->file_off), (ssize_t)*len);
	close(fd);
	return buf;
}

/* Served entries that are not views: the checkpoint's tensors. */
static inline uint64_t e2e_stored_count(const struct wc_model *m)
{
	uint64_t n = 0;

	for (uint64_t i = 0; i < wc_tensor_count(m); i++)
		n += !(wc_tensor_at(m, i)->flags & WC_TENSOR_VIEW);
	return n;
}

/* A view (fused tensor or alias) covers other served entries exactly:
 * the stored entries of its pool inside its byte range tile it (an alias:
 * it is its target's range), and its hash is of its own mapped bytes. */
static inline void e2e_check_view(const struct wc_model *m,
				  const struct wc_tensor *v)
{
	uint64_t n = wc_tensor_count(m), at = v->offset;
	uint8_t h[WC_HASH_LEN];

	base_hash128(v->ptr, v->bytes, h);
	if ((v->flags & WC_TENSOR_HASHED) && memcmp(h, v->hash, WC_HASH_LEN))
		T_FAIL("view %s: manifest hash differs from its mapped bytes' hash", v->name);
	while (at < v->offset + v->bytes) {
		const struct wc_tensor *part = NULL;

		for (uint64_t i = 0; i < n && !part; i++) {
			const struct wc_tensor *t = wc_tensor_at(m, i);

			if (!(t->flags & WC_TENSOR_VIEW) && t->pool == v->pool &&
			    t->offset == at && t->bytes)
				part = t;
		}
		if (!part)
			T_FAIL("view %s: no stored tensor at offset %llu of its range",
			       v->name, (unsigned long long)at);
		at += part->bytes;
	}
	T_EQ_U64(at, v->offset + v->bytes);
}

/* Every tensor of the model is served, and every served tensor's bytes
 * equal the file's (byte compare) and its hash the file bytes' hash; views
 * cover served tensors exactly. Returns the number of checkpoint tensors
 * checked. */
static inline uint64_t e2e_compare_all(const struct e2e *x,
				       const struct wc_model *m)
{
	uint64_t n = wc_tensor_count(m), stored = 0;

	for (uint64_t i = 0; i < n; i++) {
		const struct wc_tensor *t = wc_tensor_at(m, i);
		uint8_t h[WC_HASH_LEN];
		uint64_t len;
		uint8_t *b;

		if (t->flags & WC_TENSOR_VIEW) {
			e2e_check_view(m, t);
			continue;
		}
		stored++;
		b = e2e_file_bytes(x, t->name, &len);
		T_EQ_U64(t->bytes, len);
		if (memcmp(b, t->ptr, len))
			T_FAIL("tensor %s: mapped bytes differ from the file", t->name);
		base_hash128(b, len, h);
		if (memcmp(h, t->hash, WC_HASH_LEN))
			T_FAIL("tensor %s: manifest hash differs from the file bytes' hash", t->name);
		free(b);
	}
	T_EQ_U64(stored, x->m.ntensors);
	return stored;
}

/* An engine's whole check of the served model: HELLO with the model's
 * identity, ATTACH, e2e_compare_all, wc_verify with no bad tensor; the
 * failure messages say when (e.g. "after wake"). */
static inline void e2e_attach_verify(const struct e2e *x, const char *when)
{
	struct wc_expect ex = { .model_dir = x->model };
	struct wc_conn *c = e2e_connect(x);
	struct wc_model *m;
	struct wc_error e;
	uint64_t bad = 1;

	if (wc_hello(c, &ex, NULL, &e) || wc_attach(c, 0, &m, NULL, &e))
		T_FAIL("attach %s: %s", when, e.msg);
	e2e_compare_all(x, m);
	if (wc_verify(m, &bad, &e))
		T_FAIL("verify %s: %s", when, e.msg);
	T_EQ_U64(bad, 0);
	wc_close(c);
}

#endif
