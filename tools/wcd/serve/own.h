/* SPDX-License-Identifier: MIT */
/* serve/own.c: ownership of the device's files (flock, --force, stale
 * files). */
#ifndef WCD_OWN_H
#define WCD_OWN_H

#include "daemon/daemon.h"

int own_acquire(struct wcd *d, char *err);
void own_release(struct wcd *d);
void own_remove_published(struct wcd *d);

#endif
