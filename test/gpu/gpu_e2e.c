/* SPDX-License-Identifier: MIT */
/*
 * wcd on the GPU, end to end: a wcgen model loads into device 0; wcattach
 * --verify attaches from another process; this process attaches through
 * libwcache and compares every tensor's device bytes (copied back) with the
 * file's, byte for byte and by XXH3-128; a write through the read-only
 * mapping fails; after wcd is SIGKILLed the bytes still compare equal. The
 * same with `--ipc legacy` (its mappings are writable: CUDA IPC has no
 * read-only mode). Then two ranks of a TP=2 split on the one GPU (two wcd,
 * distinct runtime dirs) reassemble every tensor exactly, and every fused
 * view (qkv_proj, gate_up_proj) equals its parts back to back. Last, the
 * padding: a vocabulary of 515 rows at tp 2 (padded to 576, 288 rows per
 * rank) in pools wcd first fills with 0xa5 (WCD_TEST_DIRTY_POOLS=1): each
 * rank's real rows equal the file's and the zero rows after them (wcd's
 * zero_padding: the backend's pool_fill, cudaMemset) read as zeros,
 * through the same pointer.
 *
 *   gpu_e2e [MODEL_DIR]   default: a wcgen tiny model in a temp dir; also
 *                         WC_GPU_MODELS="DIR ..." runs the TP=1 part on each
 *
 * Skips (77) where the build has no CUDA, no GPU is found, or wcd/wcgen are
 * not built. Bound: E2E_TENSOR_MAX bytes per tensor compared in memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "gpu.h"
#include "hash.h"
#include "model.h"
#include "synth_model.h"
#include "t.h"
#include "t_wait.h"
#include "wcache.h"

#define E2E_TENSOR_MAX (2ull << 30)
#define E2E_READY_WAIT_MS 100000

extern char **environ;

static char bindir[512], tmp[256];
static struct gpu_dev dev;

static pid_t spawn(char **argv, const char *log)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;

	posix_spawn_file_actions_init(&fa);
	if (log) {
		posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		posix_spawn_file_actions_adddup2(&fa, 1, 2);
	}
	T_EQ_INT(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

static int run_wait(char **argv, const char *log)
{
	int st;
	pid_t pid = spawn(argv, log);

	T_EQ_INT(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void show_log(const char *log)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "tail -n 30 '%s' >&2", log);
	if (system(cmd) < 0)
		fprintf(stderr, "cannot show %s\n", log);
}

/* Starts wcd and waits for its ready file; returns its pid. */
static pid_t wcd_start(const char *model, const char *rundir, const char *tp_size,
		       const char *tp_rank, bool legacy, const char *log)
{
	char wcd[600], ready[600];
	char *argv[16];
	int n = 0, r, st;
	pid_t pid;

	snprintf(wcd, sizeof(wcd), "%s/wcd", bindir);
	argv[n++] = wcd;
	argv[n++] = "--model";
	argv[n++] = (char *)model;
	argv[n++] = "--device";
	argv[n++] = "0";
	argv[n++] = "--runtime-dir";
	argv[n++] = (char *)rundir;
	if (tp_size) {
		argv[n++] = "--tp-size";
		argv[n++] = (char *)tp_size;
		argv[n++] = "--tp-rank";
		argv[n++] = (char *)tp_rank;
	}
	if (legacy) {
		argv[n++] = "--ipc";
		argv[n++] = "legacy";
	}
	argv[n] = NULL;
	pid = spawn(argv, log);
	snprintf(ready, sizeof(ready), "%s/%s.ready", rundir, dev.name);
	r = t_wait_file(ready, pid, E2E_READY_WAIT_MS);
	if (r == 0)
		return pid;
	if (r == -ESRCH && waitpid(pid, &st, 0) == pid) {
		show_log(log);
		T_FAIL("wcd exited (status %d) before %s appeared", st, ready);
	}
	kill(pid, SIGKILL);
	show_log(log);
	T_FAIL("no %s after %d ms", ready, E2E_READY_WAIT_MS);
}

static void wcd_kill(pid_t pid)
{
	int st;

	T_OK(kill(pid, SIGKILL));
	T_EQ_INT(waitpid(pid, &st, 0), pid);
}

/* The bytes of tensor name in its file (malloc'ed), or NULL when absent. */
static unsigned char *file_bytes(const struct model *md, const char *name, uint64_t *len)
{
	const struct model_tensor *mt = model_find(md, name);
	unsigned char *p;
	int fd;

	if (!mt)
		return NULL;
	T_CMP_INT(mt->t->nbytes, <=, E2E_TENSOR_MAX);
	p = malloc(mt->t->nbytes ? mt->t->nbytes : 1);
	T_ASSERT(p);
	fd = open(md->shards[mt->shard].path, O_RDONLY | O_CLOEXEC);
	T_CMP_INT(fd, >=, 0);
	T_EQ_INT(pread(fd, p, mt->t->nbytes, mt->t->file_off), mt->t->nbytes);
	close(fd);
	*len = mt->t->nbytes;
	return p;
}

/* Copies a tensor's device bytes to host (malloc'ed). */
static unsigned char *dev_bytes(const struct wc_tensor *t)
{
	struct gpu_mapping view = { .size = t->bytes, .ptr = t->ptr };
	unsigned char *p = malloc(t->bytes ? t->bytes : 1);

	T_ASSERT(p);
	if (t->bytes)
		T_OK(dev.be->read_mapping(&dev, &view, 0, p, t->bytes));
	return p;
}

static struct wc_model *attach(const char *rundir, struct wc_conn **c)
{
	struct wc_connect_opts co = { .device = "0", .runtime_dir = rundir,
				      .label = "gpu_e2e" };
	struct wc_model *m;
	struct wc_error e;

	if (wc_connect(&co, c, &e) < 0)
		T_FAIL("wc_connect %s: %s", rundir, e.msg);
	if (wc_hello(*c, NULL, NULL, &e) < 0)
		T_FAIL("wc_hello: %s", e.msg);
	if (wc_attach(*c, 0, &m, NULL, &e) < 0)
		T_FAIL("wc_attach: %s", e.msg);
	T_EQ_INT(wc_model_info(m)->mem, WC_MEM_CUDA);
	return m;
}

/* A view's device bytes equal the stored entries of its range, back to
 * back (each already compared with its file), and hash as announced. */
static void check_view(struct wc_model *m, const struct wc_tensor *v)
{
	unsigned char *d = dev_bytes(v);
	uint64_t at = 0, n = wc_tensor_count(m);
	uint8_t h[WC_HASH_LEN];

	while (at < v->bytes) {
		const struct wc_tensor *part = NULL;
		unsigned char *pd;

		for (uint64_t i = 0; i < n && !part; i++) {
			const struct wc_tensor *t = wc_tensor_at(m, i);

			if (!(t->flags & WC_TENSOR_VIEW) && t->pool == v->pool &&
			    t->offset == v->offset + at && t->bytes)
				part = t;
		}
		if (!part)
			T_FAIL("view %s: no stored tensor at %llu of its bytes", v->name,
			       (unsigned long long)at);
		pd = dev_bytes(part);
		if (memcmp(d + at, pd, part->bytes))
			T_FAIL("view %s differs from its part %s", v->name, part->name);
		free(pd);
		at += part->bytes;
	}
	base_hash128(d, v->bytes, h);
	if ((v->flags & WC_TENSOR_HASHED) && memcmp(h, v->hash, WC_HASH_LEN))
		T_FAIL("view %s: manifest hash differs from its device bytes'", v->name);
	free(d);
}

/* Every tensor of m equals the file's, by bytes and by hash; every view
 * its parts. */
static void compare_all(const struct model *md, struct wc_model *m)
{
	uint64_t i, n = wc_tensor_count(m), len, stored = 0;
	uint8_t h[WC_HASH_LEN];

	for (i = 0; i < n; i++) {
		const struct wc_tensor *t = wc_tensor_at(m, i);
		unsigned char *f, *d;

		if (t->flags & WC_TENSOR_VIEW) {
			check_view(m, t);
			continue;
		}
		stored++;
		f = file_bytes(md, t->name, &len);

		if (!f)
			T_FAIL("tensor %s is not in the model's files", t->name);
		T_EQ_U64(t->bytes, len);
		d = dev_bytes(t);
		if (memcmp(f, d, len) != 0)
			T_FAIL("tensor %s: device bytes differ from the file's", t->name);
		base_hash128(f, len, h);
		if ((t->flags & WC_TENSOR_HASHED) && memcmp(h, t->hash, WC_HASH_LEN))
			T_FAIL("tensor %s: manifest hash differs from the file's", t->name);
		free(f);
		free(d);
	}
	T_EQ_U64(stored, md->ntensors);
}

/* One model, one rank: load, attach elsewhere, compare, read-only, kill. */
static void check_tp1(const char *model, bool legacy, const char *tag)
{
	char rundir[400], log[400], attach_bin[600];
	char *av[] = { attach_bin, "--runtime-dir", rundir, "--device", "0", "--verify", NULL };
	struct wc_pool_view pv;
	struct gpu_mapping view;
	unsigned char junk[256];
	struct wc_model *m;
	struct wc_conn *c;
	struct model md;
	char err[BASE_ERR_LEN];
	struct pollfd pfd;
	struct wc_error e;
	pid_t pid;
	int ret;

	snprintf(rundir, sizeof(rundir), "%s/run-%s", tmp, tag);
	snprintf(log, sizeof(log), "%s/wcd-%s.log", tmp, tag);
	snprintf(attach_bin, sizeof(attach_bin), "%s/wcattach", bindir);
	printf("%s: %s%s\n", tag, model, legacy ? " (--ipc legacy)" : "");
	T_OK(model_open(&md, model, err));
	pid = wcd_start(model, rundir, NULL, NULL, legacy, log);
	ret = run_wait(av, log);
	if (ret) {
		show_log(log);
		T_FAIL("wcattach --verify exited %d", ret);
	}
	m = attach(rundir, &c);
	compare_all(&md, m);

	T_OK(wc_pool_at(m, 0, &pv));
	T_EQ_INT(pv.writable, legacy);
	if (!legacy) {
		view.size = pv.size;
		view.ptr = pv.ptr;
		memset(junk, 0xee, sizeof(junk));
		T_CMP_INT(dev.be->write_mapping(&dev, &view, 0, junk, sizeof(junk)), <, 0);
	}

	wcd_kill(pid);
	pfd.fd = wc_daemon_fd(c);
	pfd.events = POLLIN;
	T_EQ_INT(poll(&pfd, 1, 5000), 1);
	compare_all(&md, m);
	wc_detach(m, &e);     /* the daemon is gone: DETACH may fail */
	wc_close(c);
	model_close(&md);
	printf("%s: every tensor equal before and after SIGKILL of wcd\n", tag);
}

/* Two ranks' pieces of a full tensor ft: both whole (replicated), a row
 * split (rank 0's rows, then rank 1's) or a column split of a matrix (each
 * full row is rank 0's part, then rank 1's). */
static void check_piece(const struct st_tensor *ft, const unsigned char *full,
			const struct wc_tensor *t0, const struct wc_tensor *t1)
{
	uint64_t len = ft->nbytes, rows, w0, w1, row;
	unsigned char *d0 = dev_bytes(t0), *d1 = dev_bytes(t1);
	uint32_t k;
	bool same = t0->ndim == ft->ndim && t1->ndim == ft->ndim, rest = same;

	for (k = 1; same && k < ft->ndim; k++)
		rest = rest && t0->shape[k] == ft->shape[k] && t1->shape[k] == ft->shape[k];
	if (t0->bytes == len && t1->bytes == len) {
		if (memcmp(d0, full, len) || memcmp(d1, full, len))
			T_FAIL("%s: a replicated copy differs", ft->name);
	} else if (same && ft->ndim >= 1 && rest &&
		   t0->shape[0] + t1->shape[0] == ft->shape[0]) {
		if (memcmp(full, d0, t0->bytes) || memcmp(full + t0->bytes, d1, t1->bytes))
			T_FAIL("%s: row split differs", ft->name);
	} else if (same && ft->ndim == 2 && t0->shape[0] == ft->shape[0] &&
		   t1->shape[0] == ft->shape[0] &&
		   t0->shape[1] + t1->shape[1] == ft->shape[1]) {
		rows = ft->shape[0];
		w0 = t0->bytes / rows;
		w1 = t1->bytes / rows;
		for (row = 0; row < rows; row++)
			if (memcmp(full + row * (w0 + w1), d0 + row * w0, w0) ||
			    memcmp(full + row * (w0 + w1) + w0, d1 + row * w1, w1))
				T_FAIL("%s: column-split row %llu differs", ft->name,
				       (unsigned long long)row);
	} else {
		T_FAIL("%s: ranks hold %llu + %llu bytes of a %llu-byte tensor in no known split",
		       ft->name, (unsigned long long)t0->bytes,
		       (unsigned long long)t1->bytes, (unsigned long long)len);
	}
	free(d0);
	free(d1);
}

static void check_tp2(const char *model)
{
	char rd[2][400], log[2][400], rank[2][4];
	struct wc_model *m[2];
	struct wc_conn *c[2];
	struct wc_error e;
	struct model md;
	char err[BASE_ERR_LEN];
	uint64_t i, len, n0;
	pid_t pid[2];
	int r;

	printf("tp2: %s\n", model);
	T_OK(model_open(&md, model, err));
	for (r = 0; r < 2; r++) {
		snprintf(rd[r], sizeof(rd[r]), "%s/run-tp2-rank%d", tmp, r);
		snprintf(log[r], sizeof(log[r]), "%s/wcd-tp2-rank%d.log", tmp, r);
		snprintf(rank[r], sizeof(rank[r]), "%d", r);
		pid[r] = wcd_start(model, rd[r], "2", rank[r], false, log[r]);
	}
	for (r = 0; r < 2; r++)
		m[r] = attach(rd[r], &c[r]);
	n0 = wc_tensor_count(m[0]);
	T_EQ_U64(n0, wc_tensor_count(m[1]));
	for (i = 0; i < n0; i++) {
		const struct wc_tensor *t0 = wc_tensor_at(m[0], i);
		const struct wc_tensor *t1 = wc_tensor_find(m[1], t0->name);
		unsigned char *full;

		T_ASSERT(t1);
		if (t0->flags & WC_TENSOR_VIEW) {
			check_view(m[0], t0);
			check_view(m[1], t1);
			continue;
		}
		full = file_bytes(&md, t0->name, &len);
		T_ASSERT(full);
		check_piece(model_find(&md, t0->name)->t, full, t0, t1);
		free(full);
	}
	for (r = 0; r < 2; r++) {
		wc_detach(m[r], &e);
		wc_close(c[r]);
		wcd_kill(pid[r]);
	}
	model_close(&md);
	printf("tp2: %llu tensors reassembled exactly\n", (unsigned long long)n0);
}

/* A padded vocabulary at tp 2: real rows from the file, zero rows after. */
static void check_padding(void)
{
	static struct synth s;
	char dir[400], rd[2][400], log[2][400], rank[2][4];
	struct wc_model *m[2];
	struct wc_conn *c[2];
	struct wc_error e;
	struct model md;
	char err[BASE_ERR_LEN];
	pid_t pid[2];
	int r;

	snprintf(dir, sizeof(dir), "%s/padded", tmp);
	s.n = 0;
	synth_add(&s, "BF16", 2, 2, 515, 128, 0, "model.embed_tokens.weight");
	synth_add(&s, "BF16", 2, 2, 515, 128, 0, "lm_head.weight");
	synth_add(&s, "BF16", 2, 1, 128, 0, 0, "model.norm.weight");
	synth_add(&s, "BF16", 2, 2, 128, 128, 0, "model.layers.0.self_attn.q_proj.weight");
	synth_add(&s, "BF16", 2, 2, 64, 128, 0, "model.layers.0.self_attn.k_proj.weight");
	synth_add(&s, "BF16", 2, 2, 64, 128, 0, "model.layers.0.self_attn.v_proj.weight");
	synth_add(&s, "BF16", 2, 2, 128, 128, 0, "model.layers.0.self_attn.o_proj.weight");
	synth_write(&s, dir, "{\"architectures\": [\"LlamaForCausalLM\"], \"torch_dtype\": \"bfloat16\", \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 1}");
	T_OK(model_open(&md, dir, err));
	setenv("WCD_TEST_DIRTY_POOLS", "1", 1);
	for (r = 0; r < 2; r++) {
		snprintf(rd[r], sizeof(rd[r]), "%s/run-pad-rank%d", tmp, r);
		snprintf(log[r], sizeof(log[r]), "%s/wcd-pad-rank%d.log", tmp, r);
		snprintf(rank[r], sizeof(rank[r]), "%d", r);
		pid[r] = wcd_start(dir, rd[r], "2", rank[r], false, log[r]);
	}
	for (r = 0; r < 2; r++) {
		m[r] = attach(rd[r], &c[r]);
		for (int k = 0; k < 2; k++) {
			const char *name = k ? "lm_head.weight" : "model.embed_tokens.weight";
			const struct wc_tensor *t = wc_tensor_find(m[r], name);
			uint64_t rows = r ? 515 - 288 : 288, row = 128 * 2, len;
			struct gpu_mapping view;
			unsigned char *f = file_bytes(&md, name, &len), *d;

			T_ASSERT(t && f);
			T_EQ_U64(t->padded_rows, 288);
			T_EQ_U64(t->shape[0], rows);
			T_EQ_U64(t->bytes, rows * row);
			d = malloc(288 * row);
			T_ASSERT(d);
			view.size = 288 * row;
			view.ptr = t->ptr;
			T_OK(dev.be->read_mapping(&dev, &view, 0, d, 288 * row));
			if (memcmp(d, f + (r ? 288 * row : 0), rows * row))
				T_FAIL("rank %d %s: real rows differ from the file", r, name);
			for (uint64_t b = rows * row; b < 288 * row; b++)
				if (d[b])
					T_FAIL("rank %d %s: padding byte %llu of %llu is 0x%02x, not zero",
					       r, name, (unsigned long long)(b - rows * row),
					       (unsigned long long)((288 - rows) * row), d[b]);
			free(d);
			free(f);
		}
		for (uint64_t i = 0; i < wc_tensor_count(m[r]); i++)
			if (wc_tensor_at(m[r], i)->flags & WC_TENSOR_VIEW)
				check_view(m[r], wc_tensor_at(m[r], i));
	}
	unsetenv("WCD_TEST_DIRTY_POOLS");
	for (r = 0; r < 2; r++) {
		wc_detach(m[r], &e);
		wc_close(c[r]);
		wcd_kill(pid[r]);
	}
	model_close(&md);
	printf("padding: 515 rows at tp 2 (P = 288): rank 1's %d zero rows read as zeros in pools filled with 0xa5\n",
	       288 - (515 - 288));
}

int main(int argc, char **argv)
{
	const struct gpu_backend *be = gpu_cuda_backend();
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
	const char *top = getenv("WC_TOP") ? getenv("WC_TOP") : ".";
	char model[600], wcgen[600], err[BASE_ERR_LEN], *list, *tok, *save;
	char tag[16];
	int nextra = 0;
	char *gen[] = { wcgen, "tiny", "--out", model, NULL };
	int ret;

	T_SKIP_IF(!be, "built without CUDA");
	ret = be->open(&dev, "0", err);
	T_SKIP_IF(ret == -ENODEV, "%s", err);
	T_OK(ret);
	snprintf(bindir, sizeof(bindir), "%s/%s/bin", top, build);
	snprintf(wcgen, sizeof(wcgen), "%s/wcgen", bindir);
	snprintf(model, sizeof(model), "%s/wcd", bindir);
	T_SKIP_IF(access(wcgen, X_OK) || access(model, X_OK),
		  "wcd or wcgen not built in %s", bindir);
	snprintf(tmp, sizeof(tmp), "/tmp/wct_gpu_e2e.XXXXXX");
	T_ASSERT(mkdtemp(tmp));
	if (argc > 1) {
		snprintf(model, sizeof(model), "%s", argv[1]);
	} else {
		snprintf(model, sizeof(model), "%s/model", tmp);
		T_EQ_INT(run_wait(gen, NULL), 0);
	}
	check_tp1(model, false, "vmm");
	check_tp1(model, true, "legacy");
	check_tp2(model);
	check_padding();
	list = getenv("WC_GPU_MODELS") ? strdup(getenv("WC_GPU_MODELS")) : NULL;
	for (tok = list ? strtok_r(list, " ", &save) : NULL; tok;
	     tok = strtok_r(NULL, " ", &save)) {
		snprintf(tag, sizeof(tag), "extra%d", nextra++);
		check_tp1(tok, false, tag);
	}
	free(list);
	snprintf(model, sizeof(model), "rm -rf '%s'", tmp);
	T_EQ_INT(system(model), 0);
	be->close(&dev);
	return 0;
}
