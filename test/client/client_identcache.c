/* SPDX-License-Identifier: MIT */
/*
 * libwcache's identity cache (identcache.c): a second identity for the same
 * model, ranks and device comes from the cache and equals the first; other
 * ranks are other entries; rewriting config.json, adding a file to the
 * model directory, or touching the shard makes it compute again (and the
 * shard's new mtime changes the checkpoint digest); more models than the
 * cache holds evict the least recently used. The layout counts as the
 * shards do: a preset rewritten, changed (a new rules hash) or added to the
 * preset directory, and a --layout file rewritten, each compute again.
 * An entry evicted from memory comes back from the disk's copy
 * (identdisk.c; client_identdisk.c tests that one).
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_util.h"

#include "client.h"
#include "gpu.h"
#include "identity.h"
#include "plan.h"

static struct e2e x;
static struct gpu_dev dev;

/* The identity's canonical encoding (what HELLO sends). */
static size_t get(const struct wc_expect *w, uint8_t *enc, size_t cap)
{
	struct ident id;
	struct wc_error e;
	size_t len = 0;

	if (wc__ident_get(&id, w, &dev, &e))
		T_FAIL("wc__ident_get: %s", e.msg);
	T_OK(ident_encode(&id, enc, cap, &len));
	return len;
}

static void expect_counts(uint64_t built, uint64_t hits)
{
	uint64_t b, h;

	wc__ident_cache_stats(&b, &h);
	T_EQ_U64(b, built);
	T_EQ_U64(h, hits);
}

static void rewrite(const char *path)
{
	char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	T_CMP_INT(fd, >=, 0);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	T_CMP_INT(n, >, 0);
	usleep(20000);          /* a later mtime and ctime, whatever the clock */
	fd = open(path, O_WRONLY | O_TRUNC);
	T_CMP_INT(fd, >=, 0);
	T_EQ_INT(write(fd, buf, (size_t)n), n);
	close(fd);
}

static void copy_file(const char *from, const char *to)
{
	char buf[65536];
	ssize_t n;
	int in = open(from, O_RDONLY), out;

	T_CMP_INT(in, >=, 0);
	n = read(in, buf, sizeof(buf));
	close(in);
	T_CMP_INT(n, >, 0);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	T_CMP_INT(out, >=, 0);
	T_EQ_INT(write(out, buf, (size_t)n), n);
	close(out);
}

/* tp 2 reads the llama preset: from a layout directory of our own. */
static void layouts(struct wc_expect *w)
{
	static uint8_t a[IDENT_ENC_MAX], b[IDENT_ENC_MAX];
	char dir[128], preset[256], src[4200], file[256];
	size_t la, lb;

	snprintf(src, sizeof(src), "%s/llama.layout", plan_layout_dir());
	snprintf(dir, sizeof(dir), "%s/layouts", x.dir);
	T_OK(mkdir(dir, 0700));
	snprintf(preset, sizeof(preset), "%s/llama.layout", dir);
	copy_file(src, preset);
	T_OK(setenv("WCACHE_LAYOUT_DIR", dir, 1));
	w->tp_size = 2;
	w->tp_rank = 1;
	la = get(w, a, sizeof(a));
	expect_counts(15, 4);
	get(w, b, sizeof(b));
	expect_counts(15, 5);

	/* the preset rewritten with the same bytes: computed again, equal */
	rewrite(preset);
	lb = get(w, b, sizeof(b));
	expect_counts(16, 5);
	T_ASSERT(la == lb && !memcmp(a, b, la));
	/* the preset changed: computed again, another rules hash */
	e2e_append(preset, "vocab_pad 128\n");
	lb = get(w, b, sizeof(b));
	expect_counts(17, 5);
	T_ASSERT(la != lb || memcmp(a, b, la));
	/* a preset added to the directory */
	snprintf(file, sizeof(file), "%s/other.layout", dir);
	usleep(20000);
	T_OK(close(open(file, O_WRONLY | O_CREAT, 0600)));
	get(w, b, sizeof(b));
	expect_counts(18, 5);
	get(w, b, sizeof(b));
	expect_counts(18, 6);

	/* a layout file instead of the preset: rewritten, computed again */
	snprintf(file, sizeof(file), "%s/mine.layout", x.dir);
	copy_file(src, file);
	w->layout_file = file;
	la = get(w, a, sizeof(a));
	expect_counts(19, 6);
	get(w, b, sizeof(b));
	expect_counts(19, 7);
	e2e_append(file, "vocab_pad 128\n");
	lb = get(w, b, sizeof(b));
	expect_counts(20, 7);
	T_ASSERT(la != lb || memcmp(a, b, la));
	w->layout_file = NULL;
}

int main(void)
{
	static uint8_t a[IDENT_ENC_MAX], b[IDENT_ENC_MAX];
	struct wc_expect w = { 0 };
	char err[BASE_ERR_LEN], path[700];
	struct wc__idc_counts c;
	size_t la, lb;

	e2e_init(&x, "identcache");
	/* the disk's copy in a directory of this run's own */
	snprintf(path, sizeof(path), "%s/ident", x.dir);
	T_OK(setenv("WCACHE_IDENT_CACHE", path, 1));
	wc__ident_cache_settle_ns(0);   /* files changed just now: write */
	T_OK(gpu_dev_open(&dev, "host", err));
	w.model_dir = x.model;

	la = get(&w, a, sizeof(a));
	expect_counts(1, 0);
	lb = get(&w, b, sizeof(b));
	expect_counts(1, 1);
	T_ASSERT(la == lb && !memcmp(a, b, la));

	/* other ranks: other entries, each cached */
	w.tp_size = 2;
	w.tp_rank = 1;
	lb = get(&w, b, sizeof(b));
	T_ASSERT(la != lb || memcmp(a, b, la));
	get(&w, b, sizeof(b));
	expect_counts(2, 2);
	w.tp_size = 0;
	w.tp_rank = 0;

	/* config.json rewritten with the same bytes: computed again, equal */
	snprintf(path, sizeof(path), "%s/config.json", x.model);
	rewrite(path);
	lb = get(&w, b, sizeof(b));
	expect_counts(3, 2);
	T_ASSERT(la == lb && !memcmp(a, b, la));

	/* a file added to the directory */
	snprintf(path, sizeof(path), "%s/README", x.model);
	T_OK(close(open(path, O_WRONLY | O_CREAT, 0600)));
	get(&w, b, sizeof(b));
	expect_counts(4, 2);
	get(&w, b, sizeof(b));
	expect_counts(4, 3);

	/* the shard touched: a new mtime, so a new checkpoint digest */
	usleep(20000);
	T_OK(utimensat(AT_FDCWD, x.m.shards[0].path, NULL, 0));
	lb = get(&w, b, sizeof(b));
	expect_counts(5, 3);
	T_ASSERT(la != lb || memcmp(a, b, la));

	/* nine models' worth of keys: the first is evicted, then computed */
	w.tp_size = 16;
	for (int r = 0; r < 9; r++) {
		w.tp_rank = r;
		get(&w, b, sizeof(b));
	}
	expect_counts(14, 3);
	w.tp_rank = 8;
	get(&w, b, sizeof(b));
	expect_counts(14, 4);
	/* evicted from memory, still on disk (identdisk.c): read, not built */
	w.tp_rank = 0;
	get(&w, b, sizeof(b));
	expect_counts(14, 4);
	wc__ident_cache_counts(&c);
	T_EQ_U64(c.disk_hits, 1);
	layouts(&w);
	gpu_dev_close(&dev);
	wc__ident_cache_counts(&c);
	T_EQ_U64(c.disk_hits, 1);
	printf("identity cache: 20 computed, 7 served from memory, 1 from disk\n");
	return 0;
}
