/* SPDX-License-Identifier: MIT */
/*
 * libwcache internals: what identcache.c (the per-process identity cache)
 * and identdisk.c (its copy on disk) share. identcache.c calls identdisk.c,
 * never the other way.
 */
#ifndef WC_IDENTCACHE_H
#define WC_IDENTCACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "identity.h"

#define WC_IDC_FILES_MAX 4096

/* What a file was when the identity was computed from it; a file that did
 * not exist is recorded as such (all zero) and must still not exist. */
struct idc_stat {
	bool exists;
	dev_t dev;
	ino_t ino;
	off_t size;
	int64_t mtime_ns, ctime_ns;
};

struct idc_file {
	char *path;
	struct idc_stat st;
};

struct idc_entry {
	char *key;                   /* make_key's string */
	struct ident id;
	struct idc_file *f;          /* n files, at most WC_IDC_FILES_MAX */
	unsigned n;
	uint64_t tick;
};

static inline void idc_stat_of(const char *path, struct idc_stat *st)
{
	struct stat sb;

	memset(st, 0, sizeof(*st));
	if (stat(path, &sb))
		return;
	st->exists = true;
	st->dev = sb.st_dev;
	st->ino = sb.st_ino;
	st->size = sb.st_size;
	st->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	st->ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec;
}

static inline bool idc_same_stat(const struct idc_stat *a,
				 const struct idc_stat *b)
{
	return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino &&
	       a->size == b->size && a->mtime_ns == b->mtime_ns &&
	       a->ctime_ns == b->ctime_ns;
}

/* identdisk.c. One lookup's handle on the directory: idd_begin resolves
 * and opens it (nothing is created), idd_load reads the key's file,
 * idd_store writes it (creating the directory if missing), idd_end closes.
 * why says, after each, why the disk was not used ("" when it was). */
#define WC_IDD_WHY_LEN 320
struct idd {
	int dfd;                     /* the trusted directory, or -1 */
	bool off;                    /* disabled, or the directory untrusted */
	bool may_write;              /* idd_load found nothing it must keep */
	char dir[4096];
	char name[48];               /* <32 hex>.ident */
	char why[WC_IDD_WHY_LEN];
};

void wc__idd_begin(struct idd *d, const char *key);
/* Instead of idd_begin: the disk is not used, for reason. */
void wc__idd_off(struct idd *d, const char *reason);
/* 0 and e filled (key, id, files: the caller owns them) when the file is
 * whole, trusted and every file it lists stats as recorded; -errno else. */
int wc__idd_load(struct idd *d, const char *key, struct idc_entry *e);
/* 0 when e was written to the key's file; -errno else (nothing is left
 * behind). */
int wc__idd_store(struct idd *d, const struct idc_entry *e);
void wc__idd_end(struct idd *d);

#endif
