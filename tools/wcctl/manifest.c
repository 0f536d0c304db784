/* SPDX-License-Identifier: MIT */
/*
 * wcctl manifest: lists what a running daemon serves -- every tensor's
 * name, dtype, shape, bytes and XXH3-128 (canonical hex, as `xxhsum -H2`
 * prints it) -- through libwcache (HELLO without an identity, MANIFEST; no
 * lease, nothing mapped).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "wcache.h"
#include "wcctl.h"

static void manifest_usage(FILE *f)
{
	fprintf(f,
		"usage: wcctl manifest --device D [--runtime-dir DIR | --socket PATH] [--json]\n"
		"\n"
		"Prints every tensor a running daemon serves: name, dtype, shape, bytes and\n"
		"the XXH3-128 of its bytes (canonical hex, as xxhsum -H2 prints it).\n"
		"\n"
		"  --device D          host, host:NAME, host-NAME (as status prints it), a\n"
		"                      CUDA ordinal or GPU-<uuid>\n"
		"  --runtime-dir DIR   the daemons' runtime directory\n"
		"  --socket PATH       the daemon's socket instead\n"
		"  --json              one JSON object: {\"device\", \"identity\", \"version\",\n"
		"                      \"tensors\": [{\"name\", \"dtype\", \"shape\", \"bytes\",\n"
		"                      \"pool\", \"offset\", \"padded_rows\", \"view\", \"alias\",\n"
		"                      \"xxh3_128\"}]}\n"
		"A view (fused tensor, alias) covers other entries' bytes; padded_rows\n"
		"is 0, or the padded row count whose zero rows follow the real ones.\n"
		"\n"
		"Examples:\n"
		"  wcctl manifest --device 0\n"
		"  wcctl manifest --device host-demo --runtime-dir /run/wcache --json\n"
		"\n"
		"Exit status: 0 listed, 1 no daemon or an error, 2 usage.\n");
}

/* A JSON string (names are UTF-8 from a validated safetensors header). */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void print_shape(const struct wc_tensor *t, bool json)
{
	putchar('[');
	for (uint32_t d = 0; d < t->ndim; d++)
		printf("%s%" PRIu64, d ? (json ? "," : ", ") : "", t->shape[d]);
	putchar(']');
}

int wcctl_need_target(const struct wc_connect_opts *co, int extra_args)
{
	if (extra_args || (!co->device && !co->socket)) {
		fprintf(stderr, "%s: give --device D (and --runtime-dir DIR) or --socket PATH; see --help\n",
			co->label);
		return 2;
	}
	return 0;
}

int wcctl_get_manifest(const struct wc_connect_opts *co, struct wc_conn **c,
		       struct wc_model **m)
{
	struct wc_error e;

	if (wc_connect(co, c, &e) < 0 || wc_hello(*c, NULL, NULL, &e) < 0 ||
	    wc_manifest(*c, m, &e) < 0) {
		fprintf(stderr, "%s: %s\n", co->label, e.msg);
		return 1;
	}
	return 0;
}

int wcctl_manifest(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct wc_connect_opts co = { .label = "wcctl manifest" };
	const struct wc_info *in;
	struct wc_conn *c;
	struct wc_model *m;
	bool json = false;
	int ch;

	optind = 1;
	while ((ch = cli_getopt(argc, argv, "h", lo, "wcctl manifest")) != -1) {
		switch (ch) {
		case 'd': co.device = optarg; break;
		case 'r': co.runtime_dir = optarg; break;
		case 's': co.socket = optarg; break;
		case 'j': json = true; break;
		case 'h': manifest_usage(stdout); return 0;
		default: manifest_usage(stderr); return 2;
		}
	}
	if (wcctl_need_target(&co, optind < argc))
		return 2;
	if (wcctl_get_manifest(&co, &c, &m))
		return 1;
	in = wc_model_info(m);
	if (json) {
		printf("{\"device\":");
		json_str(in->device);
		printf(",\"identity\":\"%s\",\"version\":%" PRIu64 ",\"tensors\":[",
		       in->identity, in->version);
	} else {
		printf("# name  dtype  shape  bytes  xxh3_128\n# %s, identity %s, version %" PRIu64 ", %" PRIu64 " tensors, %" PRIu64 " bytes\n",
		       in->device, in->identity, in->version, wc_tensor_count(m),
		       in->bytes);
	}
	for (uint64_t i = 0; i < wc_tensor_count(m); i++) {
		const struct wc_tensor *t = wc_tensor_at(m, i);
		char hex[WC_HEX_LEN];

		if (t->flags & WC_TENSOR_HASHED)
			wc_hash_hex(t->hash, hex);
		else
			strcpy(hex, "-");
		if (json) {
			printf("%s{\"name\":", i ? "," : "");
			json_str(t->name);
			printf(",\"dtype\":\"%s\",\"shape\":", t->dtype);
			print_shape(t, true);
			printf(",\"bytes\":%" PRIu64 ",\"pool\":%u,\"offset\":%" PRIu64
			       ",\"padded_rows\":%" PRIu64 ",\"view\":%s,\"alias\":%s"
			       ",\"xxh3_128\":", t->bytes, t->pool, t->offset,
			       t->padded_rows,
			       t->flags & WC_TENSOR_VIEW ? "true" : "false",
			       t->flags & WC_TENSOR_ALIAS ? "true" : "false");
			if (t->flags & WC_TENSOR_HASHED)
				printf("\"%s\"}", hex);
			else
				printf("null}");
		} else {
			printf("%s  %s  ", t->name, t->dtype);
			print_shape(t, false);
			printf("  %" PRIu64 "  %s\n", t->bytes, hex);
		}
	}
	if (json)
		printf("]}\n");
	wc_detach(m, NULL);
	wc_close(c);
	return fflush(stdout) ? 1 : 0;
}
