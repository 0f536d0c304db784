/* SPDX-License-Identifier: MIT */
/*
 * Every liburing-2.3 shim and kernel-feature probe of the reactor, in one
 * place. Debian 12 ships liburing 2.3, which predates IORING_OP_WAITID (Linux
 * 6.7) and io_uring_prep_waitid; glibc 2.36 has no clone3 or pidfd wrappers
 * that return a pidfd. Nothing here allocates or blocks.
 */
#ifndef RX_COMPAT_H
#define RX_COMPAT_H

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* IORING_OP_WAITID is opcode 50 in the kernel's uapi (6.7+). */
#define RX_IORING_OP_WAITID 50

#ifndef IORING_FEAT_CQE_SKIP
#define IORING_FEAT_CQE_SKIP (1U << 11)
#endif
#ifndef IORING_SETUP_COOP_TASKRUN
#define IORING_SETUP_COOP_TASKRUN (1U << 8)
#endif
#ifndef IORING_SETUP_TASKRUN_FLAG
#define IORING_SETUP_TASKRUN_FLAG (1U << 9)
#endif
#ifndef IORING_SETUP_SUBMIT_ALL
#define IORING_SETUP_SUBMIT_ALL (1U << 7)
#endif

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef STATX_DIOALIGN
#define STATX_DIOALIGN 0x00002000U
#endif

/* io_uring_prep_waitid from liburing 2.5: the same SQE layout (id in fd,
 * idtype in len, options in file_index, the siginfo pointer in addr2). */
static inline void rx_prep_waitid(struct io_uring_sqe *sqe, idtype_t idtype,
				  id_t id, siginfo_t *infop, int options)
{
	io_uring_prep_rw(RX_IORING_OP_WAITID, sqe, (int)id, NULL,
			 (unsigned)idtype, 0);
	sqe->file_index = (unsigned)options;
	sqe->addr2 = (unsigned long)infop;
}

/* Whether the running kernel supports opcode op on ring (io_uring_get_probe;
 * false when probing itself is unsupported). */
static inline bool rx_probe_op(struct io_uring *ring, int op)
{
	struct io_uring_probe *p = io_uring_get_probe_ring(ring);
	bool ok;

	if (!p)
		return false;
	ok = io_uring_opcode_supported(p, op);
	io_uring_free_probe(p);
	return ok;
}

/* Sets up ring with the flags we want, dropping the ones an older kernel
 * refuses (-EINVAL): COOP_TASKRUN (5.19; with TASKRUN_FLAG so that liburing
 * enters the kernel when task work waits), then SUBMIT_ALL (5.18). The CQ is
 * cq_entries deep (IORING_SETUP_CQSIZE). *coop says what was accepted. */
static inline int rx_ring_init(struct io_uring *ring, unsigned entries,
			       unsigned cq_entries, bool *coop)
{
	static const unsigned tries[] = {
		IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
			IORING_SETUP_TASKRUN_FLAG,
		IORING_SETUP_SUBMIT_ALL,
		0,
	};
	struct io_uring_params p;
	int ret = -EINVAL;
	unsigned i;

	for (i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		memset(&p, 0, sizeof(p));
		p.flags = tries[i] | IORING_SETUP_CQSIZE;
		p.cq_entries = cq_entries;
		ret = io_uring_queue_init_params(entries, ring, &p);
		if (ret != -EINVAL)
			break;
	}
	*coop = ret == 0 && (tries[i] & IORING_SETUP_COOP_TASKRUN);
	return ret;
}

/* clone3 with CLONE_PIDFD: a fork (no shared memory) that also returns a
 * pidfd, atomically. Returns the pid in the parent, 0 in the child, -errno
 * (ENOSYS: the kernel predates 5.3). */
static inline pid_t rx_clone_pidfd(int *pidfd)
{
	struct clone_args args;
	long ret;

	memset(&args, 0, sizeof(args));
	args.flags = CLONE_PIDFD;
	args.pidfd = (unsigned long)pidfd;
	args.exit_signal = SIGCHLD;
	ret = syscall(SYS_clone3, &args, sizeof(args));
	return ret < 0 ? -errno : (pid_t)ret;
}

static inline int rx_pidfd_open(pid_t pid)
{
	long ret = syscall(SYS_pidfd_open, pid, 0);

	return ret < 0 ? -errno : (int)ret;
}

static inline int rx_pidfd_send_signal(int pidfd, int sig)
{
	long ret = syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);

	return ret < 0 ? -errno : 0;
}

/* A reaped process's wait status from its pidfd: PIDFD_GET_INFO with
 * PIDFD_INFO_EXIT (6.15+; the kernel fills it when the process is reaped,
 * by whichever parent). The struct is the uapi's first version (64 bytes);
 * the ioctl takes its size from the command. Returns 0 with *status, or
 * -errno (-ENOTTY, -EINVAL: an older kernel; -ESRCH: not reaped yet). */
struct rx_pidfd_info {
	uint64_t mask;
	uint64_t cgroupid;
	uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid;
	uint32_t fsuid, fsgid;
	int32_t exit_code;
};
#define RX_PIDFD_GET_INFO _IOWR(0xFF, 11, struct rx_pidfd_info)
#define RX_PIDFD_INFO_EXIT (1ull << 3)

static inline int rx_pidfd_exit_status(int pidfd, int *status)
{
	struct rx_pidfd_info info;

	memset(&info, 0, sizeof(info));
	info.mask = RX_PIDFD_INFO_EXIT;
	if (ioctl(pidfd, RX_PIDFD_GET_INFO, &info) < 0)
		return -errno;
	if (!(info.mask & RX_PIDFD_INFO_EXIT))
		return -ESRCH;
	*status = info.exit_code;
	return 0;
}

/* The direct-I/O alignment of fd: memory and file offset (STATX_DIOALIGN,
 * 6.1+); 512 for both where the kernel or file system does not say. */
static inline void rx_dio_align(int fd, unsigned *mem, unsigned *off)
{
	struct statx stx;

	*mem = 512;
	*off = 512;
	memset(&stx, 0, sizeof(stx));
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) < 0)
		return;
	if (!(stx.stx_mask & STATX_DIOALIGN) || !stx.stx_dio_offset_align)
		return;
	*mem = stx.stx_dio_mem_align ? stx.stx_dio_mem_align : 512;
	*off = stx.stx_dio_offset_align;
}

#endif
