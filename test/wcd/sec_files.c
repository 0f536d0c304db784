/* SPDX-License-Identifier: MIT */
/*
 * Runtime files are never opened through a link and never block on a FIFO
 * (issue 15, item 1): the ready file's temp name planted as a symbolic link
 * to a victim file is replaced, not written through; a ready file that is a
 * FIFO is read without hanging; paths_mkdir refuses a directory that is a
 * link or writable by others and names the mode.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "paths.h"
#include "ready.h"
#include "t.h"

static char dir[64];

static void path(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", dir, name);
}

static void read_small(const char *p, char *buf, size_t len)
{
	FILE *f = fopen(p, "re");
	size_t n;

	T_ASSERT(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

static void ready_temp_link(void)
{
	char victim[128], ready[128], tmp[160], buf[256], err[BASE_ERR_LEN];
	struct ready_info r = { .pid = getpid(), .version = 1 };
	struct ready_info back;
	FILE *f;
	struct stat st;

	path(victim, sizeof(victim), "victim");
	path(ready, sizeof(ready), "host.ready");
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", ready, (int)getpid());
	f = fopen(victim, "we");
	T_ASSERT(f);
	fputs("precious\n", f);
	fclose(f);
	T_EQ_INT(symlink(victim, tmp), 0);
	snprintf(r.socket, sizeof(r.socket), "%s/host.sock", dir);
	snprintf(r.device, sizeof(r.device), "host");
	snprintf(r.state, sizeof(r.state), "ready");
	T_EQ_INT(ready_write_file(&r, ready, err), 0);
	read_small(victim, buf, sizeof(buf));
	if (strcmp(buf, "precious\n"))
		T_FAIL("the ready file was written through the link %s: the victim now holds '%s'",
		       tmp, buf);
	T_EQ_INT(lstat(ready, &st), 0);
	T_ASSERT(S_ISREG(st.st_mode));
	T_EQ_INT(ready_read_file(&back, ready, err), 0);
	T_EQ_INT(back.pid, getpid());
	T_ASSERT(lstat(tmp, &st) && errno == ENOENT);
	unlink(ready);

	/* a ready file that is a link is not read through */
	T_EQ_INT(symlink(victim, ready), 0);
	T_ASSERT(ready_read_file(&back, ready, err) < 0);
	unlink(ready);
	unlink(victim);
}

static void ready_fifo(void)
{
	char ready[128], err[BASE_ERR_LEN];
	struct ready_info back;

	path(ready, sizeof(ready), "fifo.ready");
	T_EQ_INT(mkfifo(ready, 0600), 0);
	/* with no writer, a blocking open would hang here for good */
	T_ASSERT(ready_read_file(&back, ready, err) < 0);
	printf("fifo ready file: %s\n", err);
	unlink(ready);
}

static void mkdir_checks(void)
{
	char p[128], l[128], err[BASE_ERR_LEN];

	path(p, sizeof(p), "rt");
	T_EQ_INT(paths_mkdir(p, err), 0);
	T_EQ_INT(paths_mkdir(p, err), 0);      /* ours, 0700: accepted again */
	T_EQ_INT(chmod(p, 0777), 0);
	T_EQ_INT(paths_mkdir(p, err), -EPERM);
	printf("open dir: %s\n", err);
	T_ASSERT(strstr(err, "mode 0777"));
	T_EQ_INT(chmod(p, 0770), 0);
	T_EQ_INT(paths_mkdir(p, err), -EPERM);
	T_ASSERT(strstr(err, "its group"));
	T_EQ_INT(chmod(p, 0700), 0);
	path(l, sizeof(l), "rtlink");
	T_EQ_INT(symlink(p, l), 0);
	T_EQ_INT(paths_mkdir(l, err), -ELOOP);
	printf("linked dir: %s\n", err);
	unlink(l);
	rmdir(p);
	if (geteuid() == 0) {
		T_EQ_INT(mkdir(p, 0700), 0);
		T_EQ_INT(chown(p, 65534, 65534), 0);
		T_EQ_INT(paths_mkdir(p, err), -EPERM);
		printf("foreign dir: %s\n", err);
		T_ASSERT(strstr(err, "uid 65534") && strstr(err, "mode 0700"));
		rmdir(p);
	}
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/wct-secfiles.XXXXXX");
	T_ASSERT(mkdtemp(dir));
	ready_temp_link();
	ready_fifo();
	mkdir_checks();
	rmdir(dir);
	printf("ok\n");
	return 0;
}
