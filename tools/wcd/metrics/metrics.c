/* SPDX-License-Identifier: MIT */
/*
 * wcd's metrics in the Prometheus text exposition format 0.0.4: every name
 * has the wcache_ prefix and its unit last (_bytes, _seconds, _total for
 * counters); every sample carries the rank's labels (rank_labels). The
 * process_* families are the ones Prometheus' client libraries export
 * (CPU, memory, descriptors, start time), read from /proc/self. Rendered on each scrape from the daemon's own state (one pass
 * over the clients: O(clients)) and the counters of metrics.h; nothing is
 * kept between scrapes. promtool check metrics passes on the output
 * (test/wcd/metrics_scrape.sh).
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "metrics/metrics.h"
#include "clock.h"
#include "daemon/daemon.h"
#include "serve/server.h"
#include "model/versions.h"
#include "push/push.h"
#include "release.h"

struct out {
	char *buf;
	size_t cap, len;
	bool full;
	const char *labels;           /* every sample's: the rank's identity */
};

static void append(struct out *o, const char *s, size_t n)
{
	if (o->full || n >= o->cap - o->len) {
		o->full = true;
		return;
	}
	memcpy(o->buf + o->len, s, n);
	o->len += n;
	o->buf[o->len] = '\0';
}

static void put(struct out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* One line (a # comment, or a sample "name{labels} value" / "name value"),
 * a sample with o->labels first in its braces, so that every series says
 * which rank it is of. A line is at most METRICS_LINE_MAX bytes. */
static void put(struct out *o, const char *fmt, ...)
{
	char line[METRICS_LINE_MAX];
	va_list ap;
	size_t k;
	int n;

	if (o->full)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(line)) {
		o->full = true;
		return;
	}
	if (line[0] == '#' || !o->labels) {
		append(o, line, (size_t)n);
		return;
	}
	k = strcspn(line, "{ ");
	append(o, line, k);
	append(o, "{", 1);
	append(o, o->labels, strlen(o->labels));
	if (line[k] == '{') {
		append(o, ",", 1);
		append(o, line + k + 1, (size_t)n - k - 1);
	} else {
		append(o, "}", 1);
		append(o, line + k, (size_t)n - k);
	}
}

/* s as a label value (the exposition format's escapes: \\, \", \n). */
static size_t label_value(char *dst, size_t cap, const char *s)
{
	size_t n = 0;

	for (; *s && n + 3 < cap; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n')
			dst[n++] = '\\';
		dst[n++] = *s == '\n' ? 'n' : *s;
	}
	dst[n] = '\0';
	return n;
}

/* The labels every series of this daemon carries: the device, the global
 * rank (pp_rank * tp_size + tp_rank, as the engines number them) and the
 * layout (tp, pp, ep), so that one Prometheus scraping every rank of a
 * node keeps them apart. */
static void rank_labels(const struct wcd *d, char *buf, size_t cap)
{
	const struct wcd_opts *op = &d->o;
	char dev[2 * GPU_NAME_LEN];

	label_value(dev, sizeof(dev), d->dev.name);
	snprintf(buf, cap,
		 "device=\"%s\",rank=\"%u\",tp_rank=\"%u\",tp_size=\"%u\",pp_rank=\"%u\",pp_size=\"%u\",ep_rank=\"%u\",ep_size=\"%u\"",
		 dev, op->pp_rank * op->tp_size + op->tp_rank, op->tp_rank,
		 op->tp_size, op->pp_rank, op->pp_size, op->ep_rank,
		 op->ep_size);
}

/* # HELP and # TYPE of one metric family. */
static void family(struct out *o, const char *name, const char *type,
		   const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void lower(char *dst, size_t len, const char *src)
{
	size_t i = 0;

	for (; src[i] && i + 1 < len; i++)
		dst[i] = (char)(src[i] >= 'A' && src[i] <= 'Z' ?
				src[i] - 'A' + 'a' : src[i]);
	dst[i] = '\0';
}

static void put_info(struct out *o, struct wcd *d)
{
	struct timespec rt;
	uint64_t up_ns = rx_now_ns() - d->start_ns;
	char state[32];

	clock_gettime(CLOCK_REALTIME, &rt);
	family(o, "wcache_build_info", "gauge",
	       "The wcd build: release, wire protocol version, memory backend.");
	put(o, "wcache_build_info{version=\"%s\",wire_protocol=\"%d\",backend=\"%s\"} 1\n",
	    WCACHE_VERSION, WIRE_VERSION, d->dev.be ? d->dev.be->name : "");
	family(o, "wcache_uptime_seconds", "gauge",
	       "Seconds since this wcd started.");
	put(o, "wcache_uptime_seconds %.3f\n", clock_ns_secs(up_ns));
	family(o, "wcache_start_time_seconds", "gauge",
	       "When this wcd started, in seconds since the Unix epoch.");
	put(o, "wcache_start_time_seconds %.3f\n",
	    (double)rt.tv_sec + rt.tv_nsec / 1e9 - clock_ns_secs(up_ns));
	family(o, "wcache_state", "gauge",
	       "The daemon's state: 1 for the current one, 0 for the others.");
	for (int s = 0; s < WCD_NSTATES; s++) {
		lower(state, sizeof(state), wcd_state_name((enum wcd_state)s));
		put(o, "wcache_state{state=\"%s\"} %d\n", state,
		    d->state == (enum wcd_state)s);
	}
	family(o, "wcache_sleep_level", "gauge",
	       "The sleep level (1: host copy kept, 2: dropped), 0 when awake.");
	put(o, "wcache_sleep_level %u\n", wcd_model(d)->life.level);
}

static void put_versions(struct out *o, struct wcd *d)
{
	const struct wcd_model *model = wcd_model(d);
	const struct wcd_version *cur = model_current(wcd_model(d));
	bool host = d->dev.be && !strcmp(d->dev.be->name, "host");
	uint64_t resident = version_resident_bytes(d);

	family(o, "wcache_model_version", "gauge",
	       "The model version new attaches get (1, then +1 per update).");
	put(o, "wcache_model_version %llu\n",
	    (unsigned long long)(cur->used ? cur->number : 0));
	family(o, "wcache_tensors", "gauge",
	       "Tensors this rank serves in the current version.");
	put(o, "wcache_tensors %u\n", cur->used ? cur->plan.ntensors : 0);
	family(o, "wcache_resident_bytes", "gauge",
	       "Bytes of weights held, by memory: device (GPU pools; memfd pools on the host backend count as host) and host (also the sleep level 1 copy, and the one a wake is still freeing).");
	put(o, "wcache_resident_bytes{memory=\"device\"} %llu\n",
	    (unsigned long long)(host ? 0 : resident));
	put(o, "wcache_resident_bytes{memory=\"host\"} %llu\n",
	    (unsigned long long)((host ? resident : 0) +
				 model->life.host_bytes +
				 model->life.freeing_bytes));
	family(o, "wcache_version_bytes", "gauge",
	       "Bytes of each resident version's tensors.");
	for (int i = 0; i < WCD_VERSIONS; i++)
		if (model->ver[i].used)
			put(o, "wcache_version_bytes{version=\"%llu\"} %llu\n",
			    (unsigned long long)model->ver[i].number,
			    (unsigned long long)model->ver[i].plan.total_bytes);
	family(o, "wcache_version_load_seconds", "gauge",
	       "How long loading each resident version took (version 1: the start-up load; later ones: updates).");
	for (int i = 0; i < WCD_VERSIONS; i++)
		if (model->ver[i].used)
			put(o, "wcache_version_load_seconds{version=\"%llu\"} %.6f\n",
			    (unsigned long long)model->ver[i].number,
			    model->ver[i].load_seconds);
	family(o, "wcache_model_incomplete", "gauge",
	       "1 while the served version is incomplete: an in-place update session ended before its commit, and attaches are refused until a complete update.");
	put(o, "wcache_model_incomplete %d\n", push_incomplete(d) ? 1 : 0);
	family(o, "wcache_leases", "gauge",
	       "Leases held, by model version.");
	for (int i = 0; i < WCD_VERSIONS; i++)
		if (model->ver[i].used)
			put(o, "wcache_leases{version=\"%llu\"} %u\n",
			    (unsigned long long)model->ver[i].number,
			    model->ver[i].leases);
}

static void put_clients(struct out *o, struct wcd *d)
{
	unsigned leased = 0, hello = 0, other = 0, closing = 0, paused = 0;

	for (struct wcd_client *c = d->srv->clients; c; c = c->next) {
		paused += !c->closing && c->paused;
		if (c->closing)
			closing++;
		else if (c->nleases)
			leased++;
		else if (c->hello_ok)
			hello++;
		else
			other++;
	}
	family(o, "wcache_clients", "gauge",
	       "Connections by state: attached (holding a lease), hello (identity checked, no lease), connected (neither), closing.");
	put(o, "wcache_clients{state=\"attached\"} %u\n", leased);
	put(o, "wcache_clients{state=\"hello\"} %u\n", hello);
	put(o, "wcache_clients{state=\"connected\"} %u\n", other);
	put(o, "wcache_clients{state=\"closing\"} %u\n", closing);
	family(o, "wcache_clients_paused", "gauge",
	       "Connections whose engine has paused (it reads no pool until it resumes), so that an in-place update may rewrite the pools.");
	put(o, "wcache_clients_paused %u\n", paused);
}

static void put_requests(struct out *o, struct wcd *d)
{
	const struct wcd_metrics *m = &d->m;
	char name[32];

	family(o, "wcache_requests_total", "counter",
	       "Requests answered, by type and result (error: an ERROR reply).");
	for (unsigned t = 0; t <= WIRE_TYPE_MAX; t++) {
		if (!m->req_ok[t] && !m->req_err[t] && t != WIRE_ATTACH &&
		    t != WIRE_HELLO)
			continue;
		lower(name, sizeof(name), t ? wire_type_name(t) : "unknown");
		put(o, "wcache_requests_total{type=\"%s\",result=\"ok\"} %llu\n",
		    name, (unsigned long long)m->req_ok[t]);
		put(o, "wcache_requests_total{type=\"%s\",result=\"error\"} %llu\n",
		    name, (unsigned long long)m->req_err[t]);
	}
	family(o, "wcache_refusals_total", "counter",
	       "Requests refused, by reason (the ERROR code; mismatch: a HELLO whose identity differs).");
	for (unsigned e = 1; e <= WIRE_E_MAX; e++) {
		lower(name, sizeof(name), wire_errcode_name(e));
		put(o, "wcache_refusals_total{reason=\"%s\"} %llu\n", name,
		    (unsigned long long)m->refusals[e]);
	}
	family(o, "wcache_identity_mismatches_total", "counter",
	       "HELLOs whose identity differed from the daemon's.");
	put(o, "wcache_identity_mismatches_total %llu\n",
	    (unsigned long long)d->srv->mismatches);
	family(o, "wcache_attach_duration_seconds", "histogram",
	       "ATTACH requests: from the whole request received to the reply queued (the daemon's part of an engine's attach).");
	{
		uint64_t cum = 0;

		for (unsigned i = 0; i < METRICS_ATTACH_BUCKETS; i++) {
			cum += m->attach_bucket[i];
			put(o, "wcache_attach_duration_seconds_bucket{le=\"%g\"} %llu\n",
			    metrics_attach_le_s[i], (unsigned long long)cum);
		}
		cum += m->attach_bucket[METRICS_ATTACH_BUCKETS];
		put(o, "wcache_attach_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
		    (unsigned long long)cum);
		put(o, "wcache_attach_duration_seconds_sum %.9f\n",
		    clock_ns_secs(m->attach_ns_total));
		put(o, "wcache_attach_duration_seconds_count %llu\n",
		    (unsigned long long)m->attach_count);
	}
}

static void put_life(struct out *o, struct wcd *d)
{
	static const char *const kind[] = { "sleep", "wake", "update",
					     "push" };
	const struct wcd_metrics *m = &d->m;

	family(o, "wcache_lifecycle_total", "counter",
	       "Sleeps, wakes, updates and update sessions, by result.");
	for (int k = 0; k < METRICS_LIFE_KINDS; k++) {
		put(o, "wcache_lifecycle_total{op=\"%s\",result=\"ok\"} %llu\n",
		    kind[k], (unsigned long long)m->life[k].ok);
		put(o, "wcache_lifecycle_total{op=\"%s\",result=\"error\"} %llu\n",
		    kind[k], (unsigned long long)m->life[k].failed);
	}
	family(o, "wcache_lifecycle_last_seconds", "gauge",
	       "How long the last successful sleep (copy to host), wake (restore and hash check) or update (load) took.");
	for (int k = 0; k < METRICS_LIFE_KINDS; k++)
		put(o, "wcache_lifecycle_last_seconds{op=\"%s\"} %.6f\n",
		    kind[k], clock_ns_secs(m->life[k].last_ns));
	family(o, "wcache_lifecycle_last_bytes", "gauge",
	       "Bytes the last successful sleep copied, wake restored or update loaded.");
	for (int k = 0; k < METRICS_LIFE_KINDS; k++)
		put(o, "wcache_lifecycle_last_bytes{op=\"%s\"} %llu\n",
		    kind[k], (unsigned long long)m->life[k].last_bytes);
	family(o, "wcache_lifecycle_seconds_total", "counter",
	       "Seconds spent in successful sleeps, wakes and updates.");
	for (int k = 0; k < METRICS_LIFE_KINDS; k++)
		put(o, "wcache_lifecycle_seconds_total{op=\"%s\"} %.6f\n",
		    kind[k], clock_ns_secs(m->life[k].ns_total));
	family(o, "wcache_lifecycle_bytes_total", "counter",
	       "Bytes moved by successful sleeps, wakes and updates.");
	for (int k = 0; k < METRICS_LIFE_KINDS; k++)
		put(o, "wcache_lifecycle_bytes_total{op=\"%s\"} %llu\n",
		    kind[k], (unsigned long long)m->life[k].bytes_total);
}

static void put_http(struct out *o, struct wcd *d)
{
	const struct wcd_metrics *m = &d->m;

	family(o, "wcache_metrics_scrapes_total", "counter",
	       "Connections to this endpoint, by outcome: served (200), error (4xx/5xx answered), rejected (over the connection limit, every slot answering), evicted (closed before a whole request came, for a newer connection, at the limit), timeout (cut off by the deadline).");
	put(o, "wcache_metrics_scrapes_total{result=\"served\"} %llu\n",
	    (unsigned long long)m->http_served);
	put(o, "wcache_metrics_scrapes_total{result=\"error\"} %llu\n",
	    (unsigned long long)m->http_errors);
	put(o, "wcache_metrics_scrapes_total{result=\"rejected\"} %llu\n",
	    (unsigned long long)m->http_rejected);
	put(o, "wcache_metrics_scrapes_total{result=\"timeout\"} %llu\n",
	    (unsigned long long)m->http_timeouts);
	put(o, "wcache_metrics_scrapes_total{result=\"evicted\"} %llu\n",
	    (unsigned long long)m->http_evicted);
	family(o, "wcache_log_lines_suppressed_total", "counter",
	       "Log lines about malformed frames left out by the rate limit.");
	put(o, "wcache_log_lines_suppressed_total %llu\n",
	    (unsigned long long)m->malformed_log.suppressed_total);
}

struct proc_stat {
	unsigned long utime, stime;   /* clock ticks */
	unsigned long long start;     /* clock ticks after boot */
	unsigned long vsize;          /* bytes */
	long rss;                     /* pages */
};

/* /proc/self/stat's fields 14, 15 and 22 to 24 (proc(5)); 0 or -errno. */
static int read_proc_stat(struct proc_stat *ps)
{
	char buf[1024], *p;
	FILE *f = fopen("/proc/self/stat", "re");
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');   /* the command name may hold spaces */
	if (!p || sscanf(p + 1,
			 " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d %*d %llu %lu %ld",
			 &ps->utime, &ps->stime, &ps->start, &ps->vsize,
			 &ps->rss) != 5)
		return -EINVAL;
	return 0;
}

/* The boot time, seconds since the epoch (/proc/stat's btime); 0 unknown. */
static unsigned long long boot_time_s(void)
{
	unsigned long long bt = 0;
	char line[256];
	FILE *f = fopen("/proc/stat", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "btime %llu", &bt) == 1)
			break;
	fclose(f);
	return bt;
}

/* Descriptors open in this process (the directory's own left out); -1
 * when /proc/self/fd cannot be read. O(descriptors). */
static long open_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n - 1;
}

/* The process_* families of Prometheus' client libraries. What cannot be
 * read is left out (no sample rather than a wrong one). */
static void put_process(struct out *o)
{
	long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	unsigned long long boot = boot_time_s();
	struct proc_stat ps;
	struct rlimit rl;
	long fds = open_fds();

	if (ticks > 0 && page > 0 && !read_proc_stat(&ps)) {
		family(o, "process_cpu_seconds_total", "counter",
		       "Total user and system CPU time spent in seconds.");
		put(o, "process_cpu_seconds_total %.2f\n",
		    (double)(ps.utime + ps.stime) / (double)ticks);
		family(o, "process_resident_memory_bytes", "gauge",
		       "Resident memory size in bytes.");
		put(o, "process_resident_memory_bytes %lld\n",
		    (long long)ps.rss * page);
		family(o, "process_virtual_memory_bytes", "gauge",
		       "Virtual memory size in bytes.");
		put(o, "process_virtual_memory_bytes %lu\n", ps.vsize);
		if (boot) {
			family(o, "process_start_time_seconds", "gauge",
			       "Start time of the process since unix epoch in seconds.");
			put(o, "process_start_time_seconds %.2f\n",
			    (double)boot + (double)ps.start / (double)ticks);
		}
	}
	if (fds >= 0) {
		family(o, "process_open_fds", "gauge",
		       "Number of open file descriptors.");
		put(o, "process_open_fds %ld\n", fds);
	}
	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		family(o, "process_max_fds", "gauge",
		       "Maximum number of open file descriptors.");
		put(o, "process_max_fds %llu\n",
		    (unsigned long long)rl.rlim_cur);
	}
}

int metrics_render(struct wcd *d, char *buf, size_t cap)
{
	char labels[METRICS_LINE_MAX / 2];
	struct out o = { .buf = buf, .cap = cap, .labels = labels };

	rank_labels(d, labels, sizeof(labels));

	put_info(&o, d);
	put_versions(&o, d);
	put_clients(&o, d);
	put_requests(&o, d);
	put_life(&o, d);
	put_http(&o, d);
	put_process(&o);
	return o.full ? -ENOSPC : (int)o.len;
}
