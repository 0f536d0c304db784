/* SPDX-License-Identifier: MIT */
/*
 * Layout text: parsing, the canonical hash, rule matching, and finding the
 * preset files. See layout.h for the grammar. Costs: parsing is O(bytes);
 * plan_rules_preset reads every *.layout file of the directory (a handful
 * of small files) to find the one whose arch line names the architecture.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "glob.h"
#include "layout.h"

const char *plan_split_name(enum plan_split s)
{
	switch (s) {
	case PLAN_REPLICATE: return "replicate";
	case PLAN_DIM0: return "dim0";
	case PLAN_DIM1: return "dim1";
	}
	return "?";
}

static void hash_str(struct base_hasher *h, const char *s)
{
	base_hasher_update(h, s, strlen(s) + 1);
}

static void hash_u32(struct base_hasher *h, uint32_t v)
{
	unsigned char b[4] = { (unsigned char)v, (unsigned char)(v >> 8),
			       (unsigned char)(v >> 16), (unsigned char)(v >> 24) };

	base_hasher_update(h, b, 4);
}

static void hash_keys(struct base_hasher *h, const struct plan_keys *k)
{
	hash_u32(h, k->n);
	for (uint32_t i = 0; i < k->n; i++)
		hash_str(h, k->k[i]);
}

/* The canonical form: every rule (pattern, split, parts, pad, expert),
 * every statement, vocab_pad and the experts keys. A layout holding only
 * "PATTERN split" rules hashes as before (pattern, NUL, split byte), so
 * the identity of a plain rules file did not change. */
static void rules_rehash(struct plan_rules *r)
{
	struct base_hasher h;

	base_hasher_init(&h);
	for (uint32_t i = 0; i < r->n; i++) {
		const struct plan_rule *u = &r->r[i];
		uint8_t split = (uint8_t)u->split;

		hash_str(&h, u->pattern);
		base_hasher_update(&h, &split, 1);
		if (!u->nparts && !u->pad && !u->expert)
			continue;
		hash_str(&h, "+attrs");
		hash_u32(&h, u->nparts);
		for (uint32_t k = 0; k < u->nparts; k++) {
			hash_u32(&h, u->part[k].heads);
			hash_keys(&h, &u->part[k].keys);
		}
		hash_u32(&h, u->pad);
		hash_u32(&h, u->expert);
	}
	for (uint32_t i = 0; i < r->nstmts; i++) {
		const struct plan_stmt *s = &r->s[i];

		hash_str(&h, "+stmt");
		hash_u32(&h, s->kind);
		hash_str(&h, s->name);
		hash_u32(&h, s->nparts);
		for (uint32_t k = 0; k < s->nparts; k++)
			hash_str(&h, s->part[k]);
		hash_str(&h, s->cond);
	}
	if (r->vocab_pad >= 0) {
		hash_str(&h, "+vocab_pad");
		hash_u32(&h, (uint32_t)r->vocab_pad);
	}
	if (r->experts.n) {
		hash_str(&h, "+experts");
		hash_keys(&h, &r->experts);
	}
	base_hasher_final(&h, r->hash);
}

void plan_rules_free(struct plan_rules *r)
{
	free(r->r);
	free(r->s);
	memset(r, 0, sizeof(*r));
	r->vocab_pad = -1;
}

uint32_t plan_vocab_pad(const struct plan_rules *r, int32_t knob)
{
	if (knob >= 0)
		return (uint32_t)knob;
	if (r && r->vocab_pad >= 0)
		return (uint32_t)r->vocab_pad;
	return PLAN_VOCAB_PAD_DEFAULT;
}

/* --- matching ------------------------------------------------------------- */

enum plan_split plan_rules_match(const struct plan_rules *r, const char *name)
{
	long caps[26];

	for (uint32_t i = 0; i < r->n; i++)
		if (plan__match(r->r[i].pattern, name, caps))
			return r->r[i].split;
	return PLAN_REPLICATE;
}

/* --- parsing ------------------------------------------------------------- */

#define LINE_MAX_BYTES 2048
#define TOKENS_MAX 16

struct pctx {
	const char *file;
	uint32_t src;             /* its index in plan_rules.src */
	int line;
	const char *text;         /* the line, for messages */
	char *err;
};

static int perr(const struct pctx *c, const char *fmt, const char *what)
{
	char why[512];

	if (snprintf(why, sizeof(why), fmt, what) >= (int)sizeof(why))
		why[sizeof(why) - 1] = '\0';   /* a long name, cut */
	return base_errf(c->err, EINVAL, "%s:%d: '%.300s': %s", c->file, c->line,
		       c->text, why);
}

static int parse_keys(const struct pctx *c, const char *s,
		      struct plan_keys *k)
{
	char buf[PLAN_ALTS_MAX * PLAN_KEY_MAX + 8], *save, *tok;

	memset(k, 0, sizeof(*k));
	if (!*s || strlen(s) >= sizeof(buf))
		return perr(c, "'%s' is not KEY or KEY|KEY (config keys)", s);
	strcpy(buf, s);
	for (tok = strtok_r(buf, "|", &save); tok;
	     tok = strtok_r(NULL, "|", &save)) {
		if (k->n >= PLAN_ALTS_MAX || strlen(tok) >= PLAN_KEY_MAX)
			return perr(c, "'%s': at most 3 config keys of under 48 bytes each", s);
		strcpy(k->k[k->n++], tok);
	}
	return k->n ? 0 : perr(c, "'%s' names no config key", s);
}

static int parse_part(const struct pctx *c, const char *s, struct plan_part *pt)
{
	memset(pt, 0, sizeof(*pt));
	if (!strcmp(s, "even"))
		return 0;
	if (!strncmp(s, "heads:", 6)) {
		pt->heads = PLAN_HEADS_STRICT;
		return parse_keys(c, s + 6, &pt->keys);
	}
	if (!strncmp(s, "kv_heads:", 9)) {
		pt->heads = PLAN_HEADS_KV;
		return parse_keys(c, s + 9, &pt->keys);
	}
	return perr(c, "part '%s' is not even, heads:KEYS or kv_heads:KEYS", s);
}

static int parse_attr(const struct pctx *c, const char *a, struct plan_rule *u)
{
	if (!strcmp(a, "pad")) {
		u->pad = true;
		return 0;
	}
	if (!strcmp(a, "expert")) {
		u->expert = true;
		return 0;
	}
	if (!strncmp(a, "heads=", 6) || !strncmp(a, "kv_heads=", 9)) {
		u->nparts = 1;
		u->part[0].heads = a[0] == 'h' ? PLAN_HEADS_STRICT : PLAN_HEADS_KV;
		return parse_keys(c, strchr(a, '=') + 1, &u->part[0].keys);
	}
	if (!strncmp(a, "parts=", 6)) {
		const char *v = a + 6;
		char buf[LINE_MAX_BYTES], *save, *tok;
		int ret;

		if (*v >= '1' && *v <= '9' && !v[1]) {
			u->nparts = (uint32_t)(*v - '0');
			if (u->nparts > PLAN_PARTS_MAX)
				return perr(c, "parts=%s: at most 4 parts", v);
			memset(u->part, 0, sizeof(u->part));
			return 0;
		}
		snprintf(buf, sizeof(buf), "%s", v);
		u->nparts = 0;
		for (tok = strtok_r(buf, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			if (u->nparts >= PLAN_PARTS_MAX)
				return perr(c, "parts=%s: at most 4 parts", v);
			ret = parse_part(c, tok, &u->part[u->nparts++]);
			if (ret)
				return ret;
		}
		return u->nparts ? 0 : perr(c, "parts=%s names no part", v);
	}
	return perr(c, "unknown attribute '%s' (heads=KEYS, kv_heads=KEYS, parts=..., pad, expert)", a);
}

static bool has_wild(const char *s)
{
	return strpbrk(s, "*?[]\\") != NULL;
}

/* A name or part of a statement: literal text and {X} captures only. */
static int check_tmpl(const struct pctx *c, const char *s)
{
	if (strlen(s) >= PLAN_PATTERN_MAX)
		return perr(c, "'%.40s...' is over 255 bytes", s);
	if (has_wild(s))
		return perr(c, "'%s': view, stack, group and alias names take {L}/{E} captures, not wildcards", s);
	return 0;
}

/* What a statement's own text shows wrong: a part named twice (its
 * bytes would be placed twice: the view then covered more than its parts,
 * reading past the pool), a view or stack named like a part, an alias of
 * itself, a capture twice in the first part (which is matched). */
static int check_parts(const struct pctx *c, const struct plan_stmt *s)
{
	const char *why;

	if (s->kind != PLAN_S_ALIAS && plan__glob_check(s->part[0], &why))
		return perr(c, "first part: %s", why);
	for (uint32_t i = 0; i < s->nparts; i++) {
		for (uint32_t k = 0; k < i; k++)
			if (!strcmp(s->part[i], s->part[k]))
				return perr(c, "part '%s' is named twice; a tensor can be one part of a view, stack or group only once: name each part once", s->part[i]);
		if (s->kind != PLAN_S_GROUP && !strcmp(s->part[i], s->name))
			return perr(c, s->kind == PLAN_S_ALIAS ?
				    "alias '%s' names itself as its target; give the tensor it serves the bytes of" :
				    "'%s' is named like one of its parts; give the fused tensor a name of its own", s->name);
	}
	return 0;
}

static const char *kind_name(enum plan_stmt_kind k)
{
	switch (k) {
	case PLAN_S_VIEW: return "view";
	case PLAN_S_STACK: return "stack";
	case PLAN_S_GROUP: return "group";
	case PLAN_S_ALIAS: return "alias";
	}
	return "?";
}

/* Two views, stacks or aliases of one name (this text's, lines before,
 * or a text parsed before it) serve one manifest name twice. O(statements)
 * compares a statement: at most PLAN_STMTS_MAX squared for a text. */
static int check_name(const struct pctx *c, const struct plan_stmt *s,
		      const struct plan_stmt *prev, uint32_t nprev,
		      const struct plan_rules *r)
{
	char why[PLAN_PATTERN_MAX + PLAN_SRC_NAME_MAX + 160];
	const struct plan_stmt *o = NULL;
	const char *file = c->file;

	if (s->kind == PLAN_S_GROUP)
		return 0;
	for (uint32_t i = 0; i < nprev && !o; i++)
		if (prev[i].kind != PLAN_S_GROUP && !strcmp(prev[i].name, s->name))
			o = &prev[i];
	for (uint32_t i = 0; i < r->nstmts && !o; i++)
		if (r->s[i].kind != PLAN_S_GROUP && !strcmp(r->s[i].name, s->name)) {
			o = &r->s[i];
			file = r->nsrcs ? r->src[o->src] : "a layout text";
		}
	if (!o)
		return 0;
	snprintf(why, sizeof(why),
		 "'%s' is already the name of the %s at %s:%u; give each view, stack and alias a name of its own",
		 s->name, kind_name(o->kind), file, o->line);
	return perr(c, "%s", why);
}

static int parse_stmt(const struct pctx *c, char **tok, int n,
		      struct plan_stmt *s)
{
	int first = 1, ret;

	memset(s, 0, sizeof(*s));
	if (!strcmp(tok[0], "view"))
		s->kind = PLAN_S_VIEW;
	else if (!strcmp(tok[0], "stack"))
		s->kind = PLAN_S_STACK;
	else if (!strcmp(tok[0], "group"))
		s->kind = PLAN_S_GROUP;
	else
		s->kind = PLAN_S_ALIAS;
	if (s->kind != PLAN_S_GROUP) {
		if (n < 4 || strcmp(tok[2], "="))
			return perr(c, "%s", s->kind == PLAN_S_ALIAS ?
				    "not 'alias NAME = TARGET [if KEY]'" :
				    "not 'view|stack NAME = PART PART...'");
		ret = check_tmpl(c, tok[1]);
		if (ret)
			return ret;
		strcpy(s->name, tok[1]);
		first = 3;
	} else if (n < 3) {
		return perr(c, "%s", "not 'group PART PART...'");
	}
	if (s->kind == PLAN_S_ALIAS) {
		if (n != 4 && !(n == 6 && !strcmp(tok[4], "if")))
			return perr(c, "%s", "not 'alias NAME = TARGET [if KEY]'");
		if (n == 6 && strlen(tok[5]) >= PLAN_KEY_MAX)
			return perr(c, "config key '%s' is over 47 bytes", tok[5]);
		if (n == 6)
			strcpy(s->cond, tok[5]);
		n = 4;
	}
	for (int i = first; i < n; i++) {
		if (s->nparts >= PLAN_PARTS_MAX)
			return perr(c, "%s", "at most 4 parts");
		ret = check_tmpl(c, tok[i]);
		if (ret)
			return ret;
		strcpy(s->part[s->nparts++], tok[i]);
	}
	if (s->kind == PLAN_S_STACK && !strstr(s->part[0], "{E}"))
		return perr(c, "stack part '%s' has no {E} (the expert index)",
			    s->part[0]);
	return check_parts(c, s);
}

static int parse_rule(const struct pctx *c, char **tok, int n,
		      struct plan_rule *u)
{
	const char *why;
	int ret;

	memset(u, 0, sizeof(*u));
	if (n < 2 || strlen(tok[0]) >= PLAN_PATTERN_MAX)
		return perr(c, "%s", "not 'PATTERN replicate|dim0|dim1 [ATTR...]' (pattern under 256 bytes)");
	strcpy(u->pattern, tok[0]);
	if (plan__glob_check(u->pattern, &why))
		return perr(c, "pattern: %s", why);
	if (!strcmp(tok[1], "replicate"))
		u->split = PLAN_REPLICATE;
	else if (!strcmp(tok[1], "dim0"))
		u->split = PLAN_DIM0;
	else if (!strcmp(tok[1], "dim1"))
		u->split = PLAN_DIM1;
	else
		return perr(c, "%s", "not 'PATTERN replicate|dim0|dim1 [ATTR...]' (pattern under 256 bytes)");
	for (int i = 2; i < n; i++) {
		ret = parse_attr(c, tok[i], u);
		if (ret)
			return ret;
	}
	if (u->split == PLAN_REPLICATE && (u->nparts || u->pad))
		return perr(c, "%s", "replicate takes no heads, parts or pad");
	if (u->split == PLAN_DIM1 && (u->nparts > 1 || u->pad))
		return perr(c, "%s", "dim1 takes heads= or kv_heads= but no parts or pad (dim 1 slices are 2-D copies)");
	if (u->pad && u->nparts)
		return perr(c, "%s", "pad and heads/parts do not go together");
	if (u->expert && !strstr(u->pattern, "{E}"))
		return perr(c, "%s", "expert needs {E} (the expert index) in the pattern");
	return 0;
}

/* Splits a line into at most TOKENS_MAX blank-separated tokens. */
static int tokens(char *s, char **tok)
{
	int n = 0;

	for (char *save, *t = strtok_r(s, " \t\r", &save); t;
	     t = strtok_r(NULL, " \t\r", &save)) {
		if (n == TOKENS_MAX)
			return -1;
		tok[n++] = t;
	}
	return n;
}

struct acc {                 /* what one text adds */
	struct plan_rule *r;
	uint32_t n;
	struct plan_stmt *s;
	uint32_t ns;
};

static int parse_line(const struct pctx *c, char *text, struct acc *a,
		      struct plan_rules *r)
{
	char *tok[TOKENS_MAX];
	int n = tokens(text, tok), ret;

	if (n < 0)
		return perr(c, "%s", "more than 16 words");
	if (n == 0)
		return 0;
	if (!strcmp(tok[0], "arch")) {
		for (int i = 1; i < n; i++) {
			if (strlen(tok[i]) >= MODEL_ARCH_MAX)
				return perr(c, "architecture '%.40s...' is too long", tok[i]);
			if (r->narchs < PLAN_ARCHS_MAX)
				strcpy(r->arch[r->narchs++], tok[i]);
		}
		return n > 1 ? 0 : perr(c, "%s", "not 'arch NAME...'");
	}
	if (!strcmp(tok[0], "vocab_pad")) {
		char *end;
		long v = n == 2 ? strtol(tok[1], &end, 10) : -1;

		if (n != 2 || *end || v < 0 || v > PLAN_VOCAB_PAD_MAX)
			return perr(c, "%s", "not 'vocab_pad N' (0 to 1048576; 0: no padding)");
		r->vocab_pad = (int32_t)v;
		return 0;
	}
	if (!strcmp(tok[0], "experts")) {
		if (n != 2)
			return perr(c, "%s", "not 'experts KEY[|KEY...]'");
		return parse_keys(c, tok[1], &r->experts);
	}
	if (!strcmp(tok[0], "view") || !strcmp(tok[0], "stack") ||
	    !strcmp(tok[0], "group") || !strcmp(tok[0], "alias")) {
		if (a->ns + r->nstmts >= PLAN_STMTS_MAX)
			return perr(c, "%s", "more than 1024 statements");
		ret = parse_stmt(c, tok, n, &a->s[a->ns]);
		if (!ret)
			ret = check_name(c, &a->s[a->ns], a->s, a->ns, r);
		if (ret)
			return ret;
		a->s[a->ns].line = (uint32_t)c->line;
		a->s[a->ns].src = c->src;
		a->ns++;
		return 0;
	}
	if (a->n + r->n >= PLAN_RULES_MAX)
		return base_errf(c->err, E2BIG, "%s:%d: more than %d rules",
			       c->file, c->line, PLAN_RULES_MAX);
	ret = parse_rule(c, tok, n, &a->r[a->n]);
	if (!ret)
		a->n++;
	return ret;
}

int plan_rules_parse(struct plan_rules *r, const void *buf, size_t len,
		     const char *name, char *err)
{
	const char *p = buf, *end = p + len;
	struct pctx c = { .file = name, .err = err };
	struct acc a = { 0 };
	size_t lines;
	int ret = 0;

	if (!r->r && !r->s && !r->n && !r->nstmts && !r->narchs &&
	    !r->experts.n && r->vocab_pad == 0)
		r->vocab_pad = -1;       /* a zeroed struct: nothing set */
	c.src = r->nsrcs < PLAN_SRCS_MAX ? r->nsrcs : PLAN_SRCS_MAX - 1;
	if (len > PLAN_RULES_FILE_MAX)
		return base_errf(err, EFBIG, "%s: %zu bytes, over the %u-byte limit for a layout file",
			       name, len, PLAN_RULES_FILE_MAX);
	/*
	 * A line adds at most one rule or one statement: room for this
	 * text's lines (at most the limits) and what r holds, not for the
	 * limits (1024 statements are 1.3 MB, zeroed: most of an engine's
	 * first HELLO, which parses the presets up to its architecture's).
	 */
	lines = 1;
	for (const char *q = p; (q = memchr(q, '\n', (size_t)(end - q))); q++)
		lines++;
	a.r = calloc((lines < PLAN_RULES_MAX ? lines : PLAN_RULES_MAX) + r->n,
		     sizeof(*a.r));
	a.s = calloc((lines < PLAN_STMTS_MAX ? lines : PLAN_STMTS_MAX) +
		     r->nstmts, sizeof(*a.s));
	if (!a.r || !a.s) {
		ret = base_errf(err, ENOMEM, "%s: out of memory", name);
		goto out;
	}
	while (p < end && !ret) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char text[LINE_MAX_BYTES], shown[LINE_MAX_BYTES];

		c.line++;
		if (ll >= sizeof(text) || memchr(p, '\0', ll)) {
			ret = base_errf(err, EINVAL, "%s:%d: line is %zu bytes or holds a NUL (limit %zu)",
				      name, c.line, ll, sizeof(text) - 1);
			break;
		}
		memcpy(text, p, ll);
		text[ll] = '\0';
		p += ll + (nl ? 1 : 0);
		if (strchr(text, '#'))
			*strchr(text, '#') = '\0';
		strcpy(shown, text);
		c.text = shown;
		ret = parse_line(&c, text, &a, r);
	}
	if (ret)
		goto out;
	/* this text's lines go first */
	if (r->n)
		memcpy(a.r + a.n, r->r, r->n * sizeof(*a.r));
	if (r->nstmts)
		memcpy(a.s + a.ns, r->s, r->nstmts * sizeof(*a.s));
	free(r->r);
	free(r->s);
	r->r = a.r;
	r->s = a.s;
	r->n += a.n;
	r->nstmts += a.ns;
	if (r->nsrcs < PLAN_SRCS_MAX)
		snprintf(r->src[r->nsrcs++], sizeof(r->src[0]), "%s", name);
	else
		snprintf(r->src[c.src], sizeof(r->src[0]),
			 "one of the layout texts after the first %d", PLAN_SRCS_MAX - 1);
	a.r = NULL;
	a.s = NULL;
	rules_rehash(r);
out:
	free(a.r);
	free(a.s);
	return ret;
}

int plan_rules_file(struct plan_rules *r, const char *path, char *err)
{
	struct stat st;
	char *buf;
	ssize_t n;
	int fd, ret;

	/* O_NONBLOCK: a FIFO given as a layout must not hang the open */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return base_errf(err, errno, "cannot open the layout file %s: %s",
			       path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > PLAN_RULES_FILE_MAX) {
		close(fd);
		return base_errf(err, EFBIG, "layout file %s is not a regular file of at most %u bytes",
			       path, PLAN_RULES_FILE_MAX);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return base_errf(err, ENOMEM, "out of memory reading %s", path);
	}
	n = pread(fd, buf, (size_t)st.st_size, 0);
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return base_errf(err, EIO, "short read of layout file %s", path);
	}
	ret = plan_rules_parse(r, buf, (size_t)n, path, err);
	free(buf);
	return ret;
}

/* --- presets ------------------------------------------------------------- */

static bool is_dir(const char *p)
{
	struct stat st;

	return p[0] && !stat(p, &st) && S_ISDIR(st.st_mode);
}

const char *plan_layout_dir(void)
{
	static __thread char buf[PATH_MAX];
	const char *env = getenv("WCACHE_LAYOUT_DIR");
	char exe[PATH_MAX];
	ssize_t n;

	if (env && env[0])
		return env;
	if (is_dir(WC_LAYOUT_SRC_DIR))
		return WC_LAYOUT_SRC_DIR;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		if (strrchr(exe, '/'))
			*strrchr(exe, '/') = '\0';
		snprintf(buf, sizeof(buf), "%.3000s/../share/wcache/layouts", exe);
		if (is_dir(buf))
			return buf;
	}
	return WC_LAYOUT_INSTALL_DIR;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int plan_rules_preset(struct plan_rules *r, const char *arch, char *err)
{
	const char *dir = plan_layout_dir();
	char known[512] = "", path[PATH_MAX], *names[256];
	size_t kn = 0, nn = 0;
	struct dirent *de;
	DIR *dp;
	int ret = -ENOTSUP;

	memset(r, 0, sizeof(*r));
	r->vocab_pad = -1;
	dp = opendir(dir);
	if (!dp)
		return base_errf(err, ENOTSUP,
			       "no sharding preset for architecture '%s': the layout directory %s cannot be read (%s); set WCACHE_LAYOUT_DIR to the presets (proto/plan/layouts, or share/wcache/layouts), or give a layout file",
			       arch, dir, strerror(errno));
	while ((de = readdir(dp)) && nn < 256) {
		size_t l = strlen(de->d_name);

		if (l > 7 && !strcmp(de->d_name + l - 7, ".layout"))
			names[nn++] = strdup(de->d_name);
	}
	closedir(dp);
	qsort(names, nn, sizeof(names[0]), name_cmp);
	for (size_t i = 0; i < nn; i++) {
		struct plan_rules t;
		char e[BASE_ERR_LEN];

		if (!names[i] || ret != -ENOTSUP)
			continue;
		memset(&t, 0, sizeof(t));
		t.vocab_pad = -1;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (plan_rules_file(&t, path, e)) {
			ret = base_errf(err, EINVAL, "preset %s", e);
			break;
		}
		for (uint32_t k = 0; k < t.narchs; k++) {
			if (!strcmp(t.arch[k], arch)) {
				*r = t;
				ret = 0;
				break;
			}
			if (kn + strlen(t.arch[k]) + 3 < sizeof(known))
				kn += (size_t)snprintf(known + kn, sizeof(known) - kn,
						       "%s%s", kn ? ", " : "",
						       t.arch[k]);
		}
		if (ret)
			plan_rules_free(&t);
	}
	for (size_t i = 0; i < nn; i++)
		free(names[i]);
	if (ret == -ENOTSUP)
		return base_errf(err, ENOTSUP,
			       "no sharding preset for architecture '%s' (presets in %s: %s); give a layout file (--layout FILE, or --rules FILE with lines 'PATTERN replicate|dim0|dim1')",
			       arch, dir, known[0] ? known : "none");
	return ret;
}
