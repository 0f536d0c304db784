/* SPDX-License-Identifier: MIT */
/*
 * libwcache against a small fake daemon built from proto/wire (a forked
 * child serving memfd pools): connect, HELLO (OK, mismatch with the field
 * list, refusal, garbage), a paged manifest, ATTACH over two frames with
 * SCM_RIGHTS, lookup, verify (and a wrong hash caught), read-only mappings
 * (a write faults), notices queued behind replies, PING/STATUS, and the
 * daemon's death (pidfd fires, bytes still verify, detach still works).
 * Needs no wcd; the end-to-end tests with a real wcd are client_e2e_*.
 */
#include "client_fakesrv.h"

/* --- the client side ---------------------------------------------------- */

static struct wc_conn *conn(const char *scenario)
{
	struct wc_connect_opts o = { .socket = fake_sock, .label = scenario,
				     .device = "host:fake", .timeout_ms = 5000 };
	struct wc_conn *c;
	struct wc_error e;

	if (wc_connect(&o, &c, &e))
		T_FAIL("connect: %s", e.msg);
	return c;
}

static void check_bytes(const struct wc_model *m)
{
	for (unsigned t = 0; t < NT; t++) {
		const struct wc_tensor *x =
			wc_tensor_find(m, fake_tensors[t].name);
		const uint8_t *b;

		T_ASSERT(x);
		T_EQ_STR(x->dtype, fake_tensors[t].dtype);
		T_EQ_INT(x->ndim, fake_tensors[t].ndim);
		T_EQ_U64(x->shape[0], fake_tensors[t].shape[0]);
		T_EQ_U64(x->bytes, fake_tensors[t].bytes);
		T_EQ_INT(x->pool, fake_tensors[t].pool);
		b = x->ptr;
		for (uint64_t i = 0; i < x->bytes; i++)
			if (b[i] != fake_tbyte(t, i))
				T_FAIL("tensor %s byte %llu: %u != %u", x->name,
				       (unsigned long long)i, b[i],
				       fake_tbyte(t, i));
	}
}

static void test_attach(void)
{
	struct wc_conn *c = conn("plain");
	struct wc_attach_times tm;
	struct wc_pool_view pv;
	const struct wc_tensor *t;
	struct wc_model *m, *m2;
	struct wc_info in;
	struct wc_error e;
	uint64_t bad = 99;
	char *json;
	int st;
	pid_t k;

	T_EQ_INT(wc_daemon_pid(c), fake_srv_pid);
	T_CMP_INT(wc_daemon_fd(c), >=, 0);
	/* attach before hello is refused locally */
	T_EQ_INT(wc_attach(c, 0, &m, NULL, &e), -EINVAL);
	T_HAS(e.msg, "wc_hello");
	if (wc_hello(c, NULL, &in, &e))
		T_FAIL("hello: %s", e.msg);
	T_EQ_INT(in.pid, fake_srv_pid);
	T_EQ_U64(in.version, 3);
	T_EQ_STR(in.model, "/fake/model");
	T_EQ_STR(in.device, "host-fake");
	T_EQ_INT(in.mem, WC_MEM_HOST);
	T_EQ_INT(strlen(in.identity), 32);
	if (wc_attach(c, 0, &m, &tm, &e))
		T_FAIL("attach: %s", e.msg);
	T_EQ_U64(wc_tensor_count(m), NT);
	T_EQ_INT(wc_pool_count(m), 2);
	T_OK(wc_pool_at(m, 1, &pv));
	T_EQ_U64(pv.size, 4096);
	T_EQ_INT(pv.writable, 0);
	T_EQ_INT(wc_pool_at(m, 2, &pv), -EINVAL);
	T_CMP_INT(tm.manifest_ns, >, 0);
	T_CMP_INT(tm.map_ns, >, 0);
	/* manifest order survives paging */
	for (unsigned i = 0; i < NT; i++)
		T_EQ_STR(wc_tensor_at(m, i)->name, fake_tensors[i].name);
	T_ASSERT(wc_tensor_at(m, NT) == NULL);
	check_bytes(m);
	T_ASSERT(wc_tensor_find(m, "nope") == NULL);
	T_EQ_INT(wc_lookup(m, "nope", &t, &e), -ENOENT);
	T_HAS(e.msg, "'nope' is not in the attached model");
	T_OK(wc_lookup(m, "lm_head.weight", &t, &e));
	T_EQ_INT(wc_verify(m, &bad, &e), 0);
	T_EQ_U64(bad, 0);
	T_OK(wc_verify_tensor(m, t, &e));
	{
		struct wc_tensor foreign = *t;

		T_EQ_INT(wc_verify_tensor(m, &foreign, &e), -EINVAL);
		T_HAS(e.msg, "not one of this model's");
	}
	T_EQ_INT(wc_attach(c, 0x80, &m2, NULL, &e), -EINVAL);
	T_HAS(e.msg, "unknown flags 0x80");
	/* a write through the read-only mapping faults */
	k = fork();
	if (!k) {
		/* the default action, not a sanitizer's handler */
		signal(SIGSEGV, SIG_DFL);
		*(volatile uint8_t *)t->ptr = 1;
		_exit(0);
	}
	T_EQ_INT(waitpid(k, &st, 0), k);
	T_ASSERT(WIFSIGNALED(st));
	T_EQ_INT(WTERMSIG(st), SIGSEGV);
	T_OK(wc_ping(c, 8, &e));
	T_OK(wc_status(c, &json, &e));
	T_EQ_STR(json, "{\"state\":\"ready\"}");
	free(json);
	T_OK(wc_detach(m, &e));
	/* writable: the daemon's refusal comes back as EROFS */
	T_EQ_INT(wc_attach(c, WC_ATTACH_WRITABLE, &m, NULL, &e), -EROFS);
	T_HAS(e.msg, "sealed");
	T_HAS(e.msg, "READONLY");
	wc_close(c);
}

static void test_manifest_only(void)
{
	struct wc_conn *c = conn("plain");
	struct wc_model *m;
	struct wc_error e;

	T_OK(wc_hello(c, NULL, NULL, &e));
	if (wc_manifest(c, &m, &e))
		T_FAIL("manifest: %s", e.msg);
	T_EQ_U64(wc_tensor_count(m), NT);
	T_ASSERT(wc_tensor_at(m, 0)->ptr == NULL);
	T_EQ_INT(wc_pool_count(m), 0);
	/* wc_close frees it */
	wc_close(c);
}

static void test_badhash(void)
{
	struct wc_conn *c = conn("badhash");
	struct wc_model *m;
	struct wc_error e;
	uint64_t bad = 0;

	T_OK(wc_hello(c, NULL, NULL, &e));
	T_OK(wc_attach(c, 0, &m, NULL, &e));
	T_EQ_INT(wc_verify(m, &bad, &e), -EILSEQ);
	T_EQ_U64(bad, 1);
	T_EQ_INT(e.code, EILSEQ);
	T_HAS(e.msg, "'lm_head.weight'");
	T_HAS(e.msg, "1 of 5 tensors");
	wc_close(c);
}

/* padded_rows comes through to wc_tensor; rows past the pool are refused. */
static void test_padded(void)
{
	struct wc_conn *c = conn("padded");
	struct wc_model *m;
	struct wc_error e;

	T_OK(wc_hello(c, NULL, NULL, &e));
	T_OK(wc_attach(c, 0, &m, NULL, &e));
	T_EQ_U64(wc_tensor_find(m, "model.embed_tokens.weight")->padded_rows, 100);
	T_EQ_U64(wc_tensor_find(m, "model.norm.weight")->padded_rows, 0);
	wc_close(c);
	c = conn("badpad");
	T_OK(wc_hello(c, NULL, NULL, &e));
	T_EQ_INT(wc_attach(c, 0, &m, NULL, &e), -EBADMSG);
	T_HAS(e.msg, "tensor 'model.embed_tokens.weight' (pool 0, offset 0) announces 200 padded rows of 64 bytes, past its pool");
	wc_close(c);
}

/* Bytes of this process's mappings that are inaccessible (---p) or map a
 * pool: what a reserved range or a pool left mapped would add to. */
static uint64_t reserved_bytes(void)
{
	char line[512], perms[8];
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long lo, hi;
	uint64_t n = 0;

	T_ASSERT(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 &&
		    (!strcmp(perms, "---p") || strstr(line, "fake-pool")))
			n += hi - lo;
	fclose(f);
	return n;
}

/* The pools of one attach lie back to back in one reserved range
 * (wc_model_span), apart with WCACHE_TEST_SPREAD=1; a pool that fails to
 * map half-way gives back the range and the pools mapped before it. The
 * layout bytes of two attaches of one layout are equal. */
static void test_span(void)
{
	struct wc_conn *c = conn("plain");
	struct wc_model *m, *m2;
	struct wc_pool_view pv, p0, p1;
	uint64_t off[2] = { 9, 9 };
	struct wc_error e;
	size_t n1, n2;
	char *l1, *l2;
	uint64_t before;

	T_OK(wc_hello(c, NULL, NULL, &e));
	T_OK(wc_attach(c, 0, &m, NULL, &e));
	T_OK(wc_attach(c, 0, &m2, NULL, &e));
	T_EQ_INT(wc_model_span(m, &pv, off, 2), 2);
	T_OK(wc_pool_at(m, 0, &p0));
	T_OK(wc_pool_at(m, 1, &p1));
	T_ASSERT(pv.ptr == p0.ptr);
	T_EQ_U64(off[0], 0);
	T_ASSERT((const char *)p1.ptr == (const char *)p0.ptr + p0.size);
	T_EQ_U64(off[1], p0.size);
	T_EQ_U64(pv.size, p0.size + p1.size);
	T_EQ_INT(pv.writable, 0);
	check_bytes(m);
	n1 = wc_model_layout(m, NULL, 0);
	n2 = wc_model_layout(m2, NULL, 0);
	T_EQ_U64(n1, n2);
	T_ASSERT(n1 > NT * sizeof(struct wc_tensor));
	l1 = calloc(1, n1);
	l2 = calloc(1, n2);
	T_ASSERT(l1 && l2);
	T_EQ_U64(wc_model_layout(m, l1, n1 - 1), n1);   /* too short: not written */
	T_ASSERT(!l1[0]);
	T_EQ_U64(wc_model_layout(m, l1, n1), n1);
	T_EQ_U64(wc_model_layout(m2, l2, n2), n2);
	T_ASSERT(!memcmp(l1, l2, n1));   /* other pointers, the same layout */
	T_ASSERT(wc_tensor_at(m, 0)->ptr != wc_tensor_at(m2, 0)->ptr);
	T_EQ_INT(wc_model_layout_eq(m2, l1, n1), 1);
	T_EQ_INT(wc_model_layout_eq(m2, l1, n1 - 1), 0);
	l1[n1 - 2] ^= 1;                 /* a name's last letter */
	T_EQ_INT(wc_model_layout_eq(m2, l1, n1), 0);
	l1[n1 - 2] ^= 1;
	l1[offsetof(struct wc_tensor, offset)] ^= 1;   /* entry 0's offset */
	T_EQ_INT(wc_model_layout_eq(m2, l1, n1), 0);
	l1[offsetof(struct wc_tensor, offset)] ^= 1;
	T_EQ_INT(wc_model_layout_eq(m2, l1, n1), 1);
	free(l1);
	free(l2);
	T_OK(wc_detach(m2, &e));
	T_OK(wc_detach(m, &e));
	setenv("WCACHE_TEST_SPREAD", "1", 1);
	T_OK(wc_attach(c, 0, &m, NULL, &e));
	T_EQ_INT(wc_model_span(m, &pv, off, 2), -ENOENT);
	check_bytes(m);
	T_OK(wc_detach(m, &e));
	unsetenv("WCACHE_TEST_SPREAD");
	wc_close(c);

	/* 64 failed attaches: each would leave its 16 KiB range (and pool 0's
	 * mapping) behind, 1 MiB in all; the sanitizers' own mappings move
	 * the count by up to 64 KiB, so allow a quarter of the leak */
	c = conn("shortpool");
	T_OK(wc_hello(c, NULL, NULL, &e));
	T_EQ_INT(wc_attach(c, 0, &m, NULL, &e), -EINVAL);
	before = reserved_bytes();
	for (int k = 0; k < 64; k++) {
		T_EQ_INT(wc_attach(c, 0, &m, NULL, &e), -EINVAL);
		T_HAS(e.msg, "mapping pool 1");
	}
	T_CMP_INT((int64_t)(reserved_bytes() - before), <, 256 << 10);
	wc_close(c);
}

/* A daemon that stops answering: the request times out, and says so. */
static void test_timeout(void)
{
	struct wc_connect_opts o = { .socket = fake_sock, .label = "mute",
				     .timeout_ms = 200 };
	struct wc_conn *c;
	struct wc_error e;

	T_OK(wc_connect(&o, &c, &e));
	T_OK(wc_hello(c, NULL, NULL, &e));
	T_EQ_INT(wc_ping(c, 1, &e), -ETIMEDOUT);
	T_HAS(e.msg, "within 200 ms");
	wc_close(c);
}

/* Over 64 MiB wc_verify runs on several threads: a clean model passes and
 * one bad tensor among four is found and named (the lowest bad index). */
static void test_big_verify(void)
{
	static const char *const sc[2] = { "big", "bigbad" };

	for (int k = 0; k < 2; k++) {
		struct wc_conn *c = conn(sc[k]);
		struct wc_model *m;
		struct wc_error e;
		uint64_t bad = 99;
		const uint8_t *p;

		T_OK(wc_hello(c, NULL, NULL, &e));
		if (wc_attach(c, 0, &m, NULL, &e))
			T_FAIL("attach %s: %s", sc[k], e.msg);
		T_EQ_U64(wc_tensor_count(m), 4);
		p = wc_tensor_find(m, "big.3")->ptr;
		T_EQ_INT(p[BIG - 1], fake_tbyte(3, BIG - 1));
		if (!k) {
			T_OK(wc_verify(m, &bad, &e));
			T_EQ_U64(bad, 0);
		} else {
			T_EQ_INT(wc_verify(m, &bad, &e), -EILSEQ);
			T_EQ_U64(bad, 1);
			T_HAS(e.msg, "1 of 4 tensors");
			T_HAS(e.msg, "'big.2'");
			T_OK(wc_verify_tensor(m, wc_tensor_find(m, "big.1"), &e));
		}
		wc_close(c);
	}
}

static void test_notice(void)
{
	struct wc_conn *c = conn("notice");
	struct wc_notice n;
	struct wc_error e;

	T_EQ_INT(wc_notice_read(c, &n, &e), 0);
	T_OK(wc_hello(c, NULL, NULL, &e));
	/* the notice arrives before the PING reply and is queued */
	T_OK(wc_ping(c, 1, &e));
	T_EQ_INT(wc_notice_read(c, &n, &e), 1);
	T_EQ_INT(n.kind, WC_NOTICE_VERSION);
	T_EQ_U64(n.version, 4);
	T_HAS(n.msg, "re-attach");
	T_EQ_INT(wc_notice_read(c, &n, &e), 0);
	wc_close(c);
}

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	T_ASSERT(fd >= 0);
	T_ASSERT(write(fd, p, n) == (ssize_t)n);
	close(fd);
}

/* A one-tensor llama model directory, enough for the identity. */
static void tiny_model(const char *mdir)
{
	static const char cfg[] = "{\"architectures\":[\"LlamaForCausalLM\"],\"torch_dtype\":\"bfloat16\"}";
	static const char hdr[] = "{\"model.norm.weight\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}";
	uint8_t buf[256] = { 0 };
	uint64_t n = sizeof(hdr) - 1;
	char path[256];

	T_OK(mkdir(mdir, 0700) ? -errno : 0);
	snprintf(path, sizeof(path), "%s/config.json", mdir);
	write_file(path, cfg, sizeof(cfg) - 1);
	memcpy(buf, &n, 8);
	memcpy(buf + 8, hdr, n);
	snprintf(path, sizeof(path), "%s/model.safetensors", mdir);
	write_file(path, buf, 8 + n + 8);
}

static void test_mismatch(void)
{
	struct wc_conn *c = conn("plain");
	struct wc_expect x = { .tp_size = 2, .tp_rank = 1 };
	char mdir[128];
	struct wc_error e;

	snprintf(mdir, sizeof(mdir), "%s/model", fake_dir);
	tiny_model(mdir);
	x.model_dir = mdir;
	T_EQ_INT(wc_hello(c, &x, NULL, &e), -ESTALE);
	T_EQ_INT(e.code, ESTALE);
	T_HAS(e.msg, "identity mismatch");
	T_HAS(e.msg, "2 field(s) differ (model_path, tp_size)");
	T_HAS(e.msg, "tp_size: daemon=1 engine=2");
	T_HAS(e.msg, "model_path: daemon=/fake/model engine=/");
	/* by socket alone the library cannot name the device in an identity */
	{
		struct wc_connect_opts so = { .socket = fake_sock,
						.label = "plain" };
		struct wc_conn *c2;

		T_OK(wc_connect(&so, &c2, &e));
		T_EQ_INT(wc_hello(c2, &x, NULL, &e), -EINVAL);
		T_HAS(e.msg, "wc_connect_opts.device");
		wc_close(c2);
	}
	/* a bad rank is caught before anything is sent */
	x.tp_rank = 2;
	T_EQ_INT(wc_hello(c, &x, NULL, &e), -EINVAL);
	T_HAS(e.msg, "not a valid rank");
	/* a model directory that does not exist */
	x.tp_rank = 0;
	x.model_dir = "/nonexistent/model";
	T_CMP_INT(wc_hello(c, &x, NULL, &e), <, 0);
	T_HAS(e.msg, "cannot compute the engine's identity");
	wc_close(c);
}

static void test_refusals(void)
{
	struct wc_connect_opts o = { .socket = "/nonexistent/wc.sock" };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct wc_conn *c;
	struct wc_model *m;
	struct wc_error e;
	char stale[100];
	int fd;

	T_EQ_INT(wc_connect(&o, &c, &e), -ENOENT);
	T_HAS(e.msg, "no wcache daemon");
	T_HAS(e.msg, "/nonexistent/wc.sock");
	/* a socket file nobody listens on */
	snprintf(stale, sizeof(stale), "%s/stale.sock", fake_dir);
	memcpy(sa.sun_path, stale, strlen(stale) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	T_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0);
	close(fd);
	o.socket = stale;
	T_EQ_INT(wc_connect(&o, &c, &e), -ECONNREFUSED);
	T_HAS(e.msg, "stale");
	/* no device, no socket */
	o.socket = NULL;
	T_EQ_INT(wc_connect(&o, &c, &e), -EINVAL);
	/* a device name the path rules reject */
	o.device = "host:bad/name";
	T_CMP_INT(wc_connect(&o, &c, &e), <, 0);
	T_HAS(e.msg, "bad/name");
	/* a socket path longer than sun_path */
	{
		char longp[300];

		memset(longp, 'a', sizeof(longp) - 1);
		longp[0] = '/';
		longp[sizeof(longp) - 1] = '\0';
		o.device = NULL;
		o.socket = longp;
		T_EQ_INT(wc_connect(&o, &c, &e), -ENAMETOOLONG);
		T_HAS(e.msg, "shorter");
		o.socket = NULL;
	}
	/* a socket template without {device} */
	setenv("WCACHE_SOCKET_TEMPLATE", "/run/wcache/nodevice", 1);
	o.device = "host:x";
	T_CMP_INT(wc_connect(&o, &c, &e), <, 0);
	T_HAS(e.msg, "{device}");
	unsetenv("WCACHE_SOCKET_TEMPLATE");
	/* by device through a runtime dir: the name rules of proto/base/paths.h */
	o.runtime_dir = fake_dir;
	o.device = "host:nobody";
	T_EQ_INT(wc_connect(&o, &c, &e), -ENOENT);
	T_HAS(e.msg, "/host-nobody.sock");
	o.runtime_dir = NULL;
	/* the daemon's refusal (an ERROR with id 0) keeps its message */
	c = conn("refuse");
	T_EQ_INT(wc_hello(c, NULL, NULL, &e), -EACCES);
	T_HAS(e.msg, "uid 65534 is not allowed");
	wc_close(c);
	/* garbage instead of a reply */
	c = conn("garbage");
	T_EQ_INT(wc_hello(c, NULL, NULL, &e), -EBADMSG);
	T_HAS(e.msg, "bad frame");
	T_EQ_INT(wc_ping(c, 1, &e), -EPIPE);
	wc_close(c);
	/* more tensors than the client's bound: refused before allocating */
	c = conn("huge");
	T_OK(wc_hello(c, NULL, NULL, &e));
	T_EQ_INT(wc_attach(c, 0, &m, NULL, &e), -E2BIG);
	T_HAS(e.msg, "limit");
	wc_close(c);
}

/* A daemon that refuses at accept and closes before the client's first
 * request: the client reports the refusal, not a broken pipe. */
static void test_refuse_at_accept(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct wc_connect_opts o = { .timeout_ms = 5000 };
	char path[100];
	struct wc_conn *c;
	struct wc_error e;
	int pfd[2];
	pid_t k;
	char ok;

	snprintf(path, sizeof(path), "%s/refuse.sock", fake_dir);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	T_OK(pipe(pfd) ? -errno : 0);
	k = fork();
	T_ASSERT(k >= 0);
	if (!k) {
		int lfd = socket(AF_UNIX, SOCK_STREAM, 0), fd;
		struct wire_put w;

		if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    listen(lfd, 4) || write(pfd[1], "k", 1) != 1)
			_exit(2);
		wire_put_init(&w);
		for (int i = 0; i < 2; i++) {
			fd = accept(lfd, NULL, NULL);
			wire_error_frame(&w, 0, WIRE_E_PERM,
					 "uid 65534 may not use this daemon: start wcd with --allow-uid 65534",
					 NULL);
			fake_srv_send(fd, &w, NULL, 0);
			close(fd);
		}
		_exit(0);
	}
	close(pfd[1]);
	T_EQ_INT(read(pfd[0], &ok, 1), 1);
	close(pfd[0]);
	o.socket = path;
	T_OK(wc_connect(&o, &c, &e));
	/* an engine polling its notice fd sees the refusal there too */
	{
		struct pollfd p = { .fd = wc_notice_fd(c), .events = POLLIN };
		struct wc_notice n;

		T_EQ_INT(poll(&p, 1, 5000), 1);
		T_EQ_INT(wc_notice_read(c, &n, &e), -EACCES);
		T_HAS(e.msg, "refused this connection (PERM)");
		wc_close(c);
	}
	T_OK(wc_connect(&o, &c, &e));
	T_EQ_INT(waitpid(k, NULL, 0), k);   /* it has closed by now */
	T_EQ_INT(wc_hello(c, NULL, NULL, &e), -EACCES);
	T_HAS(e.msg, "may not use this daemon");
	wc_close(c);
}

static void test_daemon_death(void)
{
	struct wc_conn *c = conn("plain");
	struct pollfd p;
	struct wc_model *m;
	struct wc_error e;
	uint64_t bad = 1;

	T_OK(wc_hello(c, NULL, NULL, &e));
	T_OK(wc_attach(c, 0, &m, NULL, &e));
	p.fd = wc_daemon_fd(c);
	p.events = POLLIN;
	T_EQ_INT(poll(&p, 1, 0), 0);
	kill(fake_srv_pid, SIGKILL);
	T_EQ_INT(poll(&p, 1, 1000), 1);
	T_ASSERT(p.revents & POLLIN);
	waitpid(fake_srv_pid, NULL, 0);
	fake_srv_pid = 0;
	/* the mapping outlives the daemon */
	check_bytes(m);
	T_OK(wc_verify(m, &bad, &e));
	T_EQ_U64(bad, 0);
	T_EQ_INT(wc_ping(c, 1, &e), -EPIPE);
	T_HAS(e.msg, "reconnect");
	T_OK(wc_detach(m, &e));
	wc_close(c);
}

int main(void)
{
	T_ASSERT(mkdtemp(strcpy(fake_dir, "/tmp/wct-fake.XXXXXX")));
	atexit(fake_cleanup);
	signal(SIGPIPE, SIG_IGN);
	snprintf(fake_sock, sizeof(fake_sock), "%s/fake.sock", fake_dir);
	fake_srv_start();
	test_attach();
	test_manifest_only();
	test_badhash();
	test_padded();
	test_span();
	test_big_verify();
	test_notice();
	test_timeout();
	test_mismatch();
	test_refusals();
	test_refuse_at_accept();
	test_daemon_death();
	printf("client_fake: ok\n");
	return 0;
}
