/* SPDX-License-Identifier: MIT */
/*
 * The daemon's state machine (wcd.h has the diagram): the names STATUS and
 * the ready file show, and the one table of allowed transitions.
 */
#include <stdbool.h>

#include "base.h"
#include "log.h"
#include "daemon/daemon.h"

static const char *const state_names[WCD_NSTATES] = {
	[WCD_STARTING] = "starting",
	[WCD_LOADING]  = "loading",
	[WCD_READY]    = "ready",
	[WCD_SLEEPING] = "sleeping",
	[WCD_WAKING]   = "waking",
	[WCD_UPDATING] = "updating",
	[WCD_STOPPING] = "stopping",
	[WCD_TAKING_OVER] = "taking-over",
};

#define TO(s) (1u << (s))

/* allowed[from]: the states it may move to. STOPPING is reachable from
 * every state; nothing leaves it (wcd_enter refuses quietly). */
static const unsigned allowed[WCD_NSTATES] = {
	[WCD_STARTING] = TO(WCD_LOADING) | TO(WCD_TAKING_OVER) |
			 TO(WCD_STOPPING),
	[WCD_TAKING_OVER] = TO(WCD_READY) | TO(WCD_LOADING) |
			    TO(WCD_STOPPING),
	[WCD_LOADING]  = TO(WCD_READY) | TO(WCD_STOPPING),
	[WCD_READY]    = TO(WCD_SLEEPING) | TO(WCD_UPDATING) | TO(WCD_STOPPING),
	[WCD_SLEEPING] = TO(WCD_WAKING) | TO(WCD_STOPPING),
	[WCD_WAKING]   = TO(WCD_READY) | TO(WCD_SLEEPING) | TO(WCD_STOPPING),
	[WCD_UPDATING] = TO(WCD_READY) | TO(WCD_STOPPING),
	[WCD_STOPPING] = TO(WCD_STOPPING),
};

const char *wcd_state_name(enum wcd_state s)
{
	return (unsigned)s < WCD_NSTATES ? state_names[s] : "unknown";
}

bool wcd_enter(struct wcd *d, enum wcd_state to)
{
	enum wcd_state from = d->state;

	WC_ASSERT((unsigned)to < WCD_NSTATES && (unsigned)from < WCD_NSTATES);
	if (from == WCD_STOPPING)
		return to == WCD_STOPPING;
	WC_ASSERT(allowed[from] & TO(to));
	if (from != to)
		log_debug("state %s -> %s", state_names[from],
			  state_names[to]);
	d->state = to;
	return true;
}
