/* SPDX-License-Identifier: MIT */
/*
 * A small fake wcd for the client tests, built from proto/wire: a forked
 * child that listens on a unix socket and serves memfd pools. The label of
 * the HELLO picks a scenario per connection ("plain", "badhash", "big",
 * "refuse", "garbage", "notice", "mute", "mutate:SEED" ...). Used by
 * client_fake.c and client_mutate.c; the code is in client_fakesrv.c
 * (libwctest).
 */
#ifndef WC_TEST_CLIENT_FAKESRV_H
#define WC_TEST_CLIENT_FAKESRV_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu.h"
#include "hash.h"
#include "identity.h"
#include "t.h"
#include "wcache.h"
#include "wire.h"

/* the tensors of the default scenario (NT of them), their bytes tbyte's */
#define NT 5
/* "big" and "bigbad": 96 MiB, enough for wc_verify to use its threads */
#define BIG (24ull << 20)

struct ft {
	const char *name;
	const char *dtype;
	uint32_t ndim;
	uint64_t shape[2];
	uint64_t bytes;
	uint32_t pool;
	uint64_t off;
};

extern const struct ft fake_tensors[NT];

/* Byte i of tensor t of the fake's pools. */
uint8_t fake_tbyte(unsigned t, uint64_t i);

/* The test's temporary directory and the fake's socket (the test fills
 * both in before fake_srv_start), and the fake's pid once started. */
extern char fake_dir[64];
extern char fake_sock[100];
extern pid_t fake_srv_pid;

/* Ends frame w and sends it on fd with nfds descriptors (SCM_RIGHTS);
 * 0 or -1. */
int fake_srv_send(int fd, struct wire_put *w, const int *fds, unsigned nfds);

/* Forks the fake daemon on fake_sock; returns once it listens. The child
 * binds and listens itself: SO_PEERCRED reports the process that called
 * listen(), and that must be the daemon. */
void fake_srv_start(void);

/* Kills the fake and removes fake_dir (an atexit handler). */
void fake_cleanup(void);

#endif
