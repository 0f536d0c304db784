/* SPDX-License-Identifier: MIT */
/*
 * wcd's handover/ folder (its API at the end of this header):
 *
 *   handover_old.c  the running daemon's side (HANDOVER requests)
 *   handover_new.c  the new daemon's side (wcd --takeover: handover_take)
 *   handover.c      what both share: the state, kill hook, lock owner,
 *                   pidfds, blocking frames with descriptors
 *
 * Hot handover (issue 17): a new wcd takes the device over from the running
 * one without a reload and without closing an engine's connection. The
 * conversation and its frames are in proto/wire/wire_handover.h; this header
 * is what its two sides share:
 *
 *   handover_old.c  the running daemon's side (HANDOVER requests)
 *   handover_new.c  the new daemon's side (wcd --takeover: handover_take)
 *   handover.c      what both use: the state, the tests' kill hook, the
 *                   lock's owner pid, pidfds, blocking frames with fds
 *
 * The old daemon (handover_request), on ASK from a client of its own uid:
 *   refuse (ERROR, nothing changed) when the versions do not meet, or the
 *   daemon sleeps, runs a job, stops, or has legacy IPC pools; else
 *   pause: stop accepting and let every client come to rest at a frame
 *   boundary (server_pause): a frame half received is read to its end and
 *   answered, then nothing more is received. Pending partial frames are
 *   thus drained, never carried: a client that stays in the middle of a
 *   frame (or does not read its replies) for HO_DRAIN_NS refuses the
 *   handover, naming its pid, and the daemon resumes. Then
 *   send the state (blocking sends on the new daemon's connection; the
 *   loop has nothing else to do while paused) and wait for COMMIT or
 *   ABORT (HO_COMMIT_NS at most; ABORT, the timeout or the connection's
 *   end: resume). On COMMIT answer DONE and touch no client any more; on
 *   SERVING _exit(0) at once: no unlink, no flock(LOCK_UN), no shutdown()
 *   of a shared socket, no unmapping (the kernel closes this process's
 *   copies); if ABORT comes or the connection ends before SERVING,
 *   resume, taking back what the new daemon may have taken meanwhile (the
 *   lock's pid, the ready file, the clients' daemon fd: ho_take_back).
 *   After DONE the clients are lent (d->srv->lent): their sockets are shared
 *   with the new daemon, so nothing here shuts one down, and a stop
 *   (SIGTERM, SHUTDOWN) is held (handover_stop_hold): on SERVING the
 *   daemon exits 0 as above (the stop is done: it is gone, the new one
 *   serves); on ABORT or the connection's end it takes back, then stops
 *   as it was asked.
 *   The wait for SERVING is bounded, stop or no stop: HO_SERVING_NS (10 s;
 *   WCD_HANDOVER_SERVING_MS for the tests) from DONE, where the new
 *   daemon's set-up takes milliseconds (the re-hash of --takeover-verify
 *   hash runs before COMMIT). A new daemon that has neither served nor
 *   ended by then (deadlocked, SIGSTOPped, stuck in a driver call) is
 *   killed through its pidfd after HO_SERVING_GRACE_NS more (a SERVING
 *   already received is read first), and its end is the ABORT case: take
 *   back, then serve on or stop as asked; one that does not end within
 *   HO_KILL_WAIT_NS of the SIGKILL (stuck in the kernel, it runs no code
 *   of its own any more) is not waited for. A kill refused: this daemon
 *   exits as after SERVING (the new one holds everything): one or none,
 *   never two (WCD_TEST_HO_KILL_SIG replaces SIGKILL for the tests).
 *
 * The new daemon (handover_take), before it owns anything:
 *   connect, ASK, receive everything (closing it all on any failure),
 *   check it against its own parse of each version's model directory
 *   (identity byte for byte, the plan's pools against the pools' sizes,
 *   the backend's checks of each fd: a memfd's size and seals; with
 *   --takeover-verify hash every tensor hashed again on the host backend),
 *   COMMIT, and once DONE arrives (or the connection ends and the old
 *   daemon's pidfd says it exited within HO_EXIT_WAIT_MS: it had handed
 *   everything over; no DONE within the frames' bound, HO_IO_TIMEOUT_S or
 *   WCD_HANDOVER_IO_MS: the old daemon hangs, this one takes nothing and
 *   exits 1, and the old one serves on if it wakes) set
 *   itself up to serve, all that can fail and nothing that receives
 *   (ho_setup): take the lock under its pid, the socket and the clients
 *   (a pidfd watch each), tell each client its new pid (a NOTICE:
 *   libwcache moves its daemon fd), write the ready file. A failure there
 *   sends ABORT and exits (the old daemon resumes and takes all that back;
 *   if the old daemon is gone, it serves all the same). Then send SERVING,
 *   and only then start receiving on the same listening socket and
 *   connections (ho_serve_start): engines keep their mappings and see no
 *   error; requests sent meanwhile wait in the sockets and are answered by
 *   the new daemon.
 *
 * Exactly one daemon serves at every step: the old one until it reads
 * SERVING, the new one after. Killed at any step (WCD_HANDOVER_KILL=old:K
 * or new:K stops that side with SIGKILL at step K, for the tests):
 *   new 1..5 (after ASK, BEGIN, the checks, COMMIT, DONE): the old one
 *            resumes (its connection ends); a new daemon that hangs
 *            after DONE instead is killed after HO_SERVING_NS: the same;
 *   (a death after DONE is decided by what the new daemon sent: its
 *   pidfd's event does not close its connection, which is read on to the
 *   end of file, SERVING included if it was sent: handover_read_to_end)
 *   new 6    (set up to serve, SERVING not sent; or the set-up failed: it
 *            sends ABORT and exits 1): the old one resumes and takes back
 *            the lock's pid, the ready file and each client's daemon fd
 *            (a HANDOVER notice with its own pid; ho_take_back);
 *   old 1,2  (after the pause, after BEGIN: not everything was sent): the
 *            new one closes what it got and loads from disk if it was
 *            given --model (-ECONNRESET to main), else exits;
 *   old 3..6 (everything sent; after COMMIT, DONE, SERVING): the new one
 *            serves what it got.
 * Not a death: a stop (SIGTERM, SHUTDOWN) of the old daemon before it
 * answered COMMIT wins; its SHUTDOWN notice reaches the new daemon on the
 * handover connection too, so the new one takes nothing over (the stop
 * shut the clients down, unlinked the socket, released the lock) and
 * exits 1 even when it finds the old pid gone.
 * Not a handover step: new 7 (SERVING sent, the receives not yet started)
 * is a crash of the daemon that serves: the old one has read SERVING and
 * exited, the new one holds the lock, the socket and the clients and the
 * ready file names it; none serves after it, as after any crash; the
 * engines' daemon fds report its death and their mappings stay valid.
 */
#ifndef WCD_HANDOVER_H
#define WCD_HANDOVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/daemon.h"
#include "wire.h"

#define HO_IO_TIMEOUT_S 30                  /* one blocking frame */
/* (new side: WCD_HANDOVER_IO_MS overrides it, for the tests) */
#define HO_FRAME_MAX (64u << 20)            /* a state frame we accept */

enum ho_state { HO_IDLE, HO_DRAINING, HO_SENT, HO_DONE };

struct wcd_ho {
	struct wcd *d;
	/* old side */
	enum ho_state st;
	struct wcd_client *peer;
	uint64_t id;                  /* the ASK's request id */
	pid_t peer_pid;
	uint16_t proto;
	struct rx_timer drain_timer, commit_timer, serving_timer;
	bool stop_held;               /* a stop came after DONE */
	enum { HO_OVERDUE_NO, HO_OVERDUE_GRACE, HO_OVERDUE_KILLED } overdue;
	struct rx_timer idle_timer;   /* new side: release the context */
	uint64_t t0, t_done;
	uint64_t drain_ns, serving_ns;
	/* new side: what d->o points into */
	char model[WCD_VERSIONS][WIRE_PATH_MAX + 1];
	char rules[WIRE_PATH_MAX + 1];
	char allow_quant[WIRE_LABEL_MAX + 1];
};

/* d->ho, made on first use; NULL when out of memory. */
struct wcd_ho *ho_get(struct wcd *d);
/* WCD_HANDOVER_KILL=side:k: SIGKILL this process at step k (the tests). */
void ho_step(const char *side, int k);
/* The lock's owner pid (/proc/locks, the lock file) made this process. */
int ho_claim_lock(struct wcd *d, char *err);
/* Whether the process of pidfd has exited, waiting up to wait_ms. */
bool ho_pidfd_exited(int pidfd, int wait_ms);

/* One frame received whole, with the descriptors that came with it. */
struct ho_frame {
	struct wire_hdr h;
	uint8_t *p;                   /* malloc'ed payload */
	int fds[WIRE_FDS_PER_FRAME];
	unsigned nfds;
};

/* Blocking frames on the handover connection (the sockets' timeouts
 * bound them): ho_send ends the frame begun in w and sends it with nfds
 * descriptors; ho_recv receives one (HO_FRAME_MAX at most; -ECONNRESET
 * when the peer closed); ho_frame_free closes the descriptors still in f
 * and frees its payload. */
int ho_send(int fd, struct wire_put *w, const int *fds, unsigned nfds,
	    char *err);
int ho_recv(int fd, struct ho_frame *f, char *err);
void ho_frame_free(struct ho_frame *f);

/* handover_old.c, handover_new.c (handover.c: handover_free) */
struct wcd_ho;
/* server_hooks.pause_poke: something a pause waits for may have changed. */
void handover_poke(struct wcd *d);
/* The running daemon's side: the HANDOVER request of client c. */
void handover_request(struct wcd_client *c, const uint8_t *p, uint32_t n);
/* server_hooks.client_gone: a handover c asked for ends (resume). */
void handover_client_gone(struct wcd *d, struct wcd_client *c);
/* server_hooks.stop_hold: SIGTERM or SHUTDOWN after DONE (d->srv->lent). */
void handover_stop_hold(struct wcd *d);
/* server_hooks.read_to_end: c is the new daemon after DONE (its SERVING
 * may still be in the socket when its pidfd fires). */
bool handover_read_to_end(struct wcd *d, struct wcd_client *c);
/* The new daemon's side (--takeover), before anything is loaded: 0 when it
 * serves the old daemon's pools and clients (the loop set up, the server
 * started, the ready file written); -ECONNRESET when the old daemon died
 * before it had handed everything over (nothing kept: the caller may load
 * from disk); another -errno (err says why) when it was refused or failed,
 * the old daemon serving on. */
int handover_take(struct wcd *d, const struct server_hooks *hooks, char *err);
void handover_free(struct wcd *d);

#endif
