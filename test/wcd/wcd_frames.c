/* SPDX-License-Identifier: MIT */
/*
 * wcd's protocol handling, frame by frame, against a real daemon on a wcgen
 * model: every malformed frame (bad magic, over the cap, truncated header
 * and payload, unknown type, a length past the payload, another version, a
 * reply flag) gets an ERROR with the right code and a close, while another
 * client on the same daemon keeps being served; state errors (ATTACH before
 * HELLO, unknown lease, read-write attach, reserved requests) get an ERROR
 * and the connection stays; ATTACH delivers a sealed memfd whose bytes hash
 * as the manifest says; a SIGKILLed client's lease leaves STATUS; SHUTDOWN
 * notifies the other clients and unpublishes.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hash.h"
#include "t.h"
#include "t_wait.h"
#include "wire.h"

static char dir[] = "/tmp/wct-frames.XXXXXX";
static char sockp[400], readyp[400], bin[512];
static pid_t wcd_pid = -1;
static char err[512];

static void cleanup(void)
{
	char cmd[600];

	if (wcd_pid > 0) {
		kill(wcd_pid, SIGKILL);
		waitpid(wcd_pid, NULL, 0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		fprintf(stderr, "cleanup failed\n");
}

static void start_wcd(void)
{
	char cmd[1200], model[300], rt[300], log[300];

	snprintf(model, sizeof(model), "%s/model", dir);
	snprintf(rt, sizeof(rt), "%s/rt", dir);
	snprintf(log, sizeof(log), "%s/wcd.log", dir);
	snprintf(cmd, sizeof(cmd), "%s/wcgen tiny --out %s >/dev/null", bin,
		 model);
	T_EQ_INT(system(cmd), 0);
	snprintf(sockp, sizeof(sockp), "%s/host-frames.sock", rt);
	snprintf(readyp, sizeof(readyp), "%s/host-frames.ready", rt);
	wcd_pid = fork();
	T_ASSERT(wcd_pid >= 0);
	if (wcd_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		char path[600];

		dup2(fd, 2);
		snprintf(path, sizeof(path), "%s/wcd", bin);
		execl(path, "wcd", "--model", model, "--device", "host:frames",
		      "--runtime-dir", rt, (char *)NULL);
		_exit(127);
	}
	T_EQ_INT(t_wait_file(readyp, wcd_pid, 20000), 0);
}

static int conn(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	strcpy(sa.sun_path, sockp);
	T_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	T_EQ_INT(send(fd, p, n, MSG_NOSIGNAL), (long long)n);
}

static void send_frame(int fd, struct wire_put *w)
{
	T_OK(wire_frame_end(w, err));
	send_all(fd, w->buf, w->len);
}

/* Receives one frame: header into h, payload into *p (malloc'ed), fds. */
static int recv_frame(int fd, struct wire_hdr *h, uint8_t **p, int *fds,
		      unsigned *nfds)
{
	uint8_t hdr[WIRE_HDR_LEN];
	char cbuf[CMSG_SPACE(sizeof(int) * 253)];
	struct iovec iov = { hdr, sizeof(hdr) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	ssize_t n = recvmsg(fd, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
	struct cmsghdr *c;
	size_t got = 0;

	if (n == 0)
		return 0;
	T_EQ_INT(n, WIRE_HDR_LEN);
	if (nfds)
		*nfds = 0;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		unsigned k = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

		T_ASSERT(fds && nfds);
		memcpy(fds, CMSG_DATA(c), k * sizeof(int));
		*nfds = k;
	}
	T_OK(wire_hdr_decode(hdr, sizeof(hdr), h, err));
	*p = malloc(h->len + 1);
	while (got < h->len) {
		n = recv(fd, *p + got, h->len - got, 0);
		T_CMP_INT(n, >, 0);
		got += (size_t)n;
	}
	return 1;
}

/* Expects an ERROR of code (with text in its message), then a close if
 * closes is set. */
static void expect_error(int fd, uint32_t code, const char *text, bool closes)
{
	struct wire_hdr h;
	struct wire_error e;
	uint8_t *p;
	char buf[8];

	T_EQ_INT(recv_frame(fd, &h, &p, NULL, NULL), 1);
	T_EQ_STR(wire_type_name(h.type), "ERROR");
	T_OK(wire_error_get(p, h.len, &e, err));
	free(p);
	if (e.code != code)
		T_FAIL("error code %s, want %s: %s", wire_errcode_name(e.code),
		       wire_errcode_name(code), e.msg);
	if (text)
		T_HAS(e.msg, text);
	if (closes)
		T_EQ_INT(recv(fd, buf, sizeof(buf), 0), 0);
}

static void ping(int fd)
{
	struct wire_put w;
	struct wire_hdr h;
	uint8_t *p;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_PING, 0, 4242);
	wire_put_bytes(&w, "hello", 5);
	send_frame(fd, &w);
	wire_put_free(&w);
	T_EQ_INT(recv_frame(fd, &h, &p, NULL, NULL), 1);
	T_EQ_INT(h.type, WIRE_PING);
	T_EQ_INT(h.flags, WIRE_F_REPLY);
	T_EQ_U64(h.id, 4242);
	T_EQ_INT(h.len, 5);
	T_ASSERT(!memcmp(p, "hello", 5));
	free(p);
}

static void hello(int fd)
{
	struct wire_hello hl = { .proto_version = WIRE_VERSION,
				 .flags = WIRE_HELLO_NO_IDENTITY };
	struct wire_hello_reply r;
	struct wire_put w;
	struct wire_hdr h;
	uint8_t *p;

	strcpy(hl.label, "wcd_frames");
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_HELLO, 0, 1);
	wire_hello_put(&w, &hl);
	send_frame(fd, &w);
	wire_put_free(&w);
	T_EQ_INT(recv_frame(fd, &h, &p, NULL, NULL), 1);
	T_EQ_INT(h.type, WIRE_HELLO);
	T_OK(wire_hello_reply_get(p, h.len, &r, err));
	T_EQ_INT(r.status, WIRE_HELLO_OK);
	T_EQ_U64(r.tensors, 39 + 8);   /* + qkv_proj, gate_up_proj x 4 layers */
	T_EQ_INT(r.daemon_pid, wcd_pid);
	free(p);
}

/* Sends a raw header (and optional payload bytes), expects an error+close. */
static void bad_frame(uint32_t magic, uint16_t version, uint16_t type,
		      uint32_t flags, uint32_t len, const void *pl, size_t pn,
		      bool half_close, uint32_t code, const char *text)
{
	struct wire_hdr h = { magic, version, type, flags, len, 77 };
	uint8_t raw[WIRE_HDR_LEN];
	int fd = conn();

	wire_hdr_encode(&h, raw);
	send_all(fd, raw, sizeof(raw));
	if (pn)
		send_all(fd, pl, pn);
	if (half_close)
		shutdown(fd, SHUT_WR);
	expect_error(fd, code, text, true);
	close(fd);
}

static json_t *status(int fd)
{
	struct wire_put w;
	struct wire_hdr h;
	const char *js;
	size_t jn;
	uint8_t *p;
	json_t *j;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_STATUS, 0, 9);
	send_frame(fd, &w);
	wire_put_free(&w);
	T_EQ_INT(recv_frame(fd, &h, &p, NULL, NULL), 1);
	T_EQ_INT(h.type, WIRE_STATUS);
	T_OK(wire_status_get(p, h.len, &js, &jn, err));
	j = json_loadb(js, jn, 0, NULL);
	T_ASSERT(j);
	free(p);
	return j;
}

/* The leases STATUS shows for pid, over all its connections (-1: not
 * listed). */
static int leases_of(int fd, pid_t pid)
{
	json_t *j = status(fd), *c;
	size_t i;
	int n = -1;

	json_array_foreach(json_object_get(j, "clients"), i, c)
		if (json_integer_value(json_object_get(c, "pid")) == pid)
			n = (n < 0 ? 0 : n) +
			    (int)json_integer_value(json_object_get(c, "leases"));
	json_decref(j);
	return n;
}

static void test_malformed(int good)
{
	uint8_t junk[64] = { 0 };

	bad_frame(0xdeadbeef, WIRE_VERSION, WIRE_PING, 0, 0, NULL, 0, false,
		  WIRE_E_MALFORMED, "bad frame magic 0xdeadbeef");
	ping(good);
	bad_frame(WIRE_MAGIC, WIRE_VERSION, WIRE_HELLO, 0, WIRE_PAYLOAD_MAX + 1,
		  NULL, 0, false, WIRE_E_TOO_LARGE, "over the limit");
	ping(good);
	/* under the protocol cap, over this daemon's request bound */
	bad_frame(WIRE_MAGIC, WIRE_VERSION, WIRE_HELLO, 0, 64u << 20, NULL, 0,
		  false, WIRE_E_TOO_LARGE, "request limit");
	bad_frame(WIRE_MAGIC, WIRE_VERSION, 99, 0, 0, NULL, 0, false,
		  WIRE_E_TYPE, "unknown frame type 99");
	ping(good);
	bad_frame(WIRE_MAGIC, WIRE_VERSION + 1, WIRE_PING, 0, 0, NULL, 0, false,
		  WIRE_E_VERSION, "protocol version 3");
	bad_frame(WIRE_MAGIC, WIRE_VERSION, WIRE_PING, WIRE_F_REPLY, 0, NULL, 0,
		  false, WIRE_E_TYPE, "reply flag");
	bad_frame(WIRE_MAGIC, WIRE_VERSION, WIRE_NOTICE, 0, 0, NULL, 0, false,
		  WIRE_E_TYPE, "not a request");
	/* truncated payload: 10 of 100 bytes, then the writer closes */
	bad_frame(WIRE_MAGIC, WIRE_VERSION, WIRE_PING, 0, 100, junk, 10, true,
		  WIRE_E_MALFORMED, "10 of 100 payload bytes");
	ping(good);
	/* a HELLO payload shorter than its fields */
	bad_frame(WIRE_MAGIC, WIRE_VERSION, WIRE_HELLO, 0, 3, junk, 3, false,
		  WIRE_E_MALFORMED, "malformed HELLO payload");
	/* a length inside the payload past its end */
	junk[0] = WIRE_VERSION;
	junk[4] = 0xff; junk[5] = 0x7f;
	bad_frame(WIRE_MAGIC, WIRE_VERSION, WIRE_HELLO, 0, 16, junk, 16, false,
		  WIRE_E_MALFORMED, "past the end of the payload");
	/* HELLO asking for another protocol version */
	junk[0] = 9; junk[4] = 0; junk[5] = 0;
	bad_frame(WIRE_MAGIC, WIRE_VERSION, WIRE_HELLO, 0, 12, junk, 12, false,
		  WIRE_E_VERSION, "version 9");
	/* a truncated header */
	{
		int fd = conn();

		send_all(fd, "WCAC\x01", 5);
		shutdown(fd, SHUT_WR);
		expect_error(fd, WIRE_E_MALFORMED, "5 of 24 bytes", true);
		close(fd);
	}
	ping(good);
}

static void test_state_errors(int fd)
{
	struct wire_put w;
	struct wire_attach_req q = { 0, 0 };

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_ATTACH, 0, 2);
	wire_attach_req_put(&w, &q);
	send_frame(fd, &w);
	expect_error(fd, WIRE_E_STATE, "HELLO", false);
	wire_frame_begin(&w, WIRE_MANIFEST, 0, 3);
	wire_put_u64(&w, 0);
	send_frame(fd, &w);
	expect_error(fd, WIRE_E_STATE, "HELLO", false);
	/* lifecycle requests need no HELLO; their own cases: test/life_* */
	wire_frame_begin(&w, WIRE_SLEEP, 0, 4);
	wire_sleep_put(&w, 9);
	send_frame(fd, &w);
	expect_error(fd, WIRE_E_STATE, "sleep level 9 does not exist", false);
	wire_frame_begin(&w, WIRE_UPDATE, 0, 5);
	wire_update_put(&w, "", 0);
	send_frame(fd, &w);
	expect_error(fd, WIRE_E_STATE, "already serves", false);
	wire_frame_begin(&w, WIRE_DETACH, 0, 6);
	wire_detach_put(&w, 12345);
	send_frame(fd, &w);
	expect_error(fd, WIRE_E_NO_LEASE, "lease 12345", false);
	hello(fd);
	q.flags = WIRE_ATTACH_WRITABLE;
	wire_frame_begin(&w, WIRE_ATTACH, 0, 7);
	wire_attach_req_put(&w, &q);
	send_frame(fd, &w);
	expect_error(fd, WIRE_E_READONLY, "sealed", false);
	q.flags = 0;
	q.version = 99;
	wire_frame_begin(&w, WIRE_ATTACH, 0, 8);
	wire_attach_req_put(&w, &q);
	send_frame(fd, &w);
	expect_error(fd, WIRE_E_STATE, "version 99 is not resident", false);
	wire_put_free(&w);
	ping(fd);
}

/* MANIFEST + ATTACH on fd (after HELLO): the memfd is sealed, cannot be
 * mapped writable, and every tensor's bytes hash as the manifest says. */
static uint64_t test_attach(int fd)
{
	struct wire_manifest_req mq = { 0, 0 };
	struct wire_attach_req q = { 0, 0 };
	struct wire_manifest m;
	struct wire_tensor *t = malloc(sizeof(*t));
	struct wire_attach a;
	struct wire_pool pl;
	struct wire_put w;
	struct wire_hdr h;
	uint8_t *mp, *ap, hsh[16];
	int fds[253];
	unsigned nfds;
	const uint8_t *map;
	uint64_t lease;

	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_MANIFEST, 0, 10);
	wire_manifest_req_put(&w, &mq);
	send_frame(fd, &w);
	T_EQ_INT(recv_frame(fd, &h, &mp, NULL, NULL), 1);
	T_EQ_INT(h.type, WIRE_MANIFEST);
	T_EQ_INT(h.flags, WIRE_F_REPLY);   /* no MORE: all in one */
	T_OK(wire_manifest_get(mp, h.len, &m, err));
	T_EQ_INT(m.total, 39 + 8);
	T_EQ_INT(m.count, 39 + 8);

	wire_frame_begin(&w, WIRE_ATTACH, 0, 11);
	wire_attach_req_put(&w, &q);
	send_frame(fd, &w);
	wire_put_free(&w);
	T_EQ_INT(recv_frame(fd, &h, &ap, fds, &nfds), 1);
	T_EQ_INT(h.type, WIRE_ATTACH);
	T_EQ_U64(h.id, 11);
	T_OK(wire_attach_get(ap, h.len, &a, err));
	T_EQ_INT(a.total, 1);
	T_EQ_INT(nfds, 1);
	lease = a.lease;
	T_OK(wire_attach_next(&a, nfds, &pl, err));
	T_EQ_INT(pl.flags, WIRE_POOL_SEALED);
	T_ASSERT(fcntl(fds[0], F_GET_SEALS) &
		 (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
	T_ASSERT(mmap(NULL, pl.size, PROT_READ | PROT_WRITE, MAP_SHARED,
		      fds[0], 0) == MAP_FAILED);
	T_EQ_INT(errno, EPERM);
	map = mmap(NULL, pl.size, PROT_READ, MAP_SHARED, fds[0], 0);
	T_ASSERT(map != MAP_FAILED);
	for (uint32_t i = 0; i < m.count; i++) {
		T_OK(wire_manifest_next(&m, t, err));
		/* the last 8: qkv_proj and gate_up_proj views */
		T_EQ_INT(t->flags, WIRE_T_HASHED | (i >= 39 ? WIRE_T_VIEW : 0));
		T_EQ_INT(t->pool, 0);
		T_EQ_U64(t->padded_rows, strstr(t->name, "embed_tokens") ||
			 strstr(t->name, "lm_head") ? 4096 : 0);
		T_CMP_INT(t->offset + t->nbytes, <=, pl.size);
		if (!strstr(t->name, "k_proj") && !strstr(t->name, "v_proj") &&
		    !strstr(t->name, "up_proj.weight"))
			T_EQ_INT(t->offset % 256, 0);
		base_hash128(map + t->offset, t->nbytes, hsh);
		if (memcmp(hsh, t->hash, 16))
			T_FAIL("tensor %s: bytes do not hash as announced", t->name);
	}
	munmap((void *)map, pl.size);
	close(fds[0]);
	free(mp);
	free(ap);
	free(t);
	return lease;
}

static void test_lease_death(int good)
{
	int sv[2];
	pid_t child;
	char c;

	T_OK(pipe(sv));
	child = fork();
	T_ASSERT(child >= 0);
	if (child == 0) {
		int fd = conn();

		hello(fd);
		test_attach(fd);
		if (write(sv[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	T_EQ_INT(read(sv[0], &c, 1), 1);
	T_EQ_INT(leases_of(good, child), 1);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	for (int i = 0; i < 500 && leases_of(good, child) != -1; i++)
		usleep(10000);
	T_EQ_INT(leases_of(good, child), -1);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const char *top = getenv("WC_TOP"), *build = getenv("BUILD");
	struct wire_put w;
	struct wire_hdr h;
	struct wire_notice nt;
	uint8_t *p;
	json_t *j;
	int good, other, st;
	uint64_t lease;

	snprintf(bin, sizeof(bin), "%s/%s/bin", top ? top : ".",
		 build ? build : "build");
	T_SKIP_IF(access(bin, F_OK) || !mkdtemp(dir), "no bin dir %s", bin);
	{
		char x[600];

		snprintf(x, sizeof(x), "%s/wcgen", bin);
		T_SKIP_IF(access(x, X_OK), "wcgen is not built");
	}
	atexit(cleanup);
	start_wcd();

	good = conn();
	hello(good);
	ping(good);
	test_malformed(good);

	other = conn();
	test_state_errors(other);
	lease = test_attach(other);
	T_EQ_INT(leases_of(good, getpid()), 1);  /* two conns, one lease */
	wire_put_init(&w);
	wire_frame_begin(&w, WIRE_DETACH, 0, 12);
	wire_detach_put(&w, lease);
	send_frame(other, &w);
	T_EQ_INT(recv_frame(other, &h, &p, NULL, NULL), 1);
	T_EQ_INT(h.type, WIRE_DETACH);
	free(p);
	T_EQ_INT(leases_of(good, getpid()), 0);

	test_lease_death(good);

	j = status(good);
	T_EQ_STR(json_string_value(json_object_get(j, "state")), "ready");
	T_EQ_INT(json_integer_value(json_object_get(j, "tensors")), 39 + 8);
	T_EQ_INT(json_integer_value(json_object_get(j, "pid")), wcd_pid);
	T_EQ_STR(json_string_value(json_object_get(j, "device")), "host-frames");
	T_CMP_INT(json_integer_value(json_object_get(j, "requests")), >, 20);
	T_ASSERT(json_is_number(json_object_get(j, "load_gbps")));
	T_ASSERT(json_is_number(json_object_get(j, "uptime_seconds")));
	json_decref(j);

	/* SHUTDOWN from `other`: its reply, then a NOTICE to `good`. */
	wire_frame_begin(&w, WIRE_SHUTDOWN, 0, 13);
	send_frame(other, &w);
	wire_put_free(&w);
	T_EQ_INT(recv_frame(other, &h, &p, NULL, NULL), 1);
	T_EQ_INT(h.type, WIRE_SHUTDOWN);
	T_EQ_U64(h.id, 13);
	free(p);
	T_EQ_INT(recv_frame(good, &h, &p, NULL, NULL), 1);
	T_EQ_INT(h.type, WIRE_NOTICE);
	T_OK(wire_notice_get(p, h.len, &nt, err));
	T_EQ_INT(nt.kind, WIRE_NOTICE_SHUTDOWN);
	free(p);
	T_EQ_INT(recv_frame(good, &h, &p, NULL, NULL), 0);
	T_ASSERT(waitpid(wcd_pid, &st, 0) == wcd_pid);
	wcd_pid = -1;
	T_ASSERT(WIFEXITED(st));
	T_EQ_INT(WEXITSTATUS(st), 0);
	T_EQ_INT(access(sockp, F_OK), -1);
	T_EQ_INT(access(readyp, F_OK), -1);
	close(good);
	close(other);
	printf("wcd frames: ok\n");
	return 0;
}
