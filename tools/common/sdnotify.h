/* SPDX-License-Identifier: MIT */
/*
 * systemd's readiness protocol without libsystemd: a Type=notify service
 * sends "READY=1" as one datagram to the unix socket named by
 * $NOTIFY_SOCKET (a path, or an abstract name written with a leading '@').
 * wcd sends it once it serves (socket bound, ready file written); wcctl
 * start once every rank is ready. Outside systemd the variable is unset and
 * nothing is sent.
 */
#ifndef WC_SDNOTIFY_H
#define WC_SDNOTIFY_H

/* Takes $NOTIFY_SOCKET out of the environment (so that children, such as
 * the ranks wcctl starts, do not report for us) and keeps it for
 * sdnotify_send. Call once, before spawning anything. */
void sdnotify_init(void);

/* Sends one message ("READY=1\nSTATUS=..."), printf-style, at most 512
 * bytes. 0: sent or no socket; -errno: the socket is bad or refused it
 * (a caller logs it and carries on: readiness is a courtesy to the
 * manager, not a reason to stop serving). */
int sdnotify_send(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

#endif
