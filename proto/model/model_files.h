/* SPDX-License-Identifier: MIT */
/* What model.c and model_files.c share: a file's stamp from its stat. */
#ifndef WC_MODEL_FILES_H
#define WC_MODEL_FILES_H

#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "model.h"

int64_t model__ts_ns(const struct timespec *t);
void model__stamp_of(const struct stat *sb, struct model_stamp *st);

#endif
