/* SPDX-License-Identifier: MIT */
#ifndef WCD_ACCESS_H
#define WCD_ACCESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "daemon/daemon.h"

/* access.c (its design at its top). access_resolve looks the socket group
 * up, adds it to the allowed gids and settles the socket's mode; the dir
 * and socket calls set the file permissions that mode needs; a peer is
 * allowed by its uid, primary gid or supplementary groups. */
int access_add_gid(struct wcd_opts *o, gid_t gid);
int access_resolve(struct wcd_opts *o, char *err);
int access_dir_open(const struct wcd *d, char *err);
int access_sock_publish(const struct wcd *d, char *err);
bool access_peer_allowed(const struct wcd *d, int fd, uid_t uid, gid_t gid);

#endif
