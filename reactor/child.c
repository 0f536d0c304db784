// SPDX-License-Identifier: MIT
/*
 * Children and pidfds: spawn with a pidfd (clone3 CLONE_PIDFD, or fork +
 * pidfd_open on kernels before 5.3), and report a process's exit as an exit
 * code or a signal. Our own children are reaped by IORING_OP_WAITID where the
 * kernel has it (6.7+); otherwise, and for processes that are not our
 * children, the pidfd is polled and the status taken with waitid(P_PIDFD,
 * WNOHANG) -- which for a non-child fails with ECHILD: then the status is
 * read from the zombie's /proc/PID/stat while its parent has not reaped it,
 * else from the pidfd (PIDFD_INFO_EXIT, 6.15+), else it is unknown
 * (exit_code = term_signal = -1).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "compat.h"
#include "internal.h"

extern char **environ;

static int rx_child_arm(struct rx_child *c)
{
	struct io_uring_sqe *sqe = rx__op_sqe(&c->op);

	if (!sqe)
		return -EBUSY;
	if (c->op.loop->has_waitid && (c->op.flags & RX_OPF_OWNCHILD)) {
		memset(&c->info, 0, sizeof(c->info));
		rx_prep_waitid(sqe, P_PIDFD, (id_t)c->pidfd, &c->info, WEXITED);
		c->op.flags |= RX_OPF_WAITID;
	} else {
		io_uring_prep_poll_add(sqe, c->pidfd, POLLIN);
		c->op.flags &= ~RX_OPF_WAITID;
	}
	rx__op_arm(&c->op, sqe);
	return 0;
}

/* Starts watching c->pidfd. own: the process may be our child (try waitid
 * first). */
static int rx_child_watch(struct rx_loop *loop, struct rx_child *c, bool own,
			  rx_child_cb cb)
{
	int ret;

	c->exit_code = -1;
	c->term_signal = -1;
	c->exited = false;
	c->exit_seen_ns = 0;
	c->cb = cb;
	c->op.deadline_ns = 0;
	rx__op_begin(loop, &c->op, RX_KIND_CHILD);
	if (own)
		c->op.flags |= RX_OPF_OWNCHILD;
	ret = rx_child_arm(c);
	if (ret < 0)
		rx__op_end(&c->op);
	return ret;
}

static void rx_child_status(struct rx_child *c, const siginfo_t *si)
{
	if (si->si_code == CLD_EXITED) {
		c->exit_code = si->si_status;
		c->term_signal = 0;
	} else if (si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED) {
		c->exit_code = -1;
		c->term_signal = si->si_status;
	}
}

/* The pid of a pidfd from /proc/self/fdinfo: -1 once the process has been
 * reaped, 0 when unknown (an older kernel). */
static int pidfd_pid(int pidfd)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strstr(buf, "\nPid:");
	return p ? atoi(p + 5) : 0;
}

/* A process that is not our child has exited: while its parent has not
 * reaped it, it is a zombie whose /proc/PID/stat still holds the wait
 * status (field 52, exit_code). The pidfd is checked after the read: if it
 * still names a pid, the zombie read was ours (no pid reuse before a reap).
 * Costs two small /proc reads, once per exit; leaves -1/-1 if too late. */
static void rx_child_zombie_status(struct rx_child *c)
{
	char path[64], buf[1024], *p;
	int fd, field, status;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)c->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	p = strrchr(buf, ')');  /* the command may hold spaces and ')' */
	if (!p || p[1] != ' ' || p[2] != 'Z')
		return;
	/* p + 2 is field 3 (state); walk to field 52 */
	p += 2;
	for (field = 3; field < 52 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (!p || pidfd_pid(c->pidfd) != c->pid)
		return;
	status = atoi(p);
	if (WIFEXITED(status)) {
		c->exit_code = WEXITSTATUS(status);
		c->term_signal = 0;
	} else if (WIFSIGNALED(status)) {
		c->exit_code = -1;
		c->term_signal = WTERMSIG(status);
	}
}

/* The pidfd polled readable: collect the status if it is ours to collect.
 * Returns false when the process has not exited after all. */
static bool rx_child_collect(struct rx_child *c)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid((idtype_t)P_PIDFD, (id_t)c->pidfd, &si,
		   WEXITED | WNOHANG) < 0) {
		/* ECHILD: not our child; its zombie may still tell, else
		 * (its parent reaped it first) the pidfd where the kernel
		 * keeps the status */
		int status;

		rx_child_zombie_status(c);
		if (c->exit_code < 0 && c->term_signal < 0 &&
		    !rx_pidfd_exit_status(c->pidfd, &status)) {
			if (WIFEXITED(status)) {
				c->exit_code = WEXITSTATUS(status);
				c->term_signal = 0;
			} else if (WIFSIGNALED(status)) {
				c->term_signal = WTERMSIG(status);
			}
		}
		return true;
	}
	if (!si.si_pid)
		return false;
	rx_child_status(c, &si);
	return true;
}

void rx__child_cqe(struct rx_op *op, int res, unsigned cflags)
{
	struct rx_child *c = (struct rx_child *)op;
	bool stop = op->cancelled || op->loop->closing;

	if (op->flags & RX_OPF_WAITID) {
		if (res == -ECHILD && !stop) {
			/* not our child (or reaped by someone else) */
			op->flags &= ~RX_OPF_OWNCHILD;
			res = rx_child_arm(c);
			if (res < 0)
				goto finish;
			return;
		}
		if (res < 0)
			goto finish;
		rx_child_status(c, &c->info);
	} else {
		if (res < 0)
			goto finish;
		if (!rx_child_collect(c)) {
			res = stop ? -ECANCELED : rx_child_arm(c);
			if (res < 0)
				goto finish;
			return;
		}
	}
	c->exited = true;
	c->exit_seen_ns = rx_now_ns();
	res = 0;
finish:
	rx__op_end(op);
	c->cb(c, res);
}

/* Points target at fd in the child; dup2 onto itself would keep O_CLOEXEC. */
static void rx_child_fd(int fd, int target)
{
	if (fd == target)
		fcntl(fd, F_SETFD, 0);
	else
		dup2(fd, target);
}

/* In the child, between clone and exec: only async-signal-safe calls (the
 * parent may have other threads holding locks). Reports a failure's errno
 * through the close-on-exec pipe errfd. */
static void rx_child_exec(const struct rx_spawn_opts *o, int stdin_fd,
			  int errfd, pid_t parent)
{
	char *const *envp = o->envp ? o->envp : environ;
	struct sigaction dfl;
	sigset_t none;
	int err, sig;

	/* a clean slate: ignored signals would stay ignored across exec */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (o->new_session)
		setsid();
	if (o->parent_death_sigterm) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
	}
	rx_child_fd(stdin_fd, 0);
	if (o->stdout_fd >= 0)
		rx_child_fd(o->stdout_fd, 1);
	if (o->stderr_fd >= 0)
		rx_child_fd(o->stderr_fd, 2);
	if (o->path)
		execve(o->path, o->argv, envp);
	else
		execvpe(o->argv[0], o->argv, envp);
	err = errno;
	if (write(errfd, &err, sizeof(err)) < 0)
		_exit(126);
	_exit(127);
}

/* Costs: one clone (a copy of the page tables, like fork), a pipe and, for a
 * child without stdin, an open of /dev/null; blocks until the child has
 * exec'd (or failed to). */
int rx_spawn(struct rx_loop *loop, struct rx_child *c,
	     const struct rx_spawn_opts *opts, rx_child_cb cb)
{
	pid_t parent = getpid(), pid;
	int errp[2], stdin_fd, err = 0, pidfd = -1, ret;
	siginfo_t si;
	ssize_t n;

	if (loop->closing)
		return -ESHUTDOWN;
	if (!opts || !opts->argv || !opts->argv[0] || !cb)
		return -EINVAL;
	stdin_fd = opts->stdin_fd;
	if (stdin_fd < 0) {
		stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (stdin_fd < 0)
			return -errno;
	}
	if (pipe2(errp, O_CLOEXEC) < 0) {
		ret = -errno;
		goto out_close_stdin;
	}
	pid = rx_clone_pidfd(&pidfd);
	if (pid == -ENOSYS) {
		pid = fork();
		if (pid < 0)
			pid = -errno;
	}
	if (pid == 0) {
		close(errp[0]);
		rx_child_exec(opts, stdin_fd, errp[1], parent);
	}
	close(errp[1]);
	if (pid < 0) {
		ret = pid;
		goto out_close_pipe;
	}
	if (pidfd < 0) { /* the fork fallback: the zombie keeps the pid ours */
		pidfd = rx_pidfd_open(pid);
		if (pidfd < 0) {
			ret = pidfd;
			goto out_close_pipe;
		}
	}
	do
		n = read(errp[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(err)) {
		/* exec failed: reap the child, report its errno */
		while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si,
			      WEXITED) < 0 && errno == EINTR)
			;
		close(pidfd);
		ret = -err;
		goto out_close_pipe;
	}
	c->pid = pid;
	c->pidfd = pidfd;
	ret = rx_child_watch(loop, c, true, cb);
	if (ret < 0) {
		/* the child runs on; the caller can only learn its pid */
		close(pidfd);
		c->pidfd = -1;
	}
out_close_pipe:
	close(errp[0]);
out_close_stdin:
	if (opts->stdin_fd < 0)
		close(stdin_fd);
	return ret;
}

int rx_child_watch_pid(struct rx_loop *loop, struct rx_child *c, pid_t pid,
		       rx_child_cb cb)
{
	int pidfd, ret;

	if (loop->closing)
		return -ESHUTDOWN;
	if (pid <= 0 || !cb)
		return -EINVAL;
	pidfd = rx_pidfd_open(pid);
	if (pidfd < 0)
		return pidfd;
	c->pid = pid;
	c->pidfd = pidfd;
	ret = rx_child_watch(loop, c, true, cb);
	if (ret < 0) {
		close(pidfd);
		c->pidfd = -1;
	}
	return ret;
}

int rx_child_watch_pidfd(struct rx_loop *loop, struct rx_child *c, int pidfd,
			 rx_child_cb cb)
{
	if (loop->closing)
		return -ESHUTDOWN;
	if (pidfd < 0 || !cb)
		return -EINVAL;
	c->pid = 0; /* unknown: see /proc/self/fdinfo/<pidfd> */
	c->pidfd = pidfd;
	return rx_child_watch(loop, c, true, cb);
}

int rx_child_kill(struct rx_child *c, int sig)
{
	if (c->pidfd < 0)
		return -EBADF;
	return rx_pidfd_send_signal(c->pidfd, sig);
}

/* /proc/PID/stat's field 9, flags: the kernel's PF_EXITING (0x4) is set
 * at the start of do_exit, before the files are closed. */
#define RX_PF_EXITING 0x00000004u

bool rx_child_exiting(const struct rx_child *c)
{
	struct pollfd p = { .fd = c->pidfd, .events = POLLIN };
	char path[64], buf[1024], *q;
	unsigned long flags;
	int fd, field;
	ssize_t n;

	if (c->pidfd < 0)
		return false;
	if (poll(&p, 1, 0) == 1)
		return true;    /* exited */
	if (c->pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)c->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return poll(&p, 1, 0) == 1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	q = strrchr(buf, ')');  /* the command may hold spaces and ')' */
	if (!q || q[1] != ' ')
		return false;
	q += 2;                 /* field 3, the state */
	if (*q == 'Z' || *q == 'X')
		return pidfd_pid(c->pidfd) == c->pid;
	for (field = 3; field < 9 && q; field++) {
		q = strchr(q, ' ');
		if (q)
			q++;
	}
	if (!q)
		return false;
	flags = strtoul(q, NULL, 10);
	return (flags & RX_PF_EXITING) && pidfd_pid(c->pidfd) == c->pid;
}

/* Closing the fd under a watch in flight would be safe for the kernel (the
 * request holds its own reference) but is a caller bug; it closes anyway. */
void rx_child_close(struct rx_child *c)
{
	if (c->pidfd >= 0)
		close(c->pidfd);
	c->pidfd = -1;
}
