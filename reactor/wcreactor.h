/* SPDX-License-Identifier: MIT */
/*
 * libwcreactor: one io_uring, one thread, no protocol, no CUDA.
 *
 * Every operation is a struct the caller owns, zeroes before its first use
 * (= { 0 }: rx_op_deadline's field is read at start), and keeps alive until
 * its callback has been called for the last time (a one-shot operation calls
 * back exactly once; a repeating one calls back with a final flag). The
 * io_uring user_data of every submission points at the operation's rx_op.
 *
 * Functions return 0 or a negative errno and never touch errno. Callbacks get
 * the kernel's result as it comes (bytes, an fd, or -errno); -ECANCELED means
 * the operation was cancelled by rx_cancel() or by closing the loop.
 *
 * Bounds: at most RX_FDS_MAX descriptors per message; the submission queue has
 * the size given to rx_loop_init (requests past it are flushed, then queued);
 * the completion queue is four times that.
 *
 * Threads: everything but rx_wake_post (and the work functions of a worker
 * pool, on the pool's threads) runs in the loop's thread. Callbacks
 * may start, restart and cancel operations, but must not call rx_run,
 * rx_run_once or rx_loop_close (the loop is not re-entrant: those return
 * -EBUSY from a callback; rx_loop_in_callback() says whether the thread is
 * in one).
 *
 * Driving the loop from below: code that is not a callback may wait for its
 * own operations by calling rx_run_once itself, deep inside its own work
 * (wcd's loader does, inside a lifecycle job that main() runs between turns
 * of rx_run). Every other operation's callback then runs nested in that
 * code's call. Such a callback may do what any callback may, and it may
 * stop the loop (the flag is read by the next rx_run); it must not free,
 * reuse or restart the operations, buffers or structs the waiting code
 * holds, nor start the same kind of work again (wcd's request callbacks
 * answer "busy" to a lifecycle request while a job runs). Code that drives
 * the loop asserts !rx_loop_in_callback() first.
 *
 * Invariants are checked with WC_ASSERT (proto/base/base.h: abort with file and
 * line in every build of the Makefile, out with -DNDEBUG): a completion for
 * an operation with nothing in flight, an operation ended twice.
 */
#ifndef WCREACTOR_H
#define WCREACTOR_H

#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RX_FDS_MAX 253 /* SCM_RIGHTS limit per message (SCM_MAX_FD) */

struct rx_loop;
struct rx_op;

enum rx_kind {
	RX_KIND_NONE,
	RX_KIND_ACCEPT,
	RX_KIND_RECV,
	RX_KIND_SEND,
	RX_KIND_READ,
	RX_KIND_POLL,
	RX_KIND_CHILD,
	RX_KIND_TIMER,
	RX_KIND_WAKE,
	RX_KIND_SIGNAL,
	RX_KIND_INTERNAL,
};

/* Embedded first in every operation; user_data points here (the low bits
 * tag the operation's internal submissions: its linked deadline, its poll). */
struct rx_op {
	struct rx_loop *loop;
	uint8_t kind;       /* enum rx_kind */
	uint8_t pending;    /* SQEs in flight that name this op */
	uint8_t flags;      /* internal */
	uint8_t cancelled;
	int32_t deadline_res;
	uint64_t deadline_ns; /* linked deadline, 0 for none (rx_op_deadline) */
	void *data;         /* the caller's */
	/* internal */
	int32_t res_held;          /* main result, held for its deadline's */
	uint32_t cflags_held;
	uint64_t deadline_at_ns;   /* absolute CLOCK_MONOTONIC, set at start */
	struct __kernel_timespec deadline_ts;
	struct rx_op *next, *prev; /* the loop's list of active operations */
};

struct rx_loop {
	struct io_uring ring;
	unsigned entries;
	unsigned active;    /* operations started and not yet finished */
	bool stop;
	bool closing;
	bool has_waitid;    /* kernel has IORING_OP_WAITID (6.7+) */
	bool has_fixed_bufs;
	bool coop_taskrun;  /* IORING_SETUP_COOP_TASKRUN was accepted */
	int iowq_bounded;   /* io-wq bounded workers asked, 0 = kernel's */
	uint64_t completions; /* total CQEs handled, for tests and metrics */
	/* internal */
	unsigned cq_entries;
	unsigned in_run;    /* nesting guard */
	unsigned unref;     /* active ops that keep no rx_run going (idle pools) */
	unsigned pools;     /* worker pools open on this loop */
	struct rx_op *ops;  /* active operations, for rx_loop_close */
};

/* --- the loop ------------------------------------------------------------ */

#define RX_LOOP_ENTRIES_DEFAULT 256

/* Sets up the ring (entries: SQ size, 0 for the default) and probes the
 * kernel's features. */
int rx_loop_init(struct rx_loop *loop, unsigned entries);
/* Cancels every pending operation, runs their callbacks with -ECANCELED,
 * and tears the ring down. Returns -EBUSY (and leaves the ring open) if some
 * operation could not be drained within 5 s, when called from a callback, or
 * while a worker pool is open (rx_pool_close it first); 0 when nothing is
 * left open. */
int rx_loop_close(struct rx_loop *loop);
/* Runs until rx_loop_stop() or until the loop is not alive (below). */
int rx_run(struct rx_loop *loop);
/* Whether some operation is active that keeps rx_run going: every active
 * operation does, but the wake-up of a worker pool with no job pending. An
 * engine that drives the loop itself tests this, not loop->active. */
bool rx_loop_alive(const struct rx_loop *loop);
/* Submits, waits up to timeout_ms for a completion (0: do not wait, -1: wait
 * forever), handles the whole batch. Returns the number of completions
 * handled, or -errno. */
int rx_run_once(struct rx_loop *loop, int timeout_ms);
void rx_loop_stop(struct rx_loop *loop);
/* Hands the requests queued so far to the kernel now rather than at the
 * loop's next turn (a reply sent before a slow step of the same
 * callback: a socket's send goes out inside this call when it can);
 * 0 or -errno. */
int rx_loop_submit(struct rx_loop *loop);
/* True while the thread runs one of loop's callbacks (rx_run_once would
 * return -EBUSY). */
bool rx_loop_in_callback(const struct rx_loop *loop);
/* A file descriptor that polls readable when completions are waiting, so an
 * engine can drive the loop from its own epoll/poll loop with
 * rx_run_once(0). */
int rx_loop_fd(const struct rx_loop *loop);
/* Registers caller buffers as fixed buffers (index = position in iov). */
int rx_loop_register_buffers(struct rx_loop *loop, const struct iovec *iov,
			     unsigned count);
int rx_loop_unregister_buffers(struct rx_loop *loop);
/* Bounds io-wq's workers (bounded, unbounded); 0 leaves one as it is. */
int rx_loop_set_iowq_workers(struct rx_loop *loop, unsigned bounded,
			     unsigned unbounded);

/* Asks the kernel to cancel op; its callback still runs, with -ECANCELED or
 * with the result it had already reached. Returns 0 or -ENOENT if idle. */
int rx_cancel(struct rx_op *op);
/* Gives the next start of op (read, recv, send, poll) a deadline: if the
 * whole operation (re-queued short reads and partial sends included) has not
 * completed ns after its start, it completes with -ETIME. Each submission
 * carries a linked IORING_OP_LINK_TIMEOUT to the same absolute time. */
void rx_op_deadline(struct rx_op *op, uint64_t ns);
bool rx_op_busy(const struct rx_op *op);

/* --- accept: multishot, re-armed when the kernel ends it ------------------ */

struct rx_accept;
/* fd >= 0: a new connection (close-on-exec, the callee owns it); < 0: an
 * error. final: the accept is over (stopped, cancelled, or a hard error).
 * ECONNABORTED, EINTR and EAGAIN come with final false and accepting goes
 * on. EMFILE, ENFILE, ENOBUFS and ENOMEM (out of descriptors or memory)
 * come with final false too: the accept pauses RX_ACCEPT_PAUSE_NS (re-arming
 * at once would spin), then accepts again, as often as it takes; the
 * callback may free descriptors meanwhile (close an idle connection). Any
 * other error is final. */
typedef void (*rx_accept_cb)(struct rx_accept *a, int fd, bool final);
#define RX_ACCEPT_PAUSE_NS (100 * 1000 * 1000)
struct rx_accept {
	struct rx_op op;
	int listen_fd;
	rx_accept_cb cb;
	bool stopping;
	bool paused;        /* waiting out a shortage (internal) */
	unsigned rearms;    /* times the kernel ended the multishot: re-armed */
	unsigned pauses;    /* shortages waited out */
	struct __kernel_timespec pause_ts; /* internal */
};
int rx_accept_start(struct rx_loop *loop, struct rx_accept *a, int listen_fd,
		    rx_accept_cb cb);
int rx_accept_stop(struct rx_accept *a);

/* --- stream sockets: recvmsg / sendmsg with SCM_RIGHTS -------------------- */

struct rx_recv;
/* res: bytes received (0: the peer closed), or -errno. Received descriptors
 * are in r->fds[0..nfds) and owned by the callee; descriptors past max_fds
 * are closed and r->fds_truncated is set. With max_fds 0 the receive is a
 * plain recv: the kernel closes any descriptors sent, and fds_truncated
 * stays false. */
typedef void (*rx_recv_cb)(struct rx_recv *r, int res);
struct rx_recv {
	struct rx_op op;
	int fd;
	void *buf;
	size_t len;
	size_t min;         /* re-queue until min bytes, EOF or an error */
	size_t done;
	unsigned max_fds;   /* <= RX_FDS_MAX */
	unsigned nfds;
	bool fds_truncated;
	int fds[RX_FDS_MAX];
	rx_recv_cb cb;
	/* internal */
	struct msghdr msg;
	struct iovec iov;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * RX_FDS_MAX)];
	} cmsg;
};
/* Receives into buf[0..len); completes once at least min bytes (1 if 0) have
 * arrived, the peer closed, or an error. A peer that closes after some but
 * fewer than min bytes (in the middle of a message) completes with
 * -ECONNRESET; r->done holds what did arrive. Received descriptors are
 * close-on-exec (MSG_CMSG_CLOEXEC). */
int rx_recv_start(struct rx_loop *loop, struct rx_recv *r, int fd, void *buf,
		  size_t len, size_t min, unsigned max_fds, rx_recv_cb cb);

struct rx_send;
/* res: bytes sent (always the whole message on success), or -errno; after an
 * error (or -ETIME) s->done says how much did go out. */
typedef void (*rx_send_cb)(struct rx_send *s, int res);
struct rx_send {
	struct rx_op op;
	int fd;
	const struct iovec *iov; /* the caller's, alive until the callback */
	unsigned iovcnt;
	size_t total;
	size_t done;
	const int *fds;
	unsigned nfds;      /* sent with the first byte; <= RX_FDS_MAX */
	rx_send_cb cb;
	/* internal: the unsent tail of iov */
	struct iovec cur[8];
	struct msghdr msg;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * RX_FDS_MAX)];
	} cmsg;
};
/* Sends the whole iov (partial sends are continued) with MSG_NOSIGNAL;
 * iovcnt <= 8. */
int rx_send_start(struct rx_loop *loop, struct rx_send *s, int fd,
		  const struct iovec *iov, unsigned iovcnt, const int *fds,
		  unsigned nfds, rx_send_cb cb);

/* --- positioned file reads ------------------------------------------------ */

/* IOSQE_ASYNC: straight to io-wq (page-cache copies off the loop thread) */
#define RX_READ_ASYNC  0x1
#define RX_READ_DIRECT 0x2 /* the fd is O_DIRECT: check alignment first */

struct rx_read;
/* res: bytes read (< len only at end of file), or -errno. For an O_DIRECT
 * read whose buffer, offset or length breaks the alignment, res is -EINVAL
 * and r->misaligned is set. */
typedef void (*rx_read_cb)(struct rx_read *r, int res);
struct rx_read {
	struct rx_op op;
	int fd;
	void *buf;
	size_t len;
	uint64_t off;
	size_t done;
	int buf_index;      /* fixed buffer index, or -1 */
	unsigned flags;     /* RX_READ_* */
	bool misaligned;
	rx_read_cb cb;
};
/* With RX_READ_DIRECT the buffer address, offset and length are checked
 * against the file's direct-I/O alignment (statx STATX_DIOALIGN, one syscall
 * per start; 512 where the kernel does not say) before anything is queued: a
 * misaligned read returns -EINVAL here with r->misaligned set and no callback.
 * An -EINVAL from the kernel on such a read also sets r->misaligned. */
int rx_read_start(struct rx_loop *loop, struct rx_read *r, int fd, void *buf,
		  size_t len, uint64_t off, int buf_index, unsigned flags,
		  rx_read_cb cb);

/* --- poll: one-shot readiness on any fd (inotify, a daemon's pidfd) ------- */

struct rx_poll;
typedef void (*rx_poll_cb)(struct rx_poll *p, int res); /* revents or -errno */
struct rx_poll {
	struct rx_op op;
	int fd;
	unsigned events;
	rx_poll_cb cb;
};
int rx_poll_start(struct rx_loop *loop, struct rx_poll *p, int fd,
		  unsigned events, rx_poll_cb cb);

/* --- children and pidfds -------------------------------------------------- */

struct rx_child;
/* Called once when the process has exited: c->exit_code >= 0 for a normal
 * exit, c->term_signal > 0 when killed by a signal; both -1 when the status
 * could not be collected (a process that is not our child and that its
 * parent reaped before we could read its zombie's /proc/PID/stat).
 * res is 0 or -errno (-ECANCELED when the watch was cancelled). */
typedef void (*rx_child_cb)(struct rx_child *c, int res);
struct rx_child {
	struct rx_op op;
	pid_t pid;
	int pidfd;          /* owned; closed by rx_child_close */
	int exit_code;
	int term_signal;
	bool exited;
	uint64_t exit_seen_ns; /* CLOCK_MONOTONIC when the loop saw the exit */
	rx_child_cb cb;
	siginfo_t info;     /* internal (waitid) */
};

struct rx_spawn_opts {
	const char *path;   /* executable; NULL: argv[0], searched in PATH */
	char *const *argv;
	char *const *envp;  /* NULL: inherit */
	int stdin_fd;       /* -1: /dev/null */
	int stdout_fd;      /* -1: inherit */
	int stderr_fd;      /* -1: inherit */
	bool new_session;   /* setsid() in the child */
	bool parent_death_sigterm; /* PR_SET_PDEATHSIG SIGTERM */
};
/* Spawns a child (clone3 with CLONE_PIDFD, or fork + pidfd_open) and starts
 * watching it. The child's exit is reported through cb. The child starts with
 * no signals blocked and every signal's disposition at its default. Waits
 * (briefly, like posix_spawn) until the child has exec'd, so that a failed
 * exec is returned here as -errno (the child is reaped, nothing is left open)
 * rather than as exit code 127. */
int rx_spawn(struct rx_loop *loop, struct rx_child *c,
	     const struct rx_spawn_opts *opts, rx_child_cb cb);
/* Watches an existing pid (opens a pidfd; the pid need not be a child). */
int rx_child_watch_pid(struct rx_loop *loop, struct rx_child *c, pid_t pid,
		       rx_child_cb cb);
/* Watches a pidfd the caller hands over (rx_child owns it from now on). */
int rx_child_watch_pidfd(struct rx_loop *loop, struct rx_child *c, int pidfd,
			 rx_child_cb cb);
/* Sends a signal through the pidfd (no pid-reuse race). */
int rx_child_kill(struct rx_child *c, int sig);
/* Closes the pidfd; the watch must have finished (or was never started). */
void rx_child_close(struct rx_child *c);
/* Whether the watched process has exited or is exiting (the kernel set
 * PF_EXITING: its exit can no longer be stopped and the pidfd will say so).
 * A process closes its files before its pidfd becomes readable, so a peer
 * that dies is seen hanging up first: this tells a death from a hang-up.
 * Costs a poll and one /proc/PID/stat read; pid reuse is checked through
 * the pidfd. */
bool rx_child_exiting(const struct rx_child *c);

/* --- timers ------------------------------------------------------------- */

struct rx_timer;
/* res: 0 when it fired, -ECANCELED when stopped */
typedef void (*rx_timer_cb)(struct rx_timer *t, int res);
struct rx_timer {
	struct rx_op op;
	struct __kernel_timespec ts;
	rx_timer_cb cb;
};
int rx_timer_start(struct rx_loop *loop, struct rx_timer *t, uint64_t ns,
		   rx_timer_cb cb);
int rx_timer_stop(struct rx_timer *t);

/* --- wake-ups from other threads ------------------------------------------ */

/* A node other threads push; it is handed to the callback in the loop's
 * thread. Nodes are caller-owned and intrusive (lock-free MPSC stack,
 * delivered in push order). */
struct rx_wake_node {
	struct rx_wake_node *next;
};
struct rx_wake;
typedef void (*rx_wake_cb)(struct rx_wake *w, struct rx_wake_node *node);
struct rx_wake {
	struct rx_op op;
	int efd;
	uint64_t counter;
	struct rx_wake_node *head; /* accessed with __atomic builtins only */
	rx_wake_cb cb;
	bool stopping;
};
int rx_wake_init(struct rx_loop *loop, struct rx_wake *w, rx_wake_cb cb);
/* Thread-safe and async-signal-safe; never blocks. */
void rx_wake_post(struct rx_wake *w, struct rx_wake_node *node);
/* Stops the watch; nodes posted and not yet delivered are delivered first,
 * then cb runs once more with node == NULL: the eventfd is closed and w may
 * be freed. Posting after rx_wake_close is a caller bug. */
int rx_wake_close(struct rx_wake *w);

/* --- a bounded worker pool: work off the loop, completions on it ----------
 *
 * libuv's uv_queue_work: a job's work function runs on one of the pool's
 * threads, then its after function runs on the loop's thread, delivered
 * through the pool's own rx_wake (one eventfd; the wake-up batching of
 * rx_wake_post). Use it for work that blocks or computes (hashing, a fill
 * worker that copies for a whole load), never for I/O the ring can do.
 *
 * Ownership: the pool and every rx_work are the caller's (zeroed before first
 * use, = { 0 }); a job's rx_work must stay alive and untouched from
 * rx_queue_work until its after function has been called. After may free or
 * queue it again (or queue other work).
 *
 * Threads: rx_pool_init, rx_queue_work, rx_cancel_work and rx_pool_close are
 * called on the loop's thread; work runs on a pool thread; after runs on the
 * loop's thread, from a callback of the loop (so it may do what any callback
 * may: start operations, queue and cancel work; not close the pool or drive
 * the loop). Threads start lazily, one whenever a job is queued while no
 * thread is idle, up to threads_max; they then stay until rx_pool_close.
 * They run with every signal blocked (signals go to the loop's signalfd).
 *
 * Bounds: at most threads_max (<= RX_POOL_THREADS_MAX) jobs run at once and
 * at most queue_max wait to start (rx_queue_work returns -EAGAIN beyond);
 * nothing is allocated per job. The order in which jobs start is the order
 * they were queued; the order in which they finish and their after functions
 * run is not promised.
 *
 * Liveness: while any job is pending (queued, running, or its after not yet
 * called) the pool keeps rx_run going, as an active operation does; an idle
 * pool does not (rx_loop_alive). */
#define RX_POOL_THREADS_MAX 64

struct rx_work;
struct rx_pool;
/* Runs on a pool thread; must not call the reactor (but rx_wake_post). */
typedef void (*rx_work_fn)(struct rx_work *w);
/* Runs on the loop's thread: status 0 after work ran, or -ECANCELED when the
 * job was cancelled (rx_cancel_work, rx_pool_close) before it started. */
typedef void (*rx_after_work_fn)(struct rx_work *w, int status);

struct rx_work {
	struct rx_wake_node node; /* internal: the completion's hand-over */
	void *data;               /* the caller's */
	struct rx_pool *pool;
	rx_work_fn work;
	rx_after_work_fn after;
	/* internal, under the pool's mutex */
	struct rx_work *next, *prev; /* the queue of jobs not yet started */
	uint8_t state;
	int status;
};

struct rx_pool {
	struct rx_loop *loop;
	unsigned threads_max;
	unsigned queue_max;
	unsigned pending;   /* jobs queued and not yet after'd (loop thread) */
	/* internal */
	struct rx_wake wake;
	bool reffed;        /* the wake counts for rx_run (pending > 0) */
	bool wake_closed;
	bool closing;       /* also read by the threads, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cond;  /* a job was queued, or closing */
	struct rx_work *head, *tail;
	unsigned queued;    /* jobs waiting to start */
	unsigned idle;      /* threads waiting for a job */
	unsigned threads;   /* threads started */
	pthread_t tids[RX_POOL_THREADS_MAX];
};

/* Sets the pool up on loop (no thread starts yet). threads_max: 1 to
 * RX_POOL_THREADS_MAX; queue_max: at least 1. Returns 0 or -errno (-EINVAL
 * for a bound out of range, -ESHUTDOWN when the loop is closing). */
int rx_pool_init(struct rx_pool *p, struct rx_loop *loop,
		 unsigned threads_max, unsigned queue_max);
/* Queues w: work(w) will run on a pool thread, then after(w, 0) on the
 * loop (after may be NULL). Starts a thread when none is idle and fewer than
 * threads_max run. Returns 0; -EAGAIN when queue_max jobs already wait to
 * start; -EBUSY when w is pending already; -EINVAL for a NULL work;
 * -ESHUTDOWN once rx_pool_close has begun; or a pthread_create error when
 * the pool has no thread at all and could not start one. */
int rx_queue_work(struct rx_pool *p, struct rx_work *w, rx_work_fn work,
		  rx_after_work_fn after);
/* Takes w out of the queue if it has not started: returns 0, and after(w,
 * -ECANCELED) comes later from the loop (never inside this call). -EBUSY:
 * w is running, done, or already cancelled (its after is still to come);
 * -ENOENT: w is not pending. */
int rx_cancel_work(struct rx_work *w);
/* Cancels every job that has not started, waits for the running ones to
 * return (a long-running job must be told to stop by its own means first),
 * joins the threads, and runs every after function still due -- with
 * -ECANCELED for the cancelled, 0 for the others -- on the loop's thread
 * before it returns: it drives the loop (rx_run_once) for that, so other
 * operations' callbacks may run inside it too. Must not be called from a
 * callback (asserted). rx_queue_work fails with -ESHUTDOWN from the first
 * moment of the close on, from the after functions too. p may be freed on
 * return. */
void rx_pool_close(struct rx_pool *p);

/* --- signals through signalfd --------------------------------------------- */

struct rx_signal;
typedef void (*rx_signal_cb)(struct rx_signal *s, int signo); /* or -errno */
struct rx_signal {
	struct rx_op op;
	int sfd;
	sigset_t mask;
	struct signalfd_siginfo_buf { unsigned char b[128]; } si;
	rx_signal_cb cb;
	bool stopping;
};
/* Blocks the signals in mask for the calling thread and delivers them to cb
 * until rx_signal_close (they stay blocked after it, so that a late signal
 * does not kill the process during shutdown). */
int rx_signal_start(struct rx_loop *loop, struct rx_signal *s,
		    const sigset_t *mask, rx_signal_cb cb);
int rx_signal_close(struct rx_signal *s);

/* --- time --------------------------------------------------------------- */

uint64_t rx_now_ns(void); /* CLOCK_MONOTONIC */

#ifdef __cplusplus
}
#endif
#endif
