/* SPDX-License-Identifier: MIT */
/*
 * libwcache: the engine's identity, computed once per process and model.
 *
 * Computing it reads and strictly parses every shard header (ident.c);
 * for llama-1b that is about 0.7 ms, most of an attach on the host
 * backend. An engine that connects again (a reconnect, a new version after
 * an update, a restarted daemon) gets it from here when nothing it was
 * computed from has changed: the model directory itself (a shard added or
 * removed changes it), config.json, the index, the rules file, the layout
 * file, and without a layout file the preset directory (plan_layout_dir,
 * also in the key: a preset added or removed changes it) and each of its
 * .layout files, and every shard must stat the same -- device, inode,
 * size, mtime and ctime (which no one can set back). Those files are
 * statted before they are read and the shards after, compared with what
 * was read, so a file that changes meanwhile is never cached as the old
 * one. A lookup costs one stat per file (about 1 us each; 8 presets).
 * On a miss the entry is looked for on disk (identdisk.c: a restarted
 * engine reads it instead of the headers, checked by the same stats), and
 * an identity built is written there too.
 *
 * Bounds: WC_IDC_ENTRIES models (the least recently used is replaced),
 * WC_IDC_FILES_MAX files each (a larger model is not cached),
 * WC_IDC_PRESETS_MAX preset files (as plan_rules_preset reads). One mutex;
 * identities are built outside it.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "client.h"
#include "identcache.h"
#include "identity.h"
#include "model.h"
#include "plan.h"

#define WC_IDC_ENTRIES 8
#define WC_IDC_PRESETS_MAX 256    /* plan_rules_preset reads at most this */

static pthread_mutex_t idc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct idc_entry idc[WC_IDC_ENTRIES];
static uint64_t idc_tick, idc_built, idc_hits, idc_disk_hits, idc_disk_writes;
static char idc_disk_why[WC_IDD_WHY_LEN];

static void entry_free(struct idc_entry *e)
{
	for (unsigned i = 0; i < e->n; i++)
		free(e->f[i].path);
	free(e->f);
	free(e->key);
	memset(e, 0, sizeof(*e));
}

static void seen_free(struct wc__shard_seen *s)
{
	for (unsigned i = 0; s->path && i < s->n; i++)
		free(s->path[i]);
	free(s->path);
	free(s->size);
	free(s->mtime_ns);
	memset(s, 0, sizeof(*s));
}

/* Appends path (printf-style) to the list of files statted before the
 * build, and stats it now: a directory before it is listed. false: out of
 * memory, too long, or past WC_IDC_FILES_MAX. */
static bool pre_add(struct idc_entry *pre, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static bool pre_add(struct idc_entry *pre, const char *fmt, ...)
{
	struct idc_file *f;
	va_list ap;
	int n;

	if (pre->n >= WC_IDC_FILES_MAX)
		return false;
	f = realloc(pre->f, (pre->n + 1) * sizeof(*f));
	if (!f)
		return false;
	pre->f = f;
	f = &pre->f[pre->n];
	va_start(ap, fmt);
	n = vasprintf(&f->path, fmt, ap);
	va_end(ap);
	if (n < 0)
		return false;
	if (n >= WC_PATH_LEN) {
		free(f->path);
		return false;
	}
	idc_stat_of(f->path, &f->st);
	pre->n++;
	return true;
}

/* The files the identity is read from before the shards, each statted
 * here: the directory, its config.json and index, the rules file, and the
 * layout file or else the preset directory and its .layout files (what
 * plan_rules_preset may read). false: not cacheable. */
static bool pre_files(struct idc_entry *pre, const struct wc_expect *x,
		      const char *preset_dir)
{
	struct dirent *de;
	unsigned npresets = 0;
	DIR *dp;

	if (!pre_add(pre, "%s", x->model_dir) ||
	    !pre_add(pre, "%s/config.json", x->model_dir) ||
	    !pre_add(pre, "%s/model.safetensors.index.json", x->model_dir) ||
	    (x->rules_file && !pre_add(pre, "%s", x->rules_file)))
		return false;
	if (x->layout_file)
		return pre_add(pre, "%s", x->layout_file);
	if (!pre_add(pre, "%s", preset_dir))
		return false;
	dp = opendir(preset_dir);
	while (dp && (de = readdir(dp))) {
		size_t l = strlen(de->d_name);

		if (l <= 7 || strcmp(de->d_name + l - 7, ".layout"))
			continue;
		if (++npresets > WC_IDC_PRESETS_MAX ||
		    !pre_add(pre, "%s/%s", preset_dir, de->d_name)) {
			closedir(dp);
			return false;
		}
	}
	if (dp)
		closedir(dp);
	return true;
}

static char *make_key(const struct wc_expect *x, const struct gpu_dev *dev,
		      const char *preset_dir)
{
	char *k = NULL;

	if (asprintf(&k, "%s\n%s\n%s\n%s\n%d/%d %d/%d %d/%d %d\n%s %d.%d",
		     x->model_dir, x->rules_file ? x->rules_file : "",
		     x->layout_file ? x->layout_file : "",
		     x->layout_file ? "" : preset_dir,
		     x->tp_rank, x->tp_size ? x->tp_size : 1,
		     x->pp_rank, x->pp_size ? x->pp_size : 1,
		     x->ep_rank, x->ep_size ? x->ep_size : 1, x->vocab_pad,
		     dev->uuid, dev->cc_major, dev->cc_minor) < 0)
		return NULL;
	return k;
}

/* Under idc_mu: the entry for key if every file still stats the same. */
static struct idc_entry *lookup(const char *key)
{
	for (unsigned i = 0; i < WC_IDC_ENTRIES; i++) {
		struct idc_entry *e = &idc[i];
		unsigned k;

		if (!e->key || strcmp(e->key, key))
			continue;
		for (k = 0; k < e->n; k++) {
			struct idc_stat now;

			idc_stat_of(e->f[k].path, &now);
			if (!idc_same_stat(&now, &e->f[k].st))
				break;
		}
		if (k == e->n)
			return e;
		entry_free(e);        /* stale */
		return NULL;
	}
	return NULL;
}

/* Builds the entry's file list: the files in pre as statted before the
 * build (moved from pre), then each shard if it still is what was read.
 * false: not cacheable. */
static bool note_files(struct idc_entry *e, struct idc_entry *pre,
		       const struct wc__shard_seen *s)
{
	if (!s->complete || s->single_file || s->n > WC_IDC_FILES_MAX - pre->n)
		return false;
	e->f = calloc(pre->n + s->n, sizeof(*e->f));
	if (!e->f)
		return false;
	for (unsigned i = 0; i < pre->n; i++) {
		e->f[e->n++] = pre->f[i];
		pre->f[i].path = NULL;
	}
	for (unsigned i = 0; i < s->n; i++) {
		struct idc_stat st;

		idc_stat_of(s->path[i], &st);
		if (!st.exists || (uint64_t)st.size != s->size[i] ||
		    st.mtime_ns != s->mtime_ns[i])
			return false;  /* changed since it was read */
		e->f[e->n].path = strdup(s->path[i]);
		e->f[e->n].st = st;
		if (!e->f[e->n++].path)
			return false;
	}
	return true;
}

/* Under idc_mu: puts ne (moved; zeroed) in the cache, over the entry of
 * the same key (another thread built it too) or the least recently used. */
static void insert(struct idc_entry *ne)
{
	unsigned victim = 0;

	for (unsigned i = 0; i < WC_IDC_ENTRIES; i++) {
		if (idc[i].key && !strcmp(idc[i].key, ne->key)) {
			victim = i;
			break;
		}
		if (!idc[i].key || idc[i].tick < idc[victim].tick)
			victim = i;
	}
	entry_free(&idc[victim]);
	ne->tick = ++idc_tick;
	idc[victim] = *ne;
	memset(ne, 0, sizeof(*ne));
}

/* Under idc_mu: keeps the disk's reason for the tests. */
static void disk_note(const struct idd *d)
{
	wc__strlcpy(idc_disk_why, d->why, sizeof(idc_disk_why));
}

/* The lookup order: this process's cache, the entry on disk (identdisk.c),
 * then wc__ident_build, whose result goes to both when cacheable. */
int wc__ident_get(struct ident *id, const struct wc_expect *x,
		  const struct gpu_dev *dev, struct wc_error *err)
{
	struct wc__shard_seen seen = { 0 };
	struct idc_entry ne = { 0 }, pre = { 0 }, *e;
	char *key, *preset_dir;
	struct idd *d;
	bool cacheable;
	int ret;

	if (!x->model_dir || !(preset_dir = strdup(plan_layout_dir())))
		return wc__ident_build(id, x, dev, NULL, err);
	key = make_key(x, dev, preset_dir);
	d = malloc(sizeof(*d));
	if (!key || !d) {
		free(d);
		free(key);
		free(preset_dir);
		return wc__ident_build(id, x, dev, NULL, err);
	}
	pthread_mutex_lock(&idc_mu);
	e = lookup(key);
	if (e) {
		*id = e->id;
		e->tick = ++idc_tick;
		idc_hits++;
		pthread_mutex_unlock(&idc_mu);
		ret = 0;
		goto out_free;
	}
	pthread_mutex_unlock(&idc_mu);

	/* a relative path names other files in a process of another cwd */
	if (x->model_dir[0] != '/' || preset_dir[0] != '/' ||
	    (x->rules_file && x->rules_file[0] != '/') ||
	    (x->layout_file && x->layout_file[0] != '/'))
		wc__idd_off(d, "a relative path: the model, rules, layout or preset directory");
	else
		wc__idd_begin(d, key);
	if (!wc__idd_load(d, key, &ne)) {
		*id = ne.id;
		pthread_mutex_lock(&idc_mu);
		idc_disk_hits++;
		disk_note(d);
		insert(&ne);
		pthread_mutex_unlock(&idc_mu);
		wc__idd_end(d);
		ret = 0;
		goto out_free;
	}
	cacheable = pre_files(&pre, x, preset_dir);
	ret = wc__ident_build(id, x, dev, &seen, err);
	if (!ret && cacheable && note_files(&ne, &pre, &seen)) {
		bool wrote;

		ne.key = key;
		key = NULL;
		ne.id = *id;
		wrote = !wc__idd_store(d, &ne);
		pthread_mutex_lock(&idc_mu);
		idc_disk_writes += wrote;
		insert(&ne);
		pthread_mutex_unlock(&idc_mu);
	}
	wc__idd_end(d);
	pthread_mutex_lock(&idc_mu);
	if (!ret)
		idc_built++;
	disk_note(d);
	pthread_mutex_unlock(&idc_mu);
out_free:
	entry_free(&pre);
	entry_free(&ne);
	seen_free(&seen);
	free(d);
	free(preset_dir);
	free(key);
	return ret;
}

void wc__ident_cache_stats(uint64_t *built, uint64_t *hits)
{
	pthread_mutex_lock(&idc_mu);
	*built = idc_built;
	*hits = idc_hits;
	pthread_mutex_unlock(&idc_mu);
}

void wc__ident_cache_counts(struct wc__idc_counts *c)
{
	pthread_mutex_lock(&idc_mu);
	c->built = idc_built;
	c->hits = idc_hits;
	c->disk_hits = idc_disk_hits;
	c->disk_writes = idc_disk_writes;
	wc__strlcpy(c->disk_why, idc_disk_why, sizeof(c->disk_why));
	pthread_mutex_unlock(&idc_mu);
}

void wc__ident_cache_drop(void)
{
	pthread_mutex_lock(&idc_mu);
	for (unsigned i = 0; i < WC_IDC_ENTRIES; i++)
		entry_free(&idc[i]);
	pthread_mutex_unlock(&idc_mu);
}
