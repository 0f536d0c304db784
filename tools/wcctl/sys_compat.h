/* SPDX-License-Identifier: MIT */
/*
 * wcctl's kernel interfaces that the C library's headers may lack (the
 * reactor's, pidfd_open among them, are in reactor/compat.h). The numbers
 * are the same on every architecture from Linux 5.3 on; a kernel without
 * the call answers ENOSYS, and the caller falls back.
 */
#ifndef WCCTL_SYS_COMPAT_H
#define WCCTL_SYS_COMPAT_H

#include <sys/syscall.h>

/* close_range(2), Linux 5.11; CLOSE_RANGE_CLOEXEC from linux/close_range.h */
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define WCCTL_CLOSE_RANGE_CLOEXEC (1u << 2)

#endif
