/* SPDX-License-Identifier: MIT */
/*
 * Out of descriptors (issue 15, item 3). wcd starts with its soft limit
 * raised to the hard one (started here with soft 256). Then its limit is
 * cut (prlimit) to a few descriptors above what it holds, and idle
 * connections are opened until it runs out: it must keep accepting --
 * closing the oldest idle connection to make room -- so that STATUS still
 * gets an answer, log the shortage, and count it in STATUS. Before, one
 * EMFILE ended the accept for good: the daemon stayed "ready" and deaf.
 */
#include <dirent.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "client_util.h"

#define CONNS 40

static struct e2e gx;    /* e2e_cleanup runs at exit: not on main's stack */

static unsigned long long soft_limit(pid_t pid)
{
	struct rlimit rl;

	T_OK(prlimit(pid, RLIMIT_NOFILE, NULL, &rl) ? -errno : 0);
	return (unsigned long long)rl.rlim_cur;
}

int main(void)
{
	struct rlimit mine, low;
	struct wc_connect_opts o = { 0 };
	int conns[CONNS], fds, shed = 0;
	struct wc_conn *c;
	struct wc_error e;
	char *s;
	json_t *j, *cn;

	e2e_init(&gx, "emfile");
	T_OK(getrlimit(RLIMIT_NOFILE, &mine) ? -errno : 0);
	T_SKIP_IF(mine.rlim_max <= 256, "the hard descriptor limit is %llu",
		  (unsigned long long)mine.rlim_max);
	low = mine;
	low.rlim_cur = 256;              /* inherited by wcd */
	T_OK(setrlimit(RLIMIT_NOFILE, &low) ? -errno : 0);
	e2e_start_wcd(&gx, NULL);
	T_OK(setrlimit(RLIMIT_NOFILE, &mine) ? -errno : 0);
	printf("wcd's soft limit: %llu (hard %llu)\n", soft_limit(gx.wcd),
	       (unsigned long long)mine.rlim_max);
	T_EQ_U64(soft_limit(gx.wcd), mine.rlim_max);

	/* A second daemon, started with a low hard limit it cannot raise
	 * (the kernel reads the limit when an accept is submitted, so it
	 * cannot be cut from outside after the start): 32 descriptors, and
	 * each connection costs two (socket, pidfd), so CONNS connections run
	 * it out many times over. */
	e2e_kill_wcd(&gx);
	e2e_wcd_nofile = 32;
	e2e_start_wcd(&gx, NULL);
	fds = e2e_fd_count(gx.wcd);
	printf("wcd holds %d of its 32 descriptors\n", fds);
	for (int i = 0; i < CONNS; i++)
		conns[i] = e2e_raw_connect(gx.sock);

	/* STATUS still answers (its timeout bounds the wait) */
	o.socket = gx.sock;
	o.timeout_ms = 10000;
	if (wc_connect(&o, &c, &e) || wc_status(c, &s, &e)) {
		e2e_show_log(gx.log);
		T_FAIL("STATUS after the shortage: %s", e.msg);
	}
	wc_close(c);
	j = json_loads(s, 0, NULL);
	free(s);
	T_ASSERT(j);
	cn = json_object_get(j, "connections");
	printf("connections: fd_shortages %lld, shed %lld\n",
	       (long long)json_integer_value(json_object_get(cn, "fd_shortages")),
	       (long long)json_integer_value(json_object_get(cn, "shed")));
	T_CMP_INT(json_integer_value(json_object_get(cn, "fd_shortages")), >=, 1);
	T_CMP_INT(json_integer_value(json_object_get(cn, "shed")), >=, 1);
	json_decref(j);
	/* the oldest were the ones closed: conns[0] sees its end of file */
	{
		struct pollfd p = { conns[0], POLLIN, 0 };
		char b;

		T_EQ_INT(poll(&p, 1, 10000), 1);
		T_EQ_INT(read(conns[0], &b, 1), 0);
	}
	for (int i = 0; i < CONNS; i++) {
		struct pollfd p = { conns[i], POLLIN, 0 };

		shed += poll(&p, 1, 0) == 1;
		close(conns[i]);
	}
	printf("%d of %d idle connections were closed for descriptors\n",
	       shed, CONNS);
	{
		char cmd[512];

		snprintf(cmd, sizeof(cmd),
			 "grep -c 'out of descriptors' '%s' >/dev/null", gx.log);
		if (system(cmd))
			T_FAIL("no 'out of descriptors' line in the log");
	}
	printf("ok\n");
	return 0;
}
