/* SPDX-License-Identifier: MIT */
/*
 * Versioned weight updates against a real wcd (host backend):
 *
 *  - An engine (a child process) attached to version 1 while version 2
 *    (another wcgen seed: same shapes, other bytes) is loaded: it gets a
 *    NOTICE naming version 2 and keeps reading version 1's bytes (byte
 *    compare with the files, and wc_verify); a new engine gets version 2
 *    and reads its bytes; an engine expecting version 1's checkpoint is
 *    refused with the differing fields; the ready file says version=2;
 *    STATUS lists both versions with the pids holding them, and after the
 *    old engine detaches only version 2, with the resident bytes of one
 *    version.
 *  - Failed updates leave the served version untouched: a truncated shard,
 *    a corrupt header, another dtype (identity mismatch naming the field),
 *    free memory too short (both sizes in the message; MemAvailable comes
 *    from the file WCD_MEMINFO names), the checkpoint already served, and a
 *    third version while the two resident ones are both held.
 */
#include <poll.h>

#include "client_util.h"

static struct e2e x, x2;         /* x2: the same daemon, version 2's files */
static char meminfo[200];

static void write_meminfo(unsigned long long kb)
{
	FILE *f = fopen(meminfo, "w");

	T_ASSERT(f);
	fprintf(f, "MemTotal:       %llu kB\nMemFree:        %llu kB\nMemAvailable:   %llu kB\n",
		kb * 2, kb, kb);
	T_ASSERT(fclose(f) == 0);
}

static void sh(const char *fmt, const char *a, const char *b)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), fmt, a, b);
	if (system(cmd))
		T_FAIL("command failed: %s", cmd);
}

static json_t *status_versions(json_t **j)
{
	*j = e2e_status(&x);
	return json_object_get(*j, "versions");
}

static json_int_t jint(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	if (!json_is_integer(v))
		T_FAIL("STATUS field %s is missing or not an integer", k);
	return json_integer_value(v);
}

/* The old engine: attach to version 1, then on cue check the notice and
 * the bytes, then on cue detach. */
static int engine_old(int up, int down)
{
	struct wc_expect ex = { .model_dir = x.model };
	struct wc_conn *c = e2e_connect(&x);
	struct pollfd p = { .events = POLLIN };
	struct wc_notice nt;
	struct wc_model *m;
	struct wc_error e;
	uint64_t bad = 1;
	char b;

	if (wc_hello(c, &ex, NULL, &e) || wc_attach(c, 0, &m, NULL, &e))
		T_FAIL("old engine: %s", e.msg);
	T_EQ_U64(wc_model_info(m)->version, 1);
	T_EQ_INT(write(up, "a", 1), 1);
	T_EQ_INT(read(down, &b, 1), 1);           /* the update is done */
	p.fd = wc_notice_fd(c);
	T_EQ_INT(poll(&p, 1, 10000), 1);
	T_EQ_INT(wc_notice_read(c, &nt, &e), 1);
	T_EQ_INT(nt.kind, WC_NOTICE_VERSION);
	T_EQ_U64(nt.version, 2);
	T_HAS(nt.msg, "re-attach");
	e2e_compare_all(&x, m);                   /* still version 1's bytes */
	if (wc_verify(m, &bad, &e))
		T_FAIL("old engine: verify: %s", e.msg);
	T_EQ_INT(write(up, "b", 1), 1);
	T_EQ_INT(read(down, &b, 1), 1);           /* detach now */
	T_OK(wc_detach(m, &e));
	wc_close(c);
	return 0;
}

static int update(const char *dir, struct wc_life_result *r, char *msg)
{
	struct wc_conn *c = e2e_connect(&x);
	struct wc_error e;
	int ret = wc_update(c, dir, r, &e);

	snprintf(msg, WC_ERR_MSG_LEN, "%s", ret ? e.msg : r->msg);
	wc_close(c);
	return ret;
}

/* A failed update: the refusal has want in it, and version `ver` still
 * serves (one version resident, the same bytes) to a new engine. */
static void update_fails(const char *dir, int err, const char *want,
			 uint64_t ver, json_int_t resident)
{
	struct wc_life_result r;
	struct wc_expect ex = { .model_dir = x2.model };
	char msg[WC_ERR_MSG_LEN];
	struct wc_conn *c;
	struct wc_model *m;
	struct wc_error e;
	json_t *j, *vs;
	int ret = update(dir, &r, msg);

	if (ret != -err || !strstr(msg, want))
		T_FAIL("update to %s: got %d (%s), want %d with \"%s\"", dir,
		       ret, msg, -err, want);
	vs = status_versions(&j);
	T_EQ_U64(jint(j, "version"), ver);
	T_EQ_U64(json_array_size(vs), 1);
	T_EQ_U64(jint(j, "resident_bytes"), resident);
	T_EQ_STR(json_string_value(json_object_get(j, "state")), "ready");
	json_decref(j);
	c = e2e_connect(&x);
	if (wc_hello(c, &ex, NULL, &e) || wc_attach(c, 0, &m, NULL, &e))
		T_FAIL("attach after a failed update: %s", e.msg);
	T_EQ_U64(wc_model_info(m)->version, ver);
	e2e_compare_all(&x2, m);
	wc_close(c);
	printf("ok  refused, version %llu serves: %.150s\n",
	       (unsigned long long)ver, msg);
}

/* The ready file says version 2, from version 2's files. */
static void ready_file_version2(void)
{
	char ready[2048];
	size_t n;
	FILE *f;

	f = fopen(x.ready, "r");
	T_ASSERT(f);
	n = fread(ready, 1, sizeof(ready) - 1, f);
	fclose(f);
	ready[n] = '\0';
	T_HAS(ready, "\nversion=2\n");
	T_HAS(ready, x2.m.path);
}

/* A new engine gets version 2 and its bytes (*cb, *mb: it stays
 * attached); one still expecting version 1's checkpoint is refused. */
static void new_engine(struct wc_conn **cb, struct wc_model **mb)
{
	struct wc_expect ex2 = { .model_dir = x2.model }, ex1;
	struct wc_info info;
	struct wc_conn *c;
	struct wc_error e;
	uint64_t nbad = 1;

	*cb = e2e_connect(&x);
	if (wc_hello(*cb, &ex2, &info, &e) || wc_attach(*cb, 0, mb, NULL, &e))
		T_FAIL("new engine: %s", e.msg);
	T_EQ_U64(info.version, 2);
	T_EQ_U64(wc_model_info(*mb)->version, 2);
	e2e_compare_all(&x2, *mb);
	if (wc_verify(*mb, &nbad, &e))
		T_FAIL("new engine: verify: %s", e.msg);
	/* an engine still expecting version 1's checkpoint is refused */
	c = e2e_connect(&x);
	ex1 = (struct wc_expect){ .model_dir = x.model };
	T_EQ_INT(wc_hello(c, &ex1, NULL, &e), -ESTALE);
	T_HAS(e.msg, "ckpt_digest");
	wc_close(c);
}

/* Version 2 loads while an old engine holds version 1: the old engine
 * keeps version 1's bytes, a new one (*cb, *mb, left attached) gets
 * version 2's, STATUS lists both with their pids, and version 1 is freed
 * when the old engine detaches. one: the resident bytes of one version. */
static void update_beside_old_engine(json_int_t one, struct wc_conn **cb,
				     struct wc_model **mb)
{
	char msg[WC_ERR_MSG_LEN];
	struct wc_life_result r;
	json_t *j, *vs, *v;
	int up[2], down[2], st;
	pid_t old;
	size_t i;
	char b;

	/* the old engine attaches to version 1 */
	T_OK(pipe(up) ? -errno : 0);
	T_OK(pipe(down) ? -errno : 0);
	old = fork();
	T_ASSERT(old >= 0);
	if (!old)
		_exit(engine_old(up[1], down[0]));
	T_EQ_INT(read(up[0], &b, 1), 1);

	/* version 2 loads beside it */
	if (update(x2.model, &r, msg))
		T_FAIL("update: %s", msg);
	T_EQ_U64(r.version, 2);
	T_HAS(msg, "version 1 stays until its engines detach");
	ready_file_version2();
	T_EQ_INT(write(down[1], "g", 1), 1);
	T_EQ_INT(read(up[0], &b, 1), 1);          /* old engine checked */

	new_engine(cb, mb);

	/* STATUS: both versions, each with the pid that holds it */
	vs = status_versions(&j);
	T_EQ_U64(json_array_size(vs), 2);
	T_EQ_U64(jint(j, "version"), 2);
	T_EQ_U64(jint(j, "resident_bytes"), 2 * one);
	json_array_foreach(vs, i, v) {
		json_t *pids = json_object_get(v, "pids");
		pid_t want = jint(v, "version") == 1 ? old : getpid();

		T_EQ_U64(json_array_size(pids), 1);
		T_EQ_INT(json_integer_value(json_array_get(pids, 0)), want);
		T_EQ_INT(jint(v, "leases"), 1);
	}
	json_decref(j);

	/* the old engine detaches: version 1 is freed */
	T_EQ_INT(write(down[1], "d", 1), 1);
	T_EQ_INT(waitpid(old, &st, 0), old);
	T_EQ_INT(st, 0);
	vs = status_versions(&j);
	T_EQ_U64(json_array_size(vs), 1);
	T_EQ_U64(jint(json_array_get(vs, 0), "version"), 2);
	T_EQ_U64(jint(j, "resident_bytes"), one);
	T_EQ_U64(jint(j, "bytes"), x2.m.total_bytes);
	json_decref(j);
	printf("ok  update with an engine attached: old bytes kept, new bytes served, old freed on detach\n");
}

/* Failed updates: version 2 keeps serving, untouched. */
static void failed_updates(json_int_t one)
{
	char wcgen[600], bad[160], e2m[1400];
	char *gen16[] = { wcgen, "tiny", "--dtype", "f16", "--out", bad, NULL };

	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x.bin);
	snprintf(bad, sizeof(bad), "%.100s/trunc", x.dir);
	sh("cp -r '%s' '%s'", x.model, bad);
	sh("truncate -s -100 '%s/model.safetensors' %s", bad, "");
	update_fails(bad, EINVAL, "keeps serving, untouched", 2, one);
	sh("rm -rf '%s'%s", bad, "");

	snprintf(bad, sizeof(bad), "%.100s/header", x.dir);
	sh("cp -r '%s' '%s'", x.model, bad);
	sh("printf 'XXXX' | dd of='%s/model.safetensors' bs=1 seek=9 conv=notrunc status=none %s",
	   bad, "");
	update_fails(bad, EINVAL, "keeps serving, untouched", 2, one);
	sh("rm -rf '%s'%s", bad, "");

	snprintf(bad, sizeof(bad), "%.100s/f16", x.dir);
	T_EQ_INT(e2e_run(x.log, gen16), 0);
	update_fails(bad, ESTALE, "it differs in dtype (served", 2, one);

	write_meminfo(1000);
	snprintf(e2m, sizeof(e2m),
		 "update refused before loading anything: version 3 needs %lld bytes on device host-%.100s beside the %lld bytes of version 2, but only 1024000 bytes are free (MemAvailable)",
		 (long long)one, x.device + 5, (long long)one);
	update_fails(x.model, EAGAIN, e2m, 2, one);
	write_meminfo(64ull << 20);

	update_fails("", EINVAL, "is the one version 2 already serves", 2, one);
}

/* Version 3 loads while the new engine (cb, mb) holds version 2; a fourth
 * does not fit until it detaches. */
static void third_version(struct wc_conn *cb, struct wc_model *mb)
{
	char msg[WC_ERR_MSG_LEN], want[64];
	struct wc_life_result r;
	struct wc_error e;
	json_t *j;

	if (update(x.model, &r, msg))
		T_FAIL("update to version 3: %s", msg);
	T_EQ_U64(r.version, 3);
	T_EQ_INT(update(x2.model, &r, msg), -EBUSY);
	T_HAS(msg, "versions 2 and 3 are both resident");
	snprintf(want, sizeof(want), "attached by pids %d", (int)getpid());
	T_HAS(msg, want);
	e2e_compare_all(&x2, mb);                 /* still version 2 */
	T_OK(wc_detach(mb, &e));
	T_EQ_U64(json_array_size(status_versions(&j)), 1);
	T_EQ_U64(jint(j, "version"), 3);
	json_decref(j);
	wc_close(cb);
}

int main(void)
{
	char wcgen[600], dir2[120], e2m[1400];
	char *gen[] = { wcgen, "tiny", "--seed", "2", "--out", dir2, NULL };
	struct wc_conn *cb;
	struct wc_model *mb;
	json_int_t one;
	json_t *j;

	e2e_init(&x, "life_update");
	snprintf(dir2, sizeof(dir2), "%.100s/model2", x.dir);
	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", x.bin);
	T_EQ_INT(e2e_run(x.log, gen), 0);
	x2 = x;
	snprintf(x2.model, sizeof(x2.model), "%s", dir2);
	if (model_open(&x2.m, dir2, e2m))
		T_FAIL("model_open %s: %s", dir2, e2m);
	snprintf(meminfo, sizeof(meminfo), "%s/meminfo", x.dir);
	write_meminfo(64ull << 20);              /* 64 GiB: room */
	setenv("WCD_MEMINFO", meminfo, 1);
	e2e_start_wcd(&x, NULL);
	status_versions(&j);
	one = jint(j, "resident_bytes");
	T_CMP_INT(one, >=, (json_int_t)x.m.total_bytes);
	json_decref(j);

	update_beside_old_engine(one, &cb, &mb);
	failed_updates(one);
	third_version(cb, mb);
	model_close(&x2.m);
	printf("life_update: ok\n");
	return 0;
}
