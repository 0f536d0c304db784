/* SPDX-License-Identifier: MIT */
/*
 * wcctl verify: re-reads a running daemon's checkpoint from disk and
 * compares every tensor's XXH3-128 with the one it serves.
 *
 * Why: the checkpoint digest in the identity covers each shard's name,
 * size, mtime and header, not the tensor bytes (reading them all at every
 * engine start would cost what the cache saves). A shard rewritten in place
 * with the same size, header and mtime therefore goes unseen: the daemon
 * serves the bytes it loaded, and engines accept them. This command is the
 * operator's check: it plans this rank's tensors exactly as wcd does (the
 * daemon's model path and tp/pp from HELLO, the architecture's preset or
 * --rules FILE), reads each one's rows from its shard and hashes them.
 * Costs one full read of this rank's share of the checkpoint; nothing is
 * mapped and no lease is taken.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "cli.h"
#include "err.h"
#include "hash.h"
#include "model.h"
#include "plan.h"
#include "wcache.h"
#include "wcctl.h"

#define VERIFY_BUF (8u << 20)
#define VERIFY_SHOWN 8          /* mismatches listed by name */

static void verify_usage(FILE *f)
{
	fprintf(f,
		"usage: wcctl verify (--device D | --all) [--runtime-dir DIR | --socket PATH]\n"
		"                    [--rules FILE] [--json]\n"
		"\n"
		"Re-reads the checkpoint a running daemon serves and compares every tensor's\n"
		"XXH3-128 with the served one. The identity's checkpoint digest covers each\n"
		"shard's name, size, mtime and header, not its bytes: a shard rewritten in\n"
		"place with the same size, header and mtime is only found this way.\n"
		"\n"
		"  --device D          host, host:NAME, host-NAME (as status prints it), a\n"
		"                      CUDA ordinal or GPU-<uuid>\n"
		"  --all               every daemon with a ready file in the runtime\n"
		"                      directory, one after the other (--json: one object\n"
		"                      a line)\n"
		"  --runtime-dir DIR   the daemons' runtime directory\n"
		"  --socket PATH       the daemon's socket instead\n"
		"  --rules FILE        the rules file the daemon was started with, if any\n"
		"  --json              one JSON object\n"
		"\n"
		"Examples:\n"
		"  wcctl verify --device 0\n"
		"  wcctl verify --device host:demo --runtime-dir /run/wcache --json\n"
		"\n"
		"Exit status: 0 every hash matches, 1 a mismatch or an error (with --all:\n"
		"of any daemon), 2 usage, 3 no daemon was found (--all).\n");
}

/* Hashes a piece's source bytes into h: height rows of width bytes,
 * src_pitch apart, from file_off of its shard. */
static int hash_piece(int fd, const struct plan_piece *pc, uint8_t *buf,
		      struct base_hasher *h)
{
	for (uint64_t row = 0; row < pc->height; row++) {
		uint64_t off = pc->file_off + row * pc->src_pitch, left = pc->width;

		while (left) {
			size_t n = left < VERIFY_BUF ? (size_t)left : VERIFY_BUF;
			ssize_t r = pread(fd, buf, n, (off_t)off);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return r < 0 ? -errno : -EIO;
			base_hasher_update(h, buf, (size_t)r);
			off += (uint64_t)r;
			left -= (uint64_t)r;
		}
	}
	return 0;
}

/* XXH3-128 of entry e's served bytes, read from the shards: its pieces; a
 * view's parts' pieces in order; an alias's target's. *failed gets the
 * shard that could not be read. */
static int hash_from_files(const struct model *m, const struct plan *p,
			   uint32_t e, int *fds, uint8_t *buf,
			   uint8_t out[WC_HASH_LEN], uint32_t *failed)
{
	const struct plan_tensor *t = &p->t[e];
	uint32_t one = e, *list = &one, n = 1;
	struct base_hasher h;

	if (t->flags & PLAN_T_ALIAS) {
		WC_ASSERT(t->target < p->ntensors);
		one = t->target;
	} else if (t->flags & PLAN_T_VIEW) {
		const struct plan_group *g;

		WC_ASSERT(t->target < p->ntensors &&
			  p->t[t->target].group >= 0 &&
			  (uint32_t)p->t[t->target].group < p->ngroups);
		g = &p->g[p->t[t->target].group];
		list = &p->members[g->member0];
		n = g->n;
	}
	base_hasher_init(&h);
	for (uint32_t k = 0; k < n; k++) {
		const struct plan_tensor *x = &p->t[list[k]];

		for (uint32_t j = 0; j < x->npieces; j++) {
			const struct plan_piece *pc = &p->pc[x->piece0 + j];
			int r;

			WC_ASSERT(pc->shard < m->nshards);   /* plan_build's */
			if (fds[pc->shard] < 0)
				fds[pc->shard] = open(m->shards[pc->shard].path,
						      O_RDONLY | O_NONBLOCK | O_CLOEXEC);
			r = fds[pc->shard] < 0 ? -errno :
			    hash_piece(fds[pc->shard], pc, buf, &h);
			if (r) {
				*failed = pc->shard;
				return r;
			}
		}
	}
	base_hasher_final(&h, out);
	return 0;
}

static int load_rules(struct plan_rules *r, const char *path, const char *arch,
		      char *err)
{
	struct stat st;
	char *buf;
	ssize_t n;
	int fd, ret;

	memset(r, 0, sizeof(*r));
	if (!path)
		return plan_rules_preset(r, arch, err);
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return base_errf(err, errno, "cannot open the rules file %s: %s",
			       path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
	    st.st_size > PLAN_RULES_FILE_MAX) {
		close(fd);
		return base_errf(err, EINVAL,
			       "the rules file %s is not a regular file of at most %u bytes",
			       path, PLAN_RULES_FILE_MAX);
	}
	buf = malloc((size_t)st.st_size + 1);
	n = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return base_errf(err, EIO, "cannot read the rules file %s", path);
	}
	ret = plan_rules_parse(r, buf, (size_t)n, path, err);
	free(buf);
	return ret;
}

/* What the comparison found: tensors compared, mismatched (the first
 * VERIFY_SHOWN named in shown), planned but not served, served unhashed. */
struct verify_counts {
	uint64_t checked, bad, unhashed, missing;
	char shown[1024];
	size_t off;
};

/* Hashes every planned tensor of p from m's shards and compares it with
 * the hash wm serves, counting into *n. Returns 0, or 1 when a shard could
 * not be read or memory ran out (said on stderr). Costs one read of the
 * rank's share of the checkpoint, VERIFY_BUF bytes at a time. */
static int verify_tensors(const struct model *m, const struct plan *p,
			  const struct wc_model *wm, struct verify_counts *n)
{
	uint8_t *buf = malloc(VERIFY_BUF);
	int *fds = calloc(m->nshards ? m->nshards : 1, sizeof(int));
	int ret = 1;

	if (!buf || !fds) {
		fprintf(stderr, "wcctl verify: out of memory\n");
		goto out;
	}
	for (uint32_t i = 0; i < m->nshards; i++)
		fds[i] = -1;
	for (uint32_t i = 0; i < p->ntensors; i++) {
		const struct plan_tensor *t = &p->t[i];
		const struct wc_tensor *s = wc_tensor_find(wm, t->name);
		uint8_t h[WC_HASH_LEN];
		uint32_t shard = 0;
		int r;

		if (!s) {
			n->missing++;
			continue;
		}
		if (!(s->flags & WC_TENSOR_HASHED)) {
			n->unhashed++;
			continue;
		}
		r = hash_from_files(m, p, i, fds, buf, h, &shard);
		if (r) {
			fprintf(stderr, "wcctl verify: cannot read %s for %s: %s\n",
				m->shards[shard].path, t->name, strerror(-r));
			goto out_fds;
		}
		n->checked++;
		if (memcmp(h, s->hash, WC_HASH_LEN)) {
			if (n->bad < VERIFY_SHOWN && n->off < sizeof(n->shown))
				n->off += (size_t)snprintf(n->shown + n->off,
					sizeof(n->shown) - n->off, "%s%s",
					n->bad ? ", " : "", t->name);
			n->bad++;
		}
	}
	WC_ASSERT(n->checked + n->missing + n->unhashed == p->ntensors);
	ret = 0;
out_fds:
	for (uint32_t i = 0; i < m->nshards; i++)
		if (fds[i] >= 0)
			close(fds[i]);
out:
	free(buf);
	free(fds);
	return ret;
}

/* The outcome on stdout: one JSON object, or the sentences that say what
 * differs and what to do. ret: the exit status, 0 when all matched. */
static void verify_report(const struct wc_info *in,
			  const struct verify_counts *n, bool json, int ret)
{
	if (json) {
		printf("{\"device\":\"%s\",\"model\":\"%s\",\"version\":%" PRIu64
		       ",\"checked\":%" PRIu64 ",\"mismatched\":%" PRIu64
		       ",\"missing\":%" PRIu64 ",\"unhashed\":%" PRIu64
		       ",\"ok\":%s}\n", in->device, in->model, in->version,
		       n->checked, n->bad, n->missing, n->unhashed,
		       ret ? "false" : "true");
		return;
	}
	if (!ret) {
		printf("verified %" PRIu64 " tensors of %s (version %" PRIu64 ") against %s: every hash matches the files\n",
		       n->checked, in->device, in->version, in->model);
		return;
	}
	if (n->bad)
		printf("%" PRIu64 " of %" PRIu64 " tensors served by %s differ from the files in %s (%s%s): the files changed after the daemon loaded them (an update sees the same checkpoint digest and refuses): restart the daemon to serve the new bytes, or restore the files\n",
		       n->bad, n->checked, in->device, in->model, n->shown,
		       n->bad > VERIFY_SHOWN ? ", ..." : "");
	if (n->missing)
		printf("%" PRIu64 " planned tensors are not served by %s: the daemon was started with other rules (pass --rules FILE)\n",
		       n->missing, in->device);
	if (n->unhashed)
		printf("%" PRIu64 " tensors carry no hash (the daemon runs with --no-hash): they cannot be verified\n",
		       n->unhashed);
}

int wcctl_verify(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "socket", required_argument, NULL, 's' },
		{ "all", no_argument, NULL, 'a' },
		{ "rules", required_argument, NULL, 'R' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct wc_connect_opts co = { .label = "wcctl verify" };
	const char *rules_path = NULL;
	char err[BASE_ERR_LEN];
	struct verify_counts n = { 0 };
	struct plan_rules rules = { 0 };
	const struct wc_info *in;
	struct wc_model *wm;
	struct wc_conn *c;
	struct model m;
	struct plan p;
	bool json = false, all = false;
	int ch, ret = 1;

	optind = 1;
	while ((ch = cli_getopt(argc, argv, "h", lo, "wcctl verify")) != -1) {
		switch (ch) {
		case 'd': co.device = optarg; break;
		case 'r': co.runtime_dir = optarg; break;
		case 's': co.socket = optarg; break;
		case 'R': rules_path = optarg; break;
		case 'j': json = true; break;
		case 'a': all = true; break;
		case 'h': verify_usage(stdout); return 0;
		default: verify_usage(stderr); return 2;
		}
	}
	if (all && (co.device || co.socket)) {
		fprintf(stderr, "wcctl verify: give --device D, --socket PATH or --all, not two of them\n");
		return 2;
	}
	if (all && optind == argc)
		return wcctl_each_daemon(co.runtime_dir, argc, argv, wcctl_verify);
	if (wcctl_need_target(&co, optind < argc))
		return 2;
	if (wcctl_get_manifest(&co, &c, &wm))
		return 1;
	in = wc_model_info(wm);
	if (model_open(&m, in->model, err)) {
		fprintf(stderr, "wcctl verify: cannot read the served checkpoint %s: %s\n",
			in->model, err);
		goto out_manifest;
	}
	if (load_rules(&rules, rules_path, m.cfg.arch, err) ||
	    plan_build(&p, &m, &rules, (uint32_t)in->tp_size,
		       (uint32_t)in->tp_rank, (uint32_t)in->pp_size,
		       (uint32_t)in->pp_rank, err)) {
		fprintf(stderr, "wcctl verify: cannot plan %s as the daemon does: %s%s\n",
			in->model, err,
			rules_path ? "" : " (was the daemon started with --rules FILE? pass it)");
		goto out_model;
	}
	if (verify_tensors(&m, &p, wm, &n) == 0) {
		ret = n.bad || n.missing || n.unhashed ? 1 : 0;
		verify_report(in, &n, json, ret);
	}
	plan_free(&p);
out_model:
	plan_rules_free(&rules);
	model_close(&m);
out_manifest:
	wc_detach(wm, NULL);
	wc_close(c);
	return ret;
}
