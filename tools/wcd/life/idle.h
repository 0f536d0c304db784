/* SPDX-License-Identifier: MIT */
/*
 * life/idle.c: the device's idle while the daemon only serves. The CUDA
 * context is released (gpu.h idle) once a load, a job or a handover is
 * done, and made again by the next job that needs the device.
 */
#ifndef WCD_LIFE_IDLE_H
#define WCD_LIFE_IDLE_H

#include "daemon/daemon.h"

/* Releases the CUDA context while the daemon only serves (READY): the
 * pools live on through their exported fds (gpu.h idle) and the next job
 * maps them again. A no-op on the host backend, with --ipc legacy or
 * --keep-context, while a sleep arena is kept or the last wake's host
 * copy is being freed (both are registered in the context). */
void life_device_idle(struct wcd *d);

#endif
