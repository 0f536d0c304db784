/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): the client tests' fake wcd (client_fakesrv.h). */
#include "client_fakesrv.h"

#define PAGE_TENSORS 2

const struct ft fake_tensors[NT] = {
	{ "model.embed_tokens.weight", "BF16", 2, { 64, 32 }, 4096, 0, 0 },
	{ "model.norm.weight", "F32", 1, { 100 }, 400, 0, 4096 },
	{ "lm_head.weight", "BF16", 2, { 3, 5 }, 30, 0, 4608 },
	{ "model.layers.0.mlp.up_proj.weight", "F16", 2, { 50, 30 }, 3000, 1, 0 },
	{ "empty", "F32", 1, { 0 }, 0, 1, 3072 },
};
static const uint64_t pool_size[2] = { 8192, 4096 };

static const struct ft big_tensors[4] = {
	{ "big.0", "U8", 1, { BIG }, BIG, 0, 0 },
	{ "big.1", "U8", 1, { BIG }, BIG, 0, BIG },
	{ "big.2", "U8", 1, { BIG }, BIG, 0, 2 * BIG },
	{ "big.3", "U8", 1, { BIG }, BIG, 1, 0 },
};
static const uint64_t big_pool_size[2] = { 3 * BIG, BIG };

/* the server's layout for the current connection */
static const struct ft *cur_t = fake_tensors;
static unsigned cur_nt = NT;
static const uint64_t *cur_pool = pool_size;

char fake_dir[64];
char fake_sock[100];
pid_t fake_srv_pid;

/* --- the fake daemon -------------------------------------------------- */

/* "mutate:SEED": one reply in four is damaged in one random way before it
 * is sent (bits flipped, a u32 blown up, bytes cut or added with the
 * header's length kept consistent), to see that the client only ever fails
 * cleanly. */
static uint64_t mut_state;
/* "shortpool": pool 1 announces more bytes than its memfd holds */
static bool short_pool;

uint8_t fake_tbyte(unsigned t, uint64_t i)
{
	return (uint8_t)(i * 31 + t * 7 + (i >> 8));
}

static uint64_t mut_next(void)
{
	mut_state ^= mut_state << 13;
	mut_state ^= mut_state >> 7;
	mut_state ^= mut_state << 17;
	return mut_state;
}

static void mutate(struct wire_put *w)
{
	size_t plen = w->len - WIRE_HDR_LEN;
	uint8_t *p = w->buf + WIRE_HDR_LEN;
	uint32_t len32, big = (uint32_t)mut_next();

	switch (mut_next() % 4) {
	case 0:
		for (int i = 0; plen && i < 1 + (int)(mut_next() % 3); i++)
			p[mut_next() % plen] ^= (uint8_t)(1u << (mut_next() % 8));
		break;
	case 1:
		if (plen >= 4)
			memcpy(p + (mut_next() % (plen - 3)), &big, 4);
		break;
	case 2:
		w->len -= mut_next() % (plen + 1);
		break;
	default:
		for (int i = 0; i < 1 + (int)(mut_next() % 16); i++)
			wire_put_u8(w, (uint8_t)mut_next());
		break;
	}
	len32 = (uint32_t)(w->len - WIRE_HDR_LEN);
	memcpy(w->buf + 12, &len32, 4);
}

int fake_srv_send(int fd, struct wire_put *w, const int *fds, unsigned nfds)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr a;
	} ctl;
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (wire_frame_end(w, NULL))
		return -1;
	if (mut_state && mut_next() % 4 == 0)
		mutate(w);
	iov.iov_base = w->buf;
	iov.iov_len = w->len;
	if (nfds) {
		struct cmsghdr *cm;

		mh.msg_control = ctl.b;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)w->len ? 0 : -1;
}

static int recv_all(int fd, void *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = recv(fd, (char *)p + got, n - got, 0);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int make_pool(unsigned p, bool badhash)
{
	int fd = memfd_create("fake-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint8_t *m;

	(void)badhash;
	if (fd < 0 || ftruncate(fd, (off_t)cur_pool[p]))
		exit(3);
	m = mmap(NULL, cur_pool[p], PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		exit(3);
	for (unsigned t = 0; t < cur_nt; t++)
		if (cur_t[t].pool == p)
			for (uint64_t i = 0; i < cur_t[t].bytes; i++)
				m[cur_t[t].off + i] = fake_tbyte(t, i);
	munmap(m, cur_pool[p]);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK |
				   F_SEAL_SEAL))
		exit(3);
	return fd;
}

static void srv_ident(struct ident *id)
{
	ident_init(id);
	strcpy(id->model_path, "/fake/model");
	strcpy(id->arch, "LlamaForCausalLM");
	strcpy(id->dtype, "bfloat16");
	strcpy(id->device_uuid, "host-fake");
	id->tp_size = 1;
	id->pp_size = 1;
}

static void srv_hello(int fd, struct wire_put *w,
			     const struct wire_hdr *h,
			     const struct wire_hello *hq, const char *sc)
{
	struct wire_hello_reply r = { .status = WIRE_HELLO_OK, .version = 3,
				      .tensors = cur_nt, .bytes = 7526,
				      .daemon_pid = (uint32_t)getpid() };
	struct wire_mismatch mm[2];
	uint8_t enc[IDENT_ENC_MAX];
	struct ident mine, theirs;

	if (!strcmp(sc, "refuse")) {
		wire_error_frame(w, 0, WIRE_E_PERM,
				 "uid 65534 is not allowed to attach: run the engine as uid 0 or start wcd with --allow-uid 65534",
				 NULL);
		fake_srv_send(fd, w, NULL, 0);
		return;
	}
	srv_ident(&mine);
	ident_encode(&mine, enc, sizeof(enc), &r.identity_len);
	ident_digest(&mine, r.digest);
	r.identity = enc;
	if (hq->identity_len) {
		if (ident_decode(&theirs, hq->identity, hq->identity_len, NULL))
			exit(4);
		r.status = WIRE_HELLO_MISMATCH;
		r.nmismatch = 2;
		strcpy(mm[0].field, "model_path");
		strcpy(mm[0].daemon, mine.model_path);
		snprintf(mm[0].client, sizeof(mm[0].client), "%.1000s", theirs.model_path);
		strcpy(mm[1].field, "tp_size");
		strcpy(mm[1].daemon, "1");
		snprintf(mm[1].client, sizeof(mm[1].client), "%u", theirs.tp_size);
	}
	wire_frame_begin(w, WIRE_HELLO, WIRE_F_REPLY, h->id);
	wire_hello_reply_put(w, &r, mm);
	fake_srv_send(fd, w, NULL, 0);
}

static void srv_manifest(int fd, struct wire_put *w,
				const struct wire_hdr *h,
				const uint8_t *p, const char *sc)
{
	struct wire_manifest_req q;
	struct wire_manifest m = { .version = 3, .total = cur_nt };
	uint32_t n;

	if (wire_manifest_req_get(p, h->len, &q, NULL))
		exit(5);
	if (!strcmp(sc, "huge"))
		m.total = WC_TENSORS_MAX + 1;
	m.first = q.first;
	n = q.first < cur_nt ? cur_nt - q.first : 0;
	m.count = n < PAGE_TENSORS ? n : PAGE_TENSORS;
	if (!strcmp(sc, "huge"))
		m.count = 0;
	wire_frame_begin(w, WIRE_MANIFEST,
			 WIRE_F_REPLY | (m.first + m.count < m.total ? WIRE_F_MORE : 0),
			 h->id);
	wire_manifest_head_put(w, &m);
	for (uint32_t i = m.first; i < m.first + m.count; i++) {
		const struct ft *f = &cur_t[i];
		struct wire_tensor t = { .ndim = f->ndim, .pool = f->pool,
					 .offset = f->off, .nbytes = f->bytes,
					 .flags = WIRE_T_HASHED };
		uint8_t *buf = malloc(f->bytes + 1);

		snprintf(t.name, sizeof(t.name), "%s", f->name);
		snprintf(t.dtype, sizeof(t.dtype), "%s", f->dtype);
		memcpy(t.shape, f->shape, sizeof(f->shape));
		for (uint64_t b = 0; b < f->bytes; b++)
			buf[b] = fake_tbyte(i, b);
		base_hash128(buf, f->bytes, t.hash);
		free(buf);
		if (i == 2 && (!strcmp(sc, "badhash") || !strcmp(sc, "bigbad")))
			t.hash[0] ^= 1;
		/* the embedding padded to 100 rows (fits pool 0), or to 200 */
		if (i == 0 && !strcmp(sc, "padded"))
			t.padded_rows = 100;
		if (i == 0 && !strcmp(sc, "badpad"))
			t.padded_rows = 200;
		wire_tensor_put(w, &t);
	}
	fake_srv_send(fd, w, NULL, 0);
}

static void srv_attach(int fd, struct wire_put *w,
			      const struct wire_hdr *h, const uint8_t *p)
{
	struct wire_attach_req q;

	if (wire_attach_req_get(p, h->len, &q, NULL))
		exit(6);
	if (q.flags & WIRE_ATTACH_WRITABLE) {
		wire_error_frame(w, h->id, WIRE_E_READONLY,
				 "a read-write attach is refused: the host backend's pools are sealed; attach read-only",
				 NULL);
		fake_srv_send(fd, w, NULL, 0);
		return;
	}
	/* two frames, one pool each: ATTACH then ATTACH_MORE */
	for (uint32_t i = 0; i < 2; i++) {
		struct wire_attach a = { .lease = 77, .version = 3, .total = 2,
					 .first = i, .count = 1 };
		uint64_t sz = cur_pool[i] * (short_pool && i == 1 ? 2 : 1);
		struct wire_pool pl = { .size = sz,
					.alloc_size = sz,
					.export_kind = GPU_EXPORT_FD,
					.flags = WIRE_POOL_SEALED,
					.fd_index = 0 };
		int pfd = make_pool(i, false);

		wire_frame_begin(w, i ? WIRE_ATTACH_MORE : WIRE_ATTACH,
				 WIRE_F_REPLY | (i ? 0 : WIRE_F_MORE), h->id);
		wire_attach_head_put(w, &a);
		wire_pool_put(w, &pl);
		fake_srv_send(fd, w, &pfd, 1);
		close(pfd);
	}
}

static void srv_conn(int fd)
{
	struct wire_put w;
	char sc[WIRE_LABEL_MAX + 1] = "";

	mut_state = 0;
	bool pinged = false;

	wire_put_init(&w);
	for (;;) {
		uint8_t hb[WIRE_HDR_LEN], *p;
		struct wire_hdr h;
		struct wire_hello hq;
		struct wire_notice nt = { .kind = WIRE_NOTICE_NEW_VERSION,
					  .version = 4 };

		if (recv_all(fd, hb, sizeof(hb)) ||
		    wire_hdr_decode(hb, sizeof(hb), &h, NULL))
			break;
		p = malloc(h.len + 1);
		if (recv_all(fd, p, h.len)) {
			free(p);
			break;
		}
		switch (h.type) {
		case WIRE_HELLO:
			if (wire_hello_get(p, h.len, &hq, NULL))
				exit(7);
			snprintf(sc, sizeof(sc), "%s", hq.label);
			mut_state = 0;
			short_pool = !strcmp(sc, "shortpool");
			if (!strncmp(sc, "mutate:", 7))
				mut_state = strtoull(sc + 7, NULL, 10) * 2654435761u + 1;
			if (!strncmp(sc, "big", 3)) {
				cur_t = big_tensors;
				cur_nt = 4;
				cur_pool = big_pool_size;
			} else {
				cur_t = fake_tensors;
				cur_nt = NT;
				cur_pool = pool_size;
			}
			if (!strcmp(sc, "garbage")) {
				memset(hb, 'X', sizeof(hb));
				if (write(fd, hb, sizeof(hb)) < 0)
					exit(8);
				break;
			}
			srv_hello(fd, &w, &h, &hq, sc);
			break;
		case WIRE_MANIFEST:
			srv_manifest(fd, &w, &h, p, sc);
			break;
		case WIRE_ATTACH:
			srv_attach(fd, &w, &h, p);
			break;
		case WIRE_PING:
			if (!strcmp(sc, "mute"))
				break;
			if (!pinged && !strcmp(sc, "notice")) {
				snprintf(nt.msg, sizeof(nt.msg), "version 4 is loaded: re-attach to use it");
				wire_frame_begin(&w, WIRE_NOTICE, 0, 0);
				wire_notice_put(&w, &nt);
				fake_srv_send(fd, &w, NULL, 0);
			}
			pinged = true;
			/* fall through */
		case WIRE_DETACH:
		case WIRE_SHUTDOWN:
			wire_frame_begin(&w, h.type, WIRE_F_REPLY, h.id);
			fake_srv_send(fd, &w, NULL, 0);
			break;
		case WIRE_STATUS:
			wire_frame_begin(&w, WIRE_STATUS, WIRE_F_REPLY, h.id);
			wire_status_put(&w, "{\"state\":\"ready\"}", 17);
			fake_srv_send(fd, &w, NULL, 0);
			break;
		default:
			exit(9);
		}
		free(p);
	}
	wire_put_free(&w);
}

static void srv_run(int lfd)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			exit(2);
		srv_conn(fd);
		close(fd);
	}
}

void fake_srv_start(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int pfd[2];
	char ok;

	T_OK(pipe(pfd) ? -errno : 0);
	memcpy(sa.sun_path, fake_sock, strlen(fake_sock) + 1);
	fake_srv_pid = fork();
	T_ASSERT(fake_srv_pid >= 0);
	if (!fake_srv_pid) {
		int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    listen(lfd, 16))
			_exit(2);
		if (write(pfd[1], "k", 1) != 1)
			_exit(2);
		srv_run(lfd);
		_exit(0);
	}
	close(pfd[1]);
	T_EQ_INT(read(pfd[0], &ok, 1), 1);
	close(pfd[0]);
}

void fake_cleanup(void)
{
	char cmd[128];

	if (fake_srv_pid > 0) {
		kill(fake_srv_pid, SIGKILL);
		waitpid(fake_srv_pid, NULL, 0);
		fake_srv_pid = 0;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fake_dir);
	if (fake_dir[0] && system(cmd))
		fprintf(stderr, "could not remove %s\n", fake_dir);
}
