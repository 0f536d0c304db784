/* SPDX-License-Identifier: MIT */
/*
 * The layout grammar's glob (glob.c says how and what it costs): pattern
 * against name, '*', '?', '[...]', '\' as fnmatch(3) with no flags, and
 * {X} captures (one or more digits, bound in caps[X - 'A'], -1 where
 * unbound). Internal to proto/ (double underscore): layout.c and plan.c.
 */
#ifndef WC_GLOB_H
#define WC_GLOB_H

#include <stdbool.h>

/* O(|pattern| * |name|). */
bool plan__match(const char *pattern, const char *name, long caps[26]);
/* 0 when the matcher takes pattern as written; -1 with *why (a phrase)
 * for what it refuses: a capture letter twice, [= =] or [. .]. */
int plan__glob_check(const char *pattern, const char **why);

#endif
