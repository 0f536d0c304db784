/* SPDX-License-Identifier: MIT */
/*
 * wcctl start --dry-run and --json: the plan (ranks, devices, the wcd
 * command lines) without starting anything, and the outcome of a start as
 * one JSON object. Reads the launch state; changes nothing.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "utf8.h"

/* One argv as a shell would need it quoted (single quotes where needed). */
static void print_argv(char **argv)
{
	for (int i = 0; argv[i]; i++) {
		const char *a = argv[i];
		bool plain = *a && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				"abcdefghijklmnopqrstuvwxyz0123456789"
				"_-./:=,+@%") == strlen(a);

		if (i)
			putchar(' ');
		if (plain) {
			fputs(a, stdout);
			continue;
		}
		putchar('\'');
		for (; *a; a++) {
			if (*a == '\'')
				fputs("'\\''", stdout);
			else
				putchar(*a);
		}
		putchar('\'');
	}
	putchar('\n');
}

static json_t *plan_rank_json(const struct launch *l, const struct rank *r,
			      const char *wcd)
{
	char num[LAUNCH_NUMS][16], *argv[LAUNCH_ARGV_MAX];
	json_t *a = json_array(), *o;
	int n = launch_argv(l, r, wcd, argv, num);

	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_text(argv[i]));
	o = json_pack("{s:i, s:i, s:i, s:i, s:s}", "pp_rank", r->lr.pp_rank,
		      "tp_rank", r->lr.tp_rank, "global_rank",
		      r->lr.global_rank, "gpu", r->lr.gpu, "device",
		      r->device);
	if (l->o->ep_size > 1)
		json_object_set_new(o, "ep_rank",
				    json_integer(launch_ep_rank(l->o, r)));
	if (r->metrics[0])
		json_object_set_new(o, "metrics_listen", json_string(r->metrics));
	if (r->paths.log[0]) {
		json_object_set_new(o, "log", json_text(r->paths.log));
		json_object_set_new(o, "ready_file",
				    json_text(r->paths.ready));
	}
	json_object_set_new(o, "argv", a);
	return o;
}

static void print_json(json_t *o)
{
	char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_INDENT(2));

	printf("%s\n", s ? s : "{}");
	fflush(stdout);
	free(s);
	json_decref(o);
}

void launch_print_plan(const struct launch *l)
{
	char buf[PATH_MAX];
	const char *wcd = launch_wcd_path(l->o, buf, sizeof(buf));
	const struct layout *y = &l->lay;

	if (!wcd)
		wcd = "wcd";
	if (l->o->json) {
		json_t *ranks = json_array();

		for (int i = 0; i < l->n; i++)
			json_array_append_new(ranks, plan_rank_json(l,
					      &l->ranks[i], wcd));
		print_json(json_pack("{s:s, s:b, s:i, s:i, s:o, s:o}",
				     "command", "start", "dry_run", 1,
				     "node_rank", l->o->lp.node_rank,
				     "ranks_on_node", l->n, "runtime_dir",
				     json_text(l->rd.dir), "ranks", ranks));
		return;
	}
	printf("node %d would start %d weight cache daemon%s (pp_ranks=%d..%d, tp_ranks=%d..%d) in %s:\n",
	       l->o->lp.node_rank, l->n, l->n == 1 ? "" : "s", y->pp_first,
	       y->pp_first + y->pp_count - 1, y->tp_first,
	       y->tp_first + y->tp_count - 1, l->rd.dir);
	printf("%-12s %-6s %-4s %s\n", "RANK", "GLOBAL", "GPU", "DEVICE");
	for (int i = 0; i < l->n; i++) {
		const struct rank *r = &l->ranks[i];
		char rank[32];

		snprintf(rank, sizeof(rank), "pp%d/tp%d", r->lr.pp_rank,
			 r->lr.tp_rank);
		printf("%-12s %-6d %-4d %s\n", rank, r->lr.global_rank,
		       r->lr.gpu, r->device);
	}
	printf("commands:\n");
	for (int i = 0; i < l->n; i++) {
		char num[LAUNCH_NUMS][16], *argv[LAUNCH_ARGV_MAX];

		launch_argv(l, &l->ranks[i], wcd, argv, num);
		fputs("  ", stdout);
		print_argv(argv);
	}
	fflush(stdout);
}

void launch_print_outcome(const struct launch *l, int status)
{
	json_t *ranks = json_array();

	for (int i = 0; i < l->n; i++) {
		const struct rank *r = &l->ranks[i];

		json_array_append_new(ranks, json_pack(
			"{s:i, s:i, s:i, s:s, s:i, s:b, s:o}",
			"pp_rank", r->lr.pp_rank, "tp_rank", r->lr.tp_rank,
			"gpu", r->lr.gpu, "device", r->device,
			"pid", r->spawned ? (int)r->child.pid : 0,
			"ready", r->ready, "log", json_text(r->paths.log)));
		if (r->metrics[0])
			json_object_set_new(json_array_get(ranks, (size_t)i),
					    "metrics_listen",
					    json_string(r->metrics));
	}
	print_json(json_pack("{s:s, s:b, s:i, s:i, s:i, s:o, s:o, s:i}",
			     "command", "start", "ok", status == 0,
			     "node_rank", l->o->lp.node_rank, "ranks_on_node",
			     l->n, "ready", l->nready, "runtime_dir", json_text(l->rd.dir),
			     "ranks", ranks, "exit", status));
}
