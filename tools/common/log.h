/* SPDX-License-Identifier: MIT */
/*
 * Logging and dying for the tools (library code never prints). Lines go to
 * stderr with the wall-clock time and a level:
 *   2026-11-30T08:01:02.123Z INFO  wcd: message
 */
#ifndef WC_LOG_H
#define WC_LOG_H

#include <stdio.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/* prog: the tool's name; out: an extra stream (the .log file) or NULL. */
void log_init(const char *prog, enum log_level min);
void log_set_file(FILE *f);
void log_msg(enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
