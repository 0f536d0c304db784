/* SPDX-License-Identifier: MIT */
/*
 * wcattach: a libwcache client example that doubles as API documentation.
 * It does what an engine does at start-up -- connect to the rank's daemon,
 * say HELLO with the identity it expects, attach, look tensors up -- and
 * then what an engine does while serving: watch the daemon's liveness fd
 * and its notices.
 *
 *   wcattach --runtime-dir DIR --device D [--verify] [--hold SECONDS]
 *            [--socket PATH] [--json] [--model DIR [--tp-size N --tp-rank R
 *            --pp-size N --pp-rank R] [--rules FILE] [--layout FILE]
 *            [--ep-size N --ep-rank R] [--vocab-pad N]] [--writable] [--follow]
 *
 * Output: one line (or one JSON object) with the tensor count, bytes and
 * the attach time by phase. Exit 0 on success, 1 on an error (the library's
 * message on stderr), 2 on bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "log.h"
#include "wcache.h"
#include "clock.h"

struct opts {
	struct wc_connect_opts co;
	struct wc_expect x;
	bool have_model;
	bool verify;
	bool json;
	bool writable;
	bool follow;
	double hold_s;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: wcattach --device D [--runtime-dir DIR | --socket PATH] [options]\n"
		"\n"
		"Attaches to the wcache daemon (wcd) of one device the way an engine does,\n"
		"prints the tensor count and the attach time, and optionally holds the\n"
		"mapping while watching the daemon.\n"
		"\n"
		"  --device D          host, host:NAME, host-NAME (as wcctl status prints\n"
		"                      it), a CUDA ordinal or GPU-<uuid>\n"
		"  --runtime-dir DIR   where the daemon's socket is (DIR/<device>.sock)\n"
		"  --socket PATH       the daemon's socket (instead of device + dir)\n"
		"  --model DIR         check that the daemon serves this model (HELLO\n"
		"                      with the engine's identity); without it any model\n"
		"                      is accepted\n"
		"  --tp-size N --tp-rank R --pp-size N --pp-rank R --rules FILE\n"
		"  --layout FILE --ep-size N --ep-rank R --vocab-pad N (0: off)\n"
		"                      the rest of the expected identity (with --model),\n"
		"                      as given to wcd\n"
		"  --same-path         with --model: also require the daemon's model path\n"
		"                      to be this one (by default an equal checkpoint\n"
		"                      elsewhere, e.g. a bind mount, is accepted)\n"
		"  --verify            recompute every tensor's XXH3-128 from the mapping\n"
		"  --hold SECONDS      stay attached that long, reporting notices and the\n"
		"                      daemon's exit (then re-verifying with --verify)\n"
		"  --follow            with --hold: on a new-version notice, attach the new\n"
		"                      version and let go of the old one, as an engine would\n"
		"  --trust-uid UID     also accept a daemon running as UID (by default only\n"
		"                      one of our own uid, root, the 'wcache' account or\n"
		"                      $WCACHE_TRUST_UID is trusted)\n"
		"  --writable          ask for a read-write mapping (refused by the host\n"
		"                      backend: its pools are sealed)\n"
		"  --json              one JSON object per event instead of text\n"
		"  -h, --help          this text; --version the release\n"
		"\n"
		"Examples:\n"
		"  wcattach --device host:demo --runtime-dir /tmp/wc --verify\n"
		"  wcattach --device 0 --model /models/llama --tp-size 2 --tp-rank 1\n"
		"  wcattach --device 0 --model /models/llama --hold 3600 --follow\n"
		"\n"
		"Exit status: 0 attached (and verified), 1 a failure (no daemon, a\n"
		"mismatch, a bad hash), 2 usage.\n");
}

static int parse_int(const char *s, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > 1 << 20) {
		fprintf(stderr, "wcattach: %s '%s' is not a number from 0 to %d\n",
			what, s, 1 << 20);
		exit(2);
	}
	return (int)v;
}

static void parse(int argc, char **argv, struct opts *o)
{
	enum { O_TP = 256, O_TPR, O_PP, O_PPR, O_RULES, O_WR, O_FOLLOW, O_TRUST, O_SAME_PATH,
	       O_LAYOUT, O_EP, O_EPR, O_VPAD };
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "socket", required_argument, NULL, 's' },
		{ "model", required_argument, NULL, 'm' },
		{ "tp-size", required_argument, NULL, O_TP },
		{ "tp-rank", required_argument, NULL, O_TPR },
		{ "pp-size", required_argument, NULL, O_PP },
		{ "pp-rank", required_argument, NULL, O_PPR },
		{ "rules", required_argument, NULL, O_RULES },
		{ "layout", required_argument, NULL, O_LAYOUT },
		{ "ep-size", required_argument, NULL, O_EP },
		{ "ep-rank", required_argument, NULL, O_EPR },
		{ "vocab-pad", required_argument, NULL, O_VPAD },
		{ "verify", no_argument, NULL, 'v' },
		{ "hold", required_argument, NULL, 'H' },
		{ "writable", no_argument, NULL, O_WR },
		{ "follow", no_argument, NULL, O_FOLLOW },
		{ "trust-uid", required_argument, NULL, O_TRUST },
		{ "same-path", no_argument, NULL, O_SAME_PATH },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	while ((c = cli_getopt(argc, argv, "h", lo, "wcattach")) != -1) {
		switch (c) {
		case 'd': o->co.device = optarg; break;
		case 'r': o->co.runtime_dir = optarg; break;
		case 's': o->co.socket = optarg; break;
		case 'm': o->x.model_dir = optarg; o->have_model = true; break;
		case O_TP: o->x.tp_size = parse_int(optarg, "--tp-size"); break;
		case O_TPR: o->x.tp_rank = parse_int(optarg, "--tp-rank"); break;
		case O_PP: o->x.pp_size = parse_int(optarg, "--pp-size"); break;
		case O_PPR: o->x.pp_rank = parse_int(optarg, "--pp-rank"); break;
		case O_RULES: o->x.rules_file = optarg; break;
		case O_LAYOUT: o->x.layout_file = optarg; break;
		case O_EP: o->x.ep_size = parse_int(optarg, "--ep-size"); break;
		case O_EPR: o->x.ep_rank = parse_int(optarg, "--ep-rank"); break;
		case O_VPAD:  /* as wcd: 0 is off; wc_expect: 0 the layout's, -1 off */
			o->x.vocab_pad = parse_int(optarg, "--vocab-pad");
			if (!o->x.vocab_pad)
				o->x.vocab_pad = -1;
			break;
		case 'v': o->verify = true; break;
		case O_WR: o->writable = true; break;
		case O_FOLLOW: o->follow = true; break;
		case O_SAME_PATH: o->x.same_path = 1; break;
		case O_TRUST:
			o->co.trust_uid = (unsigned)parse_int(optarg, "--trust-uid");
			break;
		case 'j': o->json = true; break;
		case 'H':
			o->hold_s = strtod(optarg, &end);
			if (*end || o->hold_s < 0 || o->hold_s > 1e6) {
				fprintf(stderr, "wcattach: --hold '%s' is not a number of seconds (0 to 1000000)\n",
					optarg);
				exit(2);
			}
			break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "wcattach: unexpected argument '%s'; see --help\n",
			argv[optind]);
		exit(2);
	}
	if (!o->co.device && !o->co.socket) {
		fprintf(stderr, "wcattach: give --device D (with --runtime-dir DIR) or --socket PATH; see --help\n");
		exit(2);
	}
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

/* Prints an error the way an engine would show it, and exits 1. */
static void fail(const struct opts *o, const char *what,
		 const struct wc_error *e)
{
	if (o->json) {
		printf("{\"event\":\"error\",\"step\":\"%s\",\"code\":%d,\"message\":\"",
		       what, e->code);
		for (const char *p = e->msg; *p; p++)
			if (*p == '"' || *p == '\\')
				printf("\\%c", *p);
			else if ((unsigned char)*p < 0x20)
				printf("\\u%04x", *p);
			else
				putchar(*p);
		printf("\"}\n");
		fflush(stdout);
	}
	fprintf(stderr, "wcattach: %s failed: %s\n", what, e->msg);
	exit(1);
}

static void report_attach(const struct opts *o, const struct wc_model *m,
			  const struct wc_attach_times *t, double verify_ms,
			  uint64_t bad)
{
	const struct wc_info *in = wc_model_info(m);
	uint64_t total = t->connect_ns + t->hello_ns + t->manifest_ns +
			 t->attach_ns + t->map_ns;

	if (o->json) {
		printf("{\"event\":\"attached\",\"pid\":%d,\"daemon_pid\":%d,"
		       "\"device\":\"%s\",\"identity\":\"%s\",\"version\":%" PRIu64 ","
		       "\"tensors\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"pools\":%u,"
		       "\"attach_ms\":%.3f,\"connect_ms\":%.3f,\"hello_ms\":%.3f,"
		       "\"manifest_ms\":%.3f,\"attach_req_ms\":%.3f,\"map_ms\":%.3f,"
		       "\"device_open_ms\":%.3f",
		       (int)getpid(), (int)in->pid, in->device, in->identity,
		       in->version, wc_tensor_count(m), in->bytes,
		       wc_pool_count(m), ms(total), ms(t->connect_ns),
		       ms(t->hello_ns), ms(t->manifest_ns), ms(t->attach_ns),
		       ms(t->map_ns), ms(t->device_ns));
		if (o->verify)
			printf(",\"verified\":%s,\"bad\":%" PRIu64 ",\"verify_ms\":%.3f",
			       bad ? "false" : "true", bad, verify_ms);
		printf("}\n");
	} else {
		printf("attached to %s (daemon pid %d, identity %s, version %" PRIu64 "): "
		       "%" PRIu64 " tensors, %" PRIu64 " bytes in %u pools; attach %.3f ms "
		       "(connect %.3f, hello %.3f, manifest %.3f, attach %.3f, map %.3f)\n",
		       in->device, (int)in->pid, in->identity, in->version,
		       wc_tensor_count(m), in->bytes, wc_pool_count(m), ms(total),
		       ms(t->connect_ns), ms(t->hello_ns), ms(t->manifest_ns),
		       ms(t->attach_ns), ms(t->map_ns));
		/* CUDA start-up is paid once per process, not per attach */
		if (t->device_ns)
			printf("device open (driver start-up, once per process): %.3f ms\n",
			       ms(t->device_ns));
		if (o->verify)
			printf("verified %" PRIu64 " tensors in %.3f ms: %s\n",
			       wc_tensor_count(m), verify_ms,
			       bad ? "MISMATCH" : "all hashes match");
	}
	fflush(stdout);
}

/* Runs wc_verify and returns its time in ms; exits on anything but a clean
 * result. */
static double verify(const struct opts *o, const struct wc_model *m,
		     uint64_t *bad)
{
	struct wc_error e;
	uint64_t t0 = clock_ns();

	if (wc_verify(m, bad, &e) < 0 && e.code != EILSEQ)
		fail(o, "verify", &e);
	if (*bad)
		fprintf(stderr, "wcattach: %s\n", e.msg);
	return ms(clock_ns() - t0);
}

/* A new version was published: HELLO again (the engine's identity, now
 * computed from the new checkpoint), attach the new version, and only then
 * let go of the old one -- the engine never runs without weights. */
static int follow(const struct opts *o, struct wc_conn *c,
		  struct wc_model **mp)
{
	struct wc_attach_times t;
	struct wc_model *nm;
	struct wc_error e;
	uint64_t bad = 0;
	double vms = 0;

	if (wc_hello(c, o->have_model ? &o->x : NULL, NULL, &e) < 0 ||
	    wc_attach(c, o->writable ? WC_ATTACH_WRITABLE : 0, &nm, &t, &e) < 0) {
		fprintf(stderr, "wcattach: re-attach failed (still on version %" PRIu64 "): %s\n",
			wc_model_info(*mp)->version, e.msg);
		return 1;
	}
	if (o->verify)
		vms = verify(o, nm, &bad);
	if (wc_detach(*mp, &e) < 0)
		fprintf(stderr, "wcattach: detach of the old version: %s\n", e.msg);
	*mp = nm;
	if (o->json)
		printf("{\"event\":\"reattached\",\"version\":%" PRIu64 "%s%s,\"verify_ms\":%.3f}\n",
		       wc_model_info(nm)->version,
		       o->verify ? ",\"verified\":" : "",
		       o->verify ? (bad ? "false" : "true") : "", vms);
	else
		printf("re-attached to version %" PRIu64 "%s\n",
		       wc_model_info(nm)->version,
		       o->verify ? (bad ? ", verify FAILED" : ", verified") : "");
	return bad ? 1 : 0;
}

/* Holds the mapping for o->hold_s seconds. An engine does this in its own
 * loop: the daemon fd (a pidfd) becomes readable when the daemon exits, the
 * notice fd when the daemon announces a shutdown or a new version. */
static int hold(const struct opts *o, struct wc_conn *c, struct wc_model **mp)
{
	uint64_t end = clock_ns() + (uint64_t)(o->hold_s * 1e9);
	bool daemon_alive = true, conn_open = true;
	struct wc_notice n;
	struct wc_error e;
	int rc = 0;

	while (clock_ns() < end) {
		struct pollfd p[2] = {
			{ .fd = daemon_alive ? wc_daemon_fd(c) : -1, .events = POLLIN },
			{ .fd = conn_open ? wc_notice_fd(c) : -1, .events = POLLIN },
		};
		uint64_t left_ms = (end - clock_ns()) / 1000000 + 1;

		if (poll(p, 2, (int)(left_ms > 1000 ? 1000 : left_ms)) < 0)
			continue;
		if (p[1].revents) {
			int r;

			while ((r = wc_notice_read(c, &n, &e)) == 1) {
				if (o->json)
					printf("{\"event\":\"notice\",\"kind\":%d,\"version\":%" PRIu64 "}\n",
					       n.kind, n.version);
				else
					printf("notice from the daemon: %s\n", n.msg);
				if (n.kind == WC_NOTICE_VERSION && o->follow &&
				    follow(o, c, mp))
					rc = 1;
			}
			if (r < 0)
				conn_open = false;
		}
		if ((p[0].revents & POLLIN) && conn_open) {
			/* a hot handover: the notice moves the daemon fd to
			 * the new daemon; read it before deciding */
			struct pollfd q = { wc_daemon_fd(c), POLLIN, 0 };
			int r;

			while ((r = wc_notice_read(c, &n, &e)) == 1)
				if (o->json)
					printf("{\"event\":\"notice\",\"kind\":%d,\"version\":%" PRIu64 "}\n",
					       n.kind, n.version);
				else
					printf("notice from the daemon: %s\n", n.msg);
			if (r < 0)
				conn_open = false;
			if (poll(&q, 1, 0) == 0)
				p[0].revents = 0;
		}
		if (p[0].revents & POLLIN) {
			uint64_t bad = 0;
			double vms = 0;

			daemon_alive = false;
			/* The mapping outlives the daemon: prove it. */
			if (o->verify)
				vms = verify(o, *mp, &bad);
			if (o->json)
				printf("{\"event\":\"daemon-exit\",\"daemon_pid\":%d%s%s,\"verify_ms\":%.3f}\n",
				       (int)wc_daemon_pid(c),
				       o->verify ? ",\"verified\":" : "",
				       o->verify ? (bad ? "false" : "true") : "",
				       vms);
			else
				printf("the daemon (pid %d) exited; the mapping stays valid%s\n",
				       (int)wc_daemon_pid(c),
				       o->verify ? (bad ? ", but verify FAILED" :
						  " and still verifies") : "");
			if (bad)
				rc = 1;
		}
		fflush(stdout);
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct wc_attach_times t;
	struct wc_conn *c;
	struct wc_model *m;
	struct wc_error e;
	uint64_t bad = 0;
	double vms = 0;
	int rc;

	if (cli_version(argc, argv, "wcattach"))
		return 0;
	log_init("wcattach", LOG_INFO);
	parse(argc, argv, &o);
	o.co.label = "wcattach";

	/* 1. connect: the socket comes from the device (and runtime dir) */
	if (wc_connect(&o.co, &c, &e) < 0)
		fail(&o, "connect", &e);
	/* 2. HELLO: an engine passes what it expects; a mismatch names the
	 *    differing fields with both values */
	if (wc_hello(c, o.have_model ? &o.x : NULL, NULL, &e) < 0)
		fail(&o, "hello", &e);
	/* 3. attach: the manifest, a lease and the pools, mapped read-only */
	if (wc_attach(c, o.writable ? WC_ATTACH_WRITABLE : 0, &m, &t, &e) < 0)
		fail(&o, "attach", &e);
	/* 4. use: look tensors up by name (here: the first one) */
	if (wc_tensor_count(m)) {
		const struct wc_tensor *t0;

		if (wc_lookup(m, wc_tensor_at(m, 0)->name, &t0, &e) < 0)
			fail(&o, "lookup", &e);
	}
	if (o.verify)
		vms = verify(&o, m, &bad);
	report_attach(&o, m, &t, vms, bad);
	rc = bad ? 1 : 0;
	if (o.hold_s > 0 && hold(&o, c, &m))
		rc = 1;
	/* 5. detach: ends the lease and unmaps */
	if (wc_detach(m, &e) < 0)
		fprintf(stderr, "wcattach: detach: %s\n", e.msg);
	wc_close(c);
	return rc;
}
