/* SPDX-License-Identifier: MIT */
/*
 * The tools' one clock for durations: CLOCK_MONOTONIC (never steps with
 * the wall clock, counts suspend-free time from boot), as seconds for a
 * report and as nanoseconds for arithmetic. A wall-clock time stamp (a log
 * line) is log.c's, not this.
 */
#ifndef WC_CLOCK_H
#define WC_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in seconds (double: ns resolution for ~104 days). */
double clock_secs(void);
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t clock_ns(void);

/* A duration of ns nanoseconds in seconds, for a report. */
static inline double clock_ns_secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

#endif
