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
 * evaluated: no side effects in it). test/wcd/wcd_state.c shows one firing. Library code asserts only what its
 * own code guarantees, never what a caller or a peer sends (those are
 * errors with a message).
 */
#ifndef WC_BASE_H
#define WC_BASE_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define container_of(p, type, member) \
	((type *)(void *)((char *)(p) - offsetof(type, member)))

#ifdef NDEBUG
#define WC_ASSERT(cond) ((void)0)
#else
#define WC_ASSERT(cond) \
	((cond) ? (void)0 : wc__assert_fail(#cond, __FILE__, __LINE__, __func__))
#endif

/* Header-only, so that libwcreactor.a needs no other library for it. */
__attribute__((noreturn, cold, unused))
static void wc__assert_fail(const char *cond, const char *file, int line,
			    const char *func)
{
	fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", file, line, func,
		cond);
	fflush(stderr);
	abort();
}

#endif
