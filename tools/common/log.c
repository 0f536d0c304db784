/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "utf8.h"

static const char *log_prog = "wcache";
static enum log_level log_min = LOG_INFO;
static enum log_format log_fmt = LOG_TEXT;
static int log_fd = STDERR_FILENO;     /* where lines go */
static char log_path[4096];            /* --log-file, for log_reopen */
static char log_device[128];
static bool log_journal;               /* stderr is journald's stream */

/* sd-daemon(3): systemd sets JOURNAL_STREAM to "DEV:INO" of the stream it
 * connects a service's stderr to. When our stderr is that very file, lines
 * written there start with the syslog priority "<N>", which journald takes
 * off and files as the line's priority (journalctl -p err). A stderr
 * redirected elsewhere (the variable inherited by a child) gets none. */
static bool stderr_is_journal(void)
{
	const char *v = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;

	if (!v || sscanf(v, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st))
		return false;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

void log_init(const char *prog, enum log_level min)
{
	log_prog = prog;
	log_min = min;
	log_journal = stderr_is_journal();
}

/* The syslog priority of a level: err, warning, info, debug. */
static int journal_priority(enum log_level lvl)
{
	static const int prio[] = { 7, 6, 4, 3 };

	return prio[lvl];
}

void log_set_format(enum log_format f)
{
	log_fmt = f;
}

int log_parse_format(const char *s, enum log_format *out)
{
	if (!strcmp(s, "text"))
		*out = LOG_TEXT;
	else if (!strcmp(s, "json"))
		*out = LOG_JSON;
	else
		return -EINVAL;
	return 0;
}

void log_set_device(const char *device)
{
	snprintf(log_device, sizeof(log_device), "%s", device ? device : "");
}

bool log_enabled(enum log_level lvl)
{
	return lvl >= log_min;
}

static int open_path(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);

	return fd < 0 ? -errno : fd;
}

int log_open_file(const char *path, char *err, size_t errlen)
{
	int fd;

	if (strlen(path) >= sizeof(log_path)) {
		snprintf(err, errlen, "--log-file '%.64s...' is too long", path);
		return -ENAMETOOLONG;
	}
	fd = open_path(path);
	if (fd < 0) {
		snprintf(err, errlen,
			 "cannot open the log file %s: %s; fix the directory's permissions or pick another --log-file",
			 path, strerror(-fd));
		return fd;
	}
	if (log_fd != STDERR_FILENO)
		close(log_fd);
	log_fd = fd;
	snprintf(log_path, sizeof(log_path), "%s", path);
	return 0;
}

int log_reopen(void)
{
	int fd;

	if (!log_path[0])
		return 0;
	fd = open_path(log_path);
	if (fd < 0)
		return fd;  /* keep writing to the old file */
	/* dup3 swaps the file under the same descriptor number in one step:
	 * a thread writing a line meanwhile writes to the old file or the
	 * new one, never to a closed (or reused) descriptor. */
	if (dup3(fd, log_fd, O_CLOEXEC) < 0) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	close(fd);
	return 0;
}

/* Appends s as a JSON string body (no quotes) to out at *n; bytes that
 * are not UTF-8 (a path's) as \ufffd, a sequence never cut at the end. */
static void json_escape(char *out, size_t cap, size_t *n, const char *s)
{
	for (; *s && *n + 7 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x80) {
			size_t k = utf8_seq_len((const unsigned char *)s,
						strnlen(s, 4));

			if (!k) {
				memcpy(out + *n, "\\ufffd", 6);
				*n += 6;
				continue;
			}
			memcpy(out + *n, s, k);	/* k <= 4 < 7 */
			*n += k;
			s += k - 1;
		} else if (c == '"' || c == '\\') {
			out[(*n)++] = '\\';
			out[(*n)++] = (char)c;
		} else if (c == '\n') {
			out[(*n)++] = '\\';
			out[(*n)++] = 'n';
		} else if (c < 0x20) {
			*n += (size_t)snprintf(out + *n, cap - *n, "\\u%04x", c);
		} else {
			out[(*n)++] = (char)c;
		}
	}
}

static void add(char *out, size_t cap, size_t *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void add(char *out, size_t cap, size_t *n, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (*n >= cap)
		return;
	va_start(ap, fmt);
	k = vsnprintf(out + *n, cap - *n, fmt, ap);
	va_end(ap);
	if (k > 0)
		*n = *n + (size_t)k < cap ? *n + (size_t)k : cap - 1;
}

static size_t format_line(char *line, size_t cap, enum log_level lvl,
			  const struct log_fields *f, const char *msg)
{
	static const char *names[] = { "DEBUG", "INFO ", "WARN ", "ERROR" };
	static const char *lower[] = { "debug", "info", "warn", "error" };
	struct timespec ts;
	struct tm tm;
	char stamp[40];
	size_t n = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	if (log_journal && log_fd == STDERR_FILENO)
		add(line, cap, &n, "<%d>", journal_priority(lvl));
	if (log_fmt == LOG_TEXT) {
		add(line, cap, &n, "%s.%03ldZ %s %s: %s", stamp,
		    ts.tv_nsec / 1000000, names[lvl], log_prog, msg);
	} else {
		add(line, cap, &n,
		    "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"prog\":\"%s\",\"pid\":%d",
		    stamp, ts.tv_nsec / 1000000, lower[lvl], log_prog,
		    (int)getpid());
		if (log_device[0]) {
			add(line, cap, &n, ",\"device\":\"");
			json_escape(line, cap, &n, log_device);
			add(line, cap, &n, "\"");
		}
		add(line, cap, &n, ",\"msg\":\"");
		json_escape(line, cap - 64, &n, msg);
		add(line, cap, &n, "\"");
		if (f && f->client_pid)
			add(line, cap, &n, ",\"client_pid\":%d",
			    (int)f->client_pid);
		if (f && f->lease)
			add(line, cap, &n, ",\"lease\":%llu",
			    (unsigned long long)f->lease);
		if (f && f->version)
			add(line, cap, &n, ",\"version\":%llu",
			    (unsigned long long)f->version);
		add(line, cap, &n, "}");
	}
	if (n + 1 >= cap)
		n = cap - 2;
	line[n++] = '\n';
	line[n] = '\0';
	return n;
}

static void log_vemit(enum log_level lvl, const struct log_fields *f,
		      const char *fmt, va_list ap)
{
	char msg[LOG_LINE_MAX - 256], line[LOG_LINE_MAX];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = format_line(line, sizeof(line), lvl, f, msg);
	/* one write per line; a short write to a full disk is dropped */
	if (write(log_fd, line, n) < 0 && log_fd != STDERR_FILENO)
		(void)!write(STDERR_FILENO, line, n);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	if (lvl < log_min)
		return;
	va_start(ap, fmt);
	log_vemit(lvl, NULL, fmt, ap);
	va_end(ap);
}

void log_with(enum log_level lvl, const struct log_fields *f,
	      const char *fmt, ...)
{
	va_list ap;

	if (lvl < log_min)
		return;
	va_start(ap, fmt);
	log_vemit(lvl, f, fmt, ap);
	va_end(ap);
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s%s: ", log_journal ? "<3>" : "", log_prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

bool log_limit_allow(struct log_limit *l, uint64_t now_ns,
		     uint64_t *suppressed)
{
	if (!l->window_start_ns || now_ns - l->window_start_ns >= l->window_ns) {
		l->window_start_ns = now_ns ? now_ns : 1;
		l->in_window = 0;
	}
	if (l->in_window >= l->burst) {
		l->suppressed++;
		l->suppressed_total++;
		return false;
	}
	l->in_window++;
	*suppressed = l->suppressed;
	l->suppressed = 0;
	return true;
}

void log_limit_flush(struct log_limit *l, enum log_level lvl,
		     const char *what)
{
	if (!l->suppressed)
		return;
	log_msg(lvl, "%s: suppressed %llu similar lines", what,
		(unsigned long long)l->suppressed);
	l->suppressed = 0;
}
