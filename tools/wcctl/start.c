/* SPDX-License-Identifier: MIT */
/*
 * wcctl start: computes this node's ranks (layout.c), refuses devices that a
 * live daemon already owns (unless --force), and runs one wcd per rank under
 * one reactor loop (launch.c) until all are ready.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "gpus.h"
#include "launch.h"
#include "log.h"
#include "plan.h"
#include "wcctl.h"

static void start_usage(FILE *f)
{
	fprintf(f,
"usage: wcctl start --model DIR --tp-size T [--pp-size P]\n"
"                   [--ep-size E [--ep-rank R]]\n"
"                   [--nnodes N --node-rank R] [--base-gpu-id B --gpu-id-step S]\n"
"                   [--backend cuda|host] [--device-prefix STR] [--num-gpus N]\n"
"                   [--runtime-dir DIR] [--timeout SEC] [--grace SEC]\n"
"                   [--foreground] [--force] [--keep-logs] [--wcd PATH]\n"
"                   [--metrics-listen A] [--socket-group G] [--dry-run] [--json]\n"
"                   [-- wcd options]\n"
"\n"
"Starts one wcd per rank of this node and waits until every one is ready.\n"
"The ranks follow SGLang's layout: pp_size_per_node = max(P/N, 1),\n"
"nnodes_per_pp_rank = max(N/P, 1), pp ranks [pp_size_per_node *\n"
"(R / nnodes_per_pp_rank), +pp_size_per_node), tp_size_per_node = T /\n"
"nnodes_per_pp_rank, tp ranks [tp_size_per_node * (R %% nnodes_per_pp_rank),\n"
"+tp_size_per_node), GPU = B + (pp_rank %% pp_size_per_node) * tp_size_per_node\n"
"+ (tp_rank %% tp_size_per_node) * S. Nodes never rendezvous: run wcctl start\n"
"on each node.\n"
"\n"
"  --model DIR          model directory (config.json + *.safetensors);\n"
"                       SGLang's --model-path is the same option\n"
"  --tp-size T          tensor-parallel size (required; also\n"
"                       --tensor-parallel-size, or --tp, as in SGLang)\n"
"  --pp-size P          pipeline-parallel size (default 1; also\n"
"                       --pipeline-parallel-size)\n"
"  --ep-size E          expert parallelism (wcd --ep-size E): each rank holds\n"
"                       a block of the routed experts, whole (default 1: all\n"
"                       experts, split by tp; also --expert-parallel-size)\n"
"  --ep-rank R          the ep rank of tp rank 0 (default 0, below E): tp rank\n"
"                       t gets wcd --ep-rank (R + t) %% E; E = T gives ep rank =\n"
"                       tp rank (vLLM's --enable-expert-parallel), and data-\n"
"                       parallel replica d of T ranks each takes R = d * T\n"
"  --nnodes N           nodes in the job (default 1)\n"
"  --node-rank R        this node (default 0)\n"
"  --base-gpu-id B      first local GPU (default 0)\n"
"  --gpu-id-step S      GPU id step between tp ranks (default 1)\n"
"  --backend cuda|host  cuda (default): rank on GPU id g gets the device whose\n"
"                       CUDA ordinal is g (passed to wcd as its GPU-UUID, from\n"
"                       nvidia-smi and CUDA_VISIBLE_DEVICES, in PCI bus order);\n"
"                       host: device host:<prefix><g> in host memory (tests,\n"
"                       machines without a GPU), which wcctl status and the\n"
"                       runtime files name host-<prefix><g>\n"
"  --device-prefix STR  host backend: the <prefix> above (default: none)\n"
"  --num-gpus N         GPUs on this node (default: counted with nvidia-smi;\n"
"                       host backend: no limit)\n"
"  --runtime-dir DIR    where the .lock/.sock/.ready/.log files live (default:\n"
"                       $WCACHE_SOCKET_TEMPLATE, $XDG_RUNTIME_DIR/wcache,\n"
"                       /tmp/wcache-$UID)\n"
"  --timeout SEC        give up when not all are ready by then (default 600;\n"
"                       every time here is in seconds, decimals allowed)\n"
"  --grace SEC          SIGTERM -> SIGKILL grace when stopping (default 10)\n"
"  --foreground         stay after start: relay SIGTERM/SIGINT to the daemons,\n"
"                       stop all of them if any dies; the daemons' log lines\n"
"                       are copied to stderr as \"[ppP/tpT] line\" (a service\n"
"                       manager's journal gets them)\n"
"  --metrics-listen A   each rank serves GET /metrics (wcd --metrics-listen):\n"
"                       HOST:PORT gives this node's k-th rank PORT + k;\n"
"                       unix:DIR/ gives unix:DIR/<device>.metrics.sock\n"
"  --socket-group G     every wcd serves the engines of group G (wcd\n"
"                       --socket-group: the socket 0660 in G, the runtime\n"
"                       directory g+x)\n"
"  --dry-run            print the ranks, devices and wcd commands, start nothing\n"
"  --json               the outcome (or, with --dry-run, the plan) as one JSON\n"
"                       object on stdout\n"
"  --force              take devices over from running daemons (wcd --force)\n"
"  --keep-logs          keep the .log files of daemons that failed\n"
"  --wcd PATH           the daemon to run (default: wcd next to wcctl, else PATH)\n"
"  -- OPTIONS           passed to every wcd as they are\n"
"\n"
"Examples:\n"
"  wcctl start --model /models/llama --tp-size 8\n"
"  wcctl start --model-path M --tp 8 --pp-size 2 --nnodes 2 --node-rank 1 --dry-run\n"
"  wcctl start --model M --tp-size 4 --ep-size 4 --backend host -- --log-format json\n"
"\n"
"Exit status: 0 all ready (or, with --foreground, stopped on request);\n"
"1 a daemon failed, did not become ready in time, or could not be started\n"
"(every daemon of this start is then stopped and its files removed);\n"
"2 usage; 128+N interrupted by signal N while starting.\n"
"Set WCCTL_DEBUG=times to print when each exit was seen (CLOCK_MONOTONIC).\n");
}

static int parse_int_opt(const char *name, const char *v, int lo, int hi,
			 int *out)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi) {
		fprintf(stderr,
			"wcctl start: %s '%s' is not a whole number in %d..%d\n",
			name, v, lo, hi);
		return -1;
	}
	*out = (int)x;
	return 0;
}

static int parse_secs_opt(const char *name, const char *v, double *out)
{
	double x;

	if (cli_parse_secs(v, 1e-3, 86400 * 7, &x)) {
		fprintf(stderr,
			"wcctl start: %s '%s' is not a number of seconds above 0 (e.g. 600 or 0.5)\n",
			name, v);
		return -1;
	}
	*out = x;
	return 0;
}

enum {
	OPT_MODEL = 256, OPT_TP, OPT_PP, OPT_NNODES, OPT_NODE_RANK, OPT_BASE,
	OPT_STEP, OPT_BACKEND, OPT_PREFIX, OPT_NUM_GPUS, OPT_RUNDIR,
	OPT_TIMEOUT, OPT_GRACE, OPT_FG, OPT_FORCE, OPT_KEEP_LOGS, OPT_WCD,
	OPT_DRY_RUN, OPT_JSON, OPT_METRICS, OPT_EP, OPT_EP_RANK, OPT_SOCKET_GROUP,
};

static const struct option start_longopts[] = {
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "model-path", required_argument, NULL, OPT_MODEL },
	{ "tp-size", required_argument, NULL, OPT_TP },
	{ "tensor-parallel-size", required_argument, NULL, OPT_TP },
	{ "tp", required_argument, NULL, OPT_TP },
	{ "pp-size", required_argument, NULL, OPT_PP },
	{ "pipeline-parallel-size", required_argument, NULL, OPT_PP },
	{ "ep-size", required_argument, NULL, OPT_EP },
	{ "expert-parallel-size", required_argument, NULL, OPT_EP },
	{ "ep-rank", required_argument, NULL, OPT_EP_RANK },
	{ "nnodes", required_argument, NULL, OPT_NNODES },
	{ "node-rank", required_argument, NULL, OPT_NODE_RANK },
	{ "base-gpu-id", required_argument, NULL, OPT_BASE },
	{ "gpu-id-step", required_argument, NULL, OPT_STEP },
	{ "backend", required_argument, NULL, OPT_BACKEND },
	{ "device-prefix", required_argument, NULL, OPT_PREFIX },
	{ "num-gpus", required_argument, NULL, OPT_NUM_GPUS },
	{ "runtime-dir", required_argument, NULL, OPT_RUNDIR },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "grace", required_argument, NULL, OPT_GRACE },
	{ "foreground", no_argument, NULL, OPT_FG },
	{ "force", no_argument, NULL, OPT_FORCE },
	{ "keep-logs", no_argument, NULL, OPT_KEEP_LOGS },
	{ "wcd", required_argument, NULL, OPT_WCD },
	{ "dry-run", no_argument, NULL, OPT_DRY_RUN },
	{ "metrics-listen", required_argument, NULL, OPT_METRICS },
	{ "socket-group", required_argument, NULL, OPT_SOCKET_GROUP },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int rank_metrics(const char *spec, int k, const char *name,
			char *out, size_t len);

/* Returns 0, 1 (--help shown) or -1 (usage error, already printed). */
static int start_parse(int argc, char **argv, struct launch_opts *o)
{
	const int big = LAYOUT_SIZE_MAX;
	int c, bad = 0;

	*o = (struct launch_opts){
		.lp = { .tp = 0, .pp = 1, .nnodes = 1, .node_rank = 0,
			.base_gpu = 0, .gpu_step = 1, .num_gpus = -1 },
		.timeout_s = 600, .grace_s = 10, .device_prefix = "",
		.ep_size = 1, .ep_rank = 0,
	};
	optind = 1;
	while (!bad && (c = cli_getopt(argc, argv, "+h", start_longopts,
				       "wcctl start")) != -1) {
		switch (c) {
		case OPT_MODEL: o->model = optarg; break;
		case OPT_TP: bad = parse_int_opt("--tp-size", optarg, 1, big, &o->lp.tp); break;
		case OPT_PP: bad = parse_int_opt("--pp-size", optarg, 1, big, &o->lp.pp); break;
		case OPT_EP: bad = parse_int_opt("--ep-size", optarg, 1, PLAN_EP_MAX, &o->ep_size); break;
		case OPT_EP_RANK: bad = parse_int_opt("--ep-rank", optarg, 0, PLAN_EP_MAX - 1, &o->ep_rank); break;
		case OPT_NNODES: bad = parse_int_opt("--nnodes", optarg, 1, big, &o->lp.nnodes); break;
		case OPT_NODE_RANK: bad = parse_int_opt("--node-rank", optarg, 0, big, &o->lp.node_rank); break;
		case OPT_BASE: bad = parse_int_opt("--base-gpu-id", optarg, 0, 1 << 20, &o->lp.base_gpu); break;
		case OPT_STEP: bad = parse_int_opt("--gpu-id-step", optarg, 1, big, &o->lp.gpu_step); break;
		case OPT_NUM_GPUS: bad = parse_int_opt("--num-gpus", optarg, 1, 1 << 20, &o->lp.num_gpus); break;
		case OPT_BACKEND:
			if (!strcmp(optarg, "host"))
				o->host = true;
			else if (strcmp(optarg, "cuda")) {
				fprintf(stderr, "wcctl start: --backend '%s' is not cuda or host\n",
					optarg);
				bad = -1;
			}
			break;
		case OPT_PREFIX: o->device_prefix = optarg; break;
		case OPT_RUNDIR: o->runtime_dir = optarg; break;
		case OPT_TIMEOUT: bad = parse_secs_opt("--timeout", optarg, &o->timeout_s); break;
		case OPT_GRACE: bad = parse_secs_opt("--grace", optarg, &o->grace_s); break;
		case OPT_FG: o->foreground = true; break;
		case OPT_FORCE: o->force = true; break;
		case OPT_KEEP_LOGS: o->keep_logs = true; break;
		case OPT_WCD: o->wcd = optarg; break;
		case OPT_DRY_RUN: o->dry_run = true; break;
		case OPT_METRICS: o->metrics_listen = optarg; break;
		case OPT_SOCKET_GROUP: o->socket_group = optarg; break;
		case OPT_JSON: o->json = true; break;
		case 'h': start_usage(stdout); return 1;
		default: bad = -1; break;
		}
	}
	if (bad)
		goto out_usage;
	if (optind < argc && strcmp(argv[optind - 1], "--")) {
		fprintf(stderr, "wcctl start: unexpected argument '%s'; put wcd options after --\n",
			argv[optind]);
		goto out_usage;
	}
	o->wcd_args = argv + optind;
	o->wcd_nargs = argc - optind;
	if (o->wcd_nargs > LAUNCH_WCD_ARGS_MAX) {
		fprintf(stderr, "wcctl start: %d wcd options after --, more than %d\n",
			o->wcd_nargs, LAUNCH_WCD_ARGS_MAX);
		goto out_usage;
	}
	if (o->metrics_listen) {
		char probe[160];

		if (rank_metrics(o->metrics_listen, 0, "x", probe, sizeof(probe)))
			goto out_usage;
	}
	if (!o->model || !o->lp.tp) {
		fprintf(stderr, "wcctl start: --model DIR and --tp-size T are required\n");
		goto out_usage;
	}
	/* wcd's rule (--ep-rank below --ep-size), said here once instead of
	 * by every rank's log */
	if (o->ep_rank >= o->ep_size) {
		fprintf(stderr, "wcctl start: --ep-rank %d must be below --ep-size %d; give --ep-size larger than %d or a smaller --ep-rank\n",
			o->ep_rank, o->ep_size, o->ep_rank);
		goto out_usage;
	}
	if (!o->host && *o->device_prefix) {
		fprintf(stderr, "wcctl start: --device-prefix applies to --backend host only\n");
		goto out_usage;
	}
	if (strlen(o->device_prefix) > 24 ||
	    strspn(o->device_prefix, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		   "abcdefghijklmnopqrstuvwxyz0123456789_-") !=
	    strlen(o->device_prefix)) {
		fprintf(stderr, "wcctl start: --device-prefix '%s' must be at most 24 characters of A-Z a-z 0-9 _ -\n",
			o->device_prefix);
		goto out_usage;
	}
	return 0;
out_usage:
	fprintf(stderr, "run 'wcctl start --help' for the options\n");
	return -1;
}

/* Rank k's --metrics-listen from the node's: HOST:PORT -> HOST:(PORT + k),
 * unix:DIR/ -> unix:DIR/<name>.metrics.sock. -1 (said) when it does not
 * fit. */
static int rank_metrics(const char *spec, int k, const char *name,
			char *out, size_t len)
{
	const char *colon = strrchr(spec, ':');
	char *end;
	long port;

	if (!strncmp(spec, "unix:", 5)) {
		size_t n = strlen(spec);

		if (n < 7 || spec[n - 1] != '/') {
			log_error("--metrics-listen '%s': give a directory ending in / (unix:/run/wcache/): each rank gets its own socket there",
				  spec);
			return -1;
		}
		if ((size_t)snprintf(out, len, "%s%s.metrics.sock", spec, name) >= len) {
			log_error("--metrics-listen '%s': the socket path is too long", spec);
			return -1;
		}
		return 0;
	}
	port = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || !colon[1] || *end || port < 1 || port + k > 65535) {
		log_error("--metrics-listen '%s' is not HOST:PORT with a port from 1 to %d (rank %d gets PORT + %d) or unix:DIR/",
			  spec, 65535 - k, k, k);
		return -1;
	}
	if ((size_t)snprintf(out, len, "%.*s:%ld", (int)(colon - spec), spec,
			     port + k) >= len) {
		log_error("--metrics-listen '%s' is too long", spec);
		return -1;
	}
	return 0;
}

/* Names every rank's device and files. CUDA ranks are named by UUID so
 * that wcctl knows their file names without opening CUDA. */
static int start_name_ranks(struct launch *l, char (*uuids)[GPU_UUID_LEN],
			    int ngpus)
{
	char err[BASE_ERR_LEN], name[PATHS_DEVICE_MAX + 1];

	for (int i = 0; i < l->n; i++) {
		struct rank *r = &l->ranks[i];

		r->lr = l->lay.ranks[i];
		r->log_rfd = -1;
		r->l = l;
		if (l->o->host) {
			snprintf(r->device, sizeof(r->device), "host:%s%d",
				 l->o->device_prefix, r->lr.gpu);
		} else if (ngpus < 0) {
			/* --dry-run without nvidia-smi: the CUDA ordinal */
			snprintf(r->device, sizeof(r->device), "%d", r->lr.gpu);
			if (l->o->metrics_listen &&
			    rank_metrics(l->o->metrics_listen, i, r->device,
					 r->metrics, sizeof(r->metrics)))
				return -1;
			continue;
		} else if (r->lr.gpu < ngpus)
			snprintf(r->device, sizeof(r->device), "%s",
				 uuids[r->lr.gpu]);
		else {
			log_error("pp_rank=%d tp_rank=%d needs GPU %d but only %d are visible; check --num-gpus and CUDA_VISIBLE_DEVICES",
				  r->lr.pp_rank, r->lr.tp_rank, r->lr.gpu,
				  ngpus);
			return -1;
		}
		if (paths_device_name(r->device, name, sizeof(name), err) ||
		    rundir_paths(&l->rd, name, &r->paths, err)) {
			log_error("pp_rank=%d tp_rank=%d: %s", r->lr.pp_rank,
				  r->lr.tp_rank, err);
			return -1;
		}
		if (l->o->metrics_listen &&
		    rank_metrics(l->o->metrics_listen, i, name, r->metrics,
				 sizeof(r->metrics)))
			return -1;
	}
	return 0;
}

/* Without --force a device that a live daemon holds is refused before
 * anything is started. */
static int start_check_free(struct launch *l)
{
	char err[BASE_ERR_LEN];
	int busy = 0;

	for (int i = 0; i < l->n; i++) {
		struct rank *r = &l->ranks[i];
		pid_t pid;
		int ret = lock_holder(r->paths.lock, &pid, err);

		if (ret < 0) {
			log_error("%s", err);
			return -1;
		}
		if (ret > 0 && !l->o->force) {
			log_error("device %s already has a running daemon (pid %d, ready file %s); stop it with 'wcctl stop --device %s' or take it over with --force",
				  r->paths.device, (int)pid, r->paths.ready,
				  r->paths.device);
			busy++;
		}
	}
	return busy ? -1 : 0;
}

int wcctl_start(int argc, char **argv)
{
	static char uuids[GPUS_MAX][GPU_UUID_LEN];
	static struct rank ranks[LAYOUT_RANKS_MAX];
	static struct launch l;
	struct launch_opts o;
	char err[BASE_ERR_LEN];
	int ngpus = 0, ret;

	ret = start_parse(argc, argv, &o);
	if (ret)
		return ret > 0 ? 0 : 2;
	l.o = &o;
	l.ranks = ranks;
	/* The layout first: a bad --node-rank or --tp-size is a usage error
	 * on any machine, with or without GPUs (nvidia-smi is not asked). */
	if (layout_compute(&o.lp, &l.lay, err)) {
		log_error("%s", err);
		return 2;
	}
	if (!o.host) {
		ngpus = gpus_list(uuids, GPUS_MAX, err);
		if (ngpus < 0 && o.dry_run) {
			log_warn("%s; the plan names CUDA ordinals", err);
		} else if (ngpus < 0) {
			log_error("%s", err);
			return 1;
		} else {
			if (o.lp.num_gpus < 0 || o.lp.num_gpus > ngpus)
				o.lp.num_gpus = ngpus;
			if (layout_compute(&o.lp, &l.lay, err)) {
				log_error("%s", err);
				return 2;
			}
		}
	}
	l.n = l.lay.n;
	if (rundir_init(&l.rd, o.runtime_dir, err)) {
		log_error("%s", err);
		return 1;
	}
	if (o.dry_run) {
		if (start_name_ranks(&l, uuids, ngpus))
			return 1;
		launch_print_plan(&l);
		return 0;
	}
	/* the parents may be shared (/tmp); the directory itself must be
	 * ours alone (paths_dir_check), as wcd checks too */
	if (rundir_mkdir(&l.rd, err) || rundir_check_writable(&l.rd, err) ||
	    paths_dir_check(l.rd.dir, err)) {
		log_error("%s", err);
		return 1;
	}
	if (start_name_ranks(&l, uuids, ngpus) || start_check_free(&l))
		return 1;
	log_info("starting %d weight cache daemon%s on node %d (pp_ranks=%d..%d, tp_ranks=%d..%d) in %s",
		 l.n, l.n == 1 ? "" : "s", o.lp.node_rank, l.lay.pp_first,
		 l.lay.pp_first + l.lay.pp_count - 1, l.lay.tp_first,
		 l.lay.tp_first + l.lay.tp_count - 1, l.rd.dir);
	ret = launch_run(&l);
	if (o.json)
		launch_print_outcome(&l, ret);
	return ret;
}
