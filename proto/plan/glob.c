/* SPDX-License-Identifier: MIT */
/*
 * The layout grammar's globs (plan.h): '*', '?', '[...]' and '\' as
 * fnmatch(3) with no flags has them, and {X} (X in A..Z), one or more
 * decimal digits taken greedily (a number is never split) and bound in
 * caps[X - 'A'].
 *
 * Cost: O(|pattern| * |name|) at worst, never more. The matcher is the
 * classic greedy one that remembers only the last star: when what follows
 * a star fails, that star takes one more byte and the rest is tried again;
 * an earlier star is never revisited. That is exact because every other
 * token's end only moves right when its start does (a digit run's end is
 * the first non-digit at or after its start), so the leftmost match of the
 * segment between two stars is always the best one. A backreference would
 * break it: a capture letter may appear once in a pattern (plan__glob_check
 * refuses a second). The matcher before this one backtracked into every
 * star: '*a*a*a*a*z' against 1000 a's ran for minutes (issue 26, 4).
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "glob.h"

/* The bracket expression at p (p[0] == '['): its end in *end (past the
 * ']'), whether c is in it in *in. false: no closing ']', so '[' is a
 * literal (as fnmatch takes it). Classes: [:alpha:] and the others of
 * ctype(3), C locale; an unknown class name matches nothing. */
static bool bracket(const char *p, unsigned char c, const char **end, bool *in)
{
	static const struct {
		const char *name;
		int (*fn)(int);
	} cls[] = {
		{ "alnum", isalnum }, { "alpha", isalpha }, { "blank", isblank },
		{ "cntrl", iscntrl }, { "digit", isdigit }, { "graph", isgraph },
		{ "lower", islower }, { "print", isprint }, { "punct", ispunct },
		{ "space", isspace }, { "upper", isupper }, { "xdigit", isxdigit },
	};
	const char *q = p + 1;
	bool neg = false, hit = false, first = true;

	if (*q == '!' || *q == '^') {
		neg = true;
		q++;
	}
	for (;; first = false) {
		unsigned char lo, hi;

		if (!*q)
			return false;
		if (*q == ']' && !first)
			break;
		if (q[0] == '[' && q[1] == ':') {
			const char *e = strstr(q + 2, ":]");
			size_t n = e ? (size_t)(e - (q + 2)) : 0;
			bool known = false;

			if (e) {
				for (size_t k = 0; k < sizeof(cls) / sizeof(cls[0]); k++)
					if (strlen(cls[k].name) == n &&
					    !strncmp(cls[k].name, q + 2, n)) {
						known = true;
						hit |= cls[k].fn(c) != 0;
					}
				if (!known) {   /* fnmatch: no match at all */
					*end = e + 2;
					*in = false;
					return true;
				}
				q = e + 2;
				continue;
			}
		}
		if (*q == '\\' && q[1])
			q++;
		lo = (unsigned char)*q++;
		hi = lo;
		if (q[0] == '-' && q[1] && q[1] != ']') {
			q++;
			if (*q == '\\' && q[1])
				q++;
			if (!*q)
				return false;
			hi = (unsigned char)*q++;
		}
		hit |= c >= lo && c <= hi;
	}
	*end = q + 1;
	*in = hit != neg;
	return true;
}

/* One token that is not '*' at p against s: the bytes of s it takes
 * (0: no match), the pattern past it in *pn. */
static size_t token(const char *p, const char *s, long caps[26],
		    const char **pn)
{
	if (p[0] == '{' && p[1] >= 'A' && p[1] <= 'Z' && p[2] == '}') {
		size_t n = 0;
		long v = 0;

		while (s[n] >= '0' && s[n] <= '9') {
			if (n == 9)     /* over 9 digits: not a layer or expert */
				return 0;
			v = v * 10 + (s[n] - '0');
			n++;
		}
		if (!n)
			return 0;
		caps[p[1] - 'A'] = v;
		*pn = p + 3;
		return n;
	}
	if (!*s)
		return 0;
	if (*p == '?') {
		*pn = p + 1;
		return 1;
	}
	if (*p == '[') {
		const char *end;
		bool in;

		if (bracket(p, (unsigned char)*s, &end, &in)) {
			*pn = end;
			return in ? 1 : 0;
		}
	}
	if (*p == '\\') {
		if (!p[1])              /* a trailing '\' matches nothing */
			return 0;
		p++;
	}
	*pn = p + 1;
	return *p == *s ? 1 : 0;
}

bool plan__match(const char *pattern, const char *name, long caps[26])
{
	const char *p = pattern, *s = name, *star_p = NULL, *star_s = NULL;
	long star_caps[26];

	for (int i = 0; i < 26; i++)
		caps[i] = -1;
	for (;;) {
		const char *pn;
		size_t n;

		if (*p == '*') {
			while (*p == '*')
				p++;
			star_p = p;
			star_s = s;
			memcpy(star_caps, caps, sizeof(star_caps));
			continue;
		}
		if (!*p && !*s)
			return true;
		n = *p ? token(p, s, caps, &pn) : 0;
		if (n) {
			p = pn;
			s += n;
			continue;
		}
		/* the last star takes one more byte, or the match fails */
		if (!star_p || !*star_s)
			return false;
		p = star_p;
		s = ++star_s;
		memcpy(caps, star_caps, sizeof(star_caps));
	}
}

int plan__glob_check(const char *pattern, const char **why)
{
	bool seen[26] = { false };

	for (const char *p = pattern; *p; p++) {
		if (p[0] == '{' && p[1] >= 'A' && p[1] <= 'Z' && p[2] == '}') {
			if (seen[p[1] - 'A']) {
				*why = "a capture appears twice in one pattern (a {X} may bind once)";
				return -1;
			}
			seen[p[1] - 'A'] = true;
			p += 2;
		} else if (p[0] == '[' && (p[1] == '=' || p[1] == '.')) {
			*why = "[= =] and [. .] bracket forms are not supported (use [...] of characters, ranges or [:class:])";
			return -1;
		} else if (p[0] == '\\' && p[1]) {
			p++;
		}
	}
	return 0;
}
