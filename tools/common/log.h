/* SPDX-License-Identifier: MIT */
/*
 * Logging and dying for the tools (library code never prints). One line per
 * message, to stderr or to the --log-file, in one of two formats:
 *
 *   text  2026-11-30T08:01:02.123Z INFO  wcd: message
 *   json  {"ts":"2026-11-30T08:01:02.123Z","level":"info","prog":"wcd",
 *          "pid":4242,"device":"host-0","msg":"message","client_pid":77,
 *          "lease":3,"version":2}
 *
 * Under systemd (JOURNAL_STREAM names stderr's device and inode, checked
 * at log_init), lines to stderr start with the syslog priority, <3> error,
 * <4> warn, <6> info, <7> debug, so that journalctl -p err finds errors.
 *
 * JSON lines carry the process's pid and the device (log_set_device) on
 * every line, and a message's own fields (struct log_fields) where given.
 * A line is written with one write(2) (at most LOG_LINE_MAX bytes; longer
 * messages are cut), so lines of several processes sharing a file do not
 * interleave. Writing from several threads is safe, also while
 * log_reopen swaps the file (dup3 onto the same descriptor);
 * log_open_file is for start-up, before any thread.
 *
 * Rate limits (struct log_limit): a burst of lines per window, the rest
 * counted and reported as "(suppressed N similar lines)" on the next line
 * let through or by log_limit_flush (at shutdown).
 */
#ifndef WC_LOG_H
#define WC_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define LOG_LINE_MAX 8192

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_TEXT, LOG_JSON };

/* A message's structured fields; 0 means absent (JSON only). */
struct log_fields {
	pid_t client_pid;
	uint64_t lease;
	uint64_t version;
};

/* prog: the tool's name; min: the lowest level written. */
void log_init(const char *prog, enum log_level min);
void log_set_format(enum log_format f);
/* "text" or "json" -> format; -EINVAL otherwise. */
int log_parse_format(const char *s, enum log_format *out);
/* The device every JSON line names ("" for none); copied. */
void log_set_device(const char *device);
/* Writes to path (O_APPEND, created 0600) instead of stderr from now on.
 * 0, or -errno (err: a sentence) and the old destination stays. */
int log_open_file(const char *path, char *err, size_t errlen);
/* Opens the --log-file path again (after logrotate renamed it): the new
 * file takes over and the old descriptor is closed. 0 or -errno. */
int log_reopen(void);
bool log_enabled(enum log_level lvl);

void log_msg(enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void log_with(enum log_level lvl, const struct log_fields *f,
	      const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* At most burst lines per window_ns; the caller owns it, zeroed, with
 * burst and window_ns set. */
struct log_limit {
	unsigned burst;
	uint64_t window_ns;
	uint64_t window_start_ns;
	unsigned in_window;
	uint64_t suppressed;          /* since the last line let through */
	uint64_t suppressed_total;
};

/* true when a line may be written now (now_ns: CLOCK_MONOTONIC); then
 * *suppressed is the count to report with it (0 for none) and is reset. */
bool log_limit_allow(struct log_limit *l, uint64_t now_ns,
		     uint64_t *suppressed);
/* Writes "what: suppressed N similar lines" at lvl if any are pending. */
void log_limit_flush(struct log_limit *l, enum log_level lvl,
		     const char *what);

#endif
