/* SPDX-License-Identifier: MIT */
/*
 * libwcache's identity cache on disk (identdisk.c). A fresh process (this
 * program run again) and a process whose memory cache was emptied get the
 * identity from the file, byte for byte the one built, counted as a disk
 * hit. config.json rewritten, the shard touched, the preset changed: each
 * built again and the file rewritten. A truncated file and a flipped byte
 * anywhere: built again, rewritten. A file of another uid, a group-writable
 * file, a group-writable directory, a directory or a file that is a
 * symbolic link: not used, not written over. WCACHE_IDENT_CACHE=off, and no
 * HOME: no file made; XDG_CACHE_HOME and HOME name the default places, made
 * 0700 with their parents; a relative model path is not kept. End to end: two processes HELLO a real wcd with
 * the engine's identity; the second reads the first's entry. An identity
 * whose files changed less than 2 s ago is not written. A directory keeps
 * 256 entries (the oldest written goes) and drops a dead writer's
 * temporary file after a minute; a dead writer's temporary file of the
 * next writer's pid and count does not block the entry. Runs as root (the
 * chown); skips otherwise.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client_util.h"

#include "client.h"
#include "gpu.h"
#include "identity.h"
#include "plan.h"

#define SETTLE_NS 100000000      /* the test's, for the default 2 s */

static struct e2e x;
static struct gpu_dev dev;
static char cache[256];          /* WCACHE_IDENT_CACHE of the main part */

struct got {
	uint8_t enc[IDENT_ENC_MAX];
	size_t len;
};

static struct wc__idc_counts counts(void)
{
	struct wc__idc_counts c;

	wc__ident_cache_counts(&c);
	return c;
}

/* One wc__ident_get with an empty memory cache: what a fresh process does
 * (the exec'd child below shows it is the same). */
static void get_fresh(const struct wc_expect *w, struct got *g)
{
	struct ident id;
	struct wc_error e;

	wc__ident_cache_drop();
	if (wc__ident_get(&id, w, &dev, &e))
		T_FAIL("wc__ident_get: %s", e.msg);
	T_OK(ident_encode(&id, g->enc, sizeof(g->enc), &g->len));
}

static bool same(const struct got *a, const struct got *b)
{
	return a->len == b->len && !memcmp(a->enc, b->enc, a->len);
}

/* The counters moved by exactly built, disk hits, disk writes since *c
 * (which then gets the new ones). */
static void expect_delta(struct wc__idc_counts *c, uint64_t built,
			 uint64_t disk_hits, uint64_t disk_writes)
{
	struct wc__idc_counts n = counts();

	if (n.built - c->built != built || n.disk_hits - c->disk_hits != disk_hits ||
	    n.disk_writes - c->disk_writes != disk_writes)
		T_FAIL("built +%llu, disk hits +%llu, disk writes +%llu; expected +%llu, +%llu, +%llu (disk: %s)",
		       (unsigned long long)(n.built - c->built),
		       (unsigned long long)(n.disk_hits - c->disk_hits),
		       (unsigned long long)(n.disk_writes - c->disk_writes),
		       (unsigned long long)built, (unsigned long long)disk_hits,
		       (unsigned long long)disk_writes, n.disk_why);
	*c = n;
}

/* The one *.ident file in dir, into path; false if none. */
static bool entry_path(const char *dir, char *path, size_t cap)
{
	struct dirent *de;
	DIR *dp = opendir(dir);
	int n = 0;

	if (!dp)
		return false;
	while ((de = readdir(dp))) {
		size_t l = strlen(de->d_name);

		if (de->d_name[0] == '.')
			T_ASSERT(l <= 4 || strcmp(de->d_name + l - 4, ".tmp"));
		if (l > 6 && !strcmp(de->d_name + l - 6, ".ident")) {
			snprintf(path, cap, "%s/%s", dir, de->d_name);
			n++;
		}
	}
	closedir(dp);
	T_CMP_INT(n, <=, 1);
	return n == 1;
}

static size_t slurp(const char *path, uint8_t *buf, size_t cap)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	T_CMP_INT(fd, >=, 0);
	n = read(fd, buf, cap);
	close(fd);
	T_CMP_INT(n, >=, 0);
	T_CMP_INT((size_t)n, <, cap);
	return (size_t)n;
}

static void spit(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);

	T_CMP_INT(fd, >=, 0);
	T_EQ_INT(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* Waits until what was just changed is older than SETTLE_NS. */
static void settle(void)
{
	usleep(SETTLE_NS / 1000 + 50000);
}

/* Rewrites path with its own bytes: a later mtime and ctime. */
static void rewrite(const char *path)
{
	static uint8_t buf[1 << 16];
	size_t n = slurp(path, buf, sizeof(buf));

	usleep(20000);
	spit(path, buf, n);
	settle();
}

static void append(const char *path, const char *text)
{
	e2e_append(path, text);
	settle();
}

static void copy_file(const char *from, const char *to)
{
	static uint8_t buf[1 << 16];
	size_t n = slurp(from, buf, sizeof(buf));
	int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	T_CMP_INT(fd, >=, 0);
	T_EQ_INT(write(fd, buf, n), (ssize_t)n);
	close(fd);
}

/* Runs this program again as "child ARGS..." (a fresh process: nothing of
 * ours in its memory) and reads what it wrote to out. */
static void run_child(char *const argv[], const char *out, uint8_t *buf,
		      size_t cap, size_t *len)
{
	char log[300];

	snprintf(log, sizeof(log), "%s/child.log", x.dir);
	unlink(out);
	if (e2e_run(log, argv)) {
		e2e_show_log(log);
		T_FAIL("the child %s %s failed", argv[1], argv[2]);
	}
	*len = slurp(out, buf, cap);
}

/* The stat of an untouched entry: same inode, size, mtime, mode, owner. */
static void expect_untouched(const char *path, const struct stat *before)
{
	struct stat st;

	T_OK(lstat(path, &st) ? -errno : 0);
	T_EQ_U64(st.st_ino, before->st_ino);
	T_EQ_U64(st.st_size, before->st_size);
	T_EQ_U64(st.st_mode, before->st_mode);
	T_EQ_U64(st.st_uid, before->st_uid);
	T_EQ_U64(st.st_mtim.tv_nsec, before->st_mtim.tv_nsec);
	T_EQ_U64(st.st_mtim.tv_sec, before->st_mtim.tv_sec);
}

/* The entry is not trusted (how: done by the caller): the identity is
 * built, equal to good, and the entry is left as it is. */
static void refused(const struct wc_expect *w, const struct got *good,
		    const char *entry, const char *why)
{
	struct wc__idc_counts c = counts();
	struct stat before;
	struct got g;

	T_OK(lstat(entry, &before) ? -errno : 0);
	get_fresh(w, &g);
	expect_delta(&c, 1, 0, 0);
	T_ASSERT(same(&g, good));
	T_HAS(c.disk_why, why);
	expect_untouched(entry, &before);
}

/* After a change of what the identity is made of: built anew, another
 * identity than *good, written, and read from disk by the next HELLO;
 * *good becomes the new one. */
static void expect_new_identity(const struct wc_expect *w,
				struct wc__idc_counts *c, struct got *good)
{
	struct got g;

	get_fresh(w, &g);
	expect_delta(c, 1, 0, 1);
	T_ASSERT(!same(&g, good));
	get_fresh(w, good);
	expect_delta(c, 0, 1, 0);
	T_ASSERT(same(&g, good));
}

/* The entry replaced by bytes[0..len): the identity is built again, equal
 * to good, and the entry rewritten as orig[0..n). */
static void rebuilt(const struct wc_expect *w, const struct got *good,
		    struct wc__idc_counts *c, const char *entry,
		    const uint8_t *bytes, size_t len, const uint8_t *orig, size_t n)
{
	static uint8_t back[1 << 16];
	struct got g;

	spit(entry, bytes, len);
	get_fresh(w, &g);
	expect_delta(c, 1, 0, 1);
	T_ASSERT(same(&g, good));
	T_EQ_U64(slurp(entry, back, sizeof(back)), n);
	T_ASSERT(!memcmp(back, orig, n));
}

/* Damage: each built again and rewritten, then read back. */
static void damaged(const struct wc_expect *w, const struct got *good)
{
	static uint8_t buf[1 << 16], orig[1 << 16];
	struct wc__idc_counts c = counts();
	char entry[600];
	struct got g;
	size_t n;

	T_ASSERT(entry_path(cache, entry, sizeof(entry)));
	n = slurp(entry, orig, sizeof(orig));
	T_CMP_INT(n, >, 100);
	/* torn: the first half, then nothing */
	rebuilt(w, good, &c, entry, orig, n / 2, orig, n);
	get_fresh(w, &g);
	expect_delta(&c, 0, 1, 0);
	/* empty */
	rebuilt(w, good, &c, entry, orig, 0, orig, n);
	/* a byte flipped: in the magic, the key, the file list, the
	 * identity, the checksum */
	for (size_t at = 3; at < n + n / 7; at += n / 7) {
		memcpy(buf, orig, n);
		buf[at < n ? at : n - 1] ^= 0x20;
		rebuilt(w, good, &c, entry, buf, n, orig, n);
	}
	get_fresh(w, &g);
	expect_delta(&c, 0, 1, 0);
	T_ASSERT(same(&g, good));
}

/* Not ours to trust: another uid's file, group-writable file and
 * directory, symbolic links. */
static void untrusted(const struct wc_expect *w, const struct got *good)
{
	struct wc__idc_counts c;
	char entry[600], moved[700], real[300];
	struct got g;

	T_ASSERT(entry_path(cache, entry, sizeof(entry)));
	T_OK(chown(entry, 65534, 65534));
	refused(w, good, entry, "not a regular file of uid 0");
	T_OK(chown(entry, 0, 0));

	T_OK(chmod(entry, 0620));
	refused(w, good, entry, "not a regular file of uid 0");
	T_OK(chmod(entry, 0600));

	T_OK(chmod(cache, 0770));
	refused(w, good, entry, "is not a directory of uid 0");
	T_OK(chmod(cache, 0700));

	/* the directory a symbolic link to a good one */
	snprintf(real, sizeof(real), "%s.real", cache);
	T_OK(rename(cache, real));
	T_OK(symlink(real, cache));
	snprintf(moved, sizeof(moved), "%s/%s", real, strrchr(entry, '/') + 1);
	refused(w, good, moved, "cannot open");
	T_OK(unlink(cache));
	T_OK(rename(real, cache));

	/* the file a symbolic link to a good entry */
	snprintf(moved, sizeof(moved), "%s/moved", x.dir);
	T_OK(rename(entry, moved));
	T_OK(symlink(moved, entry));
	refused(w, good, entry, "cannot open");
	T_OK(unlink(entry));
	T_OK(rename(moved, entry));

	/* all put back: read again */
	c = counts();
	get_fresh(w, &g);
	expect_delta(&c, 0, 1, 0);
	T_ASSERT(same(&g, good));
}

/* Where the directory is: off, XDG_CACHE_HOME, HOME, nothing. */
static void places(const struct wc_expect *w, const struct got *good)
{
	struct wc__idc_counts c = counts();
	char xdg[300], home[300], path[700], deep[300], dir[400];
	struct stat st;
	struct got g;

	snprintf(xdg, sizeof(xdg), "%s/xdg", x.dir);
	snprintf(home, sizeof(home), "%s/home", x.dir);
	T_OK(setenv("XDG_CACHE_HOME", xdg, 1));
	T_OK(setenv("HOME", home, 1));
	T_OK(setenv("WCACHE_IDENT_CACHE", "off", 1));
	get_fresh(w, &g);
	expect_delta(&c, 1, 0, 0);
	T_HAS(c.disk_why, "WCACHE_IDENT_CACHE=off");
	T_ASSERT(access(xdg, F_OK) && access(home, F_OK));

	T_OK(unsetenv("WCACHE_IDENT_CACHE"));
	get_fresh(w, &g);
	expect_delta(&c, 1, 0, 1);
	snprintf(dir, sizeof(dir), "%s/wcache/ident", xdg);
	T_ASSERT(entry_path(dir, path, sizeof(path)));
	snprintf(path, sizeof(path), "%s/wcache", xdg);
	T_OK(stat(path, &st));
	T_EQ_INT(st.st_mode & 0777, 0700);
	get_fresh(w, &g);
	expect_delta(&c, 0, 1, 0);
	T_ASSERT(same(&g, good));

	T_OK(unsetenv("XDG_CACHE_HOME"));
	get_fresh(w, &g);
	expect_delta(&c, 1, 0, 1);
	snprintf(dir, sizeof(dir), "%s/.cache/wcache/ident", home);
	T_ASSERT(entry_path(dir, path, sizeof(path)));
	T_OK(stat(home, &st));
	T_EQ_INT(st.st_mode & 0777, 0700);

	T_OK(unsetenv("HOME"));
	get_fresh(w, &g);
	expect_delta(&c, 1, 0, 0);
	T_HAS(c.disk_why, "HOME");

	snprintf(deep, sizeof(deep), "%s/a/b/c", x.dir);
	T_OK(setenv("WCACHE_IDENT_CACHE", deep, 1));
	get_fresh(w, &g);
	expect_delta(&c, 1, 0, 1);
	T_ASSERT(entry_path(deep, path, sizeof(path)));
	T_OK(stat(deep, &st));
	T_EQ_INT(st.st_mode & 0777, 0700);
	T_OK(setenv("WCACHE_IDENT_CACHE", cache, 1));
}

/* The number of *.ident files in dir; whether name is there. */
static unsigned entries(const char *dir, const char *name, bool *has)
{
	struct dirent *de;
	DIR *dp = opendir(dir);
	unsigned n = 0;

	T_ASSERT(dp);
	*has = false;
	while ((de = readdir(dp))) {
		size_t l = strlen(de->d_name);

		n += l > 6 && !strcmp(de->d_name + l - 6, ".ident");
		*has |= !strcmp(de->d_name, name);
	}
	closedir(dp);
	return n;
}

/* The directory keeps 256 entries: the one written longest ago goes; a
 * dead writer's temporary file goes at a write a minute after it. */
static void bounded(void)
{
	struct timespec old[2] = { { .tv_sec = time(NULL) - 3600 },
				   { .tv_sec = time(NULL) - 3600 } };
	struct wc_expect w = { .model_dir = x.model, .tp_size = 300 };
	char dir[300], first[700], stale[400], fresh[400], name[64];
	struct wc__idc_counts c;
	struct got g;
	bool has;

	snprintf(dir, sizeof(dir), "%s/many", x.dir);
	T_OK(setenv("WCACHE_IDENT_CACHE", dir, 1));
	get_fresh(&w, &g);
	T_ASSERT(entry_path(dir, first, sizeof(first)));
	T_OK(utimensat(AT_FDCWD, first, old, 0));
	snprintf(stale, sizeof(stale), "%s/.dead.1.tmp", dir);
	snprintf(fresh, sizeof(fresh), "%s/.alive.2.tmp", dir);
	T_OK(close(open(stale, O_WRONLY | O_CREAT, 0600)));
	T_OK(close(open(fresh, O_WRONLY | O_CREAT, 0600)));
	T_OK(utimensat(AT_FDCWD, stale, old, 0));
	snprintf(name, sizeof(name), "%s", strrchr(first, '/') + 1);
	for (w.tp_rank = 1; w.tp_rank < 256; w.tp_rank++)
		get_fresh(&w, &g);
	T_EQ_INT(entries(dir, name, &has), 256);
	T_ASSERT(has);
	T_ASSERT(access(stale, F_OK) && errno == ENOENT);
	T_OK(access(fresh, F_OK) ? -errno : 0);
	c = counts();
	get_fresh(&w, &g);              /* the 257th */
	expect_delta(&c, 1, 0, 1);
	T_EQ_INT(entries(dir, name, &has), 256);
	T_ASSERT(!has);
	/* rank 0 again: built (its entry went), another goes */
	w.tp_rank = 0;
	get_fresh(&w, &g);
	expect_delta(&c, 1, 0, 1);
	T_EQ_INT(entries(dir, name, &has), 256);
	T_ASSERT(has);
	T_OK(setenv("WCACHE_IDENT_CACHE", cache, 1));
}

/* child get MODEL OUT: one wc__ident_get; OUT gets the counters and the
 * encoding. */
static int child_get(const char *model, const char *out)
{
	struct wc_expect w = { .model_dir = model };
	struct wc__idc_counts c;
	char err[BASE_ERR_LEN];
	struct got g;
	struct ident id;
	struct wc_error e;
	FILE *f;

	T_OK(gpu_dev_open(&dev, "host", err));
	if (getenv("IDD_CHILD_SETTLE"))      /* the parent's settle() */
		wc__ident_cache_settle_ns(SETTLE_NS);
	if (wc__ident_get(&id, &w, &dev, &e))
		T_FAIL("wc__ident_get: %s", e.msg);
	T_OK(ident_encode(&id, g.enc, sizeof(g.enc), &g.len));
	wc__ident_cache_counts(&c);
	if (c.disk_why[0])
		printf("child get: %s\n", c.disk_why);   /* to the child's log */
	f = fopen(out, "w");
	T_ASSERT(f);
	fprintf(f, "%llu %llu %llu\n", (unsigned long long)c.built,
		(unsigned long long)c.disk_hits,
		(unsigned long long)c.disk_writes);
	T_EQ_U64(fwrite(g.enc, 1, g.len, f), g.len);
	fclose(f);
	gpu_dev_close(&dev);
	return 0;
}

/* child hello DEVICE RUNDIR MODEL OUT: a real HELLO with the engine's
 * identity; OUT gets the counters. */
static int child_hello(char **argv)
{
	struct wc_connect_opts o = { .device = argv[3], .runtime_dir = argv[4],
				     .timeout_ms = 10000 };
	struct wc_expect w = { .model_dir = argv[5] };
	struct wc__idc_counts c;
	struct wc_conn *conn;
	struct wc_error e;
	FILE *f;

	wc__ident_cache_settle_ns(SETTLE_NS);
	if (wc_connect(&o, &conn, &e) || wc_hello(conn, &w, NULL, &e))
		T_FAIL("connect and hello %s: %s", argv[3], e.msg);
	wc_close(conn);
	wc__ident_cache_counts(&c);
	f = fopen(argv[6], "w");
	T_ASSERT(f);
	fprintf(f, "%llu %llu %llu\n", (unsigned long long)c.built,
		(unsigned long long)c.disk_hits,
		(unsigned long long)c.disk_writes);
	fclose(f);
	return 0;
}

static void fresh_process(const struct got *good)
{
	static uint8_t buf[IDENT_ENC_MAX + 100];
	char self[600], out[300];
	char *argv[] = { self, "child", "get", x.model, out, NULL };
	size_t n;

	snprintf(self, sizeof(self), "/proc/self/exe");
	snprintf(out, sizeof(out), "%s/child.out", x.dir);
	run_child(argv, out, buf, sizeof(buf), &n);
	T_ASSERT(n > 6 && !memcmp(buf, "0 1 0\n", 6));
	T_EQ_U64(n - 6, good->len);
	T_ASSERT(!memcmp(buf + 6, good->enc, good->len));
}

static void hello_e2e(void)
{
	char self[600], out[300], ident[300];
	char *argv[] = { self, "child", "hello", x.device, x.rundir, x.model,
			 out, NULL };
	uint8_t buf[64];
	size_t n;

	snprintf(self, sizeof(self), "/proc/self/exe");
	snprintf(out, sizeof(out), "%s/hello.out", x.dir);
	snprintf(ident, sizeof(ident), "%s/ident-hello", x.dir);
	T_OK(setenv("WCACHE_IDENT_CACHE", ident, 1));
	e2e_start_wcd(&x, NULL);
	run_child(argv, out, buf, sizeof(buf), &n);
	T_ASSERT(n == 6 && !memcmp(buf, "1 0 1\n", 6));
	run_child(argv, out, buf, sizeof(buf), &n);
	T_ASSERT(n == 6 && !memcmp(buf, "0 1 0\n", 6));
	e2e_kill_wcd(&x);
	T_OK(setenv("WCACHE_IDENT_CACHE", cache, 1));
}

/* A dead writer's temporary file under the name a fresh process of the
 * same pid would give its first write (a container's engine is pid 1 at
 * every start, and counts its writes from 1): the entry is written all
 * the same, not blocked by EEXIST. The fresh process is forked first and
 * waits on a pipe until the leftover is made under its pid. */
static void leftover_of_this_pid(void)
{
	static uint8_t buf[IDENT_ENC_MAX + 100];
	char self[] = "/proc/self/exe", dir[300], out[300], log[300];
	char path[700], left[800];
	char *argv[] = { self, "child", "get", x.model, out, NULL };
	int go[2], st, fd;
	size_t n;
	char c = 1;
	pid_t p;

	snprintf(dir, sizeof(dir), "%s/ident-left", x.dir);
	snprintf(out, sizeof(out), "%s/left.out", x.dir);
	snprintf(log, sizeof(log), "%s/child.log", x.dir);
	T_OK(setenv("WCACHE_IDENT_CACHE", dir, 1));
	T_OK(setenv("IDD_CHILD_SETTLE", "1", 1));
	settle();
	run_child(argv, out, buf, sizeof(buf), &n);
	if (n < 6 || memcmp(buf, "1 0 1\n", 6)) {
		e2e_show_log(log);
		T_FAIL("the first child get did not write the entry (built, read, written: %.*s)",
		       (int)(n < 6 ? n : 5), (const char *)buf);
	}
	T_ASSERT(entry_path(dir, path, sizeof(path)));
	T_OK(unlink(path));
	unlink(out);
	T_OK(pipe(go));
	p = fork();
	T_ASSERT(p >= 0);
	if (!p) {
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(126);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	close(go[0]);
	snprintf(left, sizeof(left), "%s/.%.32s.%d.1.tmp", dir,
		 strrchr(path, '/') + 1, (int)p);
	fd = open(left, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	T_CMP_INT(fd, >=, 0);
	T_EQ_INT(write(fd, "torn", 4), 4);
	close(fd);
	T_EQ_INT(write(go[1], &c, 1), 1);
	close(go[1]);
	T_EQ_INT(waitpid(p, &st, 0), p);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		e2e_show_log(log);
		T_FAIL("the child get beside %s failed (status 0x%x)", left, st);
	}
	n = slurp(out, buf, sizeof(buf));
	if (n < 6 || memcmp(buf, "1 0 1\n", 6)) {
		e2e_show_log(log);
		T_FAIL("a leftover %s of the writer's pid kept the entry from being written (built, read, written: %.*s)",
		       left, (int)(n < 6 ? n : 5), (const char *)buf);
	}
	T_OK(access(path, F_OK) ? -errno : 0);
	T_OK(unlink(left));
	T_OK(unsetenv("IDD_CHILD_SETTLE"));
	T_OK(setenv("WCACHE_IDENT_CACHE", cache, 1));
}

int main(int argc, char **argv)
{
	static char layouts[300], preset[400], src[4200], path[700];
	struct wc_expect w = { 0 };
	struct wc__idc_counts c;
	char err[BASE_ERR_LEN];
	struct got good, g;

	if (argc == 5 && !strcmp(argv[1], "child") && !strcmp(argv[2], "get"))
		return child_get(argv[3], argv[4]);
	if (argc == 7 && !strcmp(argv[1], "child") && !strcmp(argv[2], "hello"))
		return child_hello(argv);
	T_SKIP_IF(geteuid() != 0, "runs as root (it chowns an entry to 65534)");
	e2e_init(&x, "identdisk");
	/* a preset directory of our own, to change the preset */
	snprintf(src, sizeof(src), "%s/llama.layout", plan_layout_dir());
	snprintf(layouts, sizeof(layouts), "%s/layouts", x.dir);
	T_OK(mkdir(layouts, 0700));
	snprintf(preset, sizeof(preset), "%s/llama.layout", layouts);
	copy_file(src, preset);
	T_OK(setenv("WCACHE_LAYOUT_DIR", layouts, 1));
	snprintf(cache, sizeof(cache), "%s/ident", x.dir);
	T_OK(setenv("WCACHE_IDENT_CACHE", cache, 1));
	T_OK(gpu_dev_open(&dev, "host", err));
	w.model_dir = x.model;

	/* the model just made: built, not written (a change in the same
	 * tick would not show); settled, written */
	c = counts();
	get_fresh(&w, &good);
	expect_delta(&c, 1, 0, 0);
	T_HAS(c.disk_why, "changed less than 2000 ms ago");
	T_ASSERT(access(cache, F_OK));
	wc__ident_cache_settle_ns(SETTLE_NS);
	settle();

	/* built and written; then read back, byte for byte the same */
	get_fresh(&w, &good);
	expect_delta(&c, 1, 0, 1);
	T_ASSERT(entry_path(cache, path, sizeof(path)));
	{
		struct stat st;

		T_OK(stat(cache, &st));
		T_EQ_INT(st.st_mode & 0777, 0700);
		T_OK(stat(path, &st));
		T_EQ_INT(st.st_mode & 0777, 0600);
	}
	get_fresh(&w, &g);
	expect_delta(&c, 0, 1, 0);
	T_ASSERT(same(&g, &good));
	T_EQ_STR(c.disk_why, "");
	fresh_process(&good);

	/* config.json rewritten (the same bytes): built again, equal,
	 * rewritten, then read */
	snprintf(path, sizeof(path), "%s/config.json", x.model);
	rewrite(path);
	get_fresh(&w, &g);
	expect_delta(&c, 1, 0, 1);
	T_ASSERT(same(&g, &good));
	get_fresh(&w, &g);
	expect_delta(&c, 0, 1, 0);

	/* the preset changed: another rules hash */
	append(preset, "vocab_pad 128\n");
	expect_new_identity(&w, &c, &good);

	/* the shard touched: a new mtime, another checkpoint digest */
	usleep(20000);
	T_OK(utimensat(AT_FDCWD, x.m.shards[0].path, NULL, 0));
	settle();
	expect_new_identity(&w, &c, &good);

	damaged(&w, &good);
	untrusted(&w, &good);
	places(&w, &good);

	/* a relative model path could name another model in another cwd */
	T_OK(chdir(x.dir));
	{
		struct wc_expect rel = { .model_dir = "model" };

		c = counts();
		get_fresh(&rel, &g);
		expect_delta(&c, 1, 0, 0);
		T_HAS(c.disk_why, "a relative path");
		T_ASSERT(same(&g, &good));
	}
	hello_e2e();
	leftover_of_this_pid();
	bounded();
	gpu_dev_close(&dev);
	printf("identity cache on disk: %llu built, %llu read, %llu written\n",
	       (unsigned long long)counts().built,
	       (unsigned long long)counts().disk_hits,
	       (unsigned long long)counts().disk_writes);
	return 0;
}
