/* SPDX-License-Identifier: MIT */
/*
 * Two things every layer uses: container_of (the struct around a member:
 * reactor callbacks get the op, the code wants its owner) and WC_ASSERT.
 *
 * WC_ASSERT(cond) checks an invariant: when cond is false it prints the
 * condition with file and line to stderr and aborts (SIGABRT), so a broken
 * invariant stops the process where it broke instead of corrupting state
 * further. It is compiled into every build this Makefile makes (plain,
 * -O0, sanitizer): each check is one compare on a path that is not hot.
 * Building with -DNDEBUG compiles every check out (the condition is not
 * evaluated: no side effects in it). Library code asserts only what its
 * own code guarantees, never what a caller or a peer sends (those are
 * errors with a message).
 */
#ifndef WC_BASE_H
#define WC_BASE_H

#include <stddef.h>

#define container_of(p, type, member) \
	((type *)(void *)((char *)(p) - offsetof(type, member)))

#ifdef NDEBUG
#define WC_ASSERT(cond) ((void)0)
#else
#define WC_ASSERT(cond) \
	((cond) ? (void)0 : wc__assert_fail(#cond, __FILE__, __LINE__, __func__))
#endif

void wc__assert_fail(const char *cond, const char *file, int line,
		     const char *func) __attribute__((noreturn));

#endif
