/* SPDX-License-Identifier: MIT */
/*
 * The layout globs (proto/plan/glob.c), issue 26, item 4: a rule glob of
 * several stars against a long name ('*a*a*a*a*z' against 1000 a's) ran
 * for minutes in the backtracking matcher (wcctl inspect never ended, a
 * serving daemon sat at 100% CPU through an update). The matcher must
 *  - finish such patterns at once (bounded CPU time for many of them);
 *  - agree with fnmatch(3), no flags, on random patterns of literals, '*',
 *    '?', brackets ([ab], [!a], [^a], [a-c], []a], [[:alpha:]]), '\'
 *    escapes and stray '[' ']' '-';
 *  - agree, result and bound numbers, with the old backtracking matcher
 *    (copied here as the reference) on random patterns with {L}/{E}
 *    captures against names of digits and dots;
 *  - and refuse what it cannot take as written (a capture twice, [= =]).
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "glob.h"
#include "plan.h"
#include "t.h"

/* The matcher before issue 26 (exponential in the stars). */
static bool ref_match(const char *p, const char *s, long caps[26])
{
	while (*p) {
		if (*p == '*') {
			while (*p == '*')
				p++;
			if (!*p)
				return true;
			for (const char *t = s; *t; t++) {
				long save[26];

				memcpy(save, caps, sizeof(save));
				if (ref_match(p, t, caps))
					return true;
				memcpy(caps, save, sizeof(save));
			}
			return ref_match(p, s + strlen(s), caps);
		}
		if (*p == '{' && p[1] >= 'A' && p[1] <= 'Z' && p[2] == '}') {
			int x = p[1] - 'A';
			char *end;
			long v;

			if (*s < '0' || *s > '9')
				return false;
			v = strtol(s, &end, 10);
			if (end - s > 9 || (caps[x] >= 0 && caps[x] != v))
				return false;
			caps[x] = v;
			s = end;
			p += 3;
			continue;
		}
		if (*p == '?' ? !*s : *p != *s)
			return false;
		p++;
		s++;
	}
	return !*s;
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check_many_stars(void)
{
	static char name[4097];
	long caps[26];
	double t0 = cpu_s(), used;

	memset(name, 'a', 1000);
	name[1000] = '\0';
	T_ASSERT(!plan__match("*a*a*a*a*z", name, caps));
	T_ASSERT(plan__match("*a*a*a*a*a", name, caps));
	T_ASSERT(!plan__match("*[a]*[a]*[a]*[a]*z", name, caps));
	memset(name, 'a', 4096);
	name[4096] = '\0';
	/* 100 rounds of the worst kinds: each was minutes to centuries */
	for (int i = 0; i < 100; i++) {
		T_ASSERT(!plan__match("*a*a*a*a*a*a*a*a*a*a*a*a*z", name, caps));
		T_ASSERT(!plan__match("*?*?*?*?*?*?*?*?*b", name, caps));
		T_ASSERT(!plan__match("*a*a*a*a*{L}", name, caps));
		T_ASSERT(plan__match("*a*a*a*a*a*a*a*a*a*a*a*a*a", name, caps));
	}
	used = cpu_s() - t0;
	printf("many stars: %.3f s of CPU for 400 matches of 4096 bytes\n", used);
	/* linear: well under a millisecond each, even under a sanitizer */
	T_CMP_INT((int)(used * 1000), <, 5000);
}

/* A random pattern token of the fnmatch subset. */
static void add_token(char *p, size_t cap, unsigned *seed)
{
	static const char *const tok[] = {
		"a", "b", "c", "-", ".", "*", "*", "?", "[ab]", "[!a]", "[^b]",
		"[a-c]", "[b-a]", "[]a]", "[!]]", "[a-]", "[[:alpha:]]",
		"[[:digit:]a]", "\\a", "\\*", "\\?", "\\[", "[", "]", "[\\]]",
		"[c", "[!", "[a-", "**",
	};
	size_t n = strlen(p);

	snprintf(p + n, cap - n, "%s",
		 tok[rand_r(seed) % (sizeof(tok) / sizeof(tok[0]))]);
}

static void check_fnmatch(void)
{
	static const char alpha[] = "abc-.][*?\\";
	unsigned seed = 26;
	long caps[26];
	int checked = 0, refused = 0;

	for (int i = 0; i < 300000; i++) {
		char p[256] = "", s[32];
		int np = 1 + rand_r(&seed) % 7, ns = rand_r(&seed) % 10;
		const char *why;
		bool want, got;

		for (int k = 0; k < np; k++)
			add_token(p, sizeof(p), &seed);
		/* the parser refuses these ([. and [= inside brackets are
		 * collating forms to fnmatch): nothing to compare */
		if (plan__glob_check(p, &why)) {
			refused++;
			continue;
		}
		/* mostly letters, sometimes a special byte */
		for (int k = 0; k < ns; k++)
			s[k] = rand_r(&seed) % 4 ? "abc"[rand_r(&seed) % 3] :
			       alpha[rand_r(&seed) % (sizeof(alpha) - 1)];
		s[ns] = '\0';
		want = fnmatch(p, s, 0) == 0;
		got = plan__match(p, s, caps);
		if (want != got)
			T_FAIL("pattern '%s' name '%s': fnmatch %s, plan__match %s",
			       p, s, want ? "matches" : "does not",
			       got ? "matches" : "does not");
		checked += want;
	}
	printf("fnmatch: %d random pairs agree (%d matches; %d patterns refused by the parser)\n",
	       300000 - refused, checked, refused);
	T_CMP_INT(refused, <, 30000);
	T_CMP_INT(checked, >, 1000);
}

static void check_captures(void)
{
	static const char *const tok[] = {
		"*", "*", "?", ".", "1", "2", "a", "{L}", "{E}", "{X}",
	};
	unsigned seed = 4;
	int matched = 0;

	for (int i = 0; i < 300000; i++) {
		char p[64] = "", s[16];
		long want[26], got[26];
		bool used[3] = { false }, w, g;
		int np = 1 + rand_r(&seed) % 6, ns = rand_r(&seed) % 12;

		for (int k = 0; k < np; k++) {
			int t = rand_r(&seed) % (int)(sizeof(tok) / sizeof(tok[0]));

			if (t >= 7 && used[t - 7])
				continue;       /* a capture at most once */
			if (t >= 7)
				used[t - 7] = true;
			strcat(p, tok[t]);
		}
		for (int k = 0; k < ns; k++)
			s[k] = "0123.a"[rand_r(&seed) % 6];
		s[ns] = '\0';
		for (int k = 0; k < 26; k++)
			want[k] = -1;
		w = ref_match(p, s, want);
		g = plan__match(p, s, got);
		if (w != g)
			T_FAIL("pattern '%s' name '%s': reference %d, plan__match %d",
			       p, s, w, g);
		for (int k = 0; w && k < 26; k++)
			if (want[k] != got[k])
				T_FAIL("pattern '%s' name '%s': {%c} is %ld, reference %ld",
				       p, s, 'A' + k, got[k], want[k]);
		matched += w;
	}
	printf("captures: 300000 random pairs agree with the reference (%d matches)\n",
	       matched);
	T_CMP_INT(matched, >, 1000);
}

static void check_refused(void)
{
	struct plan_rules r = { 0 };
	char err[BASE_ERR_LEN];
	long caps[26];

	T_EQ_INT(plan_rules_parse(&r, "model.layers.{L}.x.{L} dim0\n", 27,
				  "g.layout", err), -EINVAL);
	T_HAS(err, "g.layout:1");
	T_HAS(err, "a capture appears twice");
	T_EQ_INT(plan_rules_parse(&r, "[[=a=]] dim0\n", 13, "g.layout", err),
		 -EINVAL);
	T_HAS(err, "[= =]");
	T_EQ_INT(plan_rules_parse(&r, "view v.{L} = a.{L}.b.{L}\n", 25,
				  "g.layout", err), -EINVAL);
	T_HAS(err, "first part: a capture appears twice");
	/* what the matcher takes */
	T_OK(plan_rules_parse(&r, "*.[qkv]_proj.weight dim0\n*a*a*a*a*z dim1\n",
			      41, "g.layout", err));
	T_EQ_INT(plan_rules_match(&r, "model.layers.3.self_attn.k_proj.weight"),
		 PLAN_DIM0);
	T_ASSERT(plan__match("model.layers.{L}.experts.{E}.w",
			     "model.layers.12.experts.7.w", caps));
	T_EQ_INT(caps['L' - 'A'], 12);
	T_EQ_INT(caps['E' - 'A'], 7);
	/* a number is never split, and at most 9 digits */
	T_ASSERT(!plan__match("x{L}3", "x123", caps));
	T_ASSERT(!plan__match("x{L}", "x1234567890", caps));
	T_ASSERT(plan__match("x*{L}", "x1234567890", caps));
	T_EQ_INT(caps['L' - 'A'], 234567890);
	plan_rules_free(&r);
}

int main(void)
{
	check_many_stars();
	check_refused();
	check_fnmatch();
	check_captures();
	printf("ok\n");
	return 0;
}
