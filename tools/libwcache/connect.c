/* SPDX-License-Identifier: MIT */
/*
 * libwcache: connect by device or socket path (the runtime path rules of
 * proto/base/paths.h, the daemon's uid checked against the options) and close
 * (every model still attached is detached first). The top of the
 * connection: it calls attach.c (wc_detach) and conn.c (the frames).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "client.h"
#include "err.h"
#include "paths.h"
#include "wire.h"

/* Resolves the socket path from the options (contracts: runtime paths). */
static int socket_path(struct wc_conn *c, const struct wc_connect_opts *o,
		       struct wc_error *err)
{
	char e[BASE_ERR_LEN], name[PATHS_DEVICE_MAX + 1], tmpl[PATHS_MAX];
	struct paths *p;
	int ret;

	if (o->socket) {
		if (strlen(o->socket) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return wc__fail(err, ENAMETOOLONG, "socket path '%s' is longer than %zu bytes: use a shorter runtime directory",
					o->socket, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		wc__strlcpy(c->sock, o->socket, sizeof(c->sock));
		return 0;
	}
	if (!o->device || !*o->device)
		return wc__fail(err, EINVAL, "no device and no socket given: pass a device (\"host\", \"host:NAME\", a GPU index or UUID) or a socket path");
	p = malloc(sizeof(*p));
	if (!p)
		return wc__fail(err, ENOMEM, "out of memory for runtime paths");
	ret = paths_device_name(o->device, name, sizeof(name), e);
	if (ret == -ENOENT) {
		/* a CUDA index: only the driver knows its UUID; the device
		 * stays open for import */
		ret = wc__dev_open(c, o->device, e);
		if (!ret) {
			wc__strlcpy(name, c->dev.name, sizeof(name));
		}
	}
	if (!ret)
		ret = paths_template_env(tmpl, sizeof(tmpl), o->runtime_dir, e);
	if (!ret)
		ret = paths_resolve(p, tmpl, name, e);
	if (!ret)
		wc__strlcpy(c->sock, p->sock, sizeof(c->sock));
	free(p);
	if (ret)
		return wc__fail(err, -ret, "%s", e);
	return 0;
}

/* A daemon uid this engine trusts besides its own and root's: trust_uid,
 * $WCACHE_TRUST_UID (a number: a container has no passwd entry for the
 * daemon's user), or the system account named "wcache" that the shipped
 * units run wcd as (only root creates accounts, so it is as trusted as
 * root; tools/dist/systemd/wcache.sysusers). */
static bool daemon_uid_trusted(const struct wc_connect_opts *o, uid_t uid)
{
	struct passwd pw, *res = NULL;
	const char *env = getenv("WCACHE_TRUST_UID");
	char buf[1024], *end;
	unsigned long v;

	if (uid == getuid() || uid == geteuid() || uid == 0 ||
	    (o->trust_uid && uid == o->trust_uid))
		return true;
	if (env && *env >= '0' && *env <= '9') {
		errno = 0;
		v = strtoul(env, &end, 10);
		if (!errno && !*end && v == uid)
			return true;
	}
	return getpwnam_r(WC_DAEMON_USER, &pw, buf, sizeof(buf), &res) == 0 &&
	       res && res->pw_uid == uid;
}

/* connect() said EACCES: names what closed the socket to us (the first
 * directory on its path that we may not search, else the socket's own mode
 * and group) and the daemon's options that open it (issue 26: the sentence
 * named --allow-uid to an engine whose daemon had it already). */
static int eacces_fail(const char *sock, struct wc_error *err)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	unsigned uid = (unsigned)geteuid();
	struct stat st;
	char *s;

	snprintf(dir, sizeof(dir), "%s", sock);
	for (s = strchr(dir + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (faccessat(AT_FDCWD, dir, X_OK, AT_EACCESS) &&
		    errno == EACCES) {
			if (stat(dir, &st))
				st = (struct stat){ 0 };
			return wc__fail(err, EACCES,
					"permission denied connecting to %s: uid %u may not enter the directory %s (mode %04o, owner uid %u, group %u); start wcd with --socket-group GROUP and run the engine in that group, or with --allow-uid %u (wcd then opens its runtime directory to them), or use a --runtime-dir under directories every engine can enter",
					sock, uid, dir, (unsigned)(st.st_mode & 07777),
					(unsigned)st.st_uid, (unsigned)st.st_gid, uid);
		}
		*s = '/';
	}
	if (stat(sock, &st))
		st = (struct stat){ 0 };
	if (st.st_mode & 0060)
		return wc__fail(err, EACCES,
				"permission denied connecting to %s (mode %04o, owner uid %u, group %u): uid %u is not in the socket's group; run the engine in group %u (as docker's socket group; systemd: SupplementaryGroups=) or start wcd with --allow-uid %u",
				sock, (unsigned)(st.st_mode & 07777),
				(unsigned)st.st_uid, (unsigned)st.st_gid, uid,
				(unsigned)st.st_gid, uid);
	return wc__fail(err, EACCES,
			"permission denied connecting to %s (mode %04o, owner uid %u): the socket is its owner's alone; start wcd with --socket-group GROUP and run the engine in that group, or with --allow-uid %u",
			sock, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
			uid);
}

int wc_connect(const struct wc_connect_opts *o, struct wc_conn **out,
	       struct wc_error *err)
{
	struct ucred cr;
	struct wc_conn *c;
	uint64_t t0 = wc__now_ns();
	int ret;

	*out = NULL;
	if (!o)
		return wc__fail(err, EINVAL, "wc_connect: no options given");
	c = calloc(1, sizeof(*c));
	if (!c)
		return wc__fail(err, ENOMEM, "out of memory for a connection");
	c->fd = -1;
	c->pidfd = -1;
	c->next_id = 1;
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : WC_TIMEOUT_MS_DEFAULT;
	if (o->device)
		wc__strlcpy(c->device, o->device, sizeof(c->device));
	if (o->label)
		wc__strlcpy(c->label, o->label, sizeof(c->label));
	ret = socket_path(c, o, err);
	if (ret)
		goto out_free;
	ret = wc__sock_open(c, &c->fd, &cr);
	if (ret) {
		int e = -ret;

		if (e == ENOENT)
			ret = wc__fail(err, ENOENT, "no wcache daemon for %s: socket %s does not exist; start one (wcctl start, or wcd --model DIR --device %s)",
				       c->device[0] ? c->device : "this socket",
				       c->sock, c->device[0] ? c->device : "DEVICE");
		else if (e == ECONNREFUSED)
			ret = wc__fail(err, ECONNREFUSED, "no wcache daemon is listening on %s (a stale socket from a daemon that died): start one; the next wcd start cleans it up",
				       c->sock);
		else if (e == EACCES)
			ret = eacces_fail(c->sock, err);
		else
			ret = wc__fail(err, e, "connecting to %s failed: %s", c->sock, strerror(e));
		goto out_free;
	}
	if (!daemon_uid_trusted(o, cr.uid)) {
		ret = wc__fail(err, EACCES,
			       "the process serving %s (pid %d) runs as uid %u, neither ours (%u), root nor the '" WC_DAEMON_USER "' account: not trusted to serve weights; if it is the daemon you meant, trust it explicitly (WCACHE_TRUST_UID=%u, wc_connect_opts.trust_uid = %u, wcattach --trust-uid %u)",
			       c->sock, (int)cr.pid, (unsigned)cr.uid,
			       (unsigned)getuid(), (unsigned)cr.uid,
			       (unsigned)cr.uid, (unsigned)cr.uid);
		goto out_free;
	}
	c->pid = cr.pid;
	c->peer_uid = cr.uid;
	/* pid 0: the daemon lives in another pid namespace; no liveness fd. */
	if (cr.pid > 0)
		c->pidfd = wc__pidfd_open(cr.pid);
	c->connected_ns = wc__now_ns();
	c->times.connect_ns = c->connected_ns - t0 - c->times.device_ns;
	*out = c;
	wc__ok(err);
	return 0;
out_free:
	wc_close(c);
	return ret;
}

void wc_close(struct wc_conn *c)
{
	if (!c)
		return;
	while (c->models) {
		struct wc_model *m = c->models;

		wc_detach(m, NULL);
		WC_ASSERT(c->models != m);   /* wc_detach unlinks it */
	}
	if (c->dev_open)
		gpu_dev_close(&c->dev);
	if (c->fd >= 0)
		close(c->fd);
	if (c->pidfd >= 0)
		close(c->pidfd);
	free(c->rbuf);
	wire_put_free(&c->w);
	free(c);
}
