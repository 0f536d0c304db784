/* SPDX-License-Identifier: MIT */
/* Internal to proto/model (double underscore): names a JSON value's kind
 * for error messages (st.c, model.c). */
#ifndef WC_JSON_KIND_H
#define WC_JSON_KIND_H

#include <jansson.h>

/* "an object", "an array", "a string", "an integer", "a float",
 * "a boolean" or "null". */
const char *model__json_kind(const json_t *v);

#endif
