/* SPDX-License-Identifier: MIT */
/*
 * libwcache: the identity cache on disk, so that a restarted engine's first
 * HELLO reads one small file and stats what the identity was computed from,
 * instead of parsing config.json, the index and every shard header again
 * (2-3 ms for the 291 tensors of llama-8b, most of it jansson).
 *
 * Where: $WCACHE_IDENT_CACHE (a directory; "off" disables it), else
 * $XDG_CACHE_HOME/wcache/ident, else $HOME/.cache/wcache/ident (no HOME:
 * off), made 0700 (missing parents too) at the first write. One file per
 * key (identcache.c's make_key): <XXH3-128 of the key, hex>.ident.
 *
 * Trust: the file decides which model the engine believes it has, so it is
 * read or written only where nobody else could have written it: the
 * directory (O_DIRECTORY|O_NOFOLLOW) and the file (openat, O_NOFOLLOW) are
 * owned by geteuid() and writable by neither group nor others, and the file
 * is a regular one. Anything else: the identity is computed as without the
 * disk, the file is left as it is, and idd.why says why. The disk never
 * makes a HELLO fail.
 *
 * Format, little-endian:
 *   "wcache-ident 1\n"
 *   u32 len, key            make_key's string, compared whole
 *   u32 len, code           what computed it (code_stamp below)
 *   u32 n, then n files     u32 len, path; u32 exists; u64 dev, ino, size,
 *                           mtime_ns, ctime_ns (as identcache.c recorded
 *                           them: the same files, the same strictness)
 *   u32 len, identity       ident_encode's bytes, decoded strictly
 *   16 bytes                XXH3-128 of everything before
 * A file is used only whole (the checksum: a torn or damaged file is a
 * miss), at most IDD_FILE_MAX bytes, with our key and code, when every file
 * it lists stats as recorded (one recorded missing still missing). It is
 * written to a temporary file of the same directory (O_CREAT|O_EXCL, 0600)
 * and renamed over the old one, so a reader sees the old file or the new.
 * The temporary name has the pid and 64 random bits (tmp_name): a dead
 * writer's file of the same pid and count (a container's engine is pid 1 at
 * every start) would otherwise make every later write fail with EEXIST,
 * the entry blocked for good (only a write prunes temporary files).
 * An identity is not written while a file it was computed from is younger
 * than 2 s (idd_racy_ns): a second change within the same tick of the file
 * system's clock, of the same size, would stat the same (git's "racily
 * clean" entries); the next build after that writes it.
 *
 * Code: an identity depends on the code that computed it too (another
 * libwcache may hash a layout another way), so the entry names the file the
 * code was loaded from, libwcache.so or the program it is linked into
 * (/proc/self/exe), with its stat, taken once per process. Known gap: a
 * libwcache.so replaced between the engine's start and its first HELLO is
 * recorded as the new file.
 *
 * Costs: a hit is two opens, two fstats, one read of a few KB and one stat
 * per listed file (about 20 for a 4-shard model and the presets); a write
 * adds a create, a write, a rename and a readdir (prune). Bounds:
 * IDD_FILE_MAX bytes a file, WC_IDC_FILES_MAX files an entry, paths below
 * WC_PATH_LEN, IDD_ENTRIES_MAX entries a directory (the least recently
 * written is removed).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "hash.h"
#include "identcache.h"

#define IDD_MAGIC "wcache-ident 1\n"
#define IDD_MAGIC_LEN (sizeof(IDD_MAGIC) - 1)
#define IDD_FILE_MAX (1u << 20)
#define IDD_CODE_LEN (WC_PATH_LEN + 128)
#define IDD_ENTRIES_MAX 256        /* files a directory keeps */
#define IDD_TMP_AGE_S 60           /* a writer's temporary file, at most */
/* 2 s: above any file system's clock tick (FAT's 2 s, ext4's 1 s with
 * small inodes); tests shorten it (wc__ident_cache_settle_ns) */
static int64_t idd_racy_ns = 2000000000;

static pthread_once_t code_once = PTHREAD_ONCE_INIT;
static char code_stamp[IDD_CODE_LEN];    /* "" when unknown: disk off */

/* The file this code was loaded from, as a path and its stat. */
static void code_init(void)
{
	char path[PATH_MAX] = "/proc/self/exe";
	struct link_map *lm = NULL;
	struct idc_stat st;
	Dl_info info;

	if (dladdr1((void *)code_init, &info, (void **)&lm, RTLD_DL_LINKMAP) &&
	    lm && lm->l_name && lm->l_name[0] &&
	    !realpath(lm->l_name, path))
		return;
	idc_stat_of(path, &st);
	if (!st.exists)
		return;
	snprintf(code_stamp, sizeof(code_stamp),
		 "%s dev=%llu ino=%llu size=%lld mtime=%lld ctime=%lld", path,
		 (unsigned long long)st.dev, (unsigned long long)st.ino,
		 (long long)st.size, (long long)st.mtime_ns,
		 (long long)st.ctime_ns);
}

static void why(struct idd *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void why(struct idd *d, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(d->why, sizeof(d->why), fmt, ap);
	va_end(ap);
}

/* The directory's path into d->dir; false: the disk cache is off. */
static bool dir_path(struct idd *d)
{
	const char *v = getenv("WCACHE_IDENT_CACHE"), *base;
	int n;

	if (v && !strcmp(v, "off")) {
		why(d, "WCACHE_IDENT_CACHE=off");
		return false;
	}
	if (v && v[0])
		n = snprintf(d->dir, sizeof(d->dir), "%s", v);
	else if ((base = getenv("XDG_CACHE_HOME")) && base[0] == '/')
		n = snprintf(d->dir, sizeof(d->dir), "%s/wcache/ident", base);
	else if ((base = getenv("HOME")) && base[0])
		n = snprintf(d->dir, sizeof(d->dir), "%s/.cache/wcache/ident",
			     base);
	else {
		why(d, "no WCACHE_IDENT_CACHE, XDG_CACHE_HOME or HOME");
		return false;
	}
	if (n < 0 || (size_t)n >= sizeof(d->dir)) {
		why(d, "the cache directory's path is too long");
		return false;
	}
	return true;
}

/* Whether st (a file's fstat) is ours and nobody else's to write. */
static bool trusted(const struct stat *st)
{
	return st->st_uid == geteuid() && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* Opens d->dir into d->dfd if it exists and is trusted. */
static void dir_open(struct idd *d)
{
	struct stat st;
	int fd;

	fd = open(d->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) {
			why(d, "%s does not exist yet", d->dir);
			return;
		}
		why(d, "cannot open %s: %s", d->dir, strerror(errno));
		d->off = true;
		return;
	}
	if (fstat(fd, &st) || !S_ISDIR(st.st_mode) || !trusted(&st)) {
		why(d, "%s is not a directory of uid %u that only it may write: chmod go-w it, or set WCACHE_IDENT_CACHE to a directory of your own",
		    d->dir, (unsigned)geteuid());
		close(fd);
		d->off = true;
		return;
	}
	d->dfd = fd;
}

void wc__idd_begin(struct idd *d, const char *key)
{
	uint8_t h[BASE_HASH_LEN];
	char hex[BASE_HASH_HEX_LEN];

	memset(d, 0, sizeof(*d));
	d->dfd = -1;
	pthread_once(&code_once, code_init);
	if (!code_stamp[0]) {
		why(d, "cannot tell which file this code was loaded from");
		d->off = true;
		return;
	}
	if (!dir_path(d)) {
		d->off = true;
		return;
	}
	base_hash128(key, strlen(key), h);
	base_hash_hex(h, hex);
	snprintf(d->name, sizeof(d->name), "%s.ident", hex);
	dir_open(d);
}

void wc__idd_off(struct idd *d, const char *reason)
{
	memset(d, 0, sizeof(*d));
	d->dfd = -1;
	d->off = true;
	wc__strlcpy(d->why, reason, sizeof(d->why));
}

void wc__idd_end(struct idd *d)
{
	if (d->dfd >= 0)
		close(d->dfd);
	d->dfd = -1;
}

/* --- reading ----------------------------------------------------------- */

struct rd {
	const uint8_t *p;
	size_t n, off;
	bool bad;
};

static const void *rd_take(struct rd *r, size_t len)
{
	const void *p;

	if (r->bad || r->n - r->off < len) {
		r->bad = true;
		return NULL;
	}
	p = r->p + r->off;
	r->off += len;
	return p;
}

static uint64_t rd_u(struct rd *r, unsigned bytes)
{
	const uint8_t *p = rd_take(r, bytes);
	uint64_t v = 0;

	for (unsigned i = 0; p && i < bytes; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* A string of at most max bytes, without NUL, as a new C string. */
static char *rd_str(struct rd *r, size_t max)
{
	uint32_t len = (uint32_t)rd_u(r, 4);
	const char *p;
	char *s;

	if (len > max) {
		r->bad = true;
		return NULL;
	}
	p = rd_take(r, len);
	if (!p || memchr(p, 0, len) || !(s = strndup(p, len))) {
		r->bad = true;
		return NULL;
	}
	return s;
}

/* Reads the key's file whole into *buf (trusted, at most IDD_FILE_MAX). */
static int file_read(struct idd *d, uint8_t **buf, size_t *len)
{
	struct stat st;
	size_t got = 0;
	int fd, ret = 0;

	fd = openat(d->dfd, d->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
		    O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT) {
			why(d, "no entry yet");
			d->may_write = true;
		} else {
			why(d, "cannot open %s/%s: %s", d->dir, d->name,
			    strerror(-ret));
		}
		return ret;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !trusted(&st)) {
		why(d, "%s/%s is not a regular file of uid %u that only it may write: remove it (the next HELLO writes a new one)",
		    d->dir, d->name, (unsigned)geteuid());
		ret = -EPERM;
		goto out_close;
	}
	d->may_write = true;     /* ours: a stale or damaged one is replaced */
	if (st.st_size < (off_t)(IDD_MAGIC_LEN + BASE_HASH_LEN) ||
	    st.st_size > IDD_FILE_MAX) {
		why(d, "%s/%s is %lld bytes, not within %zu..%u", d->dir,
		    d->name, (long long)st.st_size,
		    IDD_MAGIC_LEN + BASE_HASH_LEN, IDD_FILE_MAX);
		ret = -EBADMSG;
		goto out_close;
	}
	*buf = malloc((size_t)st.st_size);
	if (!*buf) {
		ret = -ENOMEM;
		goto out_close;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, *buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			why(d, "%s/%s: short read", d->dir, d->name);
			ret = n < 0 ? -errno : -EBADMSG;
			free(*buf);
			*buf = NULL;
			goto out_close;
		}
		got += (size_t)n;
	}
	*len = got;
out_close:
	close(fd);
	return ret;
}

/* Parses and checks buf into e; false: damaged, or not ours to use. */
static bool parse(struct idd *d, const uint8_t *buf, size_t len,
		  const char *key, struct idc_entry *e)
{
	struct rd r = { .p = buf, .n = len - BASE_HASH_LEN };
	uint8_t sum[BASE_HASH_LEN];
	const void *enc;
	char *s, err[BASE_ERR_LEN];
	uint32_t n, elen;

	base_hash128(buf, len - BASE_HASH_LEN, sum);
	if (memcmp(sum, buf + len - BASE_HASH_LEN, BASE_HASH_LEN) ||
	    memcmp(buf, IDD_MAGIC, IDD_MAGIC_LEN)) {
		why(d, "%s/%s is damaged (its checksum or magic is wrong)",
		    d->dir, d->name);
		return false;
	}
	r.off = IDD_MAGIC_LEN;
	e->key = rd_str(&r, 4 * WC_PATH_LEN + 256);
	if (!e->key || strcmp(e->key, key)) {
		why(d, "%s/%s is another key's", d->dir, d->name);
		return false;
	}
	s = rd_str(&r, IDD_CODE_LEN - 1);
	if (!s || strcmp(s, code_stamp)) {
		why(d, "%s/%s was made by other code (%s)", d->dir, d->name,
		    s ? s : "?");
		free(s);
		return false;
	}
	free(s);
	n = (uint32_t)rd_u(&r, 4);
	if (r.bad || n > WC_IDC_FILES_MAX ||
	    !(e->f = calloc(n ? n : 1, sizeof(*e->f)))) {
		why(d, "%s/%s lists %u files", d->dir, d->name, n);
		return false;
	}
	for (e->n = 0; e->n < n; e->n++) {
		struct idc_file *f = &e->f[e->n];
		struct idc_stat now;

		f->path = rd_str(&r, WC_PATH_LEN - 1);
		f->st.exists = rd_u(&r, 4) != 0;
		f->st.dev = (dev_t)rd_u(&r, 8);
		f->st.ino = (ino_t)rd_u(&r, 8);
		f->st.size = (off_t)rd_u(&r, 8);
		f->st.mtime_ns = (int64_t)rd_u(&r, 8);
		f->st.ctime_ns = (int64_t)rd_u(&r, 8);
		if (r.bad) {
			free(f->path);
			why(d, "%s/%s is damaged (file %u)", d->dir, d->name,
			    e->n);
			return false;
		}
		idc_stat_of(f->path, &now);
		if (!idc_same_stat(&now, &f->st)) {
			e->n++;
			why(d, "%s changed since the entry was written", f->path);
			return false;
		}
	}
	elen = (uint32_t)rd_u(&r, 4);
	enc = rd_take(&r, elen);
	if (!enc || r.off != r.n) {
		why(d, "%s/%s is damaged (the identity)", d->dir, d->name);
		return false;
	}
	if (ident_decode(&e->id, enc, elen, err)) {
		why(d, "%s/%s: %s", d->dir, d->name, err);
		return false;
	}
	return true;
}

int wc__idd_load(struct idd *d, const char *key, struct idc_entry *e)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int ret;

	memset(e, 0, sizeof(*e));
	if (d->off || d->dfd < 0)
		return -ENOENT;
	ret = file_read(d, &buf, &len);
	if (ret)
		return ret;
	if (!parse(d, buf, len, key, e)) {
		for (unsigned i = 0; i < e->n; i++)
			free(e->f[i].path);
		free(e->f);
		free(e->key);
		memset(e, 0, sizeof(*e));
		ret = -ESTALE;
	} else {
		d->why[0] = '\0';
	}
	free(buf);
	return ret;
}

/* --- writing ----------------------------------------------------------- */

struct wr {
	uint8_t *p;
	size_t n, cap;
	bool bad;
};

static void wr_put(struct wr *w, const void *p, size_t len)
{
	if (w->bad || len > IDD_FILE_MAX - w->n) {
		w->bad = true;
		return;
	}
	if (w->n + len > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		uint8_t *np;

		while (cap < w->n + len)
			cap *= 2;
		np = realloc(w->p, cap);
		if (!np) {
			w->bad = true;
			return;
		}
		w->p = np;
		w->cap = cap;
	}
	memcpy(w->p + w->n, p, len);
	w->n += len;
}

static void wr_u(struct wr *w, uint64_t v, unsigned bytes)
{
	uint8_t b[8];

	for (unsigned i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	wr_put(w, b, bytes);
}

static void wr_str(struct wr *w, const char *s)
{
	size_t len = strlen(s);

	wr_u(w, len, 4);
	wr_put(w, s, len);
}

/* Makes d->dir and its missing parents (0700), then opens it. */
static int dir_make(struct idd *d)
{
	char p[sizeof(d->dir)];

	memcpy(p, d->dir, sizeof(p));
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0700) && errno != EEXIST) {
			why(d, "cannot make %s: %s", p, strerror(errno));
			return -errno;
		}
		*s = '/';
	}
	if (mkdir(p, 0700) && errno != EEXIST) {
		why(d, "cannot make %s: %s", p, strerror(errno));
		return -errno;
	}
	dir_open(d);
	if (d->dfd < 0) {
		d->off = true;
		return -EPERM;
	}
	d->may_write = true;
	return 0;
}

/* Whether a listed file changed so recently that a change in the same tick
 * of the file system's clock, of the same size, would stat the same (git's
 * "racily clean" index entries): such an entry is not written. */
static const char *racy(const struct idc_entry *e)
{
	struct timespec ts;
	int64_t now, racy_ns = __atomic_load_n(&idd_racy_ns, __ATOMIC_RELAXED);

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	for (unsigned i = 0; i < e->n; i++) {
		const struct idc_stat *st = &e->f[i].st;

		if (st->exists && (st->ctime_ns > now - racy_ns ||
				   st->mtime_ns > now - racy_ns))
			return e->f[i].path;
	}
	return NULL;
}

static bool is_entry(const char *name)
{
	return strlen(name) == 32 + 6 && !strcmp(name + 32, ".ident");
}

static bool is_tmp(const char *name)
{
	size_t l = strlen(name);

	return name[0] == '.' && l > 4 && !strcmp(name + l - 4, ".tmp");
}

/* Walks the directory: counts the entries, removes the temporary files
 * older than IDD_TMP_AGE_S, and with victim names the entry written
 * longest ago. */
static unsigned walk(struct idd *d, char *victim, size_t cap)
{
	struct timespec oldest = { 0 };
	struct dirent *de;
	struct stat st;
	unsigned n = 0;
	DIR *dp;
	int fd;

	fd = openat(d->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	dp = fdopendir(fd);
	if (!dp) {
		close(fd);
		return 0;
	}
	while ((de = readdir(dp))) {
		bool ent = is_entry(de->d_name);

		if (ent && !victim) {
			n++;
			continue;
		}
		if ((!ent && (victim || !is_tmp(de->d_name))) ||
		    fstatat(d->dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode))
			continue;
		if (!ent) {
			if (st.st_mtim.tv_sec + IDD_TMP_AGE_S < time(NULL))
				unlinkat(d->dfd, de->d_name, 0);
		} else if (!victim[0] || st.st_mtim.tv_sec < oldest.tv_sec ||
			   (st.st_mtim.tv_sec == oldest.tv_sec &&
			    st.st_mtim.tv_nsec < oldest.tv_nsec)) {
			oldest = st.st_mtim;
			wc__strlcpy(victim, de->d_name, cap);
		}
	}
	closedir(dp);
	return n;
}

/* After a write: keeps at most IDD_ENTRIES_MAX entries (the least
 * recently written goes: a hit does not touch its file) and removes the
 * temporary files of writers that died. Costs one readdir, and one more
 * with an fstatat per entry when over the bound. */
static void prune(struct idd *d)
{
	char victim[sizeof(d->name)] = "";

	if (walk(d, NULL, 0) <= IDD_ENTRIES_MAX)
		return;
	walk(d, victim, sizeof(victim));
	if (victim[0])
		unlinkat(d->dfd, victim, 0);
}

/* The temporary file's name: the entry's, the pid, a count and 64 random
 * bits (getrandom; where it fails, the clock's nanoseconds and the
 * counter's address stand in), so that no leftover of an earlier process
 * with the same pid can take it. */
static void tmp_name(const struct idd *d, char *buf, size_t cap)
{
	static unsigned long seq;
	unsigned long n = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
	unsigned long long r;
	struct timespec ts;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		clock_gettime(CLOCK_REALTIME, &ts);
		r = ((unsigned long long)ts.tv_sec << 30) ^
		    (unsigned long long)ts.tv_nsec ^ (uintptr_t)&seq;
	}
	snprintf(buf, cap, ".%.32s.%d.%lu.%016llx.tmp", d->name,
		 (int)getpid(), n, r);
}

void wc__ident_cache_settle_ns(int64_t ns)
{
	__atomic_store_n(&idd_racy_ns, ns, __ATOMIC_RELAXED);
}

int wc__idd_store(struct idd *d, const struct idc_entry *e)
{
	const char *recent;
	struct wr w = { 0 };
	uint8_t enc[IDENT_ENC_MAX], sum[BASE_HASH_LEN];
	char tmp[96];
	size_t elen = 0, done = 0;
	int fd, ret;

	if (d->off)
		return -EPERM;
	recent = racy(e);
	if (recent) {
		why(d, "%s changed less than %lld ms ago: not written until it settles",
		    recent, (long long)(__atomic_load_n(&idd_racy_ns,
						  __ATOMIC_RELAXED) / 1000000));
		return -EAGAIN;
	}
	if (d->dfd < 0 && (ret = dir_make(d)))
		return ret;
	if (!d->may_write)
		return -EPERM;      /* the entry there is not ours to replace */
	if (ident_encode(&e->id, enc, sizeof(enc), &elen))
		return -EINVAL;
	wr_put(&w, IDD_MAGIC, IDD_MAGIC_LEN);
	wr_str(&w, e->key);
	wr_str(&w, code_stamp);
	wr_u(&w, e->n, 4);
	for (unsigned i = 0; i < e->n; i++) {
		const struct idc_stat *st = &e->f[i].st;

		wr_str(&w, e->f[i].path);
		wr_u(&w, st->exists, 4);
		wr_u(&w, (uint64_t)st->dev, 8);
		wr_u(&w, (uint64_t)st->ino, 8);
		wr_u(&w, (uint64_t)st->size, 8);
		wr_u(&w, (uint64_t)st->mtime_ns, 8);
		wr_u(&w, (uint64_t)st->ctime_ns, 8);
	}
	wr_u(&w, elen, 4);
	wr_put(&w, enc, elen);
	if (!w.bad) {
		base_hash128(w.p, w.n, sum);
		wr_put(&w, sum, sizeof(sum));
	}
	if (w.bad) {
		why(d, "the entry is over %u bytes", IDD_FILE_MAX);
		free(w.p);
		return -E2BIG;
	}
	tmp_name(d, tmp, sizeof(tmp));
	fd = openat(d->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
		    O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		why(d, "cannot create %s/%s: %s", d->dir, tmp, strerror(errno));
		free(w.p);
		return ret;
	}
	ret = 0;
	while (done < w.n) {
		ssize_t n = write(fd, w.p + done, w.n - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			break;
		}
		done += (size_t)n;
	}
	if (close(fd) && !ret)
		ret = -errno;
	if (!ret && renameat(d->dfd, tmp, d->dfd, d->name))
		ret = -errno;
	if (ret) {
		why(d, "cannot write %s/%s: %s", d->dir, d->name,
		    strerror(-ret));
		unlinkat(d->dfd, tmp, 0);
	} else {
		prune(d);
	}
	free(w.p);
	return ret;
}
