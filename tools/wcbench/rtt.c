/* SPDX-License-Identifier: MIT */
/*
 * wcbench rtt: PING round trips against a wcd, timed per request.
 *
 * Two clients, chosen so that the client is not what gets measured:
 *   - blocking (the default for one connection at depth 1): write the frame,
 *     read the reply; two system calls per round trip, the same as the
 *     socketpair floor (bench/host/pingpong_floor.c), so the difference between
 *     the two is the daemon.
 *   - uring (the default otherwise): every connection in one io_uring, one
 *     recv always armed per connection, sends queued as replies arrive, the
 *     whole batch submitted with one io_uring_enter. Per request the client
 *     costs a fraction of a system call, so with many connections the
 *     daemon's loop is the bottleneck, not ours (--json reports the client's
 *     CPU use so that this can be checked).
 * Each connection keeps `depth` requests in flight; ids carry the connection
 * and a sequence number, and replies must come back in order. The first
 * `warmup` replies are not counted (nor timed for requests/s).
 *
 * Bounds: RTT_CONNS_MAX connections, RTT_DEPTH_MAX depth, WIRE_PING_MAX
 * payload bytes; all buffers are allocated before the timed loop.
 */
#include <errno.h>
#include <getopt.h>
#include <liburing.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "wcbench.h"
#include "wire.h"

#define RTT_CONNS_MAX 4096
#define RTT_DEPTH_MAX 256
#define RTT_N_MAX (1ull << 32)
#define RTT_RBUF (64u << 10)

struct rtt_opts {
	char sock[4096];
	uint64_t n;
	uint64_t warmup;
	unsigned conns;
	unsigned depth;
	unsigned payload;
	bool uring;
	int server_pid;
	double timeout_s;       /* no reply for this long: give up */
	int cpu;                /* pin the client to this CPU, or -1 */
};

struct rtt_state {
	const struct rtt_opts *o;
	const struct wb_out *out;
	struct wb_series *lat;
	uint64_t issued;        /* requests queued, all connections */
	uint64_t done;          /* replies counted, warm-up included */
	uint64_t total;         /* n + warmup */
	uint64_t t_start;       /* when the warm-up ended */
	uint64_t t_end;
	size_t flen;            /* request frame bytes */
	uint8_t frame[WIRE_HDR_LEN + WIRE_PING_MAX];
};

struct rtt_conn {
	int fd;
	unsigned idx;
	unsigned inflight;
	uint64_t seq_next;      /* next request's sequence number */
	uint64_t seq_reply;     /* sequence number the next reply must carry */
	uint64_t *sent_ns;      /* [depth], by sequence number */
	uint8_t *rbuf;          /* RTT_RBUF */
	size_t rlen;
	uint8_t *sbuf;          /* 2 * depth frames */
	size_t s_sent;          /* bytes of sbuf the kernel has taken */
	size_t s_len;           /* bytes queued */
	bool send_busy;
};

static uint64_t rtt_id(unsigned conn, uint64_t seq)
{
	return ((uint64_t)conn << 40) | seq;
}

/* Writes the PING frame for (conn, seq) into dst; its payload bytes are the
 * same for every request. */
static void rtt_frame(struct rtt_state *st, void *dst, unsigned conn,
		      uint64_t seq)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC, .version = WIRE_VERSION, .type = WIRE_PING,
		.flags = 0, .len = st->o->payload, .id = rtt_id(conn, seq),
	};

	memcpy(dst, st->frame, st->flen);
	wire_hdr_encode(&h, dst);
}

/* Checks one reply frame (header + payload in p[0..len)) against what conn
 * expects; dies on anything but our PONG. Returns the frame's length, or 0
 * when p does not yet hold a whole frame. */
static size_t rtt_reply(struct rtt_state *st, struct rtt_conn *c,
			const uint8_t *p, size_t len, uint64_t now)
{
	char err[BASE_ERR_LEN];
	struct wire_hdr h;
	struct wire_error e;
	int rc;

	if (len < WIRE_HDR_LEN)
		return 0;
	rc = wire_hdr_decode(p, len, &h, err);
	if (rc < 0)
		die("rtt: connection %u: bad reply header: %s", c->idx,
		    err);
	if (len < WIRE_HDR_LEN + (size_t)h.len)
		return 0;
	if (h.type == WIRE_NOTICE)
		return WIRE_HDR_LEN + h.len;
	if (h.type == WIRE_ERROR) {
		if (wire_error_get(p + WIRE_HDR_LEN, h.len, &e, err) < 0)
			die("rtt: undecodable ERROR reply: %s", err);
		die("rtt: the daemon answered PING with %s: %s",
		    wire_errcode_name(e.code), e.msg);
	}
	if (h.type != WIRE_PING || !(h.flags & WIRE_F_REPLY) ||
	    h.id != rtt_id(c->idx, c->seq_reply) || h.len != st->o->payload)
		die("rtt: connection %u: expected the PONG of request "
		    "%llu (%u payload bytes), got %s id %llx with %u bytes",
		    c->idx, (unsigned long long)c->seq_reply, st->o->payload,
		    wire_type_name(h.type), (unsigned long long)h.id, h.len);
	if (st->done >= st->o->warmup)
		wb_series_push(st->lat, now - c->sent_ns[c->seq_reply %
							 st->o->depth]);
	c->seq_reply++;
	c->inflight--;
	if (++st->done == st->o->warmup)
		st->t_start = now;
	return WIRE_HDR_LEN + h.len;
}

/* --- blocking client: one connection, depth 1 ----------------------------- */

static void rtt_blocking(struct rtt_state *st, struct rtt_conn *c)
{
	uint8_t *buf = c->rbuf;

	st->t_start = clock_ns();
	while (st->done < st->total) {
		uint64_t t0 = clock_ns();
		size_t have = 0, used;
		ssize_t n;

		rtt_frame(st, c->sbuf, 0, c->seq_next);
		c->sent_ns[0] = t0;
		c->seq_next++;
		c->inflight++;
		n = write(c->fd, c->sbuf, st->flen);
		if (n != (ssize_t)st->flen)
			die("rtt: write to the daemon failed: %s",
			    n < 0 ? strerror(errno) : "short write");
		do {
			n = read(c->fd, buf + have, RTT_RBUF - have);
			if (n < 0 && errno == EAGAIN)
				die("rtt: no reply from the daemon for "
				    "%g s; is it stuck? (--timeout)",
				    st->o->timeout_s);
			if (n <= 0)
				die("rtt: read from the daemon failed: "
				    "%s", n < 0 ? strerror(errno) :
				    "it closed the connection");
			have += (size_t)n;
			used = rtt_reply(st, c, buf, have, clock_ns());
		} while (!used);
		if (used != have)
			die("rtt: %zu unexpected bytes after a PONG",
			    have - used);
		if ((st->done & 4095) == 0)
			wb_progress(st->out, "requests", st->done, st->total);
	}
	st->t_end = clock_ns();
}

/* --- io_uring client ------------------------------------------------------ */

#define UD_SEND 1ull

static void ur_send(struct io_uring *ring, struct rtt_conn *c)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	io_uring_prep_send(sqe, c->fd, c->sbuf + c->s_sent,
			   c->s_len - c->s_sent, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, ((uint64_t)c->idx << 1) | UD_SEND);
	c->send_busy = true;
}

static void ur_recv(struct io_uring *ring, struct rtt_conn *c)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	io_uring_prep_recv(sqe, c->fd, c->rbuf + c->rlen, RTT_RBUF - c->rlen, 0);
	io_uring_sqe_set_data64(sqe, (uint64_t)c->idx << 1);
}

/* Queues requests on c until depth are in flight, the run is issued, or
 * sbuf (2 x depth frames) is full behind a busy send; the send's completion
 * calls this again. */
static void ur_fill(struct rtt_state *st, struct rtt_conn *c, uint64_t now)
{
	if (!c->send_busy && c->s_sent) {
		memmove(c->sbuf, c->sbuf + c->s_sent, c->s_len - c->s_sent);
		c->s_len -= c->s_sent;
		c->s_sent = 0;
	}
	while (c->inflight < st->o->depth && st->issued < st->total &&
	       c->s_len + st->flen <= 2 * (size_t)st->o->depth * st->flen) {
		rtt_frame(st, c->sbuf + c->s_len, c->idx, c->seq_next);
		c->s_len += st->flen;
		c->sent_ns[c->seq_next % st->o->depth] = now;
		c->seq_next++;
		c->inflight++;
		st->issued++;
	}
}

static void rtt_uring(struct rtt_state *st, struct rtt_conn *cs)
{
	const struct rtt_opts *o = st->o;
	struct io_uring_params p = { .flags = IORING_SETUP_SINGLE_ISSUER |
					       IORING_SETUP_DEFER_TASKRUN };
	unsigned entries = 2 * o->conns + 8;
	struct __kernel_timespec ts = {
		.tv_sec = (long long)o->timeout_s,
		.tv_nsec = (long long)((o->timeout_s - (long long)o->timeout_s) * 1e9),
	};
	struct io_uring ring;
	int rc;

	if (entries > 32768)
		entries = 32768;
	rc = io_uring_queue_init_params(entries, &ring, &p);
	if (rc == -EINVAL) {
		memset(&p, 0, sizeof(p));
		rc = io_uring_queue_init_params(entries, &ring, &p);
	}
	if (rc < 0)
		die("rtt: io_uring_queue_init failed: %s; try "
		    "--client blocking", strerror(-rc));
	if (!o->warmup)
		st->t_start = clock_ns();
	for (unsigned i = 0; i < o->conns; i++) {
		ur_fill(st, &cs[i], clock_ns());
		if (cs[i].s_len)
			ur_send(&ring, &cs[i]);
		ur_recv(&ring, &cs[i]);
	}
	while (st->done < st->total) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		rc = io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts, NULL);
		if (rc == -ETIME)
			die("rtt: no reply from the daemon for %g s "
			    "(%llu of %llu done); is it stuck? (--timeout)",
			    o->timeout_s, (unsigned long long)st->done,
			    (unsigned long long)st->total);
		if (rc < 0 && rc != -EINTR)
			die("rtt: io_uring_submit_and_wait: %s",
			    strerror(-rc));
		io_uring_for_each_cqe(&ring, head, cqe) {
			uint64_t ud = io_uring_cqe_get_data64(cqe);
			struct rtt_conn *c = &cs[ud >> 1];
			uint64_t now = clock_ns();
			size_t off = 0, used;

			seen++;
			if (cqe->res <= 0)
				die("rtt: connection %u: %s failed: %s",
				    c->idx, ud & UD_SEND ? "send" : "recv",
				    cqe->res ? strerror(-cqe->res) :
				    "the daemon closed the connection");
			if (ud & UD_SEND) {
				c->s_sent += (size_t)cqe->res;
				c->send_busy = false;
				ur_fill(st, c, now);
			} else {
				c->rlen += (size_t)cqe->res;
				while ((used = rtt_reply(st, c, c->rbuf + off,
							 c->rlen - off, now)))
					off += used;
				memmove(c->rbuf, c->rbuf + off, c->rlen - off);
				c->rlen -= off;
				if (c->rlen == RTT_RBUF)
					die("rtt: a reply frame larger "
					    "than %u bytes", RTT_RBUF);
				ur_fill(st, c, now);
				if (c->inflight || st->done < st->total)
					ur_recv(&ring, c);
			}
			if (!c->send_busy && c->s_len > c->s_sent)
				ur_send(&ring, c);
		}
		io_uring_cq_advance(&ring, seen);
		wb_progress(st->out, "requests", st->done, st->total);
	}
	st->t_end = clock_ns();
	io_uring_queue_exit(&ring);
}

/* --- the command ---------------------------------------------------------- */

/* utime + stime of pid (0: ourselves) in nanoseconds, from /proc; 0 on
 * failure. */
static uint64_t cpu_ns(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), pid ? "/proc/%d/stat" : "/proc/self/stat",
		 pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			 "%lu %lu", &ut, &st) != 2 || hz <= 0)
		return 0;
	return (uint64_t)(ut + st) * (1000000000ull / (uint64_t)hz);
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: wcbench rtt [--socket PATH | --runtime-dir DIR --device D] [options]\n\n"
"Times PING round trips to a running wcd: p50, p90, p99, p99.9, max and\n"
"requests per second over all connections.\n\n"
WB_HELP_SOCKET
"  --device D             host, host:NAME, host-NAME, GPU-<uuid> (default host)\n"
"  -n, --requests N       timed requests in all (default 100k; k, m suffixes)\n"
"  -c, --connections N    concurrent connections (default 1, at most %d)\n"
"  -d, --depth N          requests in flight per connection (default 1)\n"
"  --payload BYTES        PING payload, echoed (default 0, at most %d)\n"
"  --warmup N             untimed replies first (default 1000)\n"
"  --client KIND          blocking (one connection, depth 1) or uring;\n"
"                         default: blocking when it applies, else uring\n"
"  --timeout S            give up when no reply comes for S s (default 10;\n"
"                         decimals allowed)\n"
"  --cpu N                pin the client to CPU N (pair it with a daemon\n"
"                         pinned with taskset: same or another CPU)\n"
"  --server-pid PID       also report that process's CPU use and VmRSS\n"
"                         before and after the run (the daemon's pid)\n"
WB_HELP_OUT
"\n"
"Examples:\n"
"  wcbench rtt --device host:demo --runtime-dir DIR -n 100k --cpu 0\n"
"  wcbench rtt --socket S -n 1m -c 64 -d 1 --server-pid PID --json\n"
"\n"
"Exit status: 0 measured, 1 a failure (the daemon, a bound, a bad value),\n"
"2 usage.\n", RTT_CONNS_MAX, WIRE_PING_MAX);
}

/* rtt's own options, into ctx: the options, and --client's word until
 * rtt_parse checks it against them. */
struct rtt_parsed {
	struct rtt_opts *o;
	const char *client;
};

static bool rtt_opt(void *ctx, int c, const char *arg)
{
	struct rtt_parsed *p = ctx;
	struct rtt_opts *o = p->o;

	switch (c) {
	case 'n':
		o->n = wb_parse_count("--requests", arg, 1, RTT_N_MAX);
		return true;
	case 'c':
		o->conns = (unsigned)wb_parse_count("--connections", arg, 1,
						    RTT_CONNS_MAX);
		return true;
	case 'd':
		o->depth = (unsigned)wb_parse_count("--depth", arg, 1,
						    RTT_DEPTH_MAX);
		return true;
	case 'p':
		o->payload = (unsigned)wb_parse_count("--payload", arg, 0,
						      WIRE_PING_MAX);
		return true;
	case 'w':
		o->warmup = wb_parse_count("--warmup", arg, 0, RTT_N_MAX);
		return true;
	case 'k':
		p->client = arg;
		return true;
	case 'C':
		o->cpu = (int)wb_parse_count("--cpu", arg, 0, CPU_SETSIZE - 1);
		return true;
	case 't':
		o->timeout_s = wb_parse_double("--timeout", arg, 0.001, 3600);
		return true;
	case 'P':
		o->server_pid = (int)wb_parse_count("--server-pid", arg, 1,
						    1u << 22);
		return true;
	}
	return false;
}

static const struct option rtt_longopts[] = {
	{ "requests", required_argument, NULL, 'n' },
	{ "connections", required_argument, NULL, 'c' },
	{ "depth", required_argument, NULL, 'd' },
	{ "payload", required_argument, NULL, 'p' },
	{ "warmup", required_argument, NULL, 'w' },
	{ "client", required_argument, NULL, 'k' },
	{ "server-pid", required_argument, NULL, 'P' },
	{ "timeout", required_argument, NULL, 't' },
	{ "cpu", required_argument, NULL, 'C' },
	{ NULL, 0, NULL, 0 },
};

static const struct wb_cmd rtt_cmd = {
	"wcbench rtt", WB_TAKES_TARGET, "n:c:d:", rtt_longopts, usage,
	rtt_opt,
};

static void rtt_parse(int argc, char **argv, struct rtt_opts *o,
		      struct wb_out *out)
{
	struct rtt_parsed p = { .o = o };
	const char *client;
	struct wb_args a;

	wb_parse(argc, argv, &rtt_cmd, &p, &a);
	*out = a.out;
	client = p.client;
	o->uring = o->conns > 1 || o->depth > 1;
	if (client && !strcmp(client, "uring"))
		o->uring = true;
	else if (client && !strcmp(client, "blocking")) {
		if (o->conns > 1 || o->depth > 1)
			die("rtt: --client blocking drives one "
			    "connection at depth 1; drop -c/-d or use --client "
			    "uring");
		o->uring = false;
	} else if (client) {
		die("rtt: --client '%s' is not blocking or uring",
		    client);
	}
	wb_socket_path(o->sock, sizeof(o->sock), a.socket, a.runtime_dir,
		       a.device);
}

int wb_rtt(int argc, char **argv)
{
	struct rtt_opts o = { .n = 100000, .warmup = 1000, .conns = 1,
			      .depth = 1, .timeout_s = 10, .cpu = -1 };
	struct wb_out out = { 0 };
	struct rtt_state st = { .o = &o, .out = &out };
	struct rtt_conn *cs;
	struct wb_report r;
	uint64_t cpu0, cpu1, scpu0 = 0, scpu1 = 0;
	long rss0 = -1, rss1 = -1;
	char cpu_note[24] = "";
	double secs;
	int rc;

	rtt_parse(argc, argv, &o, &out);
	if (o.cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(o.cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set) < 0)
			die("rtt: --cpu %d: cannot pin the client there: %s",
			    o.cpu, strerror(errno));
	}
	st.total = o.n + o.warmup;
	st.flen = WIRE_HDR_LEN + o.payload;
	memset(st.frame + WIRE_HDR_LEN, 0xa5, o.payload);
	cs = calloc(o.conns, sizeof(*cs));
	if (!cs)
		die("rtt: no memory for %u connections", o.conns);
	for (unsigned i = 0; i < o.conns; i++) {
		struct rtt_conn *c = &cs[i];

		c->idx = i;
		c->fd = wb_connect(o.sock);
		if (c->fd < 0)
			die("rtt: cannot connect to %s: %s; is wcd "
			    "running there (wcctl status)?", o.sock,
			    strerror(-c->fd));
		struct timeval tv = {
			.tv_sec = (time_t)o.timeout_s,
			.tv_usec = (suseconds_t)((o.timeout_s -
						  (time_t)o.timeout_s) * 1e6),
		};

		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		c->sent_ns = calloc(o.depth, sizeof(*c->sent_ns));
		c->rbuf = malloc(RTT_RBUF);
		c->sbuf = malloc(2 * (size_t)o.depth * st.flen);
		if (!c->sent_ns || !c->rbuf || !c->sbuf)
			die("rtt: no memory for connection %u", i);
	}
	if (o.cpu >= 0)
		snprintf(cpu_note, sizeof(cpu_note), " on CPU %d", o.cpu);
	wb_report_init(&r, "rtt");
	snprintf(r.params, sizeof(r.params), "%llu PINGs (+%llu warm-up), %u "
		 "connection%s, depth %u, payload %u B, %s client%s, %.200s",
		 (unsigned long long)o.n, (unsigned long long)o.warmup, o.conns,
		 o.conns == 1 ? "" : "s", o.depth, o.payload,
		 o.uring ? "io_uring" : "blocking", cpu_note, o.sock);
	st.lat = wb_series_add(&r, "ping", o.n);

	if (o.server_pid) {
		rss0 = wb_rss_kib(o.server_pid);
		scpu0 = cpu_ns(o.server_pid);
	}
	cpu0 = cpu_ns(0);
	if (o.uring)
		rtt_uring(&st, cs);
	else
		rtt_blocking(&st, cs);
	wb_progress_end(&out);
	cpu1 = cpu_ns(0);
	if (o.server_pid) {
		scpu1 = cpu_ns(o.server_pid);
		rss1 = wb_rss_kib(o.server_pid);
	}
	secs = (double)(st.t_end - st.t_start) / 1e9;
	wb_metric_add(&r, "requests_per_s", secs > 0 ? (double)o.n / secs : 0,
		      "1/s");
	wb_metric_add(&r, "seconds", secs, "s");
	wb_metric_add(&r, "client_cpu_percent",
		      secs > 0 ? (double)(cpu1 - cpu0) / 1e7 / secs : 0, "%");
	if (o.server_pid) {
		wb_metric_add(&r, "server_cpu_percent", secs > 0 ?
			      (double)(scpu1 - scpu0) / 1e7 / secs : 0, "%");
		wb_metric_add(&r, "server_rss_before_kib", (double)rss0, "KiB");
		wb_metric_add(&r, "server_rss_after_kib", (double)rss1, "KiB");
	}
	rc = wb_report_emit(&r, &out);
	wb_report_free(&r);
	for (unsigned i = 0; i < o.conns; i++) {
		close(cs[i].fd);
		free(cs[i].sent_ns);
		free(cs[i].rbuf);
		free(cs[i].sbuf);
	}
	free(cs);
	return rc;
}
