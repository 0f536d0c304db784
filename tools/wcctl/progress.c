/* SPDX-License-Identifier: MIT */
/*
 * Loading progress for wcctl start: wcd logs "progress: BYTES/TOTAL bytes,
 * X.XX GB/s" at most every 0.5 s into its .log file; on each tick we read
 * what was appended (at most PROGRESS_READ_MAX bytes) and keep the last such
 * line. On a terminal a block of one line per rank is redrawn in place;
 * otherwise a plain log line per rank at most every PROGRESS_PLAIN_NS.
 * With --foreground every complete line is also copied to our stderr as
 * "[ppP/tpT] line" (no progress block then), so that a service manager's
 * journal holds the daemons' logs; lines arrive a tick (0.5 s) late at
 * most and a line longer than PROGRESS_CHUNK is skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launch.h"
#include "log.h"

#define PROGRESS_READ_MAX (256 * 1024)
#define PROGRESS_CHUNK 16384
#define PROGRESS_PLAIN_NS 2000000000ull
#define PROGRESS_KEY "progress: "
#define TAIL_BYTES 8192

/* Keeps the last progress text from complete lines in buf[0..n). Returns
 * the bytes consumed (through the last newline). */
static size_t progress_lines(struct rank *r, char *buf, size_t n)
{
	char *end = memrchr(buf, '\n', n);
	char *line = buf;

	if (!end)
		return 0;
	*end = '\0';
	while (line && line <= end) {
		char *nl = strchr(line, '\n');
		char *key;

		if (nl)
			*nl = '\0';
		if (r->l->o->foreground && *line)
			fprintf(stderr, "[pp%d/tp%d] %s\n", r->lr.pp_rank,
				r->lr.tp_rank, line);
		key = strstr(line, PROGRESS_KEY);
		if (key) {
			snprintf(r->progress, sizeof(r->progress), "%s",
				 key + strlen(PROGRESS_KEY));
			r->progress_new = true;
		}
		line = nl ? nl + 1 : NULL;
	}
	return (size_t)(end - buf) + 1;
}

void progress_scan(struct rank *r)
{
	char buf[PROGRESS_CHUNK + 1];
	size_t total = 0;

	if (r->log_rfd < 0)
		return;
	while (total < PROGRESS_READ_MAX) {
		ssize_t n = pread(r->log_rfd, buf, PROGRESS_CHUNK,
				  (off_t)r->log_off);
		size_t used;

		if (n <= 0)
			break;
		buf[n] = '\0';
		used = progress_lines(r, buf, (size_t)n);
		if (!used) {
			if (n < PROGRESS_CHUNK)
				break;  /* a partial line: wait for the rest */
			used = (size_t)n; /* an over-long line: skip it */
		}
		r->log_off += used;
		total += used;
	}
	if (total && r->l->o->foreground)
		fflush(stderr);
}

/* "1234/5678 bytes, 1.23 GB/s" -> "0.00/0.01 GB (21%), 1.23 GB/s" */
static void progress_format(const struct rank *r, char *out, size_t len)
{
	unsigned long long done, total;
	double gbps;

	if (!r->progress[0]) {
		snprintf(out, len, "starting");
		return;
	}
	if (sscanf(r->progress, "%llu/%llu bytes, %lf GB/s", &done, &total,
		   &gbps) == 3 && total > 0) {
		snprintf(out, len, "%.2f/%.2f GB (%.0f%%), %.2f GB/s",
			 done / 1e9, total / 1e9, 100.0 * done / total, gbps);
		return;
	}
	snprintf(out, len, "%s", r->progress);
}

void progress_show(struct launch *l)
{
	char text[LAUNCH_PROGRESS_LEN + 64];
	uint64_t now = rx_now_ns();

	if (!l->tty) {
		for (int i = 0; i < l->n; i++) {
			struct rank *r = &l->ranks[i];

			if (!r->running || r->ready || !r->progress_new ||
			    now - r->progress_printed_ns < PROGRESS_PLAIN_NS)
				continue;
			progress_format(r, text, sizeof(text));
			log_info("pp_rank=%d tp_rank=%d (pid=%d) loading: %s",
				 r->lr.pp_rank, r->lr.tp_rank,
				 (int)r->child.pid, text);
			r->progress_new = false;
			r->progress_printed_ns = now;
		}
		return;
	}
	if (l->drawn)
		fprintf(stderr, "\033[%dA", l->drawn);
	for (int i = 0; i < l->n; i++) {
		struct rank *r = &l->ranks[i];

		if (r->ready)
			snprintf(text, sizeof(text), "ready");
		else if (!r->running)
			snprintf(text, sizeof(text), "exited");
		else
			progress_format(r, text, sizeof(text));
		fprintf(stderr, "\r\033[K  pp_rank=%d tp_rank=%d %-14s %s\n",
			r->lr.pp_rank, r->lr.tp_rank, r->paths.device, text);
	}
	fflush(stderr);
	l->drawn = l->n;
}

void progress_clear(struct launch *l)
{
	if (!l->drawn)
		return;
	fprintf(stderr, "\033[%dA\r\033[J", l->drawn);
	fflush(stderr);
	l->drawn = 0;
}

/* Prints the last LAUNCH_LOG_TAIL_LINES lines of the rank's log (from the
 * last TAIL_BYTES bytes) so the operator sees why it died. */
void progress_log_tail(const struct rank *r)
{
	char buf[TAIL_BYTES + 1], *p, *start;
	off_t size, off;
	ssize_t n;
	int fd, lines = 0;

	fd = open(r->paths.log, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return;
	size = lseek(fd, 0, SEEK_END);
	off = size > TAIL_BYTES ? size - TAIL_BYTES : 0;
	n = size > 0 ? pread(fd, buf, TAIL_BYTES, off) : 0;
	close(fd);
	if (n <= 0) {
		fprintf(stderr, "  (its log %s is empty)\n", r->paths.log);
		return;
	}
	buf[n] = '\0';
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	start = buf;
	for (p = buf + n; p > buf; p--)
		if (p[-1] == '\n' && ++lines == LAUNCH_LOG_TAIL_LINES) {
			start = p;
			break;
		}
	fprintf(stderr, "  last lines of %s:\n", r->paths.log);
	for (p = strtok(start, "\n"); p; p = strtok(NULL, "\n"))
		fprintf(stderr, "  | %s\n", p);
	fflush(stderr);
}
