/* SPDX-License-Identifier: MIT */
/*
 * wcd's command line (wcd.h: opts_parse): the usage text, the long
 * options, and their checks. A bad option exits 2 with a sentence naming
 * it, its value and what to give instead; --help prints the usage and
 * exits 0. Nothing here opens a file or a device.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "log.h"
#include "wcd.h"
#include "serve/access.h"
#include "load/hashpool.h"
#include "base.h"
#include "daemon/fault.h"

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
"  --allow-updater UID|NAME\n"
"                         this user may also open update sessions (push\n"
"                         weights from its memory: conn.update_from), as the\n"
"                         daemon's own uid and root may; it is served as\n"
"                         --allow-uid serves (repeatable, at most 16); an\n"
"                         --allow-uid alone attaches, never updates\n"
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

/* --allow-updater UID|NAME: the uid (a name through getpwnam_r, at parse
 * time: a restart passes the number) may open update sessions; it is
 * served as --allow-uid serves it (added there unless it is already), since
 * a trainer must reach the socket first. */
static void add_updater(struct wcd_opts *o, const char *s)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	uid_t uid;
	bool found = false;

	if (*s >= '0' && *s <= '9') {
		uid = parse_u32(s, "bad --allow-updater '%s' (a uid or a user name)");
	} else {
		if (getpwnam_r(s, &pw, buf, sizeof(buf), &res) || !res)
			usage_fail("bad --allow-updater '%s': no such user (give a user name or a numeric uid)", s);
		uid = res->pw_uid;
	}
	for (unsigned i = 0; i < o->nallow_updater; i++)
		if (o->allow_updater[i] == uid)
			return;
	if (o->nallow_updater >= WCD_ALLOW_UID_MAX)
		usage_fail("more than 16 --allow-updater options (last: %s)", s);
	o->allow_updater[o->nallow_updater++] = uid;
	for (unsigned i = 0; i < o->nallow_uid; i++)
		found |= o->allow_uid[i] == uid;
	if (found)
		return;
	if (o->nallow_uid >= WCD_ALLOW_UID_MAX)
		usage_fail("--allow-updater %s: more than 16 uids served (--allow-uid and --allow-updater together)", s);
	o->allow_uid[o->nallow_uid++] = uid;
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
	const char *env = fault_str(FAULT_HASH_THREADS);   /* for bench scripts */
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
	OPT_ALLOW_UPDATER,
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
	{ "allow-updater", required_argument, NULL, OPT_ALLOW_UPDATER },
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

/* The options that only store their argument: a string, a flag, a
 * number, or one of two words as a flag. The rest check more (parse_opt). */
enum opt_store { STORE_STR, STORE_TRUE, STORE_FALSE, STORE_U32, STORE_WORD };

#define AT(field) offsetof(struct wcd_opts, field)
#define PLAIN(c, h, f, ...) { .opt = c, .how = h, .off = AT(f), __VA_ARGS__ }
#define WORD(c, f, nm, no, yes) \
	PLAIN(c, STORE_WORD, f, .name = nm, \
	      .words = (const char *const[]){ no, yes, NULL })

static const struct opt_plain {
	int opt;
	enum opt_store how;
	size_t off;
	const char *bad;              /* STORE_U32: usage_fail's format */
	const char *name;             /* STORE_WORD: the option */
	const char *const *words;     /* STORE_WORD: false, true */
} plain[] = {
	PLAIN(OPT_MODEL, STORE_STR, model),
	PLAIN(OPT_DEVICE, STORE_STR, device),
	PLAIN(OPT_RUNTIME_DIR, STORE_STR, runtime_dir),
	PLAIN(OPT_SOCKET_GROUP, STORE_STR, socket_group),
	PLAIN(OPT_ALLOW_QUANT, STORE_STR, allow_quant),
	PLAIN(OPT_METRICS_LISTEN, STORE_STR, metrics_listen),
	PLAIN(OPT_FORCE, STORE_TRUE, force),
	PLAIN(OPT_KEEP_CONTEXT, STORE_TRUE, keep_context),
	PLAIN(OPT_TAKEOVER, STORE_TRUE, takeover),
	PLAIN(OPT_NO_HASH, STORE_FALSE, hash),
	PLAIN(OPT_TP_SIZE, STORE_U32, tp_size, .bad = "bad --tp-size '%s'"),
	PLAIN(OPT_TP_RANK, STORE_U32, tp_rank, .bad = "bad --tp-rank '%s'"),
	PLAIN(OPT_PP_SIZE, STORE_U32, pp_size, .bad = "bad --pp-size '%s'"),
	PLAIN(OPT_PP_RANK, STORE_U32, pp_rank, .bad = "bad --pp-rank '%s'"),
	PLAIN(OPT_EP_SIZE, STORE_U32, ep_size, .bad = "bad --ep-size '%s'"),
	PLAIN(OPT_EP_RANK, STORE_U32, ep_rank, .bad = "bad --ep-rank '%s'"),
	WORD(OPT_IPC, ipc_legacy, "--ipc", "vmm", "legacy"),
	WORD(OPT_SLEEP_ARENA, sleep_arena_keep, "--sleep-arena", "free", "keep"),
	WORD(OPT_TAKEOVER_VERIFY, ho_rehash, "--takeover-verify", "none",
	     "hash"),
};

/* Option c through the plain table; false when it is not in it. */
static bool parse_plain(struct wcd_opts *o, int c, const char *arg)
{
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		const struct opt_plain *p = &plain[i];
		char *f = (char *)o + p->off;

		if (p->opt != c)
			continue;
		switch (p->how) {
		case STORE_STR: *(const char **)f = arg; break;
		case STORE_TRUE: *(bool *)f = true; break;
		case STORE_FALSE: *(bool *)f = false; break;
		case STORE_U32: *(uint32_t *)f = parse_u32(arg, p->bad); break;
		case STORE_WORD:
			*(bool *)f = parse_choice(arg, p->name, p->words) == 1;
			break;
		}
		return true;
	}
	return false;
}

/* One option that checks more than its type: exits 2 on a bad value. */
static void parse_opt(struct wcd_opts *o, int c, char **argv,
		      enum log_level *lvl)
{
	static char rules_abs[PATH_MAX], layout_abs[PATH_MAX], log_abs[PATH_MAX];

	switch (c) {
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
	case OPT_ALLOW_UID:
		if (o->nallow_uid >= WCD_ALLOW_UID_MAX)
			usage_fail("more than 16 --allow-uid options (last: %s)", optarg);
		o->allow_uid[o->nallow_uid++] =
			parse_u32(optarg, "bad --allow-uid '%s' (a numeric uid)");
		break;
	case OPT_ALLOW_UPDATER: add_updater(o, optarg); break;
	case OPT_ALLOW_GID:
		if (access_add_gid(o, parse_u32(optarg, "bad --allow-gid '%s' (a numeric gid)")))
			usage_fail("more than 16 --allow-gid options (last: %s)", optarg);
		break;
	case OPT_SOCKET_MODE: o->socket_mode = parse_socket_mode(optarg); break;
	case OPT_RULES: o->rules = abs_path(optarg, rules_abs, "--rules"); break;
	case OPT_LAYOUT: o->layout = abs_path(optarg, layout_abs, "--layout"); break;
	case OPT_VOCAB_PAD:
		o->vocab_pad = (int32_t)parse_u32(optarg, "bad --vocab-pad '%s'");
		if (o->vocab_pad > (int32_t)PLAN_VOCAB_PAD_MAX)
			usage_fail("--vocab-pad %s is over 1048576", optarg);
		break;
	case OPT_POOL_SIZE: o->pool_size = parse_size(optarg, "--pool-size"); break;
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
	case OPT_LOG_FILE: o->log_file = abs_path(optarg, log_abs, "--log-file"); break;
	case OPT_LOG_FORMAT:
		if (log_parse_format(optarg, &o->log_format))
			usage_fail("bad --log-format '%s' (text or json)", optarg);
		break;
	case OPT_LOG_LEVEL:
		if (!strcmp(optarg, "debug")) *lvl = LOG_DEBUG;
		else if (!strcmp(optarg, "info")) *lvl = LOG_INFO;
		else if (!strcmp(optarg, "warn")) *lvl = LOG_WARN;
		else if (!strcmp(optarg, "error")) *lvl = LOG_ERROR;
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

enum log_level opts_parse(struct wcd_opts *o, int argc, char **argv)
{
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
	while ((c = cli_getopt(argc, argv, "h", longopts, "wcd")) != -1)
		if (!parse_plain(o, c, optarg))
			parse_opt(o, c, argv, &lvl);
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

