/* SPDX-License-Identifier: MIT */
/*
 * load_prepare's work that may take long, off the loop's thread: the
 * header reads (config.json, the index, every shard header), the
 * quantization gate, the layout (preset and files) and the plan with its
 * packing.
 *
 * model_open reads with plain blocking calls (on a hung file system one
 * never returns), and a plan is as long as its layout makes it (issue 26:
 * a rule glob that backtracked kept wcd at 100% CPU for minutes during an
 * update, deaf to its clients and to SIGTERM). So both run on a thread of
 * its own while this thread keeps turning the loop (clients served,
 * SIGTERM seen): first until the headers are read, --read-timeout passes
 * or the daemon is stopping; then, without a deadline, until the plan is
 * made or the daemon is stopping. A thread that never returns is left
 * behind: the box it fills is freed by whichever of the two lets go of it
 * last. Costs: one thread and one eventfd per load.
 *
 * Given the plan kept from before (an update session's open: the version
 * retired last, version_planned), the thread first checks whether its
 * files and layout are as they were (prep_again: a stat a file, the
 * layout's small files read again); if so it reads and plans nothing,
 * and the loop moves that plan into the new version.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "err.h"
#include "load/prep.h"
#include "log.h"
#include "quant.h"
#include "daemon/fault.h"

enum prep_stage {
	PREP_STARTED,
	PREP_READ,                    /* the headers are read (or failed) */
	PREP_PLANNED,                 /* the plan is made (or failed) */
};

struct prep_box {
	/* what the thread makes: valid together when ret == 0 at
	 * PREP_PLANNED */
	struct model m;
	struct plan_rules rules;
	struct plan plan;
	enum quant_verdict qv;
	char note[BASE_ERR_LEN];        /* a line for the loop to log, or "" */
	/* what it is given: copies, the thread may outlive the request */
	char path[PATH_MAX], layout[PATH_MAX], rules_file[PATH_MAX];
	char allow_quant[256];
	bool has_allow_quant;
	struct plan_params pp;
	uint64_t pool_size;
	bool flat;
	char err[BASE_ERR_LEN];
	int ret;
	/* the plan kept from before (load_prepare_again), as copies: its
	 * files and their stamps, its model's real path and architecture,
	 * its layout's hash; reused when the thread finds them unchanged,
	 * else why not */
	struct model_files again;
	char *again_path;
	char again_arch[MODEL_ARCH_MAX];
	uint8_t again_rules[BASE_HASH_LEN];
	bool reused;
	char again_why[BASE_ERR_LEN];
	int stage;                    /* __atomic: enum prep_stage */
	int efd;                      /* written by the thread at each stage */
	int refs;                     /* __atomic: the thread and the loop */
	bool taken;                   /* the loop took m, rules, plan */
};

static void box_put(struct prep_box *b)
{
	if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (!b->taken && b->ret == 0 &&
	    __atomic_load_n(&b->stage, __ATOMIC_ACQUIRE) == PREP_PLANNED) {
		plan_free(&b->plan);
		plan_rules_free(&b->rules);
		model_close(&b->m);
	}
	model_files_free(&b->again);
	free(b->again_path);
	close(b->efd);
	free(b);
}

void ld_test_stall(const char *path, const char *point)
{
	const char *fifo = fault_str(FAULT_STALL_FIFO);
	const char *dir = fault_str(FAULT_STALL_DIR);
	const char *at = fault_str(FAULT_STALL_AT);
	char b;
	int fd;

	if (!fifo || !dir || strcmp(dir, path) ||
	    strcmp(at && at[0] ? at : "open", point))
		return;
	fd = open(fifo, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, &b, 1) < 0)
			b = 0;
		close(fd);
	}
}

/* The layout: --layout FILE, else the architecture's preset (none at tp 1
 * and ep 1, or with --rules: everything replicated), then --rules FILE. */
static int prep_rules(struct prep_box *b, const char *arch, char *err)
{
	char perr[BASE_ERR_LEN];
	int ret;

	memset(&b->rules, 0, sizeof(b->rules));
	b->rules.vocab_pad = -1;
	if (b->layout[0]) {
		ret = plan_rules_file(&b->rules, b->layout, err);
		if (ret)
			return ret;
	} else {
		ret = plan_rules_preset(&b->rules, arch, perr);
		if (ret == -ENOTSUP) {
			if ((b->pp.tp_size > 1 || b->pp.ep_size > 1) &&
			    !b->rules_file[0])
				return base_errf(err, ENOTSUP, "%s", perr);
			memset(&b->rules, 0, sizeof(b->rules));
			b->rules.vocab_pad = -1;
			snprintf(b->note, sizeof(b->note),
				 "no split preset for architecture '%s'%s",
				 arch,
				 b->rules_file[0] ? "; using the rules file only" :
						    "; every tensor is replicated (tp 1)");
		} else if (ret) {
			return base_errf(err, -ret, "%s", perr);
		}
	}
	if (b->rules_file[0])
		return plan_rules_file(&b->rules, b->rules_file, err);
	return 0;
}

/* After the header reads: the gate (before anything is planned), the
 * layout, the plan and its packing. On an error nothing is left made. */
static int prep_plan(struct prep_box *b, char *err)
{
	int ret;

	ret = quant_check(&b->m.cfg,
			  b->has_allow_quant ? b->allow_quant : NULL, &b->qv,
			  err);
	if (ret)
		return ret;
	ld_test_stall(b->path, "plan");
	ret = prep_rules(b, b->m.cfg.arch, err);
	if (!ret)
		ret = plan_build_params(&b->plan, &b->m, &b->rules, &b->pp, err);
	if (!ret)
		ret = b->flat ? plan_pack_flat(&b->plan, b->pool_size, err) :
				plan_pack(&b->plan, b->pool_size, err);
	if (ret) {
		plan_free(&b->plan);
		plan_rules_free(&b->rules);
	}
	return ret;
}

static void stage_done(struct prep_box *b, enum prep_stage s)
{
	uint64_t one = 1;

	__atomic_store_n(&b->stage, s, __ATOMIC_RELEASE);
	if (write(b->efd, &one, sizeof(one)) < 0)
		b->ret = b->ret ? b->ret : -EIO;
}

/* Whether the plan kept from before is what reading the headers and the
 * layout again would make: the same real path, every file as it was, the
 * layout (its files read again: small) of the same hash. Why not in
 * again_why. */
static bool prep_again(struct prep_box *b)
{
	char *rp = realpath(b->path, NULL);
	bool same;

	if (!rp || strcmp(rp, b->again_path)) {
		snprintf(b->again_why, sizeof(b->again_why),
			 "the model's path names %.200s now, not %.200s",
			 rp ? rp : "nothing", b->again_path);
		free(rp);
		return false;
	}
	free(rp);
	if (!model_files_same(&b->again, b->again_why, sizeof(b->again_why)))
		return false;
	if (prep_rules(b, b->again_arch, b->again_why))
		return false;
	same = !memcmp(b->rules.hash, b->again_rules, BASE_HASH_LEN);
	plan_rules_free(&b->rules);
	if (!same)
		snprintf(b->again_why, sizeof(b->again_why),
			 "the layout's files changed");
	return same;
}

static void *prep_thread(void *arg)
{
	struct prep_box *b = arg;

	if (b->again_path && prep_again(b)) {
		b->reused = true;
		stage_done(b, PREP_READ);
		stage_done(b, PREP_PLANNED);
		box_put(b);
		return NULL;
	}
	ld_test_stall(b->path, "open");
	b->ret = model_open(&b->m, b->path, b->err);
	ld_test_stall(b->path, "parsed");
	if (b->ret) {
		stage_done(b, PREP_PLANNED);
		box_put(b);
		return NULL;
	}
	stage_done(b, PREP_READ);
	b->ret = prep_plan(b, b->err);
	if (b->ret)
		model_close(&b->m);
	stage_done(b, PREP_PLANNED);
	box_put(b);
	return NULL;
}

/* While the daemon stops: give the thread up. */
static bool prep_stopping(void *arg)
{
	return true;
}

/* Waits (turning the loop) until the thread reaches stage s, ns passes
 * (0: no deadline) or the daemon stops; true when it reached s. */
static bool wait_stage(struct wcd *d, struct prep_box *b, enum prep_stage s,
		       uint64_t ns, int *ret)
{
	uint64_t v;
	int res;

	while (__atomic_load_n(&b->stage, __ATOMIC_ACQUIRE) < (int)s) {
		*ret = ld_wait_readable(d, b->efd, ns, prep_stopping, NULL, &res);
		if (*ret || res <= 0)
			return false;
		if (read(b->efd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
			*ret = -errno;
			return false;
		}
	}
	return true;
}

static struct prep_box *box_new(struct wcd *d, const struct wcd_version *again,
				 char *err)
{
	struct prep_box *b = calloc(1, sizeof(*b));
	const char *flat = fault_str(FAULT_PACK);

	if (!b) {
		base_errf(err, ENOMEM, "out of memory");
		return NULL;
	}
	snprintf(b->path, sizeof(b->path), "%s", d->o.model);
	snprintf(b->layout, sizeof(b->layout), "%s", d->o.layout ? d->o.layout : "");
	snprintf(b->rules_file, sizeof(b->rules_file), "%s",
		 d->o.rules ? d->o.rules : "");
	b->has_allow_quant = d->o.allow_quant != NULL;
	snprintf(b->allow_quant, sizeof(b->allow_quant), "%s",
		 d->o.allow_quant ? d->o.allow_quant : "");
	b->pp = (struct plan_params){
		.tp_size = d->o.tp_size, .tp_rank = d->o.tp_rank,
		.pp_size = d->o.pp_size, .pp_rank = d->o.pp_rank,
		.ep_size = d->o.ep_size, .ep_rank = d->o.ep_rank,
		.vocab_pad = d->o.vocab_pad,
	};
	b->pool_size = d->o.pool_size;
	/* WCD_TEST_PACK=flat: pack as the builds before layers were packed
	 * whole (plan_pack_flat), to test that a handover between the two
	 * packings is refused */
	b->flat = flat && !strcmp(flat, "flat");
	/* out of memory for the copies: read again, as without one */
	if (again && !model_files_of(&again->model, &b->again)) {
		b->again_path = strdup(again->model.path);
		snprintf(b->again_arch, sizeof(b->again_arch), "%s",
			 again->model.cfg.arch);
		memcpy(b->again_rules, again->rules.hash, BASE_HASH_LEN);
	}
	b->refs = 2;
	b->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (b->efd < 0) {
		base_errf(err, errno, "eventfd: %s", strerror(errno));
		model_files_free(&b->again);
		free(b->again_path);
		free(b);
		return NULL;
	}
	return b;
}

void load_plan_move(struct wcd_version *to, struct wcd_version *from)
{
	WC_ASSERT(!to->model.path && !to->plan.ntensors);
	to->model = from->model;
	to->rules = from->rules;
	to->plan = from->plan;
	memset(&from->model, 0, sizeof(from->model));
	memset(&from->rules, 0, sizeof(from->rules));
	memset(&from->plan, 0, sizeof(from->plan));
}

int ld_prepare_bounded(struct wcd *d, struct wcd_version *v,
		       struct wcd_version *again, bool *reused, char *err)
{
	struct prep_box *b = box_new(d, again, err);
	uint64_t ms = d->o.read_timeout_ms, gen = d->model.planned_gen;
	pthread_attr_t at;
	pthread_t th;
	int ret = 0;

	if (!b)
		return -ENOMEM;
	/* a thread, not a pool job: a hung file system may keep it for good */
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	ret = pthread_create(&th, &at, prep_thread, b);
	pthread_attr_destroy(&at);
	if (ret) {
		b->refs = 1;              /* no thread: the last reference */
		box_put(b);
		return base_errf(err, ret, "cannot start the header reader: %s",
			       strerror(ret));
	}
	if (!wait_stage(d, b, PREP_READ, ms * 1000000, &ret)) {
		box_put(b);
		if (ret)
			return base_errf(err, -ret, "cannot watch the header reader: %s",
				       strerror(-ret));
		if (wcd_stopping(d))
			return base_errf(err, ECANCELED, "stopped while reading the headers of %s",
				       d->o.model);
		return base_errf(err, ETIMEDOUT,
			       "reading the headers of %s did not finish within %.3g s (--read-timeout): is its file system hung? Nothing was loaded",
			       d->o.model, (double)ms / 1000);
	}
	if (!wait_stage(d, b, PREP_PLANNED, 0, &ret)) {
		box_put(b);
		if (ret)
			return base_errf(err, -ret, "cannot watch the planner: %s",
				       strerror(-ret));
		return base_errf(err, ECANCELED, "stopped while planning the layout of %s",
			       d->o.model);
	}
	ret = b->ret;
	if (b->note[0])
		log_info("%s", b->note);
	if (again && !ret && !b->reused)
		log_info("the plan kept from before is not reused: %s",
			  b->again_path ? b->again_why : "out of memory");
	*reused = !ret && b->reused;
	if (*reused && gen != d->model.planned_gen) {
		/* again was freed or replaced while the loop turned (no
		 * update retires a version during another's open today):
		 * read the headers after all */
		box_put(b);
		return ld_prepare_bounded(d, v, NULL, reused, err);
	}
	if (*reused) {
		/* the files were as they were: again's model, rules and plan
		 * are what this load would have read and made */
		load_plan_move(v, again);
		d->model.planned_gen++;
	} else if (ret) {
		base_errf(err, ret, "%s", b->err);
	} else {
		v->model = b->m;
		v->rules = b->rules;
		v->plan = b->plan;
		b->taken = true;
		if (b->qv == QUANT_OVERRIDDEN)
			log_warn("QUANTIZATION OVERRIDE: serving '%s' zero-copy because of --allow-quant %s; this method is NOT verified (verified: %s); attached engines may compute with wrong numbers",
				 v->model.cfg.quant_method, b->allow_quant,
				 QUANT_VERIFIED_LIST);
	}
	box_put(b);
	return ret;
}
