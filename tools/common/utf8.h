/* SPDX-License-Identifier: MIT */
/*
 * UTF-8 checks for text that leaves the daemon as JSON (STATUS, JSON log
 * lines): a path is bytes, JSON is UTF-8, so bytes that are not UTF-8 are
 * shown as U+FFFD (the replacement character) rather than sent as invalid
 * JSON or refused.
 */
#ifndef WC_UTF8_H
#define WC_UTF8_H

#include <jansson.h>
#include <stddef.h>

/* The length (1-4) of the well-formed UTF-8 sequence at s[0..n), or 0 when
 * s does not start one (a stray continuation byte, an overlong form, a
 * surrogate, above U+10FFFF, or cut short). n is at least 1. */
size_t utf8_seq_len(const unsigned char *s, size_t n);

/* A copy of the NUL-terminated s (malloc'd) with each byte that does not
 * start a well-formed sequence replaced by U+FFFD; NULL when out of
 * memory. */
char *utf8_sanitize(const char *s);

/* A JSON string of s with utf8_sanitize's replacements (jansson's
 * json_string refuses bytes that are not UTF-8, and a json_pack holding
 * such a "s" fails whole); JSON null for a NULL s. */
json_t *json_text(const char *s);

#endif
