/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "paths.h"

#define DEVICE_TOKEN "{device}"

int paths_template(char *out, size_t len, const char *runtime_dir,
		   const char *env_template, const char *xdg, uid_t uid,
		   char *err)
{
	const char *tok;
	int n;

	if (runtime_dir && *runtime_dir) {
		n = snprintf(out, len, "%s/%s", runtime_dir, DEVICE_TOKEN);
	} else if (env_template && *env_template) {
		tok = strstr(env_template, DEVICE_TOKEN);
		if (!tok || strstr(tok + 1, DEVICE_TOKEN))
			return base_errf(err, EINVAL,
				       "%s='%s' must contain {device} exactly once (e.g. /run/wcache/{device})",
				       PATHS_TEMPLATE_ENV, env_template);
		n = snprintf(out, len, "%s", env_template);
	} else if (xdg && *xdg) {
		n = snprintf(out, len, "%s/wcache/%s", xdg, DEVICE_TOKEN);
	} else {
		n = snprintf(out, len, "/tmp/wcache-%u/%s", (unsigned)uid,
			     DEVICE_TOKEN);
	}
	if (n < 0 || (size_t)n >= len)
		return base_errf(err, ENAMETOOLONG,
			       "runtime path template is over %zu bytes; use a shorter --runtime-dir",
			       len - 1);
	return 0;
}

int paths_template_env(char *out, size_t len, const char *runtime_dir,
		       char *err)
{
	return paths_template(out, len, runtime_dir,
			      getenv(PATHS_TEMPLATE_ENV),
			      getenv("XDG_RUNTIME_DIR"), getuid(), err);
}

static bool name_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool paths_is_host_spec(const char *spec)
{
	return !strcmp(spec, "host") || !strncmp(spec, "host:", 5) ||
	       !strncmp(spec, "host-", 5);
}

int paths_device_name(const char *spec, char *out, size_t len, char *err)
{
	const char *name;
	size_t n;

	if (!strcmp(spec, "host")) {
		name = "";
	} else if (!strncmp(spec, "host:", 5) || !strncmp(spec, "host-", 5)) {
		/* host-NAME is the file name that host:NAME gets, as wcctl
		 * status and clean print it: accepted back (issue 16). */
		name = spec + 5;
		n = strlen(name);
		if (n == 0 || n > PATHS_HOST_NAME_MAX)
			return base_errf(err, EINVAL,
				       "device '%s': the name after host: must be 1 to %d characters",
				       spec, PATHS_HOST_NAME_MAX);
		for (size_t i = 0; i < n; i++)
			if (!name_char_ok(name[i]))
				return base_errf(err, EINVAL,
					       "device '%s': the name after host: may only use letters, digits, '_' and '-'",
					       spec);
	} else if (!strncmp(spec, "GPU-", 4)) {
		n = strlen(spec);
		if (n > PATHS_DEVICE_MAX || n < 5)
			return base_errf(err, EINVAL,
				       "device '%s' is not a GPU UUID (GPU-xxxxxxxx-..., as nvidia-smi -L prints)",
				       spec);
		for (size_t i = 4; i < n; i++)
			if (!name_char_ok(spec[i]))
				return base_errf(err, EINVAL,
					       "device '%s' is not a GPU UUID (GPU-xxxxxxxx-..., as nvidia-smi -L prints)",
					       spec);
		if (n >= len)
			return base_errf(err, ENAMETOOLONG, "device name too long");
		memcpy(out, spec, n + 1);
		return 0;
	} else {
		n = strspn(spec, "0123456789");
		if (n > 0 && n <= 4 && spec[n] == '\0')
			return base_errf(err, ENOENT,
				       "device '%s' is a CUDA ordinal: open it to learn its UUID",
				       spec);
		return base_errf(err, EINVAL,
			       "unknown device '%s': use host, host:NAME or host-NAME (as wcctl status prints it), a CUDA ordinal (0) or a GPU UUID (GPU-...)",
			       spec);
	}
	if ((size_t)snprintf(out, len, *name ? "host-%s" : "host", name) >= len)
		return base_errf(err, ENAMETOOLONG, "device name too long");
	return 0;
}

/* Sets out to a + b (+ c), or fails when it does not fit. */
static int join3(char *out, const char *a, const char *b, const char *c)
{
	int n = snprintf(out, PATHS_MAX, "%s%s%s", a, b, c);

	return n < 0 || n >= PATHS_MAX ? -ENAMETOOLONG : 0;
}

int paths_resolve(struct paths *p, const char *tmpl, const char *device,
		  char *err)
{
	const char *tok = strstr(tmpl, DEVICE_TOKEN);
	char head[PATHS_MAX];
	const char *slash;
	size_t hn;

	memset(p, 0, sizeof(*p));
	if (!tok || strstr(tok + 1, DEVICE_TOKEN))
		return base_errf(err, EINVAL,
			       "runtime path template '%s' must contain {device} exactly once",
			       tmpl);
	if (!*device || strlen(device) > PATHS_DEVICE_MAX ||
	    strchr(device, '/'))
		return base_errf(err, EINVAL,
			       "device name '%s' is not file-name safe", device);
	hn = (size_t)(tok - tmpl);
	if (hn >= sizeof(head))
		return base_errf(err, ENAMETOOLONG, "runtime path template too long");
	memcpy(head, tmpl, hn);
	head[hn] = '\0';
	snprintf(p->device, sizeof(p->device), "%s", device);
	if (join3(p->prefix, head, device, tok + strlen(DEVICE_TOKEN)) ||
	    join3(p->lock, p->prefix, ".lock", "") ||
	    join3(p->sock, p->prefix, ".sock", "") ||
	    join3(p->ready, p->prefix, ".ready", "") ||
	    join3(p->log, p->prefix, ".log", ""))
		return base_errf(err, ENAMETOOLONG,
			       "runtime paths under '%s' are too long", tmpl);
	if (strlen(p->sock) > PATHS_SUN_MAX)
		return base_errf(err, ENAMETOOLONG,
			       "socket path '%s' is %zu bytes, over the unix socket limit of %d: use a shorter --runtime-dir",
			       p->sock, strlen(p->sock), PATHS_SUN_MAX);
	slash = strrchr(p->prefix, '/');
	if (!slash)
		snprintf(p->dir, sizeof(p->dir), ".");
	else if (slash == p->prefix)
		snprintf(p->dir, sizeof(p->dir), "/");
	else
		snprintf(p->dir, sizeof(p->dir), "%.*s",
			 (int)(slash - p->prefix), p->prefix);
	return 0;
}

/* Names a uid for an error sentence: "root (uid 0)", "nobody (uid 65534)". */
static void uid_name(uid_t uid, char *out, size_t len)
{
	struct passwd pw, *res = NULL;
	char buf[1024];

	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res)
		snprintf(out, len, "%s (uid %u)", res->pw_name, (unsigned)uid);
	else
		snprintf(out, len, "uid %u", (unsigned)uid);
}

int paths_dir_check(const char *dir, char *err)
{
	char owner[128], me[128];
	struct stat st;
	uid_t uid = geteuid();

	if (lstat(dir, &st))
		return base_errf(err, errno, "cannot stat the runtime directory '%s': %s",
			       dir, strerror(errno));
	if (S_ISLNK(st.st_mode))
		return base_errf(err, ELOOP,
			       "runtime directory '%s' is a symbolic link, which is not followed (anyone who can replace it could redirect our files); remove it or pick another with --runtime-dir",
			       dir);
	if (!S_ISDIR(st.st_mode))
		return base_errf(err, ENOTDIR,
			       "runtime directory '%s' exists and is not a directory; remove it or pick another with --runtime-dir",
			       dir);
	if (st.st_uid != uid) {
		uid_name(st.st_uid, owner, sizeof(owner));
		uid_name(uid, me, sizeof(me));
		return base_errf(err, EPERM,
			       "runtime directory '%s' is owned by %s (mode %04o), not by %s who runs this: another user could plant links or sockets in it; remove it (rm -r '%s') or pick another with --runtime-dir",
			       dir, owner, (unsigned)(st.st_mode & 07777), me,
			       dir);
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return base_errf(err, EPERM,
			       "runtime directory '%s' (owner %u) has mode %04o: writable by %s, who could plant links or sockets in it; chmod 0700 '%s' or pick another with --runtime-dir",
			       dir, (unsigned)st.st_uid,
			       (unsigned)(st.st_mode & 07777),
			       st.st_mode & S_IWOTH ? "every user" : "its group",
			       dir);
	return 0;
}

int paths_mkdir(const char *dir, char *err)
{
	if (mkdir(dir, 0700) == 0)
		return 0;
	if (errno != EEXIST)
		return base_errf(err, errno,
			       "cannot create the runtime directory '%s': %s; create it or pick another with --runtime-dir",
			       dir, strerror(errno));
	return paths_dir_check(dir, err);
}
