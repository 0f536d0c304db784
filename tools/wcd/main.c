/* SPDX-License-Identifier: MIT */
/*
 * wcd: the rank daemon. Loads one rank's share of a checkpoint once, into
 * pools on one device, and serves it zero-copy to any number of engines.
 *
 * Start-up order: options -> device -> runtime paths -> ownership (flock)
 * -> parse + quantization gate + plan -> pools + load + hash + seal ->
 * listen (0600) -> ready file (atomic) -> serve. SIGTERM/SIGINT: stop
 * accepting, notify clients, remove .sock/.ready, release the lock, exit 0.
 * Exit codes: 0 clean shutdown, 1 error, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "cli.h"
#include "log.h"
#include "wcd.h"
#include "serve/server.h"
#include "serve/own.h"
#include "serve/access.h"
#include "load/load.h"
#include "load/hashpool.h"
#include "model/versions.h"
#include "life/lifecycle.h"
#include "push/push.h"
#include "handover/handover.h"
#include "metrics/metrics.h"
#include "base.h"
#include "sdnotify.h"

static const char usage_text[] =
"usage: wcd --model DIR [options]\n"
"\n"
"Loads this rank's share of a safetensors checkpoint into device memory once\n"
"and serves it zero-copy to engines (libwcache) over a unix socket.\n"
"\n"
"  --model DIR            model directory (config.json + *.safetensors);\n"
"                         SGLang's --model-path is the same option\n"
"  --tp-size N --tp-rank R  tensor-parallel split (default 1, 0; SGLang's\n"
"                         --tensor-parallel-size and --tp too)\n"
"  --pp-size N --pp-rank R  pipeline-parallel stage (default 1, 0; SGLang's\n"
"                         --pipeline-parallel-size too)\n"
"  --device D             host, host:NAME (memfd pools), a CUDA ordinal or a\n"
"                         GPU-UUID (default: host without CUDA, else 0)\n"
"  --runtime-dir DIR      files go to DIR/<device>.{lock,sock,ready,log}\n"
"                         (default: $WCACHE_SOCKET_TEMPLATE, else\n"
"                         $XDG_RUNTIME_DIR/wcache, else /tmp/wcache-$UID)\n"
"  --force                take the device over from a running wcd\n"
"                         (SIGTERM, up to --force-wait, then SIGKILL)\n"
"  --force-wait SECONDS   how long --force waits for the old owner to exit\n"
"                         after SIGTERM (default 10, decimals allowed)\n"
"  --takeover             hot handover: ask the running wcd of --device for\n"
"                         its pools, socket and clients and serve them on,\n"
"                         no reload; --model may be left out (with it, a\n"
"                         daemon that dies mid-handover is loaded from disk)\n"
"  --takeover-verify none|hash  also hash every tensor again (host pools)\n"
"  --frame-timeout SECONDS  a connection's first frame, and every frame it\n"
"                         begins, must arrive within this (default 10)\n"
"  --read-timeout SECONDS   the header reads of a load or an update must\n"
"                         finish within this (default 60): a hung file\n"
"                         system fails the load instead of the daemon\n"
"  --no-hash              skip the XXH3-128 of every tensor\n"
"  --allow-uid UID        also serve this uid (repeatable, at most 16); opens\n"
"                         the socket to every user (0666, the directory o+x:\n"
"                         wcd itself refuses the uids not allowed)\n"
"  --allow-gid GID        also serve the processes in this group, as their\n"
"                         primary or a supplementary group (repeatable, at\n"
"                         most 16); opens the socket as --allow-uid does,\n"
"                         unless it is the --socket-group\n"
"  --socket-group GROUP   the socket's group (a name or gid), mode 0660, the\n"
"                         runtime directory g+x in that group: its members\n"
"                         are served, other users cannot even connect\n"
"  --socket-mode MODE     the socket's mode instead (octal, 0600 to 0666:\n"
"                         read and write bits only); the directory gets the\n"
"                         x bit of each class that may connect, nothing more\n"
"  --allow-quant METHOD   serve an unverified quantization method anyway\n"
"  --rules FILE           layout lines tried before the preset's\n"
"                         (proto/plan/layouts/README.md; 'PATTERN\n"
"                         replicate|dim0|dim1' lines)\n"
"  --layout FILE          a layout instead of the architecture's preset\n"
"  --ep-size N --ep-rank R  expert parallelism: this rank holds a block\n"
"                         of the experts, whole (default 1, 0)\n"
"  --vocab-pad N          pad vocabularies to a multiple of N (default: the\n"
"                         layout's, 64); 0: no padding\n"
"  --pool-size BYTES      largest pool (default 2 GiB; K/M/G suffixes)\n"
"  --ipc vmm|legacy       CUDA export: VMM fds (default) or legacy handles\n"
"  --keep-context         keep the CUDA context while serving (by default\n"
"                         it is released once loaded: VMM pools live on\n"
"                         through their fds, which frees its device memory)\n"
"  --sleep-arena free|keep  level-1 sleep's host copy: freed at wake\n"
"                         (default), or kept (pinned on CUDA) for the next\n"
"                         sleep, which then copies at the D2H rate; keep\n"
"                         holds the model's bytes of host memory while awake\n"
"  --load-path direct|staged  direct reads into the pools (host default)\n"
"                         or through staging slots (CUDA)\n"
"  --direct-fill splice|read  how the direct path fills the host pools:\n"
"                         splice(2) page cache -> memfd on worker threads,\n"
"                         hashing each tensor as it lands (default; pread\n"
"                         where splice is refused), or io_uring reads into\n"
"                         the pools' mappings, then the hash phase\n"
"  --read-ahead BYTES     the splice fill reads the shards into the page\n"
"                         cache this far ahead of its workers, on a thread\n"
"                         of its own (default 256M; 0: only the kernel's\n"
"                         read-ahead)\n"
"  --slots N              staging slots (default 12, at most 64)\n"
"  --slot-size BYTES      bytes per staging slot (default 8M)\n"
"  --read-part BYTES      page-cache reads of a slot go in parts of this\n"
"                         size, in parallel (default 1M; 0: one read)\n"
"  --hash-on auto|device|cpu  where tensor hashes are computed: device\n"
"                         (XXH3 kernels over the pools, after each copy;\n"
"                         the CUDA backend) or cpu (hash threads, from the\n"
"                         staging slots); auto: device where possible\n"
"  --hash-threads N       CPU XXH3 threads (0: on the loop thread; default\n"
"                         $WCD_HASH_THREADS, else half the CPUs, 1 to 8)\n"
"  --direct-io auto|on|off  staged reads with O_DIRECT: auto skips shards\n"
"                         that are mostly in the page cache (default auto)\n"
"  --log-level L          debug, info, warn, error (default info); routine\n"
"                         per-client lines (hello, lease, detach) are debug\n"
"  --log-format F         text (default) or json: one object a line with ts,\n"
"                         level, prog, pid, device, msg and, where a line is\n"
"                         about one, client_pid, lease, version\n"
"  --log-file PATH        write the log to PATH (appending) instead of stderr;\n"
"                         SIGHUP reopens it (logrotate without copytruncate)\n"
"  --metrics-listen ADDR  serve GET /metrics (Prometheus text format) on ADDR:\n"
"                         host:port (127.0.0.1:9400), [v6]:port, :port or\n"
"                         unix:PATH (a socket there that nobody answers on is\n"
"                         replaced, one that answers refused); from the\n"
"                         daemon's loop, at most 16 scrapes at once (8 of one\n"
"                         address), each cut off after 2 s\n"
"  -h, --help             this text; --version the release\n"
"\n"
"Examples:\n"
"  wcd --model /models/llama --device host:demo --runtime-dir /tmp/wc\n"
"  wcd --model /models/llama --tp-size 2 --tp-rank 1 --device 1\n"
"  wcd --model-path /models/llama --device GPU-5a3f0c1e-... --log-level debug\n"
"\n"
"Exit status: 0 after a clean shutdown, 1 on an error, 2 on bad usage.\n";

static void usage_fail(const char *fmt, const char *arg)
{
	fprintf(stderr, "wcd: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nRun 'wcd --help' for the options.\n");
	exit(2);
}

/* arg as one of names (NULL-terminated): its index; else exits 2 with
 * "bad OPT 'ARG' (a, b or c)". */
static unsigned parse_choice(const char *arg, const char *opt,
			     const char *const *names)
{
	char list[128] = "";
	unsigned i, n = 0;

	for (i = 0; names[i]; i++)
		if (!strcmp(arg, names[i]))
			return i;
	while (names[n])
		n++;
	for (i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
			 i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
	fprintf(stderr, "wcd: bad %s '%s' (%s)\nRun 'wcd --help' for the options.\n",
		opt, arg, list);
	exit(2);
}

#define CHOICE(arg, opt, ...) \
	parse_choice(arg, opt, (const char *const[]){ __VA_ARGS__, NULL })

/* A byte count with an optional K, M or G (KiB, MB ... are read as the
 * same powers of two); a bad one exits 2 naming the option and its value,
 * and so does one past 2^64 - 1 bytes, which would wrap. */
static uint64_t parse_size(const char *s, const char *opt)
{
	char msg[256];
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s < '0' || *s > '9')
		goto bad;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	if (*end || v > (~0ull >> shift))
		goto bad;
	return (uint64_t)v << shift;
bad:
	snprintf(msg, sizeof(msg),
		 "bad %s '%s': use a number of bytes with an optional K, M or G (e.g. 256M)",
		 opt, s);
	usage_fail("%s", msg);
	return 0;
}

static uint32_t parse_u32(const char *s, const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > UINT32_MAX)
		usage_fail(what, s);
	return (uint32_t)v;
}

/* --socket-mode: octal, read and write bits only, the owner's both (wcd
 * itself must connect for a handover; an x bit means nothing on a socket). */
static int parse_socket_mode(const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 8);
	if (errno || end == s || *end || (v & ~0666ul) || (v & 0600) != 0600)
		usage_fail("bad --socket-mode '%s': an octal mode from 0600 to 0666 with read and write bits only (0660: owner and group)", s);
	return (int)v;
}

/* --force-wait, --frame-timeout: seconds, decimals allowed, 0 to an hour,
 * in ms. */
static uint32_t parse_seconds_ms(const char *s, const char *opt)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) ||
	    v * 1000 > WCD_FORCE_WAIT_MS_MAX) {
		char fmt[96];

		snprintf(fmt, sizeof(fmt),
			 "bad %s '%%s' (seconds from 0 to 3600, e.g. 0.5)", opt);
		usage_fail(fmt, s);
	}
	return (uint32_t)(v * 1000 + 0.5);
}

/* Half the CPUs, 1 to 8: enough to keep XXH3 (about 4 to 7 GB/s a thread)
 * ahead of a PCIe copy, without taking every core from the engines. */
static unsigned default_hash_threads(void)
{
	const char *env = getenv("WCD_HASH_THREADS");   /* for bench scripts */
	long n;

	if (env && *env) {
		n = strtol(env, NULL, 10);
		return n < 0 ? 0 : n > HASHPOOL_MAX ? HASHPOOL_MAX : (unsigned)n;
	}
	n = sysconf(_SC_NPROCESSORS_ONLN) / 2;
	return n < 1 ? 1 : n > 8 ? 8 : (unsigned)n;
}

enum {
	OPT_MODEL = 256, OPT_TP_SIZE, OPT_TP_RANK, OPT_PP_SIZE, OPT_PP_RANK,
	OPT_DEVICE, OPT_RUNTIME_DIR, OPT_FORCE, OPT_NO_HASH, OPT_ALLOW_UID,
	OPT_ALLOW_QUANT, OPT_RULES, OPT_POOL_SIZE, OPT_IPC, OPT_LOAD_PATH,
	OPT_SLOTS, OPT_SLOT_SIZE, OPT_LOG_LEVEL, OPT_HELP, OPT_HASH_THREADS,
	OPT_DIRECT_IO, OPT_DIRECT_FILL, OPT_READ_AHEAD, OPT_HASH_ON, OPT_READ_PART, OPT_KEEP_CONTEXT,
	OPT_METRICS_LISTEN, OPT_LOG_FILE, OPT_LOG_FORMAT,
	OPT_FORCE_WAIT, OPT_FRAME_TIMEOUT, OPT_READ_TIMEOUT, OPT_TAKEOVER,
	OPT_TAKEOVER_VERIFY, OPT_LAYOUT, OPT_EP_SIZE, OPT_EP_RANK, OPT_VOCAB_PAD,
	OPT_SLEEP_ARENA, OPT_ALLOW_GID, OPT_SOCKET_GROUP, OPT_SOCKET_MODE,
};

static const struct option longopts[] = {
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "model-path", required_argument, NULL, OPT_MODEL },   /* SGLang's */
	{ "tp-size", required_argument, NULL, OPT_TP_SIZE },
	{ "tensor-parallel-size", required_argument, NULL, OPT_TP_SIZE },
	{ "tp", required_argument, NULL, OPT_TP_SIZE },          /* SGLang's */
	{ "tp-rank", required_argument, NULL, OPT_TP_RANK },
	{ "pp-size", required_argument, NULL, OPT_PP_SIZE },
	{ "pipeline-parallel-size", required_argument, NULL, OPT_PP_SIZE },
	{ "pp-rank", required_argument, NULL, OPT_PP_RANK },
	{ "device", required_argument, NULL, OPT_DEVICE },
	{ "runtime-dir", required_argument, NULL, OPT_RUNTIME_DIR },
	{ "force", no_argument, NULL, OPT_FORCE },
	{ "force-wait", required_argument, NULL, OPT_FORCE_WAIT },
	{ "frame-timeout", required_argument, NULL, OPT_FRAME_TIMEOUT },
	{ "read-timeout", required_argument, NULL, OPT_READ_TIMEOUT },
	{ "no-hash", no_argument, NULL, OPT_NO_HASH },
	{ "allow-uid", required_argument, NULL, OPT_ALLOW_UID },
	{ "allow-gid", required_argument, NULL, OPT_ALLOW_GID },
	{ "socket-group", required_argument, NULL, OPT_SOCKET_GROUP },
	{ "socket-mode", required_argument, NULL, OPT_SOCKET_MODE },
	{ "allow-quant", required_argument, NULL, OPT_ALLOW_QUANT },
	{ "rules", required_argument, NULL, OPT_RULES },
	{ "layout", required_argument, NULL, OPT_LAYOUT },
	{ "ep-size", required_argument, NULL, OPT_EP_SIZE },
	{ "ep-rank", required_argument, NULL, OPT_EP_RANK },
	{ "vocab-pad", required_argument, NULL, OPT_VOCAB_PAD },
	{ "pool-size", required_argument, NULL, OPT_POOL_SIZE },
	{ "ipc", required_argument, NULL, OPT_IPC },
	{ "load-path", required_argument, NULL, OPT_LOAD_PATH },
	{ "slots", required_argument, NULL, OPT_SLOTS },
	{ "slot-size", required_argument, NULL, OPT_SLOT_SIZE },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "log-file", required_argument, NULL, OPT_LOG_FILE },
	{ "log-format", required_argument, NULL, OPT_LOG_FORMAT },
	{ "metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN },
	{ "hash-threads", required_argument, NULL, OPT_HASH_THREADS },
	{ "hash-on", required_argument, NULL, OPT_HASH_ON },
	{ "read-part", required_argument, NULL, OPT_READ_PART },
	{ "keep-context", no_argument, NULL, OPT_KEEP_CONTEXT },
	{ "sleep-arena", required_argument, NULL, OPT_SLEEP_ARENA },
	{ "direct-io", required_argument, NULL, OPT_DIRECT_IO },
	{ "direct-fill", required_argument, NULL, OPT_DIRECT_FILL },
	{ "read-ahead", required_argument, NULL, OPT_READ_AHEAD },
	{ "takeover", no_argument, NULL, OPT_TAKEOVER },
	{ "takeover-verify", required_argument, NULL, OPT_TAKEOVER_VERIFY },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

/* A path option made absolute against the working directory (into buf,
 * PATH_MAX bytes): the ready file's serve_args and a handover hand it to
 * the next daemon, which may start in another directory. */
static const char *abs_path(const char *p, char *buf, const char *opt)
{
	char cwd[PATH_MAX];

	if (p[0] == '/')
		return p;
	if (!getcwd(cwd, sizeof(cwd)) ||
	    snprintf(buf, PATH_MAX, "%s/%s", cwd, p) >= PATH_MAX) {
		char fmt[128];

		snprintf(fmt, sizeof(fmt),
			 "%s '%%s': cannot make it an absolute path (give one)",
			 opt);
		usage_fail(fmt, p);
	}
	return buf;
}

static enum log_level parse_opts(struct wcd_opts *o, int argc, char **argv)
{
	static char rules_abs[PATH_MAX], layout_abs[PATH_MAX], log_abs[PATH_MAX];
	enum log_level lvl = LOG_INFO;
	char msg[BASE_ERR_LEN];
	int c;

	*o = (struct wcd_opts){
		.tp_size = 1, .pp_size = 1, .ep_size = 1, .vocab_pad = -1,
		.hash = true, .socket_mode = -1,
		.pool_size = WCD_POOL_SIZE_DEFAULT,
		.slots = WCD_SLOTS_DEFAULT, .slot_size = WCD_SLOT_SIZE_DEFAULT,
		.read_part = WCD_READ_PART_DEFAULT,
		.read_ahead = WCD_READ_AHEAD_DEFAULT,
		.device = gpu_cuda_backend() ? "0" : "host",
		.hash_threads = default_hash_threads(),
		.force_wait_ms = WCD_FORCE_WAIT_MS,
		.frame_timeout_ms = WCD_FRAME_MS,
		.read_timeout_ms = WCD_READ_TIMEOUT_MS,
	};
	opterr = 0;
	while ((c = cli_getopt(argc, argv, "h", longopts, "wcd")) != -1) {
		switch (c) {
		case OPT_MODEL: o->model = optarg; break;
		case OPT_TP_SIZE: o->tp_size = parse_u32(optarg, "bad --tp-size '%s'"); break;
		case OPT_TP_RANK: o->tp_rank = parse_u32(optarg, "bad --tp-rank '%s'"); break;
		case OPT_PP_SIZE: o->pp_size = parse_u32(optarg, "bad --pp-size '%s'"); break;
		case OPT_PP_RANK: o->pp_rank = parse_u32(optarg, "bad --pp-rank '%s'"); break;
		case OPT_DEVICE: o->device = optarg; break;
		case OPT_RUNTIME_DIR: o->runtime_dir = optarg; break;
		case OPT_FORCE: o->force = true; break;
		case OPT_FORCE_WAIT: o->force_wait_ms = parse_seconds_ms(optarg, "--force-wait"); break;
		case OPT_READ_TIMEOUT:
			o->read_timeout_ms = parse_seconds_ms(optarg, "--read-timeout");
			if (!o->read_timeout_ms)
				usage_fail("bad --read-timeout '%s': give a time above 0", optarg);
			break;
		case OPT_FRAME_TIMEOUT:
			o->frame_timeout_ms = parse_seconds_ms(optarg, "--frame-timeout");
			if (!o->frame_timeout_ms)
				usage_fail("bad --frame-timeout '%s': give a time above 0", optarg);
			break;
		case OPT_NO_HASH: o->hash = false; break;
		case OPT_ALLOW_UID:
			if (o->nallow_uid >= WCD_ALLOW_UID_MAX)
				usage_fail("more than 16 --allow-uid options (last: %s)", optarg);
			o->allow_uid[o->nallow_uid++] =
				parse_u32(optarg, "bad --allow-uid '%s' (a numeric uid)");
			break;
		case OPT_ALLOW_GID:
			if (access_add_gid(o, parse_u32(optarg, "bad --allow-gid '%s' (a numeric gid)")))
				usage_fail("more than 16 --allow-gid options (last: %s)", optarg);
			break;
		case OPT_SOCKET_GROUP: o->socket_group = optarg; break;
		case OPT_SOCKET_MODE: o->socket_mode = parse_socket_mode(optarg); break;
		case OPT_ALLOW_QUANT: o->allow_quant = optarg; break;
		case OPT_RULES: o->rules = abs_path(optarg, rules_abs, "--rules"); break;
		case OPT_LAYOUT: o->layout = abs_path(optarg, layout_abs, "--layout"); break;
		case OPT_EP_SIZE: o->ep_size = parse_u32(optarg, "bad --ep-size '%s'"); break;
		case OPT_EP_RANK: o->ep_rank = parse_u32(optarg, "bad --ep-rank '%s'"); break;
		case OPT_VOCAB_PAD:
			o->vocab_pad = (int32_t)parse_u32(optarg, "bad --vocab-pad '%s'");
			if (o->vocab_pad > (int32_t)PLAN_VOCAB_PAD_MAX)
				usage_fail("--vocab-pad %s is over 1048576", optarg);
			break;
		case OPT_POOL_SIZE: o->pool_size = parse_size(optarg, "--pool-size"); break;
		case OPT_IPC:
			o->ipc_legacy = CHOICE(optarg, "--ipc", "vmm", "legacy") == 1;
			break;
		case OPT_LOAD_PATH:
			o->load_path = CHOICE(optarg, "--load-path", "direct", "staged") ?
				       WCD_LOAD_STAGED : WCD_LOAD_DIRECT;
			break;
		case OPT_SLOTS:
			o->slots = parse_u32(optarg, "bad --slots '%s'");
			if (o->slots < 1 || o->slots > WCD_SLOTS_MAX)
				usage_fail("--slots %s is out of range (1 to 64)", optarg);
			break;
		case OPT_SLOT_SIZE:
			o->slot_size = parse_size(optarg, "--slot-size");
			if (o->slot_size < (64u << 10) || o->slot_size > (1ull << 30) ||
			    o->slot_size % 4096)
				usage_fail("--slot-size %s: use a multiple of 4096 from 64K to 1G", optarg);
			break;
		case OPT_HASH_THREADS:
			o->hash_threads = parse_u32(optarg, "bad --hash-threads '%s'");
			if (o->hash_threads > HASHPOOL_MAX)
				usage_fail("--hash-threads %s is over 16", optarg);
			o->hash_threads_given = true;
			break;
		case OPT_KEEP_CONTEXT: o->keep_context = true; break;
		case OPT_SLEEP_ARENA:
			o->sleep_arena_keep = CHOICE(optarg, "--sleep-arena", "free", "keep") == 1;
			break;
		case OPT_TAKEOVER: o->takeover = true; break;
		case OPT_TAKEOVER_VERIFY:
			o->ho_rehash = CHOICE(optarg, "--takeover-verify", "none", "hash") == 1;
			break;
		case OPT_READ_AHEAD:
			o->read_ahead = parse_size(optarg, "--read-ahead");
			if (o->read_ahead > WCD_READ_AHEAD_MAX)
				usage_fail("--read-ahead %s is over 16G: use at most 16G (0 turns it off)", optarg);
			break;
		case OPT_READ_PART:
			o->read_part = parse_size(optarg, "--read-part");
			if (o->read_part % 4096 || (o->read_part && o->read_part < (64u << 10)))
				usage_fail("--read-part %s: use 0 or a multiple of 4096 from 64K", optarg);
			break;
		case OPT_HASH_ON:
			/* in enum wcd_hash_on's order */
			o->hash_on = CHOICE(optarg, "--hash-on", "auto", "device", "cpu");
			break;
		case OPT_DIRECT_FILL:
			/* in enum wcd_direct_fill's order */
			o->direct_fill = CHOICE(optarg, "--direct-fill", "splice", "read");
			break;
		case OPT_DIRECT_IO:
			/* in enum wcd_direct_io's order */
			o->direct_io = CHOICE(optarg, "--direct-io", "auto", "on", "off");
			break;
		case OPT_METRICS_LISTEN: o->metrics_listen = optarg; break;
		case OPT_LOG_FILE: o->log_file = abs_path(optarg, log_abs, "--log-file"); break;
		case OPT_LOG_FORMAT:
			if (log_parse_format(optarg, &o->log_format))
				usage_fail("bad --log-format '%s' (text or json)", optarg);
			break;
		case OPT_LOG_LEVEL:
			if (!strcmp(optarg, "debug")) lvl = LOG_DEBUG;
			else if (!strcmp(optarg, "info")) lvl = LOG_INFO;
			else if (!strcmp(optarg, "warn")) lvl = LOG_WARN;
			else if (!strcmp(optarg, "error")) lvl = LOG_ERROR;
			else usage_fail("bad --log-level '%s' (debug, info, warn, error)", optarg);
			break;
		case OPT_HELP:
		case 'h':
			fputs(usage_text, stdout);
			exit(0);
		case CLI_OPT_ABBREV:   /* said */
			fprintf(stderr, "Run 'wcd --help' for the options.\n");
			exit(2);
		default:
			usage_fail("unknown or incomplete option '%s'",
				   argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_fail("unexpected argument '%s'", argv[optind]);
	if (!o->model && !o->takeover)
		usage_fail("%s", "--model DIR is required (or --takeover)");
	if (!o->tp_size || o->tp_rank >= o->tp_size)
		usage_fail("--tp-rank must be below --tp-size (got rank %s)",
			   o->tp_size ? "too large" : "with size 0");
	if (!o->pp_size || o->pp_rank >= o->pp_size)
		usage_fail("--pp-rank must be below --pp-size (got rank %s)",
			   o->pp_size ? "too large" : "with size 0");
	if (!o->ep_size || o->ep_rank >= o->ep_size)
		usage_fail("--ep-rank must be below --ep-size (got rank %s)",
			   o->ep_size ? "too large" : "with size 0");
	if (o->pool_size < (1u << 20))
		usage_fail("%s", "--pool-size must be at least 1M");
	o->log_level = lvl;
	if (access_resolve(o, msg))
		usage_fail("%s", msg);
	return lvl;
}

static void signal_cb(struct rx_signal *s, int signo)
{
	struct wcd *d = container_of(s, struct wcd, sig);

	if (signo < 0)
		return;
	if (signo == SIGHUP) {
		int ret = log_reopen();

		if (ret)
			log_warn("SIGHUP: cannot reopen the log file %s: %s; still writing to the old one",
				 d->o.log_file, strerror(-ret));
		else
			log_info("SIGHUP: %s", d->o.log_file ?
				 "reopened the log file" :
				 "no --log-file to reopen (logging to stderr)");
		return;
	}
	log_info("got %s", strsignal(signo));
	if (d->state == WCD_LOADING)
		wcd_enter(d, WCD_STOPPING); /* the loader stops issuing reads */
	else
		server_stop(d);
}

/* Runs the queued job (a lifecycle job, or an update session's open), if
 * any, then lets the device idle again. */
static bool next_job(struct wcd *d)
{
	if (!life_run_job(d) && !push_run_job(d))
		return false;
	life_device_idle(d);
	return true;
}

/* Runs the loop until the closing sequence is done; a lifecycle job (wake,
 * update) stops the loop and runs here, outside every callback, because it
 * drives the loop itself (lifecycle.h). */
static int serve(struct wcd *d)
{
	int ret;

	do {
		ret = wcd_serve(d);
		if (ret < 0) {
			log_error("event loop: %s", strerror(-ret));
			break;
		}
	} while (next_job(d));
	return 0;
}

/* A client is being freed: its update session ends, a handover forgets
 * it. */
static void client_gone(struct wcd *d, struct wcd_client *c)
{
	push_client_gone(d, c);
	handover_client_gone(d, c);
}

/* What server.c calls upwards (it knows no file above it). */
static const struct server_hooks hooks = {
	.dispatch = client_dispatch,
	.lease_ended = version_lease_ended,
	.pause_poke = handover_poke,
	.client_gone = client_gone,
	.stop_hold = handover_stop_hold,
	.read_to_end = handover_read_to_end,
};

static int start(struct wcd *d)
{
	char err[BASE_ERR_LEN], tmpl[PATHS_MAX];
	struct wcd_version *v;
	sigset_t mask;
	uint64_t t0;
	int ret;

	/* The context is made on a thread while the model is parsed and
	 * planned (the load's first CUDA call waits for it); a takeover
	 * adopts parked pools and makes one only if it needs it. */
	log_debug("starting: pid %d, opening device %s", (int)getpid(),
		  d->o.device);
	t0 = rx_now_ns();
	ret = gpu_dev_open_ctx(&d->dev, d->o.device, d->o.takeover ?
			       GPU_CTX_LAZY : GPU_CTX_ASYNC, err);
	if (ret) {
		log_error("%s", err);
		return 1;
	}
	log_set_device(d->dev.name);
	log_info("device open: %.3f s (context %s)",
		  (double)(rx_now_ns() - t0) / 1e9,
		  d->o.takeover ? "at first use" : "made on a thread");
	if (d->o.ipc_legacy) {
		if (d->dev.be == &gpu_host_backend) {
			log_error("--ipc legacy needs a CUDA device; device %s is a host device",
				  d->o.device);
			return 1;
		}
		d->dev.export_kind = GPU_EXPORT_IPC_HANDLE;
	}
	if (paths_template_env(tmpl, sizeof(tmpl), d->o.runtime_dir, err) ||
	    paths_resolve(&d->paths, tmpl, d->dev.name, err)) {
		log_error("%s", err);
		return 1;
	}
	ret = rx_loop_init(&d->loop, 256);
	if (ret) {
		log_error("cannot set up io_uring: %s (is io_uring disabled by sysctl kernel.io_uring_disabled?)",
			  strerror(-ret));
		return 1;
	}
	ret = rx_pool_init(&d->work, &d->loop, WCD_WORK_THREADS_MAX,
			   WCD_WORK_QUEUE_MAX);
	if (ret) {
		log_error("cannot set up the worker pool: %s", strerror(-ret));
		return 1;
	}
	d->work_open = true;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	ret = rx_signal_start(&d->loop, &d->sig, &mask, signal_cb);
	if (ret) {
		log_error("signalfd: %s", strerror(-ret));
		return 1;
	}
	if (d->o.takeover) {
		struct wcd_opts given = d->o;

		wcd_enter(d, WCD_TAKING_OVER);
		ret = handover_take(d, &hooks, err);
		if (ret == 0) {
			log_info("ready: serving device %s after a handover; socket %s",
				 d->dev.name, d->paths.sock);
			/* the old daemon may still hold the port for a moment */
			if (d->o.metrics_listen &&
			    metrics_http_start(d, d->o.metrics_listen, 5000,
					       err))
				log_warn("%s; serving without --metrics-listen",
					 err);
			return serve(d);
		}
		if (ret != -ECONNRESET || !given.model) {
			log_error("%s", err);
			return 1;
		}
		log_warn("%s; the old daemon died in the middle of the handover: loading %s from disk",
			 err, given.model);
		d->o = given;
		/* wcctl restart reports it (the ready file's reloaded) */
		snprintf(d->reloaded, sizeof(d->reloaded), "%s%.*s",
			 "the old daemon died in the middle of the handover: ",
			 (int)sizeof(d->reloaded) - 64, err);
		for (char *c = d->reloaded; *c; c++)
			if (*c == '\n')
				*c = ' ';
	}

	ret = own_acquire(d, err);
	if (ret) {
		log_error("%s", err);
		return 1;
	}
	log_info("wcd pid %d owns device %s (%s backend); files %s.*",
		 (int)getpid(), d->dev.name, d->dev.be->name, d->paths.prefix);
	/* Scrapes are served from here on: while loading too. */
	if (d->o.metrics_listen &&
	    metrics_http_start(d, d->o.metrics_listen, 0, err)) {
		log_error("%s", err);
		return 1;
	}

	v = &d->ver[0];
	d->cur = 0;
	v->used = true;
	v->number = 1;
	wcd_enter(d, WCD_LOADING);
	ret = load_prepare(d, v, err);
	if (!ret)
		ret = load_run(d, v, err);
	if (ret == -ECANCELED || wcd_stopping(d)) {
		log_info("stopped while loading");
		return 0;
	}
	if (ret) {
		log_error("%s", err);
		return 1;
	}

	t0 = rx_now_ns();
	wcd_enter(d, WCD_READY);
	ret = server_listen(d, err);
	if (!ret)
		ret = status_write_ready(d, err);
	if (ret) {
		log_error("%s", err);
		return 1;
	}
	v->phases.publish_s += (double)(rx_now_ns() - t0) / 1e9;
	log_info("phase publish: %.3f s (seal, listen, ready file)",
		 v->phases.publish_s);
	log_info("ready: %u tensors, %" PRIu64 " bytes in %u pools, loaded in %.3f s (%.2f GB/s); socket %s",
		 v->plan.ntensors, v->plan.total_bytes, v->npools,
		 v->load_seconds, v->load_gbps, d->paths.sock);
	ret = sdnotify_send("READY=1\nSTATUS=serving %u tensors on %s",
			    v->plan.ntensors, d->dev.name);
	if (ret)
		log_warn("cannot tell systemd that wcd is ready ($NOTIFY_SOCKET): %s",
			 strerror(-ret));
	server_start(d, &hooks);
	life_device_idle(d);
	return serve(d);
}

/* Every connection costs two descriptors (socket, pidfd): take the hard
 * limit, not the 1024 a shell usually gives. wcd never uses select(). */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		log_warn("cannot raise the descriptor limit to %llu: %s",
			 (unsigned long long)rl.rlim_max, strerror(errno));
}

int main(int argc, char **argv)
{
	static struct wcd d;
	enum log_level lvl;
	sigset_t mask;
	int rc;

	if (cli_version(argc, argv, "wcd"))
		return 0;
	log_init("wcd", LOG_INFO);
	d.ready_write = status_write_ready;
	lvl = parse_opts(&d.o, argc, argv);
	log_init("wcd", lvl);
	sdnotify_init();
	log_set_format(d.o.log_format);
	if (d.o.log_file) {
		char lerr[BASE_ERR_LEN];

		if (log_open_file(d.o.log_file, lerr, sizeof(lerr))) {
			log_error("%s", lerr);
			return 1;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	/* Block SIGTERM/SIGINT before any thread exists (CUDA's, the hash
	 * workers'): threads inherit the mask, so the signals can only be
	 * taken by the loop's signalfd, which also picks up one that arrived
	 * before it was set up. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);  /* reopens --log-file; never kills us */
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	/* One hardware queue carries the copies and the hash kernels as fast
	 * as CUDA's default eight (a warm load measured 48.2 GB/s with 1 and
	 * 46.6 with 8), and each queue costs about 10 MiB of host memory that
	 * the driver maps into the process. A value set by the user wins. */
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 0);
	d.lock_fd = -1;
	d.listen_fd = -1;
	d.state = WCD_STARTING;
	d.start_ns = rx_now_ns();

	rc = start(&d);

	/* Closing: unpublish (if not yet), free, release the lock last. */
	if (d.listen_fd >= 0) {
		close(d.listen_fd);
		d.listen_fd = -1;
	}
	if (d.lock_fd >= 0)
		own_remove_published(&d);
	/* a wake's host copy still being freed: its thread posts to the loop
	 * when done, so it ends before the loop closes */
	life_host_settle(&d);
	if (d.work_open)
		rx_pool_close(&d.work);
	d.work_open = false;
	if (d.loop.ring.ring_fd > 0)
		rx_loop_close(&d.loop);
	metrics_http_stop(&d);
	log_limit_flush(&d.m.malformed_log, LOG_INFO, "malformed frames");
	life_free(&d);
	push_free(&d);
	handover_free(&d);
	for (int i = 0; i < WCD_VERSIONS; i++)
		if (d.ver[i].used)
			load_version_free(&d, &d.ver[i]);
	if (d.dev.be)
		gpu_dev_close(&d.dev);
	own_release(&d);
	if (rc == 0)
		log_info("exiting cleanly");
	return rc;
}
