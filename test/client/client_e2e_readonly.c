/* SPDX-License-Identifier: MIT */
/*
 * A writing client cannot change a served byte (real wcd, host backend):
 *  - a store through the mapping faults (SIGSEGV, in a forked child);
 *  - mprotect(PROT_WRITE) on the mapping is refused (the memfd is sealed);
 *  - a read-write attach is refused with a message that says why;
 * and afterwards every byte still equals the file's.
 */
#include <sys/mman.h>

#include "client_util.h"

int main(void)
{
	static struct e2e x;   /* outlives main for the atexit cleanup */
	struct wc_conn *c;
	struct wc_model *m, *m2;
	const struct wc_tensor *t;
	struct wc_pool_view pv;
	struct wc_error e;
	uint64_t bad = 1;
	int st;
	pid_t k;

	e2e_init(&x, "readonly");
	e2e_start_wcd(&x, NULL);
	c = e2e_connect(&x);
	T_OK(wc_hello(c, NULL, NULL, &e));
	if (wc_attach(c, 0, &m, NULL, &e))
		T_FAIL("attach: %s", e.msg);
	T_ASSERT(wc_tensor_count(m) > 0);
	t = wc_tensor_at(m, 0);
	T_OK(wc_pool_at(m, 0, &pv));
	T_EQ_INT(pv.writable, 0);

	k = fork();
	T_ASSERT(k >= 0);
	if (!k) {
		signal(SIGSEGV, SIG_DFL);
		*(volatile uint8_t *)t->ptr ^= 0xff;
		_exit(0);
	}
	T_EQ_INT(waitpid(k, &st, 0), k);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
		T_FAIL("a write to the mapping did not fault (status 0x%x)", st);

	/* page-aligned pool base: asking for write access is refused */
	T_EQ_INT(mprotect((void *)pv.ptr, 4096, PROT_READ | PROT_WRITE), -1);
	T_EQ_INT(errno, EACCES);

	T_EQ_INT(wc_attach(c, WC_ATTACH_WRITABLE, &m2, NULL, &e), -EROFS);
	T_HAS(e.msg, "read-only");
	fprintf(stderr, "read-write attach refused as expected: %s\n", e.msg);

	e2e_compare_all(&x, m);
	T_OK(wc_verify(m, &bad, &e));
	T_EQ_U64(bad, 0);
	T_OK(wc_detach(m, &e));
	wc_close(c);
	printf("writes refused, bytes intact\n");
	return 0;
}
