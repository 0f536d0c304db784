/* SPDX-License-Identifier: MIT */
/*
 * Who may reach the daemon (issue 26, item 6): the file permissions that
 * let an engine of another user connect, and the check of every peer.
 *
 * Two gates, both always on:
 *   - the file system: the socket's mode and group, and the search (x) bit
 *     of the runtime directory for the same class of users. Nothing is ever
 *     made writable by others: the directory gets x bits only (never r or
 *     w for group or others), so nobody else can list it, plant a link or
 *     a socket in it, or remove ours; paths_dir_check keeps refusing a
 *     directory that another user could write.
 *   - the daemon: every connection's credentials (SO_PEERCRED for the uid
 *     and primary gid, SO_PEERGROUPS for the supplementary groups, both as
 *     they were at connect(), so a process cannot change them afterwards)
 *     against root, the daemon's own uid, --allow-uid and --allow-gid (which
 *     --socket-group adds to). A refused peer gets one error frame naming
 *     the option that would allow it, before a byte of it is read.
 *
 * The socket's mode follows from the options unless --socket-mode says:
 *   no --allow-*, no --socket-group   0600, directory 0700 (owner only)
 *   --socket-group G alone            0660 group G, directory g+x, group G
 *   --allow-uid U or an --allow-gid   0666, directory o+x
 *     other than the socket's group
 * The last one lets any local user connect; that is safe only because the
 * second gate refuses every uid not allowed (Redis's unixsocketperm and
 * docker's socket group rely on the first gate alone). Prefer a socket
 * group: users outside it cannot even connect.
 *
 * The directory's bits are only added, never taken away: one directory
 * serves every rank of a node, and a rank started with fewer options must
 * not close it to the engines of the others.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "serve/access.h"

static bool gid_allowed(const struct wcd_opts *o, gid_t gid)
{
	for (unsigned i = 0; i < o->nallow_gid; i++)
		if (o->allow_gid[i] == gid)
			return true;
	return false;
}

int access_add_gid(struct wcd_opts *o, gid_t gid)
{
	if (gid_allowed(o, gid))
		return 0;
	if (o->nallow_gid >= WCD_ALLOW_GID_MAX)
		return -E2BIG;
	o->allow_gid[o->nallow_gid++] = gid;
	return 0;
}

/* A group name or number as a gid: 0, or -ENOENT when no such group. A
 * group of many members needs more than a page for its entry: the buffer
 * doubles while getgrnam_r says ERANGE (1 MiB at most). */
static int group_gid(const char *name, gid_t *gid)
{
	struct group gr, *res = NULL;
	size_t len = 4096;
	char *buf, *end;
	unsigned long v;
	int ret;

	for (;;) {
		buf = malloc(len);
		if (!buf)
			return -ENOMEM;
		ret = getgrnam_r(name, &gr, buf, len, &res);
		if (ret != ERANGE || len >= (1u << 20))
			break;
		free(buf);
		len *= 2;
	}
	if (ret == 0 && res) {
		*gid = res->gr_gid;
		free(buf);
		return 0;
	}
	free(buf);
	errno = 0;
	v = strtoul(name, &end, 10);
	if (*name >= '0' && *name <= '9' && !*end && !errno &&
	    v < (gid_t)-1) {
		*gid = (gid_t)v;
		return 0;
	}
	return -ENOENT;
}

int access_resolve(struct wcd_opts *o, char *err)
{
	bool others;

	if (o->socket_group) {
		if (group_gid(o->socket_group, &o->socket_gid))
			return base_errf(err, ENOENT,
				       "--socket-group '%s': no such group (getent group %s finds none); create it (groupadd --system %s) or give a group id",
				       o->socket_group, o->socket_group,
				       o->socket_group);
		if (access_add_gid(o, o->socket_gid))
			return base_errf(err, E2BIG,
				       "--socket-group %s: already %d --allow-gid groups, the limit",
				       o->socket_group, WCD_ALLOW_GID_MAX);
	}
	if (o->socket_mode >= 0)
		return 0;
	others = o->nallow_uid > 0 ||
		 o->nallow_gid > (o->socket_group ? 1u : 0u);
	o->socket_mode = others ? 0666 : o->socket_group ? 0660 : 0600;
	return 0;
}

/* The directory's mode for a socket of mode m: x for the classes that may
 * open the socket, nothing else. */
static mode_t dir_bits(mode_t m)
{
	return (m & 0060 ? 0010 : 0) | (m & 0006 ? 0001 : 0);
}

int access_dir_open(const struct wcd *d, char *err)
{
	const struct wcd_opts *o = &d->o;
	mode_t want = dir_bits((mode_t)o->socket_mode);
	const char *dir = d->paths.dir;
	struct stat st;

	if (!want)
		return 0;
	if (lstat(dir, &st))
		return base_errf(err, errno, "cannot stat the runtime directory '%s': %s",
			       dir, strerror(errno));
	if ((want & 0010) && o->socket_group && st.st_gid != o->socket_gid &&
	    chown(dir, (uid_t)-1, o->socket_gid))
		return base_errf(err, errno,
			       "cannot give the runtime directory '%s' to group %s (gid %u): %s; run wcd as root or as a member of that group, or drop --socket-group",
			       dir, o->socket_group, (unsigned)o->socket_gid,
			       strerror(errno));
	if ((st.st_mode & want) != want &&
	    chmod(dir, (st.st_mode & 07777 & ~(mode_t)022) | want))
		return base_errf(err, errno,
			       "cannot let the engines of other users into the runtime directory '%s' (chmod %04o): %s; fix its permissions or pick another with --runtime-dir",
			       dir, (unsigned)((st.st_mode & 07755) | want),
			       strerror(errno));
	if ((st.st_mode & want) != want)
		log_info("runtime directory %s: mode %04o, so that the allowed engines %s can reach the socket",
			 dir, (unsigned)((st.st_mode & 07755) | want),
			 want & 0001 ? "of other users" : "of the socket's group");
	return 0;
}

int access_sock_publish(const struct wcd *d, char *err)
{
	const struct wcd_opts *o = &d->o;
	const char *sock = d->paths.sock;
	struct stat st;

	/* no chown when the socket is born in the group (the units' case:
	 * Group= is the socket group, and their filter refuses chown) */
	if (o->socket_group &&
	    (stat(sock, &st) || st.st_gid != o->socket_gid) &&
	    chown(sock, (uid_t)-1, o->socket_gid))
		return base_errf(err, errno,
			       "cannot give the socket %s to group %s (gid %u): %s; run wcd as root or as a member of that group",
			       sock, o->socket_group, (unsigned)o->socket_gid,
			       strerror(errno));
	if (chmod(sock, (mode_t)o->socket_mode))
		return base_errf(err, errno, "cannot chmod %04o the socket %s: %s",
			       (unsigned)o->socket_mode, sock, strerror(errno));
	return 0;
}

/* The peer's supplementary groups (SO_PEERGROUPS, Linux 4.13, as they
 * were at connect()) include one that is allowed. A peer in more than
 * ACCESS_PEER_GROUPS groups costs one allocation (at most NGROUPS_MAX,
 * 65536 gids: 256 KiB), once per connection. */
#define ACCESS_PEER_GROUPS 64
static bool peer_groups_allowed(const struct wcd_opts *o, int fd)
{
	gid_t small[ACCESS_PEER_GROUPS], *groups = small;
	socklen_t len = sizeof(small);
	bool ok = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
		if (errno != ERANGE || len > 65536 * sizeof(gid_t))
			return false;
		groups = malloc(len);
		if (!groups || getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS,
					  groups, &len)) {
			free(groups);
			return false;
		}
	}
	for (size_t i = 0; i < len / sizeof(gid_t) && !ok; i++)
		ok = gid_allowed(o, groups[i]);
	if (groups != small)
		free(groups);
	return ok;
}

bool access_peer_allowed(const struct wcd *d, int fd, uid_t uid, gid_t gid)
{
	const struct wcd_opts *o = &d->o;

	/* root could read our memory anyway: an engine run by root (a root
	 * service beside the units' wcache user) is served */
	if (uid == geteuid() || uid == 0)
		return true;
	for (unsigned i = 0; i < o->nallow_uid; i++)
		if (o->allow_uid[i] == uid)
			return true;
	if (!o->nallow_gid)
		return false;
	return gid_allowed(o, gid) || peer_groups_allowed(o, fd);
}
