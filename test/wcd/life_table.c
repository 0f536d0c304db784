/* SPDX-License-Identifier: MIT */
/*
 * Every (state, request) pair of the lifecycle, table-driven,
 * against one real wcd on a host device with a wcgen tiny model (and a
 * second version of it, another seed: same shapes, other bytes).
 *
 * States: serving; serving while an engine (this process, on its own
 * connection) holds a lease; sleeping level 1; sleeping level 2. Requests:
 * HELLO (with the engine's identity), ATTACH (on a connection whose HELLO
 * succeeded before the state was entered), SLEEP 1, SLEEP 2, WAKE, UPDATE
 * (to the other seed's directory), STATUS, PING. Each cell names the
 * outcome (0 or the errno libwcache maps the refusal to), a part of the
 * reply's or refusal's message, and the state STATUS reports afterwards.
 * Every cell starts from serving and is brought back to it.
 *
 * The "updating" and "waking" states last as long as a load (milliseconds
 * here): test/wcd/life_pipeline.c covers them by pipelining requests behind
 * the UPDATE or WAKE on one connection.
 */
#include "client_util.h"

enum state { S_SERVING, S_LEASED, S_SLEEP1, S_SLEEP2, S_N };
enum req { R_HELLO, R_ATTACH, R_SLEEP1, R_SLEEP2, R_WAKE, R_UPDATE, R_STATUS,
	   R_PING, R_N };

static const char *const state_names[S_N] = {
	"serving", "serving with a lease", "sleeping level 1",
	"sleeping level 2",
};
static const char *const req_names[R_N] = {
	"HELLO", "ATTACH", "SLEEP 1", "SLEEP 2", "WAKE", "UPDATE", "STATUS",
	"PING",
};

struct cell {
	int err;                 /* 0, or the errno of the refusal */
	const char *msg;         /* in the reply (or refusal) message; "" any */
	const char *after;       /* STATUS state afterwards */
};

#define SLEEPING_MSG "the daemon is sleeping: wake it first (wcctl wake)"
#define UPDATE_MSG "host copy to wake from. Run 'wcctl wake --device"
/* %d: the pid holding the lease (this process) */
#define BUSY_MSG "sleep of model weights is not supported while 1 engine(s) are attached (pids: %d): the weights are shared zero-copy, so freeing them would corrupt every attached engine. Detach them first."

static const struct cell table[S_N][R_N] = {
	[S_SERVING] = {
		[R_HELLO]  = { 0, "", "ready" },
		[R_ATTACH] = { 0, "", "ready" },
		[R_SLEEP1] = { 0, "sleeping (level 1)", "sleeping" },
		[R_SLEEP2] = { 0, "sleeping (level 2)", "sleeping" },
		[R_WAKE]   = { EINVAL, "the daemon is not sleeping (state ready): there is nothing to wake", "ready" },
		[R_UPDATE] = { 0, "was freed (no lease held it)", "ready" },
		[R_STATUS] = { 0, "", "ready" },
		[R_PING]   = { 0, "", "ready" },
	},
	[S_LEASED] = {
		[R_HELLO]  = { 0, "", "ready" },
		[R_ATTACH] = { 0, "", "ready" },
		[R_SLEEP1] = { EBUSY, BUSY_MSG, "ready" },
		[R_SLEEP2] = { EBUSY, BUSY_MSG, "ready" },
		[R_WAKE]   = { EINVAL, "the daemon is not sleeping (state ready): there is nothing to wake", "ready" },
		[R_UPDATE] = { 0, "stays until its engines detach", "ready" },
		[R_STATUS] = { 0, "", "ready" },
		[R_PING]   = { 0, "", "ready" },
	},
	[S_SLEEP1] = {
		[R_HELLO]  = { EAGAIN, SLEEPING_MSG, "sleeping" },
		[R_ATTACH] = { EAGAIN, SLEEPING_MSG, "sleeping" },
		[R_SLEEP1] = { EINVAL, "the daemon is already sleeping (level 1): wake it first (wcctl wake)", "sleeping" },
		[R_SLEEP2] = { EINVAL, "the daemon is already sleeping (level 1): wake it first (wcctl wake)", "sleeping" },
		[R_WAKE]   = { 0, "restored from host memory", "ready" },
		[R_UPDATE] = { EAGAIN, UPDATE_MSG, "sleeping" },
		[R_STATUS] = { 0, "", "sleeping" },
		[R_PING]   = { 0, "", "sleeping" },
	},
	[S_SLEEP2] = {
		[R_HELLO]  = { EAGAIN, SLEEPING_MSG, "sleeping" },
		[R_ATTACH] = { EAGAIN, SLEEPING_MSG, "sleeping" },
		[R_SLEEP1] = { EINVAL, "the daemon is already sleeping (level 2): wake it first (wcctl wake)", "sleeping" },
		[R_SLEEP2] = { EINVAL, "the daemon is already sleeping (level 2): wake it first (wcctl wake)", "sleeping" },
		[R_WAKE]   = { 0, "reloaded from", "ready" },
		/* nothing kept: the update wakes it from the new checkpoint */
		[R_UPDATE] = { 0, "loaded straight from its checkpoint while asleep at level 2", "ready" },
		[R_STATUS] = { 0, "", "sleeping" },
		[R_PING]   = { 0, "", "sleeping" },
	},
};

static struct e2e x;
static char dirs[2][160];        /* the two versions' directories */
static int served;               /* index into dirs of the served one */

static void hello_ok(struct wc_conn *c)
{
	struct wc_expect ex = { .model_dir = dirs[served] };
	struct wc_error e;

	if (wc_hello(c, &ex, NULL, &e))
		T_FAIL("hello: %s", e.msg);
}

static const char *status_state(json_t **j)
{
	*j = e2e_status(&x);
	return json_string_value(json_object_get(*j, "state"));
}

/* Sends request r in the current state; returns its result, the message
 * in msg. Attaches made here are detached again. */
static int run_req(enum req r, struct wc_conn *pre, char *msg, size_t cap)
{
	struct wc_conn *c = e2e_connect(&x);
	struct wc_life_result lr = { 0 };
	struct wc_expect ex = { .model_dir = dirs[served] };
	struct wc_model *m = NULL;
	struct wc_error e = { 0 };
	char *json = NULL;
	int ret;

	switch (r) {
	case R_HELLO:
		ret = wc_hello(c, &ex, NULL, &e);
		break;
	case R_ATTACH:
		ret = wc_attach(pre, 0, &m, NULL, &e);
		if (!ret) {
			T_EQ_U64(e2e_stored_count(m), x.m.ntensors);
			T_OK(wc_detach(m, &e));
		}
		break;
	case R_SLEEP1:
	case R_SLEEP2:
		ret = wc_sleep(c, r == R_SLEEP1 ? 1 : 2, &lr, &e);
		break;
	case R_WAKE:
		ret = wc_wake(c, &lr, &e);
		break;
	case R_UPDATE:
		ret = wc_update(c, dirs[!served], &lr, &e);
		if (!ret)
			served = !served;
		break;
	case R_STATUS:
		ret = wc_status(c, &json, &e);
		if (!ret)
			T_HAS(json, "\"state\"");
		free(json);
		break;
	default:
		ret = wc_ping(c, 1, &e);
		break;
	}
	snprintf(msg, cap, "%s", ret ? e.msg : lr.msg);
	wc_close(c);
	return ret;
}

static void run_cell(enum state s, enum req r)
{
	const struct cell *want = &table[s][r];
	struct wc_conn *pre = e2e_connect(&x), *lc = NULL, *a;
	struct wc_model *lm = NULL;
	struct wc_error e;
	char msg[WC_ERR_MSG_LEN], exp[512];
	const char *st;
	json_t *j;
	int ret;

	hello_ok(pre);
	switch (s) {
	case S_LEASED:
		lc = e2e_connect(&x);
		hello_ok(lc);
		if (wc_attach(lc, 0, &lm, NULL, &e))
			T_FAIL("attach: %s", e.msg);
		break;
	case S_SLEEP1:
	case S_SLEEP2:
		a = e2e_connect(&x);
		if (wc_sleep(a, s == S_SLEEP1 ? 1 : 2, NULL, &e))
			T_FAIL("entering %s: %s", state_names[s], e.msg);
		wc_close(a);
		break;
	default:
		break;
	}

	ret = run_req(r, pre, msg, sizeof(msg));
	snprintf(exp, sizeof(exp), want->msg, (int)getpid());
	if (ret != -want->err || !strstr(msg, exp))
		T_FAIL("%s, %s: got %d (%s), want %d with \"%s\"",
		       state_names[s], req_names[r], ret, msg, -want->err, exp);
	st = status_state(&j);
	if (!st || strcmp(st, want->after))
		T_FAIL("%s, %s: state afterwards %s, want %s", state_names[s],
		       req_names[r], st ? st : "(none)", want->after);
	json_decref(j);
	printf("ok  %-22s %-8s -> %s%s%.80s\n", state_names[s], req_names[r],
	       ret ? "refused: " : "ok: ", "", msg);

	/* back to serving, one version, no lease */
	if (lm)
		T_OK(wc_detach(lm, &e));
	wc_close(lc);
	wc_close(pre);
	if (!strcmp(want->after, "sleeping")) {
		a = e2e_connect(&x);
		if (wc_wake(a, NULL, &e))
			T_FAIL("wake after %s, %s: %s", state_names[s],
			       req_names[r], e.msg);
		wc_close(a);
	}
	st = status_state(&j);
	T_EQ_STR(st, "ready");
	T_EQ_U64(json_array_size(json_object_get(j, "versions")), 1);
	json_decref(j);
}

int main(void)
{
	char wcgen[600];
	char *gen[] = { wcgen, "tiny", "--seed", "2", "--out", dirs[1], NULL };

	e2e_init(&x, "life_table");
	snprintf(dirs[0], sizeof(dirs[0]), "%s", x.model);
	snprintf(dirs[1], sizeof(dirs[1]), "%s/model2", x.dir);
	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x.bin);
	T_EQ_INT(e2e_run(x.log, gen), 0);
	e2e_start_wcd(&x, NULL);
	for (int s = 0; s < S_N; s++)
		for (int r = 0; r < R_N; r++)
			run_cell((enum state)s, (enum req)r);
	printf("life_table: %d cells\n", S_N * R_N);
	return 0;
}
