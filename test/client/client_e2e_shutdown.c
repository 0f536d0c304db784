/* SPDX-License-Identifier: MIT */
/*
 * wc_api_version and wc_shutdown against a real wcd (host backend, wcgen
 * tiny): the version is WC_API_VERSION; SHUTDOWN is answered, an attached
 * engine gets WC_NOTICE_SHUTDOWN on its notice fd and keeps a mapping that
 * still verifies, the daemon exits 0 having removed its socket and ready
 * file, and requests on the closed connection fail with EPIPE.
 */
#include <poll.h>

#include "client_util.h"

int main(void)
{
	static struct e2e x;   /* outlives main for the atexit cleanup */
	struct wc_conn *admin, *engine;
	struct wc_connect_opts o = { 0 };
	struct wc_model *m;
	struct wc_notice n;
	struct wc_error e;
	struct pollfd p;
	uint64_t bad = 1;
	int st = 0, r;

	T_EQ_INT(wc_api_version(), WC_API_VERSION);
	T_EQ_INT(WC_API_VERSION, 2);

	e2e_init(&x, "shutdown");
	e2e_start_wcd(&x, NULL);
	engine = e2e_connect(&x);
	if (wc_hello(engine, NULL, NULL, &e) || wc_attach(engine, 0, &m, NULL, &e))
		T_FAIL("attach: %s", e.msg);
	p.fd = wc_notice_fd(engine);
	p.events = POLLIN;
	T_CMP_INT(p.fd, >=, 0);
	T_EQ_INT(poll(&p, 1, 0), 0);

	admin = e2e_connect(&x);
	T_OK(wc_shutdown(admin, &e));
	/* the daemon exits cleanly on its own (waited on, not timed) */
	T_EQ_INT(waitpid(x.wcd, &st, 0), x.wcd);
	x.wcd = 0;
	T_ASSERT(WIFEXITED(st));
	T_EQ_INT(WEXITSTATUS(st), 0);
	T_ASSERT(access(x.sock, F_OK) && errno == ENOENT);
	T_ASSERT(access(x.ready, F_OK) && errno == ENOENT);

	/* the engine was told, and its weights stay mapped */
	T_EQ_INT(poll(&p, 1, 5000), 1);
	r = wc_notice_read(engine, &n, &e);
	T_EQ_INT(r, 1);
	T_EQ_INT(n.kind, WC_NOTICE_SHUTDOWN);
	T_HAS(n.msg, "shutting down");
	e2e_compare_all(&x, m);
	T_OK(wc_verify(m, &bad, &e));
	T_EQ_U64(bad, 0);
	T_EQ_INT(wc_ping(engine, 1, &e), -EPIPE);
	T_EQ_INT(wc_shutdown(admin, &e), -EPIPE);
	T_OK(wc_detach(m, &e));
	wc_close(engine);
	wc_close(admin);

	/* nothing serves the device any more */
	o.device = x.device;
	o.runtime_dir = x.rundir;
	T_EQ_INT(wc_connect(&o, &admin, &e), -ENOENT);
	printf("shutdown: answered, engine told, daemon exited 0, files gone\n");
	return 0;
}
