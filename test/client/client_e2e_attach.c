/* SPDX-License-Identifier: MIT */
/*
 * 16 client processes attach to one real wcd (host backend, a wcgen tiny
 * model) at the same time, each with the engine's identity (so the library
 * and the daemon compute identities the same way). While all 16 hold their
 * leases, STATUS lists 16 clients; each then compares every tensor's mapped
 * bytes with the safetensors file (read here, through proto/model) by byte
 * compare and by hash, and runs wc_verify. After they exit, their leases
 * are gone from STATUS. wcctl manifest lists the same tensors and hashes.
 * Half the clients attach through wc_hello_attach (HELLO and ATTACH in one
 * call), and one whose identity differs gets HELLO's error from it.
 */
#include "client_util.h"

#define NCLIENTS 16

/* One client: attach, report, wait for the go, compare, detach. */
static int client_main(const struct e2e *x, int ready_fd, int go_fd,
		       bool use_both)
{
	struct wc_expect ex = { .model_dir = x->model, .tp_size = 1 };
	struct wc_conn *c = e2e_connect(x);
	struct wc_model *m;
	struct wc_error e;
	uint64_t bad = 1;
	char b;

	if (use_both) {         /* HELLO and ATTACH in one call */
		if (wc_hello_attach(c, &ex, NULL, 0, &m, NULL, &e))
			T_FAIL("client %d: hello_attach: %s", (int)getpid(), e.msg);
	} else {
		if (wc_hello(c, &ex, NULL, &e))
			T_FAIL("client %d: hello: %s", (int)getpid(), e.msg);
		if (wc_attach(c, 0, &m, NULL, &e))
			T_FAIL("client %d: attach: %s", (int)getpid(), e.msg);
	}
	T_EQ_INT(write(ready_fd, "a", 1), 1);
	T_EQ_INT(read(go_fd, &b, 1), 1);
	e2e_compare_all(x, m);
	if (wc_verify(m, &bad, &e))
		T_FAIL("client %d: verify: %s", (int)getpid(), e.msg);
	T_EQ_U64(bad, 0);
	T_OK(wc_detach(m, &e));
	wc_close(c);
	return 0;
}

static void check_manifest_cmd(struct e2e *x, const struct wc_model *m)
{
	char wcctl[600], out[160];
	char *argv[] = { wcctl, "manifest", "--device", x->device,
			 "--runtime-dir", x->rundir, "--json", NULL };
	json_error_t je;
	json_t *j, *ts, *v;
	size_t i;

	snprintf(wcctl, sizeof(wcctl), "%s/wcctl", x->bin);
	snprintf(out, sizeof(out), "%s/manifest.json", x->dir);
	T_EQ_INT(e2e_run(out, argv), 0);
	j = json_load_file(out, 0, &je);
	if (!j)
		T_FAIL("wcctl manifest --json is not JSON: %s", je.text);
	ts = json_object_get(j, "tensors");
	T_EQ_U64(json_array_size(ts), wc_tensor_count(m));
	json_array_foreach(ts, i, v) {
		const struct wc_tensor *t = wc_tensor_at(m, i);
		char hex[WC_HEX_LEN];

		base_hash_hex(t->hash, hex);
		T_EQ_STR(json_string_value(json_object_get(v, "name")), t->name);
		T_EQ_STR(json_string_value(json_object_get(v, "dtype")), t->dtype);
		T_EQ_STR(json_string_value(json_object_get(v, "xxh3_128")), hex);
		T_EQ_U64(json_integer_value(json_object_get(v, "bytes")), t->bytes);
		T_EQ_U64(json_array_size(json_object_get(v, "shape")), t->ndim);
	}
	json_decref(j);
}

int main(void)
{
	static struct e2e x;   /* outlives main for the atexit cleanup */
	int ready[2], go[2];
	pid_t kids[NCLIENTS];
	struct wc_conn *c;
	struct wc_model *m;
	struct wc_error e;
	uint64_t end;
	json_t *j;
	char b;

	e2e_init(&x, "attach16");
	e2e_start_wcd(&x, NULL);
	T_OK(pipe2(ready, O_CLOEXEC) ? -errno : 0);
	T_OK(pipe2(go, O_CLOEXEC) ? -errno : 0);
	for (int i = 0; i < NCLIENTS; i++) {
		kids[i] = fork();
		T_ASSERT(kids[i] >= 0);
		if (!kids[i]) {
			close(ready[0]);
			close(go[1]);
			_exit(client_main(&x, ready[1], go[0], i % 2));
		}
	}
	close(ready[1]);
	close(go[0]);
	for (int i = 0; i < NCLIENTS; i++)
		if (read(ready[0], &b, 1) != 1)
			T_FAIL("only %d of %d clients attached", i, NCLIENTS);
	/* all 16 hold a lease now */
	for (int i = 0; i < NCLIENTS; i++) {
		int leases = 0;

		if (!e2e_status_has_pid(&x, kids[i], &leases))
			T_FAIL("STATUS does not list attached client pid %d", (int)kids[i]);
		T_EQ_INT(leases, 1);
	}
	for (int i = 0; i < NCLIENTS; i++)
		T_EQ_INT(write(go[1], "g", 1), 1);
	for (int i = 0; i < NCLIENTS; i++) {
		int st;

		T_EQ_INT(waitpid(kids[i], &st, 0), kids[i]);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			T_FAIL("client %d failed (status 0x%x)", (int)kids[i], st);
	}
	/* their leases are gone (the daemon sees the disconnects) */
	end = e2e_now_ms() + 5000;
	for (int i = 0; i < NCLIENTS; i++)
		while (e2e_status_has_pid(&x, kids[i], NULL)) {
			if (e2e_now_ms() > end)
				T_FAIL("client %d still listed in STATUS 5 s after it exited", (int)kids[i]);
			usleep(10000);
		}
	j = e2e_status(&x);
	T_EQ_STR(json_string_value(json_object_get(j, "state")), "ready");
	T_EQ_U64(json_integer_value(json_object_get(j, "tensors")), x.m.ntensors + 8); /* + qkv, gate_up views */
	json_decref(j);
	/* wc_hello_attach: a HELLO refused is its error, and no model */
	{
		struct wc_expect other = { .model_dir = x.model, .tp_size = 2, .tp_rank = 1 };

		c = e2e_connect(&x);
		m = NULL;
		T_EQ_INT(wc_hello_attach(c, &other, NULL, 0, &m, NULL, &e), -ESTALE);
		T_ASSERT(m == NULL);
		T_ASSERT(strstr(e.msg, "tp_size"));
		wc_close(c);
	}
	/* the admin listing agrees with what a client sees */
	c = e2e_connect(&x);
	T_OK(wc_hello(c, NULL, NULL, &e));
	T_OK(wc_manifest(c, &m, &e));
	check_manifest_cmd(&x, m);
	wc_close(c);
	printf("%d clients attached and matched the file bytes of %u tensors\n",
	       NCLIENTS, x.m.ntensors);
	return 0;
}
