/* SPDX-License-Identifier: MIT */
/*
 * tools/wcctl/expo: merging Prometheus texts for wcctl metrics --all. Two
 * daemons' families under one HELP and TYPE each, in first-seen order,
 * a histogram's _bucket/_sum/_count kept in their family; samples without
 * a device label (an older daemon; a label whose name ends in "device" is
 * not one) get the daemon's; a family typed
 * differently by a later text keeps its first type and that text's
 * samples are left out and named; a line past EXPO_LINE_MAX is left out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "tools/wcctl/expo.c"

static const char a[] =
	"# HELP up Whether up.\n"
	"# TYPE up gauge\n"
	"up{device=\"host-0\",rank=\"0\"} 1\n"
	"# HELP lat Latency.\n"
	"# TYPE lat histogram\n"
	"lat_bucket{device=\"host-0\",le=\"+Inf\"} 2\n"
	"lat_sum{device=\"host-0\"} 0.5\n"
	"lat_count{device=\"host-0\"} 2\n";

static const char b[] =
	"# HELP up Whether up (another wording).\n"
	"# TYPE up gauge\n"
	"up{device=\"host-1\",rank=\"1\"} 1\n"
	"# HELP lat Latency.\n"
	"# TYPE lat histogram\n"
	"lat_bucket{device=\"host-1\",le=\"+Inf\"} 3\n"
	"lat_sum{device=\"host-1\"} 0.7\n"
	"lat_count{device=\"host-1\"} 3\n"
	"# HELP extra Only here.\n"
	"# TYPE extra counter\n"
	"extra_total{device=\"host-1\"} 9\n";

static void test_merge(void)
{
	struct expo *e = expo_new();
	char err[256] = "", *t;

	T_ASSERT(e);
	T_EQ_INT(expo_add(e, "host-0", a, err, sizeof(err)), 0);
	T_EQ_INT(expo_add(e, "host-1", b, err, sizeof(err)), 0);
	t = expo_text(e);
	T_EQ_STR(t,
		 "# HELP up Whether up.\n"
		 "# TYPE up gauge\n"
		 "up{device=\"host-0\",rank=\"0\"} 1\n"
		 "up{device=\"host-1\",rank=\"1\"} 1\n"
		 "# HELP lat Latency.\n"
		 "# TYPE lat histogram\n"
		 "lat_bucket{device=\"host-0\",le=\"+Inf\"} 2\n"
		 "lat_sum{device=\"host-0\"} 0.5\n"
		 "lat_count{device=\"host-0\"} 2\n"
		 "lat_bucket{device=\"host-1\",le=\"+Inf\"} 3\n"
		 "lat_sum{device=\"host-1\"} 0.7\n"
		 "lat_count{device=\"host-1\"} 3\n"
		 "# HELP extra Only here.\n"
		 "# TYPE extra counter\n"
		 "extra_total{device=\"host-1\"} 9\n");
	free(t);
	expo_free(e);
}

/* Texts of daemons older than the rank labels: the same series twice
 * unless the merge names the device. */
static void test_device_added(void)
{
	struct expo *e = expo_new();
	char err[256] = "", *t;
	const char *old = "# HELP st State.\n# TYPE st gauge\n"
			  "st{state=\"ready\"} 1\nst{} 0\nup 1\n"
			  "io{block_device=\"nvme0\"} 2\n";

	T_EQ_INT(expo_add(e, "host-0", old, err, sizeof(err)), 0);
	T_EQ_INT(expo_add(e, "host-1", old, err, sizeof(err)), 0);
	t = expo_text(e);
	T_EQ_STR(t,
		 "# HELP st State.\n# TYPE st gauge\n"
		 "st{device=\"host-0\",state=\"ready\"} 1\n"
		 "st{device=\"host-0\"} 0\n"
		 "st{device=\"host-1\",state=\"ready\"} 1\n"
		 "st{device=\"host-1\"} 0\n"
		 "up{device=\"host-0\"} 1\n"
		 "up{device=\"host-1\"} 1\n"
		 "io{device=\"host-0\",block_device=\"nvme0\"} 2\n"
		 "io{device=\"host-1\",block_device=\"nvme0\"} 2\n");
	free(t);
	expo_free(e);
}

static void test_type_conflict_and_long_line(void)
{
	struct expo *e = expo_new();
	char err[256] = "", *t, *longl;
	const char *g = "# HELP x X.\n# TYPE x gauge\nx{device=\"host-0\"} 1\n";
	const char *c = "# HELP x X.\n# TYPE x counter\nx{device=\"host-1\"} 2\n"
			"# HELP y Y.\n# TYPE y gauge\ny{device=\"host-1\"} 3\n";
	size_t n = EXPO_LINE_MAX + 10;

	T_EQ_INT(expo_add(e, "host-0", g, err, sizeof(err)), 0);
	T_EQ_INT(expo_add(e, "host-1", c, err, sizeof(err)), 1);
	T_HAS(err, "host-1: the samples of x are left out: another daemon gives it another TYPE");
	longl = malloc(n + 64);
	T_ASSERT(longl);
	memset(longl, 'a', n);
	strcpy(longl + n, " 1\ny{device=\"host-2\"} 4\n");
	err[0] = '\0';
	T_EQ_INT(expo_add(e, "host-2", longl, err, sizeof(err)), 1);
	T_HAS(err, "host-2: a line longer than 4096 bytes is left out");
	t = expo_text(e);
	T_EQ_STR(t,
		 "# HELP x X.\n# TYPE x gauge\nx{device=\"host-0\"} 1\n"
		 "# HELP y Y.\n# TYPE y gauge\ny{device=\"host-1\"} 3\n"
		 "y{device=\"host-2\"} 4\n");
	free(t);
	free(longl);
	expo_free(e);
}

int main(void)
{
	test_merge();
	test_device_added();
	test_type_conflict_and_long_line();
	printf("wcctl_expo: ok\n");
	return 0;
}
