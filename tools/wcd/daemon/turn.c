// SPDX-License-Identifier: MIT
/*
 * The one place wcd turns its loop. serve (main.c) runs it with
 * wcd_serve until the closing sequence is done; a lifecycle job or a load
 * waits for its own completions with wcd_turn_until. A job runs outside
 * every callback, because the reactor is not re-entrant (lifecycle.h), so
 * those waits nest under no callback: only serve's wcd_serve and the job
 * it runs between two of its turns are ever on the stack.
 */
#include <errno.h>

#include "daemon/daemon.h"

int wcd_serve(struct wcd *d)
{
	int ret;

	do
		ret = rx_run(&d->loop);
	while (ret == -EINTR);
	return ret < 0 ? ret : 0;
}

int wcd_turn_until(struct wcd *d, bool (*done)(void *arg), void *arg)
{
	int ret;

	while (!done(arg)) {
		ret = rx_run_once(&d->loop, -1);
		if (ret < 0 && ret != -EINTR)
			return ret;
	}
	return 0;
}
