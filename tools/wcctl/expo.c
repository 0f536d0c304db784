/* SPDX-License-Identifier: MIT */
/* Merging Prometheus text expositions: see expo.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expo.h"

struct sbuf {
	char *p;
	size_t len, cap;
};

struct fam {
	char *name;
	char *help;                   /* the "# HELP" line, or NULL */
	char *type;                   /* the type word ("counter"), or NULL */
	struct sbuf samples;
};

struct expo {
	struct fam f[EXPO_FAMILIES_MAX];
	unsigned n;
};

static int sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

struct expo *expo_new(void)
{
	return calloc(1, sizeof(struct expo));
}

void expo_free(struct expo *e)
{
	if (!e)
		return;
	for (unsigned i = 0; i < e->n; i++) {
		free(e->f[i].name);
		free(e->f[i].help);
		free(e->f[i].type);
		free(e->f[i].samples.p);
	}
	free(e);
}

/* The family named name[0..len), made if new; NULL when full or out of
 * memory (*ret says which). */
static struct fam *family_get(struct expo *e, const char *name, size_t len,
			      int *ret)
{
	struct fam *f;

	for (unsigned i = 0; i < e->n; i++)
		if (strlen(e->f[i].name) == len &&
		    !memcmp(e->f[i].name, name, len))
			return &e->f[i];
	if (e->n == EXPO_FAMILIES_MAX) {
		*ret = -E2BIG;
		return NULL;
	}
	f = &e->f[e->n];
	f->name = strndup(name, len);
	if (!f->name) {
		*ret = -ENOMEM;
		return NULL;
	}
	e->n++;
	return f;
}

/* Whether sample name[0..len) is of family f: its name, or a histogram's
 * or summary's _bucket, _sum or _count. */
static bool of_family(const struct fam *f, const char *name, size_t len)
{
	static const char *const sfx[] = { "", "_bucket", "_sum", "_count" };
	size_t fl = strlen(f->name);

	if (len < fl || memcmp(name, f->name, fl))
		return false;
	for (unsigned i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
		if (len - fl == strlen(sfx[i]) && !memcmp(name + fl, sfx[i], len - fl))
			return true;
	return false;
}

/* Whether the labels s[0..len) ("{...}") have one named device (not a
 * name that ends in it, as block_device). */
static bool has_device_label(const char *s, size_t len)
{
	const char *p = s, *end = s + len;

	while ((p = memmem(p, (size_t)(end - p), "device=\"", 8))) {
		if (p[-1] == '{' || p[-1] == ',')   /* s[0] is '{': p > s */
			return true;
		p++;
	}
	return false;
}

/* Appends sample line l[0..n) (no newline) to f, with device="..." first
 * in its labels when it has no device label. */
static int add_sample(struct fam *f, const char *device, const char *l,
		      size_t n)
{
	char line[EXPO_LINE_MAX + 300];
	size_t k = strcspn(l, "{ ");
	const char *close = memchr(l, '}', n);
	int m;

	if (k > n)
		k = n;
	if (k < n && l[k] == '{' && close &&
	    has_device_label(l + k, (size_t)(close - (l + k)))) {
		m = snprintf(line, sizeof(line), "%.*s\n", (int)n, l);
	} else if (k < n && l[k] == '{') {          /* name{a="b"} v */
		m = snprintf(line, sizeof(line), "%.*s{device=\"%.200s\"%s%.*s\n",
			     (int)k, l, device, l[k + 1] == '}' ? "" : ",",
			     (int)(n - k - 1), l + k + 1);
	} else {                                    /* name v */
		m = snprintf(line, sizeof(line), "%.*s{device=\"%.200s\"}%.*s\n",
			     (int)k, l, device, (int)(n - k), l + k);
	}
	if (m < 0 || (size_t)m >= sizeof(line))
		return -ENAMETOOLONG;
	return sb_add(&f->samples, line, (size_t)m);
}

static void note(char *err, size_t errlen, int *left, const char *fmt,
		 const char *device, const char *what)
{
	if (!*left)
		snprintf(err, errlen, fmt, device, what);
	*left = 1;
}

/* One "# HELP name text" or "# TYPE name type" line; others are ignored.
 * *cur becomes the family; *skip when its type differs from the first. */
static int add_comment(struct expo *e, const char *device, const char *l,
		       size_t n, struct fam **cur, bool *skip, char *err,
		       size_t errlen, int *left)
{
	bool help = n > 7 && !memcmp(l, "# HELP ", 7);
	bool type = n > 7 && !memcmp(l, "# TYPE ", 7);
	const char *name = l + 7, *rest;
	size_t nl;
	int ret = 0;
	struct fam *f;

	if (!help && !type)
		return 0;
	nl = strcspn(name, " \n");
	if (name + nl > l + n)
		nl = (size_t)(l + n - name);
	rest = name + nl < l + n ? name + nl + 1 : l + n;
	f = family_get(e, name, nl, &ret);
	if (!f)
		return ret;
	if (f != *cur)
		*skip = false;
	*cur = f;
	if (help && !f->help) {
		f->help = strndup(l, n);
		return f->help ? 0 : -ENOMEM;
	}
	if (type && !f->type) {
		f->type = strndup(rest, (size_t)(l + n - rest));
		return f->type ? 0 : -ENOMEM;
	}
	if (type && (strlen(f->type) != (size_t)(l + n - rest) ||
		     memcmp(f->type, rest, (size_t)(l + n - rest)))) {
		*skip = true;
		note(err, errlen, left,
		     "%s: the samples of %s are left out: another daemon gives it another TYPE",
		     device, f->name);
	}
	return 0;
}

int expo_add(struct expo *e, const char *device, const char *text,
	     char *err, size_t errlen)
{
	struct fam *cur = NULL;
	bool skip = false;
	int left = 0, ret = 0;

	for (const char *l = text; *l && !ret;) {
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		size_t k;

		if (n >= EXPO_LINE_MAX) {
			note(err, errlen, &left,
			     "%s: a line longer than %s bytes is left out",
			     device, "4096");
		} else if (l[0] == '#') {
			ret = add_comment(e, device, l, n, &cur, &skip, err,
					  errlen, &left);
		} else if (n) {
			k = strcspn(l, "{ ");
			if (k > n)
				k = n;
			if (!cur || !of_family(cur, l, k)) {
				cur = family_get(e, l, k, &ret);
				skip = false;
			}
			if (cur && !skip)
				ret = add_sample(cur, device, l, n);
		}
		l += n + (nl != NULL);
	}
	if (ret)
		return ret;
	return left;
}

char *expo_text(const struct expo *e)
{
	struct sbuf out = { 0 };
	int ret = sb_add(&out, "", 0);

	for (unsigned i = 0; i < e->n && !ret; i++) {
		const struct fam *f = &e->f[i];
		char line[EXPO_LINE_MAX + 64];
		int m;

		if (f->help) {
			m = snprintf(line, sizeof(line), "%s\n", f->help);
			ret = sb_add(&out, line, (size_t)m);
		}
		if (!ret && f->type) {
			m = snprintf(line, sizeof(line), "# TYPE %s %s\n",
				     f->name, f->type);
			ret = sb_add(&out, line, (size_t)m);
		}
		if (!ret && f->samples.len)
			ret = sb_add(&out, f->samples.p, f->samples.len);
	}
	if (ret) {
		free(out.p);
		return NULL;
	}
	return out.p;
}
