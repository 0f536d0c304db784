/* SPDX-License-Identifier: MIT */
/*
 * Synthetic checkpoints for the layout tests: config.json and one
 * safetensors file of the tensors given, each byte of data a function of
 * its offset (so that a wrong slice shows). Small enough to write in full.
 */
#ifndef WC_TEST_SYNTH_MODEL_H
#define WC_TEST_SYNTH_MODEL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "t.h"

/* Writes wcgen's PRESET into dir (removed first) with args (may be NULL),
 * the built wcgen of $WC_TOP/$BUILD; skips (77) where it is not built. */
void synth_wcgen(const char *preset, const char *dir, const char *args);
/* synth_wcgen with --headers-only (the shapes, no data: any size costs
 * nothing). */
void synth_wcgen_headers(const char *preset, const char *dir);

struct synth_t {
	char name[200];
	const char *dtype;        /* "BF16", "F32", "F8_E4M3" */
	unsigned esize;           /* bytes per element */
	uint32_t ndim;
	uint64_t shape[4];
};

struct synth {
	unsigned n;
	struct synth_t t[4096];
};

/* Adds a tensor of ndim dimensions (d0, d1, d2), its name from fmt. */
void synth_add(struct synth *s, const char *dtype, unsigned esize,
	       uint32_t ndim, uint64_t d0, uint64_t d1, uint64_t d2,
	       const char *fmt, ...) __attribute__((format(printf, 8, 9)));

/* Writes dir/config.json (config is its text) and dir/model.safetensors;
 * sparse: the header only, the data a hole (reads as zeros; for tests of
 * the plan, which read headers only). */
void synth_write_as(const struct synth *s, const char *dir,
		    const char *config, bool sparse);

void synth_write(const struct synth *s, const char *dir,
		 const char *config);

#endif
