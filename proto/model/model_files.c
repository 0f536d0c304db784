/* SPDX-License-Identifier: MIT */
/*
 * The files a model was read from, and whether they are still as they
 * were (model.h: struct model_stamp, struct model_files): the stamps
 * model.c records as it reads, a copy of them that outlives the model,
 * and the stat calls that compare. Costs: one stat a file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model.h"
#include "model_files.h"

int64_t model__ts_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

void model__stamp_of(const struct stat *sb, struct model_stamp *st)
{
	st->present = true;
	st->dev = (uint64_t)sb->st_dev;
	st->ino = (uint64_t)sb->st_ino;
	st->size = (uint64_t)sb->st_size;
	st->mtime_ns = model__ts_ns(&sb->st_mtim);
	st->ctime_ns = model__ts_ns(&sb->st_ctim);
}

void model_files_free(struct model_files *f)
{
	for (uint32_t i = 0; f->path && i < f->n; i++)
		free(f->path[i]);
	free(f->path);
	free(f->st);
	memset(f, 0, sizeof(*f));
}

/* Adds dir/name (name NULL: dir itself) with stamp st to f. */
static int files_add(struct model_files *f, const char *dir, const char *name,
		     const struct model_stamp *st)
{
	char *p;

	if (name ? asprintf(&p, "%s/%s", dir, name) < 0 : !(p = strdup(dir)))
		return -ENOMEM;
	f->path[f->n] = p;
	f->st[f->n++] = *st;
	return 0;
}

int model_files_of(const struct model *m, struct model_files *out)
{
	uint32_t cap = m->nshards + 3;
	int ret = 0;

	memset(out, 0, sizeof(*out));
	out->path = calloc(cap, sizeof(*out->path));
	out->st = calloc(cap, sizeof(*out->st));
	if (!out->path || !out->st)
		ret = -ENOMEM;
	if (!ret && !m->is_file) {
		ret = files_add(out, m->path, "config.json", &m->config_st);
		if (!ret)
			ret = m->has_index ?
			      files_add(out, m->path, MODEL_INDEX_NAME,
					&m->index_st) :
			      files_add(out, m->path, NULL, &m->dir_st);
	}
	for (uint32_t i = 0; !ret && i < m->nshards; i++) {
		const struct model_shard *sh = &m->shards[i];

		ret = files_add(out, sh->path, NULL, &sh->stamp);
	}
	if (ret)
		model_files_free(out);
	return ret;
}

bool model_files_same(const struct model_files *f, char *what, size_t cap)
{
	for (uint32_t i = 0; i < f->n; i++) {
		const struct model_stamp *was = &f->st[i];
		struct model_stamp now = { 0 };
		struct stat sb;

		if (!stat(f->path[i], &sb))
			model__stamp_of(&sb, &now);
		if (now.present != was->present) {
			snprintf(what, cap, "%s %s", f->path[i],
				 now.present ? "is new" : "is gone");
			return false;
		}
		if (now.present && (now.dev != was->dev || now.ino != was->ino ||
				    now.size != was->size ||
				    now.mtime_ns != was->mtime_ns ||
				    now.ctime_ns != was->ctime_ns)) {
			snprintf(what, cap, "%s changed (%s)", f->path[i],
				 now.ino != was->ino || now.dev != was->dev ?
				 "another file" : now.size != was->size ?
				 "its size" : "its times");
			return false;
		}
	}
	return true;
}
