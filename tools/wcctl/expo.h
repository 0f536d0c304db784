/* SPDX-License-Identifier: MIT */
/*
 * Merging Prometheus text expositions (format 0.0.4), for wcctl metrics
 * --all: the daemons' texts, each with its own "# HELP" and "# TYPE" per
 * family, become one text in which every family has one HELP and one TYPE
 * and all the daemons' samples beneath, in the order families were first
 * seen (pasting the texts one after another repeats every HELP, which the
 * format forbids: promtool's "second HELP line for metric name").
 *
 * A sample without a device label (a daemon older than the rank labels)
 * gets device="NAME", so that the ranks' series stay apart. A family that
 * a later text types differently is kept as first typed; that text's
 * samples of it are left out and named in err (the merge goes on).
 *
 * Bounds: at most EXPO_FAMILIES_MAX families, lines of at most
 * EXPO_LINE_MAX bytes (longer ones are left out and named in err).
 * Cost: O(lines x families) name lookups, fine for a node's ranks.
 */
#ifndef WCCTL_EXPO_H
#define WCCTL_EXPO_H

#include <stddef.h>

#define EXPO_FAMILIES_MAX 1024
#define EXPO_LINE_MAX 4096

struct expo;

struct expo *expo_new(void);
/* Adds one daemon's text; device names it in the labels it may add and in
 * err. 0, or -errno (-ENOMEM, -E2BIG past EXPO_FAMILIES_MAX); 1 when
 * something was left out (err says what). */
int expo_add(struct expo *e, const char *device, const char *text,
	     char *err, size_t errlen);
/* The merged text (malloc'd, the caller frees), or NULL without memory. */
char *expo_text(const struct expo *e);
void expo_free(struct expo *e);

#endif
