/* SPDX-License-Identifier: MIT */
/*
 * Per-device runtime paths (prefix paths_), shared by wcd, wcctl and
 * libwcache so that all three agree on where a rank's files live.
 *
 * A template must contain "{device}" exactly once; it comes from, in order:
 *   --runtime-dir DIR             ->  DIR/{device}
 *   $WCACHE_SOCKET_TEMPLATE       ->  as given (e.g. /run/wcache/{device})
 *   $XDG_RUNTIME_DIR              ->  $XDG_RUNTIME_DIR/wcache/{device}
 *   otherwise                     ->  /tmp/wcache-$UID/{device}
 * The prefix is the template with {device} replaced by the device's
 * file-name-safe name; the files are <prefix>.lock, .sock, .ready, .log.
 *
 * Device names: "host" or "host:NAME" (NAME: [A-Za-z0-9_-], 1..32 chars)
 * select the host backend and are named "host" / "host-NAME"; a "GPU-..."
 * UUID names itself; a CUDA ordinal ("0") must be opened to learn its UUID.
 *
 * Pure string code except paths_template_env (getenv) and paths_mkdir.
 */
#ifndef WC_PATHS_H
#define WC_PATHS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define PATHS_MAX 4096
#define PATHS_SUN_MAX 107          /* sun_path bytes without the NUL */
#define PATHS_DEVICE_MAX 63        /* device name bytes */
#define PATHS_HOST_NAME_MAX 32     /* NAME in host:NAME */
#define PATHS_TEMPLATE_ENV "WCACHE_SOCKET_TEMPLATE"

struct paths {
	char device[PATHS_DEVICE_MAX + 1];
	char dir[PATHS_MAX];       /* directory holding the files */
	char prefix[PATHS_MAX];
	char lock[PATHS_MAX];
	char sock[PATHS_MAX];      /* <= PATHS_SUN_MAX bytes, checked */
	char ready[PATHS_MAX];
	char log[PATHS_MAX];
};

/* Builds the template from the sources above (any may be NULL/empty):
 * runtime_dir wins, then env_template, then xdg, then /tmp/wcache-UID. */
int paths_template(char *out, size_t len, const char *runtime_dir,
		   const char *env_template, const char *xdg, uid_t uid,
		   char *err);
/* The same, with env_template and xdg read from the environment. */
int paths_template_env(char *out, size_t len, const char *runtime_dir,
		       char *err);

/* Fills p for device name `device` (already file-name safe) under tmpl. */
int paths_resolve(struct paths *p, const char *tmpl, const char *device,
		  char *err);

/* true for "host", "host:NAME" and "host-NAME" (the file name of host:NAME,
 * as status prints it) specs. */
bool paths_is_host_spec(const char *spec);
/* Device spec -> file-name-safe name: host specs and GPU-UUIDs map
 * directly (0); a CUDA ordinal returns -ENOENT (open the device to learn
 * its UUID); anything else -EINVAL with a sentence. */
int paths_device_name(const char *spec, char *out, size_t len, char *err);

/* Creates dir (mode 0700, the parent must exist) or accepts an existing
 * one only if paths_dir_check passes. Not pure: mkdir/lstat. */
int paths_mkdir(const char *dir, char *err);
/* An existing runtime directory is safe to put files in when it is a real
 * directory (lstat: a symbolic link is refused, never followed), owned by
 * the effective uid and writable by neither group nor others: nobody else
 * can then plant a link, a socket or a file under our names. Otherwise
 * -ELOOP, -ENOTDIR or -EPERM with a sentence naming owner, mode and fix. */
int paths_dir_check(const char *dir, char *err);

#endif
