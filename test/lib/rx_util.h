/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the reactor tests (test/rx_*.c): counting open fds and
 * running a loop until a condition holds, with a bound so a lost completion
 * fails the test instead of hanging it.
 */
#ifndef WC_TEST_RX_UTIL_H
#define WC_TEST_RX_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>

#include "t.h"
#include "wcreactor.h"

/* Open fds of this process (the /proc/self/fd listing, minus its own). */
int rx_test_fd_count(void);

bool rx_test_cloexec(int fd);

/* Runs loop until *flag is true; fails after limit_ms. */
#define RX_RUN_UNTIL(loop, cond, limit_ms)                                   \
	do {                                                                 \
		uint64_t _end = rx_now_ns() + (uint64_t)(limit_ms) * 1000000; \
		while (!(cond)) {                                            \
			int _r = rx_run_once((loop), 100);                   \
			if (_r < 0)                                          \
				T_FAIL("rx_run_once: %d", _r);               \
			if (rx_now_ns() > _end)                              \
				T_FAIL("timed out waiting for %s", #cond);   \
		}                                                            \
	} while (0)

#endif
