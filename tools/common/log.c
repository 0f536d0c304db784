/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"

static const char *log_prog = "wcache";
static enum log_level log_min = LOG_INFO;
static FILE *log_file;

void log_init(const char *prog, enum log_level min)
{
	log_prog = prog;
	log_min = min;
}

void log_set_file(FILE *f)
{
	log_file = f;
}

static void log_emit(FILE *f, enum log_level lvl, const char *fmt, va_list ap)
{
	static const char *names[] = { "DEBUG", "INFO ", "WARN ", "ERROR" };
	struct timespec ts;
	struct tm tm;
	char stamp[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(f, "%s.%03ldZ %s %s: ", stamp, ts.tv_nsec / 1000000,
		names[lvl], log_prog);
	vfprintf(f, fmt, ap);
	fputc('\n', f);
	fflush(f);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	if (lvl < log_min)
		return;
	va_start(ap, fmt);
	log_emit(stderr, lvl, fmt, ap);
	va_end(ap);
	if (log_file && log_file != stderr) {
		va_start(ap, fmt);
		log_emit(log_file, lvl, fmt, ap);
		va_end(ap);
	}
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: ", log_prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}
