/* SPDX-License-Identifier: MIT */
/*
 * tools/common/log: JSON lines that parse, with the structured fields and
 * hostile message bytes escaped; the text format unchanged; --log-file
 * reopened after a rename (logrotate without copytruncate) so new lines go
 * to the new file and none is lost; a rate limit that lets a burst through
 * and reports the rest as one "suppressed N" line; under systemd
 * (JOURNAL_STREAM naming stderr) lines to stderr carry the "<N>" syslog
 * priority, and none when stderr is another file.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "t.h"

static char dir[] = "/tmp/wct.logXXXXXX";

static int read_lines(const char *path, char lines[][LOG_LINE_MAX], int max)
{
	FILE *f = fopen(path, "r");
	int n = 0;

	T_ASSERT(f);
	while (n < max && fgets(lines[n], LOG_LINE_MAX, f))
		n++;
	fclose(f);
	return n;
}

static char lines[16][LOG_LINE_MAX];

static void test_json(void)
{
	struct log_fields f = { .client_pid = 77, .lease = 3, .version = 2 };
	char path[256], err[256];
	json_error_t je;
	json_t *o;
	int n;

	snprintf(path, sizeof(path), "%s/json.log", dir);
	T_OK(log_open_file(path, err, sizeof(err)));
	log_set_format(LOG_JSON);
	log_set_device("host-0");
	log_with(LOG_INFO, &f, "lease %d on \"version\" %d\n\tdone\x01", 3, 2);
	log_debug("not written at info");
	log_warn("plain");
	n = read_lines(path, lines, 16);
	T_EQ_INT(n, 2);
	o = json_loads(lines[0], JSON_REJECT_DUPLICATES, &je);
	if (!o)
		T_FAIL("line 1 is not JSON (%s): %s", je.text, lines[0]);
	T_EQ_STR(json_string_value(json_object_get(o, "level")), "info");
	T_EQ_STR(json_string_value(json_object_get(o, "prog")), "logtest");
	T_EQ_STR(json_string_value(json_object_get(o, "device")), "host-0");
	T_EQ_STR(json_string_value(json_object_get(o, "msg")),
		 "lease 3 on \"version\" 2\n\tdone\x01");
	T_EQ_INT(json_integer_value(json_object_get(o, "pid")), getpid());
	T_EQ_INT(json_integer_value(json_object_get(o, "client_pid")), 77);
	T_EQ_INT(json_integer_value(json_object_get(o, "lease")), 3);
	T_EQ_INT(json_integer_value(json_object_get(o, "version")), 2);
	T_ASSERT(strlen(json_string_value(json_object_get(o, "ts"))) == 24);
	json_decref(o);
	o = json_loads(lines[1], JSON_REJECT_DUPLICATES, &je);
	T_ASSERT(o);
	T_EQ_STR(json_string_value(json_object_get(o, "level")), "warn");
	T_ASSERT(!json_object_get(o, "lease"));
	json_decref(o);
	/* a message longer than a line is cut, the line still parses */
	{
		static char big[3 * LOG_LINE_MAX];

		memset(big, '"', sizeof(big) - 1);
		log_info("%s", big);
		n = read_lines(path, lines, 16);
		T_EQ_INT(n, 3);
		o = json_loads(lines[2], 0, &je);
		if (!o)
			T_FAIL("a cut line is not JSON: %s", je.text);
		json_decref(o);
	}
	log_set_format(LOG_TEXT);
	log_set_device(NULL);
}

static void test_reopen(void)
{
	char path[256], old[300], err[256];
	int n;

	snprintf(path, sizeof(path), "%s/wcd.log", dir);
	snprintf(old, sizeof(old), "%s.1", path);
	T_OK(log_open_file(path, err, sizeof(err)));
	log_info("before rotation");
	T_OK(rename(path, old));
	log_info("after the rename, before the reopen");
	T_OK(log_reopen());
	log_info("after the reopen");
	n = read_lines(old, lines, 16);
	T_EQ_INT(n, 2);
	T_HAS(lines[0], "INFO  logtest: before rotation");
	T_HAS(lines[1], "before the reopen");
	n = read_lines(path, lines, 16);
	T_EQ_INT(n, 1);
	T_HAS(lines[0], "after the reopen");
	T_EQ_INT(log_open_file("/nonexistent/dir/x.log", err, sizeof(err)), -ENOENT);
	T_HAS(err, "cannot open the log file /nonexistent/dir/x.log");
	log_info("still to the old file");
	n = read_lines(path, lines, 16);
	T_EQ_INT(n, 2);
}

static void test_limit(void)
{
	struct log_limit l = { .burst = 5, .window_ns = 1000000000ull };
	uint64_t sup = 99, reported = 0;
	char path[256], err[256];
	int allowed = 0, n;

	for (int i = 0; i < 10000; i++)
		allowed += log_limit_allow(&l, 1000 + (uint64_t)i, &sup);
	T_EQ_INT(allowed, 5);
	T_EQ_U64(l.suppressed, 9995);
	/* the next window's first line reports the count */
	T_ASSERT(log_limit_allow(&l, 1000 + 2000000000ull, &sup));
	T_EQ_U64(sup, 9995);
	T_EQ_U64(l.suppressed, 0);
	T_ASSERT(log_limit_allow(&l, 1000 + 2000000001ull, &sup));
	T_EQ_U64(sup, 0);
	for (int i = 0; i < 10; i++)
		if (!log_limit_allow(&l, 2000001002ull, &sup))
			reported++;
	T_EQ_U64(reported, 7);
	snprintf(path, sizeof(path), "%s/limit.log", dir);
	T_OK(log_open_file(path, err, sizeof(err)));
	log_limit_flush(&l, LOG_INFO, "malformed frames");
	log_limit_flush(&l, LOG_INFO, "malformed frames"); /* nothing left */
	n = read_lines(path, lines, 16);
	T_EQ_INT(n, 1);
	T_HAS(lines[0], "malformed frames: suppressed 7 similar lines");
	T_EQ_U64(l.suppressed_total, 9995 + 7);
}

/* A message naming a path that is not UTF-8 (a Latin-1 "\xe9") stays a
 * JSON line: each such byte as U+FFFD, UTF-8 kept, nothing after lost. */
static void test_json_not_utf8(void)
{
	char path[256], err[256];
	json_error_t je;
	json_t *o;

	snprintf(path, sizeof(path), "%s/latin.log", dir);
	T_OK(log_open_file(path, err, sizeof(err)));
	log_set_format(LOG_JSON);
	log_info("model /m/\xe9t\xc3\xa9 \xf0\x9f\x98\x80 \xed\xa0\x80 \xc3 end");
	T_EQ_INT(read_lines(path, lines, 16), 1);
	o = json_loads(lines[0], JSON_REJECT_DUPLICATES, &je);
	if (!o)
		T_FAIL("not JSON (%s): %s", je.text, lines[0]);
	T_EQ_STR(json_string_value(json_object_get(o, "msg")),
		 "model /m/\xef\xbf\xbdt\xc3\xa9 \xf0\x9f\x98\x80 "
		 "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd end");
	json_decref(o);
	log_set_format(LOG_TEXT);
}

/* In a child (log_init reads the environment; log_fd stays stderr):
 * stderr to path, JOURNAL_STREAM set to its dev:ino (plus bump, so that a
 * bump of 1 names another file), then a line of each level and die(). */
static void journal_child(const char *path, enum log_format fmt,
			  unsigned long long bump)
{
	struct stat st;
	char v[64];
	int status, fd;
	pid_t pid = fork();

	T_ASSERT(pid >= 0);
	if (pid == 0) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, STDERR_FILENO) < 0 || fstat(fd, &st))
			_exit(2);
		snprintf(v, sizeof(v), "%llu:%llu",
			 (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino + bump);
		setenv("JOURNAL_STREAM", v, 1);
		log_init("journaltest", LOG_DEBUG);
		log_set_format(fmt);
		log_debug("a debug line");
		log_info("an info line");
		log_warn("a warning");
		log_error("an error");
		die("dying");
	}
	T_EQ_INT(waitpid(pid, &status, 0), pid);
	T_ASSERT(WIFEXITED(status));
	T_EQ_INT(WEXITSTATUS(status), 1);
}

static void test_journal_stream(void)
{
	static const char *const want[] = { "<7>", "<6>", "<4>", "<3>", "<3>" };
	char path[256];
	int n;

	snprintf(path, sizeof(path), "%s/journal.log", dir);
	journal_child(path, LOG_TEXT, 0);
	n = read_lines(path, lines, 16);
	T_EQ_INT(n, 5);
	for (int i = 0; i < 5; i++)
		if (strncmp(lines[i], want[i], 3))
			T_FAIL("line %d wants the priority %s: %s", i + 1,
			       want[i], lines[i]);
	T_HAS(lines[3], "ERROR journaltest: an error");
	T_EQ_STR(lines[4], "<3>journaltest: dying\n");
	/* JSON lines too: journald takes the prefix off, the object stays */
	journal_child(path, LOG_JSON, 0);
	T_EQ_INT(read_lines(path, lines, 16), 5);
	T_ASSERT(!strncmp(lines[3], "<3>{\"ts\":", 9));
	/* stderr is another file than the journal's stream: no prefix */
	journal_child(path, LOG_TEXT, 1);
	T_EQ_INT(read_lines(path, lines, 16), 5);
	for (int i = 0; i < 5; i++)
		if (lines[i][0] == '<')
			T_FAIL("line %d has a priority, stderr is not the journal: %s",
			       i + 1, lines[i]);
}

int main(void)
{
	enum log_format f;

	T_ASSERT(mkdtemp(dir));
	log_init("logtest", LOG_INFO);
	T_OK(log_parse_format("json", &f));
	T_EQ_INT(f, LOG_JSON);
	T_EQ_INT(log_parse_format("xml", &f), -EINVAL);
	test_journal_stream();
	test_json();
	test_json_not_utf8();
	test_reopen();
	test_limit();
	{
		char cmd[300];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		(void)!system(cmd);
	}
	printf("log_format: ok\n");
	return 0;
}
