/* SPDX-License-Identifier: MIT */
/*
 * The "updating" and "waking" states: requests that reach wcd while an UPDATE
 * is loading. One connection pipelines, in one write:
 *
 *   UPDATE dir2, STATUS, HELLO, ATTACH, SLEEP 1, WAKE, UPDATE dir2, PING,
 *   STATUS
 *
 * Replies on one connection leave in the order the daemon handled the
 * requests, and the UPDATE's reply leaves when version 2 is published; so
 * each request answered before it was handled while updating, each after
 * it once version 2 served. Every request is checked against the outcome
 * of the state it met:
 *
 *   request  while updating                 after the publish
 *   STATUS   state updating, version 1      state ready, version 2
 *   HELLO    ok, version 1                  ok, version 2
 *   ATTACH   a lease on version 1           a lease on version 2
 *   SLEEP 1  BUSY: the update is loading    BUSY: 1 engine attached (us)
 *   WAKE     BUSY: the update is loading    STATE: not sleeping
 *   UPDATE   BUSY: the update is loading    BUSY: versions 1 and 2 held, or
 *                                           STATE: already serves
 *   PING     ok                             ok
 *
 * An ATTACH answered while updating holds version 1, so the connection
 * also gets the NOTICE of version 2, before the UPDATE's reply.
 *
 * The first STATUS must have met "updating": its header is in the socket
 * when the update's load starts, and the load takes at least one turn of
 * the loop, in which the header's receive completes at submission. Which
 * of the others met it depends on how many turns the load takes; the test
 * prints each.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include "client_util.h"
#include "err.h"
#include "wire.h"
#include "wire_life.h"

enum { ID_UPDATE = 1, ID_STATUS, ID_HELLO, ID_ATTACH, ID_SLEEP, ID_WAKE,
       ID_UPDATE2, ID_PING, ID_STATUS2, ID_N };

static const char *const names[ID_N] = {
	"", "UPDATE", "STATUS", "HELLO", "ATTACH", "SLEEP 1", "WAKE",
	"UPDATE again", "PING", "STATUS again",
};

/* One frame: header into h, payload malloc'd into *p; fds closed. */
static void recv_frame(int fd, struct wire_hdr *h, uint8_t **p)
{
	uint8_t hdr[WIRE_HDR_LEN];
	char cbuf[CMSG_SPACE(sizeof(int) * WIRE_FDS_PER_FRAME)];
	struct iovec iov = { hdr, sizeof(hdr) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	char err[BASE_ERR_LEN];
	size_t got = 0;

	while (got < sizeof(hdr)) {
		ssize_t n;

		iov.iov_base = hdr + got;
		iov.iov_len = sizeof(hdr) - got;
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		T_ASSERT(n > 0);
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c;
		     c = CMSG_NXTHDR(&mh, c)) {
			int *fds = (int *)(void *)CMSG_DATA(c);
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (size_t i = 0; i < k; i++)
				close(fds[i]);
		}
		mh.msg_controllen = 0;
		mh.msg_control = NULL;
		got += (size_t)n;
	}
	T_OK(wire_hdr_decode(hdr, sizeof(hdr), h, err));
	*p = malloc(h->len + 1);
	T_ASSERT(*p);
	for (got = 0; got < h->len;) {
		ssize_t n = read(fd, *p + got, h->len - got);

		T_ASSERT(n > 0);
		got += (size_t)n;
	}
}

static void put_update(struct wire_put *w, uint64_t id, const char *dir)
{
	wire_frame_begin(w, WIRE_UPDATE, 0, id);
	wire_update_put(w, dir, 0);
}

/* Appends frame w (ended here, then freed) to *buf of *len bytes. */
static void append_frame(uint8_t **buf, size_t *len, struct wire_put *w)
{
	char err[BASE_ERR_LEN];

	T_OK(wire_frame_end(w, err));
	*buf = realloc(*buf, *len + w->len);
	T_ASSERT(*buf);
	memcpy(*buf + *len, w->buf, w->len);
	*len += w->len;
	wire_put_free(w);
}

/* The "waking" state, the same way: behind a WAKE from sleep level lvl,
 *   STATUS, HELLO, UPDATE dir2, WAKE, PING, SLEEP 1
 * while waking: state waking; HELLO refused (waking up); UPDATE, WAKE and
 * SLEEP busy; PING ok. After: ready; HELLO ok; UPDATE "already serves";
 * WAKE "not sleeping"; PING ok; SLEEP sleeps (no lease is held). */
enum { W_WAKE = 1, W_STATUS, W_HELLO, W_UPDATE, W_WAKE2, W_PING,
       W_SLEEP, W_N };

/* The requests of the waking case, one frame each, in one buffer. */
static uint8_t *waking_requests(const char *dir2, size_t *len)
{
	struct wire_hello hl = { .proto_version = WIRE_VERSION,
				 .flags = WIRE_HELLO_NO_IDENTITY };
	uint8_t *buf = NULL;

	*len = 0;
	for (int id = 1; id < W_N; id++) {
		struct wire_put w;

		wire_put_init(&w);
		switch (id) {
		case W_WAKE:
		case W_WAKE2:
			wire_frame_begin(&w, WIRE_WAKE, 0, (uint64_t)id);
			break;
		case W_HELLO:
			wire_frame_begin(&w, WIRE_HELLO, 0, (uint64_t)id);
			strcpy(hl.label, "life_pipeline");
			wire_hello_put(&w, &hl);
			break;
		case W_UPDATE:
			put_update(&w, (uint64_t)id, dir2);
			break;
		case W_PING:
			wire_frame_begin(&w, WIRE_PING, 0, (uint64_t)id);
			break;
		case W_SLEEP:
			wire_frame_begin(&w, WIRE_SLEEP, 0, (uint64_t)id);
			wire_sleep_put(&w, 1);
			break;
		default:
			wire_frame_begin(&w, WIRE_STATUS, 0, (uint64_t)id);
			break;
		}
		append_frame(&buf, len, &w);
	}
	return buf;
}

/* Checks the reply h (payload p, its error we) to request id of the
 * waking case, met while waking (during) or after; want: the refusal's
 * text while waking. Sets *woke at the WAKE's reply, *slept when the last
 * SLEEP slept. */
static void check_waking_reply(int id, const struct wire_hdr *h,
			       const uint8_t *p, const struct wire_error *we,
			       bool during, const char *want, bool *woke,
			       bool *slept)
{
	char err[BASE_ERR_LEN];

	switch (id) {
	case W_WAKE:
		T_EQ_INT(h->type, WIRE_WAKE);
		*woke = true;
		break;
	case W_STATUS: {
		const char *js;
		size_t jn;
		json_t *j;

		T_OK(wire_status_get(p, h->len, &js, &jn, err));
		j = json_loadb(js, jn, 0, NULL);
		T_ASSERT(j);
		T_EQ_STR(json_string_value(json_object_get(j, "state")),
			 during ? "waking" : "ready");
		json_decref(j);
		break;
	}
	case W_HELLO:
		if (during) {
			T_EQ_INT(we->code, WIRE_E_SLEEPING);
			T_HAS(we->msg, want);
		} else {
			T_EQ_INT(h->type, WIRE_HELLO);
		}
		break;
	case W_PING:
		T_EQ_INT(h->type, WIRE_PING);
		break;
	case W_SLEEP:
		if (!during && (h->type != WIRE_ERROR ||
				!strstr(we->msg, "is loading"))) {
			T_EQ_INT(h->type, WIRE_SLEEP);
			*slept = true;
			break;
		}
		if (!during)
			break;  /* BUSY: the update behind it */
		/* fall through */
	default:
		T_EQ_INT(h->type, WIRE_ERROR);
		if (during) {
			T_EQ_INT(we->code, WIRE_E_BUSY);
			T_HAS(we->msg, want);
		} else if (id == W_UPDATE) {
			T_HAS(we->msg, "is the one version 2 already serves");
		} else if (!strstr(we->msg, "is loading")) {
			/* or BUSY: the update behind it may still be
			 * reading headers, off the loop's thread, while
			 * the loop answers (issue 15, item 4) */
			T_HAS(we->msg, "the daemon is not sleeping");
		}
		break;
	}
}

static void waking(const struct e2e *x, unsigned lvl, const char *dir2)
{
	static const char *const wn[W_N] = {
		"", "WAKE", "STATUS", "HELLO", "UPDATE", "WAKE again",
		"PING", "SLEEP 1",
	};
	struct wc_conn *c = e2e_connect(x);
	char err[BASE_ERR_LEN], want[256];
	bool during[W_N] = { 0 }, woke = false, slept = false;
	struct wc_error e;
	uint8_t *buf;
	size_t len;
	int fd, n_during = 0;

	if (wc_sleep(c, lvl, NULL, &e))
		T_FAIL("sleep %u: %s", lvl, e.msg);
	buf = waking_requests(dir2, &len);
	fd = e2e_raw_connect(x->sock);
	T_EQ_INT(write(fd, buf, len), (ssize_t)len);
	free(buf);
	snprintf(want, sizeof(want), "the daemon is waking up from sleep level %u", lvl);
	for (int k = 1; k < W_N; k++) {
		struct wire_error we = { 0 };
		struct wire_hdr h;
		uint8_t *p;
		int id;

		recv_frame(fd, &h, &p);
		id = (int)h.id;
		T_ASSERT(id > 0 && id < W_N);
		during[id] = !woke && id != W_WAKE;
		n_during += during[id];
		if (h.type == WIRE_ERROR)
			T_OK(wire_error_get(p, h.len, &we, err));
		printf("level %u %-11s %s: %s\n", lvl, wn[id],
		       id == W_WAKE ? "awake" :
		       during[id] ? "while waking" : "after the wake",
		       h.type == WIRE_ERROR ? wire_errcode_name(we.code) : "ok");
		check_waking_reply(id, &h, p, &we, during[id], want, &woke,
				   &slept);
		free(p);
	}
	T_ASSERT(during[W_STATUS]);
	close(fd);
	if (slept && wc_wake(c, NULL, &e))
		T_FAIL("wake: %s", e.msg);
	wc_close(c);
	printf("life_pipeline: %d of %d requests met the waking state (level %u)\n",
	       n_during, W_N - 2, lvl);
}

/* The requests of the updating case, one frame each, in one buffer. */
static uint8_t *update_requests(const char *dir2, size_t *len)
{
	struct wire_hello hl = { .proto_version = WIRE_VERSION,
				 .flags = WIRE_HELLO_NO_IDENTITY };
	struct wire_attach_req aq = { 0, 0 };
	uint8_t *buf = NULL;

	*len = 0;
	for (int id = 1; id < ID_N; id++) {
		struct wire_put w;

		wire_put_init(&w);
		switch (id) {
		case ID_UPDATE:
		case ID_UPDATE2:
			put_update(&w, (uint64_t)id, dir2);
			break;
		case ID_HELLO:
			wire_frame_begin(&w, WIRE_HELLO, 0, (uint64_t)id);
			strcpy(hl.label, "life_pipeline");
			wire_hello_put(&w, &hl);
			break;
		case ID_ATTACH:
			wire_frame_begin(&w, WIRE_ATTACH, 0, (uint64_t)id);
			wire_attach_req_put(&w, &aq);
			break;
		case ID_SLEEP:
			wire_frame_begin(&w, WIRE_SLEEP, 0, (uint64_t)id);
			wire_sleep_put(&w, 1);
			break;
		case ID_WAKE:
			wire_frame_begin(&w, WIRE_WAKE, 0, (uint64_t)id);
			break;
		case ID_PING:
			wire_frame_begin(&w, WIRE_PING, 0, (uint64_t)id);
			break;
		default:
			wire_frame_begin(&w, WIRE_STATUS, 0, (uint64_t)id);
			break;
		}
		append_frame(&buf, len, &w);
	}
	return buf;
}

/* The refusals of SLEEP, WAKE and the second UPDATE in the updating case,
 * met while updating (during) or after; lease_v1: our ATTACH got version
 * 1. */
static void check_update_refusal(int id, const struct wire_hdr *h,
				 const struct wire_error *we, bool during,
				 bool lease_v1)
{
	char want[512];

	T_EQ_INT(h->type, WIRE_ERROR);
	if (during) {
		T_EQ_INT(we->code, WIRE_E_BUSY);
		T_HAS(we->msg, "an update to version 2 is loading: wait for it to finish");
	} else if (id == ID_SLEEP) {
		T_EQ_INT(we->code, WIRE_E_BUSY);
		snprintf(want, sizeof(want),
			 "while 1 engine(s) are attached (pids: %d)",
			 (int)getpid());
		T_HAS(we->msg, want);
	} else if (id == ID_WAKE) {
		T_EQ_INT(we->code, WIRE_E_STATE);
		T_HAS(we->msg, "the daemon is not sleeping (state ready)");
	} else if (lease_v1) {
		T_EQ_INT(we->code, WIRE_E_BUSY);
		T_HAS(we->msg, "versions 1 and 2 are both resident");
	} else {
		T_EQ_INT(we->code, WIRE_E_STATE);
		T_HAS(we->msg, "is the one version 2 already serves");
	}
}

/* Checks the reply h (payload p, its error we) to request id of the
 * updating case, met while updating (during) or after. Sets *lease_v1 at
 * the ATTACH's reply (a lease on version 1), *update_done at the UPDATE's. */
static void check_update_reply(int id, const struct wire_hdr *h,
			       const uint8_t *p, const struct wire_error *we,
			       bool during, bool *lease_v1, bool *update_done)
{
	char err[BASE_ERR_LEN];

	switch (id) {
	case ID_UPDATE: {
		struct wire_life_reply r;

		T_EQ_INT(h->type, WIRE_UPDATE);
		T_OK(wire_life_reply_get(p, h->len, &r, err));
		T_EQ_U64(r.version, 2);
		T_HAS(r.msg, *lease_v1 ? "version 1 stays until its engines detach" :
					 "version 1 was freed");
		*update_done = true;
		break;
	}
	case ID_STATUS:
	case ID_STATUS2: {
		const char *js;
		size_t jn;
		json_t *j;

		T_EQ_INT(h->type, WIRE_STATUS);
		T_OK(wire_status_get(p, h->len, &js, &jn, err));
		j = json_loadb(js, jn, 0, NULL);
		T_ASSERT(j);
		T_EQ_STR(json_string_value(json_object_get(j, "state")),
			 during ? "updating" : "ready");
		T_EQ_INT(json_integer_value(json_object_get(j, "version")),
			 during ? 1 : 2);
		json_decref(j);
		break;
	}
	case ID_HELLO: {
		struct wire_hello_reply r;

		T_EQ_INT(h->type, WIRE_HELLO);
		T_OK(wire_hello_reply_get(p, h->len, &r, err));
		T_EQ_U64(r.version, during ? 1 : 2);
		break;
	}
	case ID_ATTACH: {
		struct wire_attach a;

		T_EQ_INT(h->type, WIRE_ATTACH);
		T_OK(wire_attach_get(p, h->len, &a, err));
		T_EQ_U64(a.version, during ? 1 : 2);
		*lease_v1 = a.version == 1;
		break;
	}
	case ID_SLEEP:
	case ID_WAKE:
	case ID_UPDATE2:
		check_update_refusal(id, h, we, during, *lease_v1);
		break;
	default:
		T_EQ_INT(h->type, WIRE_PING);
		break;
	}
}

int main(void)
{
	static struct e2e x;
	char wcgen[600], dir2[120], err[BASE_ERR_LEN];
	char *gen[] = { wcgen, "tiny", "--seed", "2", "--out", dir2, NULL };
	uint8_t *buf;
	size_t len;
	bool during[ID_N] = { 0 }, seen[ID_N] = { 0 }, update_done = false;
	bool lease_v1 = false, noticed = false;
	int fd, n_during = 0;

	e2e_init(&x, "life_pipeline");
	snprintf(dir2, sizeof(dir2), "%.100s/model2", x.dir);
	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x.bin);
	T_EQ_INT(e2e_run(x.log, gen), 0);
	e2e_start_wcd(&x, NULL);
	{
		char *real = realpath(dir2, NULL);

		T_ASSERT(real);
		snprintf(dir2, sizeof(dir2), "%s", real);
		free(real);
	}

	buf = update_requests(dir2, &len);
	fd = e2e_raw_connect(x.sock);
	T_EQ_INT(write(fd, buf, len), (ssize_t)len);
	free(buf);

	for (int k = 1; k < ID_N;) {
		struct wire_hdr h;
		struct wire_error we = { 0 };
		uint8_t *p;
		int id;

		recv_frame(fd, &h, &p);
		if (h.type == WIRE_NOTICE) {
			struct wire_notice nt;

			/* we hold a lease on version 1: told before the
			 * UPDATE's reply */
			T_OK(wire_notice_get(p, h.len, &nt, err));
			T_EQ_INT(nt.kind, WIRE_NOTICE_NEW_VERSION);
			T_EQ_U64(nt.version, 2);
			T_ASSERT(lease_v1 && !update_done && !noticed);
			noticed = true;
			free(p);
			continue;
		}
		k++;
		id = (int)h.id;
		T_ASSERT(id > 0 && id < ID_N && !seen[id]);
		seen[id] = true;
		during[id] = !update_done && id != ID_UPDATE;
		n_during += during[id];
		if (h.type == WIRE_ERROR)
			T_OK(wire_error_get(p, h.len, &we, err));
		printf("%-13s %s: %s\n", names[id],
		       id == ID_UPDATE ? "published" :
		       during[id] ? "while updating" : "after the publish",
		       h.type == WIRE_ERROR ? wire_errcode_name(we.code) : "ok");
		check_update_reply(id, &h, p, &we, during[id], &lease_v1,
				   &update_done);
		free(p);
	}
	T_ASSERT(during[ID_STATUS]);
	T_EQ_INT(noticed, lease_v1);
	close(fd);
	printf("life_pipeline: %d of %d requests met the updating state\n",
	       n_during, ID_N - 2);
	waking(&x, 2, dir2);
	waking(&x, 1, dir2);
	return 0;
}
