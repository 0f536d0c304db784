/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): the end-to-end client tests' helpers (client_util.h). */
#include "client_util.h"
#include "clock.h"
#include "t_wait.h"

static struct e2e *e2e_g;
static pid_t e2e_parent;       /* forked children do not clean up */
unsigned long e2e_wcd_nofile;

uint64_t e2e_now_ms(void)
{
	return clock_ns() / 1000000;
}

void e2e_kill_wcd(struct e2e *x)
{
	if (x->wcd > 0) {
		kill(x->wcd, SIGKILL);
		waitpid(x->wcd, NULL, 0);
		x->wcd = 0;
	}
}

static void e2e_cleanup(void)
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

void e2e_on_signal(int sig)
{
	e2e_cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

int e2e_run(const char *log, char *const argv[])
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

void e2e_show_log(const char *log)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "tail -n 30 '%s' >&2", log);
	if (system(cmd))
		fprintf(stderr, "(no log at %s)\n", log);
}

void e2e_init(struct e2e *x, const char *name)
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

void e2e_start_wcd(struct e2e *x, const char *const *extra)
{
	char wcd[600];
	char *argv[32];
	int n = 0;
	int r;

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
	/* the ready file's creation (inotify) or wcd's end (its pidfd) */
	r = t_wait_file(x->ready, x->wcd, 30000);
	if (r == -ESRCH) {
		int st = 0;

		waitpid(x->wcd, &st, 0);
		x->wcd = 0;
		e2e_show_log(x->log);
		T_FAIL("wcd exited (status 0x%x) before it was ready", st);
	}
	if (r == -ETIMEDOUT) {
		e2e_show_log(x->log);
		T_FAIL("wcd not ready after 30 s (no %s)", x->ready);
	}
	T_OK(r);
	/* the mode the contract promises */
	{
		struct stat st;

		T_OK(stat(x->sock, &st) ? -errno : 0);
		T_EQ_INT(st.st_mode & 0777, 0600);
	}
}

int e2e_raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	T_ASSERT(fd >= 0);
	T_ASSERT(strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	T_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0);
	return fd;
}

void e2e_append(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_APPEND);

	usleep(20000);
	T_CMP_INT(fd, >=, 0);
	T_EQ_INT(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

long e2e_status_kb(pid_t pid, const char *key)
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

/* AddressSanitizer's shadow on x86-64 (LowShadow to HighShadow): an
 * ASan build maps it there; nothing else lives at those addresses. */
#define ASAN_SHADOW_LO 0x7fff8000ull
#define ASAN_SHADOW_HI 0x10007fff8000ull

long e2e_rss_anon_kb(pid_t pid)
{
	long kb = e2e_status_kb(pid, "RssAnon"), shadow = 0, v;
	unsigned long long lo = 0, hi = 0;
	char path[64], line[512];
	bool in = false;
	FILE *f;

	if (kb < 0)
		return kb;
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "re");
	T_ASSERT(f);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') &&
		    strchr(line, '-') < strchr(line, ' '))
			in = lo >= ASAN_SHADOW_LO && lo < ASAN_SHADOW_HI;
		else if (in && sscanf(line, "Anonymous: %ld", &v) == 1)
			shadow += v;
	}
	fclose(f);
	return kb - shadow;
}

int e2e_fd_count(pid_t pid)
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

int e2e_fd_count_settled(pid_t pid, int want, int ms)
{
	int n = e2e_fd_count(pid);

	for (int k = 0; k < ms && n != want; k += 10) {
		usleep(10000);
		n = e2e_fd_count(pid);
	}
	return n;
}

pid_t e2e_spawn_takeover(struct e2e *x)
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

struct wc_conn *e2e_connect(const struct e2e *x)
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

json_t *e2e_status(const struct e2e *x)
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

bool e2e_status_has_pid(const struct e2e *x, pid_t pid,
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

uint8_t *e2e_file_bytes(const struct e2e *x, const char *name,
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

uint64_t e2e_stored_count(const struct wc_model *m)
{
	uint64_t n = 0;

	for (uint64_t i = 0; i < wc_tensor_count(m); i++)
		n += !(wc_tensor_at(m, i)->flags & WC_TENSOR_VIEW);
	return n;
}

void e2e_check_view(const struct wc_model *m,
		    const struct wc_tensor *v)
{
	uint64_t n = wc_tensor_count(m), at = v->offset;
	uint8_t h[BASE_HASH_LEN];

	base_hash128(v->ptr, v->bytes, h);
	if ((v->flags & WC_TENSOR_HASHED) && memcmp(h, v->hash, BASE_HASH_LEN))
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

uint64_t e2e_compare_all(const struct e2e *x,
			 const struct wc_model *m)
{
	uint64_t n = wc_tensor_count(m), stored = 0;

	for (uint64_t i = 0; i < n; i++) {
		const struct wc_tensor *t = wc_tensor_at(m, i);
		uint8_t h[BASE_HASH_LEN];
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
		if (memcmp(h, t->hash, BASE_HASH_LEN))
			T_FAIL("tensor %s: manifest hash differs from the file bytes' hash", t->name);
		free(b);
	}
	T_EQ_U64(stored, x->m.ntensors);
	return stored;
}

void e2e_attach_verify(const struct e2e *x, const char *when)
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
