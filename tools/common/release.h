/* SPDX-License-Identifier: MIT */
/*
 * The release every tool reports (--version) and wcd exports as
 * wcache_build_info. One place: the Makefile and packaging read it here.
 */
#ifndef WC_RELEASE_H
#define WC_RELEASE_H

#define WCACHE_VERSION "0.16.0"

#endif
